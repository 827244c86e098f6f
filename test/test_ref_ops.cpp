// test_ref_ops.cpp: every op of the fp32 CPU reference (ref/ops.h, ref/gemm.h) against central finite
// differences (test/grad_check.h states the tolerance), plus the properties each op promises: strided rows,
// assigned versus accumulated gradients, causality, masked targets, the leading slice of the residual stream.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "ref/gemm.h"
#include "ref/ops.h"
#include "test/grad_check.h"

TEST_CASE("matmul gradients match finite differences, dx assigned and dW accumulated", "[reference]") {
    const int N = 5, in = 7, out = 9, ldx = 10, ldy = 11;  // strided rows, as the model uses them
    std::vector<double> x = randn(N * ldx, 1), W = randn(out * in, 2), r = randn(N * ldy, 3);
    auto f = [&] {
        std::vector<double> y(N * ldy, 0.0);
        ref::matmul_forward(y.data(), ldy, x.data(), ldx, W.data(), N, in, out);
        double s = 0;
        for (int n = 0; n < N; n++)
            for (int o = 0; o < out; o++) s += r[n * ldy + o] * y[n * ldy + o];
        return s;
    };
    std::vector<double> dx(N * ldx, 123.0), dW0 = randn(out * in, 4), dW = dW0;  // garbage / prior grads
    ref::matmul_backward(dx.data(), ldx, dW.data(), r.data(), ldy, x.data(), ldx, W.data(), N, in, out);
    for (int i = 0; i < out * in; i++) dW[i] -= dW0[i];
    check_all("dW", W, dW, f);
    // only dx's leading `in` columns are defined; padding columns keep their value
    std::vector<double> xs, dxs;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < ldx; c++) {
            if (c < in) continue;
            CHECK(dx[n * ldx + c] == 123.0);
            dx[n * ldx + c] = 0;  // x's padding does not influence f: derivative 0
        }
    check_all("dx", x, dx, f);
}

TEST_CASE("blocked matmul matches a naive triple loop across block edges", "[reference]") {
    // N = 530 tokens crosses two KC = 256 blocks in dW, out = 300 crosses NC = 256 and the K blocks of dx.
    const int N = 530, in = 37, out = 300, ldx = 40;
    std::vector<double> x = randn(N * ldx, 5), W = randn(out * in, 6), dy = randn(N * out, 7);
    std::vector<float> xf(x.begin(), x.end()), Wf(W.begin(), W.end()), dyf(dy.begin(), dy.end());
    std::vector<double> y(N * out), dx(N * in), dW(out * in, 0.0);
    std::vector<float> yf(N * out), dxf(N * in), dWf(out * in, 0.0f);
    ref::matmul_forward(y.data(), out, x.data(), ldx, W.data(), N, in, out);
    ref::matmul_backward(dx.data(), in, dW.data(), dy.data(), out, x.data(), ldx, W.data(), N, in, out);
    ref::matmul_forward(yf.data(), out, xf.data(), ldx, Wf.data(), N, in, out);
    ref::matmul_backward(dxf.data(), in, dWf.data(), dyf.data(), out, xf.data(), ldx, Wf.data(), N, in, out);
    // Each entry is a K-term sum. Rounding bound (Higham): |computed - exact| <= K u sum_k |a_k b_k| with u the
    // unit roundoff (1.1e-16 double, 6e-8 float); any reordering stays within it, an indexing bug does not.
    auto check = [](const char* what, double got, double got_f, double naive, double abs_sum, int K) {
        INFO(what << " got " << got << " float " << got_f << " naive " << naive);
        CHECK(std::fabs(got - naive) <= K * 1.2e-16 * abs_sum);
        CHECK(std::fabs(got_f - naive) <= K * 6e-8 * abs_sum + 1e-6 * abs_sum);  // + float rounding of inputs
    };
    // The naive dot product sum_k p[k sp] q[k sq] in order of k, and the sum of its terms' magnitudes.
    auto naive = [](const double* p, long sp, const double* q, long sq, int K, double& abs_sum) {
        double s = 0;
        abs_sum = 0;
        for (int k = 0; k < K; k++) s += p[k * sp] * q[k * sq], abs_sum += std::fabs(p[k * sp] * q[k * sq]);
        return s;
    };
    double a = 0;
    for (int n = 0; n < N; n += 7)
        for (int o = 0; o < out; o += 5) {
            const double s = naive(&x[n * ldx], 1, &W[o * in], 1, in, a);
            check("y", y[n * out + o], yf[n * out + o], s, a, in);
        }
    for (int n = 0; n < N; n += 7)
        for (int c = 0; c < in; c++) {
            const double s = naive(&dy[n * out], 1, &W[c], in, out, a);
            check("dx", dx[n * in + c], dxf[n * in + c], s, a, out);
        }
    for (int o = 0; o < out; o += 3)
        for (int c = 0; c < in; c++) {
            const double s = naive(&dy[o], out, &x[c], ldx, N, a);
            check("dW", dW[o * in + c], dWf[o * in + c], s, a, N);
        }
}

