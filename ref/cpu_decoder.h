// ref/cpu_decoder.h: CpuDecoder, the KV-cache Decoder (engine.h) on the fp32 CPU reference. A chunk of n new tokens
// at positions p0 .. p0 + n - 1 goes through the model as n rows, exactly as ref/reference.h's forward does for
// those rows of a full sequence (the same ref:: ops, so the same arithmetic), except attention:
//   per layer l (w = w_l, h = h_l, hd = w / h, kv = kv_l, window W = W_l or none):
//     qkv (n, w + 2 kv hd) = norm1(x[:, :w]) Wqkv^T; RoPE at positions p0 + i (rope_at, below; not in a NoPE layer)
//     atty_i = sum_{j visible} softmax_j(scale q_i . k_j) v_j    per query head, over its K/V head (GQA: kv heads)
//       (j visible: attention_span.h's att_visible(p0 + i, j, W))
//   then wo, the residual add, the MLP sub-block and the final norm and head as in ref/reference.h. Layers without
//   attention or MLP skip that sub-block (and a layer without attention has no cache).
// The cache: per layer K, V (slots, kv hd) fp32 each, slots = the capacity, or min(capacity, W) in a window layer:
// a ring, position j in slot j mod slots, since no query past j + W - 1 reads key j. So its bytes are --plan's
// kv_cache_bytes (bf16 there, fp32 here: twice) at capacity T. Until a layer's ring wraps (p0 + n <= slots) slot j
// is position j and attention reads the cache itself; after, the keys a chunk sees, [first_key(p0), p0 + n), are
// copied into one run (the ring's, then the chunk's own rows: a chunk longer than the ring reads its early keys
// before their slots are overwritten), and the chunk's last min(n, slots) keys are stored afterwards.
// The query's scores, softmax and weighted sum follow ref::attention_forward's loops term for term, and every
// matmul row is computed alone (ref/gemm.h's sums do not depend on the other rows), so a cached decode gives
// the logits of a full forward over the prefix (test/test_generate.cpp: equal to 1e-5; measured bit-identical).
// Weights: a copy of the engine's fp32 parameters, taken when the decoder is made.
// Does not: batch sequences, or use the CPU engine's buffers (it has its own, sized for the largest chunk).
#pragma once

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine.h"
#include "ref/gemm.h"
#include "ref/ops.h"
#include "model_config.h"

namespace ref {

// RoPE on the q and k of rows (n, ld) at positions p0 + i: ref::rope_rotate's rotation (angles in double,
// rounded to S), with the position of row i p0 + i instead of i mod T.
template <typename S> void rope_at(S* qkv, long n, const AttnShape& a, double theta, long p0) {
    const int hd = a.hd, w = a.w();
    std::vector<double> freq(hd / 2);
    for (int i = 0; i < hd / 2; i++) freq[i] = std::pow(theta, -2.0 * i / hd);
    for (long r = 0; r < n; r++) {
        const long t = p0 + r;
        S* row = qkv + r * a.ld();
        for (int i = 0; i < hd / 2; i++) {
            const S c = (S)std::cos(t * freq[i]), s = (S)std::sin(t * freq[i]);
            for (int hh = 0; hh < a.h + a.kv; hh++) {  // the query heads, then the K heads
                S* p = row + (hh < a.h ? hh * hd : w + (hh - a.h) * hd) + 2 * i;
                const S x = p[0], y = p[1];
                p[0] = x * c - y * s;
                p[1] = x * s + y * c;
            }
        }
    }
}

// out (n, w): row i, query head hh = softmax over the keys j visible at position p0 + i (first_key(p0 + i) <= j <=
// p0 + i) of scale q_i . k_j, times v_j, K/V head a.kv_of(hh); q rows of stride ld; K, V (keys, kv hd) holding
// positions origin .. p0 + n - 1 (origin <= first_key(p0)): ref::attention_row (as attention_forward runs it), keys
// read from the cache, their loop shifted by origin (the same terms in the same order).
template <typename S>
void attention_over_cache(S* out, const S* qkv, const S* K, const S* V, long n, long p0, const AttnShape& a, S scale,
                          long origin = 0) {
    const int hd = a.hd, h = a.h, w = a.w(), kw = a.kw();
#pragma omp parallel if (n * h * (p0 + n - origin) * hd >= OMP_MIN_WORK)
    {
        std::vector<S> p_buf(p0 + n - origin);
#pragma omp for collapse(2)
        for (long i = 0; i < n; i++)
            for (int hh = 0; hh < h; hh++)
                attention_row(out + i * w + hh * hd, p_buf.data(), qkv + i * a.ld() + hh * hd, K + a.kv_of(hh) * hd,
                              V + a.kv_of(hh) * hd, (long)kw, p0 + i - origin, hd, scale, a.first_key(p0 + i) - origin);
    }
}

}  // namespace ref

