// test_gdn.cpp: the Gated DeltaNet mixer of the CPU reference (ref/gdn.h): each op's forward against its definition
// written out here, each op's and the whole mixer's gradients against central finite differences in double
// (test/grad_check.h states the tolerance), the chunked delta rule against the recurrent one (forward and
// backward, float and double, T below, at and past the chunk), the decoder's rows against the forward's bits, and
// the same bits for 1 and 2 threads; docs/model.md's section on the layer states ref/gdn.h's constants.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "ref/gdn.h"
#include "test/grad_check.h"
#include "test/test_util.h"

namespace {

std::vector<double> uniform(size_t n, uint64_t seed, double lo, double hi) {
    ref::Rng r(seed);
    std::vector<double> v(n);
    for (auto& x : v) x = lo + (hi - lo) * r.uniform();
    return v;
}
template <typename S> std::vector<S> as(const std::vector<double>& v) { return std::vector<S>(v.begin(), v.end()); }

// Delta-rule inputs as the layer makes them: q and k unit per head, beta in (0, 1), g < 0.
struct DeltaInputs {
    long B, T;
    ref::GdnShape sh;
    std::vector<double> q, k, v, beta, g;  // q, k, v (N, w)
    DeltaInputs(long B_, long T_, int h, int hd, uint64_t seed) : B(B_), T(T_), sh{h, hd} {
        const long N = B * T, w = sh.w();
        q = randn(N * w, seed), k = randn(N * w, seed + 1), v = randn(N * w, seed + 2);
        for (auto* x : {&q, &k})
            for (long r = 0; r < N * h; r++) {
                double* p = x->data() + r * hd;
                double s = 0;
                for (int c = 0; c < hd; c++) s += p[c] * p[c];
                for (int c = 0; c < hd; c++) p[c] /= std::sqrt(s);
            }
        beta = uniform(N * h, seed + 3, 0.05, 0.95);
        g = uniform(N * h, seed + 4, -0.4, -0.001);
    }
};

// The delta rule's outputs and input gradients, by either form, in S.
template <typename S> struct DeltaRun { std::vector<S> o, dq, dk, dv, dbeta, dg; };
template <typename S> DeltaRun<S> run_delta(const DeltaInputs& in, const std::vector<double>& dout_d, bool chunked) {
    const long N = in.B * in.T, w = in.sh.w(), h = in.sh.h;
    std::vector<S> q = as<S>(in.q), k = as<S>(in.k), v = as<S>(in.v), beta = as<S>(in.beta), g = as<S>(in.g),
                   dout = as<S>(dout_d);
    DeltaRun<S> r;
    r.o.assign(N * w, S(7)), r.dq.assign(N * w, S(7)), r.dk.assign(N * w, S(7)), r.dv.assign(N * w, S(7));
    r.dbeta.assign(N * h, S(7)), r.dg.assign(N * h, S(7));  // garbage: every output is assigned
    if (chunked) {
        std::vector<S> states(in.B * h * ref::gdn_chunks(in.T) * in.sh.hd * in.sh.hd);
        ref::gdn_delta_chunk_forward(r.o.data(), w, states.data(), q.data(), k.data(), v.data(), w, beta.data(),
                                     g.data(), in.B, in.T, in.sh);
        ref::gdn_delta_chunk_backward(r.dq.data(), r.dk.data(), r.dv.data(), w, r.dbeta.data(), r.dg.data(),
                                      dout.data(), w, states.data(), q.data(), k.data(), v.data(), w, beta.data(),
                                      g.data(), in.B, in.T, in.sh);
    } else {
        ref::gdn_delta_recurrent_forward(r.o.data(), w, q.data(), k.data(), v.data(), w, beta.data(), g.data(), in.B,
                                         in.T, in.sh);
        ref::gdn_delta_recurrent_backward(r.dq.data(), r.dk.data(), r.dv.data(), w, r.dbeta.data(), r.dg.data(),
                                          dout.data(), w, q.data(), k.data(), v.data(), w, beta.data(), g.data(), in.B,
                                          in.T, in.sh);
    }
    return r;
}

// max |a - b| / max |b|: the error relative to the quantity's scale
template <typename A, typename B> double rel_err(const std::vector<A>& a, const std::vector<B>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); i++)
        num = std::max(num, std::fabs((double)a[i] - (double)b[i])), den = std::max(den, std::fabs((double)b[i]));
    return num / den;
}

