// test_gdn_chunk.cpp: gdn_chunk.cuh's forward of the chunked gated delta rule (o and the per-chunk states) against
// ref::gdn_delta_chunk_forward in double on the same bf16 inputs, at head dims 32, 48, 64, 128 and 256, B = 2, T 67
// and 130 (not multiples of the chunk), h 1 and 2; s_last against the recurrent form's state, and s0 against
// running a sequence's two halves back to back (split at a chunk boundary: the same bits); a rerun repeats bit for
// bit; the shapes refused (one line, before any launch) are exactly those outside hd 16..256, multiples of 8; on the
// executor, the mma instructions a forward runs are exactly those of the tiles on or below the diagonal of rows the
// chunk holds (gdn_forward_mma). On the CUDA-on-CPU executor under make test (nvcc: on a GPU).
//
// How the tolerances are set: a bound per element, computed in double along the kernels' own path (gdn_bounds), for
// what their bf16 roundings may do. q, k, v are bf16 values both sides see exactly; every other rounding moves a
// value by at most u = 2^-8 of itself (round to nearest, 8 significant bits). Writing |X| for elementwise absolute
// values and E for the bound on the carried state's error (0 at the start, or for s0):
//   W = bf16(T diag(beta e^G)) K, stored:     eW = (u |Tw| + f aTw) |K| + u |W|        (U likewise with diag(beta), V)
//     aT the substitution run on |A| (|T| <= aT, the sum over paths i > .. > m of the products of |A|). The prep
//     kernel forms T in 16-row blocks of ascending fmaf chains: within a diagonal block a path's product is rounded
//     once per row it descends (i - m), and each of the d blocks it crosses adds at most 16 (the outer sum's and
//     the diagonal block's roundings, less the rows the inner sum starts below), so at most 63 + 3 16 = 111
//     roundings of 2^-24: |dT| <= 111 2^-24 aT < f aT, f = 2^-17
//   V' = U - bf16(S) W^T, stored:             eV = eU + |W| (u |S| + E)^T + eW |S|^T + u |V'|
//   o = (e^G Q bf16(S)^T + bf16(M) V') / sqrt(hd), stored:
//                                             eo = (e^G |Q| (u |S| + E)^T + u |M| |V'| + |M| eV) / sqrt(hd) + u |o|
//   S1 = e^(G_L) S + bf16(V' d)^T K, d = e^(G_L - G):   E1 = e^(G_L) E + (d (eV + u |V'|))^T |K|
// plus 2^-20 of each sum of absolute terms (fp32 accumulation, expf). First order in u (the u^2 terms are below the
// 2^-20 slack at these sizes). These are worst cases, every rounding the same way; measured worst |err| / bound is
// printed: o 0.41 to 0.59, states 0.27 to 0.49 over the cases below (a row's roundings of beta and of q . k are
// shared by all its channels, so they do add up). A wrong mask, decay, fragment or chunk boundary
// moves an output by a whole term, far above u times the sum of the terms' sizes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gdn_chunk.cuh"
#include "ref/gdn.h"
#include "test/kernel_test_util.h"

