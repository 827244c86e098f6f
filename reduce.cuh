// reduce.cuh: the warp and block reductions the kernel files share (sum and max of one float per thread).
// Every reduction has a fixed combination order (butterfly within a warp, then warp results in warp order), so
// the same launch gives the same bits every run: no atomics anywhere.
// Does not: reduce across blocks (callers write per-block partials and reduce them in a second kernel).
#pragma once

#include "cuda_common.cuh"

// Butterfly sum / max over the 32 lanes of a converged warp; every lane gets the result.
__device__ inline float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}
__device__ inline float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Sum / max over the whole block (blockDim.x a multiple of 32, at most 1024, every thread calls it); every
// thread gets the result. `scratch` is 32 floats of shared memory; the trailing barrier lets callers reuse it.
__device__ inline float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < warps ? scratch[lane] : 0.0f;
    v = warp_sum(v);
    __syncthreads();
    return v;
}
__device__ inline float block_max(float v, float* scratch) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_max(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < warps ? scratch[lane] : -INFINITY;
    v = warp_max(v);
    __syncthreads();
    return v;
}
