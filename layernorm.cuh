// layernorm.cuh: LayerNorm and RMSNorm over the leading slice [0, w) of rows of stride ldx, forward and
// backward, and the forward fused with the residual add that precedes every norm of the model.
//   norm_forward          out (N, w) = norm(x[:, :w]) * g (+ b); mean, rstd (N) fp32 saved for the backward
//   residual_norm_forward x_out (N, D) = x_in with [0, wy) += y (N, wy), then out (N, wn) = norm(x_out[:, :wn])
//   norm_backward         dx[:, :w] += d/dx (the residual-stream gradient accumulates); dg +=, db += (LayerNorm)
//                         into the fp32 gradient buffer
// LayerNorm: y = (x - mean) * rstd * g + b, rstd = 1 / sqrt(var + eps) (biased variance, two passes: mean
// first, then squared deviations, as the reference does, so no cancellation in E[x^2] - mean^2).
// RMSNorm: y = x * rstd * g, rstd = 1 / sqrt(mean(x^2) + eps), mean stored as 0. Every launcher takes
// `rms` (true: RMSNorm, false: LayerNorm) rather than the model's NormType: a kernel file knows sizes and
// pointers, not the config.
// One warp per row; lane i owns the 8-column chunks i, i + 32, ... (128-bit loads, vec.cuh). The passes over a
// row after the first re-read it from L1 / L2, not HBM. Statistics and all sums are fp32, storage bf16.
// Why fuse the residual add: every residual add of the model is followed by a norm of the updated state (the
// next sub-block's, or the final norm), so one pass reads x_in and y, writes x_out and the normalised slice,
// instead of a second pass re-reading x_out. The norm reads the bf16-rounded x_out, exactly what the backward
// will read back.
// The backward is one pass over dout and x for both the input gradient and the weight-gradient partial sums:
// each warp adds its rows' dy * xhat and dy into its own fp32 planes in shared memory (a lane owns its
// columns, so no two threads touch one address), the block adds its warps' planes in order into one partial
// row per block, and a finish kernel adds the blocks' partials in order. Deterministic, no atomics.
// The planes are swizzled (norm_plane_index): lane L's column 8 L + i of a 256-column chunk lands in bank
// 8 (L % 4) + (i ^ L / 4), so the warp's 32 scalar accesses of one i hit 32 banks. Stored plainly, column 8 L + i
// is bank 8 L + i mod 32: 4 banks for 32 lanes, an 8-way conflict on every access (an estimated 1.5-2x on the
// kernel, cost_model.h). The block's sum over its warps reads 32 consecutive columns, also 32 banks.
// Does not: normalise anything but a leading slice, keep fp32 copies of activations, or use atomics.
#pragma once

#include "cuda_common.cuh"
#include "kernel_sizes.h"  // NORM_ROWS_PER_CHUNK, norm_backward_scratch_floats: the backward's scratch
#include "vec.cuh"

constexpr int NORM_BLOCK = 128;            // forward: 4 warps = 4 rows per block
constexpr int NORM_SMEM_BYTES = 48 << 10;  // the backward's warp planes: within the no-opt-in limit up to w 6144
constexpr int NORM_FINISH_COLS = 4, NORM_FINISH_SLICES = 64;  // finish block: 4 columns x 64 slices of partials

// The shared-memory index of column c in a warp's plane: the low 3 bits flipped by bits 5..7 (a permutation of
// each aligned group of 8 columns, so a plane of w rounded up to 8 holds it). See the top for the banks.
__host__ __device__ inline int norm_plane_index(int c) { return c ^ ((c >> 5) & 7); }
__host__ __device__ inline int norm_plane_width(int w) { return (w + 7) / 8 * 8; }

// ---------------------------------------------------------------------------------------------------------
// kernels
// ---------------------------------------------------------------------------------------------------------

