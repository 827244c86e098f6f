// executor_kernels.cuh: plain CUDA kernels that exercise the executor's semantics. The same file compiles with nvcc
// (test-executor-native runs them on a GPU, which checks the executor against hardware) and with g++ under the
// executor (test/test_executor.cpp). Two kernels are wrong on purpose: missing_sync_kernel (a shared-memory
// race) and divergent_barrier_kernel (__syncthreads in divergent code); the tests expect the executor to catch
// them and never run them on hardware.
#pragma once

#include "cuda_common.cuh"

// ---- reductions ------------------------------------------------------------------------------------------
// Sum of a warp's values, every lane gets it (butterfly).
__device__ inline float warp_sum_xor(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// out[b] = sum of in[b * n .. b * n + n): a shared-memory tree down to one warp, then shuffles. blockDim.x is a
// power of two >= 64.
__global__ void block_sum_kernel(float* out, const float* in, int n) {
    SHARED(float[1024], partial);
    const float* x = in + (size_t)blockIdx.x * n;
    float v = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) v += x[i];
    partial[threadIdx.x] = v;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride >= 32; stride >>= 1) {
        if ((int)threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x < 32) {
        float w = partial[threadIdx.x];
        for (int offset = 16; offset > 0; offset >>= 1) w += __shfl_down_sync(0xffffffffu, w, offset);
        if (threadIdx.x == 0) out[blockIdx.x] = w;
    }
}

// Per warp: the butterfly sum in every lane, ballot / any / all of (value > 0).
__global__ void warp_vote_kernel(float* sums, unsigned* ballots, int* any_all, const float* in) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = in[i];
    sums[i] = warp_sum_xor(v);
    unsigned b = __ballot_sync(0xffffffffu, v > 0.0f);
    int any = __any_sync(0xffffffffu, v > 0.0f), all = __all_sync(0xffffffffu, v > 0.0f);
    if (threadIdx.x % 32 == 0) {
        ballots[i / 32] = b;
        any_all[i / 32] = any * 2 + all;
    }
}

// Shuffle modes with a sub-warp width: out[mode * 32 + lane] for idx(3), up(2), down(1), xor(5), all width 8.
__global__ void shfl_width_kernel(int* out) {
    int lane = threadIdx.x;
    out[0 * 32 + lane] = __shfl_sync(0xffffffffu, lane, 3, 8);
    out[1 * 32 + lane] = __shfl_up_sync(0xffffffffu, lane, 2, 8);
    out[2 * 32 + lane] = __shfl_down_sync(0xffffffffu, lane, 1, 8);
    out[3 * 32 + lane] = __shfl_xor_sync(0xffffffffu, lane, 5, 8);
}

// Half-warps shuffle independently in divergent branches, each with its own mask.
__global__ void shfl_split_mask_kernel(int* out) {
    int lane = threadIdx.x;
    if (lane < 16) out[lane] = __shfl_sync(0x0000ffffu, lane * 10, 0);
    else out[lane] = __shfl_sync(0xffff0000u, lane * 10, 31);
    __syncwarp();
}

// ---- scan --------------------------------------------------------------------------------------------------
// Inclusive prefix sum of n <= blockDim.x ints per block: Hillis-Steele over a double buffer in shared memory.
__global__ void block_scan_kernel(int* out, const int* in, int n) {
    SHARED(int[2][1024], buf);
    int t = threadIdx.x, src = 0;
    buf[0][t] = t < n ? in[blockIdx.x * n + t] : 0;
    __syncthreads();
    for (int offset = 1; offset < (int)blockDim.x; offset <<= 1) {
        buf[1 - src][t] = buf[src][t] + (t >= offset ? buf[src][t - offset] : 0);
        src = 1 - src;
        __syncthreads();
    }
    if (t < n) out[blockIdx.x * n + t] = buf[src][t];
}

// Inclusive prefix sum within each warp with __shfl_up_sync.
__global__ void warp_scan_kernel(int* out, const int* in) {
    int i = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x % 32;
    int v = in[i];
    for (int offset = 1; offset < 32; offset <<= 1) {
        int up = __shfl_up_sync(0xffffffffu, v, offset);
        if (lane >= offset) v += up;
    }
    out[i] = v;
}

