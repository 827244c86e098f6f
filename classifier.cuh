// classifier.cuh: softmax cross-entropy over the (padded) vocabulary, its gradient written over the logits.
//   forward:  logits (N, Vp) bf16 -> lse (N) log-sum-exp, losses (N) = lse - logit[target] (0 where target < 0)
//   backward: logits (N, Vp) overwritten in place by dlogits = dloss * (softmax - onehot(target)) for unmasked
//             rows, 0 for masked rows and for the padded columns [V, Vp)
//   logprobs: out (N) = logit[target] - lse (0 where target < 0), for evaluation after a forward
// Columns [V, Vp) (the GPU pads V = 50257 to a multiple of 128 so the head matmul is aligned) are never read:
// whatever the padded weight rows produce does not enter the softmax, and their gradient is written as 0.
// Never materialises fp32 probabilities: the forward reads a row once (online max and rescaled sum) and keeps
// two floats per row (max folded into lse); the backward recomputes exp(logit - lse) per element while
// overwriting that element. Forward and backward are separate launches because the Engine's backward (with its
// grad_scale) comes after the forward, and inference (eval, logits_at) needs the logits intact after a forward.
// The exp sum of a row is fp32 (per-thread sums of ~V / 256 terms, then a fixed tree): relative error ~1e-6
// against the reference's double sum, far below bf16's 4e-3 on the logits themselves.
// Does not: compute the mean loss (the engine sums the N losses on the host in double, like ref::mean_loss),
// label smoothing, or z-loss.
#pragma once

#include "cuda_common.cuh"
#include "reduce.cuh"

constexpr int CLASSIFIER_BLOCK = 256;

// ---------------------------------------------------------------------------------------------------------
// kernels
// ---------------------------------------------------------------------------------------------------------

// Matches ref::softmax_crossentropy_forward (lse, losses; no probabilities). One block per row.
static __global__ void softmax_crossentropy_forward_kernel(float* losses, float* lse, const bf16* logits,
                                                           const int* targets, int V, int Vp) {
    SHARED(float[32], scratch);
    const long n = blockIdx.x;
    const bf16* l = logits + n * Vp;
    // One pass over the row: each thread keeps a running max and a sum rescaled whenever the max grows, then
    // the block agrees on the max and rescales every thread's sum to it.
    float m = -INFINITY, s = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        const float x = __bfloat162float(l[v]);
        if (x > m) {  // on the first element m = -inf and exp(-inf) = 0
            s *= expf(m - x);
            m = x;
        }
        s += expf(x - m);
    }
    const float mx = block_max(m, scratch);
    s = block_sum(m == -INFINITY ? 0.0f : s * expf(m - mx), scratch);  // threads with no columns (V < block)
    if (threadIdx.x == 0) {
        const float z = mx + logf(s);
        lse[n] = z;
        const int tg = targets ? targets[n] : -1;
        losses[n] = tg >= 0 ? z - __bfloat162float(l[tg]) : 0.0f;
    }
}

// Matches ref::softmax_crossentropy_backward with probs = exp(logits - lse). One thread per element of (N, Vp).
static __global__ void softmax_crossentropy_backward_kernel(bf16* logits, const float* lse, const int* targets,
                                                            long N, int V, int Vp, float dloss) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * Vp) return;
    const long n = i / Vp;
    const int v = (int)(i % Vp), tg = targets[n];
    float g = 0.0f;
    if (tg >= 0 && v < V) g = (expf(__bfloat162float(logits[i]) - lse[n]) - (v == tg ? 1.0f : 0.0f)) * dloss;
    logits[i] = __float2bfloat16(g);
}

// log p(target) per row, as RefModel::logprob: one thread per row gathers its target's logit.
static __global__ void target_logprobs_kernel(float* out, const bf16* logits, const float* lse, const int* targets,
                                              long N, int Vp) {
    const long n = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    const int tg = targets[n];
    out[n] = tg >= 0 ? __bfloat162float(logits[n * Vp + tg]) - lse[n] : 0.0f;
}

// ---------------------------------------------------------------------------------------------------------
// launchers
// ---------------------------------------------------------------------------------------------------------

// losses, lse (N) fp32; logits (N, Vp) read in [0, V); targets (N) on the device, or null (losses all 0).
inline void softmax_crossentropy_forward(float* losses, float* lse, const bf16* logits, const int* targets, long N,
                                         int V, int Vp, cudaStream_t stream) {
    LAUNCH((unsigned)N, CLASSIFIER_BLOCK, 0, stream, softmax_crossentropy_forward_kernel)(losses, lse, logits, targets,
                                                                                          V, Vp);
    cudaCheck(cudaGetLastError());
}

// logits (N, Vp) -> dlogits in place; dloss = d(objective) / d(each unmasked loss), e.g. grad_scale / count.
inline void softmax_crossentropy_backward(bf16* logits, const float* lse, const int* targets, long N, int V, int Vp,
                                          float dloss, cudaStream_t stream) {
    const int block = 256;
    LAUNCH((unsigned)((N * Vp + block - 1) / block), block, 0, stream, softmax_crossentropy_backward_kernel)(
        logits, lse, targets, N, V, Vp, dloss);
    cudaCheck(cudaGetLastError());
}

// out (N) = log p(targets[n]) from the forward's logits and lse (0 where the target is masked).
inline void target_logprobs(float* out, const bf16* logits, const float* lse, const int* targets, long N, int Vp,
                            cudaStream_t stream) {
    const int block = 256;
    LAUNCH((unsigned)((N + block - 1) / block), block, 0, stream, target_logprobs_kernel)(out, logits, lse, targets, N,
                                                                                          Vp);
    cudaCheck(cudaGetLastError());
}
