// layernorm.cuh: LayerNorm and RMSNorm over the leading slice [0, w) of rows of stride ldx, forward and
// backward, and the forward fused with the residual add that precedes every norm of the model.
//   norm_forward          out (N, w) = norm(x[:, :w]) * g (+ b); mean, rstd (N) fp32 saved for the backward
//   residual_norm_forward x_out (N, D) = x_in with [0, wy) += y (N, wy), then out (N, wn) = norm(x_out[:, :wn])
//   norm_backward         dx[:, :w] += d/dx (the residual-stream gradient accumulates), dg +=, db += (LayerNorm)
// LayerNorm: y = (x - mean) * rstd * g + b, rstd = 1 / sqrt(var + eps) (biased variance, two passes: mean
// first, then squared deviations, as the reference does, so no cancellation in E[x^2] - mean^2).
// RMSNorm: y = x * rstd * g, rstd = 1 / sqrt(mean(x^2) + eps), mean stored as 0. Every launcher takes
// `rms` (true: RMSNorm, false: LayerNorm) rather than the model's NormType: a kernel file knows sizes and
// pointers, not the config.
// One warp per row; lane i owns columns i, i + 32, ... Statistics and all sums are fp32, storage bf16.
// Why fuse the residual add: every residual add of the model is followed by a norm of the updated state (the
// next sub-block's, or the final norm), so one pass reads x_in and y, writes x_out and the normalised slice,
// instead of a second pass re-reading x_out. The norm reads the bf16-rounded x_out, exactly what the backward
// will read back.
// Weight gradients (sums over the N rows) are deterministic without atomics: fp32 partial sums over fixed
// chunks of rows, then one thread per column adds the chunks in order.
// Does not: normalise anything but a leading slice, keep fp32 copies of activations, or use atomics.
#pragma once

#include "cuda_common.cuh"
#include "reduce.cuh"

constexpr int NORM_ROWS_PER_CHUNK = 32;  // rows per weight-gradient partial sum
constexpr int NORM_BLOCK = 128;          // 4 warps = 4 rows per block

// fp32 scratch the backward needs: two (chunks, w) partial-sum planes (weight and bias).
inline size_t norm_backward_scratch_floats(long N, int w) {
    return 2 * (size_t)((N + NORM_ROWS_PER_CHUNK - 1) / NORM_ROWS_PER_CHUNK) * w;
}

// ---------------------------------------------------------------------------------------------------------
// kernels
// ---------------------------------------------------------------------------------------------------------

// One warp normalises one row xr[0, w) into y[0, w); lane 0 stores the statistics.
__device__ inline void norm_row(bool rms, bf16* y, float* mean, float* rstd, const bf16* xr, const bf16* g,
                                const bf16* b, int w, float eps) {
    const int lane = threadIdx.x % 32;
    float m = 0.0f;
    if (!rms) {
        float s = 0.0f;
        for (int c = lane; c < w; c += 32) s += __bfloat162float(xr[c]);
        m = warp_sum(s) / w;
    }
    float v = 0.0f;
    for (int c = lane; c < w; c += 32) {
        const float dev = __bfloat162float(xr[c]) - m;
        v += dev * dev;
    }
    const float r = rsqrtf(warp_sum(v) / w + eps);
    for (int c = lane; c < w; c += 32) {
        const float xhat = (__bfloat162float(xr[c]) - m) * r;
        y[c] = __float2bfloat16(xhat * __bfloat162float(g[c]) + (rms ? 0.0f : __bfloat162float(b[c])));
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
    for (int c = lane; c < D; c += 32)
        xo[c] = c < wy ? __float2bfloat16(__bfloat162float(xi[c]) + __bfloat162float(y[n * wy + c])) : xi[c];
    __syncwarp();  // norm_row reads columns other lanes just wrote
    norm_row(rms, out + n * wn, mean + n, rstd + n, xo, g, b, wn, eps);
}

// Matches the per-row part of ref::norm_backward: dx[:, :w] += rstd * (dy g - mu1 - xhat mu2).
static __global__ void norm_backward_dx_kernel(bool rms, bf16* dx, long lddx, const bf16* dout, const bf16* x,
                                               long ldx, const float* mean, const float* rstd, const bf16* g, long N,
                                               int w) {
    const long n = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (n >= N) return;
    const int lane = threadIdx.x % 32;
    const bf16* xr = x + n * ldx;
    const bf16* dy = dout + n * w;
    const float m = mean[n], r = rstd[n];
    float s1 = 0.0f, s2 = 0.0f;
    for (int c = lane; c < w; c += 32) {
        const float dxhat = __bfloat162float(dy[c]) * __bfloat162float(g[c]);
        s1 += dxhat;
        s2 += dxhat * (__bfloat162float(xr[c]) - m) * r;
    }
    const float mu1 = rms ? 0.0f : warp_sum(s1) / w, mu2 = warp_sum(s2) / w;
    bf16* dxr = dx + n * lddx;
    for (int c = lane; c < w; c += 32) {
        const float xhat = (__bfloat162float(xr[c]) - m) * r;
        const float d = r * (__bfloat162float(dy[c]) * __bfloat162float(g[c]) - mu1 - xhat * mu2);
        dxr[c] = __float2bfloat16(__bfloat162float(dxr[c]) + d);
    }
}

// Weight-gradient partial sums: block (row chunk k, column chunk), thread column c sums rows of chunk k in
// order into partial[k][c] (g plane) and partial[chunks + k][c] (b plane).
static __global__ void norm_backward_partials_kernel(float* partial, const bf16* dout, const bf16* x, long ldx,
                                                     const float* mean, const float* rstd, long N, int w) {
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= w) return;
    const long chunks = gridDim.x, k = blockIdx.x;
    const long n0 = k * NORM_ROWS_PER_CHUNK, n1 = n0 + NORM_ROWS_PER_CHUNK < N ? n0 + NORM_ROWS_PER_CHUNK : N;
    float sg = 0.0f, sb = 0.0f;
    for (long n = n0; n < n1; n++) {
        const float dy = __bfloat162float(dout[n * w + c]);
        sg += dy * (__bfloat162float(x[n * ldx + c]) - mean[n]) * rstd[n];
        sb += dy;
    }
    partial[k * w + c] = sg;
    partial[(chunks + k) * w + c] = sb;
}

