// ref/gdn.h: the Gated DeltaNet (GDN) mixer on the fp32 CPU reference, forward and backward, op by op and whole
// (gdn_forward / gdn_backward: everything of a gdn layer from the normed input xn to the output before wo), and
// its cached decoder (gdn_decode). Templated on the scalar S like ref/ops.h (float to train, double for the
// finite-difference checks of test/test_gdn.cpp); ref/ops.h's conventions hold: activations and input gradients
// assigned, parameter gradients accumulated, the same bits for any number of OpenMP threads.
//
// The layer (Yang, Kautz, Hatamizadeh, "Gated Delta Networks", arXiv 2412.06464; transformers' Qwen3-Next
// linear attention), h heads of hd = w / h channels for keys and values, N = B T rows, t a position inside its
// own sequence:
//   p  = xn Wqkv^T (N, 3w), channels [q | k | v], head j owning channels j hd .. j hd + hd - 1 of each part
//   c_t[ch] = sum_{k=0..3} conv_w[ch][k] p_{t-3+k}[ch] (p_{t'} = 0 for t' < 0; kernel GDN_CONV = 4, no bias);
//   u = silu(c), silu(x) = x sigmoid(x)
//   q, k: per head x / sqrt(sum(x^2) + GDN_L2_EPS), GDN_L2_EPS = 1e-6 (inside the square root); v = u's third part
//   ba = xn Wba^T (N, 2h): beta = sigmoid(ba[:, j]), g = -exp(a_log[j]) softplus(ba[:, h + j] + dt_bias[j]),
//   softplus(x) = log(1 + exp(x)), and x itself above GDN_SOFTPLUS_MAX = 20 (PyTorch's threshold)
//   per sequence and head, S (hd x hd, value rows by key columns) = 0 at the start:
//     S_t = exp(g_t) S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T,  o_t = S_t q_t / sqrt(hd)
//   y = onorm_w * o_j / sqrt(mean(o_j^2) + norm_eps) * silu(z_j) per head j, z = xn Wz^T; onorm_w (hd) shared by
//   the heads, multiplying directly (not 1 + w)
//
// The delta rule in two forms:
//   recurrent (gdn_delta_recurrent_*): the definition step by step; the oracle the tests hold the other against.
//   chunked (gdn_delta_chunk_*, what gdn_forward runs): chunks of GDN_CHUNK = 64 positions from each sequence's
//   start (the last one shorter), the WY / UT representation of the paper and of flash-linear-attention's
//   chunk_gated_delta_rule. In a chunk of L rows, with S0 the state at its start, G_i = g_0 + .. + g_i (inside
//   the chunk), Gamma_ij = exp(G_i - G_j):
//     A = strictly lower (diag(beta) (K K^T o Gamma)),  T = (I + A)^-1 (forward substitution, row by row)
//     W = T diag(beta exp(G)) K,  U = T diag(beta) V - W S0^T          (U's rows: the deltas beta (v - S k))
//     O = (diag(exp(G)) Q S0^T + (tril(Q K^T o Gamma)) U) / sqrt(hd)
//     S_next = exp(G_{L-1}) S0 + U^T diag(exp(G_{L-1} - G)) K
//   The forward keeps each chunk's S0 (GdnActs::states); the backward recomputes a chunk's matrices from it (not
//   its output), last chunk first.
//   Gamma's exponentials (C^2 / 2 per chunk, computed once per row and kept for the backward) run through ops.h's
//   vectorised exp in float (< 3e-7 relative error), std::exp in double. Every product is gdn_mm (below); each
//   row i of A, T, W, U and O depends on rows <= i alone, and a row of a gdn_mm never depends on the other rows,
//   so gdn_decode, which computes the same rows one token (or a few) at a time with the same functions, gives the
//   forward's bits.
//   FLOPs per chunk and head (2 per multiply-add; as full L x L squares): K K^T, Q K^T, T K', T V', tril(..) U:
//   10 L^2 hd; W S0^T, Q S0^T, the state update: 6 L hd^2; the forward substitution L^3 / 3. Executed: the
//   triangles' zero blocks are skipped (gdn_mm), about 5.7 L^2 hd for the first five at L = 64 (gdn_mm_flops
//   counts what runs; the backward likewise skips the zero halves of its triangular operands).
// Does not: use bf16, know the model's layout, or apply wo and the residual (the model does, as for attention).
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <new>
#include <type_traits>
#include <vector>

#include "ref/gemm.h"
#include "ref/ops.h"
#include "ref/parallel.h"

namespace ref {

constexpr int GDN_CONV = 4;                // the depthwise convolution's kernel (taps t-3 .. t)
constexpr int GDN_CHUNK = 64;              // the chunked form's chunk
constexpr double GDN_L2_EPS = 1e-6;        // q and k: x / sqrt(sum x^2 + eps)
constexpr double GDN_SOFTPLUS_MAX = 20.0;  // softplus(x) = x above it (PyTorch's softplus threshold)

struct GdnShape {
    int h, hd;
    int w() const { return h * hd; }
};

template <typename S> struct GdnWeights { const S *wqkv, *conv_w, *wz, *wba, *a_log, *dt_bias, *onorm_w; };
template <typename S> struct GdnGrads {  // accumulated (+=)
    S *wqkv, *conv_w, *wz, *wba, *a_log, *dt_bias, *onorm_w;
};

template <typename S> inline S gdn_sigmoid(S x) { return S(1) / (S(1) + std::exp(-x)); }
template <typename S> inline S gdn_softplus(S x) { return x > S(GDN_SOFTPLUS_MAX) ? x : std::log1p(std::exp(x)); }
// x[0 .. n) = exp(x) in place, every x <= 0; float through ref::exp_nonpositive (8 at a time, < 3e-7 relative
// error), double through std::exp.
template <typename S> inline void gdn_exp_nonpositive(S* x, int n) {
    for (int i = 0; i < n; i++) x[i] = std::exp(x[i]);
}
inline void gdn_exp_nonpositive(float* x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) exp_nonpositive(x + i, x + i);
    if (i == n) return;
    float in[8], out[8];
    for (int l = 0; l < 8; l++) in[l] = i + l < n ? x[i + l] : -1000.0f;
    exp_nonpositive(out, in);
    std::copy_n(out, n - i, x + i);
}
template <typename S> inline S gdn_dot(const S* a, const S* b, int n) {
    S s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}
// The sum of a[i] b[i] for i < n by vector chains, then their lanes (a fixed order of its own, not gdn_dot's): for
// the backward's sums, which no decoder computes again.
template <typename S> inline S gdn_dot_vec(const S* a, const S* b, int n) {
    typedef typename GemmVec<S>::type Vs;
    constexpr int Ln = GemmVec<S>::lanes;
    Vs acc[4] = {};
    int i = 0;
    for (; i + 4 * Ln <= n; i += 4 * Ln)
        for (int u = 0; u < 4; u++) {
            Vs x, y;
            std::memcpy(&x, a + i + u * Ln, sizeof(Vs)), std::memcpy(&y, b + i + u * Ln, sizeof(Vs));
            acc[u] += x * y;
        }
    for (; i + Ln <= n; i += Ln) {
        Vs x, y;
        std::memcpy(&x, a + i, sizeof(Vs)), std::memcpy(&y, b + i, sizeof(Vs));
        acc[0] += x * y;
    }
    const Vs t = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    S s = 0;
    for (int l = 0; l < Ln; l++) s += t[l];
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}
// dst[j ldd + i] = src[i lds + j] for i < rows, j < cols; floats by 8 x 8 blocks in registers (ref/gemm.h).
template <typename S> inline void gdn_transpose(S* dst, long ldd, const S* src, long lds, int rows, int cols) {
    int i0 = 0, j0 = 0;
    if constexpr (std::is_same_v<S, float>) {
        for (; i0 + 8 <= rows; i0 += 8)
            for (int j = 0; j + 8 <= cols; j += 8) transpose8x8(dst + j * ldd + i0, ldd, src + i0 * lds + j, lds);
        j0 = cols / 8 * 8;
    }
    for (int i = 0; i < rows; i++)  // what the blocks left: the rows past i0, the columns past j0 of the others
        for (int j = i < i0 ? j0 : 0; j < cols; j++) dst[j * ldd + i] = src[i * lds + j];
}
// s[i] += A[i ld + x] B[i ld + x] for x in [0, i + diag), in order of x, by fused multiply-adds, for rows i in
// [0, n): 8 rows' chains side by side, not waiting on each other. A row-by-row loop `s += a * b` gives these bits
// where the compiler contracts it (GCC does by default); written as a loop over x, GCC vectorises the products and
// adds them one by one, unfused.
template <typename S> inline void gdn_row_sums(S* s, const S* A, const S* B, long ld, int n, int diag) {
    int i0 = 0;
    for (; i0 + 8 <= n; i0 += 8) {
        S acc[8];
        for (int r = 0; r < 8; r++) acc[r] = s[i0 + r];
        for (int x = 0; x < i0 + diag; x++)  // the columns every row of the 8 has
            for (int r = 0; r < 8; r++) acc[r] = std::fma(A[(i0 + r) * ld + x], B[(i0 + r) * ld + x], acc[r]);
        for (int r = 0; r < 8; r++) {
            for (int x = i0 + diag; x < i0 + r + diag; x++)
                acc[r] = std::fma(A[(i0 + r) * ld + x], B[(i0 + r) * ld + x], acc[r]);
            s[i0 + r] = acc[r];
        }
    }
    for (int i = i0; i < n; i++)
        for (int x = 0; x < i + diag; x++) s[i] = std::fma(A[i * ld + x], B[i * ld + x], s[i]);
}