// One warp normalises one row xr[0, w) into y[0, w); lane 0 stores the statistics.
__device__ inline void norm_row(bool rms, bf16* y, float* mean, float* rstd, const bf16* xr, const bf16* g,
                                const bf16* b, int w, float eps) {
    const int lane = threadIdx.x % 32;
    float x[8], gv[8], bv[8];
    float m = 0.0f;
    if (!rms) {
        float s = 0.0f;
        for (int c = 8 * lane; c < w; c += 256) {
            load8(x, xr + c, in_row(w, c, 8));
            UNROLL
            for (int i = 0; i < 8; i++) s += x[i];
        }
        m = warp_sum(s) / w;
    }
    float v = 0.0f;
    for (int c = 8 * lane; c < w; c += 256) {
        const int k = in_row(w, c, 8);
        load8(x, xr + c, k);
        UNROLL
        for (int i = 0; i < 8; i++) v += i < k ? (x[i] - m) * (x[i] - m) : 0.0f;
    }
    const float r = rsqrtf(warp_sum(v) / w + eps);
    for (int c = 8 * lane; c < w; c += 256) {
        const int k = in_row(w, c, 8);
        load8(x, xr + c, k), load8(gv, g + c, k);
        if (!rms) load8(bv, b + c, k);
        UNROLL
        for (int i = 0; i < 8; i++) x[i] = (x[i] - m) * r * gv[i] + (rms ? 0.0f : bv[i]);
        store8(y + c, x, k);
    }
    if (lane == 0) *mean = m, *rstd = r;
}

// Matches ref::norm_forward. The row index is uniform across a warp, so whole warps leave together and the
// full-mask shuffles inside norm_row always see 32 lanes.
static __global__ void norm_forward_kernel(bool rms, bf16* out, float* mean, float* rstd, const bf16* x, long ldx,
                                           const bf16* g, const bf16* b, long N, int w, float eps) {
    const long n = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (n >= N) return;
    norm_row(rms, out + n * w, mean + n, rstd + n, x + n * ldx, g, b, w, eps);
}

// Matches ref::residual_forward (x_out = x_in; x_out[:, :wy] += y) followed by ref::norm_forward on x_out.
static __global__ void residual_norm_forward_kernel(bool rms, bf16* x_out, const bf16* x_in, const bf16* y, int D,
                                                    int wy, bf16* out, float* mean, float* rstd, const bf16* g,
                                                    const bf16* b, long N, int wn, float eps) {
    const long n = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (n >= N) return;
    const int lane = threadIdx.x % 32;
    bf16* xo = x_out + n * D;
    const bf16* xi = x_in + n * D;
    const bf16* yr = y + n * wy;
    float xv[8], yv[8];
    for (int c = 8 * lane; c < D; c += 256) {
        const int k = in_row(D, c, 8);
        load8(xv, xi + c, k);
        if (c < wy) {
            load8(yv, yr + c, in_row(wy, c, 8));
            UNROLL
            for (int i = 0; i < 8; i++)  // columns past wy are copied, not added to 0 (which would turn -0 into +0)
                if (c + i < wy) xv[i] += yv[i];
        }
        store8(xo + c, xv, k);
    }
    __syncwarp();  // norm_row reads columns other lanes just wrote
    norm_row(rms, out + n * wn, mean + n, rstd + n, xo, g, b, wn, eps);
}

