// swiglu.cuh: the SwiGLU activation, forward and backward.
//   forward:  in (N, 2 hid) = [gate | up] -> out (N, hid) = silu(gate) * up, silu(g) = g * sigmoid(g)
//   backward: din (N, 2 hid) assigned: dgate = dout * up * sig * (1 + g (1 - sig)), dup = dout * silu(g)
// Elementwise, fp32 math on bf16 storage, 8 columns per thread with 128-bit accesses (vec.cuh), a 2-D grid of
// rows x column chunks (no per-element division). sigmoid is 1 / (1 + exp(-g)): for g -> -inf exp overflows
// to inf and sig to 0, silu to -0, which is the right limit (no NaN), so no clamping is needed.
// Does not: fuse with the matmuls around it (cuBLASLt epilogues cannot express a gated product).
#pragma once

#include "cuda_common.cuh"
#include "vec.cuh"

// ---------------------------------------------------------------------------------------------------------
// kernels
// ---------------------------------------------------------------------------------------------------------

// Matches ref::swiglu_forward. One thread per 8 outputs of a row (row_grid).
static __global__ void swiglu_forward_kernel(bf16* out, const bf16* in, long N, int hid) {
    const long n = grid_row();
    const int c = 8 * grid_vec();
    if (n >= N || c >= hid) return;
    const int k = in_row(hid, c, 8);
    float g[8], u[8];
    load8(g, in + n * 2 * hid + c, k), load8(u, in + n * 2 * hid + hid + c, k);
    UNROLL
    for (int i = 0; i < 8; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    store8(out + n * hid + c, g, k);
}

// Matches ref::swiglu_backward. One thread per 8 (n, c) writes both halves of din.
static __global__ void swiglu_backward_kernel(bf16* din, const bf16* dout, const bf16* in, long N, int hid) {
    const long n = grid_row();
    const int c = 8 * grid_vec();
    if (n >= N || c >= hid) return;
    const int k = in_row(hid, c, 8);
    float g[8], u[8], dy[8];
    load8(g, in + n * 2 * hid + c, k), load8(u, in + n * 2 * hid + hid + c, k), load8(dy, dout + n * hid + c, k);
    UNROLL
    for (int i = 0; i < 8; i++) {
        const float sig = 1.0f / (1.0f + expf(-g[i]));
        const float dgate = dy[i] * u[i] * sig * (1.0f + g[i] * (1.0f - sig));
        u[i] = dy[i] * g[i] * sig;  // dup
        g[i] = dgate;
    }
    store8(din + n * 2 * hid + c, g, k), store8(din + n * 2 * hid + hid + c, u, k);
}

// ---------------------------------------------------------------------------------------------------------
// launchers
// ---------------------------------------------------------------------------------------------------------

// out (N, hid), in (N, 2 hid).
inline void swiglu_forward(bf16* out, const bf16* in, long N, int hid, cudaStream_t stream) {
    const RowGrid g = row_grid(N, (hid + 7) / 8);
    LAUNCH(g.grid, g.block, 0, stream, swiglu_forward_kernel)(out, in, N, hid);
    cudaCheck(cudaGetLastError());
}

// din (N, 2 hid) assigned, dout (N, hid), in (N, 2 hid) the forward's input. din must not alias in.
inline void swiglu_backward(bf16* din, const bf16* dout, const bf16* in, long N, int hid, cudaStream_t stream) {
    const RowGrid g = row_grid(N, (hid + 7) / 8);
    LAUNCH(g.grid, g.block, 0, stream, swiglu_backward_kernel)(din, dout, in, N, hid);
    cudaCheck(cudaGetLastError());
}