namespace {

const double U_BF = 1.0 / 256, F_SUB = 1.0 / (1 << 17), F32 = 1.0 / (1 << 20), F24 = 1.0 / (1 << 24);

// One problem: qkv (N, 3w) with q and k L2-normalised then rounded to bf16, beta and g (N, h) from the gates.
struct Problem {
    int B, T, h, hd;
    std::vector<float> qkv, beta, g;
    int w() const { return h * hd; }
    long N() const { return (long)B * T; }
    int nc() const { return (T + 63) / 64; }
};
Problem make_problem(int B, int T, int h, int hd, uint64_t seed) {
    Problem p{B, T, h, hd, {}, {}, {}};
    const int w = h * hd, C = 3 * w;
    const long N = p.N();
    p.qkv = rand_bf16(N * C, seed);
    std::vector<float> r(N * h);
    ref::gdn_l2norm_forward(p.qkv.data(), C, r.data(), p.qkv.data(), C, N, h, hd);
    ref::gdn_l2norm_forward(p.qkv.data() + w, C, r.data(), p.qkv.data() + w, C, N, h, hd);
    for (float& x : p.qkv) x = float(bf16(x));
    // a_log in [-2, 0.5]: decays from ~0.97 a row to ~0.1, so that both a slow and a fast forgetting occur
    auto ba = rand_bf16(N * 2 * h, seed + 1, -3.0f, 3.0f), a_log = rand_bf16(h, seed + 2, -2.0f, 0.5f);
    auto dt_bias = rand_bf16(h, seed + 3);
    p.beta.resize(N * h), p.g.resize(N * h);
    ref::gdn_gates_forward(p.beta.data(), p.g.data(), ba.data(), a_log.data(), dt_bias.data(), N, h);
    return p;
}

// The exact outputs (double) of ref::gdn_delta_chunk_forward run from states s0 (null: zero), and the bounds of the
// top comment. o (N, w); states (B, h, nc, hd, hd); s_last (B, h, hd, hd).
struct Expected {
    std::vector<double> o, states, s_last, eo, estates, es_last;
};
// e0: null, or the bound on s0's own error (a state the kernel carried in).
Expected gdn_bounds(const Problem& p, const std::vector<double>* s0, const std::vector<double>* e0 = nullptr) {
    const int B = p.B, T = p.T, h = p.h, hd = p.hd, w = p.w(), ld = 3 * w, nc = p.nc(), C = 64;
    const long N = p.N(), hd2 = (long)hd * hd;
    Expected e;
    e.o.assign(N * w, 0), e.eo.assign(N * w, 0);
    e.states.assign((size_t)B * h * nc * hd2, 0), e.estates.assign(e.states.size(), 0);
    e.s_last.assign((size_t)B * h * hd2, 0), e.es_last.assign(e.s_last.size(), 0);
    const double u = U_BF, scale = 1.0 / std::sqrt((double)hd);
    for (int b = 0; b < B; b++)
        for (int j = 0; j < h; j++) {
            const long bh = (long)b * h + j;
            std::vector<double> S(hd2, 0), E(hd2, 0), aS(hd2, 0);  // the state, its error bound, sum of |terms|
            if (s0) std::copy_n(s0->begin() + bh * hd2, hd2, S.begin());
            if (e0) std::copy_n(e0->begin() + bh * hd2, hd2, E.begin());
            for (long x = 0; x < hd2; x++) aS[x] = std::fabs(S[x]);
            for (int c = 0; c < nc; c++) {
                const long n0 = (long)b * T + (long)c * C;
                const int L = std::min(C, T - c * C);
                for (long x = 0; x < hd2; x++) {
                    e.states[(bh * nc + c) * hd2 + x] = S[x];
                    e.estates[(bh * nc + c) * hd2 + x] = E[x] + F32 * aS[x];
                }
                auto q = [&](int i, int x) { return (double)p.qkv[(n0 + i) * ld + j * hd + x]; };
                auto k = [&](int i, int x) { return (double)p.qkv[(n0 + i) * ld + w + j * hd + x]; };
                auto v = [&](int i, int x) { return (double)p.qkv[(n0 + i) * ld + 2 * w + j * hd + x]; };
                std::vector<double> G(L), bt(L), dG(L);  // dG: the fp32 running sum's error bound
                for (int i = 0; i < L; i++) {
                    G[i] = (i ? G[i - 1] : 0.0) + p.g[(n0 + i) * h + j], bt[i] = p.beta[(n0 + i) * h + j];
                    dG[i] = (i ? dG[i - 1] : 0.0) + F24 * std::fabs(G[i]);
                }
                double gam = 0;  // relative error bound of A's entries (the decays through G, expf)
                for (int i = 0; i < L; i++) gam = std::max(gam, 2 * dG[i] + F24 * 4);
                std::vector<double> A(L * L, 0), Tm(L * L, 0), aT(L * L, 0);
                for (int i = 0; i < L; i++)
                    for (int l = 0; l < i; l++) {
                        double kk = 0;
                        for (int x = 0; x < hd; x++) kk += k(i, x) * k(l, x);
                        A[i * L + l] = bt[i] * std::exp(G[i] - G[l]) * kk;
                    }
                for (int i = 0; i < L; i++) {
                    for (int m = 0; m < i; m++) {
                        double t = 0, at = 0;
                        for (int l = m; l < i; l++)
                            t -= A[i * L + l] * Tm[l * L + m], at += std::fabs(A[i * L + l]) * aT[l * L + m];
                        Tm[i * L + m] = t, aT[i * L + m] = at;
                    }
                    Tm[i * L + i] = aT[i * L + i] = 1;
                }
                // A's error through T: |dT| <= aT |dA| aT <= gam aT |A| aT (first order)
                std::vector<double> X(L * L, 0), Y(L * L, 0);
                for (int i = 0; i < L; i++)
                    for (int m = 0; m < i; m++)
                        for (int l = m + 1; l <= i; l++) X[i * L + m] += aT[i * L + l] * std::fabs(A[l * L + m]);
                for (int i = 0; i < L; i++)
                    for (int m = 0; m < i; m++)
                        for (int l = m; l < i; l++) Y[i * L + m] += X[i * L + l] * aT[l * L + m];
                // W, U and their bounds (L, hd)
                std::vector<double> W(L * hd, 0), Uu(L * hd, 0), eW(L * hd), eU(L * hd);
                for (int i = 0; i < L; i++)
                    for (int x = 0; x < hd; x++) {
                        double sw = 0, su = 0, aw = 0, au = 0;
                        for (int l = 0; l <= i; l++) {
                            const double tw = Tm[i * L + l] * bt[l] * std::exp(G[l]), tu = Tm[i * L + l] * bt[l];
                            const double et = F_SUB * aT[i * L + l] + gam * Y[i * L + l];  // T's fp32 error
                            sw += tw * k(l, x), su += tu * v(l, x);
                            aw += ((u + dG[l]) * std::fabs(tw) + et * bt[l] * std::exp(G[l])) * std::fabs(k(l, x));
                            au += (u * std::fabs(tu) + et * bt[l]) * std::fabs(v(l, x));
                        }
                        W[i * hd + x] = sw, Uu[i * hd + x] = su;
                        eW[i * hd + x] = aw + u * std::fabs(sw), eU[i * hd + x] = au + u * std::fabs(su);
                    }
                // V' = U - W S^T and its bound (L, hd: rows i, value channels r)
                std::vector<double> Vp(L * hd), eV(L * hd);
                for (int i = 0; i < L; i++)
                    for (int r = 0; r < hd; r++) {
                        double ws = 0, ew = 0, aw = 0;
                        for (int x = 0; x < hd; x++) {
                            const double sv = S[r * hd + x];
                            ws += W[i * hd + x] * sv;
                            ew += std::fabs(W[i * hd + x]) * (u * std::fabs(sv) + E[r * hd + x]) +
                                  eW[i * hd + x] * std::fabs(sv);
                            aw += std::fabs(W[i * hd + x] * sv);
                        }
                        const double vp = Uu[i * hd + r] - ws;
                        Vp[i * hd + r] = vp;
                        eV[i * hd + r] =
                            eU[i * hd + r] + ew + u * std::fabs(vp) + F32 * (aw + std::fabs(Uu[i * hd + r]));
                    }
                // o
                for (int i = 0; i < L; i++) {
                    std::vector<double> M(i + 1);
                    for (int l = 0; l <= i; l++) {
                        double qk = 0;
                        for (int x = 0; x < hd; x++) qk += q(i, x) * k(l, x);
                        M[l] = qk * std::exp(G[i] - G[l]);
                    }
                    const double eg = std::exp(G[i]);
                    for (int r = 0; r < hd; r++) {
                        double qs = 0, eqs = 0, aqs = 0, mv = 0, emv = 0, amv = 0;
                        for (int x = 0; x < hd; x++) {
                            const double sv = S[r * hd + x];
                            qs += q(i, x) * sv;
                            eqs += std::fabs(q(i, x)) * (u * std::fabs(sv) + E[r * hd + x]);
                            aqs += std::fabs(q(i, x) * sv);
                        }
                        for (int l = 0; l <= i; l++) {
                            mv += M[l] * Vp[l * hd + r];
                            emv += std::fabs(M[l]) * ((u + dG[i] + dG[l]) * std::fabs(Vp[l * hd + r]) + eV[l * hd + r]);
                            amv += std::fabs(M[l] * Vp[l * hd + r]);
                        }
                        const double ov = scale * (eg * qs + mv);
                        const long at = (n0 + i) * w + j * hd + r;
                        e.o[at] = ov;
                        e.eo[at] =
                            scale * (eg * (eqs + dG[i] * aqs) + emv + F32 * (eg * aqs + amv)) + u * std::fabs(ov);
                    }
                }
                // S1 = e^(G_L) S + (V' d)^T K
                const double GL = G[L - 1], eL = std::exp(GL);
                for (int r = 0; r < hd; r++)
                    for (int x = 0; x < hd; x++) {
                        double s = 0, es = 0, as = 0;
                        for (int i = 0; i < L; i++) {
                            const double d = std::exp(GL - G[i]);
                            s += Vp[i * hd + r] * d * k(i, x);
                            es += d * (eV[i * hd + r] + (u + dG[L - 1] + dG[i]) * std::fabs(Vp[i * hd + r])) *
                                  std::fabs(k(i, x));
                            as += std::fabs(Vp[i * hd + r] * d * k(i, x));
                        }
                        const long at = r * hd + x;
                        S[at] = eL * S[at] + s;
                        E[at] = eL * (E[at] + dG[L - 1] * std::fabs(S[at] - s) / eL) + es + F32 * as;
                        aS[at] = eL * aS[at] + as;
                    }
            }
            for (long x = 0; x < hd2; x++) e.s_last[bh * hd2 + x] = S[x], e.es_last[bh * hd2 + x] = E[x] + F32 * aS[x];
        }
    return e;
}

// |got - want| <= bound for every element; returns the worst |err| / bound (printed) and |err| / max|want|.
struct Fit {
    double ratio = 0, rel = 0;
};
Fit check_bound(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& bound,
                const char* what) {
    REQUIRE(got.size() == want.size());
    double mx = 1e-300;
    for (double x : want) mx = std::max(mx, std::fabs(x));
    Fit f;
    size_t bad = 0, worst = 0;
    for (size_t i = 0; i < got.size(); i++) {
        const double err = std::fabs((double)got[i] - want[i]);
        const double ratio = std::isfinite(got[i]) ? err / (bound[i] + 1e-300) : INFINITY;
        if (ratio > 1) bad++;
        if (ratio > f.ratio || !(ratio == ratio)) f.ratio = ratio, worst = i;
        f.rel = std::max(f.rel, err / mx);
    }
    INFO(what << ": " << bad << " of " << got.size() << " outside the bound; worst at " << worst << ": got "
              << got[worst] << " want " << want[worst] << " bound " << bound[worst]);
    CHECK(bad == 0);
    return f;
}

// The kernel's outputs for a problem, from s0 (empty: null).
struct Got {
    std::vector<float> o, states, s_last;
};
Got run_forward(const Problem& p, const std::vector<float>& s0 = {}) {
    const int w = p.w(), C = 3 * w;
    const long N = p.N(), hd2 = (long)p.hd * p.hd;
    Dev<bf16> qkv(p.qkv), o(N * w);
    Dev<float> beta(p.beta), g(p.g), states((size_t)p.B * p.h * p.nc() * hd2), s_last((size_t)p.B * p.h * hd2);
    Dev<float> ds0(s0.empty() ? std::vector<float>(1) : s0);
    Dev<unsigned char> scratch(gdn_chunk_forward_scratch_bytes(p.B, p.T, p.h, p.hd));
    gdn_chunk_forward(o.p, w, states.p, qkv.p, qkv.p + w, qkv.p + 2 * w, C, beta.p, g.p, p.B, p.T, p.h, p.hd,
                      s0.empty() ? nullptr : ds0.p, s_last.p, scratch.p, 0);
    sync();
    return Got{o.get(), states.get(), s_last.get()};
}

// Rows [t0, t1) of every sequence (and their beta, g) as a problem of its own.
Problem slice(const Problem& p, int t0, int t1) {
    Problem s{p.B, t1 - t0, p.h, p.hd, {}, {}, {}};
    const int C = 3 * p.w();
    for (int b = 0; b < p.B; b++)
        for (int t = t0; t < t1; t++) {
            const long n = (long)b * p.T + t;
            s.qkv.insert(s.qkv.end(), p.qkv.begin() + n * C, p.qkv.begin() + (n + 1) * C);
            s.beta.insert(s.beta.end(), p.beta.begin() + n * p.h, p.beta.begin() + (n + 1) * p.h);
            s.g.insert(s.g.end(), p.g.begin() + n * p.h, p.g.begin() + (n + 1) * p.h);
        }
    return s;
}

struct Case {
    int hd, T, h;
};
// hd 48 runs on the 64-column instances (3 of 4 mma k steps); hd 40 pads its rows to 48 columns with zeros that
// only shared memory holds; 256 at h 1 (the executor's time: hd^2 per row)
const Case cases[] = {{32, 67, 2},  {32, 130, 1}, {40, 67, 1},   {48, 130, 2}, {64, 67, 1},
                      {64, 130, 2}, {128, 67, 2}, {128, 130, 1}, {256, 130, 1}};

}  // namespace

