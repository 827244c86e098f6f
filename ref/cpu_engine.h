// ref/cpu_engine.h: CpuEngine, the Engine (engine.h) on the fp32 CPU reference (ref/reference.h): OpenMP over every
// core, the same bits for any thread count. It is the CPU training path and, through the same interface, the
// oracle the CUDA engine's tests compare whole training steps against.
//
// Data parallel over MPI (several ranks, dist/process_group.h), with the same shards as the CUDA engine's (contiguous,
// adamw_ranges.h) but a plainer reduction (the CUDA engine reduces layer by layer during the backward):
//   clip_grad_norm  first the gradients (P), padded to world x S (adamw_ranges.h), reduce-scattered: this rank's shard
//                   of the sum (S); ZeRO-0 all-gathers the summed shards back into the whole gradient. Then each
//                   rank's sum of squares of its shard, all-gathered and added in rank order: the same norm on
//                   every rank, and the same for ZeRO-0 and ZeRO-1. The step's loss is summed over the ranks too
//                   (read_stats returns the sum), so the non-finite guard skips a step on every rank or none
//   adamw_step      ZeRO-1: AdamW on this rank's shard only (its moments are S long), then the parameters are
//                   all-gathered; ZeRO-0: AdamW on every parameter, on every rank
// Both stages sum each gradient element in the same reduce-scatter, so ZeRO-0 and ZeRO-1 give identical bits.
// Does not: pad the vocabulary or round anything to bf16 (the CUDA engine does both, behind the interface), or
// overlap the reduction with the backward (the CPU has no second stream to put it on).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine.h"
#include "ref/cpu_decoder.h"
#include "ref/reference.h"
#include "dist/process_group.h"
#include "adamw_ranges.h"

class CpuEngine : public Engine {
  public:
    explicit CpuEngine(const ModelConfig& c, const DataParallel& dp = DataParallel())
        : model_(c), dp_(dp), shard_(shard_of(model_.layout.total, dp.world(), dp.rank())),
          opt_(sharded() ? shard_.size : model_.layout.total), rates_(tensor_rates(model_.layout, {})) {
        if (dp_.world() > 1) padded_.resize(shard_.size * dp_.world()), shard_grads_.resize(shard_.size);
    }