TEST_CASE("layernorm and rmsnorm on a leading slice of a wider row match finite differences", "[reference]") {
    const int N = 4, D = 10, w = 6;  // the layer reads [0, w) of a stream row of width D
    for (NormType type : {NormType::LayerNorm, NormType::RMSNorm}) {
        INFO(norm_name(type));
        std::vector<double> x = randn(N * D, 10), g = randn(w, 11, 0.5), b = randn(w, 12), r = randn(N * w, 13);
        for (auto& v : g) v += 1.0;
        std::vector<double> out(N * w), mean(N), rstd(N);
        auto f = [&] {
            ref::norm_forward(type, out.data(), mean.data(), rstd.data(), x.data(), D, g.data(), b.data(), N, w, 1e-5);
            return dot(out, r);
        };
        // the forward never reads beyond w
        const double f0 = f();
        std::vector<double> xw = x;
        for (int n = 0; n < N; n++)
            for (int c = w; c < D; c++) x[n * D + c] = 1e9;
        CHECK(f() == f0);
        x = xw;
        f();
        std::vector<double> dx0 = randn(N * D, 14), dx = dx0, dg(w, 0.5), db(w, -0.25);  // += onto prior values
        ref::norm_backward(type, dx.data(), D, dg.data(), db.data(), r.data(), x.data(), D, mean.data(), rstd.data(),
                           g.data(), N, w);
        for (int i = 0; i < N * D; i++) dx[i] -= dx0[i];
        for (auto& v : dg) v -= 0.5;
        for (auto& v : db) v -= -0.25;
        for (int n = 0; n < N; n++)
            for (int c = w; c < D; c++) CHECK(dx[n * D + c] == 0.0);  // bypassing coordinates untouched
        check_all("dx", x, dx, f);
        check_all("dg", g, dg, f);
        if (type == NormType::LayerNorm) check_all("db", b, db, f);
        else
            for (double v : db) CHECK(v == 0.0);  // RMSNorm has no bias
    }
}

TEST_CASE("rope rotates interleaved pairs by pos * theta^(-2i/hd) and its backward matches finite differences",
          "[reference]") {
    const int B = 2, T = 5;
    const double theta = 10000.0;
    for (auto wh : {std::pair<int, int>{12, 3}, {12, 6}, {8, 1}}) {  // head_dim 4, 2, 8
        const int w = wh.first, h = wh.second, hd = w / h;
        INFO("w " << w << " h " << h);
        std::vector<double> qkv = randn(B * T * 3 * w, 20), r = randn(B * T * 3 * w, 21);
        std::vector<double> y = qkv;
        ref::rope_forward(y.data(), B, T, w, h, theta);
        // by hand: batch 1, t = 3, head h-1, pair i = hd/2 - 1, in k
        const int b = 1, t = 3, hh = h - 1, i = hd / 2 - 1;
        const size_t base = (size_t)(b * T + t) * 3 * w + w + hh * hd + 2 * i;
        const double ang = t * std::pow(theta, -2.0 * i / hd), a = qkv[base], c = qkv[base + 1];
        CHECK(y[base] == Approx(a * std::cos(ang) - c * std::sin(ang)).epsilon(1e-14));
        CHECK(y[base + 1] == Approx(a * std::sin(ang) + c * std::cos(ang)).epsilon(1e-14));
        for (int n = 0; n < B * T; n++)
            for (int col = 0; col < 3 * w; col++) {
                const size_t k = (size_t)n * 3 * w + col;
                if (col >= 2 * w || n % T == 0) CHECK(y[k] == qkv[k]);  // v untouched; position 0 unrotated
            }
        auto f = [&] {
            std::vector<double> z = qkv;
            ref::rope_forward(z.data(), B, T, w, h, theta);
            return dot(z, r);
        };
        std::vector<double> g = r;
        ref::rope_backward(g.data(), B, T, w, h, theta);
        check_all("dqkv", qkv, g, f);
    }
}

