// ref/ops.h: the fp32 CPU reference of every op of the model except the matrix multiply (ref/gemm.h), forward
// and backward, each the function a GPU kernel names in its "Matches ref::..." comment. Templated on the scalar
// S: float for training, double for the finite-difference gradient checks in test/test_reference.cpp.
//   embedding   x (N, D) = [wte[token] | 0]                      residual  x[:, :w] += y (N, w)
//   norm        LayerNorm / RMSNorm of x[:, :w], x (N, ldx)       rope      in place on q and k of qkv (B, T, ld)
//   attention   causal (or windowed), h query heads over kv K/V heads of qkv (B, T, ld) -> (B, T, w); and a
//               decoder's: new rows over a KV cache (attention_decode)
//   swiglu      (N, 2 hid) -> (N, hid)
//   (ld = w + 2 kv hd: 3 w without KV groups; AttnShape below)
//   logit scale x *= s in place (muP's output multiplier; its backward is the same op on the gradient)
//   softmax cross-entropy over V: lse, losses, probs, and its backward; the mean loss
//
// Conventions (the same in every backward below, and in RefModel::backward, ref/reference.h):
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
//     serial order per output element. No atomics, no per-thread partial sums. Short dot products
//     (attention) use `omp simd` reductions: a lane split fixed at compile time, the same for any thread count.
//   * fp32 means fp32 storage and arithmetic, with two deliberate exceptions: sums over V (log-sum-exp)
//     accumulate in double, and float softmax rows use a vectorised exp (< 3e-7 relative error).
//
// Sizes: B batch, T sequence, d embedding width, w = w_l layer width, h = h_l heads, hd = head_dim = w / h,
// hid = hidden_l (SwiGLU intermediate), D residual stream width, V vocabulary, N = B * T rows.
// Does not: pad V, use bf16, or know the model's layout (the whole model is ref/reference.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ref/parallel.h"
#include "attention_span.h"
#include "model_config.h"
#include "util/errors.h"