    std::unique_ptr<Decoder> make_decoder(int capacity) const override {
        std::vector<float> params(num_params());
        get_params(params.data());
        return std::unique_ptr<Decoder>(new CpuDecoder(config(), std::move(params), capacity));
    }
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
    void forward_backward(const int* inputs, const int* targets, int B, int T, float grad_scale,
                          bool last_micro_step = false) override {
        B_ = B, T_ = T;
        loss_sum_ += (double)grad_scale * model_.forward(inputs, targets, B, T);
        model_.backward(grad_scale);
        logits_valid_ = false;  // the CUDA engine's are gone too: fail alike
    }
    void zero_grad() override { model_.zero_grad(), clip_ = 1.0f; }
    // With several ranks the gradients are reduced here (the CPU has no second stream to overlap them on).
    void clip_grad_norm(double max_norm) override {
        clipped_ = true;
        if (dp_.world() == 1) {
            norm_ = ref::clip_grad_norm(model_.grads.data(), model_.grads.size(), max_norm);
            clip_ = ref::clip_scale<float>(norm_, max_norm);
            return;
        }
        reduce_grads();
        // The step's loss summed over the ranks, so that every rank's guard in adamw_step decides alike.
        loss_sum_ = dp_.dist->sum(loss_sum_, "the sum of the training losses");
        std::vector<double> part(dp_.world());
        dp_.dist->all_gather(ref::grad_sum_squares(shard_grads_.data(), shard_.size), part.data(),
                             "the all-gather of the gradient norm");
        double sq = 0;
        for (double p : part) sq += p;  // rank order: the same bits on every rank
        norm_ = std::sqrt(sq);
        const float scale = clip_ = ref::clip_scale<float>(norm_, max_norm);
        if (scale != 1.0f) {
            std::vector<float>& g = sharded() ? shard_grads_ : model_.grads;
            for (float& x : g) x *= scale;
        }
    }
    StepStats read_stats() override {
        StepStats s{loss_sum_, norm_};
        loss_sum_ = 0, norm_ = NAN, clipped_ = false;
        return s;
    }
    // As the CUDA engine: a step whose loss or (clipped) gradient norm is NaN or infinite changes nothing.
    void adamw_step(double lr, const OptimizerHyper& hp) override {
        updated_ = false;
        if (!std::isfinite(loss_sum_) || (clipped_ && !std::isfinite(norm_))) return;
        updated_ = true, lr_ = lr, hp_ = hp;
        if (!sharded())
            return ref::adamw_step(model_.params.data(), model_.grads.data(), opt_, model_.layout, lr, hp, rates_);
        // ZeRO-1: this rank's shard of the parameters, then every rank's shard to every rank.
        std::vector<float>& w = model_.params;
        opt_.t++;
        ref::adamw_update(w.data() + shard_.begin, shard_grads_.data(), opt_.m.data(), opt_.v.data(), opt_.t,
                          model_.layout, rates_, shard_.begin, shard_.end, lr, hp);
        std::vector<float> mine(shard_.size, 0.0f);
        std::copy(w.begin() + shard_.begin, w.begin() + shard_.end, mine.begin());
        dp_.dist->all_gather(mine.data(), padded_.data(), shard_.size, "the all-gather of the parameters");
        std::copy(padded_.begin(), padded_.begin() + w.size(), w.begin());
    }
    // This rank's part of the flat vector (all of it with one rank), then the sums added over the ranks. The
    // gradients were scaled in place by the clip: divided back, to report the norm before clipping.
    LayerStats layer_stats() override {
        const ModelConfig& c = config();
        const ParamLayout& lay = model_.layout;
        const bool dp = dp_.world() > 1;
        const size_t from = dp ? shard_.begin : 0, to = dp ? shard_.end : num_params();
        const float* g = sharded() ? shard_grads_.data() - from : model_.grads.data();  // indexed by i in [from, to)
        const float *m = opt_.m.data() - (sharded() ? from : 0), *v = opt_.v.data() - (sharded() ? from : 0);
        const double unclip = 1.0 / clip_;
        LayerSums s(c.L());
        for (size_t k = 0; k < lay.tensors.size(); k++) {
            const ParamTensor& x = lay.tensors[k];
            const size_t a = std::max(from, x.offset), b = std::min(to, x.offset + x.numel());
            if (x.layer < 0 || a >= b) continue;
            std::vector<double>& grad_sq = s.grad_sq(layer_block(lay, x));
            // at the tensor's rate, as adamw_step updated it
            const AdamWDelta ad = updated_ ? AdamWDelta::of(lr_, hp_, opt_.t, rates_[k]) : AdamWDelta();
            for (size_t i = a; i < b; i++) {
                const double gi = g[i] * unclip;
                grad_sq[x.layer] += gi * gi;
                if (!x.is_matrix) continue;
                const double d = ad.delta(model_.params[i], m[i], v[i]), before = model_.params[i] - d;
                s.weight_sq[x.layer] += before * before, s.delta_sq[x.layer] += d * d;
            }
        }
        const long rows = (long)B_ * T_;
        for (int l = 0; l < c.L(); l++) {
            const float* x = model_.residual_state(2 * l + 2);
            for (long n = 0; n < rows; n++)
                for (int j = 0; j < c.layers[l].width; j++) s.out_sq[l] += (double)x[n * c.D() + j] * x[n * c.D() + j];
        }
        if (dp)
            for (int k = 0; k < LayerSums::kCount; k++)
                dp_.dist->sum(s.all(k)->data(), c.L(), "the sum of the per-layer statistics");
        return finish_layer_stats(s, c, rows, dp_.world());
    }
    void set_optimizer_multipliers(const OptimizerMultipliers& m) override { rates_ = tensor_rates(model_.layout, m); }
    std::pair<size_t, size_t> optimizer_range() const override {
        return sharded() ? std::make_pair(shard_.begin, shard_.end) : std::make_pair((size_t)0, num_params());
    }
    void get_optimizer(std::vector<float>& m, std::vector<float>& v, long& t) const override {
        const size_t n = optimizer_range().second - optimizer_range().first;  // ZeRO-1: without the padding
        m.assign(opt_.m.begin(), opt_.m.begin() + n), v.assign(opt_.v.begin(), opt_.v.begin() + n), t = opt_.t;
    }
    void set_optimizer(const std::vector<float>& m, const std::vector<float>& v, long t) override {
        const size_t n = optimizer_range().second - optimizer_range().first;
        if (m.size() != n || v.size() != n)
            throw std::runtime_error("set_optimizer: " + std::to_string(m.size()) + " moments for a range of " +
                                     std::to_string(n) + " parameters");
        std::copy(m.begin(), m.end(), opt_.m.begin()), std::copy(v.begin(), v.end(), opt_.v.begin()), opt_.t = t;
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
    DataParallel dp_;
    Shard shard_;                     // this rank's part of the flat vector (the whole of it with one rank)
    ref::AdamWState<float> opt_;      // (P), or (S) with ZeRO-1
    std::vector<TensorRate> rates_;   // one per tensor of the layout (optimizer_rates.h)
    std::vector<float> padded_;       // (world S) scratch: the padded gradient or parameter vector
    std::vector<float> shard_grads_;  // (S) this rank's shard of the summed gradient
    int B_ = 0, T_ = 0;
    double loss_sum_ = 0, norm_ = NAN;
    bool clipped_ = false;  // clip_grad_norm ran since the last read_stats
    // For layer_stats: the last clip's scale, and the last AdamW update's learning rate and hyperparameters.
    float clip_ = 1.0f;
    bool updated_ = false;
    double lr_ = 0;
    OptimizerHyper hp_;
    bool logits_valid_ = false;

    bool sharded() const { return dp_.zero >= 1 && dp_.world() > 1; }
    void require_logits() const {
        if (!logits_valid_)
            throw std::logic_error("target_logprobs / logits_at need a forward() (not forward_backward)");
    }
    // The gradients (P), padded to world x S (adamw_ranges.h), reduce-scattered: this rank's shard of the sum (S);
    // ZeRO-0 all-gathers the summed shards back into the whole gradient.
    void reduce_grads() {
        std::vector<float>& g = model_.grads;
        std::copy(g.begin(), g.end(), padded_.begin());  // the padding stays zero
        dp_.dist->reduce_scatter_sum(padded_.data(), shard_grads_.data(), shard_.size,
                                     "the reduce-scatter of the gradients");
        if (!sharded()) {
            dp_.dist->all_gather(shard_grads_.data(), padded_.data(), shard_.size, "the all-gather of the gradients");
            std::copy(padded_.begin(), padded_.begin() + g.size(), g.begin());
        }
    }
};
