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
// instance's column chunks: the races and out-of-bounds accesses they look for are properties of that structure, not
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
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "attention.cuh"
#include "ref/ops.h"
#include "model/spec.h"
#include "run/cost_model.h"
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
#else
    SerialOpenMP() {}  // nothing to set; user-provided, so that `SerialOpenMP serial;` is no unused variable
#endif
};

// Two bf16 roundings of at most u = 2^-8 each (2 u + u^2: the second rounds an already rounded value), plus
// 2^-20 for everything fp32: sums in the kernel, exp2f, and the fp32 reference's own error.
const double U = 1.0 / 256, ROUND = 2 * U + U * U + 1.0 / (1 << 20);

// The per-element error bounds of the top comment, and the exact lse, in double, for any KV grouping and window:
// the sums run over each query's visible keys, and a K/V head's dk, dv bounds add up over its group's query heads.
struct AttBounds {
    std::vector<double> out, lse, dqkv;  // (B, T, w), (B, h, T), (B, T, ld)
};

AttBounds attention_bounds(const std::vector<float>& qkv, const std::vector<float>& dout, int B, int T,
                           const ref::AttnShape& a, float scale) {
    const int hd = a.hd, h = a.h, w = a.w(), group = a.h / a.kv;
    const long ld = a.ld(), ko = w, vo = w + a.kw();
    AttBounds r{std::vector<double>((size_t)B * T * w), std::vector<double>((size_t)B * h * T),
                std::vector<double>((size_t)B * T * ld)};
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < a.kv; g++)
            for (int hh = g * group; hh < (g + 1) * group; hh++) {
                auto q = [&](int t) { return &qkv[((size_t)b * T + t) * ld + hh * hd]; };
                auto k = [&](int t) { return &qkv[((size_t)b * T + t) * ld + ko + g * hd]; };
                auto v = [&](int t) { return &qkv[((size_t)b * T + t) * ld + vo + g * hd]; };
                auto dy = [&](int t) { return &dout[((size_t)b * T + t) * w + hh * hd]; };
                auto bound = [&](int t, long col) { return &r.dqkv[((size_t)b * T + t) * ld + col]; };
                std::vector<double> p(T), dp(T), A(hd);
                for (int t = 0; t < T; t++) {
                    const int j0 = (int)a.first_key(t);
                    double mx = -INFINITY, sum = 0, D = 0, dD = 0;
                    for (int j = j0; j <= t; j++) {
                        double s = 0, d = 0;
                        for (int c = 0; c < hd; c++) {
                            s += (double)q(t)[c] * k(j)[c];
                            d += (double)dy(t)[c] * v(j)[c];
                        }
                        p[j] = s * scale, dp[j] = d;
                        mx = std::max(mx, p[j]);
                    }
                    for (int j = j0; j <= t; j++) sum += p[j] = std::exp(p[j] - mx);
                    r.lse[((size_t)b * h + hh) * T + t] = mx + std::log(sum);
                    std::fill(A.begin(), A.end(), 0.0);
                    for (int j = j0; j <= t; j++) {
                        p[j] /= sum;
                        D += p[j] * dp[j];
                        for (int c = 0; c < hd; c++) A[c] += p[j] * std::fabs(v(j)[c]);
                    }
                    for (int c = 0; c < hd; c++) {
                        r.out[((size_t)b * T + t) * w + hh * hd + c] = ROUND * A[c];
                        dD += ROUND * std::fabs(dy(t)[c]) * A[c];
                    }
                    for (int j = j0; j <= t; j++) {
                        const double e = ROUND * std::fabs(p[j] * (dp[j] - D)) + p[j] * dD;
                        for (int c = 0; c < hd; c++) {
                            bound(t, hh * hd)[c] += scale * e * std::fabs(k(j)[c]);
                            bound(j, ko + g * hd)[c] += scale * e * std::fabs(q(t)[c]);
                            bound(j, vo + g * hd)[c] += ROUND * p[j] * std::fabs(dy(t)[c]);
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
AttOut run_flash(const std::vector<float>& qkv, const std::vector<float>& dout, int B, int T, const LayerSpec& ls,
                 float scale) {
    const size_t N = (size_t)B * T;
    Dev<bf16> d_qkv(qkv), d_dout(dout), d_out(N * ls.width), d_dqkv(N * ls.qkv_rows());
    Dev<float> lse((size_t)B * ls.heads * T), scratch((size_t)B * ls.heads * T);
    attention_forward(d_out.p, lse.p, d_qkv.p, B, T, ls, scale, 0);
    attention_backward(d_dqkv.p, scratch.p, d_dout.p, d_qkv.p, d_out.p, lse.p, B, T, ls, scale, 0);
    sync();
    return {d_out.raw(), d_dqkv.raw(), lse.get()};
}
AttOut run_flash(const std::vector<float>& qkv, const std::vector<float>& dout, int B, int T, int w, int h,
                 float scale) {
    return run_flash(qkv, dout, B, T, LayerSpec{w, h}, scale);
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

// The kernel's outputs for one input against the reference's: out, lse, dq, dk, dv within their bounds.
AttWorst check_outputs(const AttOut& got, const std::vector<float>& qkv, const std::vector<float>& dout, int B, int T,
                       const LayerSpec& ls, float scale) {
    const ref::AttnShape a = ref::AttnShape::of(ls);
    const size_t N = (size_t)B * T;
    const long ld = a.ld();
    std::vector<float> out(N * a.w()), att((size_t)B * a.h * T * T), dqkv(N * ld);
    ref::attention_forward(out.data(), att.data(), qkv.data(), B, T, a, scale);
    ref::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, a, scale);
    const AttBounds bound = attention_bounds(qkv, dout, B, T, a, scale);

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
    const long cols[4] = {0, a.w(), a.w() + a.kw(), ld};
    for (int part = 0; part < 3; part++) {  // q, k, v separately: their magnitudes differ
        std::vector<float> gp, wp;
        std::vector<double> bp;
        for (size_t n = 0; n < N; n++)
            for (long c = cols[part]; c < cols[part + 1]; c++) {
                const size_t i = n * ld + c;
                gp.push_back(g[i]), wp.push_back(dqkv[i]), bp.push_back(bound.dqkv[i]);
            }
        *parts[part] = check_bound(gp, wp, bp, part == 0 ? "dq" : part == 1 ? "dk" : "dv");
    }
    return worst;
}

// One shape against the reference; optionally a second run compared bit for bit.
AttWorst check_attention(int B, int T, const LayerSpec& ls, float scale, uint64_t seed, bool rerun = false) {
    INFO("B=" << B << " T=" << T << " w=" << ls.width << " h=" << ls.heads << " kv=" << ls.kv()
              << " head_dim=" << ls.head_dim() << " window=" << ls.window << " scale=" << scale);
    const size_t N = (size_t)B * T;
    auto qkv = rand_bf16(N * ls.qkv_rows(), seed, -2.0f, 2.0f), dout = rand_bf16(N * ls.width, seed + 1);
    const AttOut got = run_flash(qkv, dout, B, T, ls, scale);
    const AttWorst worst = check_outputs(got, qkv, dout, B, T, ls, scale);
    if (rerun) {
        const AttOut again = run_flash(qkv, dout, B, T, ls, scale);
        CHECK(memcmp(again.out.data(), got.out.data(), got.out.size() * sizeof(bf16)) == 0);
        CHECK(memcmp(again.lse.data(), got.lse.data(), got.lse.size() * sizeof(float)) == 0);
        CHECK(memcmp(again.dqkv.data(), got.dqkv.data(), got.dqkv.size() * sizeof(bf16)) == 0);
    }
    return worst;
}
AttWorst check_attention(int B, int T, int w, int h, float scale, uint64_t seed, bool rerun = false) {
    return check_attention(B, T, LayerSpec{w, h}, scale, seed, rerun);
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
    // heads, T over three tiles of the 64 instance, a padded head_dim, the wide instance's two column chunks.
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
        AttBounds bound = attention_bounds(qkv, dout, s.B, s.T, ref::AttnShape::plain(w, s.h), scale);
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
// KV groups (GQA, MQA) and sliding windows
// ------------------------------------------------------------------------------------------------------

namespace {
LayerSpec att_spec(int h, int kv, int hd, int window) {
    LayerSpec ls{h * hd, h};
    ls.kv_heads = kv, ls.window = window;
    return ls;
}
}  // namespace

TEST_CASE("flash attention with KV groups and sliding windows matches the reference", "[attention]") {
    // GQA (kv = h / 2) and MQA (kv = 1); windows below a tile (3, 5, 17), not a multiple of one (40, 70, 100),
    // one tile exactly (64), and W >= T; head_dim 64, 128, the padded 96 and 72, 256 and the wide instance's 520;
    // T no multiple of any tile. At every instance some shape here skips key tiles in the forward and dQ kernels
    // and query tiles in the dK/dV kernel (e.g. T 300, W 40 at 64; T 130, W 33 at 128; T 130, W 20 at 256; T 40,
    // W 9 wide), and the dK/dV kernel's group loop runs over up to four query heads.
    SerialOpenMP serial;
    struct Shape {
        int B, T, h, kv, hd, W;
    };
    const std::vector<Shape> all = {{1, 130, 4, 2, 64, 5},   {2, 130, 4, 1, 64, 70},  {1, 130, 2, 1, 64, 0},
                                    {1, 200, 4, 2, 64, 64},  {1, 130, 4, 4, 64, 200}, {1, 300, 4, 1, 64, 40},
                                    {1, 130, 4, 2, 128, 33}, {1, 130, 2, 1, 128, 0},  {1, 150, 4, 1, 128, 100},
                                    {1, 130, 2, 1, 96, 17},  {3, 17, 4, 2, 72, 3},    {1, 67, 2, 1, 256, 40},
                                    {1, 130, 2, 2, 256, 20}, {1, 40, 2, 1, 520, 9}};
    const std::vector<Shape> sanitized = {
        {1, 130, 4, 2, 64, 5}, {1, 130, 2, 1, 128, 33}, {1, 67, 2, 1, 256, 40}, {1, 40, 2, 1, 520, 9}};
    AttWorst worst;
    for (Shape s : SANITIZED ? sanitized : all) {
        const AttWorst one =
            check_attention(s.B, s.T, att_spec(s.h, s.kv, s.hd, s.W), scale_for(s.hd, s.B == 2), 50 + s.T + s.W);
        const std::string what = "T " + std::to_string(s.T) + " h " + std::to_string(s.h) + " kv " +
                                 std::to_string(s.kv) + " hd " + std::to_string(s.hd) + " W " + std::to_string(s.W);
        report(what.c_str(), one);  // each shape's own worst ratios
        worst.merge(one);
    }
    report("KV groups, windows", worst);
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
// Not under the sanitizers (these run whole sequences several times; the test above covers the same structure).
TEST_CASE("flash attention with KV groups reruns bit for bit and equals its K/V copied per head", "[attention]") {
    // A group's query heads read one K/V head: out, lse and dQ must be exactly those of plain multi-head
    // attention over the same K/V repeated per query head (the same arithmetic); dK, dV of a K/V head are the
    // group's sum, checked against the reference above. A window >= T changes nothing at all, not one bit.
    SerialOpenMP serial;
    const int B = 1, T = 130, h = 4, hd = 64, w = h * hd;
    for (const auto& [kv, W] : std::initializer_list<std::pair<int, int>>{{2, 0}, {1, 50}}) {
        INFO("kv=" << kv << " window=" << W);
        const LayerSpec gqa = att_spec(h, kv, hd, W), full = att_spec(h, h, hd, W);
        const size_t N = (size_t)B * T;
        auto qkv = rand_bf16(N * gqa.qkv_rows(), 77 + kv, -2.0f, 2.0f), dout = rand_bf16(N * w, 78);
        std::vector<float> rep(N * full.qkv_rows());
        for (size_t n = 0; n < N; n++) {
            std::copy_n(&qkv[n * gqa.qkv_rows()], w, &rep[n * 3 * w]);
            for (int hh = 0; hh < h; hh++)
                for (int part = 1; part <= 2; part++)
                    std::copy_n(&qkv[n * gqa.qkv_rows() + w + (part - 1) * kv * hd + hh / (h / kv) * hd], hd,
                                &rep[n * 3 * w + part * w + hh * hd]);
        }
        const float scale = scale_for(hd, false);
        const AttOut a = run_flash(qkv, dout, B, T, gqa, scale), b = run_flash(rep, dout, B, T, full, scale);
        CHECK(memcmp(a.out.data(), b.out.data(), a.out.size() * sizeof(bf16)) == 0);
        CHECK(memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)) == 0);
        bool dq_same = true;
        for (size_t n = 0; n < N; n++)
            dq_same = dq_same && memcmp(&a.dqkv[n * gqa.qkv_rows()], &b.dqkv[n * 3 * w], w * sizeof(bf16)) == 0;
        CHECK(dq_same);
        const AttOut again = run_flash(qkv, dout, B, T, gqa, scale);
        CHECK(memcmp(again.dqkv.data(), a.dqkv.data(), a.dqkv.size() * sizeof(bf16)) == 0);
        if (W == 0) {  // the same input with a window of T
            const AttOut c = run_flash(qkv, dout, B, T, att_spec(h, kv, hd, T), scale);
            CHECK(memcmp(c.out.data(), a.out.data(), a.out.size() * sizeof(bf16)) == 0);
            CHECK(memcmp(c.lse.data(), a.lse.data(), a.lse.size() * sizeof(float)) == 0);
            CHECK(memcmp(c.dqkv.data(), a.dqkv.data(), a.dqkv.size() * sizeof(bf16)) == 0);
        }
    }
}

namespace {
// The rows [r0, r1) of a (rows, cols) matrix with columns [c0, c1), flattened.
std::vector<float> rows_of(const std::vector<float>& m, long cols, long r0, long r1, long c0, long c1) {
    std::vector<float> v;
    for (long r = r0; r < r1; r++)
        for (long c = c0; c < c1; c++) v.push_back(m[r * cols + c]);
    return v;
}
std::vector<double> rows_of(const std::vector<double>& m, long cols, long r0, long r1, long c0, long c1) {
    std::vector<double> v;
    for (long r = r0; r < r1; r++)
        for (long c = c0; c < c1; c++) v.push_back(m[r * cols + c]);
    return v;
}
}  // namespace

TEST_CASE("a window's skipped blocks are never read: NaN keys and queries outside it leave the rest exact",
          "[attention]") {
    // T 512, W 64, head_dim 64 (MQA: two query heads over one K/V head). Key j is visible to queries j .. j + 63.
    // (1) K and V of keys 0..63 are NaN. Every query block from row 128 on starts past them (its first query's
    //     window begins at key 65), so the forward and dQ kernels must skip their tile: out, lse and dQ of rows
    //     >= 128, and dK, dV of keys >= 128 (whose query blocks start at 128), stay finite and exact. Any read of
    //     the tile, even masked, would spread NaN (0 x NaN).
    // (2) Q and dO of queries 384..511 are NaN. A key block ending before key 384 - 64 - 64 never reaches them
    //     within the window, so the dK/dV kernel must skip those query blocks: dK, dV of keys < 256, and out,
    //     lse, dQ of rows < 384, stay finite and exact. Without the window the same input turns dK NaN: the
    //     poison reaches whatever is read.
    SerialOpenMP serial;
    const int B = 1, T = 512, h = 2, kv = 1, hd = 64, W = 64, w = h * hd;
    const LayerSpec ls = att_spec(h, kv, hd, W);
    const long ld = ls.qkv_rows();
    const ref::AttnShape a = ref::AttnShape::of(ls);
    const float scale = scale_for(hd, false);
    auto qkv = rand_bf16((size_t)T * ld, 91, -2.0f, 2.0f), dout = rand_bf16((size_t)T * w, 92);
    std::vector<float> out(T * w), att((size_t)h * T * T), dqkv(T * ld);
    ref::attention_forward(out.data(), att.data(), qkv.data(), B, T, a, scale);
    ref::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, a, scale);
    const AttBounds bound = attention_bounds(qkv, dout, B, T, a, scale);
    // Checks rows [r0, r1) of out and dq, lse, and keys [k0, k1) of dk, dv.
    auto check = [&](const AttOut& got, int r0, int r1, int k0, int k1) {
        const std::vector<float> g = to_float(got.dqkv), o = to_float(got.out);
        check_bound(rows_of(o, w, r0, r1, 0, w), rows_of(out, w, r0, r1, 0, w), rows_of(bound.out, w, r0, r1, 0, w),
                    "out");
        for (int hh = 0; hh < h; hh++) {
            std::vector<float> gl(got.lse.begin() + hh * T + r0, got.lse.begin() + hh * T + r1), wl;
            std::vector<double> bl;
            for (int t = r0; t < r1; t++)
                wl.push_back((float)bound.lse[hh * T + t]), bl.push_back(1e-5 * (1 + std::fabs(bound.lse[hh * T + t])));
            check_bound(gl, wl, bl, "lse");
        }
        check_bound(rows_of(g, ld, r0, r1, 0, w), rows_of(dqkv, ld, r0, r1, 0, w),
                    rows_of(bound.dqkv, ld, r0, r1, 0, w), "dq");
        check_bound(rows_of(g, ld, k0, k1, w, ld), rows_of(dqkv, ld, k0, k1, w, ld),
                    rows_of(bound.dqkv, ld, k0, k1, w, ld), "dk, dv");
    };
    const float nan = std::numeric_limits<float>::quiet_NaN();
    {
        INFO("NaN K and V of keys 0..63");
        auto bad = qkv;
        for (int j = 0; j < 64; j++) std::fill_n(&bad[j * ld + w], 2 * kv * hd, nan);
        check(run_flash(bad, dout, B, T, ls, scale), 128, T, 128, T);
    }
    {
        INFO("NaN Q and dO of queries 384..511");
        auto bad = qkv, bad_dout = dout;
        for (int t = 384; t < T; t++) std::fill_n(&bad[t * ld], w, nan), std::fill_n(&bad_dout[t * w], w, nan);
        check(run_flash(bad, bad_dout, B, T, ls, scale), 0, 384, 0, 256);
        const AttOut global = run_flash(bad, bad_dout, B, T, att_spec(h, kv, hd, 0), scale);
        CHECK(std::isnan((float)global.dqkv[w]));  // dK of key 0: every query block was read
    }
}

#endif

#if defined(CUDA_CPU_EXECUTOR) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
namespace {
// The (warp rows) x (key tile) products whose rows and keys (both < T) include a visible pair, found pair by pair:
// the fewest tiles a kernel with these tiles can compute. Independent of attention_span.h's tests.
long min_tiles(int T, int W, int rows, int keys) {
    long n = 0;
    for (int r0 = 0; r0 < T; r0 += rows)
        for (int k0 = 0; k0 < T; k0 += keys) {
            bool any = false;
            for (int i = r0; i < std::min(r0 + rows, T) && !any; i++)
                for (int j = k0; j < std::min(k0 + keys, T) && !any; j++) any = j <= i && (W == 0 || j > i - W);
            n += any;
        }
    return n;
}
}  // namespace

TEST_CASE("a window skips key blocks: the executor's tensor-core instruction counts equal the tiles visited",
          "[attention]") {
    // T 512, head_dim 64 (the 64 instances; hdp = HD = 64, so every n tile of a product runs), MQA over two query
    // heads, global and W 64. The forward and dQ compute a (16 MW rows) x (BC keys) product per tile a warp
    // visits; the dK/dV kernel a (16 MW keys) x (BR / QS queries) product per phase-A tile and a 16-query step
    // of dK, dV per phase-B step. att_visits (attention_span.h, also the cost model's) counts them by walking
    // the kernels' loops; here it must equal the fewest tiles that hold a visible pair (min_tiles), and the
    // mma instructions the executor counted must be exactly its tiles times each tile's instructions.
    SerialOpenMP serial;
    using F = AttForward64;
    using Q = AttDq64;
    using KV = AttDkv64;
    const int B = 1, T = 512, h = 2, kv = 1, hd = 64, RWF = 16 * F::MW, RWQ = 16 * Q::MW, RW = 16 * KV::MW;
    const int KG = KV::BC / RW, QS = KV::NW / KG, BRW = KV::BR / QS;
    const long fwd_tile = F::MW * (F::BC / 8) * (hd / 16) + (F::BC / 16) * (F::HD / 16) * 2 * F::MW;     // S, P V
    const long dq_tile = 2 * Q::MW * (Q::BC / 8) * (hd / 16) + (Q::BC / 16) * (Q::HD / 16) * 2 * Q::MW;  // S, dP, dQ
    const long dkv_a = 2 * KV::MW * (BRW / 8) * (hd / 16), dkv_b = 4 * KV::MW * (KV::HD / 16);  // S^T, dP^T; dV, dK
    const size_t N = (size_t)B * T;
    long fwd_mma[2], bwd_mma[2];
    for (int W : {0, 64}) {
        INFO("window " << W);
        const LayerSpec ls = att_spec(h, kv, hd, W);
        const AttVisits v = att_visits(hd, T, W);
        CHECK(v.fwd == min_tiles(T, W, RWF, F::BC));
        CHECK(v.dq == min_tiles(T, W, RWQ, Q::BC));
        CHECK(v.dkv_a == min_tiles(T, W, BRW, RW));  // rows: query slices, keys: key groups
        CHECK(v.dkv_b == min_tiles(T, W, 16, RW));
        auto qkv = rand_bf16(N * ls.qkv_rows(), 5, -2.0f, 2.0f), dout = rand_bf16(N * ls.width, 6);
        Dev<bf16> d_qkv(qkv), d_dout(dout), d_out(N * ls.width), d_dqkv(N * ls.qkv_rows());
        Dev<float> lse((size_t)B * h * T), scratch((size_t)B * h * T);
        const uint64_t m0 = cuda_cpu::warp_op_count(cuda_cpu::kMma);
        attention_forward(d_out.p, lse.p, d_qkv.p, B, T, ls, scale_for(hd, false), 0);
        sync();
        const uint64_t m1 = cuda_cpu::warp_op_count(cuda_cpu::kMma);
        attention_backward(d_dqkv.p, scratch.p, d_dout.p, d_qkv.p, d_out.p, lse.p, B, T, ls, scale_for(hd, false), 0);
        sync();
        const uint64_t m2 = cuda_cpu::warp_op_count(cuda_cpu::kMma);
        fwd_mma[W > 0] = (long)(m1 - m0), bwd_mma[W > 0] = (long)(m2 - m1);
        CHECK(fwd_mma[W > 0] == B * h * v.fwd * fwd_tile);
        CHECK(bwd_mma[W > 0] == B * h * (v.dq * dq_tile + v.dkv_a * dkv_a + v.dkv_b * dkv_b));
        if (getenv("ATT_REPORT"))
            printf(
                "T %d W %3d: forward %ld mma (%ld warp tiles, %ld key tiles loaded), backward %ld mma (dQ %ld, "
                "dK/dV %ld + %ld tiles, %ld query tiles loaded per head)\n",
                T, W, fwd_mma[W > 0], h * v.fwd, h * v.fwd_loaded, bwd_mma[W > 0], h * v.dq, h * v.dkv_a, h * v.dkv_b,
                v.dkv_loaded);
    }
    CHECK(fwd_mma[1] * 2 < fwd_mma[0]);  // W 64 of T 512: 32 rows and their 64-key window span 2 or 3 key tiles
    CHECK(bwd_mma[1] * 2 < bwd_mma[0]);
}
#endif

TEST_CASE("the cost model's attention FLOPs are the tiles the kernels visit; a 512 window at T 4096 (estimate)",
          "[attention]") {
    // attention_flops (run/cost_model.h) counts the tiles att_visits walks: at least the visible (query, key)
    // products, at most those plus the masked parts of one row of edge tiles per query (a tile's width, 128). The
    // saving of 124M with every layer local:512 at T 4096 (B 8) is an estimate of the roofline model
    // (ATT_REPORT=1 prints it).
    ModelSpec spec;
    spec.preset = "124M";
    std::vector<std::string> warnings;
    const ModelConfig global = build_config(spec, warnings);
    ModelConfig local = global;
    for (LayerSpec& l : local.layers) l.window = 512;
    const int T = 4096, B = 8;
    const LayerSpec& g = global.layers[0];
    const double per_pair = 2.0 * g.head_dim() * g.heads;  // one matmul's FLOPs per (query, key) product
    for (int W : {0, 512, 100}) {
        INFO("window " << W);
        LayerSpec ls = g;
        ls.window = W;
        double visible = 0;
        for (int t = 0; t < T; t++) visible += W ? std::min(t + 1, W) : t + 1;
        const AttentionFlops f = attention_flops(ls, T);
        CHECK(f.forward >= 2 * per_pair * visible);
        CHECK(f.forward <= 2 * per_pair * (visible + 128.0 * T));
        CHECK(f.backward >= 7 * per_pair * visible);
        CHECK(f.backward <= 7 * per_pair * (visible + 128.0 * T));
    }
    const RooflineGpu gpu;
    auto times = [&](const ModelConfig& c, double& attention, double& step) {
        attention = step = 0;
        for (const OpCost& o : step_ops(c, B, T, 1, false)) {
            step += op_expected(o, gpu);
            if (o.attention) attention += op_expected(o, gpu);
        }
    };
    double ag, sg, al, sl;
    times(global, ag, sg);
    times(local, al, sl);
    CHECK(al < ag / 3);  // 512 of 4096 keys per query, against 2048 on average
    CHECK(sl < sg);
    if (getenv("ATT_REPORT"))
        printf(
            "cost model (estimate), 124M, B %d, T %d: attention %.1f ms global, %.1f ms local:512 (-%.0f%%); step "
            "%.1f ms, %.1f ms (-%.0f%%)\n",
            B, T, 1e3 * ag, 1e3 * al, 100 * (1 - al / ag), 1e3 * sg, 1e3 * sl, 100 * (1 - sl / sg));
}

// ------------------------------------------------------------------------------------------------------
// the executor's cp.async (cuda_common.cuh), which the kernels above stage their tiles with
// ------------------------------------------------------------------------------------------------------

namespace {
// The blocks of one attention launch in the order the hardware starts them (x fastest, then y), as the kernels
// decode them (att_block), each with its length in tiles of the other side: every (b h, column chunk, tile) exactly once,
// and lengths that never grow along the launch.
template <class C> void check_launch_order(const AttShape& s, bool key_tiles, const char* kernel) {
    INFO(kernel << ": B=" << s.B << " T=" << s.T << " h=" << s.h << " head_dim=" << s.hd);
    const int tiles = key_tiles ? (s.T + C::BC - 1) / C::BC : (s.T + C::BR - 1) / C::BR;
    const int heads = key_tiles ? s.kv : s.h;
    const dim3 grid = att_grid(s, C::HD, tiles, heads);
    const int nchunk = att_col_chunks(s, C::HD), nqb = (s.T + C::BR - 1) / C::BR, nkb = (s.T + C::BC - 1) / C::BC;
    CHECK(grid.x == (unsigned)(s.B * heads * nchunk));
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
    // T no multiple of a tile, and the wide instance's column chunks.
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
