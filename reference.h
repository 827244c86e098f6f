// reference.h: the fp32 CPU reference of the whole Prism model (uniform, Prism head schedules and Xformer
// width schedules are one code path). It is the oracle every GPU kernel and test is checked against, and the
// CPU training path. Everything is templated on the scalar type S: float for training, double for the
// finite-difference gradient checks in test/test_reference.cpp.
//
// What it computes (ModelConfig and the flat parameter layout come from schedule.h):
//   x = embed(tokens)                       stream (B, T, D): coords [0, d) = wte[token], [d, D) = 0
//   for each layer l (w = w_l, h = h_l, hd = w / h, hid = hidden_l):
//     x[:, :w] += wo   . attn(rope(wqkv . norm1(x[:, :w])))       causal, h heads of head_dim hd
//     x[:, :w] += wproj. swiglu(wfc . norm2(x[:, :w]))              coords [w, D) bypass the layer
//   logits = normf(x[:, :Df])[:, :d] . Wout^T  (Wout = wte tied, lm_head untied), loss = mean CE over
//   positions whose target >= 0 (target < 0 is masked).
// Then AdamW, gradient-norm clipping and the learning-rate schedule (the last section).
//
// Conventions (the same in every backward below):
//   * Activations are ASSIGNED (=): a forward op owns its output buffer.
//   * Parameter gradients are ACCUMULATED (+=): a micro-batch adds its share, so gradient accumulation is
//     "zero_grad, then forward/backward per micro-batch with grad_scale = 1 / n_micro", and a tied wte
//     collects both its embedding and its output-head gradient without a special case.
//   * Input gradients are ACCUMULATED (+=) only where the input is the residual stream (norms, embedding):
//     the stream has two consumers (the skip path and the layer), so its gradient is the sum of both.
//     Every other activation has one consumer, so its gradient is ASSIGNED (=): no memset needed, and a stale
//     value from the previous micro-batch can never leak in.
//   * Deterministic regardless of the number of OpenMP threads: every output element is computed by one
//     thread with a fixed order of operations; reductions over tokens (weight gradients) run in a fixed
//     serial order per output element (the matmul sums over tokens in fixed blocks of GEMM_KC = 256 tokens,
//     block partial sums added in order). No atomics, no per-thread partial sums. Short dot products
//     (attention) use `omp simd` reductions: a lane split fixed at compile time, the same for any thread count.
//   * fp32 means fp32 storage and arithmetic, with two deliberate exceptions: sums over V (log-sum-exp) and
//     global norms accumulate in double, and float softmax rows use a vectorised exp (< 3e-7 relative error).
//
// Sizes: B batch, T sequence, d embedding width, w = w_l layer width, h = h_l heads, hd = head_dim = w / h,
// hid = hidden_l (SwiGLU intermediate), D = cfg.D() residual stream width, Df = cfg.Df() final-norm width,
// V vocabulary, L layers, N = B * T rows. Matrices are row-major (out, in) and y = x W^T.
// Not here: bf16, padded vocabulary (the GPU pads V to Vp; this file never does), KV caches, sampling.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "schedule.h"

