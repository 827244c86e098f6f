// cpu_engine.h: CpuEngine, the Engine (engine.h) on the fp32 CPU reference (reference.h): OpenMP over every
// core, the same bits for any thread count. It is the CPU training path and, through the same interface, the
// oracle the CUDA engine's tests compare whole training steps against.
// Does not: pad the vocabulary or round anything to bf16 (the CUDA engine does both, behind the interface).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine.h"
#include "reference.h"

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

    void forward(const int* inputs, const int* targets, int B, int T) override {
        B_ = B, T_ = T;
        const float loss = model_.forward(inputs, targets, B, T);
        if (targets) loss_sum_ += loss;
        logits_valid_ = true;
    }
    void forward_backward(const int* inputs, const int* targets, int B, int T, float grad_scale) override {
        B_ = B, T_ = T;
        loss_sum_ += (double)grad_scale * model_.forward(inputs, targets, B, T);
        model_.backward(grad_scale);
        logits_valid_ = false;  // the CUDA engine's are gone too: fail alike
    }
    void zero_grad() override { model_.zero_grad(); }
    void clip_grad_norm(double max_norm) override {
        norm_ = ref::clip_grad_norm(model_.grads.data(), model_.grads.size(), max_norm);
        clipped_ = true;
    }
    StepStats read_stats() override {
        StepStats s{loss_sum_, norm_};
        loss_sum_ = 0, norm_ = NAN, clipped_ = false;
        return s;
    }
    // As the CUDA engine: a step whose loss or (clipped) gradient norm is NaN or infinite changes nothing.
    void adamw_step(double lr, const OptimizerHyper& hp) override {
        if (!std::isfinite(loss_sum_) || (clipped_ && !std::isfinite(norm_))) return;
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
        require_logits();
        for (int b = 0; b < B_; b++)
            for (int t = 0; t < T_; t++) {
                int tg = targets[(size_t)b * T_ + t];
                out[(size_t)b * T_ + t] = tg < 0 ? 0.0f : model_.logprob(b, t, tg);
            }
    }
    void logits_at(int b, int t, float* out) const override {
        require_logits();
        const float* l = model_.logits() + ((size_t)b * T_ + t) * model_.cfg.V;
        std::copy(l, l + model_.cfg.V, out);
    }

  private:
    ref::RefModel<float> model_;
    ref::AdamWState<float> opt_;
    int B_ = 0, T_ = 0;
    double loss_sum_ = 0, norm_ = NAN;
    bool clipped_ = false;  // clip_grad_norm ran since the last read_stats
    bool logits_valid_ = false;
    void require_logits() const {
        if (!logits_valid_) throw std::logic_error("target_logprobs / logits_at need a forward() (not forward_backward)");
    }
};