// A gdn mixer's weights at the layer's init scales (w = h hd): normal matrices, conv in [-1/2, 1/2], A in (1, 16),
// dt_bias from dt in [0.001, 0.1] (docs/model.md's init), onorm_w near 1.
struct Mixer {
    ref::GdnShape sh;
    std::vector<double> wqkv, conv_w, wz, wba, a_log, dt_bias, onorm_w;
    Mixer(int h, int hd, uint64_t seed) : sh{h, hd} {
        const int w = sh.w();
        const double sd = 1.0 / std::sqrt((double)w);
        wqkv = randn(3 * w * w, seed, sd), conv_w = uniform(3 * w * 4, seed + 1, -0.5, 0.5);
        wz = randn(w * w, seed + 2, sd), wba = randn(2 * h * w, seed + 3, sd);
        a_log = uniform(h, seed + 4, 0, std::log(16.0)), dt_bias = uniform(h, seed + 5, 0.001, 0.1);
        for (auto& dt : dt_bias) dt = dt + std::log(-std::expm1(-dt));
        onorm_w = uniform(hd, seed + 6, 0.5, 1.5);
    }
    std::vector<std::vector<double>*> all() { return {&wqkv, &conv_w, &wz, &wba, &a_log, &dt_bias, &onorm_w}; }
};
template <typename S> struct MixerS {
    std::vector<S> wqkv, conv_w, wz, wba, a_log, dt_bias, onorm_w;
    explicit MixerS(Mixer& m)
        : wqkv(as<S>(m.wqkv)), conv_w(as<S>(m.conv_w)), wz(as<S>(m.wz)), wba(as<S>(m.wba)), a_log(as<S>(m.a_log)),
          dt_bias(as<S>(m.dt_bias)), onorm_w(as<S>(m.onorm_w)) {}
    ref::GdnWeights<S> weights() const {
        return {wqkv.data(), conv_w.data(), wz.data(), wba.data(), a_log.data(), dt_bias.data(), onorm_w.data()};
    }
};

const double kEps = 1e-5;  // the model's norm_eps in these tests

}  // namespace

TEST_CASE("gdn conv: causal depthwise taps t-3..t per channel, then SiLU; gradients match finite differences",
          "[gdn]") {
    const long B = 2, T = 6;
    const int C = 5;
    std::vector<double> p = randn(B * T * C, 1), w = uniform(C * 4, 2, -0.5, 0.5), r = randn(B * T * C, 3);
    std::vector<double> u(B * T * C), c(B * T * C);
    auto f = [&] {
        ref::gdn_conv_forward(u.data(), C, c.data(), p.data(), w.data(), B, T, C);
        return dot(u, r);
    };
    f();
    for (long b = 0; b < B; b++)
        for (long t = 0; t < T; t++)
            for (int ch = 0; ch < C; ch++) {
                double s = 0;  // the definition: taps before the sequence's start read zeros
                for (int k = 0; k < 4; k++)
                    if (t - 3 + k >= 0) s += w[ch * 4 + k] * p[(b * T + t - 3 + k) * C + ch];
                const long i = (b * T + t) * C + ch;
                CHECK(c[i] == Approx(s).margin(1e-14));
                CHECK(u[i] == Approx(s / (1 + std::exp(-s))).margin(1e-14));
            }
    std::vector<double> dp(B * T * C, 9.0), dw0 = randn(C * 4, 4), dw = dw0;
    ref::gdn_conv_backward(dp.data(), dw.data(), r.data(), C, c.data(), p.data(), w.data(), B, T, C);
    for (int i = 0; i < C * 4; i++) dw[i] -= dw0[i];  // accumulated onto what was there
    check_all("dp", p, dp, f);
    check_all("dw", w, dw, f);
}