TEST_CASE("gdn_chunk_forward: o and the per-chunk states match ref::gdn_delta_chunk_forward within the bf16 bound",
          "[gdn_chunk]") {
    for (const Case& cs : cases) {
        const int B = 2, hd = cs.hd, T = cs.T, h = cs.h, w = h * hd;
        INFO("hd=" << hd << " T=" << T << " h=" << h << " B=" << B);
        const Problem p = make_problem(B, T, h, hd, 100 + hd + T);
        const Expected want = gdn_bounds(p, nullptr);
        {  // the bound's exact values are the reference's (in double, on the same inputs)
            std::vector<double> qkv(p.qkv.begin(), p.qkv.end()), beta(p.beta.begin(), p.beta.end()),
                g(p.g.begin(), p.g.end()), o(p.N() * w), states(want.states.size());
            ref::gdn_delta_chunk_forward(o.data(), w, states.data(), qkv.data(), qkv.data() + w, qkv.data() + 2 * w,
                                         3 * w, beta.data(), g.data(), B, T, ref::GdnShape{h, hd});
            double d = 0;
            for (size_t i = 0; i < o.size(); i++) d = std::max(d, std::fabs(o[i] - want.o[i]));
            for (size_t i = 0; i < states.size(); i++) d = std::max(d, std::fabs(states[i] - want.states[i]));
            CHECK(d < 1e-12);
        }
        const Got got = run_forward(p);
        const Fit fo = check_bound(got.o, want.o, want.eo, "o");
        const Fit fs = check_bound(got.states, want.states, want.estates, "states");
        const Fit fl = check_bound(got.s_last, want.s_last, want.es_last, "s_last");
        printf(
            "gdn_chunk_forward hd %3d T %3d h %d: max err / max|want|: o %.2e  states %.2e  s_last %.2e; "
            "worst err / bound: o %.2f  states %.2f  s_last %.2f\n",
            hd, T, h, fo.rel, fs.rel, fl.rel, fo.ratio, fs.ratio, fl.ratio);
    }
}

