// inspect/residual.cuh: the leading-slice residual add of variable-width layers, its backward, and the column copy
// that backward is: the KV-cache decoder's (inspect/cuda_decoder.cuh).
//   residual_forward   x_out (N, D) = x_in (N, D) with [0, w) += y (N, w); coordinates [w, D) copied through
//   copy_columns       dst[:, :w] = src[:, :w], dst (N, ld_dst), src (N, ld_src); columns past w untouched
//   residual_backward  dy (N, w) = dx[:, :w], dx (N, lddx) the residual-stream gradient: a copy_columns
// The decoder adds its MLP branch with residual_forward and fills its cache with copy_columns. The training model
// uses none of them: its adds are fused with the following norm (residual_norm_forward in layernorm.cuh), and the
// slices these copies would move are read and written in place through matmul strides (matmul.cuh). Tested
// against ref::residual_forward and ref::residual_backward.
// Does not: scale the branch, or accumulate into dy (the branch has one consumer: its gradient is assigned).
#pragma once

#include "cuda_common.cuh"

// ---------------------------------------------------------------------------------------------------------
// kernels
// ---------------------------------------------------------------------------------------------------------

// Matches ref::residual_forward applied to a copy of the residual state. One thread per element of x_out.
static __global__ void residual_forward_kernel(bf16* x_out, const bf16* x_in, const bf16* y, long N, int D, int w) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * D) return;
    const long n = i / D;
    const int c = (int)(i % D);
    x_out[i] = c < w ? __float2bfloat16(__bfloat162float(x_in[i]) + __bfloat162float(y[n * w + c])) : x_in[i];
}

// One thread per copied element (n, c), i = n w + c. Matches ref::residual_backward when ld_dst = w.
static __global__ void copy_columns_kernel(bf16* dst, long ld_dst, const bf16* src, long ld_src, long N, int w) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * w) return;
    const long n = i / w;
    const int c = (int)(i % w);
    dst[n * ld_dst + c] = src[n * ld_src + c];
}

// ---------------------------------------------------------------------------------------------------------
// launchers
// ---------------------------------------------------------------------------------------------------------

// x_out may equal x_in (in place).
inline void residual_forward(bf16* x_out, const bf16* x_in, const bf16* y, long N, int D, int w, cudaStream_t stream) {
    const int block = 256;
    LAUNCH((unsigned)((N * D + block - 1) / block), block, 0, stream, residual_forward_kernel)(x_out, x_in, y, N, D, w);
    cudaCheck(cudaGetLastError());
}

// dst and src must not overlap (a copy between two buffers, bit for bit).
inline void copy_columns(bf16* dst, long ld_dst, const bf16* src, long ld_src, long N, int w, cudaStream_t stream) {
    const int block = 256;
    LAUNCH((unsigned)((N * w + block - 1) / block), block, 0, stream, copy_columns_kernel)
    (dst, ld_dst, src, ld_src, N, w);
    cudaCheck(cudaGetLastError());
}

// The residual add's input gradient for the branch: dy (N, w) = dx[:, :w]. (The skip path's is dx itself.)
inline void residual_backward(bf16* dy, const bf16* dx, long lddx, long N, int w, cudaStream_t stream) {
    copy_columns(dy, w, dx, lddx, N, w, stream);
}
