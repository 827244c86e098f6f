// test/attention_naive.cuh: the first attention kernel, kept as a second oracle for the flash kernel in
// attention.cuh (test/test_attention.cpp): causal multi-head self-attention, forward and backward, for any even
// head_dim up to 1024, on CUDA cores. Not in the training path.
//   qkv (B, T, 3 w) = [q | k | v] after RoPE, head hh at columns hh * hd .. (hh + 1) * hd of each, hd = w / h
//   forward:  out (B, T, w) = softmax_{j <= t}(scale q_t . k_j) v_j per head; lse (B, h, T) fp32 saved
//   backward: dqkv (B, T, 3 w) assigned, from dout (B, T, w), qkv and lse; scratch (B, h, T) fp32
// This is the straightforward version: one warp per query row (forward, dq) or key row (dk, dv), lane i owning
// head columns i, i + 32, ... (K per lane: the smallest power of two with 32 K >= hd, a template parameter so
// the per-lane arrays stay in registers), scores recomputed from q and k in the backward instead of stored:
// memory O(B h T), never the (B, h, T, T) probabilities the reference keeps. The forward is an online
// softmax (running max, rescaled sum). The backward is three-pass and atomic-free, so deterministic:
//   1. per query t: Dt = sum_j p_tj (dout_t . v_j) (exact, not dout . out from the bf16 output)
//   2. per query t: dq_t = scale sum_j p_tj (dout_t . v_j - Dt) k_j           (1 and 2 are one kernel)
//   3. per key j:   dk_j = scale sum_{t>=j} p_tj (dout_t . v_j - Dt) q_t,  dv_j = sum_{t>=j} p_tj dout_t
// with p_tj = exp(scale q_t . k_j - lse_t) recomputed. All math fp32, bf16 in and out.
// Head dims: Prism gives 64 to 256; Prism head schedules on X widths reach 776 at the Xformer presets (tested:
// every head_dim any preset with any head and width schedule produces).
// Does not: use tensor cores or tiles (attention.cuh does), support head_dim > 1024, dropout, or non-causal masks.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "cuda_common.cuh"
#include "vec.cuh"

constexpr int NAIVE_MAX_PER_LANE = 32;  // head columns per lane: head_dim <= 32 * 32 = 1024
constexpr int NAIVE_WARPS = 4;          // warps (rows) per block

// ---------------------------------------------------------------------------------------------------------
// kernels
// ---------------------------------------------------------------------------------------------------------

// Loads this lane's K columns of one head vector (zeros past hd).
template <int K> __device__ inline void naive_load(float* r, const bf16* p, int hd) {
    const int lane = threadIdx.x % 32;
    for (int i = 0; i < K; i++) {
        const int c = lane + 32 * i;
        r[i] = c < hd ? __bfloat162float(p[c]) : 0.0f;
    }
}
// The full dot product of two head vectors held as lane columns (every lane gets it).
template <int K> __device__ inline float naive_dot(const float* a, const float* b) {
    float s = 0.0f;
    for (int i = 0; i < K; i++) s += a[i] * b[i];
    return warp_sum(s);
}

// Matches ref::attention_forward (out; lse instead of the probabilities). Warp = query row (b, hh, t).
template <int K>
static __global__ void attention_naive_forward_kernel(bf16* out, float* lse, const bf16* qkv, int B, int T, int w,
                                                      int h, float scale) {
    const long row = (long)blockIdx.x * NAIVE_WARPS + threadIdx.x / 32;  // ((b h + hh) T + t)
    if (row >= (long)B * h * T) return;                                  // whole warps leave together
    const int lane = threadIdx.x % 32, hd = w / h, t = (int)(row % T), hh = (int)(row / T % h);
    const long b = row / ((long)T * h);
    const bf16* base = qkv + b * T * 3 * w + hh * hd;  // q of (b, 0, hh); k at + w, v at + 2 w
    float q[K], kv[K], o[K] = {};
    naive_load<K>(q, base + (long)t * 3 * w, hd);
    float m = -INFINITY, l = 0.0f;
    for (int j = 0; j <= t; j++) {
        naive_load<K>(kv, base + (long)j * 3 * w + w, hd);
        const float s = naive_dot<K>(q, kv) * scale;
        const float m_new = fmaxf(m, s), corr = expf(m - m_new), p = expf(s - m_new);
        l = l * corr + p;
        naive_load<K>(kv, base + (long)j * 3 * w + 2 * w, hd);
        for (int i = 0; i < K; i++) o[i] = o[i] * corr + p * kv[i];
        m = m_new;
    }
    const float inv = 1.0f / l;
    bf16* y = out + (b * T + t) * w + hh * hd;
    for (int i = 0; i < K; i++)
        if (lane + 32 * i < hd) y[lane + 32 * i] = __float2bfloat16(o[i] * inv);
    if (lane == 0) lse[row] = m + logf(l);
}