TEST_CASE("gdn l2norm: each head's x / sqrt(sum x^2 + 1e-6); gradient matches finite differences", "[gdn]") {
    const long N = 4;
    const int h = 3, hd = 5, ld = 17;  // rows wider than the heads, as q and k inside the qkv row
    std::vector<double> x = randn(N * ld, 5), r = randn(N * ld, 6), y(N * ld, 0.0), inv(N * h);
    x[3] = 1e-4, x[4] = -2e-4;  // a head whose norm is comparable to the eps
    auto f = [&] {
        ref::gdn_l2norm_forward(y.data(), ld, inv.data(), x.data(), ld, N, h, hd);
        return dot(y, r);
    };
    f();
    for (long n = 0; n < N; n++)
        for (int j = 0; j < h; j++) {
            double s = 0;
            for (int c = 0; c < hd; c++) s += x[n * ld + j * hd + c] * x[n * ld + j * hd + c];
            for (int c = 0; c < hd; c++)
                CHECK(y[n * ld + j * hd + c] == Approx(x[n * ld + j * hd + c] / std::sqrt(s + 1e-6)).epsilon(1e-14));
        }
    std::vector<double> dx(N * ld, 0.0);
    ref::gdn_l2norm_backward(dx.data(), ld, r.data(), ld, y.data(), ld, inv.data(), N, h, hd);
    check_all("dx", x, dx, f);
}

TEST_CASE("gdn gates: beta = sigmoid, g = -exp(a_log) softplus(a + dt_bias); gradients match finite differences",
          "[gdn]") {
    const long N = 5;
    const int h = 3;
    std::vector<double> ba = randn(N * 2 * h, 7, 2.0), a_log = uniform(h, 8, 0, 2.7), dt = randn(h, 9),
                        r1 = randn(N * h, 10), r2 = randn(N * h, 11), beta(N * h), g(N * h);
    auto f = [&] {
        ref::gdn_gates_forward(beta.data(), g.data(), ba.data(), a_log.data(), dt.data(), N, h);
        return dot(beta, r1) + dot(g, r2);
    };
    f();
    for (long n = 0; n < N; n++)
        for (int j = 0; j < h; j++) {
            CHECK(beta[n * h + j] == Approx(1 / (1 + std::exp(-ba[n * 2 * h + j]))).epsilon(1e-14));
            const double x = ba[n * 2 * h + h + j] + dt[j];
            CHECK(g[n * h + j] == Approx(-std::exp(a_log[j]) * std::log(1 + std::exp(x))).epsilon(1e-13));
        }
    std::vector<double> dba(N * 2 * h, 9.0), da(h, 0.5), ddt(h, -0.5);
    ref::gdn_gates_backward(dba.data(), da.data(), ddt.data(), r1.data(), r2.data(), ba.data(), beta.data(), g.data(),
                            a_log.data(), dt.data(), N, h);
    for (int j = 0; j < h; j++) da[j] -= 0.5, ddt[j] += 0.5;
    check_all("dba", ba, dba, f);
    check_all("da_log", a_log, da, f);
    check_all("ddt_bias", dt, ddt, f);
}

TEST_CASE("gdn gated rmsnorm: onorm_w o / rms(o) silu(z) per head, weight shared; gradients match finite differences",
          "[gdn]") {
    const long N = 3;
    const int h = 2, hd = 4, w = h * hd;
    std::vector<double> o = randn(N * w, 12), z = randn(N * w, 13), wn = uniform(hd, 14, 0.5, 1.5),
                        r = randn(N * w, 15), y(N * w), rn(N * h);
    auto f = [&] {
        ref::gdn_gated_norm_forward(y.data(), rn.data(), o.data(), z.data(), wn.data(), N, h, hd, kEps);
        return dot(y, r);
    };
    f();
    for (long n = 0; n < N; n++)
        for (int j = 0; j < h; j++) {
            double ms = 0;
            for (int c = 0; c < hd; c++) ms += o[n * w + j * hd + c] * o[n * w + j * hd + c] / hd;
            for (int c = 0; c < hd; c++) {
                const long i = n * w + j * hd + c;
                CHECK(y[i] ==
                      Approx(wn[c] * o[i] / std::sqrt(ms + kEps) * z[i] / (1 + std::exp(-z[i]))).epsilon(1e-13));
            }
        }
    std::vector<double> d_o(N * w, 9.0), dz(N * w, 9.0), dwn(hd, 0.25);
    ref::gdn_gated_norm_backward(d_o.data(), dz.data(), dwn.data(), r.data(), o.data(), z.data(), rn.data(), wn.data(),
                                 N, h, hd);
    for (auto& x : dwn) x -= 0.25;
    check_all("do", o, d_o, f);
    check_all("dz", z, dz, f);
    check_all("donorm_w", wn, dwn, f);
}