class CpuDecoder : public Decoder {
  public:
    // params: the model's fp32 parameters in param_layout order; capacity <= c.T.
    CpuDecoder(const ModelConfig& c, std::vector<float> params, int capacity)
        : cfg_(c), layout_(param_layout(c)), params_(std::move(params)), cap_(capacity) {
        validate_decoder_capacity(c, capacity);
        if (params_.size() != layout_.total) throw std::logic_error("CpuDecoder: parameter count mismatch");
        for (const LayerSpec& s : c.layers) {
            const int slots = !s.attention ? 0 : s.window ? std::min(s.window, cap_) : cap_;
            slots_.push_back(slots);
            k_.emplace_back((size_t)slots * (s.attention ? s.kv_width() : 0), 0.0f);
            v_.emplace_back(k_.back().size(), 0.0f);
        }
    }
    int capacity() const override { return cap_; }
    int position() const override { return pos_; }
    void reset() override { pos_ = 0; }
    size_t cache_bytes() const override {
        size_t b = 0;
        for (const std::vector<float>& k : k_) b += 2 * k.size() * sizeof(float);
        return b;
    }
    std::string describe() const override { return "CPU reference (fp32 KV cache)"; }
    void append(const int* tokens, int n, float* logits, bool all = false) override;

  private:
    ModelConfig cfg_;
    ParamLayout layout_;
    std::vector<float> params_;
    int cap_, pos_ = 0;
    std::vector<int> slots_;                 // per layer: positions its cache holds (0 without attention)
    std::vector<std::vector<float>> k_, v_;  // per layer (slots, kv_l head_dim) each, position j in slot j mod slots
    std::vector<float> x_, ln_, qkv_, atty_, branch_, fc_, sw_, lnf_, mean_, rstd_;  // chunk scratch
    std::vector<float> krun_, vrun_;  // a wrapped ring's visible keys and values as one run (chunk scratch)

    const float* P(size_t off) const { return off == SIZE_MAX ? nullptr : params_.data() + off; }
};