// Passes 1 and 2 of the backward (see the top): Dt into Dscratch, dq_t into dqkv. Warp = query row.
template <int K>
static __global__ void attention_naive_backward_dq_kernel(bf16* dqkv, float* Dscratch, const bf16* dout,
                                                          const bf16* qkv, const float* lse, int B, int T, int w, int h,
                                                          float scale) {
    const long row = (long)blockIdx.x * NAIVE_WARPS + threadIdx.x / 32;
    if (row >= (long)B * h * T) return;
    const int lane = threadIdx.x % 32, hd = w / h, t = (int)(row % T), hh = (int)(row / T % h);
    const long b = row / ((long)T * h);
    const bf16* base = qkv + b * T * 3 * w + hh * hd;
    float q[K], dy[K], kv[K], dq[K] = {};
    naive_load<K>(q, base + (long)t * 3 * w, hd);
    naive_load<K>(dy, dout + (b * T + t) * w + hh * hd, hd);
    const float lse_t = lse[row];
    float Dt = 0.0f;
    for (int j = 0; j <= t; j++) {
        naive_load<K>(kv, base + (long)j * 3 * w + w, hd);
        const float p = expf(naive_dot<K>(q, kv) * scale - lse_t);
        naive_load<K>(kv, base + (long)j * 3 * w + 2 * w, hd);
        Dt += p * naive_dot<K>(dy, kv);
    }
    for (int j = 0; j <= t; j++) {
        float k[K];
        naive_load<K>(k, base + (long)j * 3 * w + w, hd);
        const float p = expf(naive_dot<K>(q, k) * scale - lse_t);
        naive_load<K>(kv, base + (long)j * 3 * w + 2 * w, hd);
        const float ds = p * (naive_dot<K>(dy, kv) - Dt) * scale;
        for (int i = 0; i < K; i++) dq[i] += ds * k[i];
    }
    bf16* g = dqkv + (b * T + t) * 3 * w + hh * hd;
    for (int i = 0; i < K; i++)
        if (lane + 32 * i < hd) g[lane + 32 * i] = __float2bfloat16(dq[i]);
    if (lane == 0) Dscratch[row] = Dt;
}

// Pass 3: dk_j, dv_j summed over the queries t >= j in increasing order. Warp = key row (b, hh, j).
template <int K>
static __global__ void attention_naive_backward_dkv_kernel(bf16* dqkv, const float* Dscratch, const bf16* dout,
                                                           const bf16* qkv, const float* lse, int B, int T, int w,
                                                           int h, float scale) {
    const long row = (long)blockIdx.x * NAIVE_WARPS + threadIdx.x / 32;
    if (row >= (long)B * h * T) return;
    const int lane = threadIdx.x % 32, hd = w / h, j = (int)(row % T), hh = (int)(row / T % h);
    const long b = row / ((long)T * h), bh = row / T;
    const bf16* base = qkv + b * T * 3 * w + hh * hd;
    float k[K], v[K], q[K], dy[K];
    float dk[K] = {}, dv[K] = {};
    naive_load<K>(k, base + (long)j * 3 * w + w, hd);
    naive_load<K>(v, base + (long)j * 3 * w + 2 * w, hd);
    for (int t = j; t < T; t++) {
        naive_load<K>(q, base + (long)t * 3 * w, hd);
        naive_load<K>(dy, dout + (b * T + t) * w + hh * hd, hd);
        const float p = expf(naive_dot<K>(q, k) * scale - lse[bh * T + t]);
        const float ds = p * (naive_dot<K>(dy, v) - Dscratch[bh * T + t]) * scale;
        for (int i = 0; i < K; i++) {
            dk[i] += ds * q[i];
            dv[i] += p * dy[i];
        }
    }
    bf16* g = dqkv + (b * T + j) * 3 * w + w + hh * hd;
    for (int i = 0; i < K; i++)
        if (lane + 32 * i < hd) {
            g[lane + 32 * i] = __float2bfloat16(dk[i]);
            g[w + lane + 32 * i] = __float2bfloat16(dv[i]);
        }
}

// ---------------------------------------------------------------------------------------------------------
// launchers
// ---------------------------------------------------------------------------------------------------------