// ======================================================================================================
// causal depthwise convolution (kernel 4, no bias) + SiLU over C channels
// ======================================================================================================
// c (C) = sum_{k=0..3} w[ch * 4 + k] x[k][ch], taps in order of k; a null x[k] is a position before the
// sequence's start (skipped: its input is 0). The forward's rows and the decoder's (its tail) both run this.
template <typename S> inline void gdn_conv_row(S* __restrict c, const S* const x[GDN_CONV], const S* w, int C) {
    std::fill_n(c, C, S(0));
    for (int k = 0; k < GDN_CONV; k++)
        if (x[k])
            for (int ch = 0; ch < C; ch++) c[ch] += w[ch * GDN_CONV + k] * x[k][ch];
}
template <typename S> inline void gdn_silu_row(S* __restrict u, const S* c, int C) {
    for (int ch = 0; ch < C; ch++) u[ch] = c[ch] * gdn_sigmoid(c[ch]);
}

// c (N, C) the pre-activation (kept for the backward), u (N, C) = silu(c); p (N, C) the input, B sequences of T.
// u's rows may have a stride ldu >= C.
template <typename S> void gdn_conv_forward(S* u, long ldu, S* c, const S* p, const S* w, long B, long T, int C) {
#pragma omp parallel for if (B * T * C >= OMP_MIN_WORK)
    for (long n = 0; n < B * T; n++) {
        const long t = n % T;
        const S* x[GDN_CONV];
        for (int k = 0; k < GDN_CONV; k++) x[k] = t - 3 + k >= 0 ? p + (n - 3 + k) * C : nullptr;
        gdn_conv_row(c + n * C, x, w, C);
        gdn_silu_row(u + n * ldu, c + n * C, C);
    }
}

// dp (N, C) assigned from du (rows of stride lddu); dw (C, 4) += sum over the rows of dc_t p_{t-3+k}.
template <typename S>
void gdn_conv_backward(S* dp, S* dw, const S* du, long lddu, const S* c, const S* p, const S* w, long B, long T,
                       int C) {
    const long N = B * T;
    std::vector<S> dc_buf(N * C);
    S* dc = dc_buf.data();
#pragma omp parallel for if (N * C >= OMP_MIN_WORK)
    for (long n = 0; n < N; n++)
        for (int ch = 0; ch < C; ch++) {
            const S x = c[n * C + ch], s = gdn_sigmoid(x);
            dc[n * C + ch] = du[n * lddu + ch] * s * (S(1) + x * (S(1) - s));
        }
#pragma omp parallel for if (N * C >= OMP_MIN_WORK)
    for (long n = 0; n < N; n++) {  // p_t feeds c_{t+3-k} through tap k
        const long t = n % T;
        S* d = dp + n * C;
        std::fill_n(d, C, S(0));
        for (int k = 0; k < GDN_CONV; k++)
            if (t + 3 - k < T)
                for (int ch = 0; ch < C; ch++) d[ch] += w[ch * GDN_CONV + k] * dc[(n + 3 - k) * C + ch];
    }
    const int CH = 16;  // each channel's taps sum over the rows in order
#pragma omp parallel for if (N * C >= OMP_MIN_WORK)
    for (int c0 = 0; c0 < C; c0 += CH) {
        const int c1 = std::min(C, c0 + CH);
        S acc[CH][GDN_CONV] = {};
        for (long n = 0; n < N; n++) {
            const long t = n % T;
            for (int k = 0; k < GDN_CONV; k++)
                if (t - 3 + k >= 0)
                    for (int ch = c0; ch < c1; ch++) acc[ch - c0][k] += dc[n * C + ch] * p[(n - 3 + k) * C + ch];
        }
        for (int ch = c0; ch < c1; ch++)
            for (int k = 0; k < GDN_CONV; k++) dw[ch * GDN_CONV + k] += acc[ch - c0][k];
    }
}

// ======================================================================================================
// per-head L2 norm: y = x / sqrt(sum(x^2) + GDN_L2_EPS) over each head's hd columns of [0, h hd)
// ======================================================================================================
// r (N, h) = the inverse norms, kept for the backward. y may be x (in place).
template <typename S> void gdn_l2norm_forward(S* y, long ldy, S* r, const S* x, long ldx, long N, int h, int hd) {
#pragma omp parallel for if (N * h * hd >= OMP_MIN_WORK)
    for (long n = 0; n < N; n++)
        for (int j = 0; j < h; j++) {
            const S* xr = x + n * ldx + j * hd;
            const S inv = S(1) / std::sqrt(gdn_dot(xr, xr, hd) + S(GDN_L2_EPS));
            S* yr = y + n * ldy + j * hd;
            for (int c = 0; c < hd; c++) yr[c] = xr[c] * inv;
            r[n * h + j] = inv;
        }
}
// dx = r (dy - y (y . dy)) (assigned; dx may be dy).
template <typename S>
void gdn_l2norm_backward(S* dx, long lddx, const S* dy, long lddy, const S* y, long ldy, const S* r, long N, int h,
                         int hd) {
#pragma omp parallel for if (N * h * hd >= OMP_MIN_WORK)
    for (long n = 0; n < N; n++)
        for (int j = 0; j < h; j++) {
            const S* yr = y + n * ldy + j * hd;
            const S* dyr = dy + n * lddy + j * hd;
            const S yd = gdn_dot(yr, dyr, hd), inv = r[n * h + j];
            S* d = dx + n * lddx + j * hd;
            for (int c = 0; c < hd; c++) d[c] = inv * (dyr[c] - yr[c] * yd);
        }
}

// ======================================================================================================
// gates: ba (N, 2h) -> beta (N, h) = sigmoid(ba[:, :h]), g (N, h) = -exp(a_log) softplus(ba[:, h:] + dt_bias)
// ======================================================================================================
template <typename S>
void gdn_gates_forward(S* beta, S* g, const S* ba, const S* a_log, const S* dt_bias, long N, int h) {
#pragma omp parallel for if (N * h >= OMP_MIN_WORK)
    for (long n = 0; n < N; n++)
        for (int j = 0; j < h; j++) {
            beta[n * h + j] = gdn_sigmoid(ba[n * 2 * h + j]);
            g[n * h + j] = -std::exp(a_log[j]) * gdn_softplus(ba[n * 2 * h + h + j] + dt_bias[j]);
        }
}
// dba (N, 2h) assigned; da_log, ddt_bias (h) += (each summed over the rows in order).
template <typename S>
void gdn_gates_backward(S* dba, S* da_log, S* ddt_bias, const S* dbeta, const S* dg, const S* ba, const S* beta,
                        const S* g, const S* a_log, const S* dt_bias, long N, int h) {
#pragma omp parallel for if (N * h >= OMP_MIN_WORK)
    for (long n = 0; n < N; n++)
        for (int j = 0; j < h; j++) {
            const S b = beta[n * h + j], x = ba[n * 2 * h + h + j] + dt_bias[j];
            dba[n * 2 * h + j] = dbeta[n * h + j] * b * (S(1) - b);
            const S dsp = x > S(GDN_SOFTPLUS_MAX) ? S(1) : gdn_sigmoid(x);
            dba[n * 2 * h + h + j] = dg[n * h + j] * -std::exp(a_log[j]) * dsp;
        }
    for (int j = 0; j < h; j++) {
        S sa = 0, sd = 0;
        for (long n = 0; n < N; n++) {
            sa += dg[n * h + j] * g[n * h + j];  // dg/da_log = g
            sd += dba[n * 2 * h + h + j];
        }
        da_log[j] += sa;
        ddt_bias[j] += sd;
    }
}

