// rope.cuh: rotary position embedding on q and k, in place on qkv (B, T, 3 w), forward and backward.
// Interleaved pairs: within each head (head_dim hd = w / h), (a, b) = (q[2i], q[2i+1]) at position t becomes
// (a cos - b sin, a sin + b cos), angle = t * theta^(-2i / hd), i in [0, hd / 2); k likewise, v untouched.
// The backward is the inverse rotation (sin -> -sin) applied to dqkv in place.
// The angles come from a table built on the host in double and rounded to fp32, exactly as the reference
// rounds them, so the only difference from the reference is bf16 storage: at t = 4096 an fp32 sinf of an fp32
// angle would already be off by ~2e-4. One table per distinct head_dim (layers share it).
// Does not: scale frequencies (no NTK / YaRN), or rotate a partial head.
#pragma once

#include <cmath>
#include <vector>

#include "cuda_common.cuh"

// (T, hd / 2) pairs (cos, sin) as floats, interleaved: table[2 (t hd/2 + i)] = cos, [.. + 1] = sin.
inline std::vector<float> rope_table(int T, int hd, double theta) {
    std::vector<float> tab((size_t)T * hd);
    for (int i = 0; i < hd / 2; i++) {
        const double freq = std::pow(theta, -2.0 * i / hd);
        for (long t = 0; t < T; t++) {
            tab[2 * ((size_t)t * (hd / 2) + i)] = (float)std::cos(t * freq);
            tab[2 * ((size_t)t * (hd / 2) + i) + 1] = (float)std::sin(t * freq);
        }
    }
    return tab;
}

// ---------------------------------------------------------------------------------------------------------
// kernels
// ---------------------------------------------------------------------------------------------------------

// Matches ref::rope_rotate (sign +1: rope_forward, -1: rope_backward). One thread per (row n, pair) of q and the
// same pair of k: w / 2 pairs per row; pair p is columns 2p, 2p + 1, frequency index p % (hd / 2).
static __global__ void rope_kernel(bf16* qkv, const float* table, long N, int T, int w, int hd, float sign) {
    const long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N * (w / 2)) return;
    const long n = idx / (w / 2);
    const int p = (int)(idx % (w / 2)), i = p % (hd / 2), t = (int)(n % T);
    const float c = table[2 * ((size_t)t * (hd / 2) + i)], s = sign * table[2 * ((size_t)t * (hd / 2) + i) + 1];
    for (int part = 0; part < 2; part++) {  // q then k
        bf16* x = qkv + n * 3 * w + part * w + 2 * p;
        const float a = __bfloat162float(x[0]), b = __bfloat162float(x[1]);
        x[0] = __float2bfloat16(a * c - b * s);
        x[1] = __float2bfloat16(a * s + b * c);
    }
}

// ---------------------------------------------------------------------------------------------------------
// launchers
// ---------------------------------------------------------------------------------------------------------

// qkv (B, T, 3 w) in place; table = rope_table(>= T, hd, theta) on the device, hd = w / h.
inline void rope_forward(bf16* qkv, const float* table, int B, int T, int w, int h, cudaStream_t stream) {
    const long N = (long)B * T, threads = N * (w / 2);
    const int block = 256;
    LAUNCH((unsigned)((threads + block - 1) / block), block, 0, stream, rope_kernel)(qkv, table, N, T, w, w / h, 1.0f);
    cudaCheck(cudaGetLastError());
}

// dqkv (B, T, 3 w) in place: the gradient w.r.t. the rotated q, k becomes the gradient w.r.t. the unrotated.
inline void rope_backward(bf16* dqkv, const float* table, int B, int T, int w, int h, cudaStream_t stream) {
    const long N = (long)B * T, threads = N * (w / 2);
    const int block = 256;
    LAUNCH((unsigned)((threads + block - 1) / block), block, 0, stream, rope_kernel)(dqkv, table, N, T, w, w / h, -1.0f);
    cudaCheck(cudaGetLastError());
}
