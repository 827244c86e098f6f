// reduce.cuh: the warp and block reductions the kernel files share, one of each, parameterised by the
// operation (SumOp or MaxOp of one float per thread; warp_sum, warp_max, block_sum and block_max name them).
// Every reduction has a fixed combination order (butterfly within a warp, then warp results in warp order), so
// the same launch gives the same bits every run: no atomics anywhere.
// Does not: reduce across blocks (callers write per-block partials and reduce them in a second kernel).
#pragma once

#include "cuda_common.cuh"

// The operations: how two partial results combine, and the identity that pads the unused warp slots.
struct SumOp {
    __device__ float operator()(float a, float b) const { return a + b; }
    static constexpr float identity = 0.0f;
};
struct MaxOp {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
    static constexpr float identity = -INFINITY;
};

// Butterfly reduction over the 32 lanes of a converged warp; every lane gets the result.
template <class Op> __device__ inline float warp_reduce(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = Op()(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Reduction over the whole block (blockDim.x a multiple of 32, at most 1024, every thread calls it); every
// thread gets the result. `scratch` is 32 floats of shared memory; the trailing barrier lets callers reuse it.
template <class Op> __device__ inline float block_reduce(float v, float* scratch) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_reduce<Op>(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < warps ? scratch[lane] : Op::identity;
    v = warp_reduce<Op>(v);
    __syncthreads();
    return v;
}

__device__ inline float warp_sum(float v) { return warp_reduce<SumOp>(v); }
__device__ inline float warp_max(float v) { return warp_reduce<MaxOp>(v); }
__device__ inline float block_sum(float v, float* scratch) { return block_reduce<SumOp>(v, scratch); }
__device__ inline float block_max(float v, float* scratch) { return block_reduce<MaxOp>(v, scratch); }