inline void CpuDecoder::append(const int* tokens, int n, float* logits, bool all) {
    validate_decode_append(cfg_, cap_, pos_, tokens, n);
    const int L = cfg_.L(), D = cfg_.D(), Df = cfg_.Df(), d = cfg_.d, V = cfg_.V;
    int wmax = 0, hidmax = 0, qkvmax = 0;
    for (int l = 0; l < L; l++) {
        const LayerSpec& s = cfg_.layers[l];
        wmax = std::max(wmax, s.width), hidmax = std::max(hidmax, cfg_.hidden_of(l));
        if (s.attention) qkvmax = std::max(qkvmax, s.qkv_rows());
    }
    x_.resize((size_t)n * D), ln_.resize((size_t)n * wmax), qkv_.resize((size_t)n * qkvmax);
    atty_.resize((size_t)n * wmax), branch_.resize((size_t)n * wmax), fc_.resize((size_t)n * 2 * hidmax);
    sw_.resize((size_t)n * hidmax), lnf_.resize((size_t)n * Df), mean_.resize(n), rstd_.resize(n);
    ref::embedding_forward(x_.data(), tokens, P(layout_.wte), n, d, D);
    for (int l = 0; l < L; l++) {
        const LayerSpec& s = cfg_.layers[l];
        const int w = s.width, hid = cfg_.hidden_of(l);
        const ref::AttnShape as = ref::AttnShape::of(s);
        const LayerOffsets& o = layout_.layer[l];
        if (s.attention) {
            const double hd = s.head_dim();
            const float scale = (float)(cfg_.mup_attn ? 1.0 / hd : 1.0 / std::sqrt(hd));
            const int ld = (int)as.ld(), kw = as.kw(), slots = slots_[l];
            ref::norm_forward(cfg_.norm, ln_.data(), mean_.data(), rstd_.data(), x_.data(), D, P(o.ln1_w), P(o.ln1_b),
                              n, w, cfg_.norm_eps);
            ref::matmul_forward(qkv_.data(), ld, ln_.data(), w, P(o.wqkv), n, w, ld);
            if (s.rope) ref::rope_at(qkv_.data(), n, as, cfg_.rope_theta, pos_);
            // The chunk's rows i >= n - slots into slot (p0 + i) mod slots (earlier ones would be overwritten).
            auto store = [&] {
                for (int i = std::max(0, n - slots); i < n; i++) {
                    const size_t slot = (size_t)((pos_ + i) % slots);
                    std::copy_n(qkv_.data() + (size_t)i * ld + w, kw, k_[l].data() + slot * kw);
                    std::copy_n(qkv_.data() + (size_t)i * ld + w + kw, kw, v_[l].data() + slot * kw);
                }
            };
            if (pos_ + n <= slots) {  // not wrapped: slot j holds position j, the cache is the run itself
                store();
                ref::attention_over_cache(atty_.data(), qkv_.data(), k_[l].data(), v_[l].data(), n, pos_, as, scale);
            } else {  // a window's ring has wrapped: keys [origin, p0) from it, then the chunk's own
                const long origin = as.first_key(pos_), keys = pos_ + n - origin;
                krun_.resize((size_t)keys * kw), vrun_.resize((size_t)keys * kw);
                for (long j = origin; j < pos_ + n; j++) {
                    const float* k =
                        j < pos_ ? k_[l].data() + (size_t)(j % slots) * kw : qkv_.data() + (size_t)(j - pos_) * ld + w;
                    const float* v = j < pos_ ? v_[l].data() + (size_t)(j % slots) * kw : k + kw;
                    std::copy_n(k, kw, krun_.data() + (size_t)(j - origin) * kw);
                    std::copy_n(v, kw, vrun_.data() + (size_t)(j - origin) * kw);
                }
                ref::attention_over_cache(atty_.data(), qkv_.data(), krun_.data(), vrun_.data(), n, pos_, as, scale,
                                          origin);
                store();
            }
            ref::matmul_forward(branch_.data(), w, atty_.data(), w, P(o.wo), n, w, w);
            ref::residual_forward(x_.data(), D, branch_.data(), n, w);
        }
        if (s.mlp) {
            ref::norm_forward(cfg_.norm, ln_.data(), mean_.data(), rstd_.data(), x_.data(), D, P(o.ln2_w), P(o.ln2_b),
                              n, w, cfg_.norm_eps);
            ref::matmul_forward(fc_.data(), 2 * hid, ln_.data(), w, P(o.wfc), n, w, 2 * hid);
            ref::swiglu_forward(sw_.data(), fc_.data(), n, hid);
            ref::matmul_forward(branch_.data(), w, sw_.data(), hid, P(o.wproj), n, hid, w);
            ref::residual_forward(x_.data(), D, branch_.data(), n, w);
        }
    }
    // Only the rows whose logits are wanted go through the final norm and the head.
    const int first = all ? 0 : n - 1, rows = n - first;
    ref::norm_forward(cfg_.norm, lnf_.data(), mean_.data(), rstd_.data(), x_.data() + (size_t)first * D, D,
                      P(layout_.lnf_w), P(layout_.lnf_b), rows, Df, cfg_.norm_eps);
    ref::matmul_forward(logits, V, lnf_.data(), Df, P(cfg_.tied ? layout_.wte : layout_.lm_head), rows, d, V);
    ref::scale_forward(logits, (long)rows * V, cfg_.logit_scale());
    pos_ += n;
}