TEST_CASE("gdn_chunk_forward: s_last is the recurrent state, s0 continues a sequence (two halves back to back)",
          "[gdn_chunk]") {
    for (int hd : {32, 128}) {
        const int B = 2, T = 130, h = 2, w = h * hd;
        const long hd2 = (long)hd * hd;
        const Problem p = make_problem(B, T, h, hd, 200 + hd);
        const Got whole = run_forward(p);
        {  // a rerun gives the same bits
            const Got again = run_forward(p);
            CHECK((again.o == whole.o && again.states == whole.states && again.s_last == whole.s_last));
        }
        // Split at a chunk boundary: the second half runs the whole run's chunks 1 and 2 from the same fp32 state,
        // so every output is the same bits.
        {
            INFO("hd=" << hd << " split at 64");
            const Problem a = slice(p, 0, 64), b = slice(p, 64, T);
            const Got ga = run_forward(a), gb = run_forward(b, ga.s_last);
            const int nc = p.nc();
            bool same = gb.s_last == whole.s_last;
            for (long bh = 0; bh < B * h; bh++) {
                same = same && std::equal(ga.s_last.begin() + bh * hd2, ga.s_last.begin() + (bh + 1) * hd2,
                                          whole.states.begin() + (bh * nc + 1) * hd2);
                for (int c = 0; c < 2; c++)
                    same = same && std::equal(gb.states.begin() + (bh * 2 + c) * hd2,
                                              gb.states.begin() + (bh * 2 + c + 1) * hd2,
                                              whole.states.begin() + (bh * nc + 1 + c) * hd2);
            }
            for (int bb = 0; bb < B; bb++)
                same = same &&
                       std::equal(gb.o.begin() + (long)bb * (T - 64) * w, gb.o.begin() + (long)(bb + 1) * (T - 64) * w,
                                  whole.o.begin() + ((long)bb * T + 64) * w);
            CHECK(same);
        }
        // Split mid-chunk (67): s_last against the exact state after 67 rows, and the second half from it against
        // the reference run from that exact state (the bound carries s_last's error bound in as E).
        {
            INFO("hd=" << hd << " split at 67");
            const Problem a = slice(p, 0, 67), b = slice(p, 67, T);
            const Got ga = run_forward(a);
            const Expected wa = gdn_bounds(a, nullptr);
            const Fit fl = check_bound(ga.s_last, wa.s_last, wa.es_last, "s_last after 67 rows");
            // the exact state is the recurrent form's: S *= e^g; S += beta (v - S k) k^T, row by row
            double d = 0;
            for (int bb = 0; bb < B; bb++)
                for (int j = 0; j < h; j++) {
                    std::vector<double> S(hd2, 0), dl(hd);
                    for (int t = 0; t < 67; t++) {
                        const float* row = &a.qkv[((long)bb * 67 + t) * 3 * w + j * hd];
                        const double eg = std::exp((double)a.g[((long)bb * 67 + t) * h + j]);
                        const double bt = a.beta[((long)bb * 67 + t) * h + j];
                        for (double& x : S) x *= eg;
                        for (int r = 0; r < hd; r++) {
                            double sk = 0;
                            for (int x = 0; x < hd; x++) sk += S[r * hd + x] * row[w + x];
                            dl[r] = bt * (row[2 * w + r] - sk);
                        }
                        for (int r = 0; r < hd; r++)
                            for (int x = 0; x < hd; x++) S[r * hd + x] += dl[r] * row[w + x];
                    }
                    for (long x = 0; x < hd2; x++)
                        d = std::max(d, std::fabs(S[x] - wa.s_last[((long)bb * h + j) * hd2 + x]));
                }
            CHECK(d < 1e-12);
            // the second half from the kernel's s_last: the reference from the exact state, the bound carrying
            // s_last's bound in as the state's error
            const Got gb = run_forward(b, ga.s_last);
            const Expected wb = gdn_bounds(b, &wa.s_last, &wa.es_last);
            const Fit fo = check_bound(gb.o, wb.o, wb.eo, "o of the second half");
            printf("gdn_chunk_forward hd %3d split at 67: worst err / bound: s_last %.2f  o after s0 %.2f\n", hd,
                   fl.ratio, fo.ratio);
        }
    }
}

