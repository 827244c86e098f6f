// engine.h: the one interface the training loop and the evaluator drive. An Engine owns a model's parameters,
// gradients and AdamW state and runs forward, backward and the update. Two engines implement it: CpuEngine
// (ref/cpu_engine.h, the fp32 reference) and CudaEngine (cuda_engine.cuh, the bf16 kernels);
// make_engine (below; engine.cpp) picks one, so train_prism and eval_zeroshot never know which they hold.
// Parameters cross the interface as fp32 in model_config.h's param_layout order (the checkpoint format), so a
// checkpoint from either engine loads into the other.
// The interface queues work: forward, forward_backward, zero_grad, clip_grad_norm and adamw_step return as soon
// as the work is queued (the CPU engine simply does it), so the host prepares the next micro-batch while the
// GPU computes this one. What a step produces, the summed loss and the gradient norm, stays on the device until
// read_stats: the one call of a training step that waits for the GPU (test_model_cuda.cpp counts them).
// A step's calls come in train_step.h's order (zero_grad, forward_backward..., clip_grad_norm, adamw_step,
// read_stats), and target_logprobs and logits_at follow a forward; the CUDA engine refuses any other order with a
// std::logic_error (so that nothing is computed from a half-finished step's state).
//
// Data parallelism (several ranks, dist/process_group.h): each rank's engine runs forward_backward on its own
// micro-batches; the gradients are then summed over the ranks before clip_grad_norm reads them, so clip_grad_norm and
// adamw_step work on that sum and every rank ends each step with the same parameters. The step's last micro-step says
// so (last_micro_step), and the engine may start the reduction during its backward (the CUDA engine does, layer by
// layer, on a second stream); otherwise clip_grad_norm does all of it. With ZeRO-1 each rank keeps only its shard
// (adamw_ranges.h's Shard) of the summed gradient, of the fp32 master weights and of the AdamW moments: it updates its
// shard and the ranks all-gather the parameters. Checkpoints see the shard as optimizer_range().
// Below: what both engines' forward and both decoders accept (validate_forward_inputs, BackwardGate).
// Does not: include either engine (they include this file; engine.cpp sees both).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>
#include <stdexcept>

#include "layer_stats.h"
#include "lr_schedule.h"  // OptimizerHyper
#include "model_config.h"
#include "optimizer_rates.h"  // OptimizerMultipliers
#include "util/errors.h"

class Dist;

// What read_stats returns: the loss summed since the previous read (each forward with targets adds its micro-
// batch's mean loss, each forward_backward grad_scale x that mean: a step's objective), and the global gradient
// norm before clipping of the last clip_grad_norm since the previous read (NaN when there was none).
struct StepStats {
    double loss = 0, grad_norm = 0;
};

// How an engine takes part in data parallelism: the process group (null: one process) and the ZeRO stage
// (0: every rank keeps the whole optimizer state; 1: each keeps a 1/world shard of it).
struct DataParallel {
    Dist* dist = nullptr;  // dist/process_group.h
    int zero = 0;
    DataParallel() = default;
    // A template only so that this header needs no dist/process_group.h: the caller's Dist is complete.
    template <class D>
    DataParallel(D* d, int zero_stage) : dist(d), zero(zero_stage), world_(d ? d->world : 1), rank_(d ? d->rank : 0) {}
    int world() const { return world_; }
    int rank() const { return rank_; }

  private:
    int world_ = 1, rank_ = 0;
};

// Incremental decoding of one sequence with a KV cache (Engine::make_decoder makes one: ref/cpu_decoder.h on
// the CPU reference, inspect/cuda_decoder.cuh on the GPU; inspect/sampling.h drives it). Per layer l with attention
// it keeps the keys and values of its kv_l K/V heads, (capacity, kv_l head_dim_l) each, or of a window's last W_l
// positions (a ring): what --plan counts as KV-cache bytes at T (bf16 on the GPU, fp32 on the CPU). Each new token
// is one row through the layers, its query attending over the cache: the logits equal a full forward over the
// whole prefix.
// It runs on the engine's weights as they are when it is made; make a new one after they change.
// Does not: batch several sequences, or evict (a full cache is the caller's to reset: inspect/sampling.h slides).
class Decoder {
  public:
    virtual ~Decoder() = default;
    virtual int capacity() const = 0;  // positions the cache holds (at most the model's T)
    virtual int position() const = 0;  // positions filled so far
    virtual void reset() = 0;          // empties the cache
    // Runs tokens[0, n) at positions position() .. position() + n - 1 (position() + n <= capacity()), appending
    // their keys and values, and writes the logits of the last one into logits (V), or of all n when all (n, V).
    virtual void append(const int* tokens, int n, float* logits, bool all = false) = 0;
    virtual size_t cache_bytes() const = 0;  // the KV cache's bytes at capacity
    virtual std::string describe() const = 0;
};

class Engine {
  public:
    virtual ~Engine() = default;
    virtual std::string describe() const = 0;  // one line for the log, e.g. "CPU reference, fp32, 2 threads"
    virtual const ModelConfig& config() const = 0;
    virtual size_t num_params() const = 0;