namespace ref {

// ======================================================================================================
// matmul: a packed, register-blocked GEMM (the only place the reference multiplies matrices)
// ======================================================================================================
// C (M, N) (= or +=) A (M, K) . B (K, N) with A(i, k) = A[i * ars + k * acs] and B(k, j) = B[k * brs + j * bcs],
// so transposes are just strides. Blocks of B (KC x NC) are packed into NR-column panels (zero padded at the
// edges), blocks of A (MC x KC) into MR-row panels unless A's rows are already contiguous in k, and an
// MR x NR microkernel keeps its tile of C in registers.
// Why GCC vector extensions: without -ffast-math GCC will not vectorise a float reduction, and the plain
// loop version of this microkernel ran at 2 GFLOP/s against 70 for this one (one Zen 3 core).
// Determinism: an element of C is the sum over K in blocks of KC (each block summed in order of k, then added
// to C); MC and NC only decide which thread computes which tile, never the arithmetic, so they may adapt to
// the thread count while KC is a fixed constant.
constexpr int GEMM_MR = 6, GEMM_KC = 256, GEMM_NC = 256;

// Loops over less work than this run on one thread (`omp parallel if`): waking the team costs microseconds,
// more than a small op, and the finite-difference tests run thousands of tiny forwards. Results do not
// depend on it (nothing depends on the thread count).
constexpr long OMP_MIN_WORK = 4096;

template <typename S>
struct Simd {
    typedef S type __attribute__((vector_size(32)));  // 8 floats or 4 doubles (one AVX register)
    static constexpr int lanes = 32 / sizeof(S);
};

// C[0:mr, 0:nr] (= or +=) A (mr rows, kc) . Bp (kc, NR panel); NR = two registers of S. A is read in place,
// A(i, k) = A[i * ars + k * acs] (rows past mr re-read row mr - 1; their results are dropped).
template <typename S>
inline void gemm_microkernel(int kc, const S* __restrict A, long ars, long acs, const S* __restrict Bp,
                             S* __restrict C, long ldc, int mr, int nr, bool overwrite) {
    typedef typename Simd<S>::type Vs;
    constexpr int Ln = Simd<S>::lanes, NR = 2 * Ln, MR = GEMM_MR;
    const S* a[MR];
    for (int i = 0; i < MR; i++) a[i] = A + std::min(i, mr - 1) * ars;
    Vs acc[MR][2] = {};
    for (int k = 0; k < kc; k++) {
        Vs b0, b1;
        std::memcpy(&b0, Bp + k * NR, sizeof(Vs));
        std::memcpy(&b1, Bp + k * NR + Ln, sizeof(Vs));
        for (int i = 0; i < MR; i++) {
            const S ai = a[i][k * acs];
            acc[i][0] += ai * b0;
            acc[i][1] += ai * b1;
        }
    }
    if (overwrite)
        for (int i = 0; i < mr; i++)
            for (int j = 0; j < nr; j++) C[i * ldc + j] = acc[i][j / Ln][j % Ln];
    else
        for (int i = 0; i < mr; i++)
            for (int j = 0; j < nr; j++) C[i * ldc + j] += acc[i][j / Ln][j % Ln];
}

// Packs rows [0, m) x k [0, kc) of X(r, k) = X[r * rs + k * ks] into R-row panels: P[r0 * kc + k * R + (r - r0)],
// zero padded to a multiple of R rows.
template <typename S, int R>
void pack_panels(S* P, const S* X, long rs, long ks, long m, long kc) {
    for (long r0 = 0; r0 < m; r0 += R) {
        S* dst = P + r0 * kc;
        const S* src = X + r0 * rs;
        const long nr = std::min<long>(R, m - r0);
        if (nr == R && rs == 1)  // rows contiguous: R consecutive values per k
            for (long k = 0; k < kc; k++)
                for (int i = 0; i < R; i++) dst[k * R + i] = src[k * ks + i];
        else if (nr == R)
            for (long k = 0; k < kc; k++)
                for (int i = 0; i < R; i++) dst[k * R + i] = src[i * rs + k * ks];
        else
            for (long k = 0; k < kc; k++)
                for (int i = 0; i < R; i++) dst[k * R + i] = i < nr ? src[i * rs + k * ks] : S(0);
    }
}

template <typename S>
void gemm(long M, long N, long K, const S* A, long ars, long acs, const S* B, long brs, long bcs, S* C, long ldc,
          bool accumulate) {
    constexpr int MR = GEMM_MR, NR = 2 * Simd<S>::lanes, KC = GEMM_KC, NC = GEMM_NC;
    // Tile rows MC: as many as keep the A block (MC x KC) within ~256 KB of L2 (fewer tiles repack B less),
    // and when N gives too few column tiles, an M split into a multiple of the thread count so no thread idles.
    const long nt = (N + NC - 1) / NC, threads = omp_get_max_threads();
    const long mc_max = std::max<long>(4, 262144 / (std::max<long>(1, std::min<long>(K, KC)) * sizeof(S)) / MR) * MR;
    long MC = std::min(mc_max, (M + MR - 1) / MR * MR);
    if (nt < 4 * threads) {
        long parts = threads;
        while ((M + parts - 1) / parts > mc_max) parts += threads;
        MC = std::max<long>(MR, ((M + parts - 1) / parts + MR - 1) / MR * MR);
    }
    const long mt = (M + MC - 1) / MC;
#pragma omp parallel if (M * N * K >= 32 * OMP_MIN_WORK)
    {
        // this thread's packed blocks, kept between calls (a fresh 450 KB vector per call cost page faults)
        static thread_local std::vector<S> Ap, Bp;
        Ap.resize(std::max<size_t>(Ap.size(), (size_t)MC * KC));
        Bp.resize(std::max<size_t>(Bp.size(), (size_t)KC * NC));
#pragma omp for schedule(dynamic, 1)
        for (long tile = 0; tile < mt * nt; tile++) {
            const long i0 = (tile / nt) * MC, j0 = (tile % nt) * NC;
            const long mc = std::min(MC, M - i0), nc = std::min<long>(NC, N - j0);
            if (K == 0 && !accumulate)
                for (long i = 0; i < mc; i++) std::fill_n(C + (i0 + i) * ldc + j0, nc, S(0));
            for (long k0 = 0; k0 < K; k0 += KC) {
                const long kc = std::min<long>(KC, K - k0);
                // A rows contiguous in k are read in place (6 streams; packing them cost more than it saved),
                // anything else (the transposed dy of a weight gradient) is packed into MR-row panels
                const bool pack_a = acs != 1;
                if (pack_a) pack_panels<S, MR>(Ap.data(), A + i0 * ars + k0 * acs, ars, acs, mc, kc);
                pack_panels<S, NR>(Bp.data(), B + j0 * bcs + k0 * brs, bcs, brs, nc, kc);
                for (long jp = 0; jp < nc; jp += NR)  // B panel stays in L1 while the A block streams from L2
                    for (long ip = 0; ip < mc; ip += MR)
                        gemm_microkernel<S>((int)kc, pack_a ? Ap.data() + ip * kc : A + (i0 + ip) * ars + k0,
                                            pack_a ? 1 : ars, pack_a ? MR : 1, Bp.data() + jp * kc,
                                            C + (i0 + ip) * ldc + j0 + jp, ldc, (int)std::min<long>(MR, mc - ip),
                                            (int)std::min<long>(NR, nc - jp), !accumulate && k0 == 0);
            }
        }
    }
}

// y (N, out) = x (N, in) . W^T, W (out, in). x rows have stride ldx, y rows stride ldy.
template <typename S>
void matmul_forward(S* y, long ldy, const S* x, long ldx, const S* W, long N, int in, int out) {
    gemm<S>(N, out, in, x, ldx, 1, W, 1, in, y, ldy, false);
}

// dx (N, in) = dy . W (assigned; skipped when dx is null), dW (out, in) += dy^T . x (summed over the N rows).
template <typename S>
void matmul_backward(S* dx, long lddx, S* dW, const S* dy, long lddy, const S* x, long ldx, const S* W, long N,
                     int in, int out) {
    if (dx) gemm<S>(N, in, out, dy, lddy, 1, W, in, 1, dx, lddx, false);
    gemm<S>(out, in, N, dy, 1, lddy, x, ldx, 1, dW, in, true);
}

// ======================================================================================================
// token embedding
// ======================================================================================================
// x (N, D): row n = [wte[tokens[n]] (d) | zeros (D - d)].
template <typename S>
void embedding_forward(S* x, const int* tokens, const S* wte, long N, int d, int D) {
#pragma omp parallel for if (N * D >= OMP_MIN_WORK)
    for (long n = 0; n < N; n++) {
        std::copy_n(wte + (size_t)tokens[n] * d, d, x + n * D);
        std::fill(x + n * D + d, x + (n + 1) * D, S(0));
    }
}

// dwte (V, d) += dx[:, :d] scattered by token. Threads own column chunks and walk the tokens in order, so
// repeated tokens add in a fixed order.
template <typename S>
void embedding_backward(S* dwte, const S* dx, long ldx, const int* tokens, long N, int d) {
    const int CH = 16;
#pragma omp parallel for if (N * d >= OMP_MIN_WORK)
    for (int c0 = 0; c0 < d; c0 += CH)
        for (long n = 0; n < N; n++) {
            S* g = dwte + (size_t)tokens[n] * d;
            for (int c = c0; c < std::min(d, c0 + CH); c++) g[c] += dx[n * ldx + c];
        }
}

// ======================================================================================================
// LayerNorm / RMSNorm over the leading slice [0, w) of rows of stride ldx
// ======================================================================================================
// LayerNorm: y = (x - mean) * rstd * g + b, rstd = 1 / sqrt(var + eps) (biased variance).
// RMSNorm:   y = x * rstd * g,             rstd = 1 / sqrt(mean(x^2) + eps); mean is stored as 0.
// out (N, w) compact; mean, rstd (N) saved for the backward. b is ignored for RMSNorm (may be null).
template <typename S>
void norm_forward(NormType type, S* out, S* mean, S* rstd, const S* x, long ldx, const S* g, const S* b, long N,
                  int w, double eps) {
#pragma omp parallel for if (N * w >= OMP_MIN_WORK)
    for (long n = 0; n < N; n++) {
        const S* xr = x + n * ldx;
        S m = 0;
        if (type == NormType::LayerNorm) {
            for (int c = 0; c < w; c++) m += xr[c];
            m /= w;
        }
        S v = 0;
        for (int c = 0; c < w; c++) v += (xr[c] - m) * (xr[c] - m);
        S r = S(1) / std::sqrt(v / w + S(eps));
        S* y = out + n * w;
        for (int c = 0; c < w; c++) y[c] = (xr[c] - m) * r * g[c] + (type == NormType::LayerNorm ? b[c] : S(0));
        mean[n] = m;
        rstd[n] = r;
    }
}

// dx[:, :w] += d/dx, dg += sum_n dout * xhat, db += sum_n dout (LayerNorm only), with xhat = (x - mean) * rstd.
// dx (N, ldx) is the residual stream gradient (accumulated); dout (N, w) compact.
template <typename S>
void norm_backward(NormType type, S* dx, long lddx, S* dg, S* db, const S* dout, const S* x, long ldx, const S* mean,
                   const S* rstd, const S* g, long N, int w) {
    const bool ln = type == NormType::LayerNorm;
#pragma omp parallel for if (N * w >= OMP_MIN_WORK)
    for (long n = 0; n < N; n++) {
        const S* xr = x + n * ldx;
        const S* dy = dout + n * w;
        const S m = mean[n], r = rstd[n];
        S sum_dxhat = 0, sum_dxhat_xhat = 0;
        for (int c = 0; c < w; c++) {
            S dxhat = dy[c] * g[c];
            sum_dxhat += dxhat;
            sum_dxhat_xhat += dxhat * (xr[c] - m) * r;
        }
        const S mu1 = ln ? sum_dxhat / w : S(0), mu2 = sum_dxhat_xhat / w;
        S* dxr = dx + n * lddx;
        for (int c = 0; c < w; c++) {
            S xhat = (xr[c] - m) * r;
            dxr[c] += r * (dy[c] * g[c] - mu1 - xhat * mu2);
        }
    }
    const int CH = 16;  // weight/bias gradients: each column chunk sums over n in order 0..N-1
#pragma omp parallel for if (N * w >= OMP_MIN_WORK)
    for (int c0 = 0; c0 < w; c0 += CH) {
        const int c1 = std::min(w, c0 + CH);
        S sg[CH] = {}, sb[CH] = {};
        for (long n = 0; n < N; n++)
            for (int c = c0; c < c1; c++) {
                S dy = dout[n * w + c];
                sg[c - c0] += dy * (x[n * ldx + c] - mean[n]) * rstd[n];
                sb[c - c0] += dy;
            }
        for (int c = c0; c < c1; c++) {
            dg[c] += sg[c - c0];
            if (ln) db[c] += sb[c - c0];
        }
    }
}

// ======================================================================================================
// RoPE: interleaved pairs (2i, 2i+1) within each head of q and k, in place on qkv (B, T, 3 w)
// ======================================================================================================
// (a, b) at position t -> (a cos - b sin, a sin + b cos) with angle t * theta^(-2i / hd), i in [0, hd/2).
// The backward is the inverse rotation (angle -> -angle) applied to dqkv; v is untouched.
// cos/sin are computed in double and rounded to S so float and double agree to S's precision.
template <typename S>
void rope_rotate(S* qkv, long B, long T, int w, int h, double theta, double sign) {
    const int hd = w / h;
    if (hd % 2)
        throw ConfigError("RoPE needs an even head_dim; got w=" + std::to_string(w) + " h=" + std::to_string(h));
    std::vector<double> freq(hd / 2);
    for (int i = 0; i < hd / 2; i++) freq[i] = std::pow(theta, -2.0 * i / hd);
#pragma omp parallel for if (B * T * w >= OMP_MIN_WORK)
    for (long n = 0; n < B * T; n++) {
        const long t = n % T;
        S* row = qkv + n * 3 * w;
        for (int i = 0; i < hd / 2; i++) {
            const S c = (S)std::cos(t * freq[i]), s = (S)(sign * std::sin(t * freq[i]));
            for (int hh = 0; hh < h; hh++)
                for (int part = 0; part < 2; part++) {  // q then k
                    S* p = row + part * w + hh * hd + 2 * i;
                    const S a = p[0], b = p[1];
                    p[0] = a * c - b * s;
                    p[1] = a * s + b * c;
                }
        }
    }
}
template <typename S>
void rope_forward(S* qkv, long B, long T, int w, int h, double theta) { rope_rotate(qkv, B, T, w, h, theta, 1.0); }
template <typename S>
void rope_backward(S* dqkv, long B, long T, int w, int h, double theta) { rope_rotate(dqkv, B, T, w, h, theta, -1.0); }

// ======================================================================================================
// causal self-attention: qkv (B, T, 3 w) = [q | k | v], head hh at columns hh * hd .. (hh + 1) * hd
// ======================================================================================================
// att (B, h, T, T): att[b, hh, t, j] = softmax_j<=t(scale * q_t . k_j), zero for j > t (kept for the backward
// and for attention-distance analysis). out (B, T, w) = sum_j att * v_j. scale = 1/sqrt(hd), or 1/hd (muP).
template <typename S>
void attention_forward(S* out, S* att, const S* qkv, long B, long T, int w, int h, S scale) {
    const int hd = w / h;
#pragma omp parallel for collapse(3) if (B * h * T * T * hd >= OMP_MIN_WORK)
    for (long b = 0; b < B; b++)
        for (int hh = 0; hh < h; hh++)
            for (long t = 0; t < T; t++) {
                const S* q = qkv + (b * T + t) * 3 * w + hh * hd;
                S* p = att + ((b * h + hh) * T + t) * T;
                S mx = -INFINITY;
                for (long j = 0; j <= t; j++) {
                    const S* k = qkv + (b * T + j) * 3 * w + w + hh * hd;
                    S s = 0;
#pragma omp simd reduction(+ : s)
                    for (int c = 0; c < hd; c++) s += q[c] * k[c];
                    p[j] = s * scale;
                    mx = std::max(mx, p[j]);
                }
                S sum = 0;
                for (long j = 0; j <= t; j++) {
                    p[j] = std::exp(p[j] - mx);
                    sum += p[j];
                }
                const S inv = S(1) / sum;
                for (long j = 0; j <= t; j++) p[j] *= inv;
                for (long j = t + 1; j < T; j++) p[j] = 0;
                S* o = out + (b * T + t) * w + hh * hd;
                for (int c = 0; c < hd; c++) o[c] = 0;
                for (long j = 0; j <= t; j++) {
                    const S* v = qkv + (b * T + j) * 3 * w + 2 * w + hh * hd;
                    for (int c = 0; c < hd; c++) o[c] += p[j] * v[c];
                }
            }
}

// dqkv (B, T, 3 w) = gradient w.r.t. the (rotated) q, k, v, assigned. One thread owns one (b, head) pair and
// walks t in order, so the dk and dv sums over queries have a fixed order.
template <typename S>
void attention_backward(S* dqkv, const S* dout, const S* qkv, const S* att, long B, long T, int w, int h, S scale) {
    const int hd = w / h;
#pragma omp parallel if (B * h * T * T * hd >= OMP_MIN_WORK)
    {
        std::vector<S> dp_buf(T), dq_buf(hd);  // (T) d loss / d scores of row t, (hd) dq of row t
#pragma omp for collapse(2)
        for (long b = 0; b < B; b++)
            for (int hh = 0; hh < h; hh++) {
                for (long t = 0; t < T; t++)
                    for (int part = 1; part < 3; part++)  // dk, dv accumulate over queries; dq is written whole
                        std::fill_n(dqkv + (b * T + t) * 3 * w + part * w + hh * hd, hd, S(0));
                S* __restrict dp = dp_buf.data();
                S* __restrict dq = dq_buf.data();
                for (long t = 0; t < T; t++) {
                    const S* p = att + ((b * h + hh) * T + t) * T;
                    const S* q = qkv + (b * T + t) * 3 * w + hh * hd;
                    const S* dy = dout + (b * T + t) * w + hh * hd;
                    S sum_pdp = 0;
                    for (long j = 0; j <= t; j++) {  // dp_j = dy_t . v_j
                        const S* v = qkv + (b * T + j) * 3 * w + 2 * w + hh * hd;
                        S s = 0;
#pragma omp simd reduction(+ : s)
                        for (int c = 0; c < hd; c++) s += dy[c] * v[c];
                        dp[j] = s;
                        sum_pdp += p[j] * s;
                    }
                    for (long j = 0; j <= t; j++) dp[j] = p[j] * (dp[j] - sum_pdp) * scale;  // now d score_j
                    std::fill_n(dq, hd, S(0));
                    for (long j = 0; j <= t; j++) {
                        const S* k = qkv + (b * T + j) * 3 * w + w + hh * hd;
                        S* __restrict dk = dqkv + (b * T + j) * 3 * w + w + hh * hd;
                        S* __restrict dv = dk + w;
                        const S ds = dp[j], pj = p[j];
                        for (int c = 0; c < hd; c++) {
                            dq[c] += ds * k[c];
                            dk[c] += ds * q[c];
                            dv[c] += pj * dy[c];
                        }
                    }
                    std::copy_n(dq, hd, dqkv + (b * T + t) * 3 * w + hh * hd);
                }
            }
    }
}

// ======================================================================================================
// SwiGLU: in (N, 2 hid) = [gate | up] -> out (N, hid) = silu(gate) * up, silu(g) = g * sigmoid(g)
// ======================================================================================================
template <typename S>
void swiglu_forward(S* out, const S* in, long N, int hid) {
#pragma omp parallel for if (N * hid >= OMP_MIN_WORK)
    for (long n = 0; n < N; n++)
        for (int c = 0; c < hid; c++) {
            const S g = in[n * 2 * hid + c], u = in[n * 2 * hid + hid + c];
            out[n * hid + c] = g / (S(1) + std::exp(-g)) * u;
        }
}

// din (N, 2 hid) assigned: dgate = dout * up * sig * (1 + g (1 - sig)), dup = dout * silu(g).
template <typename S>
void swiglu_backward(S* din, const S* dout, const S* in, long N, int hid) {
#pragma omp parallel for if (N * hid >= OMP_MIN_WORK)
    for (long n = 0; n < N; n++)
        for (int c = 0; c < hid; c++) {
            const S g = in[n * 2 * hid + c], u = in[n * 2 * hid + hid + c], dy = dout[n * hid + c];
            const S sig = S(1) / (S(1) + std::exp(-g));
            din[n * 2 * hid + c] = dy * u * sig * (S(1) + g * (S(1) - sig));
            din[n * 2 * hid + hid + c] = dy * g * sig;
        }
}

// ======================================================================================================
// residual add into the leading slice [0, w) of the stream
// ======================================================================================================
// x[:, :w] += y, x (N, ldx) the stream, y (N, w) the branch output.
template <typename S>
void residual_forward(S* x, long ldx, const S* y, long N, int w) {
#pragma omp parallel for if (N * w >= OMP_MIN_WORK)
    for (long n = 0; n < N; n++)
        for (int c = 0; c < w; c++) x[n * ldx + c] += y[n * w + c];
}
// dy (N, w) = dx[:, :w] (assigned). The skip path's gradient is dx itself, unchanged, so nothing else to do.
template <typename S>
void residual_backward(S* dy, const S* dx, long lddx, long N, int w) {
#pragma omp parallel for if (N * w >= OMP_MIN_WORK)
    for (long n = 0; n < N; n++) std::copy_n(dx + n * lddx, w, dy + n * w);
}

// ======================================================================================================
// softmax cross-entropy over V
// ======================================================================================================
// The V exponentials per row are the one transcendental-heavy loop of the step (51M per step at the tiny
// size: 0.3 s per core through libm's scalar expf), so float rows use a vectorised exp.

// exp(x) for x <= 0 (softmax arguments l - max), 8 floats at once. Cody-Waite reduction x = n ln2 + r,
// |r| <= ln2 / 2, then Cephes' degree-6 polynomial for exp(r); relative error < 3e-7 (test_reference.cpp
// checks it against std::exp). x < -87 returns 0 (2^n would be denormal there, and e^-87 is below float's
// resolution of any softmax sum, which is >= 1).
// (Arrays in and out rather than vector values: passing 32-byte vectors by value changes the ABI without AVX.)
inline void exp_nonpositive(float* out, const float* in) {
    typedef Simd<float>::type F;
    typedef int32_t I __attribute__((vector_size(32)));
    F x;
    std::memcpy(&x, in, sizeof(F));
    const F xc = x < -87.0f ? F{} - 87.0f : x;
    const F y = xc * 1.44269504088896341f + 12582912.0f;  // + 1.5 * 2^23 rounds to the nearest integer
    const F n = y - 12582912.0f;
    const F r = xc - n * 0.693359375f - n * -2.12194440e-4f;  // ln2 split in two so n * hi is exact
    F p = F{} + 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const F e = p * r * r + r + 1.0f;
    I bits;  // 2^n: n + 127 in the exponent field
    for (int i = 0; i < 8; i++) bits[i] = ((int32_t)n[i] + 127) << 23;
    F scale;
    std::memcpy(&scale, &bits, sizeof(F));
    const F y8 = x < -87.0f ? F{} : e * scale;
    std::memcpy(out, &y8, sizeof(F));
}

// e[v] = exp(l[v] - mx) for v in [0, V) (stored when e is not null); returns the sum in double.
template <typename S>
double exp_shifted_sum(S* e, const S* l, int V, S mx) {
    double sum = 0;
    for (int v = 0; v < V; v++) {
        const S x = std::exp(l[v] - mx);
        if (e) e[v] = x;
        sum += x;
    }
    return sum;
}
inline double exp_shifted_sum(float* e, const float* l, int V, float mx) {
    typedef double D4 __attribute__((vector_size(32)));
    D4 acc0 = {}, acc1 = {};  // per-lane double sums, combined in a fixed order at the end
    for (int v0 = 0; v0 < V; v0 += 8) {
        const int nv = std::min(8, V - v0);
        float x[8], ex[8];
        if (nv == 8) {  // (branch-free copies for the full chunks so they compile to one load / store)
            for (int i = 0; i < 8; i++) x[i] = l[v0 + i] - mx;
        } else {
            for (int i = 0; i < 8; i++) x[i] = -1000.0f;  // padding lanes: exp = 0
            for (int i = 0; i < nv; i++) x[i] = l[v0 + i] - mx;
        }
        exp_nonpositive(ex, x);
        if (e && nv == 8)
            for (int i = 0; i < 8; i++) e[v0 + i] = ex[i];
        else if (e)
            for (int i = 0; i < nv; i++) e[v0 + i] = ex[i];
        acc0 += D4{ex[0], ex[1], ex[2], ex[3]};
        acc1 += D4{ex[4], ex[5], ex[6], ex[7]};
    }
    const D4 acc = acc0 + acc1;
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

// logits (N, V) -> lse (N) log-sum-exp, losses (N) = lse - logit[target] (0 where target < 0),
// probs (N, V) = softmax(logits) if probs is not null (the backward needs it). Returns the number of unmasked
// targets (0 when targets is null). The exp sums run in double: V = 50257 float terms would lose digits.
template <typename S>
long softmax_crossentropy_forward(S* probs, S* lse, S* losses, const S* logits, const int* targets, long N, int V) {
#pragma omp parallel for if (N * V >= OMP_MIN_WORK)
    for (long n = 0; n < N; n++) {
        const S* l = logits + n * V;
        S mx8[8];  // 8 running maxima (max is exact, so the split changes nothing but lets it vectorise)
        std::fill_n(mx8, 8, l[0]);
        for (int v = 0; v + 8 <= V; v += 8)
            for (int i = 0; i < 8; i++) mx8[i] = l[v + i] > mx8[i] ? l[v + i] : mx8[i];
        S mx = *std::max_element(mx8, mx8 + 8);
        for (int v = V / 8 * 8; v < V; v++) mx = std::max(mx, l[v]);
        S* p = probs ? probs + n * V : nullptr;
        const double sum = exp_shifted_sum(p, l, V, mx);
        if (p) {
            const S inv = S(1.0 / sum);
            for (int v = 0; v < V; v++) p[v] *= inv;
        }
        lse[n] = mx + (S)std::log(sum);
        losses[n] = (targets && targets[n] >= 0) ? lse[n] - l[targets[n]] : S(0);
    }
    long count = 0;
    if (targets)
        for (long n = 0; n < N; n++) count += targets[n] >= 0;
    return count;
}

// dlogits (N, V) = dloss * (probs - onehot(target)) for unmasked rows, 0 for masked rows (assigned).
// dlogits may alias probs (the model does this: the softmax becomes its own gradient in place).
// dloss = d(objective)/d(each unmasked loss), e.g. grad_scale / count for a mean.
template <typename S>
void softmax_crossentropy_backward(S* dlogits, const S* probs, const int* targets, long N, int V, S dloss) {
#pragma omp parallel for if (N * V >= OMP_MIN_WORK)
    for (long n = 0; n < N; n++) {
        S* dl = dlogits + n * V;
        if (targets[n] < 0) {
            std::fill_n(dl, V, S(0));
            continue;
        }
        const S* p = probs + n * V;
        for (int v = 0; v < V; v++) dl[v] = p[v] * dloss;
        dl[targets[n]] -= dloss;
    }
}

// Mean of losses over unmasked targets, summed serially in double (0 when every target is masked).
template <typename S>
S mean_loss(const S* losses, const int* targets, long N) {
    double sum = 0;
    long count = 0;
    for (long n = 0; n < N; n++)
        if (targets[n] >= 0) sum += losses[n], count++;
    return count ? (S)(sum / count) : S(0);
}

// ======================================================================================================
// init: a platform-independent RNG (std::normal_distribution differs across standard libraries)
// ======================================================================================================
struct Rng {
    uint64_t state;
    explicit Rng(uint64_t seed) : state(seed) {}
    uint64_t next() {  // splitmix64
        uint64_t z = (state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    double uniform() { return ((next() >> 11) + 0.5) * 0x1.0p-53; }  // in (0, 1), never 0 (log below)
    double normal() {                                                // Box-Muller, one value per call
        const double r = std::sqrt(-2.0 * std::log(uniform())), a = 6.283185307179586 * uniform();
        return r * std::cos(a);
    }
};

// GPT-2 init into params (layout.total): matrices N(0, 0.02); residual output projections (wo, wproj)
// N(0, 0.02 / sqrt(2 L)); norm weights 1, biases 0; with cfg.init_width_scale, layer l's matrices' std is
// multiplied by sqrt(d / w_l). Each tensor draws from its own stream seeded by (seed, tensor index).
template <typename S>
void init_params(S* params, const ModelConfig& cfg, const ParamLayout& layout, uint64_t seed) {
    for (size_t ti = 0; ti < layout.tensors.size(); ti++) {
        const ParamTensor& t = layout.tensors[ti];
        S* p = params + t.offset;
        if (!t.is_matrix) {  // norm weight or bias
            bool bias = t.offset == layout.lnf_b;
            if (t.layer >= 0) bias = t.offset == layout.layer[t.layer].ln1_b || t.offset == layout.layer[t.layer].ln2_b;
            std::fill_n(p, t.numel(), S(bias ? 0 : 1));
            continue;
        }
        double std = 0.02;
        const bool resid_out =
            t.layer >= 0 && (t.offset == layout.layer[t.layer].wo || t.offset == layout.layer[t.layer].wproj);
        if (resid_out) std /= std::sqrt(2.0 * cfg.L());
        if (t.layer >= 0 && cfg.init_width_scale) std *= std::sqrt((double)cfg.d / cfg.layers[t.layer].width);
        Rng rng(Rng(seed).next() ^ Rng(0x5EED0000ull + ti).next());
        for (size_t i = 0; i < t.numel(); i++) p[i] = (S)(std * rng.normal());
    }
}

// ======================================================================================================
// the whole model
// ======================================================================================================
template <typename S>
struct RefModel {
    ModelConfig cfg;
    ParamLayout layout;
    std::vector<S> params, grads;  // (layout.total) each, in param_layout order

    explicit RefModel(const ModelConfig& c) : cfg(c), layout(param_layout(c)) {
        validate_config(c);  // positive sizes, h_l | w_l, even head_dim: fail here, not deep inside an op
        params.assign(layout.total, S(0));
        grads.assign(layout.total, S(0));
    }
    void init_params(uint64_t seed) { ref::init_params(params.data(), cfg, layout, seed); }
    void zero_grad() { std::fill(grads.begin(), grads.end(), S(0)); }

    // Mean cross-entropy over unmasked targets (0 if none, or if targets is null: inference only).
    // inputs, targets (B, T), T <= cfg.T.
    S forward(const int* inputs, const int* targets, int B, int T);
    // grads += d(grad_scale * loss)/d params. Needs the preceding forward to have had targets; once per forward.
    void backward(S grad_scale = S(1));

    // After forward: logits (B, T, V), per-position losses (B, T) (0 where masked), log-sum-exp (B, T).
    const S* logits() const { return logits_.data(); }
    const S* losses() const { return losses_.data(); }
    const S* lse() const { return lse_.data(); }
    S loss() const { return loss_; }
    // log p(token | inputs[b, :t+1]) from the last forward.
    S logprob(int b, int t, int token) const {
        return logits_[((size_t)b * T_ + t) * cfg.V + token] - lse_[(size_t)b * T_ + t];
    }
    // Sum of log p(targets[b, t]) over positions t in [t0, t1), targets (B, T) aligned like training targets.
    double sum_logprob(int b, int t0, int t1, const int* targets) const {
        double s = 0;
        for (int t = t0; t < t1; t++) s += logprob(b, t, targets[(size_t)b * T_ + t]);
        return s;
    }
    // Attention probabilities of layer l (B, h_l, T, T), after a forward with targets.
    const S* attention(int l) const { return acts_[l].att.data(); }

  private:
    struct LayerActs {
        std::vector<S> ln1, mean1, rstd1;  // (N, w) (N) (N)
        std::vector<S> qkv;                // (N, 3 w) after RoPE
        std::vector<S> att;                // (B, h, T, T)
        std::vector<S> atty;               // (N, w) attention output before wo
        std::vector<S> ln2, mean2, rstd2;  // (N, w) (N) (N)
        std::vector<S> fc;                 // (N, 2 hid) [gate | up]
        std::vector<S> sw;                 // (N, hid)
    };
    int B_ = 0, T_ = 0;
    bool has_targets_ = false, backward_done_ = true;
    long n_targets_ = 0;
    S loss_ = 0;
    std::vector<int> inputs_, targets_;  // (N)
    std::vector<S> stream_;              // (2 L + 1, N, D): the stream before each sub-block, and at the end
    std::vector<LayerActs> acts_;
    std::vector<S> branch_;                      // (N, w_max) branch output before the residual add
    std::vector<S> lnf_, meanf_, rstdf_;         // (N, Df) (N) (N)
    std::vector<S> logits_, probs_;              // (N, V) each; probs_ becomes dlogits in backward
    std::vector<S> losses_, lse_;                // (N)
    std::vector<S> dstream_, dbranch_, dbig_, dsmall_;  // (N, D) (N, w_max) (N, max(3 w, 2 hid, Df)) (N, max(w, hid))

    S* P(size_t off) { return off == SIZE_MAX ? nullptr : params.data() + off; }
    S* G(size_t off) { return off == SIZE_MAX ? nullptr : grads.data() + off; }
    S* stream(int k) { return stream_.data() + (size_t)k * B_ * T_ * cfg.D(); }
    S attn_scale(int l) const {
        const double hd = cfg.layers[l].head_dim();
        return (S)(cfg.mup_attn ? 1.0 / hd : 1.0 / std::sqrt(hd));
    }
    size_t Wout() const { return cfg.tied ? layout.wte : layout.lm_head; }
};

template <typename S>
S RefModel<S>::forward(const int* inputs, const int* targets, int B, int T) {
    if (B < 1 || T < 1 || T > cfg.T)
        throw ConfigError("forward: need B >= 1 and 1 <= T <= cfg.T = " + std::to_string(cfg.T) + ", got B=" +
                          std::to_string(B) + " T=" + std::to_string(T));
    const long N = (long)B * T;
    const int L = cfg.L(), D = cfg.D(), Df = cfg.Df(), d = cfg.d, V = cfg.V;
    for (long n = 0; n < N; n++)
        if (inputs[n] < 0 || inputs[n] >= V || (targets && targets[n] >= V))
            throw ConfigError("forward: token id out of range [0, V=" + std::to_string(V) + ") at position " +
                              std::to_string(n) + "; check the tokenizer / vocabulary size");
    B_ = B, T_ = T;
    has_targets_ = targets != nullptr;
    backward_done_ = false;
    int wmax = 0, hidmax = 0;
    for (int l = 0; l < L; l++) wmax = std::max(wmax, cfg.layers[l].width), hidmax = std::max(hidmax, cfg.hidden_of(l));
    inputs_.assign(inputs, inputs + N);
    if (targets) targets_.assign(targets, targets + N);
    stream_.resize((size_t)(2 * L + 1) * N * D);
    acts_.resize(L);
    branch_.resize((size_t)N * wmax);
    embedding_forward(stream(0), inputs, P(layout.wte), N, d, D);
    std::vector<S> att_scratch;  // inference needs no per-layer attention probabilities
    for (int l = 0; l < L; l++) {
        const int w = cfg.layers[l].width, h = cfg.layers[l].heads, hid = cfg.hidden_of(l);
        LayerActs& a = acts_[l];
        a.ln1.resize(N * w), a.mean1.resize(N), a.rstd1.resize(N), a.qkv.resize(N * 3 * w);
        a.atty.resize(N * w), a.ln2.resize(N * w), a.mean2.resize(N), a.rstd2.resize(N);
        a.fc.resize(N * 2 * hid), a.sw.resize(N * hid);
        std::vector<S>& att = targets ? a.att : att_scratch;  // (B, h, T, T)
        att.resize((size_t)B * h * T * T);

        S* x0 = stream(2 * l);
        S* x1 = stream(2 * l + 1);
        S* x2 = stream(2 * l + 2);
        const LayerOffsets& o = layout.layer[l];
        norm_forward(cfg.norm, a.ln1.data(), a.mean1.data(), a.rstd1.data(), x0, D, P(o.ln1_w), P(o.ln1_b), N, w,
                     cfg.norm_eps);
        matmul_forward(a.qkv.data(), 3 * w, a.ln1.data(), w, P(o.wqkv), N, w, 3 * w);
        rope_forward(a.qkv.data(), B, T, w, h, cfg.rope_theta);
        attention_forward(a.atty.data(), att.data(), a.qkv.data(), B, T, w, h, attn_scale(l));
        matmul_forward(branch_.data(), w, a.atty.data(), w, P(o.wo), N, w, w);
        std::copy_n(x0, N * D, x1);
        residual_forward(x1, D, branch_.data(), N, w);

        norm_forward(cfg.norm, a.ln2.data(), a.mean2.data(), a.rstd2.data(), x1, D, P(o.ln2_w), P(o.ln2_b), N, w,
                     cfg.norm_eps);
        matmul_forward(a.fc.data(), 2 * hid, a.ln2.data(), w, P(o.wfc), N, w, 2 * hid);
        swiglu_forward(a.sw.data(), a.fc.data(), N, hid);
        matmul_forward(branch_.data(), w, a.sw.data(), hid, P(o.wproj), N, hid, w);
        std::copy_n(x1, N * D, x2);
        residual_forward(x2, D, branch_.data(), N, w);
    }
    lnf_.resize(N * Df), meanf_.resize(N), rstdf_.resize(N);
    norm_forward(cfg.norm, lnf_.data(), meanf_.data(), rstdf_.data(), stream(2 * L), D, P(layout.lnf_w),
                 P(layout.lnf_b), N, Df, cfg.norm_eps);
    logits_.resize((size_t)N * V), losses_.resize(N), lse_.resize(N);
    matmul_forward(logits_.data(), V, lnf_.data(), Df, P(Wout()), N, d, V);  // the head reads [0, d)
    if (targets) probs_.resize((size_t)N * V);
    n_targets_ = softmax_crossentropy_forward(targets ? probs_.data() : (S*)nullptr, lse_.data(), losses_.data(),
                                              logits_.data(), targets, N, V);
    loss_ = targets ? mean_loss(losses_.data(), targets, N) : S(0);
    return loss_;
}

template <typename S>
void RefModel<S>::backward(S grad_scale) {
    if (!has_targets_ || backward_done_)
        throw std::logic_error("backward() needs exactly one preceding forward() with targets");
    backward_done_ = true;
    if (n_targets_ == 0) return;  // every target masked: the loss is the constant 0
    const long N = (long)B_ * T_;
    const int L = cfg.L(), D = cfg.D(), Df = cfg.Df(), d = cfg.d, V = cfg.V;
    int wmax = 0, bigmax = Df, smallmax = 0;
    for (int l = 0; l < L; l++) {
        const int w = cfg.layers[l].width, hid = cfg.hidden_of(l);
        wmax = std::max(wmax, w), bigmax = std::max({bigmax, 3 * w, 2 * hid}), smallmax = std::max({smallmax, w, hid});
    }
    dstream_.assign((size_t)N * D, S(0));
    dbranch_.resize((size_t)N * wmax), dbig_.resize((size_t)N * bigmax), dsmall_.resize((size_t)N * smallmax);

    // head: probs -> dlogits in place; dlnf (N, Df) with columns [d, Df) zero (the head never reads them)
    S* dlogits = probs_.data();
    softmax_crossentropy_backward(dlogits, probs_.data(), targets_.data(), N, V, S(grad_scale / n_targets_));
    S* dlnf = dbig_.data();
    matmul_backward(dlnf, Df, G(Wout()), dlogits, V, lnf_.data(), Df, P(Wout()), N, d, V);
    for (long n = 0; n < N; n++) std::fill(dlnf + n * Df + d, dlnf + (n + 1) * Df, S(0));
    norm_backward(cfg.norm, dstream_.data(), D, G(layout.lnf_w), G(layout.lnf_b), dlnf, stream(2 * L), D,
                  meanf_.data(), rstdf_.data(), P(layout.lnf_w), N, Df);

    for (int l = L - 1; l >= 0; l--) {
        const int w = cfg.layers[l].width, h = cfg.layers[l].heads, hid = cfg.hidden_of(l);
        const LayerOffsets& o = layout.layer[l];
        LayerActs& a = acts_[l];
        S* ds = dstream_.data();
        // MLP sub-block, mirrored
        residual_backward(dbranch_.data(), ds, D, N, w);
        S* dsw = dsmall_.data();  // (N, hid)
        matmul_backward(dsw, hid, G(o.wproj), dbranch_.data(), w, a.sw.data(), hid, P(o.wproj), N, hid, w);
        S* dfc = dbig_.data();  // (N, 2 hid)
        swiglu_backward(dfc, dsw, a.fc.data(), N, hid);
        S* dln = dsmall_.data();  // (N, w); dsw is dead
        matmul_backward(dln, w, G(o.wfc), dfc, 2 * hid, a.ln2.data(), w, P(o.wfc), N, w, 2 * hid);
        norm_backward(cfg.norm, ds, D, G(o.ln2_w), G(o.ln2_b), dln, stream(2 * l + 1), D, a.mean2.data(),
                      a.rstd2.data(), P(o.ln2_w), N, w);
        // attention sub-block, mirrored
        residual_backward(dbranch_.data(), ds, D, N, w);
        S* datty = dsmall_.data();  // (N, w)
        matmul_backward(datty, w, G(o.wo), dbranch_.data(), w, a.atty.data(), w, P(o.wo), N, w, w);
        S* dqkv = dbig_.data();  // (N, 3 w)
        attention_backward(dqkv, datty, a.qkv.data(), a.att.data(), B_, T_, w, h, attn_scale(l));
        rope_backward(dqkv, B_, T_, w, h, cfg.rope_theta);
        dln = dsmall_.data();  // datty is dead
        matmul_backward(dln, w, G(o.wqkv), dqkv, 3 * w, a.ln1.data(), w, P(o.wqkv), N, w, 3 * w);
        norm_backward(cfg.norm, ds, D, G(o.ln1_w), G(o.ln1_b), dln, stream(2 * l), D, a.mean1.data(),
                      a.rstd1.data(), P(o.ln1_w), N, w);
    }
    embedding_backward(G(layout.wte), dstream_.data(), D, inputs_.data(), N, d);
}

// ======================================================================================================
// optimizer: global gradient norm, clipping, AdamW, learning-rate schedule
// ======================================================================================================
// L2 norm of g (n), in double. Fixed 64K-element chunks summed in order: the same bits for any thread count.
template <typename S>
double grad_norm(const S* g, size_t n) {
    const size_t CH = 1 << 16, nch = (n + CH - 1) / CH;
    std::vector<double> part(nch);
#pragma omp parallel for if (n >= (size_t)OMP_MIN_WORK)
    for (size_t c = 0; c < nch; c++) {
        double s = 0;
        for (size_t i = c * CH; i < std::min(n, (c + 1) * CH); i++) s += (double)g[i] * g[i];
        part[c] = s;
    }
    double s = 0;
    for (double p : part) s += p;
    return std::sqrt(s);
}

// Scales g so that its norm is at most max_norm (no-op when max_norm <= 0 or the norm is already within).
// Returns the norm before clipping (what the training log reports).
template <typename S>
double clip_grad_norm(S* g, size_t n, double max_norm) {
    const double norm = grad_norm(g, n);
    if (max_norm > 0 && norm > max_norm) {
        const S scale = (S)(max_norm / norm);
#pragma omp parallel for if (n >= (size_t)OMP_MIN_WORK)
        for (size_t i = 0; i < n; i++) g[i] *= scale;
    }
    return norm;
}

struct AdamWParams {
    double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

// AdamW state: first and second moments (layout.total each, flat so they checkpoint as one buffer) and the
// number of steps taken.
template <typename S>
struct AdamWState {
    std::vector<S> m, v;
    long t = 0;
    explicit AdamWState(size_t n = 0) : m(n, S(0)), v(n, S(0)) {}
};

// One AdamW step (PyTorch's formulation): t += 1; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p *= 1 - lr wd (decoupled decay, matrices only: ParamTensor::is_matrix, never norms);
// p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps).
template <typename S>
void adamw_step(S* params, const S* grads, AdamWState<S>& st, const ParamLayout& layout, double lr,
                const AdamWParams& hp) {
    st.t++;
    const double bc1 = 1.0 - std::pow(hp.beta1, (double)st.t), bc2 = 1.0 - std::pow(hp.beta2, (double)st.t);
    const S b1 = (S)hp.beta1, b2 = (S)hp.beta2, eps = (S)hp.eps, step = (S)(lr / bc1), rbc2 = (S)(1.0 / bc2);
    for (const ParamTensor& t : layout.tensors) {
        const S decay = (S)(t.is_matrix ? 1.0 - lr * hp.weight_decay : 1.0);
        const long n = (long)t.numel();
        S *p = params + t.offset, *m = st.m.data() + t.offset, *v = st.v.data() + t.offset;
        const S* g = grads + t.offset;
#pragma omp parallel for if (n >= OMP_MIN_WORK)
        for (long i = 0; i < n; i++) {
            m[i] = b1 * m[i] + (S(1) - b1) * g[i];
            v[i] = b2 * v[i] + (S(1) - b2) * g[i] * g[i];
            p[i] = p[i] * decay - step * m[i] / (std::sqrt(v[i] * rbc2) + eps);
        }
    }
}

// Learning rate at step (0-based) of total_steps: linear warmup lr * (step + 1) / warmup for step < warmup,
// then cosine from lr at step = warmup down to final_frac * lr at the last step (total_steps - 1).
inline double lr_at(long step, long total_steps, long warmup, double lr, double final_frac) {
    if (step < warmup) return lr * (double)(step + 1) / (double)warmup;
    const long decay_steps = std::max(1L, total_steps - 1 - warmup);
    const double progress = std::min(1.0, (double)(step - warmup) / (double)decay_steps);
    const double lo = final_frac * lr;
    return lo + (lr - lo) * 0.5 * (1.0 + std::cos(3.141592653589793 * progress));
}

}  // namespace ref