// Matches ref::norm_backward. Block k owns rows [k R, (k + 1) R), R = NORM_ROWS_PER_CHUNK, warp j of the block
// the rows k R + j, k R + j + warps, ...: for each, dx[:, :w] += rstd * (dy g - mu1 - xhat mu2), and dy * xhat,
// dy into the warp's planes. Then partial[k][c] (g plane) and partial[chunks + k][c] (b plane) = the warps'
// planes added in warp order. Dynamic shared memory: warps x (1 or 2) x norm_plane_width(w) floats, each plane
// indexed through norm_plane_index.
static __global__ void norm_backward_kernel(bool rms, bf16* dx, long lddx, float* partial, const bf16* dout,
                                            const bf16* x, long ldx, const float* mean, const float* rstd,
                                            const bf16* g, long N, int w) {
    DYNAMIC_SHARED(float, planes);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32, nplanes = rms ? 1 : 2;
    const int wp = norm_plane_width(w);
    float* dgp = planes + (size_t)warp * nplanes * wp;  // this warp's sums of dy * xhat ...
    float* dbp = dgp + wp;                              // ... and of dy (LayerNorm only)
    for (int c = lane; c < nplanes * wp; c += 32) dgp[c] = 0.0f;
    __syncwarp();
    const long n0 = (long)blockIdx.x * NORM_ROWS_PER_CHUNK;
    const long n1 = n0 + NORM_ROWS_PER_CHUNK < N ? n0 + NORM_ROWS_PER_CHUNK : N;
    float dy[8], xv[8], gv[8], d[8];
    for (long n = n0 + warp; n < n1; n += warps) {
        const bf16* xr = x + n * ldx;
        const bf16* dyr = dout + n * w;
        const float m = mean[n], r = rstd[n];
        float s1 = 0.0f, s2 = 0.0f;
        for (int c = 8 * lane; c < w; c += 256) {
            const int k = in_row(w, c, 8);
            load8(dy, dyr + c, k), load8(xv, xr + c, k), load8(gv, g + c, k);
            UNROLL
            for (int i = 0; i < 8; i++) {
                const float dxhat = dy[i] * gv[i];
                s1 += dxhat;
                s2 += i < k ? dxhat * (xv[i] - m) * r : 0.0f;
            }
        }
        const float mu1 = rms ? 0.0f : warp_sum(s1) / w, mu2 = warp_sum(s2) / w;
        bf16* dxr = dx + n * lddx;
        for (int c = 8 * lane; c < w; c += 256) {
            const int k = in_row(w, c, 8);
            load8(dy, dyr + c, k), load8(xv, xr + c, k), load8(gv, g + c, k), load8(d, dxr + c, k);
            UNROLL
            for (int i = 0; i < 8; i++) {
                const float xhat = (xv[i] - m) * r;
                d[i] += r * (dy[i] * gv[i] - mu1 - xhat * mu2);
                if (i < k) {
                    const int at = norm_plane_index(c + i);
                    dgp[at] += dy[i] * xhat;
                    if (!rms) dbp[at] += dy[i];
                }
            }
            store8(dxr + c, d, k);
        }
    }
    __syncthreads();  // every warp's planes are complete
    const long chunks = gridDim.x;
    for (int c = threadIdx.x; c < w; c += blockDim.x) {
        float sg = 0.0f, sb = 0.0f;
        const int at = norm_plane_index(c);
        for (int j = 0; j < warps; j++) {
            sg += planes[(size_t)j * nplanes * wp + at];
            if (!rms) sb += planes[(size_t)j * nplanes * wp + wp + at];
        }
        partial[blockIdx.x * w + c] = sg;
        if (!rms) partial[(chunks + blockIdx.x) * w + c] = sb;
    }
}

// dg[c] += sum_k partial[k][c] (blockIdx.y = 0), db likewise (blockIdx.y = 1), in fp32. Block: NORM_FINISH_COLS
// columns x NORM_FINISH_SLICES slices; slice s adds chunks s, s + slices, ... in order, then slice 0 adds the
// slices in order: a fixed order for a given chunk count, and w / 4 x planes blocks (384 for w 768 LayerNorm).
static __global__ void norm_backward_finish_kernel(float* dg, float* db, const float* partial, int chunks, int w) {
    SHARED(float[NORM_FINISH_SLICES][NORM_FINISH_COLS], sums);
    const int c = blockIdx.x * NORM_FINISH_COLS + threadIdx.x, s = threadIdx.y;
    const float* plane = partial + (size_t)blockIdx.y * chunks * w;
    float acc = 0.0f;
    if (c < w)
        for (int k = s; k < chunks; k += NORM_FINISH_SLICES) acc += plane[(size_t)k * w + c];
    sums[s][threadIdx.x] = acc;
    __syncthreads();
    if (s == 0 && c < w) {
        float total = 0.0f;
        for (int j = 0; j < NORM_FINISH_SLICES; j++) total += sums[j][threadIdx.x];
        float* out = blockIdx.y == 0 ? dg : db;
        out[c] += total;
    }
}