    virtual void init_params(uint64_t seed) = 0;
    // (P) fp32. With ZeRO-1 the CUDA engine's fp32 master weights are sharded, so get_params gathers them: a
    // collective that every rank calls, between steps. set_params takes the whole vector on every rank.
    virtual void get_params(float* out) const = 0;
    virtual void set_params(const float* in) = 0;

    // Queues a forward pass of one micro-batch; inputs, targets (B, T), read before the call returns. targets may
    // be null (inference). With targets, adds the mean cross-entropy over unmasked targets to the loss sum. The
    // logits stay for target_logprobs and logits_at.
    virtual void forward(const int* inputs, const int* targets, int B, int T) = 0;
    // Queues a training micro-step: forward and backward of one micro-batch, grads += d(grad_scale * loss) /
    // d params and the loss sum += grad_scale * loss. Leaves no logits (their memory holds their gradient).
    // last_micro_step: no micro-step follows before clip_grad_norm, so with several ranks the engine may reduce
    // the gradients across them during this backward (a hint; without it clip_grad_norm reduces them).
    virtual void forward_backward(const int* inputs, const int* targets, int B, int T, float grad_scale,
                                  bool last_micro_step = false) = 0;
    virtual void zero_grad() = 0;
    // Queues the global gradient norm (with several ranks: of the gradients summed over the ranks, reducing
    // them first where the last micro-step did not); the next adamw_step scales the gradients by
    // min(1, max_norm / norm) (max_norm <= 0: no clipping). read_stats returns the norm before clipping, the same
    // on every rank.
    virtual void clip_grad_norm(double max_norm) = 0;
    // Queues the AdamW update. A step whose loss (summed since the last read) or gradient norm (of the clip
    // since the last read) is NaN or infinite is skipped by the engine itself, without a wait: no parameter or
    // moment changes and the step does not count (the step count t of the bias correction stays).
    virtual void adamw_step(double lr, const OptimizerHyper& hp) = 0;
    // Each tensor's multipliers of adamw_step's lr and weight decay from now on (optimizer_rates.h; the default:
    // 1 for all). Between steps; make_engine sets EngineOptions::multipliers.
    virtual void set_optimizer_multipliers(const OptimizerMultipliers& m) = 0;
    // Waits for the work queued up to the last clip_grad_norm (or adamw_step without one; or up to now, if neither
    // since the last read) and returns the loss sum since the last read (then zero) and that norm. With several
    // ranks, a training step's loss (read after clip_grad_norm) is summed over the ranks, like the norm, so every
    // rank's non-finite guard decides alike; a forward-only loss (validation) is this rank's. An AdamW update
    // queued after the clip keeps running while the host goes on.
    virtual StepStats read_stats() = 0;
    // Right after read_stats of a training step (before the next zero_grad or forward): its per-layer signals
    // (layer_stats.h), from the gradients, weights, moments and residual states the step left. Waits for the GPU
    // (one read-back of 4 L numbers, no round trip per layer); with several ranks a collective, the same on every rank.
    virtual LayerStats layer_stats() = 0;
    // The parameters whose AdamW moments this rank holds, as [begin, end) of the interface order: all of
    // [0, P) unless ZeRO-1 shards them. get/set_optimizer move the moments of exactly this range (end - begin
    // each) and the step count, for checkpoints.
    virtual std::pair<size_t, size_t> optimizer_range() const { return {0, num_params()}; }
    virtual void get_optimizer(std::vector<float>& m, std::vector<float>& v, long& t) const = 0;
    virtual void set_optimizer(const std::vector<float>& m, const std::vector<float>& v, long t) = 0;

    // After forward (not forward_backward): log p(targets[b, t]) for every position (0 where the target is
    // masked), out (B, T); waits for the GPU.
    virtual void target_logprobs(const int* targets, float* out) const = 0;
    // After forward (not forward_backward): the logits of position (b, t), out (V); waits for the GPU.
    virtual void logits_at(int b, int t, float* out) const = 0;
    // The device's dense bf16 peak in FLOP/s for MFU (cuda_common.cuh); 0 where MFU means nothing (the CPU).
    virtual double peak_flops() const { return 0; }
    // A KV-cache decoder of `capacity` positions (at most the model's T) on the current weights, on this engine's
    // device; the engine must outlive it (ZeRO-1: a collective, like get_params).
    virtual std::unique_ptr<Decoder> make_decoder(int capacity) const = 0;
};

// What an engine is made with (make_engine; cuda_engine.cu's make_gpu_engine).
struct EngineOptions {
    bool force_cpu = false;
    bool recompute = false;  // GPU: recompute norm and SwiGLU outputs in the backward
    int B = 0, T = 0;        // a training run's micro-batch, for the memory check (0: no check, e.g. evaluation)
    DataParallel dp;         // this rank of a data-parallel run (default: one process)
    OptimizerMultipliers multipliers;  // each tensor's lr and weight-decay multipliers (default: 1 for all)
};

