// decode.cuh: the kernels of a forward with a KV cache (model.cuh's sub_forward with caches, which
// inspect/cuda_decoder.cuh runs): attention of n new query rows at positions p0 .. p0 + n - 1 over the keys and values
// each sees, and the store of the chunk's keys and values into the cache (with copy_columns, first below).
//   qkv (n, ld) the new rows after RoPE, ld = w + 2 kv hd: [q (h heads) | k (kv heads) | v (kv heads)] (a layer's
//   LayerSpec: h, kv, hd, window W or 0); out (n, w) bf16
//   the cache: K, V (slots, kv hd) each, position j in slot j mod slots: a ring of slots = min(capacity, W) in a
//   window layer (no query past j + W - 1 reads key j), slots = the capacity (slot j is position j) otherwise
// Query i (position t = p0 + i) attends to keys j in [att_first_key(t, W), t] (attention_span.h's rule); key j < p0 is
// read from the cache, j >= p0 from the chunk's own row j - p0 of qkv, so the chunk's keys are stored (decode_store)
// only after its attention ran: a chunk longer than a window's ring would otherwise overwrite slots its early rows
// still read. Query head hh reads K/V head hh / (h / kv) (GQA); a group's heads are consecutive blocks, so the K/V rows
// they share are read while still in L2.
// Matches ref::attention_decode (ref/ops.h), which is ref::attention_forward for one query row.
// A decode step is one query per head: memory-bound (it reads the visible cache once per head), with too little
// work for a warp per query row (attention.cuh's shape) to keep more than h warps busy. So a block per (query,
// head), its DECODE_WARPS warps taking every DECODE_WARPS-th key with an online softmax each (running max, rescaled
// sum, fp32), merged at the end by warp 0 in warp order: deterministic, no atomics. Lane i owns head columns i,
// i + 32, ... (K per lane, the smallest power of two with 32 K >= head_dim, a template parameter).
// Does not: tile or use tensor cores (a prefill of many rows is correct but slow: n x h blocks each re-reading
// the keys), read a group's K/V once for all its heads, or split one query's keys across blocks.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "attention_span.h"
#include "cuda_common.cuh"
#include "layer_spec.h"
#include "vec.cuh"

// copy_columns: dst[:, :w] = src[:, :w], dst (N, ld_dst), src (N, ld_src); columns past w untouched (decode_store
// fills the cache with it).

// One thread per copied element (n, c), i = n w + c.
static __global__ void copy_columns_kernel(bf16* dst, long ld_dst, const bf16* src, long ld_src, long N, int w) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * w) return;
    const long n = i / w;
    const int c = (int)(i % w);
    dst[n * ld_dst + c] = src[n * ld_src + c];
}