TEST_CASE("gdn_chunk_forward refuses the shapes it has no kernel for, and only those", "[gdn_chunk]") {
    alignas(16) static char buf[16];
    auto why = [&](int hd, long ld, const void* p) {
        const char* r = gdn_chunk_refusal(2, 67, 1, hd, ld, hd, p, p, p, p, p);
        return std::string(r ? r : "");
    };
    for (int hd = 16; hd <= 256; hd += 8) CHECK(why(hd, 3 * hd, buf) == "");
    for (int hd : {8, 36, 44, 264, 512}) {
        INFO("hd=" << hd);
        CHECK(why(hd, 3 * hd, buf) == "head_dim must be a multiple of 8 in 16..256");
    }
    CHECK(why(64, 190, buf) == "the q/k/v row stride must be a multiple of 8, o's of 2");
    CHECK(why(64, 192, buf + 2) == "q, k, v and the scratch must be 16-byte aligned, o 4-byte");
}

#ifdef CUDA_CPU_EXECUTOR
namespace {
// The mma instructions (16 x 8 outputs, one k step of 16) gdn_chunk_forward runs for one (sequence, head), from the
// 16 x 16 tiles its warps visit; nk = hdp / 16 k steps. In a chunk of L rows the warps w < a = ceil(L / 16) hold a row
// of it (the others compute nothing in prep and output) and visit the w + 1 tiles left of and on their diagonal:
//   prep    K K^T 2 (w + 1) nk, W and U 2 x 2 (w + 1) nk
//   state   per 16 rows of S (nk of them): S W^T 8 nk, the update 4 x 2 nk, whatever L
//   output  per block of OC value channels (n = min(OC, hdp - r0) of them real): Q S0^T nk OC / 8 (every column),
//           Q K^T 2 (w + 1) nk, P V' (w + 1) n / 8
long gdn_forward_mma(int hd, int T) {
    const int hdp = (hd + 15) / 16 * 16, nk = hdp / 16, oc = gdn_chunk_output_cols(hd);
    long m = 0;
    for (int t0 = 0; t0 < T; t0 += 64) {
        const int a = (std::min(64, T - t0) + 15) / 16;
        for (int w = 0; w < a; w++) m += 6L * (w + 1) * nk;
        m += 16L * nk * nk;
        for (int r0 = 0; r0 < hdp; r0 += oc) {
            const int n = std::min(oc, hdp - r0);
            for (int w = 0; w < a; w++) m += (long)nk * oc / 8 + 2L * (w + 1) * nk + (w + 1) * n / 8;
        }
    }
    return m;
}
}  // namespace

