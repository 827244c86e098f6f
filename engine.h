// engine.h: the one interface the training loop and the evaluator drive. An Engine owns a model's parameters,
// gradients and AdamW state and runs forward, backward and the update. Two engines implement it: CpuEngine
// (cpu_engine.h, the fp32 reference) and CudaEngine (model.cuh, the bf16 kernels); engines.h's make_engine
// picks one, so train_prism and eval_zeroshot never know which they hold. Parameters cross the interface as
// fp32 in schedule.h's param_layout order (the checkpoint format), so a checkpoint from either engine loads
// into the other.
// Does not: include either engine (they include this file; the factory that sees both is engines.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "schedule.h"

struct OptimizerHyper {
    double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

class Engine {
  public:
    virtual ~Engine() = default;
    virtual std::string describe() const = 0;  // one line for the log, e.g. "CPU reference, fp32, 2 threads"
    virtual const ModelConfig& config() const = 0;
    virtual size_t num_params() const = 0;

    virtual void init_params(uint64_t seed) = 0;
    virtual void get_params(float* out) const = 0;  // (P) fp32
    virtual void set_params(const float* in) = 0;

    // Mean cross-entropy over unmasked targets of one micro-batch; inputs, targets (B, T). targets may be null
    // (inference: logits only).
    virtual float forward(const int* inputs, const int* targets, int B, int T) = 0;
    // grads += d(grad_scale * loss) / d params, for the preceding forward.
    virtual void backward(float grad_scale) = 0;
    virtual void zero_grad() = 0;
    // Clips the global gradient norm to max_norm (<= 0: no clipping) and returns the norm before clipping.
    virtual double clip_grad_norm(double max_norm) = 0;
    virtual void adamw_step(double lr, const OptimizerHyper& hp) = 0;
    // AdamW moments (P each) and its step count, for checkpoints.
    virtual void get_optimizer(std::vector<float>& m, std::vector<float>& v, long& t) const = 0;
    virtual void set_optimizer(const std::vector<float>& m, const std::vector<float>& v, long t) = 0;

    // After forward: log p(targets[b, t]) for every position (0 where the target is masked), out (B, T).
    virtual void target_logprobs(const int* targets, float* out) const = 0;
    // After forward: the logits of position (b, t), out (V).
    virtual void logits_at(int b, int t, float* out) const = 0;
    // The device's dense bf16 peak in FLOP/s for MFU (mfu.h); 0 where MFU means nothing (the CPU).
    virtual double peak_flops() const { return 0; }
};
