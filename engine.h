// engine.h: the one interface the training loop and the evaluator drive. An Engine owns a model's parameters,
// gradients and AdamW state and runs forward, backward and the update. Two engines implement it: CpuEngine
// (cpu_engine.h, the fp32 reference) and CudaEngine (model.cuh, the bf16 kernels); engines.h's make_engine
// picks one, so train_prism and eval_zeroshot never know which they hold. Parameters cross the interface as
// fp32 in schedule.h's param_layout order (the checkpoint format), so a checkpoint from either engine loads
// into the other.
//
// Data parallelism (several ranks, dist.h): each rank's engine runs forward and backward on its own
// micro-batches; reduce_grads() then sums the gradients over the ranks, and clip_grad_norm / adamw_step work on
// that sum, so every rank ends each step with the same parameters. With ZeRO-1 each rank keeps only its shard
// (shard.h) of the summed gradient, of the fp32 master weights and of the AdamW moments: it updates its shard and
// the ranks all-gather the parameters. Checkpoints see the shard as optimizer_range().
// Does not: include either engine (they include this file; the factory that sees both is engines.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dist.h"
#include "schedule.h"

struct OptimizerHyper {
    double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

// How an engine takes part in data parallelism: the process group (null: one process) and the ZeRO stage
// (0: every rank keeps the whole optimizer state; 1: each keeps a 1/world shard of it).
struct DataParallel {
    const Dist* dist = nullptr;
    int zero = 0;
    int world() const { return dist ? dist->world : 1; }
    int rank() const { return dist ? dist->rank : 0; }
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
    // After the step's last backward: the gradients summed over the ranks (ZeRO-1: this rank's shard of the
    // sum). Every rank calls it; with one rank there is nothing to do.
    virtual void reduce_grads() {}
    // Clips the global gradient norm to max_norm (<= 0: no clipping) and returns the norm before clipping (the
    // norm of the summed gradient, the same on every rank).
    virtual double clip_grad_norm(double max_norm) = 0;
    virtual void adamw_step(double lr, const OptimizerHyper& hp) = 0;
    // The parameters whose AdamW moments this rank holds, as [begin, end) of the interface order: all of
    // [0, P) unless ZeRO-1 shards them. get/set_optimizer move the moments of exactly this range (end - begin
    // each) and the step count, for checkpoints.
    virtual std::pair<size_t, size_t> optimizer_range() const { return {0, num_params()}; }
    virtual void get_optimizer(std::vector<float>& m, std::vector<float>& v, long& t) const = 0;
    virtual void set_optimizer(const std::vector<float>& m, const std::vector<float>& v, long t) = 0;

    // After forward: log p(targets[b, t]) for every position (0 where the target is masked), out (B, T).
    virtual void target_logprobs(const int* targets, float* out) const = 0;
    // After forward: the logits of position (b, t), out (V).
    virtual void logits_at(int b, int t, float* out) const = 0;
    // The device's dense bf16 peak in FLOP/s for MFU (mfu.h); 0 where MFU means nothing (the CPU).
    virtual double peak_flops() const { return 0; }
};
