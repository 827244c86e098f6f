// test_attention.cpp: the flash attention kernels of attention.cuh against ref::attention_forward and
// ref::attention_backward: every even head_dim from 2 to 272 (instances 64, 128, 256 and the wide one), T that is
// no multiple of any tile (1, 5, 17, 33, 130), B = 1 and 3, one to three heads, both scales, T = 1024 at head_dim
// 64 and 256, the wide instance up to head_dim 1024, bit-identical reruns, the old per-row kernel
// (test/attention_naive.cuh) as a second oracle; and the executor's cp.async emulation the kernels rely on.
// Compiled by g++ the kernels run on the CUDA-on-CPU executor (make test, test-asan, test-race); compiled by
// nvcc (make test-executor-native) the same tests run on a GPU.
// Under the sanitizers (ASan and TSan slow the executor 5 to 30 times) each test runs a subset that still
// covers every instance, every copy width (4, 8, 16 bytes), padded head dims, both pipeline stages (at least
// three tiles of each kind), causal skipping, T not a multiple of a tile, B and h above 1 and the wide
// instance's windows: the races and out-of-bounds accesses they look for are properties of that structure, not
// of T. The whole sweep, the bit-identical reruns and T = 1024 run in make test and natively.
//
// How the tolerances are set: a bound per element, computed in double from the inputs, for what bf16 rounding
// inside the kernel may do. bf16 keeps 8 significant bits, so one rounding moves a value by at most u = 2^-8 of
// itself; fp32 sums and exp2f (~2^-22 relative) are negligible next to that.
//   out_tc:  P is rounded to bf16 for the P V product (u per weight), out once more (u |out| <= u A_tc):
//            |err| <= 2 u A_tc,  A_tc = sum_j p_tj |v_jc|
//   dv_jc:   likewise P for P^T dO and dv's rounding: 2 u sum_t p_tj |dout_tc|
//   D_t:     dout . out from the bf16 output: |err D_t| <= dD_t = 2 u sum_c |dout_tc| A_tc
//   dS_tj = p_tj (dP_tj - D_t) is rounded for the dS K and dS^T Q products (u |dS_tj|) and carries p_tj dD_t;
//            with the final rounding of dq and dk, e_tj = 2 u |dS_tj| + p_tj dD_t and
//   dq_tc <= scale sum_j e_tj |k_jc|,   dk_jc <= scale sum_t e_tj |q_tc|
// (each "2 u" is 2 u + u^2 + 2^-20 below). These are worst cases, every rounding going the same way, and they
// are nearly reached where one key dominates a sum (T 5): measured worst |err| / bound (ATT_REPORT=1) out 0.87,
// dv 0.88, dk 0.43, dq 0.25. A wrong mask, a missing tile or a misplaced fragment moves an output by a whole
// term, far above 2 u of the sum of the terms' sizes. lse: fp32 scores and a sum of up to T terms, ~sqrt(T)
// 2^-24 relative in practice: |err| <= 1e-5 (1 + |lse|), measured 2.6e-7 (1 + |lse|).
#include <catch2/catch.hpp>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "attention.cuh"
#include "ref/ops.h"
#include "model_config.h"
#include "test/attention_naive.cuh"
#include "test/kernel_test_util.h"

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool SANITIZED = true;
#else
constexpr bool SANITIZED = false;
#endif

// The shapes here are tiny and the executor runs kernels on the calling thread, so OpenMP only hurts: between
// the reference's parallel regions libgomp's workers spin, taking the core the executor needs. Each test runs
// its OpenMP regions on one thread (the race build has no OpenMP).
struct SerialOpenMP {
#ifdef _OPENMP
    int saved = omp_get_max_threads();
    SerialOpenMP() { omp_set_num_threads(1); }
    ~SerialOpenMP() { omp_set_num_threads(saved); }
#endif
};

// Two bf16 roundings of at most u = 2^-8 each (2 u + u^2: the second rounds an already rounded value), plus
// 2^-20 for everything fp32: sums in the kernel, exp2f, and the fp32 reference's own error.
const double U = 1.0 / 256, ROUND = 2 * U + U * U + 1.0 / (1 << 20);

// The per-element error bounds of the top comment, and the exact lse, in double.
struct AttBounds {
    std::vector<double> out, lse, dqkv;  // (B, T, w), (B, h, T), (B, T, 3 w)
};