TEST_CASE("causal attention gradients match finite differences for several head counts and head dims", "[reference]") {
    const int B = 2, T = 4;
    for (auto wh : {std::pair<int, int>{8, 1}, {8, 4}, {12, 3}, {6, 3}}) {  // head_dim 8 (single head), 2, 4, 2
        for (bool mup : {false, true}) {
            const int w = wh.first, h = wh.second, hd = w / h;
            const double scale = mup ? 1.0 / hd : 1.0 / std::sqrt((double)hd);
            INFO("w " << w << " h " << h << " mup " << mup);
            std::vector<double> qkv = randn(B * T * 3 * w, 30), r = randn(B * T * w, 31);
            std::vector<double> out(B * T * w), att(B * h * T * T);
            auto f = [&] {
                ref::attention_forward(out.data(), att.data(), qkv.data(), B, T, w, h, scale);
                return dot(out, r);
            };
            f();
            for (int row = 0; row < B * h * T; row++) {  // probabilities: causal rows summing to 1
                const int t = row % T;
                double s = 0;
                for (int j = 0; j < T; j++) {
                    s += att[row * T + j];
                    if (j > t) CHECK(att[row * T + j] == 0.0);
                }
                CHECK(s == Approx(1.0).epsilon(1e-14));
            }
            std::vector<double> dqkv(B * T * 3 * w, 77.0);  // assigned: garbage must be overwritten
            ref::attention_backward(dqkv.data(), r.data(), qkv.data(), att.data(), B, T, w, h, scale);
            check_all("dqkv", qkv, dqkv, f);
        }
    }
}

TEST_CASE("attention is causal: a later key or value never changes an earlier output", "[reference]") {
    const int B = 1, T = 6, w = 8, h = 2;
    std::vector<double> qkv = randn(T * 3 * w, 32), out(T * w), out2(T * w), att(h * T * T);
    ref::attention_forward(out.data(), att.data(), qkv.data(), B, T, w, h, 0.5);
    for (int c = w; c < 3 * w; c++) qkv[5 * 3 * w + c] += 1.0;  // perturb k and v of the last position
    ref::attention_forward(out2.data(), att.data(), qkv.data(), B, T, w, h, 0.5);
    for (int i = 0; i < 5 * w; i++) CHECK(out2[i] == out[i]);
    CHECK(out2[5 * w] != out[5 * w]);
}

TEST_CASE("swiglu gradients match finite differences", "[reference]") {
    const int N = 3, hid = 5;
    std::vector<double> in = randn(N * 2 * hid, 40, 2.0), r = randn(N * hid, 41), out(N * hid);
    auto f = [&] {
        ref::swiglu_forward(out.data(), in.data(), N, hid);
        return dot(out, r);
    };
    f();
    const double g = in[2 * 2 * hid + 1], u = in[2 * 2 * hid + hid + 1];
    CHECK(out[2 * hid + 1] == Approx(g / (1 + std::exp(-g)) * u).epsilon(1e-14));
    std::vector<double> din(N * 2 * hid, 55.0);
    ref::swiglu_backward(din.data(), r.data(), in.data(), N, hid);
    check_all("din", in, din, f);
}

TEST_CASE("cross-entropy gradients with masked targets match finite differences", "[reference]") {
    const int N = 5, V = 7;
    const int targets[N] = {3, -1, 0, 6, -1};
    std::vector<double> logits = randn(N * V, 50, 2.0), probs(N * V), lse(N), losses(N);
    auto f = [&] {
        ref::softmax_crossentropy_forward(probs.data(), lse.data(), losses.data(), logits.data(), targets, N, V);
        return (double)ref::mean_loss(losses.data(), targets, N);
    };
    const double loss = f();
    double by_hand = 0;
    for (int n : {0, 2, 3}) {
        double s = 0;
        for (int v = 0; v < V; v++) s += std::exp(logits[n * V + v]);
        by_hand += std::log(s) - logits[n * V + targets[n]];
    }
    CHECK(loss == Approx(by_hand / 3).epsilon(1e-14));
    CHECK(losses[1] == 0.0);
    std::vector<double> dl(N * V);
    ref::softmax_crossentropy_backward(dl.data(), probs.data(), targets, N, V, 1.0 / 3);
    for (int v = 0; v < V; v++) CHECK(dl[1 * V + v] == 0.0);  // masked row
    check_all("dlogits", logits, dl, f);
    const int none[2] = {-1, -1};
    CHECK(ref::softmax_crossentropy_forward(probs.data(), lse.data(), losses.data(), logits.data(), none, 2, V) == 0);
    CHECK(ref::mean_loss(losses.data(), none, 2) == 0.0);
}

