// gradnorm.cuh: the global L2 norm of the gradient block, for clipping and the training log.
//   grads (n) fp32 -> out (1) double = sum of squares, left on the device for adamw.cuh's clip factor and
//   read back by the engine together with the step's loss (one wait per step)
// Deterministic two-stage reduction, no float atomics: stage 1 runs a grid that depends only on n, each block
// reducing its grid-stride share in a fixed tree into partial[block]; stage 2 is one thread adding the
// partials in order in double. The same n gives the same bits on every run.
// 128-bit loads: 4 floats per access, grid-stride over the blocks.
// Precision: per-thread fp32 sums of n / (GRADNORM_BLOCKS * 256) squares, fixed trees, then double: relative
// error ~1e-6, against a norm that only decides a clip factor.
// Does not: clip (adamw_step takes the clip factor as grad_scale), or reduce across ranks (the caller
// all-reduces the squared sum when there is more than one).
#pragma once

#include "cuda_common.cuh"
#include "vec.cuh"

constexpr int GRADNORM_BLOCKS = 1024;  // stage-1 partials at most: the scratch the launcher needs
constexpr int GRADNORM_BLOCK = 256;
constexpr int GRADNORM_MIN_PER_THREAD = 16;  // small blocks of grads use fewer blocks, not idle threads

// ---------------------------------------------------------------------------------------------------------
// kernels
// ---------------------------------------------------------------------------------------------------------

// Stage 1 of ref::grad_norm: partial[block] = sum of squares of this block's grid-stride elements.
static __global__ void grad_norm_partial_kernel(float* partial, const float* g, size_t n) {
    SHARED(float[32], scratch);
    float s = 0.0f, x[4];
    const size_t stride = 4 * (size_t)gridDim.x * blockDim.x;
    for (size_t i = 4 * ((size_t)blockIdx.x * blockDim.x + threadIdx.x); i < n; i += stride) {
        load4(x, g + i, n - i < 4 ? (int)(n - i) : 4);
        s += x[0] * x[0] + x[1] * x[1] + x[2] * x[2] + x[3] * x[3];
    }
    s = block_sum(s, scratch);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// Stage 2: one thread, partials in order, in double.
static __global__ void grad_norm_final_kernel(double* out, const float* partial, int blocks) {
    double s = 0.0;
    for (int b = 0; b < blocks; b++) s += (double)partial[b];
    *out = s;
}

// ---------------------------------------------------------------------------------------------------------
// launchers
// ---------------------------------------------------------------------------------------------------------

// out (1) double on the device = sum of g[i]^2; partial: GRADNORM_BLOCKS floats of device scratch.
// sqrt gives the norm (the AdamW kernel takes it there; the engine reads it back with the loss).
inline void grad_norm_squared(double* out, const float* g, size_t n, float* partial, cudaStream_t stream) {
    const size_t per_block = (size_t)GRADNORM_BLOCK * GRADNORM_MIN_PER_THREAD;
    size_t blocks = (n + per_block - 1) / per_block;
    if (blocks > (size_t)GRADNORM_BLOCKS) blocks = GRADNORM_BLOCKS;
    if (blocks == 0) blocks = 1;
    LAUNCH((unsigned)blocks, GRADNORM_BLOCK, 0, stream, grad_norm_partial_kernel)(partial, g, n);
    cudaCheck(cudaGetLastError());
    LAUNCH(1, 1, 0, stream, grad_norm_final_kernel)(out, partial, (int)blocks);
    cudaCheck(cudaGetLastError());
}
