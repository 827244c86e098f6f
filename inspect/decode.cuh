// inspect/decode.cuh: the one kernel a KV-cache decode needs beyond the model's own (inspect/cuda_decoder.cuh uses it): attention
// of n new query rows at positions p0 .. p0 + n - 1 over the cached keys and values of positions 0 .. p0 + i.
//   qkv (n, 3 w) the new rows after RoPE (only q is read); K, V (capacity, w) the cache, rows 0 .. p0 + n - 1
//   written (the new rows' k and v are copied in before this runs); out (n, w) bf16
// Matches ref::attention_over_cache (ref/cpu_decoder.h), which is ref::attention_forward for one query row.
// A decode step is one query per head: memory-bound (it reads the whole cache once), with too little work for a
// warp per query row (attention.cuh's shape) to keep more than h warps busy. So a block per (query, head), its
// DECODE_WARPS warps taking every DECODE_WARPS-th key with an online softmax each (running max, rescaled sum,
// fp32), merged at the end by warp 0 in warp order: deterministic, no atomics. Lane i owns head columns i,
// i + 32, ... (K per lane, the smallest power of two with 32 K >= head_dim, a template parameter).
// Does not: tile or use tensor cores (a prefill of many rows is correct but slow: n x h blocks each re-reading
// the cache), or split one query's keys across blocks.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "cuda_common.cuh"
#include "reduce.cuh"

constexpr int DECODE_WARPS = 8;          // warps per (query, head) block
constexpr int DECODE_MAX_PER_LANE = 32;  // head_dim <= 32 * 32 = 1024

// ---------------------------------------------------------------------------------------------------------
// kernels
// ---------------------------------------------------------------------------------------------------------

// This lane's K columns of a head vector (zeros past hd).
template <int K> __device__ inline void decode_load(float* r, const bf16* p, int hd) {
    const int lane = threadIdx.x % 32;
    for (int i = 0; i < K; i++) {
        const int c = lane + 32 * i;
        r[i] = c < hd ? __bfloat162float(p[c]) : 0.0f;
    }
}

// Block = (query i, head hh), blockIdx.x = i h + hh. Dynamic shared memory: DECODE_WARPS x (hd + 2) floats, each
// warp's (max, sum, unnormalised output).
template <int K>
static __global__ void decode_attention_kernel(bf16* out, const bf16* qkv, const bf16* Kc, const bf16* Vc, int p0,
                                               int w, int h, float scale) {
    DYNAMIC_SHARED(float, part);
    const int i = blockIdx.x / h, hh = blockIdx.x % h, hd = w / h;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = p0 + i;
    float q[K], kv[K], o[K] = {};
    decode_load<K>(q, qkv + (long)i * 3 * w + hh * hd, hd);
    float m = -INFINITY, l = 0.0f;
    for (int j = warp; j <= t; j += DECODE_WARPS) {
        decode_load<K>(kv, Kc + (long)j * w + hh * hd, hd);
        float s = 0.0f;
        for (int c = 0; c < K; c++) s += q[c] * kv[c];
        s = warp_sum(s) * scale;
        const float m_new = fmaxf(m, s), corr = expf(m - m_new), p = expf(s - m_new);
        l = l * corr + p;
        decode_load<K>(kv, Vc + (long)j * w + hh * hd, hd);
        for (int c = 0; c < K; c++) o[c] = o[c] * corr + p * kv[c];
        m = m_new;
    }
    float* mine = part + warp * (hd + 2);
    if (lane == 0) mine[0] = m, mine[1] = l;
    for (int c = 0; c < K; c++)
        if (lane + 32 * c < hd) mine[2 + lane + 32 * c] = o[c];
    __syncthreads();
    if (warp != 0) return;
    // Warp 0 merges: a warp that saw no key (t < warp) has m = -inf, l = 0, o = 0 and weighs exp(-inf) = 0.
    // Warp 0 always saw key 0, so the overall max M is finite.
    float M = -INFINITY;
    for (int v = 0; v < DECODE_WARPS; v++) M = fmaxf(M, part[v * (hd + 2)]);
    float sum = 0.0f, acc[K] = {};
    for (int v = 0; v < DECODE_WARPS; v++) {
        const float* pv = part + v * (hd + 2);
        const float corr = expf(pv[0] - M);
        sum += pv[1] * corr;
        for (int c = 0; c < K; c++)
            if (lane + 32 * c < hd) acc[c] += pv[2 + lane + 32 * c] * corr;
    }
    bf16* y = out + (long)i * w + hh * hd;
    for (int c = 0; c < K; c++)
        if (lane + 32 * c < hd) y[lane + 32 * c] = __float2bfloat16(acc[c] / sum);
}

// ---------------------------------------------------------------------------------------------------------
// launchers
// ---------------------------------------------------------------------------------------------------------

template <int K>
void decode_attention_k(bf16* out, const bf16* qkv, const bf16* Kc, const bf16* Vc, int n, int p0, int w, int h,
                        float scale, cudaStream_t stream) {
    const size_t smem = (size_t)DECODE_WARPS * (w / h + 2) * sizeof(float);  // <= 8 x 1026 x 4 = 32.8 KB
    LAUNCH((unsigned)n * h, 32 * DECODE_WARPS, smem, stream, decode_attention_kernel<K>)
    (out, qkv, Kc, Vc, p0, w, h, scale);
    cudaCheck(cudaGetLastError());
}

// out (n, w); qkv (n, 3 w) after RoPE; Kc, Vc (>= p0 + n, w) with rows p0 .. p0 + n - 1 already appended.
// scale = 1 / sqrt(hd), or 1 / hd (muP).
inline void decode_attention(bf16* out, const bf16* qkv, const bf16* Kc, const bf16* Vc, int n, int p0, int w, int h,
                             float scale, cudaStream_t stream) {
    const int hd = h > 0 ? w / h : 0;
    if (h <= 0 || w % h != 0 || hd % 2 != 0 || hd > 32 * DECODE_MAX_PER_LANE) {
        fprintf(stderr, "decode_attention: w=%d h=%d gives head_dim %d; this kernel needs an even head_dim <= %d\n", w,
                h, hd, 32 * DECODE_MAX_PER_LANE);
        exit(EXIT_FAILURE);
    }
    int K = 1;
    while (32 * K < hd) K *= 2;
    switch (K) {
        case 1:
            decode_attention_k<1>(out, qkv, Kc, Vc, n, p0, w, h, scale, stream);
            break;
        case 2:
            decode_attention_k<2>(out, qkv, Kc, Vc, n, p0, w, h, scale, stream);
            break;
        case 4:
            decode_attention_k<4>(out, qkv, Kc, Vc, n, p0, w, h, scale, stream);
            break;
        case 8:
            decode_attention_k<8>(out, qkv, Kc, Vc, n, p0, w, h, scale, stream);
            break;
        case 16:
            decode_attention_k<16>(out, qkv, Kc, Vc, n, p0, w, h, scale, stream);
            break;
        default:
            decode_attention_k<32>(out, qkv, Kc, Vc, n, p0, w, h, scale, stream);
            break;
    }
}
