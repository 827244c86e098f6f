// adamw.cuh: the AdamW update of the whole parameter block, with fp32 master weights.
//   master, m, v (P) fp32; grads (P) bf16; params (P) bf16 = the rounded copy of master the kernels read
// Per element (PyTorch's AdamW, as ref::adamw_step): g = grad * grad_scale (gradient clipping folded in);
// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; p = p * decay - step * m / (sqrt(v / bc2) + eps), with
// step = lr / bc1, bc = 1 - beta^t, decay = 1 - lr wd for matrices and 1 for norm weights and biases.
// Why master weights: an update of lr * 1 ~ 1e-4 on a weight of 0.02 is below half a bf16 ulp (2^-9 relative),
// so a bf16-only parameter would never move.
// The parameter block is updated as a list of ranges, each with its decay flag (matrices and embeddings decay,
// norm weights and biases do not); the model builds them from its layout (adamw_ranges in model.cuh), merging
// consecutive tensors of the same kind, so one launch updates each range (about 4 per layer).
// Does not: shard the state (ZeRO-1 comes with multi-GPU), or use atomics (pure elementwise, deterministic).
#pragma once

#include <cmath>
#include <vector>

#include "cuda_common.cuh"

struct AdamWRange {
    size_t offset, n;  // elements of the flat parameter block
    bool decay;        // matrices (and embeddings) decay, norms do not
};

// ---------------------------------------------------------------------------------------------------------
// kernels
// ---------------------------------------------------------------------------------------------------------

// Matches ref::adamw_step on one element (after ref::clip_grad_norm's scaling, here grad_scale).
static __global__ void adamw_kernel(bf16* params, float* master, float* m, float* v, const bf16* grads, size_t n,
                                    float b1, float b2, float eps, float step, float rbc2, float decay,
                                    float grad_scale) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float g = __bfloat162float(grads[i]) * grad_scale;
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    const float p = master[i] * decay - step * mi / (sqrtf(vi * rbc2) + eps);
    m[i] = mi;
    v[i] = vi;
    master[i] = p;
    params[i] = __float2bfloat16(p);
}

// ---------------------------------------------------------------------------------------------------------
// launchers
// ---------------------------------------------------------------------------------------------------------

// One AdamW step over every range; t is the step count after this step (1 for the first), as in the reference.
// All pointers are to the start of the flat blocks (P elements each).
inline void adamw_step(bf16* params, float* master, float* m, float* v, const bf16* grads,
                       const std::vector<AdamWRange>& ranges, long t, double lr, double beta1, double beta2,
                       double eps, double weight_decay, float grad_scale, cudaStream_t stream) {
    // Scalars in double, rounded to fp32 exactly as ref::adamw_step rounds them.
    const double bc1 = 1.0 - std::pow(beta1, (double)t), bc2 = 1.0 - std::pow(beta2, (double)t);
    const float step = (float)(lr / bc1), rbc2 = (float)(1.0 / bc2);
    const int block = 256;
    for (const AdamWRange& r : ranges) {
        if (r.n == 0) continue;
        const float decay = (float)(r.decay ? 1.0 - lr * weight_decay : 1.0);
        const size_t o = r.offset;
        LAUNCH((unsigned)((r.n + block - 1) / block), block, 0, stream, adamw_kernel)(
            params + o, master + o, m + o, v + o, grads + o, r.n, (float)beta1, (float)beta2, (float)eps, step, rbc2,
            decay, grad_scale);
        cudaCheck(cudaGetLastError());
    }
}
