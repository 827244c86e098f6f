// test_gdn_chunk_bwd.cpp: gdn_chunk_bwd.cuh's backward of the chunked gated delta rule against
// ref::gdn_delta_chunk_backward (float) on the same bf16-exact inputs, the states from ref::gdn_delta_chunk_forward
// (fp32 on both sides), at head_dim 32, 48, 64, 128 and 256, B 2, T 67 and 130 (one or two chunks past the first,
// the last one short), h 1 and 2; once against the recurrent form's backward in double, a rerun's bits, windows of
// 1 and 3 chunks against one window bit for bit, the 16-byte staging against element by element (unaligned
// inputs and scratch) bit for bit, and the scratch's size at the 124M model's shapes. On the CUDA-on-CPU executor
// (make test, the sanitizer builds); nvcc builds it for a GPU.
//
// Tolerances. bf16 keeps 8 significant bits: one rounding to nearest moves a value by at most u = 2^-8 of itself.
// The inputs q, k, v, dout are bf16 values both sides see exactly; every other tensor-core operand is an fp32
// value rounded to bf16 once (T, W, U, M scaled by 1 / sqrt(hd), the states, dS, dU, dW, dT, the two X's, dKK,
// and the scaled rows beta v, beta exp(G) k, exp(G_L - G) k, exp(G) q / sqrt(hd)); products accumulate in fp32
// (2^-24 per add: nothing next to u). A product whose two operands carry relative errors e1, e2 and are each
// rounded once is off by at most (e1 + e2 + 2 u) times the sum of its terms' sizes. The longest chain to an output
// is dk's (and dbeta's, dg's) through the WY backward: dU (Kd and dS1 rounded) -> dW = -dU S0 -> dT = dW Kb^T ->
// X = T^T dT -> dA = -X T^T -> dK += dKK K: six products, at most two roundings each, twelve in all (dq's chain,
// dO U^T with U itself two products deep, is shorter; dv's, T^T dU, too). The inputs keep every factor of a term
// at most 1 in size (q, k unit vectors, |v|, |dout| <= 1, beta < 1, decays <= 1, T = (I + A)^-1 with
// |A_ix| <= |k_i . k_x| small); the errors are measured against max|want| of each output, taking that as the size
// of its terms. Every rounding the same way, the chain's worst case is 12 u max|want| = 4.7e-2. Roundings to
// nearest of unrelated values go either way: modelled as independent and uniform in [-u, u] (standard deviation
// u / sqrt(3)), twelve of them have a standard deviation of 2 u, and the tolerance is three of those:
// |err| <= 6 u max|want| = 2.3e-2 for every output, plus the rounding of dq, dk, dv themselves to bf16
// (BF16_REL |want|, BF16_REL = 2^-8 = u). That is an estimate, not a bound; the measured worst is 6.5e-3 max|want|
// = 1.7 u (dv, hd 128, T 130, the staging case's problem). A missing or misplaced term moves an output by a whole
// term: the mutants tried while writing this each fail it (the column sums of dKK in dg: 0.26 max|want|; the U dS1
// . Kd terms of dg: 0.47; exp(G_L) dS1 dropped from the state walk: 0.03 to 0.06; exp(G_L) <dS1, S0> dropped from
// dg: 0.025, the smallest term, caught at hd 256). The decays are mild on even heads so that the state's terms are
// of that size at all: with exp(G_L) ~ 1e-6 over a chunk the last two mutants passed unseen.
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
        // mild decays on even heads (exp(G) over a chunk about 0.15: the state carries across chunks), six times
        // stronger on odd ones
        g = rand_bf16(N * h, seed + 2, -0.06f, -0.001f);
        for (long n = 0; n < N; n++)
            for (int j = 1; j < h; j += 2) g[n * h + j] *= 6.0f;
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