AttBounds attention_bounds(const std::vector<float>& qkv, const std::vector<float>& dout, int B, int T, int w, int h,
                           float scale) {
    const int hd = w / h;
    AttBounds r{std::vector<double>((size_t)B * T * w), std::vector<double>((size_t)B * h * T),
                std::vector<double>((size_t)B * T * 3 * w)};
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int hh = 0; hh < h; hh++) {
            auto q = [&](int t) { return &qkv[((size_t)b * T + t) * 3 * w + hh * hd]; };
            auto dy = [&](int t) { return &dout[((size_t)b * T + t) * w + hh * hd]; };
            auto bound = [&](int t, int part) { return &r.dqkv[((size_t)b * T + t) * 3 * w + part * w + hh * hd]; };
            std::vector<double> p(T), dp(T), A(hd);
            for (int t = 0; t < T; t++) {
                double mx = -INFINITY, sum = 0, D = 0, dD = 0;
                for (int j = 0; j <= t; j++) {
                    double s = 0, d = 0;
                    for (int c = 0; c < hd; c++) {
                        s += (double)q(t)[c] * q(j)[w + c];
                        d += (double)dy(t)[c] * q(j)[2 * w + c];
                    }
                    p[j] = s * scale, dp[j] = d;
                    mx = std::max(mx, p[j]);
                }
                for (int j = 0; j <= t; j++) sum += p[j] = std::exp(p[j] - mx);
                r.lse[((size_t)b * h + hh) * T + t] = mx + std::log(sum);
                std::fill(A.begin(), A.end(), 0.0);
                for (int j = 0; j <= t; j++) {
                    p[j] /= sum;
                    D += p[j] * dp[j];
                    for (int c = 0; c < hd; c++) A[c] += p[j] * std::fabs(q(j)[2 * w + c]);
                }
                for (int c = 0; c < hd; c++) {
                    r.out[((size_t)b * T + t) * w + hh * hd + c] = ROUND * A[c];
                    dD += ROUND * std::fabs(dy(t)[c]) * A[c];
                }
                for (int j = 0; j <= t; j++) {
                    const double e = ROUND * std::fabs(p[j] * (dp[j] - D)) + p[j] * dD;
                    for (int c = 0; c < hd; c++) {
                        bound(t, 0)[c] += scale * e * std::fabs(q(j)[w + c]);
                        bound(j, 1)[c] += scale * e * std::fabs(q(t)[c]);
                        bound(j, 2)[c] += ROUND * p[j] * std::fabs(dy(t)[c]);
                    }
                }
            }
        }
    return r;
}

// Checks |got - want| <= bound (+ a floor of 1e-30 for exact zeros); returns the worst ratio.
double check_bound(const std::vector<float>& got, const std::vector<float>& want, const std::vector<double>& bound,
                   const std::string& what) {
    REQUIRE(got.size() == want.size());
    size_t bad = 0, worst = 0;
    double worst_ratio = 0;
    for (size_t i = 0; i < got.size(); i++) {
        const double err = std::fabs((double)got[i] - want[i]);
        const double ratio = std::isfinite(got[i]) ? err / (bound[i] + 1e-30) : INFINITY;
        if (ratio > 1) bad++;
        if (ratio > worst_ratio || !(ratio == ratio)) worst_ratio = ratio, worst = i;
    }
    INFO(what << ": " << bad << " of " << got.size() << " outside the bound; worst at " << worst << ": got "
              << got[worst] << " want " << want[worst] << " bound " << bound[worst] << " (" << worst_ratio << " x)");
    CHECK(bad == 0);
    return worst_ratio;
}

// The flash kernels' outputs for one input, as they left the device.
struct AttOut {
    std::vector<bf16> out, dqkv;
    std::vector<float> lse;
};
AttOut run_flash(const std::vector<float>& qkv, const std::vector<float>& dout, int B, int T, int w, int h,
                 float scale) {
    const size_t N = (size_t)B * T;
    Dev<bf16> d_qkv(qkv), d_dout(dout), d_out(N * w), d_dqkv(N * 3 * w);
    Dev<float> lse((size_t)B * h * T), scratch((size_t)B * h * T);
    attention_forward(d_out.p, lse.p, d_qkv.p, B, T, w, h, scale, 0);
    attention_backward(d_dqkv.p, scratch.p, d_dout.p, d_qkv.p, d_out.p, lse.p, B, T, w, h, scale, 0);
    sync();
    return {d_out.raw(), d_dqkv.raw(), lse.get()};
}
std::vector<float> to_float(const std::vector<bf16>& v) { return std::vector<float>(v.begin(), v.end()); }

