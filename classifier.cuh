// classifier.cuh: softmax cross-entropy over the (padded) vocabulary, and the loss summed on the device.
//   fused (training):  logits (N, Vp) -> losses (N) = lse - logit[target] (0 where target < 0), and the logits
//                      overwritten in place by dlogits = dloss * (softmax - onehot(target)) for unmasked rows, 0
//                      for masked rows and for the padded columns [V, Vp)
//   forward (inference, validation): lse (N) log-sum-exp and losses (N); the logits stay intact
//   logprobs: out (N) = logit[target] - lse (0 where target < 0), for evaluation after a forward
//   loss_sum: acc (1) double += scale * sum of losses (N): the micro-batch's mean loss, kept on the device
// Columns [V, Vp) (the GPU pads V = 50257 to a multiple of 128 so the head matmul is aligned) are never read:
// whatever the padded weight rows produce does not enter the softmax, and their gradient is written as 0.
// One block per row, of 1024 threads (fewer for a vocabulary under 8K: one per 8 columns). Never materialises
// fp32 probabilities: the row is read once with 128-bit loads (an online max and rescaled sum per thread,
// folded into lse), and the fused kernel then recomputes exp(logit - lse) per element while overwriting it: the
// second read of a 100 KB row comes from L2 (the 264 rows in flight on an H100 hold 26 MB of its 50 MB), so the
// logits cross HBM once each way. Why fused: the logits are the largest tensor of the step (N x Vp = 1.6 GB of
// bf16 at B 16, T 1024), and a separate backward pass would read them from HBM a second time. The dloss of each
// row is known before the forward (grad_scale / unmasked targets of the micro-batch), so the training micro-step
// needs no separate backward here; inference (eval, logits_at) takes the forward launcher, which leaves the
// logits intact.
// The exp sum of a row is fp32 (per-thread sums of ~V / 1024 terms, then a fixed tree): relative error ~1e-6
// against the reference's double sum, far below bf16's 4e-3 on the logits themselves.
// Does not: label smoothing, or z-loss.
#pragma once

#include "cuda_common.cuh"
#include "vec.cuh"

constexpr int CLASSIFIER_BLOCK = 1024;  // the most threads per row; fewer when the row has fewer 8-column chunks
inline int classifier_block(int V) {
    const int warps = ((V + 7) / 8 + 31) / 32;
    return warps >= CLASSIFIER_BLOCK / 32 ? CLASSIFIER_BLOCK : 32 * warps;
}
constexpr int LOSS_SUM_BLOCK = 1024;  // a power of two (the tree below)

// ---------------------------------------------------------------------------------------------------------
// kernels
// ---------------------------------------------------------------------------------------------------------

// Matches ref::softmax_crossentropy_forward (lse, losses; no probabilities) and, when fused, then
// ref::softmax_crossentropy_backward with probs = exp(logits - lse). One block per row.
static __global__ void softmax_crossentropy_kernel(float* losses, float* lse, bf16* logits, const int* targets, int V,
                                                   int Vp, bool fused, float dloss) {
    SHARED(float[32], scratch);
    const long n = blockIdx.x;
    bf16* l = logits + n * Vp;
    const int tg = targets ? targets[n] : -1;
    float v[8];
    if (fused && tg < 0) {  // a masked row: no loss, zero gradient; nothing to read
        for (int c = 8 * threadIdx.x; c < Vp; c += 8 * blockDim.x) {
            UNROLL
            for (int i = 0; i < 8; i++) v[i] = 0.0f;
            store8(l + c, v, in_row(Vp, c, 8));
        }
        if (threadIdx.x == 0) losses[n] = 0.0f;
        return;  // the whole block leaves: tg is uniform
    }
    // The target's logit, read before any thread can overwrite it (writes start after the reductions' barriers).
    const float target_logit = threadIdx.x == 0 && tg >= 0 ? __bfloat162float(l[tg]) : 0.0f;
    // One pass over the row: each thread keeps a running max and a sum rescaled whenever the max grows, then
    // the block agrees on the max and rescales every thread's sum to it.
    float m = -INFINITY, s = 0.0f;
    for (int c = 8 * threadIdx.x; c < V; c += 8 * blockDim.x) {
        const int k = in_row(V, c, 8);
        load8(v, l + c, k);
        float mc = m;
        UNROLL
        for (int i = 0; i < 8; i++)
            if (i < k) mc = fmaxf(mc, v[i]);
        s *= expf(m - mc);  // on the first chunk m = -inf and exp(-inf) = 0
        UNROLL
        for (int i = 0; i < 8; i++)
            if (i < k) s += expf(v[i] - mc);
        m = mc;
    }
    const float mx = block_max(m, scratch);
    s = block_sum(m == -INFINITY ? 0.0f : s * expf(m - mx), scratch);  // threads with no columns (V < 8 block)
    const float z = mx + logf(s);
    if (threadIdx.x == 0) {
        if (lse) lse[n] = z;
        losses[n] = tg >= 0 ? z - target_logit : 0.0f;
    }
    if (!fused) return;
    for (int c = 8 * threadIdx.x; c < Vp; c += 8 * blockDim.x) {
        const int k = in_row(V, c, 8);
        load8(v, l + c, k);
        UNROLL
        for (int i = 0; i < 8; i++) v[i] = i < k ? (expf(v[i] - z) - (c + i == tg ? 1.0f : 0.0f)) * dloss : 0.0f;
        store8(l + c, v, in_row(Vp, c, 8));
    }
}