TEST_CASE(
    "gdn delta rule, recurrent: the definition S_t = exp(g) S (I - beta k k^T) + beta v k^T; gradients match "
    "finite differences",
    "[gdn]") {
    DeltaInputs in(2, 5, 2, 3, 20);
    const long N = in.B * in.T, w = in.sh.w();
    const int h = in.sh.h, hd = in.sh.hd;
    std::vector<double> r = randn(N * w, 25), o(N * w);
    auto f = [&] {
        ref::gdn_delta_recurrent_forward(o.data(), w, in.q.data(), in.k.data(), in.v.data(), w, in.beta.data(),
                                         in.g.data(), in.B, in.T, in.sh);
        return dot(o, r);
    };
    f();
    for (long b = 0; b < in.B; b++)  // the matrix form, literally
        for (int j = 0; j < h; j++) {
            std::vector<double> St(hd * hd, 0.0), Sn(hd * hd);
            for (long t = 0; t < in.T; t++) {
                const long n = b * in.T + t;
                const double* k = &in.k[n * w + j * hd];
                const double* v = &in.v[n * w + j * hd];
                const double* q = &in.q[n * w + j * hd];
                const double bt = in.beta[n * h + j], a = std::exp(in.g[n * h + j]);
                for (int x = 0; x < hd; x++)
                    for (int y = 0; y < hd; y++) {
                        double s = 0;  // (S (I - beta k k^T))_xy
                        for (int m = 0; m < hd; m++) s += St[x * hd + m] * ((m == y) - bt * k[m] * k[y]);
                        Sn[x * hd + y] = a * s + bt * v[x] * k[y];
                    }
                St = Sn;
                for (int x = 0; x < hd; x++) {
                    double s = 0;
                    for (int m = 0; m < hd; m++) s += St[x * hd + m] * q[m];
                    CHECK(o[n * w + j * hd + x] == Approx(s / std::sqrt((double)hd)).margin(1e-14));
                }
            }
        }
    const DeltaRun<double> g = run_delta<double>(in, r, false);
    check_all("dq", in.q, g.dq, f);
    check_all("dk", in.k, g.dk, f);
    check_all("dv", in.v, g.dv, f);
    check_all("dbeta", in.beta, g.dbeta, f);
    check_all("dg", in.g, g.dg, f);
}

TEST_CASE("gdn delta rule, chunked: gradients match finite differences across a chunk boundary", "[gdn]") {
    DeltaInputs in(1, ref::GDN_CHUNK + 6, 1, 4, 30);
    const long N = in.B * in.T, w = in.sh.w();
    std::vector<double> r = randn(N * w, 35), o(N * w),
                        states(in.B * in.sh.h * ref::gdn_chunks(in.T) * in.sh.hd * in.sh.hd);
    auto f = [&] {
        ref::gdn_delta_chunk_forward(o.data(), w, states.data(), in.q.data(), in.k.data(), in.v.data(), w,
                                     in.beta.data(), in.g.data(), in.B, in.T, in.sh);
        return dot(o, r);
    };
    const DeltaRun<double> g = run_delta<double>(in, r, true);
    check_all("dq", in.q, g.dq, f);
    check_all("dk", in.k, g.dk, f);
    check_all("dv", in.v, g.dv, f);
    check_all("dbeta", in.beta, g.dbeta, f);
    check_all("dg", in.g, g.dg, f);
}