// ======================================================================================================
// gated RMSNorm: y_j = wn * o_j * r_j * silu(z_j), r_j = 1 / sqrt(mean(o_j^2) + eps), per head j
// ======================================================================================================
template <typename S>
void gdn_gated_norm_forward(S* y, S* r, const S* o, const S* z, const S* wn, long N, int h, int hd, double eps) {
#pragma omp parallel for if (N * h * hd >= OMP_MIN_WORK)
    for (long n = 0; n < N; n++)
        for (int j = 0; j < h; j++) {
            const long off = n * h * hd + j * hd;
            const S inv = S(1) / std::sqrt(gdn_dot(o + off, o + off, hd) / hd + S(eps));
            for (int c = 0; c < hd; c++) {
                const S zc = z[off + c];
                y[off + c] = wn[c] * (o[off + c] * inv) * (zc * gdn_sigmoid(zc));
            }
            r[n * h + j] = inv;
        }
}
// d_o, dz (N, w) assigned; dwn (hd) += summed over rows then heads in order.
template <typename S>
void gdn_gated_norm_backward(S* d_o, S* dz, S* dwn, const S* dy, const S* o, const S* z, const S* r, const S* wn,
                             long N, int h, int hd) {
#pragma omp parallel for if (N * h * hd >= OMP_MIN_WORK)
    for (long n = 0; n < N; n++)
        for (int j = 0; j < h; j++) {
            const long off = n * h * hd + j * hd;
            const S inv = r[n * h + j];
            S m = 0;  // sum of dn * on
            for (int c = 0; c < hd; c++) {
                const S zc = z[off + c], s = gdn_sigmoid(zc);
                m += dy[off + c] * wn[c] * zc * s * (o[off + c] * inv);
            }
            m /= hd;
            for (int c = 0; c < hd; c++) {
                const S zc = z[off + c], s = gdn_sigmoid(zc), on = o[off + c] * inv;
                d_o[off + c] = inv * (dy[off + c] * wn[c] * zc * s - on * m);
                dz[off + c] = dy[off + c] * wn[c] * on * s * (S(1) + zc * (S(1) - s));
            }
        }
    for (int c = 0; c < hd; c++) {
        S acc = 0;
        for (long n = 0; n < N; n++)
            for (int j = 0; j < h; j++) {
                const long off = n * h * hd + j * hd + c;
                acc += dy[off] * o[off] * r[n * h + j] * (z[off] * gdn_sigmoid(z[off]));
            }
        dwn[c] += acc;
    }
}

// ======================================================================================================
// the gated delta rule, recurrent form (the oracle)
// ======================================================================================================
// q, k, v rows of stride ld (head j at columns j hd), beta, g (N, h), o (N, ldo). Per sequence and head:
// S *= exp(g); delta = beta (v - S k); S += delta k^T; o = S q / sqrt(hd).
template <typename S>
void gdn_delta_recurrent_forward(S* o, long ldo, const S* q, const S* k, const S* v, long ld, const S* beta, const S* g,
                                 long B, long T, const GdnShape& sh) {
    const int h = sh.h, hd = sh.hd;
    const S scale = S(1) / std::sqrt(S(hd));
#pragma omp parallel for if (B * h * T * hd * hd >= OMP_MIN_WORK)
    for (long bh = 0; bh < B * h; bh++) {
        const long b = bh / h;
        const int j = (int)(bh % h);
        std::vector<S> St((size_t)hd * hd, S(0)), delta(hd);
        for (long t = 0; t < T; t++) {
            const long n = b * T + t;
            const S* kr = k + n * ld + j * hd;
            const S* vr = v + n * ld + j * hd;
            const S* qr = q + n * ld + j * hd;
            const S a = std::exp(g[n * h + j]), bt = beta[n * h + j];
            for (auto& x : St) x *= a;
            for (int r = 0; r < hd; r++) delta[r] = bt * (vr[r] - gdn_dot(&St[r * hd], kr, hd));
            for (int r = 0; r < hd; r++)
                for (int c = 0; c < hd; c++) St[r * hd + c] += delta[r] * kr[c];
            for (int r = 0; r < hd; r++) o[n * ldo + j * hd + r] = gdn_dot(&St[r * hd], qr, hd) * scale;
        }
    }
}

// dq, dk, dv (rows of stride ldd) and dbeta, dg (N, h) assigned from dout (N, lddo). Recomputes and keeps every
// state of a (sequence, head): T hd^2 values (an oracle's memory, not the chunked form's).
template <typename S>
void gdn_delta_recurrent_backward(S* dq, S* dk, S* dv, long ldd, S* dbeta, S* dg, const S* dout, long lddo, const S* q,
                                  const S* k, const S* v, long ld, const S* beta, const S* g, long B, long T,
                                  const GdnShape& sh) {
    const int h = sh.h, hd = sh.hd;
    const long hd2 = (long)hd * hd;
    const S scale = S(1) / std::sqrt(S(hd));
#pragma omp parallel for if (B * h * T * hd * hd >= OMP_MIN_WORK)
    for (long bh = 0; bh < B * h; bh++) {
        const long b = bh / h;
        const int j = (int)(bh % h);
        std::vector<S> states((T + 1) * hd2, S(0)), dS(hd2, S(0)), P(hd2), kv(hd), dd(hd);
        for (long t = 0; t < T; t++) {  // states[t + 1] = S_t
            const long n = b * T + t;
            const S* kr = k + n * ld + j * hd;
            const S* vr = v + n * ld + j * hd;
            const S a = std::exp(g[n * h + j]), bt = beta[n * h + j];
            S* Sn = &states[(t + 1) * hd2];
            for (long e = 0; e < hd2; e++) Sn[e] = a * states[t * hd2 + e];
            for (int r = 0; r < hd; r++) {
                const S dl = bt * (vr[r] - gdn_dot(Sn + r * hd, kr, hd));
                for (int c = 0; c < hd; c++) Sn[r * hd + c] += dl * kr[c];
            }
        }
        for (long t = T - 1; t >= 0; t--) {
            const long n = b * T + t;
            const S* kr = k + n * ld + j * hd;
            const S* vr = v + n * ld + j * hd;
            const S* qr = q + n * ld + j * hd;
            const S* dor = dout + n * lddo + j * hd;
            const S a = std::exp(g[n * h + j]), bt = beta[n * h + j];
            const S* St = &states[(t + 1) * hd2];
            for (int r = 0; r < hd; r++)
                for (int c = 0; c < hd; c++) dS[r * hd + c] += scale * dor[r] * qr[c];
            for (int c = 0; c < hd; c++) {
                S s = 0;
                for (int r = 0; r < hd; r++) s += St[r * hd + c] * dor[r];
                dq[n * ldd + j * hd + c] = scale * s;
            }
            for (long e = 0; e < hd2; e++) P[e] = a * states[t * hd2 + e];
            S db = 0;
            for (int r = 0; r < hd; r++) {
                kv[r] = gdn_dot(&P[r * hd], kr, hd);
                dd[r] = gdn_dot(&dS[r * hd], kr, hd);  // d delta
                dv[n * ldd + j * hd + r] = bt * dd[r];
                db += dd[r] * (vr[r] - kv[r]);
            }
            dbeta[n * h + j] = db;
            for (int c = 0; c < hd; c++) {
                S s = 0;
                for (int r = 0; r < hd; r++) s += dS[r * hd + c] * bt * (vr[r] - kv[r]) - bt * P[r * hd + c] * dd[r];
                dk[n * ldd + j * hd + c] = s;
            }
            S sg = 0;
            for (int r = 0; r < hd; r++)
                for (int c = 0; c < hd; c++) {
                    const S dP = dS[r * hd + c] - bt * dd[r] * kr[c];
                    sg += dP * P[r * hd + c];
                    dS[r * hd + c] = a * dP;
                }
            dg[n * h + j] = sg;
        }
    }
}