// Per-lane column count K for a head_dim: the smallest power of two with 32 K >= hd.
inline int attention_naive_per_lane(int w, int h) {
    const int hd = h > 0 ? w / h : 0;
    if (h <= 0 || w % h != 0 || hd % 2 != 0 || hd > 32 * NAIVE_MAX_PER_LANE) {
        fprintf(stderr, "attention_naive: w=%d h=%d gives head_dim %d; this kernel needs an even head_dim <= %d\n", w,
                h, hd, 32 * NAIVE_MAX_PER_LANE);
        exit(EXIT_FAILURE);
    }
    int K = 1;
    while (32 * K < hd) K *= 2;
    return K;
}

template <int K>
void attention_naive_forward_k(bf16* out, float* lse, const bf16* qkv, int B, int T, int w, int h, float scale,
                               cudaStream_t stream) {
    const long rows = (long)B * h * T;
    const unsigned grid = (unsigned)((rows + NAIVE_WARPS - 1) / NAIVE_WARPS);
    LAUNCH(grid, 32 * NAIVE_WARPS, 0, stream, attention_naive_forward_kernel<K>)(out, lse, qkv, B, T, w, h, scale);
    cudaCheck(cudaGetLastError());
}

template <int K>
void attention_naive_backward_k(bf16* dqkv, float* scratch, const bf16* dout, const bf16* qkv, const float* lse, int B,
                                int T, int w, int h, float scale, cudaStream_t stream) {
    const long rows = (long)B * h * T;
    const unsigned grid = (unsigned)((rows + NAIVE_WARPS - 1) / NAIVE_WARPS);
    LAUNCH(grid, 32 * NAIVE_WARPS, 0, stream, attention_naive_backward_dq_kernel<K>)
    (dqkv, scratch, dout, qkv, lse, B, T, w, h, scale);
    cudaCheck(cudaGetLastError());
    LAUNCH(grid, 32 * NAIVE_WARPS, 0, stream, attention_naive_backward_dkv_kernel<K>)
    (dqkv, scratch, dout, qkv, lse, B, T, w, h, scale);
    cudaCheck(cudaGetLastError());
}

// out (B, T, w), lse (B, h, T) fp32, qkv (B, T, 3 w). scale = 1 / sqrt(hd), or 1 / hd (muP).
inline void attention_naive_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int w, int h, float scale,
                                    cudaStream_t stream) {
    switch (attention_naive_per_lane(w, h)) {
        case 1:
            attention_naive_forward_k<1>(out, lse, qkv, B, T, w, h, scale, stream);
            break;
        case 2:
            attention_naive_forward_k<2>(out, lse, qkv, B, T, w, h, scale, stream);
            break;
        case 4:
            attention_naive_forward_k<4>(out, lse, qkv, B, T, w, h, scale, stream);
            break;
        case 8:
            attention_naive_forward_k<8>(out, lse, qkv, B, T, w, h, scale, stream);
            break;
        case 16:
            attention_naive_forward_k<16>(out, lse, qkv, B, T, w, h, scale, stream);
            break;
        default:
            attention_naive_forward_k<32>(out, lse, qkv, B, T, w, h, scale, stream);
            break;
    }
}

// dqkv (B, T, 3 w) assigned; dout (B, T, w); qkv and lse from the forward; scratch (B, h, T) fp32.
inline void attention_naive_backward(bf16* dqkv, float* scratch, const bf16* dout, const bf16* qkv, const float* lse,
                                     int B, int T, int w, int h, float scale, cudaStream_t stream) {
    switch (attention_naive_per_lane(w, h)) {
        case 1:
            attention_naive_backward_k<1>(dqkv, scratch, dout, qkv, lse, B, T, w, h, scale, stream);
            break;
        case 2:
            attention_naive_backward_k<2>(dqkv, scratch, dout, qkv, lse, B, T, w, h, scale, stream);
            break;
        case 4:
            attention_naive_backward_k<4>(dqkv, scratch, dout, qkv, lse, B, T, w, h, scale, stream);
            break;
        case 8:
            attention_naive_backward_k<8>(dqkv, scratch, dout, qkv, lse, B, T, w, h, scale, stream);
            break;
        case 16:
            attention_naive_backward_k<16>(dqkv, scratch, dout, qkv, lse, B, T, w, h, scale, stream);
            break;
        default:
            attention_naive_backward_k<32>(dqkv, scratch, dout, qkv, lse, B, T, w, h, scale, stream);
            break;
    }
}