TEST_CASE("gdn delta rule: the chunked form equals the recurrent one, forward and backward, float and double",
          "[gdn]") {
    struct Case {
        long B, T;
        int h, hd;
    };
    // T below one chunk, exactly one, and past several with a short last one; head_dim 8 .. 64
    for (const Case& c : {Case{2, 37, 2, 8}, Case{1, 64, 1, 16}, Case{2, 150, 2, 32}, Case{1, 129, 1, 64}}) {
        INFO("B " << c.B << " T " << c.T << " h " << c.h << " hd " << c.hd);
        DeltaInputs in(c.B, c.T, c.h, c.hd, 40 + c.T);
        const std::vector<double> dout = randn(c.B * c.T * c.h * c.hd, 41);
        const DeltaRun<double> rd = run_delta<double>(in, dout, false), cd = run_delta<double>(in, dout, true);
        const DeltaRun<float> cf = run_delta<float>(in, dout, true), rf = run_delta<float>(in, dout, false);
        // double: both forms are exact to rounding (~1e-16 per operation over O(T hd) operations);
        // float: the chunked form against the double recurrent one, and the float recurrent one's own error beside
        const std::pair<const char*, double> errs[] = {
            {"o", rel_err(cd.o, rd.o)},    {"dq", rel_err(cd.dq, rd.dq)},          {"dk", rel_err(cd.dk, rd.dk)},
            {"dv", rel_err(cd.dv, rd.dv)}, {"dbeta", rel_err(cd.dbeta, rd.dbeta)}, {"dg", rel_err(cd.dg, rd.dg)},
        };
        for (const auto& e : errs) {
            INFO(e.first << " double chunked vs recurrent: " << e.second);
            CHECK(e.second < 1e-12);
        }
        const std::pair<const char*, double> errs_f[] = {
            {"o", rel_err(cf.o, rd.o)},    {"dq", rel_err(cf.dq, rd.dq)},          {"dk", rel_err(cf.dk, rd.dk)},
            {"dv", rel_err(cf.dv, rd.dv)}, {"dbeta", rel_err(cf.dbeta, rd.dbeta)}, {"dg", rel_err(cf.dg, rd.dg)},
        };
        for (const auto& e : errs_f) {
            INFO(e.first << " float chunked vs double: " << e.second << " (float recurrent: " << rel_err(rf.o, rd.o)
                         << " on o)");
            CHECK(e.second < 1e-5);
        }
    }
}

// The mixer's gradient buffers, one per tensor in Mixer::all()'s order, as gdn_backward takes them.
static ref::GdnGrads<double> grad_ptrs(std::vector<std::vector<double>>& g) {
    return {g[0].data(), g[1].data(), g[2].data(), g[3].data(), g[4].data(), g[5].data(), g[6].data()};
}

TEST_CASE("gdn mixer: every gradient of gdn_backward matches finite differences; dxn assigned, weights accumulated",
          "[gdn]") {
    const int B = 2, T = 5, h = 2, hd = 3, w = h * hd;
    Mixer m(h, hd, 50);
    std::vector<double> xn = randn(B * T * w, 51), r = randn(B * T * w, 52), y(B * T * w);
    ref::GdnActs<double> acts;
    auto f = [&] {
        ref::gdn_forward(y.data(), acts, xn.data(), MixerS<double>(m).weights(), B, T, m.sh, kEps);
        return dot(y, r);
    };
    f();
    MixerS<double> W(m);
    std::vector<std::vector<double>> grads, prior;
    for (auto* t : m.all()) prior.push_back(randn(t->size(), 53 + prior.size()));
    grads = prior;
    std::vector<double> dxn(B * T * w, 9.0);
    ref::gdn_backward(dxn.data(), grad_ptrs(grads), r.data(), xn.data(), acts, W.weights(), B, T, m.sh, kEps);
    const char* names[] = {"wqkv", "conv_w", "wz", "wba", "a_log", "dt_bias", "onorm_w"};
    for (size_t i = 0; i < grads.size(); i++) {
        for (size_t e = 0; e < grads[i].size(); e++) grads[i][e] -= prior[i][e];
        check_all(names[i], *m.all()[i], grads[i], f);
    }
    check_all("dxn", xn, dxn, f);
}

TEST_CASE("gdn mixer: gradients match finite differences over two chunks", "[gdn]") {
    const int B = 1, T = ref::GDN_CHUNK + 3, h = 2, hd = 2, w = h * hd;
    Mixer m(h, hd, 60);
    std::vector<double> xn = randn(B * T * w, 61), r = randn(B * T * w, 62), y(B * T * w);
    ref::GdnActs<double> acts;
    auto f = [&] {
        ref::gdn_forward(y.data(), acts, xn.data(), MixerS<double>(m).weights(), B, T, m.sh, kEps);
        return dot(y, r);
    };
    f();
    MixerS<double> W(m);
    std::vector<std::vector<double>> grads;
    for (auto* t : m.all()) grads.emplace_back(t->size(), 0.0);
    std::vector<double> dxn(B * T * w);
    ref::gdn_backward(dxn.data(), grad_ptrs(grads), r.data(), xn.data(), acts, W.weights(), B, T, m.sh, kEps);
    check_all("dxn", xn, dxn, f);
    check_all("a_log", m.a_log, grads[4], f);
    check_all("dt_bias", m.dt_bias, grads[5], f);
}