namespace ref {

// ======================================================================================================
// token embedding
// ======================================================================================================
// x (N, D): row n = [wte[tokens[n]] (d) | zeros (D - d)].
template <typename S> void embedding_forward(S* x, const int* tokens, const S* wte, long N, int d, int D) {
#pragma omp parallel for if (N * D >= OMP_MIN_WORK)
    for (long n = 0; n < N; n++) {
        std::copy_n(wte + (size_t)tokens[n] * d, d, x + n * D);
        std::fill(x + n * D + d, x + (n + 1) * D, S(0));
    }
}

// dwte (V, d) += dx[:, :d] scattered by token. Threads own column chunks and walk the tokens in order, so
// repeated tokens add in a fixed order.
template <typename S> void embedding_backward(S* dwte, const S* dx, long ldx, const int* tokens, long N, int d) {
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
void norm_forward(NormType type, S* out, S* mean, S* rstd, const S* x, long ldx, const S* g, const S* b, long N, int w,
                  double eps) {
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
// The attention's shape: h query heads and kv K/V heads of head_dim hd, a window (0: global), and the qkv row
// [q (h hd) | k (kv hd) | v (kv hd)] of ld = (h + 2 kv) hd columns. Query head j reads K/V head j / (h / kv)
// (consecutive query heads share one K/V head, as in GQA's usual layout). kv = h and window 0 is the plain
// causal multi-head attention, computed with exactly the arithmetic it had before KV groups and windows existed.
// ======================================================================================================
struct AttnShape {
    int h, kv, hd, window;
    int w() const { return h * hd; }    // q and attention-output columns
    int kw() const { return kv * hd; }  // k (and v) columns
    long ld() const { return (long)(h + 2 * kv) * hd; }
    int kv_of(int head) const { return head / (h / kv); }
    long first_key(long t) const { return att_first_key(t, window); }  // keys [first, t]: attention_span.h's rule
    static AttnShape plain(int w, int h) { return {h, h, w / h, 0}; }
    static AttnShape of(const LayerSpec& s) { return {s.heads, s.kv(), s.head_dim(), s.window}; }
};

// ======================================================================================================
// RoPE on every query head and every K head of qkv (B, T, ld), in place
// ======================================================================================================
// (a, b) at position t -> (a cos - b sin, a sin + b cos) with angle t * theta^(-2i / hd), i in [0, hd/2); row r
// of a sequence is at position t = p0 + r (p0 > 0: a decoder's chunk after p0 cached positions).
// The backward is the inverse rotation (angle -> -angle) applied to dqkv; v is untouched.
// cos/sin are computed in double and rounded to S so float and double agree to S's precision.
template <typename S>
void rope_rotate(S* qkv, long B, long T, const AttnShape& a, double theta, double sign, long p0 = 0) {
    const int hd = a.hd, w = a.w();
    const long ld = a.ld();
    if (hd % 2)
        throw ConfigError("RoPE needs an even head_dim; got w=" + std::to_string(w) + " h=" + std::to_string(a.h));
    std::vector<double> freq(hd / 2);
    for (int i = 0; i < hd / 2; i++) freq[i] = std::pow(theta, -2.0 * i / hd);
#pragma omp parallel for if (B * T * ld >= OMP_MIN_WORK)
    for (long n = 0; n < B * T; n++) {
        const long t = p0 + n % T;
        S* row = qkv + n * ld;
        for (int i = 0; i < hd / 2; i++) {
            const S c = (S)std::cos(t * freq[i]), s = (S)(sign * std::sin(t * freq[i]));
            for (int hh = 0; hh < a.h + a.kv; hh++) {  // the query heads, then the K heads
                S* p = row + (hh < a.h ? hh * hd : w + (hh - a.h) * hd) + 2 * i;
                const S x = p[0], y = p[1];
                p[0] = x * c - y * s;
                p[1] = x * s + y * c;
            }
        }
    }
}
template <typename S> void rope_forward(S* qkv, long B, long T, const AttnShape& a, double theta, long p0 = 0) {
    rope_rotate(qkv, B, T, a, theta, 1.0, p0);
}
template <typename S> void rope_backward(S* dqkv, long B, long T, const AttnShape& a, double theta) {
    rope_rotate(dqkv, B, T, a, theta, -1.0);
}
// Plain multi-head attention's qkv (B, T, 3 w), h heads.
template <typename S> void rope_forward(S* qkv, long B, long T, int w, int h, double theta) {
    rope_rotate(qkv, B, T, AttnShape::plain(w, h), theta, 1.0);
}
template <typename S> void rope_backward(S* dqkv, long B, long T, int w, int h, double theta) {
    rope_rotate(dqkv, B, T, AttnShape::plain(w, h), theta, -1.0);
}

// ======================================================================================================
// causal self-attention over qkv (B, T, ld), optionally windowed and with KV groups -> (B, T, w)
// ======================================================================================================
// One query row t of causal attention, one head: p[j] = softmax over j0 <= j <= t of scale q . k_j, o (hd) =
// sum_j p[j] v_j, with key j's vectors at K + j stride and V + j stride; p[j] for j < j0 is left alone (j0 > 0:
// a window). attention_forward's inner loops, and attention_decode's (below), which therefore
// agrees with a full forward bit for bit.
template <typename S>
void attention_row(S* o, S* p, const S* q, const S* K, const S* V, long stride, long t, int hd, S scale, long j0 = 0) {
    S mx = -INFINITY;
    for (long j = j0; j <= t; j++) {
        const S* k = K + j * stride;
        S s = 0;
#pragma omp simd reduction(+ : s)
        for (int c = 0; c < hd; c++) s += q[c] * k[c];
        p[j] = s * scale;
        mx = std::max(mx, p[j]);
    }
    S sum = 0;
    for (long j = j0; j <= t; j++) {
        p[j] = std::exp(p[j] - mx);
        sum += p[j];
    }
    const S inv = S(1) / sum;
    for (long j = j0; j <= t; j++) p[j] *= inv;
    for (int c = 0; c < hd; c++) o[c] = 0;
    for (long j = j0; j <= t; j++) {
        const S* v = V + j * stride;
        for (int c = 0; c < hd; c++) o[c] += p[j] * v[c];
    }
}

// att (B, h, T, T): att[b, hh, t, j] = softmax over the visible keys j (first_key(t) <= j <= t) of
// scale * q_t . k_j, zero for every other j (kept for the backward and for attention-distance analysis).
// out (B, T, w) = sum_j att * v_j. scale = 1/sqrt(hd), or 1/hd (muP).
template <typename S>
void attention_forward(S* out, S* att, const S* qkv, long B, long T, const AttnShape& a, S scale) {
    const int hd = a.hd, h = a.h, w = a.w();
    const long ld = a.ld();
#pragma omp parallel for collapse(3) if (B * h * T * T * hd >= OMP_MIN_WORK)
    for (long b = 0; b < B; b++)
        for (int hh = 0; hh < h; hh++)
            for (long t = 0; t < T; t++) {
                const S* x = qkv + b * T * ld;  // sequence b
                const int g = a.kv_of(hh);
                const long j0 = a.first_key(t);
                S* p = att + ((b * h + hh) * T + t) * T;
                for (long j = 0; j < j0; j++) p[j] = 0;
                attention_row(out + (b * T + t) * w + hh * hd, p, x + t * ld + hh * hd, x + w + g * hd,
                              x + w + a.kw() + g * hd, ld, t, hd, scale, j0);
                for (long j = t + 1; j < T; j++) p[j] = 0;
            }
}
template <typename S> void attention_forward(S* out, S* att, const S* qkv, long B, long T, int w, int h, S scale) {
    attention_forward(out, att, qkv, B, T, AttnShape::plain(w, h), scale);
}

// A decoder's attention: n query rows at positions p0 .. p0 + n - 1 (one sequence) over a cache of the earlier keys.
// The cache, KvCache: K, V (slots, kv hd) each, position j in slot j mod slots; slots = the decoder's capacity, or
// min(capacity, W) in a window layer (a ring: no query past j + W - 1 reads key j). Until the ring wraps
// (p0 + n <= slots) slot j is position j and attention reads the cache itself; after, the keys a chunk sees,
// [first_key(p0), p0 + n), are copied into one run (the ring's, then the chunk's own rows: a chunk longer than the
// ring reads its early keys before their slots are overwritten), and the chunk's last min(n, slots) keys are stored
// afterwards. Each query row is attention_row, as attention_forward runs it, with its key loop shifted by the run's
// origin (the same terms in the same order): a cached decode gives a full forward's bits.
template <typename S> struct KvCache {
    long slots = 0;
    std::vector<S> k, v;        // (slots, kv hd) each
    std::vector<S> krun, vrun;  // a wrapped ring's visible keys and values as one run (a chunk's scratch)
    KvCache() = default;
    KvCache(long positions, const AttnShape& a) : slots(positions), k((size_t)positions * a.kw()), v(k.size()) {}
};

// out (n, w): row i, query head hh = softmax over the keys j visible at position p0 + i (first_key(p0 + i) <= j <=
// p0 + i) of scale q_i . k_j, times v_j, K/V head a.kv_of(hh); q rows of stride ld; K, V (keys, kv hd) holding
// positions origin .. p0 + n - 1 (origin <= first_key(p0)).
template <typename S>
void attention_over_cache(S* out, const S* qkv, const S* K, const S* V, long n, long p0, const AttnShape& a, S scale,
                          long origin) {
    const int hd = a.hd, h = a.h, w = a.w(), kw = a.kw();
#pragma omp parallel if (n * h * (p0 + n - origin) * hd >= OMP_MIN_WORK)
    {
        std::vector<S> p_buf(p0 + n - origin);
#pragma omp for collapse(2)
        for (long i = 0; i < n; i++)
            for (int hh = 0; hh < h; hh++)
                attention_row(out + i * w + hh * hd, p_buf.data(), qkv + i * a.ld() + hh * hd, K + a.kv_of(hh) * hd,
                              V + a.kv_of(hh) * hd, (long)kw, p0 + i - origin, hd, scale, a.first_key(p0 + i) - origin);
    }
}

// out (n, w) from qkv (n, ld) of the chunk (after RoPE) and the cache c of positions < p0; then the chunk's keys and
// values join the cache.
template <typename S>
void attention_decode(S* out, const S* qkv, KvCache<S>& c, long n, long p0, const AttnShape& a, S scale) {
    const long ld = a.ld(), kw = a.kw(), slots = c.slots, w = a.w();
    auto store =
        [&] {  // the chunk's rows i >= n - slots into slot (p0 + i) mod slots (earlier ones would be overwritten)
            for (long i = std::max(0L, n - slots); i < n; i++) {
                const size_t slot = (size_t)((p0 + i) % slots);
                std::copy_n(qkv + i * ld + w, kw, c.k.data() + slot * kw);
                std::copy_n(qkv + i * ld + w + kw, kw, c.v.data() + slot * kw);
            }
        };
    if (p0 + n <= slots) {  // not wrapped: slot j holds position j, the cache is the run itself
        store();
        attention_over_cache(out, qkv, c.k.data(), c.v.data(), n, p0, a, scale, 0L);
        return;
    }
    // a window's ring has wrapped: keys [origin, p0) from it, then the chunk's own
    const long origin = a.first_key(p0), keys = p0 + n - origin;
    c.krun.resize((size_t)keys * kw), c.vrun.resize((size_t)keys * kw);
    for (long j = origin; j < p0 + n; j++) {
        const S* k = j < p0 ? c.k.data() + (size_t)(j % slots) * kw : qkv + (j - p0) * ld + w;
        const S* v = j < p0 ? c.v.data() + (size_t)(j % slots) * kw : k + kw;
        std::copy_n(k, kw, c.krun.data() + (size_t)(j - origin) * kw);
        std::copy_n(v, kw, c.vrun.data() + (size_t)(j - origin) * kw);
    }
    attention_over_cache(out, qkv, c.krun.data(), c.vrun.data(), n, p0, a, scale, origin);
    store();
}

// dqkv (B, T, ld) = gradient w.r.t. the (rotated) q, k, v, assigned. One thread owns one (b, K/V head) pair and
// walks its query heads, then t, in order, so the dk and dv sums over queries (and over the heads of a group)
// have a fixed order.
template <typename S>
void attention_backward(S* dqkv, const S* dout, const S* qkv, const S* att, long B, long T, const AttnShape& a,
                        S scale) {
    const int hd = a.hd, h = a.h, w = a.w(), group = a.h / a.kv;
    const long ld = a.ld(), kvo = w + a.kw();  // columns of k and of v
#pragma omp parallel if (B * h * T * T * hd >= OMP_MIN_WORK)
    {
        std::vector<S> dp_buf(T), dq_buf(hd);  // (T) d loss / d scores of row t, (hd) dq of row t
#pragma omp for collapse(2)
        for (long b = 0; b < B; b++)
            for (int g = 0; g < a.kv; g++) {
                for (long t = 0; t < T; t++) {  // dk, dv accumulate over queries; dq is written whole
                    std::fill_n(dqkv + (b * T + t) * ld + w + g * hd, hd, S(0));
                    std::fill_n(dqkv + (b * T + t) * ld + kvo + g * hd, hd, S(0));
                }
                S* __restrict dp = dp_buf.data();
                S* __restrict dq = dq_buf.data();
                for (int hh = g * group; hh < (g + 1) * group; hh++)
                    for (long t = 0; t < T; t++) {
                        const long j0 = a.first_key(t);
                        const S* p = att + ((b * h + hh) * T + t) * T;
                        const S* q = qkv + (b * T + t) * ld + hh * hd;
                        const S* dy = dout + (b * T + t) * w + hh * hd;
                        S sum_pdp = 0;
                        for (long j = j0; j <= t; j++) {  // dp_j = dy_t . v_j
                            const S* v = qkv + (b * T + j) * ld + kvo + g * hd;
                            S s = 0;
#pragma omp simd reduction(+ : s)
                            for (int c = 0; c < hd; c++) s += dy[c] * v[c];
                            dp[j] = s;
                            sum_pdp += p[j] * s;
                        }
                        for (long j = j0; j <= t; j++) dp[j] = p[j] * (dp[j] - sum_pdp) * scale;  // now d score_j
                        std::fill_n(dq, hd, S(0));
                        for (long j = j0; j <= t; j++) {
                            const S* k = qkv + (b * T + j) * ld + w + g * hd;
                            S* __restrict dk = dqkv + (b * T + j) * ld + w + g * hd;
                            S* __restrict dv = dqkv + (b * T + j) * ld + kvo + g * hd;
                            const S ds = dp[j], pj = p[j];
                            for (int c = 0; c < hd; c++) {
                                dq[c] += ds * k[c];
                                dk[c] += ds * q[c];
                                dv[c] += pj * dy[c];
                            }
                        }
                        std::copy_n(dq, hd, dqkv + (b * T + t) * ld + hh * hd);
                    }
            }
    }
}
template <typename S>
void attention_backward(S* dqkv, const S* dout, const S* qkv, const S* att, long B, long T, int w, int h, S scale) {
    attention_backward(dqkv, dout, qkv, att, B, T, AttnShape::plain(w, h), scale);
}

// ======================================================================================================
// SwiGLU: in (N, 2 hid) = [gate | up] -> out (N, hid) = silu(gate) * up, silu(g) = g * sigmoid(g)
// ======================================================================================================
template <typename S> void swiglu_forward(S* out, const S* in, long N, int hid) {
#pragma omp parallel for if (N * hid >= OMP_MIN_WORK)
    for (long n = 0; n < N; n++)
        for (int c = 0; c < hid; c++) {
            const S g = in[n * 2 * hid + c], u = in[n * 2 * hid + hid + c];
            out[n * hid + c] = g / (S(1) + std::exp(-g)) * u;
        }
}

// din (N, 2 hid) assigned: dgate = dout * up * sig * (1 + g (1 - sig)), dup = dout * silu(g).
template <typename S> void swiglu_backward(S* din, const S* dout, const S* in, long N, int hid) {
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
template <typename S> void residual_forward(S* x, long ldx, const S* y, long N, int w) {
#pragma omp parallel for if (N * w >= OMP_MIN_WORK)
    for (long n = 0; n < N; n++)
        for (int c = 0; c < w; c++) x[n * ldx + c] += y[n * w + c];
}
// dy (N, w) = dx[:, :w] (assigned). The skip path's gradient is dx itself, unchanged, so nothing else to do.
template <typename S> void residual_backward(S* dy, const S* dx, long lddx, long N, int w) {
#pragma omp parallel for if (N * w >= OMP_MIN_WORK)
    for (long n = 0; n < N; n++) std::copy_n(dx + n * lddx, w, dy + n * w);
}

// ======================================================================================================
// logit scale
// ======================================================================================================
// x (n) *= s: the head's output multiplier (ModelConfig::logit_scale). Its backward is the same op on the
// logits' gradient (d(s y)/dy = s). s == 1 leaves x untouched (no rounding).
template <typename S> void scale_forward(S* x, long n, double s) {
    if (s == 1) return;
    const S k = (S)s;
#pragma omp parallel for if (n >= OMP_MIN_WORK)
    for (long i = 0; i < n; i++) x[i] *= k;
}

// ======================================================================================================
// softmax cross-entropy over V
// ======================================================================================================
// The V exponentials per row are the one transcendental-heavy loop of the step (51M per step at the tiny
// size: 0.3 s per core through libm's scalar expf), so float rows use a vectorised exp.

// exp(x) for x <= 0 (softmax arguments l - max), 8 floats at once. Cody-Waite reduction x = n ln2 + r,
// |r| <= ln2 / 2, then Cephes' degree-6 polynomial for exp(r); relative error < 3e-7 (test_reference.cpp
// checks it against std::exp). x < -87 returns 0 (2^n would be denormal there, and e^-87 is below float's
// resolution of any softmax sum, which is >= 1); NaN returns NaN.
// (Arrays in and out rather than vector values: passing 32-byte vectors by value changes the ABI without AVX.)
inline void exp_nonpositive(float* out, const float* in) {
    typedef Simd<float>::type F;
    typedef int32_t I __attribute__((vector_size(32)));
    F x;
    std::memcpy(&x, in, sizeof(F));
    // NaN (a non-finite row: the guard above the engine then skips the step) goes through the polynomial as
    // -87 and comes out NaN below, so the integer conversion never sees it
    const F xc = x >= -87.0f ? (x <= 88.0f ? x : F{} + 88.0f) : F{} - 87.0f;
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
    const F y8 = x != x ? x : (x < -87.0f ? F{} : e * scale);
    std::memcpy(out, &y8, sizeof(F));
}

// e[v] = exp(l[v] - mx) for v in [0, V) (stored when e is not null); returns the sum in double.
template <typename S> double exp_shifted_sum(S* e, const S* l, int V, S mx) {
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
template <typename S> S mean_loss(const S* losses, const int* targets, long N) {
    double sum = 0;
    long count = 0;
    for (long n = 0; n < N; n++)
        if (targets[n] >= 0) sum += losses[n], count++;
    return count ? (S)(sum / count) : S(0);
}

}  // namespace ref
