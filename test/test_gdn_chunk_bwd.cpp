// test_gdn_chunk_bwd.cpp: gdn_chunk_bwd.cuh's backward of the chunked gated delta rule against
// ref::gdn_delta_chunk_backward (and once against the recurrent form's backward, in double), on the executor.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "gdn_chunk_bwd.cuh"
#include "ref/gdn.h"
#include "test/kernel_test_util.h"

namespace {

// The largest |got - want| relative to max|want|.
double max_err(const std::vector<float>& got, const std::vector<float>& want) {
    double m = 0;
    for (size_t i = 0; i < got.size(); i++) m = std::max(m, std::fabs((double)got[i] - want[i]));
    return m / std::max(1e-30f, max_abs(want));
}

// One problem's inputs, bf16-exact: qkv (N, 3w) with q and k L2-normalised per head before rounding, beta, g
// (N, h), dout (N, w).
struct Problem {
    int B, T, h, hd, w;
    long N;
    std::vector<float> qkv, beta, g, dout;
    Problem(int B_, int T_, int h_, int hd_, uint64_t seed)
        : B(B_), T(T_), h(h_), hd(hd_), w(h_ * hd_), N((long)B_ * T_) {
        qkv = rand_bf16(N * 3 * w, seed);
        for (long n = 0; n < N; n++)
            for (int part = 0; part < 2; part++)
                for (int j = 0; j < h; j++) {
                    float* x = &qkv[n * 3 * w + part * w + j * hd];
                    double ss = 0;
                    for (int c = 0; c < hd; c++) ss += (double)x[c] * x[c];
                    for (int c = 0; c < hd; c++) x[c] = float(bf16(float(x[c] / std::sqrt(ss + 1e-6))));
                }
        beta = rand_bf16(N * h, seed + 1, 0.05f, 0.95f);
        g = rand_bf16(N * h, seed + 2, -0.4f, -0.005f);
        dout = rand_bf16(N * w, seed + 3);
    }
};

struct Grads {
    std::vector<float> dqkv, dbeta, dg;
};

// The reference: states from ref::gdn_delta_chunk_forward, then its backward (float).
Grads reference(const Problem& p, std::vector<float>& states) {
    const ref::GdnShape sh{p.h, p.hd};
    const int w = p.w;
    std::vector<float> o(p.N * w);
    states.assign((size_t)p.B * p.h * ref::gdn_chunks(p.T) * p.hd * p.hd, 0.0f);
    const float* qkv = p.qkv.data();
    ref::gdn_delta_chunk_forward(o.data(), w, states.data(), qkv, qkv + w, qkv + 2 * w, 3 * w, p.beta.data(),
                                 p.g.data(), p.B, p.T, sh);
    Grads r{std::vector<float>(p.N * 3 * w), std::vector<float>(p.N * p.h), std::vector<float>(p.N * p.h)};
    float* d = r.dqkv.data();
    ref::gdn_delta_chunk_backward(d, d + w, d + 2 * w, 3 * w, r.dbeta.data(), r.dg.data(), p.dout.data(), w,
                                  states.data(), qkv, qkv + w, qkv + 2 * w, 3 * w, p.beta.data(), p.g.data(), p.B, p.T,
                                  sh);
    return r;
}

Grads kernel(const Problem& p, const std::vector<float>& states) {
    const int w = p.w;
    Dev<bf16> qkv(p.qkv), dout(p.dout), dqkv(p.N * 3 * w);
    Dev<float> beta(p.beta), g(p.g), st(states), dbeta(p.N * p.h), dg(p.N * p.h);
    Dev<unsigned char> scratch(gdn_chunk_backward_scratch_bytes(p.B, p.T, p.h, p.hd));
    gdn_chunk_backward(dqkv.p, dqkv.p + w, dqkv.p + 2 * w, 3 * w, dbeta.p, dg.p, dout.p, w, st.p, qkv.p, qkv.p + w,
                       qkv.p + 2 * w, 3 * w, beta.p, g.p, p.B, p.T, p.h, p.hd, scratch.p, 0);
    sync();
    return Grads{dqkv.get(), dbeta.get(), dg.get()};
}

// The columns of part (0 q, 1 k, 2 v) of an (N, 3w) buffer.
std::vector<float> part(const std::vector<float>& x, long N, int w, int k) {
    std::vector<float> y(N * w);
    for (long n = 0; n < N; n++) std::memcpy(&y[n * w], &x[n * 3 * w + k * w], w * sizeof(float));
    return y;
}

}  // namespace

TEST_CASE("gdn_chunk_backward matches ref::gdn_delta_chunk_backward", "[gdn_chunk]") {
    struct Case {
        int B, T, h, hd;
    };
    const Case cases[] = {{2, 67, 2, 32}, {2, 130, 2, 48}, {2, 130, 1, 64}, {2, 67, 2, 128}, {2, 67, 1, 256}};
    for (const Case& cs : cases) {
        INFO("B=" << cs.B << " T=" << cs.T << " h=" << cs.h << " hd=" << cs.hd);
        const Problem p(cs.B, cs.T, cs.h, cs.hd, 100 + cs.hd);
        std::vector<float> states;
        const Grads want = reference(p, states), got = kernel(p, states);
        const char* names[] = {"dq", "dk", "dv"};
        printf("gdn chunk bwd hd %3d T %3d: max err / max|want|:", cs.hd, cs.T);
        for (int k = 0; k < 3; k++)
            printf(" %s %.2e", names[k], max_err(part(got.dqkv, p.N, p.w, k), part(want.dqkv, p.N, p.w, k)));
        printf(" dbeta %.2e dg %.2e\n", max_err(got.dbeta, want.dbeta), max_err(got.dg, want.dg));
        for (int k = 0; k < 3; k++)
            check_close(part(got.dqkv, p.N, p.w, k), part(want.dqkv, p.N, p.w, k), BF16_REL, 0.02, names[k]);
        check_close(got.dbeta, want.dbeta, 0, 0.02, "dbeta");
        check_close(got.dg, want.dg, 0, 0.02, "dg");
    }
}