// ---------------------------------------------------------------------------------------------------------
// launchers
// ---------------------------------------------------------------------------------------------------------

// out (N, w), mean / rstd (N) fp32, x (N, ldx) read in [0, w), g / b (w); b is ignored (may be null) for RMSNorm.
inline void norm_forward(bool rms, bf16* out, float* mean, float* rstd, const bf16* x, long ldx, const bf16* g,
                         const bf16* b, long N, int w, float eps, cudaStream_t stream) {
    const int rows = NORM_BLOCK / 32;
    LAUNCH((unsigned)((N + rows - 1) / rows), NORM_BLOCK, 0, stream, norm_forward_kernel)
    (rms, out, mean, rstd, x, ldx, g, b, N, w, eps);
    cudaCheck(cudaGetLastError());
}

// x_out (N, D) = x_in (N, D) with [0, wy) += y (N, wy); then out (N, wn) = norm(x_out[:, :wn]). x_out may
// equal x_in (in place).
inline void residual_norm_forward(bool rms, bf16* x_out, const bf16* x_in, const bf16* y, int D, int wy, bf16* out,
                                  float* mean, float* rstd, const bf16* g, const bf16* b, long N, int wn, float eps,
                                  cudaStream_t stream) {
    const int rows = NORM_BLOCK / 32;
    LAUNCH((unsigned)((N + rows - 1) / rows), NORM_BLOCK, 0, stream, residual_norm_forward_kernel)
    (rms, x_out, x_in, y, D, wy, out, mean, rstd, g, b, N, wn, eps);
    cudaCheck(cudaGetLastError());
}

// dx (N, lddx) += in [0, w); dg (w) +=, db (w) += in fp32 (LayerNorm; db null for RMSNorm). dout (N, w) compact,
// x (N, ldx) the forward's input, scratch: norm_backward_scratch_floats(N, w) floats of device memory.
// Two launches: the row pass (N / 64 blocks: 256 at N = 16K) and the finish (w / 4 x planes blocks: 384 at
// w 768 LayerNorm).
inline void norm_backward(bool rms, bf16* dx, long lddx, float* dg, float* db, const bf16* dout, const bf16* x,
                          long ldx, const float* mean, const float* rstd, const bf16* g, long N, int w, float* scratch,
                          cudaStream_t stream) {
    const int chunks = (int)((N + NORM_ROWS_PER_CHUNK - 1) / NORM_ROWS_PER_CHUNK), planes = rms ? 1 : 2;
    // As many warps (up to 8) as keep the warps' planes within 48 KiB: 8 for LayerNorm up to w 768 (16 warps per
    // SM at N = 16K: a memory-bound kernel needs them in flight), 6 at w 1024; past w 6144 one warp needs the
    // opt-in. The count depends on w only, so the summation order is fixed for a model.
    const size_t plane_bytes = (size_t)planes * norm_plane_width(w) * sizeof(float);
    int warps = (int)(NORM_SMEM_BYTES / plane_bytes);
    warps = warps < 1 ? 1 : warps > 8 ? 8 : warps;
    const size_t smem = warps * plane_bytes;
    if (smem > (size_t)NORM_SMEM_BYTES)
        cudaCheck(cudaFuncSetAttribute(norm_backward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    LAUNCH(chunks, 32 * warps, smem, stream, norm_backward_kernel)
    (rms, dx, lddx, scratch, dout, x, ldx, mean, rstd, g, N, w);
    cudaCheck(cudaGetLastError());
    const dim3 grid((w + NORM_FINISH_COLS - 1) / NORM_FINISH_COLS, planes), block(NORM_FINISH_COLS, NORM_FINISH_SLICES);
    LAUNCH(grid, block, 0, stream, norm_backward_finish_kernel)(dg, rms ? nullptr : db, scratch, chunks, w);
    cudaCheck(cudaGetLastError());
}