TEST_CASE("gdn_chunk_forward runs the mma of the lower-triangular tiles of the chunk's rows only", "[gdn_chunk]") {
    // T 64: one whole chunk; 130: two and a chunk of 2 rows (one warp's tiles); 100: a last chunk of 36 rows (three
    // warps). hd 48 and 192 pad or split the value channels (the output's second block of 64 of 128 columns).
    for (const Case& cs :
         {Case{64, 64, 1}, Case{64, 130, 2}, Case{128, 64, 1}, Case{128, 130, 1}, Case{48, 100, 1}, Case{192, 67, 1}}) {
        const int B = 2;
        INFO("hd=" << cs.hd << " T=" << cs.T << " h=" << cs.h);
        const Problem p = make_problem(B, cs.T, cs.h, cs.hd, 300 + cs.hd + cs.T);
        const uint64_t m0 = cuda_cpu::warp_op_count(cuda_cpu::kMma);
        run_forward(p);
        const long got = (long)(cuda_cpu::warp_op_count(cuda_cpu::kMma) - m0);
        CHECK(got == (long)B * cs.h * gdn_forward_mma(cs.hd, cs.T));
        printf("gdn_chunk_forward hd %3d T %3d: %ld mma a (sequence, head)\n", cs.hd, cs.T, got / (B * cs.h));
    }
}
#endif