// dg[c] += sum_k partial[k][c], db likewise: chunks added in order, one rounding to bf16.
static __global__ void norm_backward_finish_kernel(bf16* dg, bf16* db, const float* partial, int chunks, int w) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= w) return;
    float sg = 0.0f, sb = 0.0f;
    for (int k = 0; k < chunks; k++) {
        sg += partial[(size_t)k * w + c];
        sb += partial[(size_t)(chunks + k) * w + c];
    }
    dg[c] = __float2bfloat16(__bfloat162float(dg[c]) + sg);
    if (db) db[c] = __float2bfloat16(__bfloat162float(db[c]) + sb);
}

// ---------------------------------------------------------------------------------------------------------
// launchers
// ---------------------------------------------------------------------------------------------------------

// out (N, w), mean / rstd (N) fp32, x (N, ldx) read in [0, w), g / b (w); b is ignored (may be null) for RMSNorm.
inline void norm_forward(bool rms, bf16* out, float* mean, float* rstd, const bf16* x, long ldx, const bf16* g,
                         const bf16* b, long N, int w, float eps, cudaStream_t stream) {
    const int rows = NORM_BLOCK / 32;
    LAUNCH((unsigned)((N + rows - 1) / rows), NORM_BLOCK, 0, stream, norm_forward_kernel)(
        rms, out, mean, rstd, x, ldx, g, b, N, w, eps);
    cudaCheck(cudaGetLastError());
}

// x_out (N, D) = x_in (N, D) with [0, wy) += y (N, wy); then out (N, wn) = norm(x_out[:, :wn]). x_out may
// equal x_in (in place).
inline void residual_norm_forward(bool rms, bf16* x_out, const bf16* x_in, const bf16* y, int D, int wy,
                                  bf16* out, float* mean, float* rstd, const bf16* g, const bf16* b, long N, int wn,
                                  float eps, cudaStream_t stream) {
    const int rows = NORM_BLOCK / 32;
    LAUNCH((unsigned)((N + rows - 1) / rows), NORM_BLOCK, 0, stream, residual_norm_forward_kernel)(
        rms, x_out, x_in, y, D, wy, out, mean, rstd, g, b, N, wn, eps);
    cudaCheck(cudaGetLastError());
}

// dx (N, lddx) += in [0, w); dg (w) +=, db (w) += (LayerNorm; null for RMSNorm). dout (N, w) compact, x (N, ldx)
// the forward's input, scratch: norm_backward_scratch_floats(N, w) floats of device memory.
inline void norm_backward(bool rms, bf16* dx, long lddx, bf16* dg, bf16* db, const bf16* dout, const bf16* x,
                          long ldx, const float* mean, const float* rstd, const bf16* g, long N, int w,
                          float* scratch, cudaStream_t stream) {
    const int rows = NORM_BLOCK / 32;
    LAUNCH((unsigned)((N + rows - 1) / rows), NORM_BLOCK, 0, stream, norm_backward_dx_kernel)(
        rms, dx, lddx, dout, x, ldx, mean, rstd, g, N, w);
    cudaCheck(cudaGetLastError());
    const int chunks = (int)((N + NORM_ROWS_PER_CHUNK - 1) / NORM_ROWS_PER_CHUNK);
    const int block = 128;
    const dim3 grid(chunks, (w + block - 1) / block);
    LAUNCH(grid, block, 0, stream, norm_backward_partials_kernel)(scratch, dout, x, ldx, mean, rstd, N, w);
    cudaCheck(cudaGetLastError());
    LAUNCH((w + block - 1) / block, block, 0, stream, norm_backward_finish_kernel)(dg, rms ? nullptr : db, scratch,
                                                                                   chunks, w);
    cudaCheck(cudaGetLastError());
}