#ifdef PRISM_CUDA
// Defined in cuda_engine.cu. Whether make_engine would pick the CUDA engine (a GPU, no --cpu).
bool gpu_engine_available(bool force_cpu);
// The CUDA engine on this rank's GPU, when a GPU is present and o.force_cpu is not set; null otherwise, with `why`
// saying why (for the log). Throws ConfigError when the GPUs cannot hold the run (the local rank has no GPU, B x T
// does not fit even with recomputation).
std::unique_ptr<Engine> make_gpu_engine(const ModelConfig& c, const EngineOptions& o, std::string& why);
#else
inline bool gpu_engine_available(bool) { return false; }
#endif

// The engine for this machine (engine.cpp): the CUDA engine when the build has it and a GPU is present (and
// force_cpu is not set), the CPU reference otherwise; `why` says which and why, for the log. On the GPU it also
// decides recomputation: asked for (o.recompute), or chosen when B x T fits only with it (memory_plan.h).
std::unique_ptr<Engine> make_engine(const ModelConfig& c, const EngineOptions& o, std::string& why);
std::unique_ptr<Engine> make_engine(const ModelConfig& c, bool force_cpu, std::string& why);

// What both engines' forward and both KV-cache decoders accept, and what a backward asks of
// the forward, written once so that the CPU reference and the CUDA engine fail alike, with the same message,
// before any op runs:
//   validate_forward_inputs  B, T within the config, every token id in [0, V) (a bad batch is a ConfigError)
//   validate_decoder_capacity, validate_decode_append   a decoder's capacity in [1, T]; an append within it and
//                            its tokens in [0, V) (ref/cpu_decoder.h, inspect/cuda_decoder.cuh)
//   BackwardGate             a backward needs exactly one preceding forward with targets (a logic_error); the
//                            reference's separate backward needs it, the engines' forward_backward is one call
// Does not: check the config itself (validate_config, model_config.h, does that when a model is built).

// Throws ConfigError unless 1 <= B, 1 <= T <= c.T, every input id lies in [0, V) and every target id below V
// (a negative target is masked, not an error). inputs, targets (B, T); targets may be null (inference).
inline void validate_forward_inputs(const ModelConfig& c, const int* inputs, const int* targets, int B, int T) {
    if (B < 1 || T < 1 || T > c.T)
        throw ConfigError("forward: need B >= 1 and 1 <= T <= cfg.T = " + std::to_string(c.T) +
                          ", got B=" + std::to_string(B) + " T=" + std::to_string(T));
    const long N = (long)B * T;
    for (long n = 0; n < N; n++)
        if (inputs[n] < 0 || inputs[n] >= c.V || (targets && targets[n] >= c.V))
            throw ConfigError("forward: token id out of range [0, V=" + std::to_string(c.V) + ") at position " +
                              std::to_string(n) + "; check the tokenizer / vocabulary size");
}

// The CUDA engine trains a gdn layer whose head_dim the chunked delta rule's kernels take (gdn_chunk.cuh: 16 to
// 256, a multiple of 8); another is a ConfigError naming the layer (1-based; the CPU engine, --cpu, runs any).
inline void check_gdn_on_cuda(const ModelConfig& c) {
    for (int l = 0; l < c.L(); l++) {
        const int hd = c.layers[l].head_dim();
        if (c.layers[l].gdn() && (hd < 16 || hd > 256 || hd % 8 != 0))
            throw ConfigError("layer " + std::to_string(l + 1) + " is gdn with head_dim " + std::to_string(hd) +
                              ", but the CUDA engine's GDN kernels need head_dim 16 to 256, a multiple of 8: change "
                              "its width or heads, or train on the CPU (--cpu)");
    }
}

// A KV-cache decoder holds 1 .. T positions.
inline void validate_decoder_capacity(const ModelConfig& c, int capacity) {
    if (capacity < 1 || capacity > c.T)
        throw ConfigError("decoder capacity " + std::to_string(capacity) +
                          " must lie in [1, T = " + std::to_string(c.T) + "]");
}
// Appending tokens[0, n) at position pos of a cache of `capacity`: the caller's mistake (a logic_error) when it
// overflows the cache, the input's (a ConfigError) when a token is outside the vocabulary.
inline void validate_decode_append(const ModelConfig& c, int capacity, int pos, const int* tokens, int n) {
    if (n < 1 || pos + n > capacity)
        throw std::logic_error("decoder append: " + std::to_string(n) + " tokens at position " + std::to_string(pos) +
                               " exceed the capacity " + std::to_string(capacity));
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c.V)
            throw ConfigError("token " + std::to_string(tokens[i]) + " is outside the vocabulary (" +
                              std::to_string(c.V) + ")");
}

// Opened by a forward with targets, closed by the backward that uses it: the saved activations belong to one
// forward, and a second backward would add its gradients twice. A forward without targets (inference) keeps
// no loss to differentiate, so it leaves the gate shut.
class BackwardGate {
  public:
    void forward_ran(bool with_targets) { open_ = with_targets; }
    void backward_starts() {
        if (!open_) throw std::logic_error("backward() needs exactly one preceding forward() with targets");
        open_ = false;
    }

  private:
    bool open_ = false;
};