// The kernels' gradients: gdn_chunk_backward (window 0), or its windows of `window` chunks. With `shifted`, q, k, v,
// dout and the scratch start one element past a 16-byte boundary: no row is 16-byte aligned, so every operand is
// staged element by element.
Grads kernel(const Problem& p, const std::vector<float>& states, int window = 0, bool shifted = false) {
    const int w = p.w, sh = shifted ? 1 : 0;
    auto ahead = [&](const std::vector<float>& x) {  // x behind sh leading zeros
        std::vector<float> y(sh + x.size(), 0.0f);
        std::copy(x.begin(), x.end(), y.begin() + sh);
        return y;
    };
    Dev<bf16> qkv_(ahead(p.qkv)), dout_(ahead(p.dout)), dqkv(p.N * 3 * w);
    Dev<float> beta(p.beta), g(p.g), st(states), dbeta(p.N * p.h), dg(p.N * p.h);
    const size_t bytes = window ? gdn_chunk_bwd_scratch_bytes_window(p.B, p.h, p.hd, window)
                                : gdn_chunk_backward_scratch_bytes(p.B, p.T, p.h, p.hd);
    Dev<unsigned char> scratch_(bytes + 4 * sh);
    const bf16 *qkv = qkv_.p + sh, *dout = dout_.p + sh;
    unsigned char* scratch = scratch_.p + 4 * sh;
    if (window)
        gdn_chunk_backward_windows(dqkv.p, dqkv.p + w, dqkv.p + 2 * w, 3 * w, dbeta.p, dg.p, dout, w, st.p, qkv,
                                   qkv + w, qkv + 2 * w, 3 * w, beta.p, g.p, p.B, p.T, p.h, p.hd, window, scratch, 0);
    else
        gdn_chunk_backward(dqkv.p, dqkv.p + w, dqkv.p + 2 * w, 3 * w, dbeta.p, dg.p, dout, w, st.p, qkv, qkv + w,
                           qkv + 2 * w, 3 * w, beta.p, g.p, p.B, p.T, p.h, p.hd, scratch, 0);
    sync();
    return Grads{dqkv.get(), dbeta.get(), dg.get()};
}

bool same_bits(const Grads& a, const Grads& b) {
    auto eq = [](const std::vector<float>& x, const std::vector<float>& y) {
        return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
    };
    return eq(a.dqkv, b.dqkv) && eq(a.dbeta, b.dbeta) && eq(a.dg, b.dg);
}

// The columns of part (0 q, 1 k, 2 v) of an (N, 3w) buffer.
std::vector<float> part(const std::vector<float>& x, long N, int w, int k) {
    std::vector<float> y(N * w);
    for (long n = 0; n < N; n++) std::memcpy(&y[n * w], &x[n * 3 * w + k * w], w * sizeof(float));
    return y;
}

// u = 2^-8, bf16's unit roundoff; the tolerances of the file's header.
const double U = 1.0 / 256, ABS_TOL = 6 * U;

void check_grads(const Problem& p, const Grads& got, const Grads& want, const char* what) {
    const char* names[] = {"dq", "dk", "dv"};
    printf("gdn chunk bwd (%s) hd %3d T %3d h %d: max err / max|want|:", what, p.hd, p.T, p.h);
    for (int k = 0; k < 3; k++)
        printf(" %s %.2e", names[k], max_err(part(got.dqkv, p.N, p.w, k), part(want.dqkv, p.N, p.w, k)));
    printf(" dbeta %.2e dg %.2e\n", max_err(got.dbeta, want.dbeta), max_err(got.dg, want.dg));
    for (int k = 0; k < 3; k++)
        check_close(part(got.dqkv, p.N, p.w, k), part(want.dqkv, p.N, p.w, k), BF16_REL, ABS_TOL, names[k]);
    check_close(got.dbeta, want.dbeta, 0, ABS_TOL, "dbeta");
    check_close(got.dg, want.dg, 0, ABS_TOL, "dg");
}

}  // namespace

TEST_CASE("gdn_chunk_backward matches ref::gdn_delta_chunk_backward at head_dim 32 to 256", "[gdn_chunk]") {
    struct Case {
        int B, T, h, hd;
    };
    const Case cases[] = {{2, 67, 2, 32},  {2, 130, 2, 32},  {2, 130, 2, 48}, {2, 67, 2, 64},  {2, 130, 1, 64},
                          {2, 67, 2, 128}, {2, 130, 1, 128}, {2, 67, 1, 256}, {2, 130, 1, 256}};
    for (const Case& cs : cases) {
        INFO("B=" << cs.B << " T=" << cs.T << " h=" << cs.h << " hd=" << cs.hd);
        const Problem p(cs.B, cs.T, cs.h, cs.hd, 100 + cs.hd + cs.T);
        std::vector<float> states;
        const Grads want = reference(p, states), got = kernel(p, states);
        check_grads(p, got, want, "chunked ref");
    }
}