// ---- atomics -----------------------------------------------------------------------------------------------
// Histogram of n values in [0, bins): private shared-memory bins per block, then merged into global ones.
// Also sums every value into a float, and a bf16, total.
__global__ void histogram_kernel(unsigned* hist, float* total, bf16* total_bf16, const int* values, int n, int bins) {
    SHARED(unsigned[256], local);
    for (int b = threadIdx.x; b < bins; b += blockDim.x) local[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        atomicAdd(&local[values[i]], 1u);
        atomicAdd(total, (float)values[i]);
        atomicAdd(total_bf16, __float2bfloat16(1.0f));
    }
    __syncthreads();
    for (int b = threadIdx.x; b < bins; b += blockDim.x) atomicAdd(&hist[b], local[b]);
}

// ---- dynamic shared memory ----------------------------------------------------------------------------------
// out (cols, rows) = in (rows, cols)^T through a TILE x (TILE + 1) tile in dynamic shared memory; the padding
// column is why a plain 2-D array is not used. blockDim = (TILE, 8).
__global__ void transpose_kernel(float* out, const float* in, int rows, int cols, int tile) {
    DYNAMIC_SHARED(float, smem);  // tile * (tile + 1) floats
    int bx = blockIdx.x * tile, by = blockIdx.y * tile;
    for (int y = threadIdx.y; y < tile; y += blockDim.y) {
        int r = by + y, c = bx + threadIdx.x;
        if (r < rows && c < cols) smem[y * (tile + 1) + threadIdx.x] = in[(size_t)r * cols + c];
    }
    __syncthreads();
    for (int y = threadIdx.y; y < tile; y += blockDim.y) {
        int r = bx + y, c = by + threadIdx.x;  // row of out = column of in
        if (r < cols && c < rows) out[(size_t)r * rows + c] = smem[threadIdx.x * (tile + 1) + y];
    }
}

// ---- early exit ----------------------------------------------------------------------------------------------
// The usual bounds check: threads past n return at once.
__global__ void scale_kernel(float* out, const float* in, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = s * in[i];
}

// Threads past `active` return before a __syncthreads the others still execute (allowed on sm_70+: exited
// threads no longer take part in the barrier). out[t] = in[t] + in[t + 1 wrapping within active].
__global__ void early_exit_barrier_kernel(float* out, const float* in, int active) {
    SHARED(float[1024], s);
    int t = threadIdx.x;
    if (t >= active) return;
    s[t] = in[t];
    __syncthreads();
    out[t] = s[t] + s[(t + 1) % active];
}

// ---- deliberately wrong kernels --------------------------------------------------------------------------------
// BUG on purpose: reads a neighbour's shared slot without a __syncthreads after the writes.
__global__ void missing_sync_kernel(float* out, const float* in) {
    SHARED(float[256], s);
    int t = threadIdx.x;
    s[t] = in[t];
    out[t] = s[(t + 1) % blockDim.x];  // needs __syncthreads() before this line
}

// BUG on purpose: the two halves of the block wait at different __syncthreads.
__global__ void divergent_barrier_kernel(float* out) {
    if (threadIdx.x < 16) {
        out[threadIdx.x] = 1.0f;
        __syncthreads();
    } else {
        out[threadIdx.x] = 2.0f;
        __syncthreads();
    }
}

// BUG on purpose: lane 0 waits for the whole warp at a shuffle while the other lanes wait at __syncthreads.
__global__ void warp_deadlock_kernel(float* out) {
    float v = 1.0f;
    if (threadIdx.x == 0) v = __shfl_sync(0xffffffffu, v, 1);
    __syncthreads();
    out[threadIdx.x] = v;
}