// ======================================================================================================
// the chunk's products: C = A B over whole vectors of B's rows, no packing
// ======================================================================================================
// A chunk's products are small (64 x 64 by hd): ref::gemm packs both operands per call and, on AVX-512, sweeps
// 48-column tiles (a 64-wide product computes a zero-padded second one). gdn_mm reads B's rows in place, each a
// whole number of vectors (the chunk's buffers have rows of gdn_pad(hd) values, or C), broadcasts A's values
// (any strides, so a transposed A is read in place too), and keeps a tile of GDN_MR rows by up to GDN_NV vectors
// in registers. Each element is ref::gemm's arithmetic for K <= GEMM_KC: the sum over k in order by fused
// multiply-adds from 0, then stored to C or added to it; so a row of C never depends on the other rows.
// C's columns past N are written up to a whole vector (B's padding columns: zero, or never read).
// Triangles (GdnTri, or-ed; rows in blocks of GDN_MR counted from the chunk's row 0, whatever rows a call computes,
// so the forward's rows and gdn_decode's sum the same terms):
//   a_lower  A(i, k) = 0 for k > i: a block sums k < its end.    a_upper  A(i, k) = 0 for k < i: k >= its start.
//   c_lower  only C(i, x), x <= i is wanted: a block's columns stop at the vector holding its last row.
// A skipped term is an exact zero times a finite value: the sum is the full product's (to the sign of a zero).
// gdn_mm_flops counts the FLOPs executed (2 per multiply-add of a whole vector, padding lanes included) by the
// chunk's products and forward substitution: dev/roofline reads it.
#if defined(__AVX512F__)
constexpr int GDN_MR = 4, GDN_NV = 4;  // 16 of the 32 zmm registers accumulate: 4 rows by 64 floats
#else
constexpr int GDN_MR = 4, GDN_NV = 2;  // AVX2's 16 ymm: 8 accumulators, 2 B vectors, a broadcast
#endif
enum GdnTri { gdn_full = 0, gdn_a_lower = 1, gdn_a_upper = 2, gdn_c_lower = 4 };
inline std::atomic<long> gdn_mm_flops{0};

template <typename S> inline int gdn_pad(int n) {  // n rounded up to whole vectors
    constexpr int Ln = GemmVec<S>::lanes;
    return (n + Ln - 1) / Ln * Ln;
}

// Keeps v in a register: GCC would otherwise fold each load of B into the fused multiply-adds that use it, one
// load per row of the tile (MR times the loads, and the load ports, not the FMA units, would set the pace).
template <typename V> inline V gdn_pinned(V v) {
#if defined(__AVX512F__)
    asm("" : "+v"(v));
#elif defined(__AVX__)
    asm("" : "+x"(v));
#endif
    return v;
}

// Rows [0, MR) of C (= or +=) A . B over k in [k0, k1), NV vectors of columns.
template <typename S, int MR, int NV>
inline void gdn_mm_tile(int k0, int k1, const S* __restrict A, long ars, long acs, const S* __restrict B, long ldb,
                        S* __restrict C, long ldc, bool accumulate) {
    typedef typename GemmVec<S>::type Vs;
    constexpr int Ln = GemmVec<S>::lanes;
    Vs acc[MR][NV] = {};
    for (int k = k0; k < k1; k++) {
        Vs b[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            Vs t;
            std::memcpy(&t, B + (long)k * ldb + v * Ln, sizeof(Vs));
            b[v] = gdn_pinned(t);
        }
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++) {
            const S a = A[i * ars + k * acs];
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[i][v] += a * b[v];
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            Vs c = acc[i][v];
            if (accumulate) {
                std::memcpy(&c, C + i * ldc + v * Ln, sizeof(Vs));
                c += acc[i][v];
            }
            std::memcpy(C + i * ldc + v * Ln, &c, sizeof(Vs));
        }
}

template <typename S, int MR>
inline void gdn_mm_rows(int nv, int k0, int k1, const S* A, long ars, long acs, const S* B, long ldb, S* C, long ldc,
                        bool accumulate) {
    constexpr int Ln = GemmVec<S>::lanes;
    for (int v0 = 0; v0 < nv; v0 += GDN_NV) {
        const int n = std::min(GDN_NV, nv - v0);
        const S* b = B + v0 * Ln;
        S* c = C + v0 * Ln;
        if (n == GDN_NV) gdn_mm_tile<S, MR, GDN_NV>(k0, k1, A, ars, acs, b, ldb, c, ldc, accumulate);
        else if (n == 1) gdn_mm_tile<S, MR, 1>(k0, k1, A, ars, acs, b, ldb, c, ldc, accumulate);
        else if constexpr (GDN_NV > 2) {
            if (n == 2) gdn_mm_tile<S, MR, 2>(k0, k1, A, ars, acs, b, ldb, c, ldc, accumulate);
            else gdn_mm_tile<S, MR, 3>(k0, k1, A, ars, acs, b, ldb, c, ldc, accumulate);
        }
    }
}

// Rows [r0, r1) of C (N columns) (= or +=) A (K columns) . B: A and C point at row r0, A(i, k) = A[i ars + k acs],
// B(k, j) = B[k ldb + j]; ldb and ldc whole vectors.
template <typename S>
void gdn_mm(int tri, int r0, int r1, int N, int K, const S* A, long ars, long acs, const S* B, long ldb, S* C, long ldc,
            bool accumulate) {
    constexpr int Ln = GemmVec<S>::lanes, MR = GDN_MR;
    long macs = 0;
    // column panels of GDN_NV vectors outside, so that a panel of B is read from L1 by every block of rows
    for (int v0 = 0; v0 < (N + Ln - 1) / Ln; v0 += GDN_NV)
        for (int r = r0; r < r1;) {
            const int blk = r / MR * MR, e = std::min(r1, blk + MR), m = e - r;
            const int k0 = tri & gdn_a_upper ? std::min(blk, K) : 0;
            const int k1 = tri & gdn_a_lower ? std::min(blk + MR, K) : K;
            const int nv = std::min(GDN_NV, ((tri & gdn_c_lower ? std::min(N, blk + MR) : N) + Ln - 1) / Ln - v0);
            const S* a = A + (r - r0) * ars;
            const S* b = B + v0 * Ln;
            S* c = C + (r - r0) * ldc + v0 * Ln;
            r = e;
            if (nv <= 0) continue;
            if (m == MR) gdn_mm_rows<S, MR>(nv, k0, k1, a, ars, acs, b, ldb, c, ldc, accumulate);
            else if (m == 1) gdn_mm_rows<S, 1>(nv, k0, k1, a, ars, acs, b, ldb, c, ldc, accumulate);
            else if (m == 2) gdn_mm_rows<S, 2>(nv, k0, k1, a, ars, acs, b, ldb, c, ldc, accumulate);
            else gdn_mm_rows<S, 3>(nv, k0, k1, a, ars, acs, b, ldb, c, ldc, accumulate);
            macs += (long)m * nv * Ln * std::max(0, k1 - k0);
        }
    gdn_mm_flops.fetch_add(2 * macs, std::memory_order_relaxed);
}

