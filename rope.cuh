// rope.cuh: rotary position embedding on q and k, in place on qkv (B, T, w + 2 kv hd) = [q (h heads) | k (kv heads)
// | v (kv heads)], forward and backward; plain multi-head attention is kv = h, rows of 3 w.
// Interleaved pairs: within each head (head_dim hd = w / h), (a, b) = (q[2i], q[2i+1]) at position t becomes
// (a cos - b sin, a sin + b cos), angle = t * theta^(-2i / hd), i in [0, hd / 2); every K head likewise, v untouched.
// The backward is the inverse rotation (sin -> -sin) applied to dqkv in place.
// The angles come from a table built on the host in double and rounded to fp32, exactly as the reference
// rounds them, so the only difference from the reference is bf16 storage: at t = 4096 an fp32 sinf of an fp32
// angle would already be off by ~2e-4. One table per distinct head_dim (layers share it).
// Does not: scale frequencies (no NTK / YaRN), or rotate a partial head.
#pragma once

#include <cmath>
#include <vector>

#include "cuda_common.cuh"
#include "layer_spec.h"
#include "vec.cuh"

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

// Matches ref::rope_rotate (sign +1: rope_forward, -1: rope_backward). One thread per 8 columns of [q | k], the
// leading rot = w + kv hd columns of a row of `stride` (row_grid): 4 pairs, each rotated by its own angle; pair p
// of q or k (columns 2p, 2p + 1 of the part) has frequency index p % (hd / 2). w is even, so no pair straddles q and k.
static __global__ void rope_kernel(bf16* qkv, const float* table, long N, int T, int w, int rot, int stride, int hd,
                                   float sign) {
    const long n = grid_row();
    const int c = 8 * grid_vec();
    if (n >= N || c >= rot) return;
    const int k = in_row(rot, c, 8), t = (int)(n % T);
    bf16* x = qkv + n * stride + c;
    float v[8];
    load8(v, x, k);
    UNROLL
    for (int i = 0; i < 8; i += 2) {
        const int col = c + i, p = (col < w ? col : col - w) / 2, f = p % (hd / 2);
        const float cs = table[2 * ((size_t)t * (hd / 2) + f)], sn = sign * table[2 * ((size_t)t * (hd / 2) + f) + 1];
        const float a = v[i], b = v[i + 1];
        v[i] = a * cs - b * sn;
        v[i + 1] = a * sn + b * cs;
    }
    store8(x, v, k);
}

// ---------------------------------------------------------------------------------------------------------
// launchers
// ---------------------------------------------------------------------------------------------------------

// qkv (B, T, ls.qkv_rows()) in place: the ls.heads query heads and ls.kv() K heads; table = rope_table(>= T, hd,
// theta) on the device, hd = ls.head_dim().
inline void rope_rotate(bf16* qkv, const float* table, int B, int T, const LayerSpec& ls, float sign,
                        cudaStream_t stream) {
    const int rot = ls.width + ls.kv_width();
    const RowGrid g = row_grid((long)B * T, (rot + 7) / 8);
    LAUNCH(g.grid, g.block, 0, stream, rope_kernel)
    (qkv, table, (long)B * T, T, ls.width, rot, ls.qkv_rows(), ls.head_dim(), sign);
    cudaCheck(cudaGetLastError());
}
inline void rope_forward(bf16* qkv, const float* table, int B, int T, const LayerSpec& ls, cudaStream_t stream) {
    rope_rotate(qkv, table, B, T, ls, 1.0f, stream);
}
// dqkv in place: the gradient w.r.t. the rotated q, k becomes the gradient w.r.t. the unrotated.
inline void rope_backward(bf16* dqkv, const float* table, int B, int T, const LayerSpec& ls, cudaStream_t stream) {
    rope_rotate(dqkv, table, B, T, ls, -1.0f, stream);
}

// Plain multi-head attention's qkv (B, T, 3 w), h heads: LayerSpec {w, h}.
inline void rope_forward(bf16* qkv, const float* table, int B, int T, int w, int h, cudaStream_t stream) {
    rope_forward(qkv, table, B, T, LayerSpec{w, h}, stream);
}
inline void rope_backward(bf16* dqkv, const float* table, int B, int T, int w, int h, cudaStream_t stream) {
    rope_backward(dqkv, table, B, T, LayerSpec{w, h}, stream);
}
