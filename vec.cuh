// vec.cuh: what the kernel files share beyond cuda_common.cuh: 128-bit loads and stores, and the warp and block
// reductions (below). The loads and stores serve the memory-bound kernels: 8 bf16 or 4 fp32 per access, converted to
// and from fp32 registers, with a scalar fallback for the tail of a row and for addresses that are not 16-byte aligned.
//   load8(f, p, n)    f[0..8) = p[0..n) as floats, 0 past n (n <= 8); one 128-bit load when n == 8 and p is aligned
//   store8(p, f, n)   p[0..n) = bf16(f[0..n))                        ; one 128-bit store likewise
//   load4 / store4    the same for 4 fp32
// Why: a warp of scalar bf16 loads moves 64 bytes per instruction, a warp of 128-bit loads 512, so bandwidth-bound
// kernels need ~8x fewer load instructions in flight to saturate HBM (llm.c's Packed128 does the same).
// The copies are memcpy from a pointer declared 16-byte aligned: nvcc turns them into one ld/st.global.v4, and
// g++ (the executor) into a copy that breaks no aliasing rule, where a reinterpret_cast to int4 would.
// The alignment test is per call, so a kernel handles rows of any length and leading dimension (odd widths in the
// tests, 16-byte multiples in every preset) with one code path; f is indexed only by constants after unrolling,
// so it stays in registers (ptxas reports no stack frame for the kernels using it).
// Does not: use cache hints beyond the default (the rows are re-read by the next kernel often enough that
// streaming loads do not obviously win), or handle n > 8.
#pragma once

#include <cstdint>
#include <cstring>

#include "cuda_common.cuh"

// `#pragma unroll` for nvcc (constant trip counts: keeps the 8-element arrays in registers); g++ would warn.
#ifdef __CUDACC__
#define UNROLL _Pragma("unroll")
#else
#define UNROLL
#endif

__device__ inline bool aligned16(const void* p) { return ((uintptr_t)p & 15) == 0; }

__device__ inline void load8(float* f, const bf16* p, int n) {
    if (n == 8 && aligned16(p)) {
        bf16 b[8];
        memcpy(b, __builtin_assume_aligned((const void*)p, 16), 16);
        UNROLL
        for (int i = 0; i < 8; i++) f[i] = __bfloat162float(b[i]);
    } else {
        UNROLL
        for (int i = 0; i < 8; i++) f[i] = i < n ? __bfloat162float(p[i]) : 0.0f;
    }
}

__device__ inline void store8(bf16* p, const float* f, int n) {
    if (n == 8 && aligned16(p)) {
        bf16 b[8];
        UNROLL
        for (int i = 0; i < 8; i++) b[i] = __float2bfloat16(f[i]);
        memcpy((void*)__builtin_assume_aligned((const void*)p, 16), b, 16);
    } else {
        UNROLL
        for (int i = 0; i < 8; i++)
            if (i < n) p[i] = __float2bfloat16(f[i]);
    }
}

__device__ inline void load4(float* f, const float* p, int n) {
    if (n == 4 && aligned16(p)) {
        memcpy(f, __builtin_assume_aligned((const void*)p, 16), 16);
    } else {
        UNROLL
        for (int i = 0; i < 4; i++) f[i] = i < n ? p[i] : 0.0f;
    }
}

__device__ inline void store4(float* p, const float* f, int n) {
    if (n == 4 && aligned16(p)) {
        memcpy((void*)__builtin_assume_aligned((const void*)p, 16), f, 16);
    } else {
        UNROLL
        for (int i = 0; i < 4; i++)
            if (i < n) p[i] = f[i];
    }
}

// The elements left at column c of a row of n (clamped to [0, k]): how many of a k-wide access are in range.
__device__ inline int in_row(int n, int c, int k) { return n - c < k ? (n - c > 0 ? n - c : 0) : k; }

// The 2-D launch shape of a row-wise elementwise kernel over N rows of `vecs` accesses each (8 bf16 or 4 fp32):
// threadIdx.x walks a row's accesses, threadIdx.y and blockIdx.x the rows, blockIdx.y the accesses past the
// first blockDim.x. Rows go in grid.x (up to 2^31 - 1), so any B T fits; a block holds whole short rows (at
// least 128 threads, at most 256), so a (16K, 768) bf16 tensor is 8K blocks of 192 threads.
struct RowGrid {
    dim3 grid, block;
};
inline RowGrid row_grid(long N, int vecs) {
    int tx = (vecs + 31) / 32 * 32;
    if (tx > 256) tx = 256;
    if (tx < 32) tx = 32;
    int ty = 256 / tx;
    if (ty * tx < 128) ty = (128 + tx - 1) / tx;
    return {dim3((unsigned)((N + ty - 1) / ty), (unsigned)((vecs + tx - 1) / tx)), dim3(tx, ty)};
}
// In the kernel: the row and the index of the access within the row of this thread.
__device__ inline long grid_row() { return (long)blockIdx.x * blockDim.y + threadIdx.y; }
__device__ inline int grid_vec() { return blockIdx.y * blockDim.x + threadIdx.x; }

// The warp and block reductions the kernel files share, one of each, parameterised by the
// operation (SumOp or MaxOp of one float per thread; warp_sum, warp_max, block_sum and block_max name them).
// Every reduction has a fixed combination order (butterfly within a warp, then warp results in warp order), so
// the same launch gives the same bits every run: no atomics anywhere.
// Does not: reduce across blocks (callers write per-block partials and reduce them in a second kernel).

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