// ---- tensor cores ----------------------------------------------------------------------------------------------
// d (16x8 f32) = a (16x16 bf16, row-major) @ b (16x8 bf16, row-major k x n) + c, fragments gathered straight
// from global memory by the PTX layout formulas (g = lane >> 2, t = lane % 4). One warp.
__device__ inline uint32_t pack_bf16(bf16 lo, bf16 hi) {
    return (uint32_t)__bfloat16_as_ushort(lo) | ((uint32_t)__bfloat16_as_ushort(hi) << 16);
}
__global__ void mma_direct_kernel(float* d, const bf16* a, const bf16* b, const float* c) {
    int lane = threadIdx.x, g = lane >> 2, t = lane % 4;
    uint32_t af[4], bfr[2];
    float cf[4], df[4];
    af[0] = pack_bf16(a[g * 16 + 2 * t], a[g * 16 + 2 * t + 1]);
    af[1] = pack_bf16(a[(g + 8) * 16 + 2 * t], a[(g + 8) * 16 + 2 * t + 1]);
    af[2] = pack_bf16(a[g * 16 + 2 * t + 8], a[g * 16 + 2 * t + 9]);
    af[3] = pack_bf16(a[(g + 8) * 16 + 2 * t + 8], a[(g + 8) * 16 + 2 * t + 9]);
    bfr[0] = pack_bf16(b[(2 * t) * 8 + g], b[(2 * t + 1) * 8 + g]);
    bfr[1] = pack_bf16(b[(2 * t + 8) * 8 + g], b[(2 * t + 9) * 8 + g]);
    for (int i = 0; i < 4; i++) cf[i] = c[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)];
    mma_m16n8k16_bf16(df, af, bfr, cf);
    for (int i = 0; i < 4; i++) d[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = df[i];
}

// The same product through shared memory: A with ldmatrix_x4, B (k x n row-major) with ldmatrix_x2_trans.
__global__ void mma_ldmatrix_kernel(float* d, const bf16* a, const bf16* b) {
    SHARED(bf16[16 * 16], sa);
    SHARED(bf16[16 * 8], sb);
    int lane = threadIdx.x, g = lane >> 2, t = lane % 4;
    for (int i = lane; i < 256; i += 32) sa[i] = a[i];
    for (int i = lane; i < 128; i += 32) sb[i] = b[i];
    __syncthreads();
    uint32_t af[4], bfr[2];
    int m = lane >> 3, r = lane & 7;  // lane 8m + r addresses row r of matrix m
    ldmatrix_x4(af, &sa[(r + 8 * (m & 1)) * 16 + 8 * (m >> 1)]);
    ldmatrix_x2_trans(bfr, &sb[(r + 8 * (m & 1)) * 8]);
    float cf[4] = {0.0f, 0.0f, 0.0f, 0.0f}, df[4];
    mma_m16n8k16_bf16(df, af, bfr, cf);
    for (int i = 0; i < 4; i++) d[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = df[i];
}

// Raw ldmatrix fragments: m (four 8x8 bf16 matrices, row-major, matrix i at m + 64 i) loaded by x1, x2, x4 and
// their .trans forms; out[(variant * 32 + lane) * 4 + i] = register i (variants: x1 x2 x4 x1t x2t x4t).
__global__ void ldmatrix_fragments_kernel(uint32_t* out, const bf16* m) {
    SHARED(bf16[4 * 64], s);
    int lane = threadIdx.x;
    for (int i = lane; i < 256; i += 32) s[i] = m[i];
    __syncthreads();
    const bf16* row = &s[(lane >> 3) * 64 + (lane & 7) * 8];
    uint32_t r[6][4] = {};
    ldmatrix_x1(r[0], row);
    ldmatrix_x2(r[1], row);
    ldmatrix_x4(r[2], row);
    ldmatrix_x1_trans(r[3], row);
    ldmatrix_x2_trans(r[4], row);
    ldmatrix_x4_trans(r[5], row);
    for (int v = 0; v < 6; v++)
        for (int i = 0; i < 4; i++) out[(v * 32 + lane) * 4 + i] = r[v][i];
}

// BUG on purpose (run only under AddressSanitizer): one thread per slot of a buffer one element too short.
__global__ void global_overflow_kernel(float* out) { out[threadIdx.x] = 1.0f; }

// BUG on purpose (run only under AddressSanitizer): the last thread writes one past a shared array.
__global__ void shared_overflow_kernel(float* out) {
    SHARED(float[32], s);
    s[threadIdx.x + 1] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x];
}