// dst and src must not overlap (a copy between two buffers, bit for bit).
inline void copy_columns(bf16* dst, long ld_dst, const bf16* src, long ld_src, long N, int w, cudaStream_t stream) {
    const int block = 256;
    LAUNCH((unsigned)((N * w + block - 1) / block), block, 0, stream, copy_columns_kernel)
    (dst, ld_dst, src, ld_src, N, w);
    cudaCheck(cudaGetLastError());
}

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
                                               int slots, int h, int kv, int hd, int window, float scale) {
    DYNAMIC_SHARED(float, part);
    const int i = blockIdx.x / h, hh = blockIdx.x % h, g = hh / (h / kv), w = h * hd, kw = kv * hd;
    const long ld = w + 2 * kw;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = p0 + i;
    const int first = (int)att_first_key(t, window);
    float q[K], kv_[K], o[K] = {};
    decode_load<K>(q, qkv + i * ld + hh * hd, hd);
    float m = -INFINITY, l = 0.0f;
    for (int j = first + warp; j <= t; j += DECODE_WARPS) {
        // key j: the cache's slot j mod slots before the chunk, the chunk's row j - p0 after
        const bf16* k = j < p0 ? Kc + (long)(j % slots) * kw + g * hd : qkv + (j - p0) * ld + w + g * hd;
        const bf16* v = j < p0 ? Vc + (long)(j % slots) * kw + g * hd : k + kw;
        decode_load<K>(kv_, k, hd);
        float s = 0.0f;
        for (int c = 0; c < K; c++) s += q[c] * kv_[c];
        s = warp_sum(s) * scale;
        const float m_new = fmaxf(m, s), corr = expf(m - m_new), p = expf(s - m_new);
        l = l * corr + p;
        decode_load<K>(kv_, v, hd);
        for (int c = 0; c < K; c++) o[c] = o[c] * corr + p * kv_[c];
        m = m_new;
    }
    float* mine = part + warp * (hd + 2);
    if (lane == 0) mine[0] = m, mine[1] = l;
    for (int c = 0; c < K; c++)
        if (lane + 32 * c < hd) mine[2 + lane + 32 * c] = o[c];
    __syncthreads();
    if (warp != 0) return;
    // Warp 0 merges: a warp that saw no key (t < first + warp) has m = -inf, l = 0, o = 0 and weighs exp(-inf) = 0.
    // Warp 0 always saw key `first`, so the overall max M is finite.
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
void decode_attention_k(bf16* out, const bf16* qkv, const bf16* Kc, const bf16* Vc, int n, int p0, int slots,
                        const LayerSpec& ls, float scale, cudaStream_t stream) {
    const size_t smem = (size_t)DECODE_WARPS * (ls.head_dim() + 2) * sizeof(float);  // <= 8 x 1026 x 4 = 32.8 KB
    LAUNCH((unsigned)n * ls.heads, 32 * DECODE_WARPS, smem, stream, decode_attention_kernel<K>)
    (out, qkv, Kc, Vc, p0, slots, ls.heads, ls.kv(), ls.head_dim(), ls.window, scale);
    cudaCheck(cudaGetLastError());
}

// out (n, w); qkv (n, ls.qkv_rows()) after RoPE; Kc, Vc (slots, ls.kv_width()) holding positions p0 - slots .. p0 - 1
// (those >= 0) in slot j mod slots, where slots >= p0 + n or, in a window layer, >= min(W, p0 + n).
// scale = 1 / sqrt(hd), or 1 / hd (muP).
inline void decode_attention(bf16* out, const bf16* qkv, const bf16* Kc, const bf16* Vc, int n, int p0, int slots,
                             const LayerSpec& ls, float scale, cudaStream_t stream) {
    const int w = ls.width, h = ls.heads, hd = h > 0 ? w / h : 0;
    if (h <= 0 || w % h != 0 || hd % 2 != 0 || hd > 32 * DECODE_MAX_PER_LANE || ls.kv() < 1 || h % ls.kv() != 0) {
        fprintf(stderr,
                "decode_attention: w=%d h=%d kv=%d gives head_dim %d; this kernel needs an even head_dim <= %d and "
                "kv dividing h\n",
                w, h, ls.kv(), hd, 32 * DECODE_MAX_PER_LANE);
        exit(EXIT_FAILURE);
    }
    if (slots < 1 || (ls.window ? slots < std::min(ls.window, p0 + n) : slots < p0 + n)) {
        fprintf(stderr,
                "decode_attention: a cache of %d slots cannot hold the keys of positions up to %d (window %d)\n", slots,
                p0 + n - 1, ls.window);
        exit(EXIT_FAILURE);
    }
    int K = 1;
    while (32 * K < hd) K *= 2;
    switch (K) {
        case 1:
            decode_attention_k<1>(out, qkv, Kc, Vc, n, p0, slots, ls, scale, stream);
            break;
        case 2:
            decode_attention_k<2>(out, qkv, Kc, Vc, n, p0, slots, ls, scale, stream);
            break;
        case 4:
            decode_attention_k<4>(out, qkv, Kc, Vc, n, p0, slots, ls, scale, stream);
            break;
        case 8:
            decode_attention_k<8>(out, qkv, Kc, Vc, n, p0, slots, ls, scale, stream);
            break;
        case 16:
            decode_attention_k<16>(out, qkv, Kc, Vc, n, p0, slots, ls, scale, stream);
            break;
        default:
            decode_attention_k<32>(out, qkv, Kc, Vc, n, p0, slots, ls, scale, stream);
            break;
    }
}

// After decode_attention: the chunk's keys and values, rows i >= n - slots of qkv (n, ls.qkv_rows()), into slots
// (p0 + i) mod slots of Kc, Vc (slots, ls.kv_width()): at most two runs of consecutive slots (the ring wraps once).
inline void decode_store(bf16* Kc, bf16* Vc, const bf16* qkv, int n, int p0, int slots, const LayerSpec& ls,
                         cudaStream_t stream) {
    const int kw = ls.kv_width(), ld = ls.qkv_rows();
    for (int i = std::max(0, n - slots); i < n;) {
        const int slot = (p0 + i) % slots, run = std::min(n - i, slots - slot);
        copy_columns(Kc + (size_t)slot * kw, kw, qkv + (size_t)i * ld + ls.width, ld, run, kw, stream);
        copy_columns(Vc + (size_t)slot * kw, kw, qkv + (size_t)i * ld + ls.width + kw, ld, run, kw, stream);
        i += run;
    }
}