// The worst |got - want| / bound of one run, per output.
struct AttWorst {
    double out = 0, lse = 0, dq = 0, dk = 0, dv = 0;
    void merge(const AttWorst& o) {
        out = std::max(out, o.out), lse = std::max(lse, o.lse), dq = std::max(dq, o.dq), dk = std::max(dk, o.dk);
        dv = std::max(dv, o.dv);
    }
};
// ATT_REPORT=1 prints each test's worst ratios (the measured numbers quoted in the comments).
void report(const char* what, const AttWorst& w) {
    if (getenv("ATT_REPORT"))
        printf("%-28s worst error / bound: out %.3f lse %.3f dq %.3f dk %.3f dv %.3f\n", what, w.out, w.lse, w.dq, w.dk,
               w.dv);
}

// One shape against the reference: out, lse, dq, dk, dv within their bounds; optionally a second run compared
// bit for bit.
AttWorst check_attention(int B, int T, int w, int h, float scale, uint64_t seed, bool rerun = false) {
    const int hd = w / h;
    INFO("B=" << B << " T=" << T << " w=" << w << " h=" << h << " head_dim=" << hd << " scale=" << scale);
    const size_t N = (size_t)B * T;
    auto qkv = rand_bf16(N * 3 * w, seed, -2.0f, 2.0f), dout = rand_bf16(N * w, seed + 1);
    std::vector<float> out(N * w), att((size_t)B * h * T * T), dqkv(N * 3 * w);
    ref::attention_forward(out.data(), att.data(), qkv.data(), B, T, w, h, scale);
    ref::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, w, h, scale);
    const AttBounds bound = attention_bounds(qkv, dout, B, T, w, h, scale);
    const AttOut got = run_flash(qkv, dout, B, T, w, h, scale);

    AttWorst worst;
    worst.out = check_bound(to_float(got.out), out, bound.out, "out");
    std::vector<double> lse_bound(bound.lse.size());
    std::vector<float> lse_want(bound.lse.size());
    for (size_t i = 0; i < lse_want.size(); i++) {
        lse_want[i] = (float)bound.lse[i];
        lse_bound[i] = 1e-5 * (1 + std::fabs(bound.lse[i]));
    }
    worst.lse = check_bound(got.lse, lse_want, lse_bound, "lse");
    const std::vector<float> g = to_float(got.dqkv);
    double* parts[3] = {&worst.dq, &worst.dk, &worst.dv};
    for (int part = 0; part < 3; part++) {  // q, k, v separately: their magnitudes differ
        std::vector<float> gp, wp;
        std::vector<double> bp;
        for (size_t n = 0; n < N; n++)
            for (int c = 0; c < w; c++) {
                const size_t i = n * 3 * w + part * w + c;
                gp.push_back(g[i]), wp.push_back(dqkv[i]), bp.push_back(bound.dqkv[i]);
            }
        *parts[part] = check_bound(gp, wp, bp, part == 0 ? "dq" : part == 1 ? "dk" : "dv");
    }
    if (rerun) {
        const AttOut again = run_flash(qkv, dout, B, T, w, h, scale);
        CHECK(memcmp(again.out.data(), got.out.data(), got.out.size() * sizeof(bf16)) == 0);
        CHECK(memcmp(again.lse.data(), got.lse.data(), got.lse.size() * sizeof(float)) == 0);
        CHECK(memcmp(again.dqkv.data(), got.dqkv.data(), got.dqkv.size() * sizeof(bf16)) == 0);
    }
    return worst;
}

float scale_for(int hd, bool mup) { return mup ? 1.0f / hd : 1.0f / std::sqrt((float)hd); }

}  // namespace

// ------------------------------------------------------------------------------------------------------
// flash attention against the reference
// ------------------------------------------------------------------------------------------------------

TEST_CASE("flash attention matches the reference at every even head_dim from 2 to 272", "[attention]") {
    // Small T, so the whole sweep stays cheap; shapes rotate so the sweep also covers T = 1 with B = 3, T = 5,
    // 17 and 33 (within one tile, and across two and three tiles of the 256 and wide instances), 1 to 3 heads,
    // both scales. Under the sanitizers: head dims that cover every instance, copy width and padding.
    SerialOpenMP serial;
    const int Ts[4] = {17, 5, 33, 1};
    const std::set<int> sanitized = {2, 12, 20, 64, 66, 100, 128, 130, 200, 256, 258, 270};
    AttWorst worst;
    for (int hd = 2; hd <= 272; hd += 2) {
        if (SANITIZED && !sanitized.count(hd)) continue;
        const int i = hd / 2 - 1, T = Ts[i % 4], B = i % 4 == 3 ? 3 : 1, h = 1 + i % 3;
        worst.merge(check_attention(B, T, h * hd, h, scale_for(hd, i % 2), 100 + hd));
    }
    report("head_dim 2..272", worst);
}

