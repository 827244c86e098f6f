// residual.cuh: the leading-slice residual add of variable-width layers, and its backward.
//   residual_forward   x_out (N, D) = x_in (N, D) with [0, w) += y (N, w); coordinates [w, D) copied through
//   residual_backward  dy (N, w) = dx[:, :w], dx (N, lddx) the stream gradient
// The model normally uses the add fused with the following norm (residual_norm_forward in layernorm.cuh);
// this one is for the places without a norm after them and for tests.
// Does not: scale the branch, or accumulate into dy (the branch has one consumer: its gradient is assigned).
#pragma once

#include "cuda_common.cuh"

// ---------------------------------------------------------------------------------------------------------
// kernels
// ---------------------------------------------------------------------------------------------------------

// Matches ref::residual_forward applied to a copy of the stream. One thread per element of x_out.
static __global__ void residual_forward_kernel(bf16* x_out, const bf16* x_in, const bf16* y, long N, int D, int w) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * D) return;
    const long n = i / D;
    const int c = (int)(i % D);
    x_out[i] = c < w ? __float2bfloat16(__bfloat162float(x_in[i]) + __bfloat162float(y[n * w + c])) : x_in[i];
}

// Matches ref::residual_backward. One thread per element of dy.
static __global__ void residual_backward_kernel(bf16* dy, const bf16* dx, long lddx, long N, int w) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * w) return;
    dy[i] = dx[(i / w) * lddx + i % w];
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

inline void residual_backward(bf16* dy, const bf16* dx, long lddx, long N, int w, cudaStream_t stream) {
    const int block = 256;
    LAUNCH((unsigned)((N * w + block - 1) / block), block, 0, stream, residual_backward_kernel)(dy, dx, lddx, N, w);
    cudaCheck(cudaGetLastError());
}
