// ref/reference.h: the fp32 CPU reference of the whole Prism model (uniform, Prism head schedules and Xformer
// width schedules are one code path). It is the oracle every GPU kernel and test is checked against, and the
// CPU training path (ref/cpu_engine.h wraps it in the Engine interface). Templated on the scalar type S: float for
// training, double for the finite-difference gradient checks in test/test_reference.cpp.
//
// What it computes (ModelConfig and the flat parameter layout come from model_config.h):
//   x = embed(tokens)                       residual stream (B, T, D): coords [0, d) = wte[token], [d, D) = 0
//   for each layer l (w = w_l, h = h_l, hd = w / h, kv = kv_l, hid = hidden_l):
//     x[:, :w] += wo   . attn(rope(wqkv . norm1(x[:, :w])))       causal (or windowed), h query heads of head_dim
//                                                                  hd over kv K/V heads (ref/ops.h's AttnShape)
//     x[:, :w] += wproj. swiglu(wfc . norm2(x[:, :w]))              coords [w, D) bypass the layer
//   (a layer without attention or without an MLP skips that line: the stream passes unchanged; a NoPE layer's
//   attention skips rope; a gdn layer's mixer is ref/gdn.h's Gated DeltaNet instead of rope + attn, docs/model.md)
//   logits = s . normf(x[:, :Df])[:, :d] . Wout^T  (Wout = wte tied, lm_head untied; s = cfg.logit_scale(),
//   muP's base_d / d, 1 without muP), loss = mean CE over
//   positions whose target >= 0 (target < 0 is masked).
// RefModel keeps the residual state before every sub-block (2 L + 1 copies of x) and every op's saved
// activations, and its backward mirrors the forward op for op.
// A layer's arithmetic is written once, below RefModel's members' use of it: the two sub-blocks (mixer_block_forward:
// norm1, the mixer, wo, the residual add; mlp_block_forward) run on rows at positions p0 .. (Rows), in place on the
// stream, with an optional per-layer decode cache (LayerCache). RefModel::forward runs them on B x T rows from
// position 0 without a cache, keeping the activations; CpuDecoder (ref/cpu_decoder.h) on a chunk of one sequence with
// its caches. The mixer (attention: qkv, RoPE, attention; or a gdn layer's ref/gdn.h, from the normed input to the
// output before wo) is chosen in one place, mixer_forward, and undone in mixer_backward.
//
// The parts, each its own header, all in namespace ref:
//   ref/gemm.h       the matrix multiply (y = x W^T and its backward)
//   ref/ops.h        every other op, forward and backward, and the assign / accumulate conventions they share
//   ref/init.h       the RNG and GPT-2 init (the CUDA engine starts from it too)
//   ref/optimizer.h  gradient norm and clipping, AdamW, the learning-rate schedule
// Determinism: the same bits for any number of OpenMP threads (every op sums in a fixed order; the GEMM over
// tokens in fixed blocks of GEMM_KC = 256); global norms and the mean loss accumulate in double.
//
// Sizes: B batch, T sequence, d embedding width, w = w_l layer width, h = h_l heads, hd = head_dim = w / h,
// hid = hidden_l (SwiGLU intermediate), D = cfg.D() residual stream width, Df = cfg.Df() final-norm width,
// V vocabulary, L layers, N = B * T rows. Matrices are row-major (out, in) and y = x W^T.
// Not here: bf16, padded vocabulary (the GPU pads V to Vp; the reference never does), sampling.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "engine.h"
#include "ref/gdn.h"
#include "ref/gemm.h"
#include "ref/init.h"
#include "ref/ops.h"
#include "ref/optimizer.h"
#include "model/layer_columns.h"