TEST_CASE("flash attention with T not a multiple of any tile, several heads and B = 3 reruns bit for bit",
          "[attention]") {
    // T 130 is three query and key tiles of every instance (two of the 256 instance's dK/dV query tiles and
    // more), so both pipeline stages are reused and the causal skips and masks all run.
    SerialOpenMP serial;
    struct Shape {
        int B, T, h, hd;
    };
    const std::vector<Shape> all = {{3, 130, 2, 64},  {1, 130, 3, 128}, {3, 67, 1, 256},
                                    {1, 130, 2, 256}, {3, 17, 2, 72},   {1, 130, 1, 40},
                                    {2, 17, 2, 1024}, {1, 40, 1, 776},  {1, 33, 1, 520}};
    const std::vector<Shape> sanitized = {{2, 130, 1, 64}, {1, 130, 1, 128}, {1, 130, 1, 256}, {1, 40, 1, 1024}};
    AttWorst worst;
    for (Shape s : SANITIZED ? sanitized : all)
        worst.merge(check_attention(s.B, s.T, s.h * s.hd, s.h, scale_for(s.hd, s.B == 3), 7 + s.T, !SANITIZED));
    report("T 130, heads, B 3, wide", worst);
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
TEST_CASE("flash attention at T = 1024 with head_dim 64 and 256 (one head, B = 1)", "[attention]") {
    // 16 query tiles and 16 to 32 key tiles: the online softmax rescales many times, the sums run over 1024 terms.
    AttWorst worst;
    for (int hd : {64, 256}) worst.merge(check_attention(1, 1024, hd, 1, scale_for(hd, false), 11));
    report("T 1024", worst);
}
#endif

TEST_CASE("flash attention forward and backward at one small shape per instance (the bundle's compute-sanitizer run)",
          "[attention][sanitize]") {
    // Small enough for compute-sanitizer's racecheck on a GPU (the bundle's stage 3): every instance, several
    // heads, T over three tiles of the 64 instance, a padded head_dim, the wide instance's two windows.
    SerialOpenMP serial;
    AttWorst worst;
    for (int hd : {64, 72, 128, 256, 520})
        worst.merge(check_attention(hd == 64 ? 2 : 1, hd == 64 ? 200 : 40, 2 * hd, 2, scale_for(hd, false), 3 + hd));
    report("sanitizer shapes", worst);
}

TEST_CASE("flash attention agrees with the old per-row kernel (test/attention_naive.cuh)", "[attention]") {
    // Both compute from the same bf16 inputs; the per-row kernel keeps P and dS in fp32 and rounds each output
    // once (u |x|, itself within the bound), so the two differ by at most twice the flash kernel's bound.
    // (Under the sanitizers the first shape only: the per-row kernel is slow there at head_dim 776.)
    SerialOpenMP serial;
    struct Shape {
        int B, T, h, hd;
    };
    const std::vector<Shape> shapes = {{2, 37, 2, 96}, {1, 20, 1, 776}};
    for (size_t i = 0; i < (SANITIZED ? 1 : shapes.size()); i++) {
        const Shape s = shapes[i];
        const int w = s.h * s.hd;
        INFO("B=" << s.B << " T=" << s.T << " h=" << s.h << " head_dim=" << s.hd);
        const size_t N = (size_t)s.B * s.T;
        const float scale = scale_for(s.hd, false);
        auto qkv = rand_bf16(N * 3 * w, 5, -2.0f, 2.0f), dout = rand_bf16(N * w, 6);
        const AttOut got = run_flash(qkv, dout, s.B, s.T, w, s.h, scale);
        Dev<bf16> d_qkv(qkv), d_dout(dout), d_out(N * w), d_dqkv(N * 3 * w);
        Dev<float> lse((size_t)s.B * s.h * s.T), scratch((size_t)s.B * s.h * s.T);
        attention_naive_forward(d_out.p, lse.p, d_qkv.p, s.B, s.T, w, s.h, scale, 0);
        attention_naive_backward(d_dqkv.p, scratch.p, d_dout.p, d_qkv.p, lse.p, s.B, s.T, w, s.h, scale, 0);
        sync();
        AttBounds bound = attention_bounds(qkv, dout, s.B, s.T, w, s.h, scale);
        for (double& x : bound.out) x *= 2;
        for (double& x : bound.dqkv) x *= 2;
        check_bound(to_float(got.out), d_out.get(), bound.out, "out");
        check_bound(to_float(got.dqkv), d_dqkv.get(), bound.dqkv, "dqkv");
    }
}

TEST_CASE("flash attention handles every head_dim above 272 that a preset and schedule produce", "[attention]") {
    // Every preset with uniform or prism heads and uniform, x, v, lambda or 3 widths: head dims from 2 to 776.
    // Those up to 272 are in the sweep above; the rest run once here (B 1, T 5, one head; under the sanitizers
    // the largest only: the wide instance's structure does not change with hd).
    SerialOpenMP serial;
    std::set<int> hds;
    for (const Preset& p : presets())
        for (const char* heads : {"uniform", "prism"})
            for (const char* widths : {"uniform", "x", "v", "lambda", "3"}) {
                ModelSpec spec;
                spec.preset = p.name, spec.heads = heads, spec.widths = widths;
                std::vector<std::string> warnings;
                try {
                    for (const LayerSpec& l : build_config(spec, warnings).layers) hds.insert(l.head_dim());
                } catch (const ConfigError&) {  // combinations the schedule rules reject cannot be trained
                }
            }
    REQUIRE(hds.count(64) == 1);
    REQUIRE(hds.count(256) == 1);
    REQUIRE(*hds.rbegin() <= ATT_MAX_HEAD_DIM);
    AttWorst worst;
    for (int hd : hds)
        if (hd > 272 && (!SANITIZED || hd == *hds.rbegin()))
            worst.merge(check_attention(1, 5, hd, 1, scale_for(hd, false), 30 + hd));
    report("preset head dims > 272", worst);
}

// ------------------------------------------------------------------------------------------------------
// the executor's cp.async (cuda_common.cuh), which the kernels above stage their tiles with
// ------------------------------------------------------------------------------------------------------

namespace {
// The blocks of one attention launch in the order the hardware starts them (x fastest, then y), as the kernels
// decode them (att_block), each with its length in tiles of the other side: every (b h, window, tile) exactly once,
// and lengths that never grow along the launch.
template <class C> void check_launch_order(const AttShape& s, bool key_tiles, const char* kernel) {
    INFO(kernel << ": B=" << s.B << " T=" << s.T << " h=" << s.h << " head_dim=" << s.hd);
    const int tiles = key_tiles ? (s.T + C::BC - 1) / C::BC : (s.T + C::BR - 1) / C::BR;
    const int heads = key_tiles ? s.kv : s.h;
    const dim3 grid = att_grid(s, C::HD, tiles, heads);
    const int nwin = att_windows(s, C::HD), nqb = (s.T + C::BR - 1) / C::BR, nkb = (s.T + C::BC - 1) / C::BC;
    CHECK(grid.x == (unsigned)(s.B * heads * nwin));
    CHECK(grid.z == 1u);
    std::set<std::vector<int>> seen;
    int prev = 1 << 30;
    bool monotone = true;
    for (unsigned y = 0; y < grid.y; y++)
        for (unsigned x = 0; x < grid.x; x++) {
            const AttBlock b = att_block(x, y, s, C::HD, heads);
            seen.insert({b.bh, b.c0, b.rank});
            CHECK(b.b * heads + b.hh == b.bh);
            int len;  // key tiles a query block sees (forward, dQ); query blocks a key block sees (dK/dV)
            if (!key_tiles) {
                const int q0 = (nqb - 1 - b.rank) * C::BR;
                len = std::min(nkb, (q0 + C::BR - 1) / C::BC + 1);
            } else {
                len = nqb - b.rank * C::BC / C::BR;
            }
            monotone = monotone && len <= prev;
            prev = len;
        }
    CHECK(monotone);
    CHECK(seen.size() == (size_t)grid.x * grid.y);
    CHECK((int)seen.begin()->at(0) == 0);
    CHECK((int)seen.rbegin()->at(0) == s.B * heads - 1);
}
}  // namespace

TEST_CASE("attention blocks start longest first across the whole grid, not per head", "[attention]") {
    // What the hardware's start order (x, then y) makes of att_grid and att_block: the longest tile of every
    // (b, head, window) before any shorter one, so the grid's tail is short tiles. Shapes: several heads and B,
    // T no multiple of a tile, and the wide instance's windows.
    struct Shape {
        int B, T, h, hd;
    };
    for (Shape sh : {Shape{3, 1000, 5, 64}, Shape{2, 700, 3, 128}, Shape{2, 300, 2, 256}, Shape{1, 200, 2, 776}}) {
        const AttShape s = attention_shape(sh.B, sh.T, LayerSpec{sh.h * sh.hd, sh.h}, nullptr, nullptr);
        if (sh.hd <= 64) {
            check_launch_order<AttForward64>(s, false, "forward"), check_launch_order<AttDq64>(s, false, "dQ");
            check_launch_order<AttDkv64>(s, true, "dK/dV");
        } else if (sh.hd <= 128) {
            check_launch_order<AttForward128>(s, false, "forward"), check_launch_order<AttDq128>(s, false, "dQ");
            check_launch_order<AttDkv128>(s, true, "dK/dV");
        } else if (sh.hd <= 256) {
            check_launch_order<AttForward256>(s, false, "forward"), check_launch_order<AttDq256>(s, false, "dQ");
            check_launch_order<AttDkv256>(s, true, "dK/dV");
        } else {
            check_launch_order<AttForwardWide>(s, false, "forward"), check_launch_order<AttDqWide>(s, false, "dQ");
            check_launch_order<AttDkvWide>(s, true, "dK/dV");
        }
    }
}

namespace {
// Each thread copies 16 bytes (8 bf16) into shared memory, in two groups; reads happen at three points:
// before any wait, after waiting for all but the newest group, and after waiting for everything.
__global__ void cp_async_groups_kernel(float* seen, const bf16* src, int n_valid) {
    DYNAMIC_SHARED(bf16, tile);  // (2, 64 threads x 8)
    const int t = threadIdx.x;
    cp_async<16>(tile + 8 * t, src + 8 * t, true);
    cp_async_commit();
    cp_async<16>(tile + 512 + 8 * t, src + 512 + 8 * (t < n_valid ? t : 0), t < n_valid);  // the rest zero-filled
    cp_async_commit();
    seen[t] = __bfloat162float(tile[8 * t]);  // own copy, not yet waited for: still the poison
    cp_async_wait<1>();
    seen[64 + t] = __bfloat162float(tile[8 * t]);         // group 1 landed
    seen[128 + t] = __bfloat162float(tile[512 + 8 * t]);  // group 2 not yet
    cp_async_wait<0>();
    __syncthreads();
    seen[192 + t] = __bfloat162float(tile[512 + 8 * ((t + 1) % 64) + 1]);  // another thread's copy, after the barrier
}
__global__ void cp_async_small_kernel(float* out, const bf16* src) {
    DYNAMIC_SHARED(bf16, tile);
    const int t = threadIdx.x;  // 32 threads: 4-byte copies of bf16 pairs, 8-byte copies of quads
    cp_async<4>(tile + 2 * t, src + 2 * t, true);
    cp_async<8>(tile + 64 + 4 * t, src + 64 + 4 * t, true);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    for (int i = t; i < 192; i += 32) out[i] = __bfloat162float(tile[i]);
}
}  // namespace

TEST_CASE("cp.async copies land at the wait that retires their group, zero-filling invalid sources",
          "[executor][attention]") {
    std::vector<float> h(1024);
    for (int i = 0; i < 1024; i++) h[i] = (float)(i % 251);
    Dev<bf16> src(h);
    Dev<float> seen(256);
    LAUNCH(1, 64, 2048, 0, cp_async_groups_kernel)(seen.p, src.p, 48);
    sync();
    auto r = seen.get();
    for (int t = 0; t < 64; t++) {
        INFO("thread " << t);
#ifdef CUDA_CPU_EXECUTOR
        CHECK(std::isnan(r[t]));  // the executor lands copies only at the wait (hardware may be earlier)
        CHECK(std::isnan(r[128 + t]));
#endif
        CHECK(r[64 + t] == h[8 * t]);
        const int u = (t + 1) % 64;
        CHECK(r[192 + t] == (u < 48 ? h[512 + 8 * u + 1] : 0.0f));
    }
    Dev<float> out(192);
    LAUNCH(1, 32, 384, 0, cp_async_small_kernel)(out.p, src.p);
    sync();
    auto o = out.get();
    for (int i = 0; i < 192; i++) CHECK(o[i] == h[i]);
}
