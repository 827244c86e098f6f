// adamw.cuh: the AdamW update of the whole parameter block, with fp32 master weights.
//   master, m, v (P) fp32; grads (P) fp32; params (P) bf16 = the rounded copy of master the kernels read
// Per element (PyTorch's AdamW, as ref::adamw_step): g = grad * clip (gradient clipping folded in, the factor
// computed on the device from the squared norm gradnorm.cuh left there);
// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; p = p * decay - step * m / (sqrt(v / bc2) + eps), with
// step = lr_r / bc1, bc = 1 - beta^t, decay = 1 - lr_r wd_r for matrices and 1 for norm weights and biases, where
// lr_r = lr x lr_mult and wd_r = wd x wd_mult are the range's rates (optimizer_rates.h): a range at multipliers 1
// takes step and decay as the host rounded them (the scalars of a run without multipliers, bit for bit), another
// computes its own in double, as ref::adamw_update does.
// Why master weights: an update of lr * 1 ~ 1e-4 on a weight of 0.02 is below half a bf16 ulp (2^-9 relative),
// so a bf16-only parameter would never move.
// The parameter block is updated as a list of ranges, each with its decay flag (matrices and embeddings decay,
// norm weights and biases do not); the engine builds them from its layout (adamw_ranges.h), merging
// consecutive tensors of the same kind; one launch updates them all (a table maps blocks to ranges), 4
// elements per thread with 128-bit accesses to the fp32 arrays.
// ZeRO-1 (cuda_engine.cuh): a rank updates only the ranges of its shard, and keeps master, m and v for that shard
// alone; a range's `state` says where its first element lives in those three arrays (its offset otherwise).
// Does not: use atomics (pure elementwise, deterministic).
#pragma once

#include <cmath>

#include "adamw_launch.h"  // AdamWLaunchRange, ADAMW_BLOCK, ADAMW_PER_THREAD
#include "cuda_common.cuh"
#include "vec.cuh"

// ---------------------------------------------------------------------------------------------------------
// kernels
// ---------------------------------------------------------------------------------------------------------

// Matches ref::clip_grad_norm's scaling then ref::adamw_step on 4 consecutive elements of one range: block b
// updates the range r with first_block[r] <= b < first_block[r + 1] (a binary search over ~50 ranges).
// stats (null: no clipping, no guard) is the step's {loss, squared global norm} left on the device: when
// either is NaN or infinite the step is skipped (every thread returns; nothing is written), else the clip factor
// min(1, max_norm / norm) is computed here, in double as the reference does, so no host ever reads the norm
// before the update.
static __global__ void adamw_kernel(bf16* params, float* master, float* m, float* v, const float* grads,
                                    const AdamWLaunchRange* ranges, int nranges, float b1, float b2, float eps,
                                    float step, float rbc2, float matrix_decay, double lr, double wd, double bc1,
                                    const double* stats, double max_norm) {
    int lo = 0, hi = nranges - 1;  // the last range with first_block <= blockIdx.x
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (ranges[mid].first_block <= (int)blockIdx.x) lo = mid;
        else hi = mid - 1;
    }
    const AdamWLaunchRange r = ranges[lo];
    const size_t i = ((size_t)(blockIdx.x - r.first_block) * blockDim.x + threadIdx.x) * ADAMW_PER_THREAD;
    if (i >= r.n) return;
    float scale = 1.0f;
    if (stats) {
        if (!isfinite(stats[0]) || !isfinite(stats[1])) return;  // a non-finite step changes nothing
        const double norm = sqrt(stats[1]);
        if (max_norm > 0 && norm > max_norm) scale = (float)(max_norm / norm);
    }
    const int k = r.n - i < ADAMW_PER_THREAD ? (int)(r.n - i) : ADAMW_PER_THREAD;
    const size_t o = r.offset + i, so = r.state + i;  // in params and grads; in master, m and v
    if (!r.unit) {                                    // the range's own rate
        const double lr_r = lr * r.lr_mult, wd_r = wd * r.wd_mult;
        step = (float)(lr_r / bc1), matrix_decay = (float)(1.0 - lr_r * wd_r);
    }
    const float decay = r.decay ? matrix_decay : 1.0f;
    float g[4], mi[4], vi[4], p[4];
    load4(g, grads + o, k), load4(mi, m + so, k), load4(vi, v + so, k), load4(p, master + so, k);
    UNROLL
    for (int j = 0; j < 4; j++) {
        const float gj = g[j] * scale;
        mi[j] = b1 * mi[j] + (1.0f - b1) * gj;
        vi[j] = b2 * vi[j] + (1.0f - b2) * gj * gj;
        p[j] = p[j] * decay - step * mi[j] / (sqrtf(vi[j] * rbc2) + eps);
    }
    store4(m + so, mi, k), store4(v + so, vi, k), store4(master + so, p, k);
    UNROLL
    for (int j = 0; j < 4; j++)
        if (j < k) params[o + j] = __float2bfloat16(p[j]);
}

// ---------------------------------------------------------------------------------------------------------
// launchers
// ---------------------------------------------------------------------------------------------------------

// One AdamW step over every range, one launch; t is the step count after this step (1 for the first), as in the
// reference. All pointers are to the start of the flat blocks (P elements each); grads fp32; ranges: the device
// copy of adamw_launch_ranges (nranges entries, the sentinel included). stats: the device's {step loss, squared
// gradient norm}: the update is skipped when either is not finite, and clipped to max_norm (<= 0: no clipping);
// or null.
inline void adamw_step(bf16* params, float* master, float* m, float* v, const float* grads,
                       const AdamWLaunchRange* ranges, int nranges, int blocks, long t, double lr, double beta1,
                       double beta2, double eps, double weight_decay, const double* stats, double max_norm,
                       cudaStream_t stream) {
    if (blocks == 0) return;
    // Scalars in double, rounded to fp32 exactly as ref::adamw_step rounds them.
    const double bc1 = 1.0 - std::pow(beta1, (double)t), bc2 = 1.0 - std::pow(beta2, (double)t);
    const float step = (float)(lr / bc1), rbc2 = (float)(1.0 / bc2), decay = (float)(1.0 - lr * weight_decay);
    LAUNCH(blocks, ADAMW_BLOCK, 0, stream, adamw_kernel)
    (params, master, m, v, grads, ranges, nranges, (float)beta1, (float)beta2, (float)eps, step, rbc2, decay, lr,
     weight_decay, bc1, stats, max_norm);
    cudaCheck(cudaGetLastError());
}