namespace ref {

// The weights (and, training, the gradients) as a layer reads them: params and grads (layout.total each) in
// param_layout order; grads is null when decoding.
template <typename S> struct ModelView {
    const ModelConfig& cfg;
    const ParamLayout& layout;
    const S* params;
    S* grads = nullptr;
    const S* P(size_t off) const { return off == SIZE_MAX ? nullptr : params + off; }
    S* G(size_t off) const { return off == SIZE_MAX ? nullptr : grads + off; }
    S attn_scale(int l) const {
        const double hd = cfg.layers[l].head_dim();
        return (S)(cfg.mup_attn ? 1.0 / hd : 1.0 / std::sqrt(hd));
    }
};

// The rows a sub-block runs on: B sequences of T rows (N = B T), row t of a sequence at position p0 + t. A training
// forward: p0 = 0; a decoder: one sequence, its chunk of T new rows after p0 cached positions.
struct Rows {
    long B, T, p0;
    long N() const { return B * T; }
};

// What a layer's ops keep for the backward (RefModel: one per layer), or a decoder's scratch (one for every layer).
template <typename S> struct LayerActs {
    std::vector<S> ln1, mean1, rstd1;  // (N, w) (N) (N)
    std::vector<S> qkv;                // (N, w + 2 kv hd) after RoPE
    std::vector<S> att;                // (B, h, T, T)
    std::vector<S> atty;               // (N, w) the mixer's output before wo
    std::vector<S> ln2, mean2, rstd2;  // (N, w) (N) (N)
    std::vector<S> fc;                 // (N, 2 hid) [gate | up]
    std::vector<S> sw;                 // (N, hid)
    GdnActs<S> gdn;                    // a gdn mixer's (ref/gdn.h)
};

// A layer's decode state for one sequence, by its mixer: attention's K/V cache (ref/ops.h's KvCache), or a gdn
// mixer's recurrent state and conv tail (ref/gdn.h's GdnState; empty: a fresh sequence).
template <typename S> struct LayerCache {
    KvCache<S> kv;
    GdnState<S> gdn;
};

// A gdn layer's weights (and gradients, when training) as ref/gdn.h reads them.
template <typename S> GdnWeights<S> gdn_weights(const ModelView<S>& m, int l) {
    const LayerOffsets& o = m.layout.layer[l];
    return {m.P(o.wqkv), m.P(o.conv_w), m.P(o.wz), m.P(o.wba), m.P(o.a_log), m.P(o.dt_bias), m.P(o.onorm_w)};
}
template <typename S> GdnGrads<S> gdn_grads(const ModelView<S>& m, int l) {
    const LayerOffsets& o = m.layout.layer[l];
    return {m.G(o.wqkv), m.G(o.conv_w), m.G(o.wz), m.G(o.wba), m.G(o.a_log), m.G(o.dt_bias), m.G(o.onorm_w)};
}
inline GdnShape gdn_shape(const LayerSpec& s) { return {s.heads, s.head_dim()}; }

// The mixer: a.atty (N, w) from a.ln1 (N, w). Without a cache, over whole sequences from position 0 (att (B, h, T, T)
// gets the attention probabilities); with one, the chunk's rows over the cache, which they join. The one place a
// layer's mixer is chosen (today every mixer is attention).
template <typename S>
void mixer_forward(const ModelView<S>& m, int l, const Rows& r, LayerActs<S>& a, std::vector<S>& att,
                   LayerCache<S>* cache) {
    const LayerSpec& spec = m.cfg.layers[l];
    const long N = r.N();
    if (spec.gdn()) {  // ref/gdn.h: everything from the normed input to the output before wo
        a.atty.resize(N * spec.width);
        if (!cache) {
            gdn_forward(a.atty.data(), a.gdn, a.ln1.data(), gdn_weights(m, l), (int)r.B, (int)r.T, gdn_shape(spec),
                        m.cfg.norm_eps);
        } else {
            if (r.B != 1) throw std::logic_error("mixer_forward: a decode cache holds one sequence");
            gdn_decode(a.atty.data(), cache->gdn, a.ln1.data(), gdn_weights(m, l), (int)r.T, gdn_shape(spec),
                       m.cfg.norm_eps);
        }
        return;
    }
    const AttnShape as = AttnShape::of(spec);
    const int w = spec.width, ld = (int)as.ld();
    a.qkv.resize(N * ld), a.atty.resize(N * w);
    matmul_forward(a.qkv.data(), ld, a.ln1.data(), w, m.P(m.layout.layer[l].wqkv), N, w, ld);
    if (spec.rope) rope_forward(a.qkv.data(), r.B, r.T, as, m.cfg.rope_theta, r.p0);
    if (cache) {
        if (r.B != 1) throw std::logic_error("mixer_forward: a decode cache holds one sequence");
        attention_decode(a.atty.data(), a.qkv.data(), cache->kv, r.T, r.p0, as, m.attn_scale(l));
    } else {
        att.resize((size_t)r.B * as.h * r.T * r.T);
        attention_forward(a.atty.data(), att.data(), a.qkv.data(), r.B, r.T, as, m.attn_scale(l));
    }
}

// mixer_forward's backward: dsmall (N, w) holds datty on entry and dln1 on return; dbig (N, ld) scratch.
template <typename S>
void mixer_backward(const ModelView<S>& m, int l, const Rows& r, const LayerActs<S>& a, S* dsmall, S* dbig) {
    const LayerSpec& spec = m.cfg.layers[l];
    const int w = spec.width;
    if (spec.gdn()) {  // dbig (N, w) takes dln1, then dsmall
        gdn_backward(dbig, gdn_grads(m, l), dsmall, a.ln1.data(), a.gdn, gdn_weights(m, l), (int)r.B, (int)r.T,
                     gdn_shape(spec), m.cfg.norm_eps);
        std::copy_n(dbig, r.N() * w, dsmall);
        return;
    }
    const AttnShape as = AttnShape::of(spec);
    const LayerOffsets& o = m.layout.layer[l];
    const int ld = (int)as.ld();
    S* dqkv = dbig;
    attention_backward(dqkv, dsmall, a.qkv.data(), a.att.data(), r.B, r.T, as, m.attn_scale(l));
    if (spec.rope) rope_backward(dqkv, r.B, r.T, as, m.cfg.rope_theta);
    matmul_backward(dsmall, w, m.G(o.wqkv), dqkv, ld, a.ln1.data(), w, m.P(o.wqkv), r.N(), w, ld);  // datty is dead
}

// The mixer sub-block of layer l, in place on the stream x (N, D): x[:, :w] += mixer(norm1(x[:, :w])) Wo^T.
// branch (N, w) scratch.
template <typename S>
void mixer_block_forward(const ModelView<S>& m, int l, S* x, const Rows& r, LayerActs<S>& a, std::vector<S>& att,
                         S* branch, LayerCache<S>* cache) {
    const LayerOffsets& o = m.layout.layer[l];
    const long N = r.N();
    const int w = m.cfg.layers[l].width, D = m.cfg.D();
    a.ln1.resize(N * w), a.mean1.resize(N), a.rstd1.resize(N);
    norm_forward(m.cfg.norm, a.ln1.data(), a.mean1.data(), a.rstd1.data(), x, D, m.P(o.ln1_w), m.P(o.ln1_b), N, w,
                 m.cfg.norm_eps);
    mixer_forward(m, l, r, a, att, cache);
    matmul_forward(branch, w, a.atty.data(), w, m.P(o.wo), N, w, w);
    residual_forward(x, D, branch, N, w);
}

// The MLP sub-block of layer l, in place on x (N, D): x[:, :w] += swiglu(norm2(x[:, :w]) Wfc^T) Wproj^T.
template <typename S>
void mlp_block_forward(const ModelView<S>& m, int l, S* x, const Rows& r, LayerActs<S>& a, S* branch) {
    const LayerOffsets& o = m.layout.layer[l];
    const long N = r.N();
    const int w = m.cfg.layers[l].width, hid = m.cfg.hidden_of(l), D = m.cfg.D();
    a.ln2.resize(N * w), a.mean2.resize(N), a.rstd2.resize(N), a.fc.resize(N * 2 * hid), a.sw.resize(N * hid);
    norm_forward(m.cfg.norm, a.ln2.data(), a.mean2.data(), a.rstd2.data(), x, D, m.P(o.ln2_w), m.P(o.ln2_b), N, w,
                 m.cfg.norm_eps);
    matmul_forward(a.fc.data(), 2 * hid, a.ln2.data(), w, m.P(o.wfc), N, w, 2 * hid);
    swiglu_forward(a.sw.data(), a.fc.data(), N, hid);
    matmul_forward(branch, w, a.sw.data(), hid, m.P(o.wproj), N, hid, w);
    residual_forward(x, D, branch, N, w);
}

// The sub-blocks' backwards, mirrored: ds (N, D) the stream's gradient (accumulated), x the stream before the
// sub-block (its norm's input); dbranch (N, w), dbig (N, max(ld, 2 hid)), dsmall (N, max(w, hid)) scratch.
template <typename S>
void mixer_block_backward(const ModelView<S>& m, int l, S* ds, const S* x, const Rows& r, const LayerActs<S>& a,
                          S* dbranch, S* dbig, S* dsmall) {
    const LayerOffsets& o = m.layout.layer[l];
    const long N = r.N();
    const int w = m.cfg.layers[l].width, D = m.cfg.D();
    residual_backward(dbranch, ds, D, N, w);
    S* datty = dsmall;  // (N, w)
    matmul_backward(datty, w, m.G(o.wo), dbranch, w, a.atty.data(), w, m.P(o.wo), N, w, w);
    mixer_backward(m, l, r, a, dsmall, dbig);
    norm_backward(m.cfg.norm, ds, D, m.G(o.ln1_w), m.G(o.ln1_b), dsmall, x, D, a.mean1.data(), a.rstd1.data(),
                  m.P(o.ln1_w), N, w);
}
template <typename S>
void mlp_block_backward(const ModelView<S>& m, int l, S* ds, const S* x, const Rows& r, const LayerActs<S>& a,
                        S* dbranch, S* dbig, S* dsmall) {
    const LayerOffsets& o = m.layout.layer[l];
    const long N = r.N();
    const int w = m.cfg.layers[l].width, hid = m.cfg.hidden_of(l), D = m.cfg.D();
    residual_backward(dbranch, ds, D, N, w);
    S* dsw = dsmall;  // (N, hid)
    matmul_backward(dsw, hid, m.G(o.wproj), dbranch, w, a.sw.data(), hid, m.P(o.wproj), N, hid, w);
    S* dfc = dbig;  // (N, 2 hid)
    swiglu_backward(dfc, dsw, a.fc.data(), N, hid);
    S* dln = dsmall;  // (N, w); dsw is dead
    matmul_backward(dln, w, m.G(o.wfc), dfc, 2 * hid, a.ln2.data(), w, m.P(o.wfc), N, w, 2 * hid);
    norm_backward(m.cfg.norm, ds, D, m.G(o.ln2_w), m.G(o.ln2_b), dln, x, D, a.mean2.data(), a.rstd2.data(),
                  m.P(o.ln2_w), N, w);
}

template <typename S> struct RefModel {
    ModelConfig cfg;
    ParamLayout layout;
    std::vector<S> params, grads;  // (layout.total) each, in param_layout order

    explicit RefModel(const ModelConfig& c) : cfg(c), layout(param_layout(c)) {
        validate_config(c);  // positive sizes, h_l | w_l, even head_dim: fail here, not deep inside an op
        params.assign(layout.total, S(0));
        grads.assign(layout.total, S(0));
    }
    void init_params(uint64_t seed) { ref::init_params(params.data(), cfg, layout, seed); }
    void zero_grad() { std::fill(grads.begin(), grads.end(), S(0)); }

    // Mean cross-entropy over unmasked targets (0 if none, or if targets is null: inference only).
    // inputs, targets (B, T), T <= cfg.T.
    S forward(const int* inputs, const int* targets, int B, int T);
    // grads += d(grad_scale * loss)/d params. Needs the preceding forward to have had targets; once per forward.
    void backward(S grad_scale = S(1));

    // After forward: logits (B, T, V), per-position losses (B, T) (0 where masked), log-sum-exp (B, T).
    const S* logits() const { return logits_.data(); }
    const S* losses() const { return losses_.data(); }
    const S* lse() const { return lse_.data(); }
    S loss() const { return loss_; }
    // log p(token | inputs[b, :t+1]) from the last forward.
    S logprob(int b, int t, int token) const {
        return logits_[((size_t)b * T_ + t) * cfg.V + token] - lse_[(size_t)b * T_ + t];
    }
    // Sum of log p(targets[b, t]) over positions t in [t0, t1), targets (B, T) aligned like training targets.
    double sum_logprob(int b, int t0, int t1, const int* targets) const {
        double s = 0;
        for (int t = t0; t < t1; t++) s += logprob(b, t, targets[(size_t)b * T_ + t]);
        return s;
    }
    // Attention probabilities of layer l (B, h_l, T, T), after a forward with targets.
    const S* attention(int l) const { return acts_[l].att.data(); }
    // After a forward, for inspect/analysis.h: residual state k (B, T, D) (2 l before layer l's attention, 2 l + 1 before
    // its MLP, 2 L after the last layer) and layer l's SwiGLU output silu(gate) * up (B, T, hidden_l).
    const S* residual_state(int k) const { return resid_.data() + (size_t)k * B_ * T_ * cfg.D(); }
    const S* swiglu_out(int l) const { return acts_[l].sw.data(); }

  private:
    int B_ = 0, T_ = 0;
    BackwardGate gate_;  // backward() once per forward() with targets
    long n_targets_ = 0;
    S loss_ = 0;
    std::vector<int> inputs_, targets_;  // (N)
    std::vector<S> resid_;               // (2 L + 1, N, D): the residual state before each sub-block, and at the end
    std::vector<LayerActs<S>> acts_;
    std::vector<S> branch_;                            // (N, w_max) branch output before the residual add
    std::vector<S> lnf_, meanf_, rstdf_;               // (N, Df) (N) (N)
    std::vector<S> logits_, probs_;                    // (N, V) each; probs_ becomes dlogits in backward
    std::vector<S> losses_, lse_;                      // (N)
    std::vector<S> dresid_, dbranch_, dbig_, dsmall_;  // (N, D) (N, w_max) (N, max(qkv, 2 hid, Df)) (N, max(w, hid))

    S* P(size_t off) { return off == SIZE_MAX ? nullptr : params.data() + off; }
    S* G(size_t off) { return off == SIZE_MAX ? nullptr : grads.data() + off; }
    ModelView<S> view() { return {cfg, layout, params.data(), grads.data()}; }
    // Residual state k (N, D): 2 l before layer l's attention, 2 l + 1 before its MLP, 2 L after the last layer.
    S* resid(int k) { return resid_.data() + (size_t)k * B_ * T_ * cfg.D(); }
    size_t Wout() const { return cfg.tied ? layout.wte : layout.lm_head; }
};

template <typename S> S RefModel<S>::forward(const int* inputs, const int* targets, int B, int T) {
    validate_forward_inputs(cfg, inputs, targets, B, T);
    const long N = (long)B * T;
    const int L = cfg.L(), D = cfg.D(), Df = cfg.Df(), d = cfg.d, V = cfg.V;
    B_ = B, T_ = T;
    gate_.forward_ran(targets != nullptr);
    int wmax = 0;
    for (int l = 0; l < L; l++) wmax = std::max(wmax, cfg.layers[l].width);
    inputs_.assign(inputs, inputs + N);
    if (targets) targets_.assign(targets, targets + N);
    resid_.resize((size_t)(2 * L + 1) * N * D);
    acts_.resize(L);
    branch_.resize((size_t)N * wmax);
    embedding_forward(resid(0), inputs, P(layout.wte), N, d, D);
    std::vector<S> att_scratch;  // inference needs no per-layer attention probabilities
    const Rows rows{B, T, 0};
    for (int l = 0; l < L; l++) {
        LayerActs<S>& a = acts_[l];
        std::copy_n(resid(2 * l), N * D, resid(2 * l + 1));
        if (cfg.layers[l].attention)
            mixer_block_forward(view(), l, resid(2 * l + 1), rows, a, targets ? a.att : att_scratch, branch_.data(),
                                (LayerCache<S>*)nullptr);
        std::copy_n(resid(2 * l + 1), N * D, resid(2 * l + 2));
        if (cfg.layers[l].mlp) mlp_block_forward(view(), l, resid(2 * l + 2), rows, a, branch_.data());
    }
    lnf_.resize(N * Df), meanf_.resize(N), rstdf_.resize(N);
    norm_forward(cfg.norm, lnf_.data(), meanf_.data(), rstdf_.data(), resid(2 * L), D, P(layout.lnf_w), P(layout.lnf_b),
                 N, Df, cfg.norm_eps);
    logits_.resize((size_t)N * V), losses_.resize(N), lse_.resize(N);
    matmul_forward(logits_.data(), V, lnf_.data(), Df, P(Wout()), N, d, V);  // the head reads [0, d)
    scale_forward(logits_.data(), (long)N * V, cfg.logit_scale());           // muP's multiplier
    if (targets) probs_.resize((size_t)N * V);
    n_targets_ = softmax_crossentropy_forward(targets ? probs_.data() : (S*)nullptr, lse_.data(), losses_.data(),
                                              logits_.data(), targets, N, V);
    loss_ = targets ? mean_loss(losses_.data(), targets, N) : S(0);
    return loss_;
}

template <typename S> void RefModel<S>::backward(S grad_scale) {
    gate_.backward_starts();
    if (n_targets_ == 0) return;  // every target masked: the loss is the constant 0
    const long N = (long)B_ * T_;
    const int L = cfg.L(), D = cfg.D(), Df = cfg.Df(), d = cfg.d, V = cfg.V;
    int wmax = 0, bigmax = Df, smallmax = 0;
    for (int l = 0; l < L; l++) {
        const int w = cfg.layers[l].width, hid = cfg.hidden_of(l);
        const int qkv = cfg.layers[l].attention ? cfg.layers[l].qkv_rows() : 0;
        wmax = std::max(wmax, w), bigmax = std::max({bigmax, qkv, 2 * hid}), smallmax = std::max({smallmax, w, hid});
    }
    dresid_.assign((size_t)N * D, S(0));
    dbranch_.resize((size_t)N * wmax), dbig_.resize((size_t)N * bigmax), dsmall_.resize((size_t)N * smallmax);

    // head: probs -> dlogits in place; dlnf (N, Df) with columns [d, Df) zero (the head never reads them)
    S* dlogits = probs_.data();
    softmax_crossentropy_backward(dlogits, probs_.data(), targets_.data(), N, V, S(grad_scale / n_targets_));
    scale_forward(dlogits, (long)N * V, cfg.logit_scale());  // the unscaled product's gradient: s x the logits'
    S* dlnf = dbig_.data();
    matmul_backward(dlnf, Df, G(Wout()), dlogits, V, lnf_.data(), Df, P(Wout()), N, d, V);
    for (long n = 0; n < N; n++) std::fill(dlnf + n * Df + d, dlnf + (n + 1) * Df, S(0));
    norm_backward(cfg.norm, dresid_.data(), D, G(layout.lnf_w), G(layout.lnf_b), dlnf, resid(2 * L), D, meanf_.data(),
                  rstdf_.data(), P(layout.lnf_w), N, Df);

    // A missing sub-block is the identity on the stream: its gradient passes through unchanged.
    const Rows rows{B_, T_, 0};
    for (int l = L - 1; l >= 0; l--) {
        if (cfg.layers[l].mlp)
            mlp_block_backward(view(), l, dresid_.data(), resid(2 * l + 1), rows, acts_[l], dbranch_.data(),
                               dbig_.data(), dsmall_.data());
        if (cfg.layers[l].attention)
            mixer_block_backward(view(), l, dresid_.data(), resid(2 * l), rows, acts_[l], dbranch_.data(), dbig_.data(),
                                 dsmall_.data());
    }
    embedding_backward(G(layout.wte), dresid_.data(), D, inputs_.data(), N, d);
}

}  // namespace ref