// log p(target) per row, as RefModel::logprob: one thread per row gathers its target's logit.
static __global__ void target_logprobs_kernel(float* out, const bf16* logits, const float* lse, const int* targets,
                                              long N, int Vp) {
    const long n = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    const int tg = targets[n];
    out[n] = tg >= 0 ? __bfloat162float(logits[n * Vp + tg]) - lse[n] : 0.0f;
}

// acc += scale * sum of losses, as ref::mean_loss sums: in double, in a fixed order (thread i sums i, i + 1024,
// ..., then a fixed tree over the threads). One block: N is one micro-batch (16K rows, 16 loads per thread).
static __global__ void loss_sum_kernel(double* acc, const float* losses, long N, double scale) {
    SHARED(double[LOSS_SUM_BLOCK], part);
    double s = 0.0;
    for (long i = threadIdx.x; i < N; i += blockDim.x) s += (double)losses[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int stride = LOSS_SUM_BLOCK / 2; stride > 0; stride /= 2) {
        if ((int)threadIdx.x < stride) part[threadIdx.x] += part[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) *acc += scale * part[0];
}

// ---------------------------------------------------------------------------------------------------------
// launchers
// ---------------------------------------------------------------------------------------------------------

// losses, lse (N) fp32; logits (N, Vp) read in [0, V), left intact; targets (N) on the device, or null (losses 0).
inline void softmax_crossentropy_forward(float* losses, float* lse, const bf16* logits, const int* targets, long N,
                                         int V, int Vp, cudaStream_t stream) {
    LAUNCH((unsigned)N, classifier_block(V), 0, stream, softmax_crossentropy_kernel)
    (losses, lse, const_cast<bf16*>(logits), targets, V, Vp, false, 0.0f);  // not fused: never writes logits
    cudaCheck(cudaGetLastError());
}

// The training pass: losses (N) fp32, logits (N, Vp) -> dlogits in place; dloss = d(objective) / d(each unmasked
// loss), e.g. grad_scale / count. targets (N) on the device.
inline void softmax_crossentropy_fused(float* losses, bf16* logits, const int* targets, long N, int V, int Vp,
                                       float dloss, cudaStream_t stream) {
    LAUNCH((unsigned)N, classifier_block(V), 0, stream, softmax_crossentropy_kernel)
    (losses, nullptr, logits, targets, V, Vp, true, dloss);
    cudaCheck(cudaGetLastError());
}

// out (N) = log p(targets[n]) from the forward's logits and lse (0 where the target is masked).
inline void target_logprobs(float* out, const bf16* logits, const float* lse, const int* targets, long N, int Vp,
                            cudaStream_t stream) {
    const int block = 256;
    LAUNCH((unsigned)((N + block - 1) / block), block, 0, stream, target_logprobs_kernel)
    (out, logits, lse, targets, N, Vp);
    cudaCheck(cudaGetLastError());
}

// acc (1) double on the device += scale * sum of losses (N); scale = weight / unmasked targets gives a mean.
inline void loss_sum(double* acc, const float* losses, long N, double scale, cudaStream_t stream) {
    LAUNCH(1, LOSS_SUM_BLOCK, 0, stream, loss_sum_kernel)(acc, losses, N, scale);
    cudaCheck(cudaGetLastError());
}