TEST_CASE("gdn_chunk_backward matches the recurrent form's backward and repeats its bits", "[gdn_chunk]") {
    const Problem p(2, 130, 1, 64, 7);
    std::vector<float> states;
    reference(p, states);
    const Grads got = kernel(p, states), again = kernel(p, states);
    CHECK(std::memcmp(got.dqkv.data(), again.dqkv.data(), got.dqkv.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(got.dbeta.data(), again.dbeta.data(), got.dbeta.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(got.dg.data(), again.dg.data(), got.dg.size() * sizeof(float)) == 0);
    // the oracle in double: the definition step by step, every state kept
    const int w = p.w;
    auto dbl = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
    const std::vector<double> qkv = dbl(p.qkv), beta = dbl(p.beta), g = dbl(p.g), dout = dbl(p.dout);
    std::vector<double> d(p.N * 3 * w), db(p.N * p.h), dg(p.N * p.h);
    ref::gdn_delta_recurrent_backward(d.data(), d.data() + w, d.data() + 2 * w, 3 * w, db.data(), dg.data(),
                                      dout.data(), w, qkv.data(), qkv.data() + w, qkv.data() + 2 * w, 3 * w,
                                      beta.data(), g.data(), p.B, p.T, ref::GdnShape{p.h, p.hd});
    auto flt = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
    check_grads(p, got, Grads{flt(d), flt(db), flt(dg)}, "recurrent");
}

TEST_CASE("gdn_chunk_backward's windows of chunks give the same bits as one window", "[gdn_chunk]") {
    // T 250: four chunks, the last short; hd 128: two blocks of value rows in the state walk, each its own rows of
    // the carry. Windows of 1 (four windows) and 3 (the last chunk, then three) against the one window these
    // shapes get (gdn_chunk_bwd_window: 4 chunks).
    const Problem p(2, 250, 1, 128, 11);
    std::vector<float> states;
    const Grads want = reference(p, states);
    REQUIRE(gdn_chunk_bwd_window(p.B, p.T, p.h) == 4);
    const Grads one = kernel(p, states);
    check_grads(p, one, want, "one window");
    for (int window : {1, 3}) {
        INFO("window " << window);
        CHECK(same_bits(kernel(p, states, window), one));
    }
}

TEST_CASE("gdn_chunk_backward's 16-byte staging gives the same bits as element by element", "[gdn_chunk]") {
    // aligned, the rows of k, q, v, dout and the workspace's bf16 matrices (T, W, U, dU, dW) are staged 8 elements a
    // load (v's and k's scaled by beta, beta exp(G) in dT's product); shifted, one element at a time
    for (int hd : {64, 128}) {
        INFO("hd " << hd);
        const Problem p(2, 130, 1, hd, 13);
        std::vector<float> states;
        const Grads want = reference(p, states), aligned = kernel(p, states);
        check_grads(p, aligned, want, "16-byte staging");
        CHECK(same_bits(kernel(p, states, 0, true), aligned));
    }
}

TEST_CASE("gdn_chunk_backward's scratch is one window's workspaces and a carry per head", "[gdn_chunk]") {
    // a workspace: 4 C^2 + 5 C hd fp32 words, 2 C^2 + 4 C hd bf16 (half a word each), hd^2 fp32 (C = 64)
    CHECK(gdn_chunk_bwd_ws_floats(64) == 53248);
    CHECK(gdn_chunk_bwd_ws_floats(128) == 94208);
    // the 124M model's shapes (B 16, h 12, head_dim 64): 192 (sequence, head) pairs, windows of
    // ceil(1024 / 192) = 6 chunks whatever T: 192 (6 x 53,248 + 4,096) words = 248,512,512 bytes
    CHECK(gdn_chunk_bwd_window(16, 1024, 12) == 6);
    CHECK(gdn_chunk_bwd_window(16, 4096, 12) == 6);
    CHECK(gdn_chunk_backward_scratch_bytes(16, 1024, 12, 64) == 248512512);
    CHECK(gdn_chunk_backward_scratch_bytes(16, 4096, 12, 64) == 248512512);
    // h 6, head_dim 128: 96 pairs, windows of 11 chunks: 96 (11 x 94,208 + 16,384) words = 404,226,048 bytes
    CHECK(gdn_chunk_bwd_window(16, 4096, 6) == 11);
    CHECK(gdn_chunk_backward_scratch_bytes(16, 1024, 6, 128) == 404226048);
    CHECK(gdn_chunk_backward_scratch_bytes(16, 4096, 6, 128) == 404226048);
    // fewer chunks than a window: all of them, one window
    CHECK(gdn_chunk_bwd_window(2, 130, 2) == 3);
    CHECK(gdn_chunk_backward_scratch_bytes(2, 130, 2, 64) == (size_t)4 * (3 * 53248 + 4096) * 4);
    CHECK(gdn_chunk_backward_scratch_bytes(0, 130, 2, 64) == 0);
    CHECK(gdn_chunk_backward_scratch_bytes(2, 0, 2, 64) == 0);
}
