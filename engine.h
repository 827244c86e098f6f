// engine.h: the one interface the training loop and the evaluator drive. An Engine owns a model's parameters,
// gradients and AdamW state and runs forward, backward and the update. CpuEngine wraps the fp32 reference
// (reference.h); the CUDA engine implements the same interface, so train_prism and eval_zeroshot never know
// which one they hold. Parameters cross the interface as fp32 in schedule.h's param_layout order (the
// checkpoint format), so a checkpoint from either engine loads into the other.
#pragma once

#include <omp.h>

#include <memory>
#include <string>
#include <vector>

#include "reference.h"
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

class CpuEngine : public Engine {
  public:
    explicit CpuEngine(const ModelConfig& c) : model_(c), opt_(model_.layout.total) {}

    std::string describe() const override {
        return "CPU reference (fp32, " + std::to_string(omp_get_max_threads()) + " OpenMP threads)";
    }
    const ModelConfig& config() const override { return model_.cfg; }
    size_t num_params() const override { return model_.layout.total; }
    void init_params(uint64_t seed) override { model_.init_params(seed); }
    void get_params(float* out) const override { std::copy(model_.params.begin(), model_.params.end(), out); }
    void set_params(const float* in) override { std::copy(in, in + num_params(), model_.params.begin()); }

    float forward(const int* inputs, const int* targets, int B, int T) override {
        B_ = B, T_ = T;
        return model_.forward(inputs, targets, B, T);
    }
    void backward(float grad_scale) override { model_.backward(grad_scale); }
    void zero_grad() override { model_.zero_grad(); }
    double clip_grad_norm(double max_norm) override {
        return ref::clip_grad_norm(model_.grads.data(), model_.grads.size(), max_norm);
    }
    void adamw_step(double lr, const OptimizerHyper& hp) override {
        ref::AdamWParams p;
        p.beta1 = hp.beta1, p.beta2 = hp.beta2, p.eps = hp.eps, p.weight_decay = hp.weight_decay;
        ref::adamw_step(model_.params.data(), model_.grads.data(), opt_, model_.layout, lr, p);
    }
    void get_optimizer(std::vector<float>& m, std::vector<float>& v, long& t) const override {
        m = opt_.m, v = opt_.v, t = opt_.t;
    }
    void set_optimizer(const std::vector<float>& m, const std::vector<float>& v, long t) override {
        opt_.m = m, opt_.v = v, opt_.t = t;
    }
    void target_logprobs(const int* targets, float* out) const override {
        for (int b = 0; b < B_; b++)
            for (int t = 0; t < T_; t++) {
                int tg = targets[(size_t)b * T_ + t];
                out[(size_t)b * T_ + t] = tg < 0 ? 0.0f : model_.logprob(b, t, tg);
            }
    }
    void logits_at(int b, int t, float* out) const override {
        const float* l = model_.logits() + ((size_t)b * T_ + t) * model_.cfg.V;
        std::copy(l, l + model_.cfg.V, out);
    }

  private:
    ref::RefModel<float> model_;
    ref::AdamWState<float> opt_;
    int B_ = 0, T_ = 0;
};

// The CUDA engine (model.cuh) joins when the file is compiled by nvcc with PRISM_CUDA defined (the Makefile
// does this whenever nvcc exists). model.cuh includes this header for the Engine class above; #pragma once
// makes that inner include a no-op, so the include sits here, after Engine is complete.
#if defined(PRISM_CUDA) && defined(__CUDACC__)
#include "model.cuh"
#endif

// The engine for this machine: the CUDA engine when it is built in and a GPU is present (and --cpu is not
// given), the CPU reference otherwise. `why` says which and why, for the log.
inline std::unique_ptr<Engine> make_engine(const ModelConfig& c, bool force_cpu, std::string& why) {
#if defined(PRISM_CUDA) && defined(__CUDACC__)
    int n = 0;
    cudaError_t err = force_cpu ? cudaSuccess : cudaGetDeviceCount(&n);
    if (!force_cpu && err == cudaSuccess && n > 0) {
        cudaDeviceProp p;
        cudaCheck(cudaGetDeviceProperties(&p, 0));
        why = std::string("GPU 0: ") + p.name;
        return std::unique_ptr<Engine>(new CudaEngine(c));
    }
    why = force_cpu ? "CPU forced by --cpu"
                    : std::string("no usable GPU (") + (err == cudaSuccess ? "none found" : cudaGetErrorString(err)) +
                          "): running on the CPU";
    cudaGetLastError();  // clear the failed query so later CUDA calls do not report it
#else
    why = force_cpu ? "CPU forced by --cpu" : "no CUDA engine in this build: running on the CPU";
#endif
    return std::unique_ptr<Engine>(new CpuEngine(c));
}