// ======================================================================================================
// the gated delta rule, chunked form (WY / UT representation, chunks of GDN_CHUNK)
// ======================================================================================================
// A chunk's buffers start on a cache line (malloc's 16 bytes would split most vector loads and stores in two).
template <typename S> struct GdnAlloc {
    typedef S value_type;
    GdnAlloc() = default;
    template <typename U> GdnAlloc(const GdnAlloc<U>&) {}
    S* allocate(size_t n) { return static_cast<S*>(::operator new(n * sizeof(S), std::align_val_t(64))); }
    void deallocate(S* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
    bool operator==(const GdnAlloc&) const { return true; }
    bool operator!=(const GdnAlloc&) const { return false; }
};
template <typename S> using GdnVec = std::vector<S, GdnAlloc<S>>;

// One head's chunk: its rows so far and every matrix the rows after them (and the backward) read. Row i of each
// lives at i (times its row length: C, or hp = gdn_pad(hd) with the columns past hd zero), whatever rows a call
// computes. KT = K^T (hp x C), S0T = S0^T (the state at the chunk's start, transposed: B of W S0^T and Q S0^T).
template <typename S> struct GdnChunk {
    int hd = 0, hp = 0;
    GdnVec<S> G, Gam, K, KT, KK, T, Kb, Vb, W, U, Oi, M, tmp, S0T;  // Gam (C x C): exp(G_i - G_x), x <= i
    explicit GdnChunk(int hd_ = 0) : hd(hd_), hp(gdn_pad<S>(hd_)) {
        const size_t C = GDN_CHUNK, ch = C * hp;
        G.assign(C, 0), Gam.assign(C * C, 0), KK.assign(C * C, 0), T.assign(C * C, 0), M.assign(C * C, 0);
        for (auto* x : {&K, &KT, &Kb, &Vb, &W, &U, &Oi, &tmp}) x->assign(ch, 0);
        S0T.assign((size_t)hp * hp, 0);
    }
    size_t bytes() const {
        size_t n = 0;
        for (const auto* x : {&G, &Gam, &K, &KT, &KK, &T, &Kb, &Vb, &W, &U, &Oi, &M, &tmp, &S0T}) n += x->size();
        return n * sizeof(S);
    }
};

// Row i of T = (I + A)^-1 from its rows before i: T_i = e_i - sum_{l < i} A_il T_l, A_il = beta_i Gam_il KK_il,
// each entry's updates in order of l. T_l is zero past l: the sum runs over the vectors holding T_l's entries
// 0..l, kept in registers (an entry m > l, skipped, would only add zeros to its zero).
// Returns the multiply-adds executed (whole vectors).
template <typename S> long gdn_substitute_row(S* T, int i, S bi, const S* Gam_i, const S* KK_i) {
    typedef typename GemmVec<S>::type Vs;
    constexpr int Ln = GemmVec<S>::lanes, NV = GDN_CHUNK / Ln;
    Vs acc[NV] = {};
    long macs = 0;
    for (int l = 0; l < i; l++) {
        const S a = bi * Gam_i[l] * KK_i[l];
        const S* Tl = T + l * GDN_CHUNK;
        const int nv = l / Ln + 1;
        macs += nv * Ln;
#pragma GCC unroll 8
        for (int u = 0; u < NV; u++)
            if (u < nv) {
                Vs t;
                std::memcpy(&t, Tl + u * Ln, sizeof(Vs));
                acc[u] -= a * t;
            }
    }
    S* Ti = T + i * GDN_CHUNK;
    for (int u = 0; u < NV; u++) std::memcpy(Ti + u * Ln, &acc[u], sizeof(Vs));
    Ti[i] = 1;
    return macs;
}

// Rows [r0, r1) of the chunk whose rows [0, r0) the chunk already holds, from the state S0 (hd x hd) at its start:
// q, k, v rows of stride ld and beta, g of stride gs all point at row r0; o (rows of stride ldo) gets rows r0..r1,
// or, null, is not wanted (the backward, which reads the chunk's matrices alone: tril(..) U is skipped).
template <typename S>
void gdn_chunk_rows(GdnChunk<S>& c, const S* S0, int r0, int r1, const S* q, const S* k, const S* v, long ld,
                    const S* beta, const S* g, long gs, S* o, long ldo) {
    constexpr int C = GDN_CHUNK;
    const int hd = c.hd, hp = c.hp;
    const S scale = S(1) / std::sqrt(S(hd));
    S *G = c.G.data(), *Gam = c.Gam.data(), *K = c.K.data(), *KT = c.KT.data(), *KK = c.KK.data(), *T = c.T.data();
    S *Kb = c.Kb.data(), *Vb = c.Vb.data(), *W = c.W.data(), *U = c.U.data(), *Oi = c.Oi.data(), *M = c.M.data(),
      *tmp = c.tmp.data(), *S0T = c.S0T.data();
    for (int i = r0; i < r1; i++) {  // K, and Kb = diag(beta exp(G)) K, Vb = diag(beta) V
        G[i] = (i ? G[i - 1] : S(0)) + g[(i - r0) * gs];
        const S bi = beta[(i - r0) * gs], eGi = std::exp(G[i]);
        const S *kr = k + (i - r0) * ld, *vr = v + (i - r0) * ld;
        for (int x = 0; x < hd; x++)
            K[i * hp + x] = kr[x], Kb[i * hp + x] = bi * eGi * kr[x], Vb[i * hp + x] = bi * vr[x];
    }
    gdn_transpose(KT + r0, C, K + r0 * hp, hp, r1 - r0, hd);
    gdn_transpose(S0T, hp, S0, hd, hd, hd);
    gdn_mm(gdn_c_lower, r0, r1, r1, hd, K + r0 * hp, hp, 1, KT, C, KK + r0 * C, C, false);  // KK = K K^T
    long subst = 0;                                                                         // multiply-adds
    for (int i = r0; i < r1; i++) {
        for (int x = 0; x <= i; x++) Gam[i * C + x] = G[i] - G[x];
        gdn_exp_nonpositive(Gam + i * C, i + 1);
        // T_i = e_i - sum_{l < i} A_il T_l, A_il = beta_i exp(G_i - G_l) KK_il (T_l is zero beyond l)
        subst += gdn_substitute_row(T, i, beta[(i - r0) * gs], Gam + i * C, KK + i * C);
    }
    gdn_mm_flops.fetch_add(2 * subst, std::memory_order_relaxed);
    gdn_mm(gdn_a_lower, r0, r1, hd, r1, T + r0 * C, C, 1, Kb, hp, W + r0 * hp, hp, false);    // W = T Kb
    gdn_mm(gdn_a_lower, r0, r1, hd, r1, T + r0 * C, C, 1, Vb, hp, U + r0 * hp, hp, false);    // U = T Vb ..
    gdn_mm(gdn_full, r0, r1, hd, hd, W + r0 * hp, hp, 1, S0T, hp, tmp + r0 * hp, hp, false);  // .. - W S0^T
    for (long e = (long)r0 * hp; e < (long)r1 * hp; e++) U[e] -= tmp[e];
    gdn_mm(gdn_full, r0, r1, hd, hd, q, ld, 1, S0T, hp, Oi + r0 * hp, hp, false);  // Q S0^T
    gdn_mm(gdn_c_lower, r0, r1, r1, hd, q, ld, 1, KT, C, M + r0 * C, C, false);    // Q K^T, masked and decayed
    for (int i = r0; i < r1; i++)
        for (int x = 0; x < r1; x++) M[i * C + x] = x <= i ? M[i * C + x] * Gam[i * C + x] : S(0);
    if (!o) return;  // the backward's recompute: M, not the output
    gdn_mm(gdn_a_lower, r0, r1, hd, r1, M + r0 * C, C, 1, U, hp, tmp + r0 * hp, hp, false);  // tril(..) U
    for (int i = r0; i < r1; i++) {
        const S eGi = std::exp(G[i]);
        for (int x = 0; x < hd; x++) o[(i - r0) * ldo + x] = (eGi * Oi[i * hp + x] + tmp[i * hp + x]) * scale;
    }
}

// S1 (hd x hd) = the state after the chunk's L rows: exp(G_{L-1}) S0 + U^T diag(exp(G_{L-1} - G)) K. S1 != S0.
// Scratch: c.tmp (Kd) and c.S0T (U^T Kd; S0T is rebuilt from S0 by the next rows).
template <typename S> void gdn_chunk_state(GdnChunk<S>& c, const S* S0, int L, S* S1) {
    const int hd = c.hd, hp = c.hp;
    const S GL = c.G[L - 1];
    for (int i = 0; i < L; i++) {
        const S d = std::exp(GL - c.G[i]);
        for (int x = 0; x < hd; x++) c.tmp[i * hp + x] = d * c.K[i * hp + x];
    }
    S* P = c.S0T.data();
    gdn_mm(gdn_full, 0, hd, hd, L, c.U.data(), 1, hp, c.tmp.data(), hp, P, hp, false);
    const S eL = std::exp(GL);
    for (int r = 0; r < hd; r++)
        for (int x = 0; x < hd; x++) S1[r * hd + x] = eL * S0[r * hd + x] + P[r * hp + x];
}

inline long gdn_chunks(long T) { return (T + GDN_CHUNK - 1) / GDN_CHUNK; }

// Asks for rows [0, rows) of n values (stride ld) in L2 ahead of their use: a head's rows of a chunk are n values
// each a whole row (ld) apart, a pattern the hardware prefetchers do not follow far enough (the forward lost a
// fifth of its time waiting for q, k, v). write: rows about to be written.
template <typename S> inline void gdn_prefetch(const S* p, long ld, long rows, int n, bool write = false) {
    for (long r = 0; r < rows; r++)
        for (int x = 0; x < n; x += 64 / (int)sizeof(S)) {
            if (write) __builtin_prefetch(p + r * ld + x, 1, 3);
            else __builtin_prefetch(p + r * ld + x, 0, 3);
        }
}

// The (sequence, head) pairs [bh0, bh1) of this thread in a parallel region: contiguous, as equal as may be. Each
// pair's arithmetic is the same whichever thread runs it, so the results do not depend on the thread count. A build
// without OpenMP (the race build's kernel tests) runs the region once, as thread 0 of 1.
inline void gdn_thread_heads(long n, long& bh0, long& bh1) {
#ifdef _OPENMP
    const long nt = omp_get_num_threads(), t = omp_get_thread_num();
#else
    const long nt = 1, t = 0;
#endif
    bh0 = n * t / nt, bh1 = n * (t + 1) / nt;
}

// As gdn_delta_recurrent_forward, by chunks; states (B, h, gdn_chunks(T), hd, hd) = each chunk's starting state,
// which the backward reads. A thread takes chunk ci of each of its heads before chunk ci + 1: a chunk's rows of
// the heads side by side in memory share their pages and lines (a head's own rows are a whole row apart, and the
// whole of one head's T rows at T 4096 spans more pages than the TLB holds).
template <typename S>
void gdn_delta_chunk_forward(S* o, long ldo, S* states, const S* q, const S* k, const S* v, long ld, const S* beta,
                             const S* g, long B, long T, const GdnShape& sh) {
    const int h = sh.h, hd = sh.hd;
    const long nc = gdn_chunks(T), hd2 = (long)hd * hd;
#pragma omp parallel if (B * h * T * hd * hd >= OMP_MIN_WORK)
    {
        GdnChunk<S> c(hd);
        long bh0, bh1;
        gdn_thread_heads(B * h, bh0, bh1);
        for (long bh = bh0; bh < bh1; bh++) std::fill_n(states + bh * nc * hd2, hd2, S(0));
        for (long ci = 0; ci < nc; ci++)
            for (long bh = bh0; bh < bh1; bh++) {
                const long b = bh / h, col = bh % h * hd, n = b * T + ci * GDN_CHUNK;
                const int L = (int)std::min<long>(GDN_CHUNK, T - ci * GDN_CHUNK);
                S* st = states + bh * nc * hd2;
                if (bh + 1 < bh1 || ci + 1 < nc) {  // the next rows: the next head's, or the first head's next chunk
                    const long bn = bh + 1 < bh1 ? bh + 1 : bh0, cn = bh + 1 < bh1 ? ci : ci + 1;
                    const long m = bn / h * T + cn * GDN_CHUNK, cm = bn % h * hd;
                    const long Ln = std::min<long>(GDN_CHUNK, T - cn * GDN_CHUNK);
                    for (const S* x : {q, k, v}) gdn_prefetch(x + m * ld + cm, ld, Ln, hd);
                    gdn_prefetch(o + m * ldo + cm, ldo, Ln, hd, true);
                }
                gdn_chunk_rows(c, st + ci * hd2, 0, L, q + n * ld + col, k + n * ld + col, v + n * ld + col, ld,
                               beta + n * h + bh % h, g + n * h + bh % h, h, o + n * ldo + col, ldo);
                if (ci + 1 < nc) gdn_chunk_state(c, st + ci * hd2, L, st + (ci + 1) * hd2);
            }
    }
}

// The backward of one chunk of L rows, recomputed from its starting state S0 (c already holds the forward's
// rows): dq, dk, dv (rows of stride ldd), dbeta, dg (stride gs) of its rows assigned; dS (hd x hd) = dLoss/dS1
// on entry, dLoss/dS0 on return. Scratch: the vectors of d, rows of hp = gdn_pad(hd) or C values; the suffix T a
// transposed copy (the B of a product with that matrix transposed).
template <typename S> struct GdnChunkGrad {
    GdnVec<S> dO, dM, dU, dW, dT, X, dA, dQ, dK, dKb, dVb, tmp, Qp, UT, VbT, KbT, TT, S0p, dSp, dST, dS0, dG, db, eG,
        Pb;
    explicit GdnChunkGrad(int hd) {
        const size_t C = GDN_CHUNK, hp = gdn_pad<S>(hd), ch = C * hp;
        for (auto* x : {&dO, &dU, &dW, &dQ, &dK, &dKb, &dVb, &tmp, &Qp, &UT, &VbT, &KbT}) x->assign(ch, 0);
        for (auto* x : {&dM, &dT, &dA, &TT, &Pb}) x->assign(C * C, 0);
        X.assign(std::max({C * C, ch, hp * hp}), 0);  // T^T dT, diag(..) K and dU^T W in turn
        for (auto* x : {&S0p, &dSp, &dST, &dS0}) x->assign(hp * hp, 0);
        dG.assign(C, 0), db.assign(C, 0), eG.assign(C, 0);
    }
};
template <typename S>
void gdn_chunk_backward(GdnChunk<S>& c, GdnChunkGrad<S>& d, S* dS, const S* S0, int L, const S* q, const S* v, long ld,
                        const S* beta, long gs, const S* dout, long lddo, S* dq, S* dk, S* dv, long ldd, S* dbeta,
                        S* dg) {
    constexpr int C = GDN_CHUNK;
    const int hd = c.hd, hp = c.hp;
    const S scale = S(1) / std::sqrt(S(hd));
    const S *G = c.G.data(), *Gam = c.Gam.data(), *K = c.K.data(), *KK = c.KK.data(), *T = c.T.data(),
            *Kb = c.Kb.data();
    const S *Vb = c.Vb.data(), *W = c.W.data(), *U = c.U.data(), *Oi = c.Oi.data(), *M = c.M.data();
    S *dO = d.dO.data(), *dM = d.dM.data(), *dU = d.dU.data(), *dW = d.dW.data(), *dT = d.dT.data(), *X = d.X.data();
    S *dA = d.dA.data(), *dQ = d.dQ.data(), *dK = d.dK.data(), *dKb = d.dKb.data(), *dVb = d.dVb.data();
    S *tmp = d.tmp.data(), *dS0 = d.dS0.data(), *dG = d.dG.data(), *db = d.db.data(), *eG = d.eG.data();
    S *Qp = d.Qp.data(), *UT = d.UT.data(), *VbT = d.VbT.data(), *KbT = d.KbT.data(), *TT = d.TT.data();
    S *S0p = d.S0p.data(), *dSp = d.dSp.data(), *dST = d.dST.data();
    const S GL = G[L - 1], eL = std::exp(GL);
    for (int i = 0; i < L; i++) {
        eG[i] = std::exp(G[i]), dG[i] = 0, db[i] = 0;
        for (int x = 0; x < hd; x++) dO[i * hp + x] = scale * dout[i * lddo + x], Qp[i * hp + x] = q[i * ld + x];
    }
    gdn_transpose(UT, C, U, hp, L, hd), gdn_transpose(VbT, C, Vb, hp, L, hd), gdn_transpose(KbT, C, Kb, hp, L, hd);
    gdn_transpose(TT, C, T, C, L, L), gdn_transpose(dST, hp, dS, hd, hd, hd);
    for (int r = 0; r < hd; r++)
        for (int x = 0; x < hd; x++) S0p[r * hp + x] = S0[r * hd + x], dSp[r * hp + x] = dS[r * hd + x];
    // O's inter-chunk term diag(exp(G)) Q S0^T
    for (int i = 0; i < L; i++) {
        dG[i] += eG[i] * gdn_dot_vec(dO + i * hp, Oi + i * hp, hd);
        for (int x = 0; x < hd; x++) tmp[i * hp + x] = eG[i] * dO[i * hp + x];
    }
    gdn_mm(gdn_full, 0, L, hd, hd, tmp, hp, 1, S0p, hp, dQ, hp, false);  // dQ = dOi S0
    gdn_mm(gdn_full, 0, hd, hd, L, tmp, 1, hp, Qp, hp, dS0, hp, false);  // dS0 = dOi^T Q
    // O's intra-chunk term M U, M = tril(Q K^T o Gamma)
    gdn_mm(gdn_c_lower, 0, L, L, hd, dO, hp, 1, UT, C, dM, C, false);  // dM = dO U^T
    gdn_mm(gdn_a_upper, 0, L, hd, L, M, 1, C, dO, hp, dU, hp, false);  // dU = M^T dO
    // the mask: dG_i += dM_ix M_ix, dG_x -= dM_ix M_ix (x <= i; in order of i, then x, as one loop would add them:
    // dG_i's own row first, then its column's entries of the rows below); dM o Gamma = d(Q K^T)
    gdn_row_sums(dG, dM, M, C, L, 1);
    for (int i = 0; i < L; i++) {
        dG[i] -= dM[i * C + i] * M[i * C + i];
        for (int x = 0; x < i; x++) dG[x] -= dM[i * C + x] * M[i * C + x];
        for (int x = 0; x <= i; x++) dM[i * C + x] *= Gam[i * C + x];
        for (int x = i + 1; x < L; x++) dM[i * C + x] = 0;
    }
    gdn_mm(gdn_a_lower, 0, L, hd, L, dM, C, 1, K, hp, dQ, hp, true);    // dQ += dQK K
    gdn_mm(gdn_a_upper, 0, L, hd, L, dM, 1, C, Qp, hp, dK, hp, false);  // dK = dQK^T Q
    // S1 = exp(G_L) S0 + U^T Kd, Kd = diag(exp(G_L - G)) K
    for (int r = 0; r < hd; r++)
        for (int x = 0; x < hd; x++) dS0[r * hp + x] += eL * dS[r * hd + x];
    dG[L - 1] += eL * gdn_dot_vec(dS, S0, hd * hd);
    for (int i = 0; i < L; i++) {
        const S dcy = std::exp(GL - G[i]);
        for (int x = 0; x < hd; x++) X[i * hp + x] = dcy * K[i * hp + x];  // X: Kd (L x hp) here
    }
    gdn_mm(gdn_full, 0, L, hd, hd, X, hp, 1, dST, hp, dU, hp, true);    // dU += Kd dS1^T
    gdn_mm(gdn_full, 0, L, hd, hd, U, hp, 1, dSp, hp, tmp, hp, false);  // U dS1
    for (int i = 0; i < L; i++) {
        const S dd = gdn_dot_vec(tmp + i * hp, X + i * hp, hd), dcy = std::exp(GL - G[i]);
        dG[L - 1] += dd, dG[i] -= dd;
        for (int x = 0; x < hd; x++) dK[i * hp + x] += dcy * tmp[i * hp + x];
    }
    // U = Uv - W S0^T
    gdn_mm(gdn_full, 0, L, hd, hd, dU, hp, 1, S0p, hp, dW, hp, false);  // -dW
    for (int e = 0; e < L * hp; e++) dW[e] = -dW[e];
    gdn_mm(gdn_full, 0, hd, hd, L, dU, 1, hp, W, hp, X, hp, false);  // dU^T W
    for (int r = 0; r < hd; r++)
        for (int x = 0; x < hd; x++) dS0[r * hp + x] -= X[r * hp + x];
    // W = T Kb, Uv = T Vb (dT wanted strictly below the diagonal alone: dA below reads no other entry)
    gdn_mm(gdn_c_lower, 0, L, L, hd, dU, hp, 1, VbT, C, dT, C, false);
    gdn_mm(gdn_c_lower, 0, L, L, hd, dW, hp, 1, KbT, C, dT, C, true);
    gdn_mm(gdn_a_upper, 0, L, hd, L, T, 1, C, dW, hp, dKb, hp, false);  // T^T dW
    gdn_mm(gdn_a_upper, 0, L, hd, L, T, 1, C, dU, hp, dVb, hp, false);  // T^T dUv
    // T = (I + A)^-1: dA = -T^T dT T^T, on A's strictly lower entries (T^T upper triangular, T lower)
    gdn_mm(gdn_a_upper | gdn_c_lower, 0, L, L, L, T, 1, C, dT, C, X, C, false);
    gdn_mm(gdn_a_lower | gdn_c_lower, 0, L, L, L, X, C, 1, TT, C, dA, C, false);
    // A = diag(beta) (K K^T o Gamma) strictly lower: with da = -dA, e = Gamma_ix, dA becomes d(K K^T) = da beta_i e,
    // db_i += da e KK_ix, dG_i += d(K K^T)_ix KK_ix and dG_x -= the same (x < i; in order of i, then x, as above)
    S* Pb = d.Pb.data();  // da e
    for (int i = 0; i < L; i++) {
        const S bi = beta[i * gs];
        for (int x = 0; x < i; x++) {
            const S da = -dA[i * C + x], e = Gam[i * C + x];
            Pb[i * C + x] = da * e;
            dA[i * C + x] = da * bi * e;
        }
        for (int x = i; x < L; x++) dA[i * C + x] = 0;
    }
    gdn_row_sums(db, Pb, KK, C, L, 0);
    gdn_row_sums(dG, dA, KK, C, L, 0);
    for (int i = 0; i < L; i++)
        for (int x = 0; x < i; x++) dG[x] -= dA[i * C + x] * KK[i * C + x];
    gdn_mm(gdn_a_lower, 0, L, hd, L, dA, C, 1, K, hp, dK, hp, true);  // dK += dKK K + dKK^T K
    gdn_mm(gdn_a_upper, 0, L, hd, L, dA, 1, C, K, hp, dK, hp, true);
    // Kb = diag(beta exp(G)) K, Vb = diag(beta) V
    for (int i = 0; i < L; i++) {
        const S bi = beta[i * gs];
        const S tk = gdn_dot_vec(dKb + i * hp, K + i * hp, hd), tv = gdn_dot_vec(dVb + i * hp, v + i * ld, hd);
        db[i] += eG[i] * tk + tv;
        dG[i] += bi * eG[i] * tk;
        for (int x = 0; x < hd; x++) {
            dK[i * hp + x] += bi * eG[i] * dKb[i * hp + x];
            dv[i * ldd + x] = bi * dVb[i * hp + x];
            dq[i * ldd + x] = dQ[i * hp + x];
        }
    }
    S run = 0;  // G = cumsum(g): dg_i = sum_{x >= i} dG_x
    for (int i = L - 1; i >= 0; i--) {
        run += dG[i];
        dg[i * gs] = run;
        dbeta[i * gs] = db[i];
        std::copy_n(dK + i * hp, hd, dk + i * ldd);
    }
    for (int r = 0; r < hd; r++) std::copy_n(dS0 + r * hp, hd, dS + r * hd);
}

// As gdn_delta_recurrent_backward, by chunks from the forward's states, last chunk first; a thread takes chunk ci
// of each of its heads before chunk ci - 1 (as the forward; each head's dLoss/dS of its own).
template <typename S>
void gdn_delta_chunk_backward(S* dq, S* dk, S* dv, long ldd, S* dbeta, S* dg, const S* dout, long lddo, const S* states,
                              const S* q, const S* k, const S* v, long ld, const S* beta, const S* g, long B, long T,
                              const GdnShape& sh) {
    const int h = sh.h, hd = sh.hd;
    const long nc = gdn_chunks(T), hd2 = (long)hd * hd;
#pragma omp parallel if (B * h * T * hd * hd >= OMP_MIN_WORK)
    {
        GdnChunk<S> c(hd);
        GdnChunkGrad<S> d(hd);
        long bh0, bh1;
        gdn_thread_heads(B * h, bh0, bh1);
        std::vector<S> dS((bh1 - bh0) * hd2, S(0));
        for (long ci = nc - 1; ci >= 0; ci--)
            for (long bh = bh0; bh < bh1; bh++) {
                const long b = bh / h, col = bh % h * hd, n = b * T + ci * GDN_CHUNK;
                const int L = (int)std::min<long>(GDN_CHUNK, T - ci * GDN_CHUNK);
                const S* st = states + bh * nc * hd2;
                if (bh + 1 < bh1 || ci > 0) {  // the next rows: the next head's, or the first head's previous chunk
                    const long bn = bh + 1 < bh1 ? bh + 1 : bh0, cn = bh + 1 < bh1 ? ci : ci - 1;
                    const long m = bn / h * T + cn * GDN_CHUNK, cm = bn % h * hd;
                    const long Ln = std::min<long>(GDN_CHUNK, T - cn * GDN_CHUNK);
                    for (const S* x : {q, k, v}) gdn_prefetch(x + m * ld + cm, ld, Ln, hd);
                    gdn_prefetch(dout + m * lddo + cm, lddo, Ln, hd);
                    for (S* x : {dq, dk, dv}) gdn_prefetch(x + m * ldd + cm, ldd, Ln, hd, true);
                }
                const long gi = n * h + bh % h;
                gdn_chunk_rows(c, st + ci * hd2, 0, L, q + n * ld + col, k + n * ld + col, v + n * ld + col, ld,
                               beta + gi, g + gi, h, (S*)nullptr, 0);
                gdn_chunk_backward(c, d, &dS[(bh - bh0) * hd2], st + ci * hd2, L, q + n * ld + col, v + n * ld + col,
                                   ld, beta + gi, h, dout + n * lddo + col, lddo, dq + n * ldd + col,
                                   dk + n * ldd + col, dv + n * ldd + col, ldd, dbeta + gi, dg + gi);
            }
    }
}

// ======================================================================================================
// the whole mixer: xn (N, w) -> y (N, w), step 7's output before wo
// ======================================================================================================
// What the backward reads, sized by gdn_forward: p the in-projection, c the conv's pre-activation, qkv its SiLU
// with q and k normalised (rq, rk their inverse norms), ba the gate projection, beta and g the gates, o the delta
// rule's output and states its chunks' starting states, z the gate of the output norm, rn that norm's inverse rms.
template <typename S> struct GdnActs { std::vector<S> p, c, qkv, rq, rk, ba, beta, g, o, states, z, rn; };

template <typename S>
void gdn_forward(S* y, GdnActs<S>& a, const S* xn, const GdnWeights<S>& W, int B, int T, const GdnShape& sh,
                 double norm_eps) {
    const long N = (long)B * T;
    const int h = sh.h, hd = sh.hd, w = sh.w();
    a.p.resize(N * 3 * w), a.c.resize(N * 3 * w), a.qkv.resize(N * 3 * w), a.rq.resize(N * h), a.rk.resize(N * h);
    a.ba.resize(N * 2 * h), a.beta.resize(N * h), a.g.resize(N * h), a.o.resize(N * w), a.z.resize(N * w);
    a.rn.resize(N * h), a.states.resize(B * h * gdn_chunks(T) * hd * hd);
    matmul_forward(a.p.data(), 3 * w, xn, w, W.wqkv, N, w, 3 * w);
    gdn_conv_forward(a.qkv.data(), 3 * w, a.c.data(), a.p.data(), W.conv_w, B, T, 3 * w);
    gdn_l2norm_forward(a.qkv.data(), 3 * w, a.rq.data(), a.qkv.data(), 3 * w, N, h, hd);
    gdn_l2norm_forward(a.qkv.data() + w, 3 * w, a.rk.data(), a.qkv.data() + w, 3 * w, N, h, hd);
    matmul_forward(a.ba.data(), 2 * h, xn, w, W.wba, N, w, 2 * h);
    gdn_gates_forward(a.beta.data(), a.g.data(), a.ba.data(), W.a_log, W.dt_bias, N, h);
    const S* qkv = a.qkv.data();
    gdn_delta_chunk_forward(a.o.data(), w, a.states.data(), qkv, qkv + w, qkv + 2 * w, 3 * w, a.beta.data(), a.g.data(),
                            B, T, sh);
    matmul_forward(a.z.data(), w, xn, w, W.wz, N, w, w);
    gdn_gated_norm_forward(y, a.rn.data(), a.o.data(), a.z.data(), W.onorm_w, N, h, hd, norm_eps);
}

// dxn (N, w) assigned; the weights' gradients accumulated into G.
template <typename S>
void gdn_backward(S* dxn, const GdnGrads<S>& G, const S* dy, const S* xn, const GdnActs<S>& a, const GdnWeights<S>& W,
                  int B, int T, const GdnShape& sh, double norm_eps) {
    const long N = (long)B * T;
    const int h = sh.h, hd = sh.hd, w = sh.w();
    std::vector<S> d_o(N * w), dz(N * w), dqkv(N * 3 * w), dbeta(N * h), dg(N * h), dba(N * 2 * h), dp(N * 3 * w);
    gdn_gated_norm_backward(d_o.data(), dz.data(), G.onorm_w, dy, a.o.data(), a.z.data(), a.rn.data(), W.onorm_w, N, h,
                            hd);
    matmul_backward(dxn, w, G.wz, dz.data(), w, xn, w, W.wz, N, w, w);
    const S* qkv = a.qkv.data();
    S* d = dqkv.data();
    gdn_delta_chunk_backward(d, d + w, d + 2 * w, 3 * w, dbeta.data(), dg.data(), d_o.data(), w, a.states.data(), qkv,
                             qkv + w, qkv + 2 * w, 3 * w, a.beta.data(), a.g.data(), B, T, sh);
    gdn_gates_backward(dba.data(), G.a_log, G.dt_bias, dbeta.data(), dg.data(), a.ba.data(), a.beta.data(), a.g.data(),
                       W.a_log, W.dt_bias, N, h);
    gemm<S>(N, w, 2 * h, dba.data(), 2 * h, 1, W.wba, w, 1, dxn, w, true);  // dxn += dba Wba
    matmul_backward<S>(nullptr, w, G.wba, dba.data(), 2 * h, xn, w, W.wba, N, w, 2 * h);
    gdn_l2norm_backward(d, 3 * w, d, 3 * w, qkv, 3 * w, a.rq.data(), N, h, hd);
    gdn_l2norm_backward(d + w, 3 * w, d + w, 3 * w, qkv + w, 3 * w, a.rk.data(), N, h, hd);
    gdn_conv_backward(dp.data(), G.conv_w, d, 3 * w, a.c.data(), a.p.data(), W.conv_w, B, T, 3 * w);
    gemm<S>(N, w, 3 * w, dp.data(), 3 * w, 1, W.wqkv, w, 1, dxn, w, true);  // dxn += dp Wqkv
    matmul_backward<S>(nullptr, w, G.wqkv, dp.data(), 3 * w, xn, w, W.wqkv, N, w, 3 * w);
}

// ======================================================================================================
// decoding: one sequence's cache, n rows appended at a time, each row's bits those of gdn_forward's
// ======================================================================================================
// S_ (h, hd, hd): the state at the start of the current chunk (the chunk's rows are in chunk); tail (3, 3w): the
// conv's last 3 inputs, oldest first; t: the tokens so far. Empty vectors: a fresh sequence (gdn_decode sizes
// them). Memory per sequence: h (hd^2 + the chunk's C (5 hd + 3 C + 1)) + 9 w values, constant in T.
template <typename S> struct GdnState {
    std::vector<S> S_, tail;
    std::vector<GdnChunk<S>> chunk;  // per head
    long t = 0;
};

template <typename S>
void gdn_decode(S* y, GdnState<S>& st, const S* xn, const GdnWeights<S>& W, int n, const GdnShape& sh,
                double norm_eps) {
    const int h = sh.h, hd = sh.hd, w = sh.w(), C3 = 3 * w;
    const long hd2 = (long)hd * hd;
    if (st.S_.empty()) {
        st.S_.assign(h * hd2, S(0)), st.tail.assign(3 * C3, S(0)), st.chunk.assign(h, GdnChunk<S>(hd));
        st.t = 0;
    }
    std::vector<S> p(n * C3), cpre(n * C3), qkv(n * C3), rq(n * h), rk(n * h), ba(n * 2 * h), beta(n * h), g(n * h),
        o(n * w), z(n * w), rn(n * h), S1(hd2);
    matmul_forward(p.data(), C3, xn, w, W.wqkv, n, w, C3);
    for (int i = 0; i < n; i++) {
        const long t = st.t + i;
        const S* x[GDN_CONV];
        for (int k = 0; k < GDN_CONV; k++) {
            const long tp = t - 3 + k;  // < st.t: in the tail, whose row r holds position st.t - 3 + r
            x[k] = tp < 0 ? nullptr : tp >= st.t ? &p[(tp - st.t) * C3] : &st.tail[(tp - st.t + 3) * C3];
        }
        gdn_conv_row(&cpre[i * C3], x, W.conv_w, C3);
        gdn_silu_row(&qkv[i * C3], &cpre[i * C3], C3);
    }
    std::vector<S> tail(3 * C3);  // the last 3 inputs after these rows
    for (int r = 0; r < 3; r++) {
        const long tp = st.t + n - 3 + r;
        if (tp >= st.t) std::copy_n(&p[(tp - st.t) * C3], C3, &tail[r * C3]);
        else std::copy_n(&st.tail[(tp - st.t + 3) * C3], C3, &tail[r * C3]);
    }
    st.tail.swap(tail);
    gdn_l2norm_forward(qkv.data(), C3, rq.data(), qkv.data(), C3, n, h, hd);
    gdn_l2norm_forward(qkv.data() + w, C3, rk.data(), qkv.data() + w, C3, n, h, hd);
    matmul_forward(ba.data(), 2 * h, xn, w, W.wba, n, w, 2 * h);
    gdn_gates_forward(beta.data(), g.data(), ba.data(), W.a_log, W.dt_bias, n, h);
    for (int j = 0; j < h; j++) {
        GdnChunk<S>& c = st.chunk[j];
        S* S0 = &st.S_[j * hd2];
        for (int i0 = 0; i0 < n;) {
            const int r0 = (int)((st.t + i0) % GDN_CHUNK), r1 = std::min(GDN_CHUNK, r0 + (n - i0));
            const long col = j * hd;
            gdn_chunk_rows(c, S0, r0, r1, &qkv[i0 * C3 + col], &qkv[i0 * C3 + w + col], &qkv[i0 * C3 + 2 * w + col], C3,
                           &beta[i0 * h + j], &g[i0 * h + j], h, &o[i0 * w + col], w);
            if (r1 == GDN_CHUNK) {
                gdn_chunk_state(c, S0, GDN_CHUNK, S1.data());
                std::copy(S1.begin(), S1.end(), S0);
            }
            i0 += r1 - r0;
        }
    }
    matmul_forward(z.data(), w, xn, w, W.wz, n, w, w);
    gdn_gated_norm_forward(y, rn.data(), o.data(), z.data(), W.onorm_w, n, h, hd, norm_eps);
    st.t += n;
}

}  // namespace ref