TEST_CASE("vectorised float exp of the softmax matches std::exp", "[reference]") {
    // float softmax rows use ref::exp_nonpositive; its documented bound is 3e-7 relative (about 2.5 float ulps)
    std::vector<float> x, e(1);
    for (double v = -90.0; v <= 0.0; v += 0.00731) x.push_back((float)v);
    x.push_back(0.0f);
    x.push_back(-1e-8f);
    double worst = 0;
    for (float v : x) {
        ref::exp_shifted_sum(e.data(), &v, 1, 0.0f);
        const double want = std::exp((double)v);
        if (v < -87.0f) CHECK(e[0] == 0.0f);
        else worst = std::max(worst, std::fabs(e[0] - want) / want);
    }
    CHECK(worst < 3e-7);
    // a non-finite row (the guard then skips the step): NaN stays NaN, -inf gives 0, with no undefined
    // float-to-int conversion on the way (UBSan in test-asan-model caught one)
    for (float v : {std::nanf(""), -INFINITY}) {
        const double s = ref::exp_shifted_sum(e.data(), &v, 1, 0.0f);
        CHECK((std::isnan(v) ? std::isnan(s) && std::isnan(e[0]) : s == 0.0 && e[0] == 0.0f));
    }
    // a whole row: the lse of a float row agrees with double to float precision
    const int V = 1003;
    std::vector<double> ld = randn(V, 51, 3.0), pd(V), lsed(1), lossd(1);
    std::vector<float> lf(ld.begin(), ld.end()), pf(V), lsef(1), lossf(1);
    const int tgt = 17;
    ref::softmax_crossentropy_forward(pd.data(), lsed.data(), lossd.data(), ld.data(), &tgt, 1, V);
    ref::softmax_crossentropy_forward(pf.data(), lsef.data(), lossf.data(), lf.data(), &tgt, 1, V);
    CHECK(lsef[0] == Approx(lsed[0]).epsilon(1e-6));  // float inputs rounded at 6e-8, exp at 3e-7
    for (int v = 0; v < V; v += 97) CHECK(pf[v] == Approx(pd[v]).epsilon(2e-6).margin(1e-12));
}

TEST_CASE("embedding writes [0, d), zeros [d, D), and its gradient matches finite differences", "[reference]") {
    const int N = 6, V = 5, d = 3, D = 5;
    const int tokens[N] = {4, 1, 4, 0, 4, 2};  // repeats: their gradients add
    std::vector<double> wte = randn(V * d, 60), r = randn(N * D, 61), x(N * D, 9.0);
    auto f = [&] {
        ref::embedding_forward(x.data(), tokens, wte.data(), N, d, D);
        return dot(x, r);
    };
    f();
    for (int n = 0; n < N; n++)
        for (int c = 0; c < D; c++) CHECK(x[n * D + c] == (c < d ? wte[tokens[n] * d + c] : 0.0));
    std::vector<double> dwte(V * d, 0.0);
    ref::embedding_backward(dwte.data(), r.data(), D, tokens, N, d);
    check_all("dwte", wte, dwte, f);  // token 3 never appears: its rows must stay 0 (grad_close checks that)
    for (int c = 0; c < d; c++) CHECK(dwte[3 * d + c] == 0.0);
}

TEST_CASE("residual add touches only the leading slice and passes the gradient through", "[reference]") {
    const int N = 3, D = 7, w = 4;
    std::vector<double> x = randn(N * D, 70), x0 = x, y = randn(N * w, 71), dy(N * w);
    ref::residual_forward(x.data(), D, y.data(), N, w);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < D; c++) CHECK(x[n * D + c] == (c < w ? x0[n * D + c] + y[n * w + c] : x0[n * D + c]));
    ref::residual_backward(dy.data(), x.data(), D, N, w);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < w; c++) CHECK(dy[n * w + c] == x[n * D + c]);
}