template <typename S> void check_decode() {
    const int T = 2 * ref::GDN_CHUNK + 21, h = 2, hd = 8, w = h * hd;
    Mixer m(h, hd, 70);
    MixerS<S> W(m);
    const std::vector<S> xn = as<S>(randn(T * w, 71));
    std::vector<S> y(T * w);
    ref::GdnActs<S> acts;
    ref::gdn_forward(y.data(), acts, xn.data(), W.weights(), 1, T, m.sh, kEps);
    // one row at a time, and in blocks that start and end inside chunks and span chunk boundaries
    for (const std::vector<int>& blocks : {std::vector<int>(T, 1), std::vector<int>{3, 1, 70, 2, 60, 13}}) {
        ref::GdnState<S> st;
        std::vector<S> yd(T * w, S(-1));
        int t = 0;
        for (int n : blocks) {
            ref::gdn_decode(yd.data() + t * w, st, xn.data() + t * w, W.weights(), n, m.sh, kEps);
            t += n;
        }
        REQUIRE(t == T);
        CHECK(std::memcmp(yd.data(), y.data(), T * w * sizeof(S)) == 0);
        double err = 0;
        for (int i = 0; i < T * w; i++) err = std::max(err, std::fabs((double)yd[i] - y[i]));
        INFO("max |decode - forward| " << err);
        CHECK(err == 0);
    }
}
TEST_CASE("gdn_decode's rows equal gdn_forward's bit for bit, row by row and in blocks", "[gdn]") {
    check_decode<float>();
    check_decode<double>();
}

TEST_CASE("gdn mixer forward and backward are bit-identical for 1 and 2 threads", "[gdn]") {
    const int B = 3, T = 100, h = 2, hd = 16, w = h * hd;  // every op above OMP_MIN_WORK
    Mixer m(h, hd, 80);
    MixerS<float> W(m);
    const std::vector<float> xn = as<float>(randn(B * T * w, 81)), dy = as<float>(randn(B * T * w, 82));
    const int saved = omp_get_max_threads();
    std::vector<std::vector<float>> out;
    for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        std::vector<float> y(B * T * w), dxn(B * T * w);
        MixerS<float> G(m);  // gradients accumulated onto the weights' values: any start will do
        ref::GdnActs<float> acts;
        ref::gdn_forward(y.data(), acts, xn.data(), W.weights(), B, T, m.sh, kEps);
        ref::gdn_backward(dxn.data(),
                          {G.wqkv.data(), G.conv_w.data(), G.wz.data(), G.wba.data(), G.a_log.data(), G.dt_bias.data(),
                           G.onorm_w.data()},
                          dy.data(), xn.data(), acts, W.weights(), B, T, m.sh, kEps);
        std::vector<float> all = y;
        for (auto* v : {&dxn, &G.wqkv, &G.conv_w, &G.wz, &G.wba, &G.a_log, &G.dt_bias, &G.onorm_w})
            all.insert(all.end(), v->begin(), v->end());
        out.push_back(all);
    }
    omp_set_num_threads(saved);
    CHECK(std::memcmp(out[0].data(), out[1].data(), out[0].size() * sizeof(float)) == 0);
}

TEST_CASE("docs/model.md's Gated DeltaNet section states ref/gdn.h's constants", "[gdn][docs]") {
    const std::string doc = read_file("docs/model.md");
    const size_t at = doc.find("## The Gated DeltaNet layer");
    REQUIRE(at != std::string::npos);
    const std::string sec = doc.substr(at, doc.find("\n## ", at + 1) - at);
    CHECK(has(sec, "kernel " + std::to_string(ref::GDN_CONV) + ","));
    CHECK(has(sec, "sum over k = 0.." + std::to_string(ref::GDN_CONV - 1)));
    CHECK(ref::GDN_L2_EPS == 1e-6);
    CHECK(has(sec, "sqrt(sum x^2 + 1e-6)"));
    CHECK(ref::GDN_SOFTPLUS_MAX == 20.0);
    CHECK(has(sec, "x itself above 20"));
    CHECK(has(sec, "chunks of " + std::to_string(ref::GDN_CHUNK) + " tokens"));
}
