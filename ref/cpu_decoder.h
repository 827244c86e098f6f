// ref/cpu_decoder.h: CpuDecoder, the KV-cache Decoder (engine.h) on the fp32 CPU reference. A chunk of n new tokens
// at positions p0 .. p0 + n - 1 goes through the model as n rows of one sequence, each layer's sub-blocks being
// ref/reference.h's own (mixer_block_forward, mlp_block_forward: the arithmetic RefModel::forward runs) with this
// layer's cache: the attention mixer rotates at positions p0 + i and attends over the cache (ref/ops.h's
// attention_decode), then the final norm and the head run for the wanted rows. A layer without attention has no
// cache.
// The cache: per attention layer K, V (slots, kv hd) fp32 each (ref/ops.h's KvCache), slots = the capacity, or
// min(capacity, W) in a window layer: a ring. So its bytes are --plan's kv_cache_bytes (bf16 there, fp32 here: twice)
// at capacity T.
// Every op computes a row from that row alone (ref/gemm.h's sums do not depend on the other rows) and attention
// follows attention_forward's loops term for term, so a cached decode gives the logits of a full forward over the
// prefix (test/test_generate.cpp: equal to 1e-5; measured bit-identical).
// Weights: a copy of the engine's fp32 parameters, taken when the decoder is made.
// Does not: batch sequences, or use the CPU engine's buffers (it has its own, sized for the largest chunk).
#pragma once

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine.h"
#include "ref/reference.h"
#include "model_config.h"

class CpuDecoder : public Decoder {
  public:
    // params: the model's fp32 parameters in param_layout order; capacity <= c.T.
    CpuDecoder(const ModelConfig& c, std::vector<float> params, int capacity)
        : cfg_(c), layout_(param_layout(c)), params_(std::move(params)), cap_(capacity) {
        validate_decoder_capacity(c, capacity);
        if (params_.size() != layout_.total) throw std::logic_error("CpuDecoder: parameter count mismatch");
        caches_.resize(c.L());
        for (int l = 0; l < c.L(); l++) {
            const LayerSpec& s = c.layers[l];
            if (s.softmax())
                caches_[l].kv = ref::KvCache<float>(s.window ? std::min(s.window, cap_) : cap_, ref::AttnShape::of(s));
        }
    }
    int capacity() const override { return cap_; }
    int position() const override { return pos_; }
    void reset() override {
        pos_ = 0;
        for (ref::LayerCache<float>& c : caches_) c.gdn = {};  // a gdn layer's state restarts; K/V slots are rewritten
    }
    size_t cache_bytes() const override {
        size_t b = 0;
        for (const ref::LayerCache<float>& c : caches_) {
            b += (c.kv.k.size() + c.kv.v.size() + c.gdn.S_.size() + c.gdn.tail.size()) * sizeof(float);
            for (const ref::GdnChunk<float>& k : c.gdn.chunk) b += k.bytes();
        }
        return b;
    }
    std::string describe() const override { return "CPU reference (fp32 KV cache)"; }
    void append(const int* tokens, int n, float* logits, bool all = false) override;

  private:
    ModelConfig cfg_;
    ParamLayout layout_;
    std::vector<float> params_;
    int cap_, pos_ = 0;
    std::vector<ref::LayerCache<float>> caches_;               // per layer
    ref::LayerActs<float> acts_;                               // one layer's activations (chunk scratch)
    std::vector<float> x_, branch_, att_, lnf_, mean_, rstd_;  // chunk scratch

    const float* P(size_t off) const { return off == SIZE_MAX ? nullptr : params_.data() + off; }
};

inline void CpuDecoder::append(const int* tokens, int n, float* logits, bool all) {
    validate_decode_append(cfg_, cap_, pos_, tokens, n);
    const int L = cfg_.L(), D = cfg_.D(), Df = cfg_.Df(), d = cfg_.d, V = cfg_.V;
    int wmax = 0;
    for (int l = 0; l < L; l++) wmax = std::max(wmax, cfg_.layers[l].width);
    x_.resize((size_t)n * D), branch_.resize((size_t)n * wmax), lnf_.resize((size_t)n * Df), mean_.resize(n),
        rstd_.resize(n);
    const ref::ModelView<float> m{cfg_, layout_, params_.data()};
    const ref::Rows rows{1, n, pos_};
    ref::embedding_forward(x_.data(), tokens, P(layout_.wte), n, d, D);
    for (int l = 0; l < L; l++) {
        if (cfg_.layers[l].attention)
            ref::mixer_block_forward(m, l, x_.data(), rows, acts_, att_, branch_.data(), &caches_[l]);
        if (cfg_.layers[l].mlp) ref::mlp_block_forward(m, l, x_.data(), rows, acts_, branch_.data());
    }
    // Only the rows whose logits are wanted go through the final norm and the head.
    const int first = all ? 0 : n - 1, rows_out = n - first;
    ref::norm_forward(cfg_.norm, lnf_.data(), mean_.data(), rstd_.data(), x_.data() + (size_t)first * D, D,
                      P(layout_.lnf_w), P(layout_.lnf_b), rows_out, Df, cfg_.norm_eps);
    ref::matmul_forward(logits, V, lnf_.data(), Df, P(cfg_.tied ? layout_.wte : layout_.lm_head), rows_out, d, V);
    ref::scale_forward(logits, (long)rows_out * V, cfg_.logit_scale());
    pos_ += n;
}
