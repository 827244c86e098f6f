// model.cuh: the GPU model. CudaModel runs one micro-batch through the bf16 kernels of this directory: the forward
// from tokens to logits, the classifier, and the backward into fp32 gradients, each op mirroring ref/reference.h's
// RefModel op for op (same buffers, same accumulation conventions). Every tensor is in the device layout
// (memory_plan.h: V padded to Vp, 256-byte aligned); the activations are memory_plan.h's one layout.
// The same forward serves decoding (inspect/cuda_decoder.cuh): B = 1 sequence of T new rows at positions p0 .. with
// a KV cache per attention layer (LayerCache), whose keys the rows read (decode.cuh's decode_attention) and join
// (decode_store); a layer's arithmetic is written once, in sub_forward, whose mixer (today attention) is chosen there.
// Does not: own the weights, gradients, activations or caches (the engine or the decoder allocates them, cuda_engine.cuh,
// and hands them in: attach, carve), know about streams beyond the one it is given, ranks, or the optimizer.
// Design, short (the long form: docs/engine.md): a layer is the chain of the sub-blocks it has (attention, MLP; a
// missing one is skipped, the stream passing on unchanged); KV groups and windows are the attention kernels', given
// the layer's LayerSpec; every residual add is fused with the norm that follows it; each branch's gradient is the
// residual-state gradient's leading w columns, read in place by the matmuls; no kernel uses atomics, so a run
// repeats bit for bit. --recompute keeps ln1, ln2 and the SwiGLU output in two shared buffers and recomputes them
// just before the weight gradient that reads them (bit-identical gradients).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <vector>

#include "attention.cuh"
#include "classifier.cuh"
#include "cuda_common.cuh"
#include "decode.cuh"
#include "embedding.cuh"
#include "gdn.cuh"
#include "gdn_chunk.cuh"
#include "gdn_chunk_bwd.cuh"
#include "layernorm.cuh"
#include "matmul.cuh"
#include "memory_plan.h"
#include "model_config.h"
#include "rope.cuh"
#include "swiglu.cuh"

// The embedding backward's plan of a micro-batch on the device (embedding_plan.h's embedding_plan): S segments, M
// tokens of more than one.
struct DevicePlan {
    const int *positions, *seg_start, *seg_row, *seg_slot, *fin_row, *fin_first;
    int segments, multi;
};

class CudaModel {
  public:
    CudaModel(const ModelConfig& c, bool recompute);
    ~CudaModel() { cudaFree(tables_); }
    CudaModel(const CudaModel&) = delete;
    CudaModel& operator=(const CudaModel&) = delete;

    const ModelConfig cfg;
    const ParamLayout glayout;  // the device's parameter layout
    const int Vp;               // V padded (memory_plan.h)
    const bool recompute;       // norm and SwiGLU outputs recomputed in the backward

    // The step's memory is the engine's, handed in: the weights (glayout.total bf16) and gradients (fp32), once...
    void attach(const bf16* weights, float* gradients) { params = weights, grads = gradients; }
    // ... and the activations for B x T, carved from `block` (activation_bytes(B, T) of it; memory_plan.h's layout).
    void carve(int batch, int seq, char* block) {
        carve_activations(cfg, batch, seq, recompute, block, a);
        B = batch, T = seq;
    }
    size_t activation_bytes(int batch, int seq) const {
        Activations<bf16> measured;
        return carve_activations(cfg, batch, seq, recompute, nullptr, measured);
    }
    const bf16* weights() const { return params; }
    const Activations<bf16>& acts() const { return a; }
    int batch() const { return B; }  // the micro-batch B x T the activations are carved for
    int seq() const { return T; }

    // Every op's end, on the stream it ran on, to the timer (dev/bench_model; null: none): the model's and the
    // engine's ops alike.
    void set_timer(OpTimer* t) { timer = t; }
    void mark(const char* op, cudaStream_t s) const {
        if (timer) timer->mark(op, s);
    }

    // A decoder's cache of one layer for one sequence: an attention layer's K, V (slots, kv hd) bf16 each, position
    // j in slot j mod slots (decode.cuh); a gdn layer's state S (h, hd, hd) fp32 and conv tail (the last
    // GDN_TAIL_ROWS rows of p, oldest first: (3, 3w) bf16), both zero at a sequence's start.
    struct LayerCache {
        bf16 *k = nullptr, *v = nullptr;
        int slots = 0;
        float* S = nullptr;
        bf16* tail = nullptr;
    };
    // Embedding, L layers, final norm, head: acts().logits (N, Vp) from tokens (N) on the device.
    void forward(const int* tokens, cudaStream_t s);
    // Embedding, L layers and the final norm (acts().lnf) of the carved rows: B sequences of T rows at positions
    // p0 .. p0 + T - 1. caches: null (training: p0 = 0, the activations kept for the backward), or one per layer
    // (a decoder: B = 1; each attention layer's rows read its cache, then join it).
    void forward_layers(const int* tokens, int p0, const LayerCache* caches, cudaStream_t s);
    // The backward of the last forward, whose logits the fused classifier has turned into dlogits. grads += the
    // gradients; bucket_done(k) once bucket k's are complete (the head L + 1, layer l 1 + l, the embedding 0);
    // the embedding's plan is read after s waits for buckets_ready.
    void backward(const DevicePlan& eb, cudaEvent_t buckets_ready, const std::function<void(size_t)>& bucket_done,
                  cudaStream_t s);

  private:
    const bool rms;  // RMSNorm, else LayerNorm
    const bf16* params = nullptr;
    float* grads = nullptr;
    Activations<bf16> a{};
    int B = 0, T = 0;
    OpTimer* timer = nullptr;
    float* tables_ = nullptr;  // RoPE (T, head_dim) fp32 per distinct head_dim
    std::map<int, float*> table_of_;

    // A sub-block: layer `layer`'s attention, or its MLP. subs_ holds those the layers have, in forward order.
    struct SubBlock {
        int layer;
        bool attention;
    };
    std::vector<SubBlock> subs_;
    // The norm in front of sub-block i (its layer's ln1 or ln2), or for i == subs_.size() the final norm: its
    // output, statistics, weight and bias offsets and width.
    struct NormSlot {
        bf16* out;
        float *mean, *rstd;
        size_t w, b;
        int width;
    };
    NormSlot norm_of(int i) const {
        if (i == (int)subs_.size()) return {a.lnf, a.meanf, a.rstdf, glayout.lnf_w, glayout.lnf_b, cfg.Df()};
        const int l = subs_[i].layer;
        const LayerActivations<bf16>& la = a.layer[l];
        const LayerOffsets& o = glayout.layer[l];
        if (subs_[i].attention) return {la.ln1, la.mean1, la.rstd1, o.ln1_w, o.ln1_b, cfg.layers[l].width};
        return {la.ln2, la.mean2, la.rstd2, o.ln2_w, o.ln2_b, cfg.layers[l].width};
    }
    // Residual state i (N, D): the one before sub-block i, or after the last for i == subs_.size().
    bf16* resid(int i) const { return a.resid + (size_t)i * B * T * cfg.D(); }
    const bf16* P(size_t off) const { return off == SIZE_MAX ? nullptr : params + off; }
    float* G(size_t off) const { return off == SIZE_MAX ? nullptr : grads + off; }
    size_t Wout() const { return cfg.tied ? glayout.wte : glayout.lm_head; }
    // The logits' multiplier (muP's base_d / d; 1 without muP): the head's matmuls' alpha, forward and backward.
    float logit_scale() const { return (float)cfg.logit_scale(); }
    float attn_scale(int l) const {
        const double hd = cfg.layers[l].head_dim();
        return (float)(cfg.mup_attn ? 1.0 / hd : 1.0 / std::sqrt(hd));
    }
    void sub_forward(int i, int p0, const LayerCache* caches, cudaStream_t s);
    void sub_backward(int i, cudaStream_t s);
    void gdn_forward(int l, const LayerCache* cache, cudaStream_t s);
    void gdn_backward(int i, cudaStream_t s);
};

// Every op of a step is one OP(name, call): the call, then the timer's mark under the op's cost-model name.
#define OP(name, ...) (__VA_ARGS__, mark(name, s))

inline CudaModel::CudaModel(const ModelConfig& c, bool recompute_)
    : cfg(c), glayout(device_layout(c)), Vp(padded_vocab(c.V)), recompute(recompute_),
      rms(c.norm == NormType::RMSNorm) {
    for (int l = 0; l < cfg.L(); l++) {
        if (cfg.layers[l].attention) subs_.push_back({l, true});
        if (cfg.layers[l].mlp) subs_.push_back({l, false});
    }
    std::vector<int> hds;
    for (const LayerSpec& l : cfg.layers)
        if (l.softmax() && l.rope && std::find(hds.begin(), hds.end(), l.head_dim()) == hds.end())
            hds.push_back(l.head_dim());
    size_t total = 0;
    for (int hd : hds) total += (size_t)cfg.T * hd;
    cudaCheck(cudaMalloc(&tables_, std::max<size_t>(total, 1) * sizeof(float)));
    size_t off = 0;
    for (int hd : hds) {
        std::vector<float> t = rope_table(cfg.T, hd, cfg.rope_theta);
        cudaCheck(cudaMemcpy(tables_ + off, t.data(), t.size() * sizeof(float), cudaMemcpyHostToDevice));
        table_of_[hd] = tables_ + off;
        off += t.size();
    }
}

// The sub-blocks in forward order (x_i = resid(i) is the residual state before sub-block i, x_S after the last;
// every residual add fused with the norm that follows it):
//   attention of layer l: qkv = ln1 Wqkv^T; rope at positions p0 .. (not in a NoPE layer); atty = attn(qkv) (over the
//                         rows' sequences, or with a cache over it and the chunk, which then joins it); x_{i+1} = x_i +
//                         atty Wo^T
//   or, its mixer gdn:    atty = y, gdn_forward's (below) from ln1; x_{i+1} = x_i + y Wo^T
//   MLP of layer l:       sw = swiglu(ln2 Wfc^T); x_{i+1} = x_i + sw Wproj^T
// and then the next sub-block's norm of x_{i+1} (its layer's ln1 or ln2, or the final norm over [0, Df)). A layer
// without attention or without an MLP has no such sub-block: the stream passes to the next one unchanged, which
// is RefModel's copy of the state without the copy.
inline void CudaModel::sub_forward(int i, int p0, const LayerCache* caches, cudaStream_t s) {
    const long N = (long)B * T;
    const SubBlock& sb = subs_[i];
    const int l = sb.layer, D = cfg.D(), w = cfg.layers[l].width, hid = cfg.hidden_of(l);
    const bf16* none = nullptr;
    const LayerOffsets& o = glayout.layer[l];
    LayerActivations<bf16>& la = a.layer[l];
    if (sb.attention && cfg.layers[l].gdn()) {  // the mixer: the one place a layer's is chosen
        gdn_forward(l, caches ? &caches[l] : nullptr, s);
    } else if (sb.attention) {
        const LayerSpec& ls = cfg.layers[l];
        const int qkv = ls.qkv_rows(), hd = ls.head_dim();
        OP("matmul qkv", matmul(la.qkv, la.ln1, P(o.wqkv), none, (int)N, qkv, w, false, true, 0.0f, s));
        // The table's row t holds position t's angles, so rows from p0 start at table + p0 hd.
        if (ls.rope) OP("rope_forward", rope_forward(la.qkv, table_of_.at(hd) + (size_t)p0 * hd, B, T, ls, s));
        if (!caches) {
            OP("attention_forward", attention_forward(la.atty, la.lse, la.qkv, B, T, ls, attn_scale(l), s));
        } else {  // one sequence: its keys before p0 from the cache, then the chunk's own, which join it after
            const LayerCache& c = caches[l];
            OP("decode_attention", decode_attention(la.atty, la.qkv, c.k, c.v, T, p0, c.slots, ls, attn_scale(l), s));
            OP("decode_store", decode_store(c.k, c.v, la.qkv, T, p0, c.slots, ls, s));
        }
    } else {
        OP("matmul fc", matmul(la.fc, la.ln2, P(o.wfc), none, (int)N, 2 * hid, w, false, true, 0.0f, s));
        OP("swiglu_forward", swiglu_forward(la.sw, la.fc, N, hid, s));
        OP("matmul proj", matmul(a.branch, la.sw, P(o.wproj), none, (int)N, w, hid, false, true, 0.0f, s));
    }
    if (sb.attention)  // the mixer's output (attention's, or a gdn layer's gated norm) projected by wo
        OP("matmul o", matmul(a.branch, la.atty, P(o.wo), none, (int)N, w, w, false, true, 0.0f, s));
    const NormSlot n = norm_of(i + 1);
    OP("residual_norm_forward", residual_norm_forward(rms, resid(i + 1), resid(i), a.branch, D, w, n.out, n.mean,
                                                      n.rstd, P(n.w), P(n.b), N, n.width, (float)cfg.norm_eps, s));
}

// A gdn layer's mixer (docs/model.md's steps 2 to 7; ref/gdn.h's gdn_forward op for op): la.atty = y (N, w) from
// la.ln1, h heads of hd = w / h.
//   p = ln1 Wqkv^T (N, 3w); u = la.qkv, r = la.gr: gdn_conv_forward (the conv, SiLU and q's and k's L2 norms, fused);
//   ba = ln1 Wba^T (N, 2h); beta, g: gdn_gates_forward; o, states: gdn_chunk_forward (the chunked delta rule);
//   z = ln1 Wz^T (N, w); y, rn: gdn_norm_forward (the gated RMSNorm)
// With a cache (a decoder: one sequence of T rows after the cache's): the conv runs over the cache's 3 tail rows put
// in front of p's rows (memory_plan.h carves them there) and the last 3 of those 3 + T rows become the tail; the
// delta rule runs from the cache's S into it: one row in a gdn_state_step, more in a gdn_chunk_forward (s0 = s_last =
// S), or a step a row where the chunk kernels refuse the head_dim (below 16: only on weights uploaded to a decoder).
inline void CudaModel::gdn_forward(int l, const LayerCache* cache, cudaStream_t s) {
    const long N = (long)B * T;
    const LayerSpec& ls = cfg.layers[l];
    const int w = ls.width, h = ls.heads, hd = ls.head_dim();
    const bf16* none = nullptr;
    const LayerOffsets& o = glayout.layer[l];
    LayerActivations<bf16>& la = a.layer[l];
    OP("matmul qkv", matmul(la.p, la.ln1, P(o.wqkv), none, (int)N, 3 * w, w, false, true, 0.0f, s));
    if (!cache) {
        OP("gdn_conv_forward", gdn_conv_forward(la.qkv, la.gr, la.p, P(o.conv_w), B, T, h, hd, s));
    } else {
        const long tail = (long)GDN_TAIL_ROWS * 3 * w;  // elements
        OP("memcpy",
           cudaCheck(cudaMemcpyAsync(la.p - tail, cache->tail, tail * sizeof(bf16), cudaMemcpyDeviceToDevice, s)));
        OP("gdn_conv_forward", gdn_conv_forward(la.qkv - tail, la.gr - GDN_TAIL_ROWS * 2 * h, la.p - tail, P(o.conv_w),
                                                1, T + GDN_TAIL_ROWS, h, hd, s));
        OP("memcpy", cudaCheck(cudaMemcpyAsync(cache->tail, la.p + (long)(T - GDN_TAIL_ROWS) * 3 * w,
                                               tail * sizeof(bf16), cudaMemcpyDeviceToDevice, s)));
    }
    OP("matmul ba", matmul(la.ba, la.ln1, P(o.wba), none, (int)N, 2 * h, w, false, true, 0.0f, s));
    OP("gdn_gates_forward", gdn_gates_forward(la.beta, la.g, la.ba, P(o.a_log), P(o.dt_bias), N, h, s));
    if (cache &&
        (T == 1 || gdn_chunk_refusal(1, T, h, hd, 3 * w, w, la.qkv, la.qkv + w, la.qkv + 2 * w, la.o, a.gdn_scratch))) {
        for (int t = 0; t < T; t++)
            OP("gdn_state_step", gdn_state_step(cache->S, la.o + (long)t * w, w, la.qkv + (long)t * 3 * w, 3 * w,
                                                la.beta + (long)t * h, la.g + (long)t * h, h, 1, h, hd, s));
    } else {  // training (every sequence from S = 0), or a decoder's rows from its cache's S into it
        float* S = cache ? cache->S : nullptr;
        OP("gdn_chunk_forward", gdn_chunk_forward(la.o, w, la.states, la.qkv, la.qkv + w, la.qkv + 2 * w, 3 * w,
                                                  la.beta, la.g, B, T, h, hd, S, S, a.gdn_scratch, s));
    }
    OP("matmul z", matmul(la.z, la.ln1, P(o.wz), none, (int)N, w, w, false, true, 0.0f, s));
    OP("gdn_norm_forward",
       gdn_norm_forward(la.atty, la.rn, la.o, la.z, P(o.onorm_w), N, h, hd, (float)cfg.norm_eps, s));
}

inline void CudaModel::forward_layers(const int* tokens, int p0, const LayerCache* caches, cudaStream_t s) {
    const long N = (long)B * T;
    const int D = cfg.D(), d = cfg.d;
    if (caches && (B != 1 || p0 + T > cfg.T))
        throw std::logic_error("CudaModel::forward_layers: a cached forward runs one sequence within T");
    OP("embedding_forward", embedding_forward(resid(0), tokens, P(glayout.wte), N, d, D, s));
    const NormSlot n = norm_of(0);
    OP("norm_forward",
       norm_forward(rms, n.out, n.mean, n.rstd, resid(0), D, P(n.w), P(n.b), N, n.width, (float)cfg.norm_eps, s));
    for (int i = 0; i < (int)subs_.size(); i++) sub_forward(i, p0, caches, s);
}

inline void CudaModel::forward(const int* tokens, cudaStream_t s) {
    const long N = (long)B * T;
    forward_layers(tokens, 0, nullptr, s);
    // The head reads [0, d) of the final norm in place (row stride Df).
    OP("matmul logits", matmul(a.logits, a.lnf, P(Wout()), (const bf16*)nullptr, (int)N, Vp, cfg.d, false, true, 0.0f,
                               s, cfg.Df(), 0, 0, logit_scale()));
}

// Mirrors sub_forward. The branch's gradient is the residual-state gradient's leading w columns, read in place
// (row stride D) by the matmuls, all queued before the norm backward adds into dresid. With recompute, the norm
// output and sw are recomputed just before the weight gradient that reads them (the same kernels on the same bf16
// inputs: the gradients are bit-identical to the stored path).
inline void CudaModel::sub_backward(int i, cudaStream_t s) {
    const long N = (long)B * T;
    const SubBlock& sb = subs_[i];
    const int l = sb.layer, D = cfg.D(), w = cfg.layers[l].width, hid = cfg.hidden_of(l);
    const float eps = (float)cfg.norm_eps;
    const bf16* none = nullptr;
    const float* nonef = nullptr;
    const LayerOffsets& o = glayout.layer[l];
    LayerActivations<bf16>& la = a.layer[l];
    if (!sb.attention) {
        bf16* dsw = a.dsmall;  // (N, hid)
        OP("matmul proj dx", matmul(dsw, a.dresid, P(o.wproj), none, (int)N, hid, w, false, false, 0.0f, s, D));
        if (recompute) OP("swiglu_forward", swiglu_forward(la.sw, la.fc, N, hid, s));
        OP("matmul proj dW", matmul(G(o.wproj), a.dresid, la.sw, nonef, w, hid, (int)N, true, false, 1.0f, s, D));
        bf16* dfc = a.dbig;  // (N, 2 hid)
        OP("swiglu_backward", swiglu_backward(dfc, dsw, la.fc, N, hid, s));
        bf16* dln = a.dsmall;  // (N, w); dsw is dead
        OP("matmul fc dx", matmul(dln, dfc, P(o.wfc), none, (int)N, w, 2 * hid, false, false, 0.0f, s));
        if (recompute)
            OP("norm_forward",
               norm_forward(rms, la.ln2, la.mean2, la.rstd2, resid(i), D, P(o.ln2_w), P(o.ln2_b), N, w, eps, s));
        OP("matmul fc dW", matmul(G(o.wfc), dfc, la.ln2, nonef, 2 * hid, w, (int)N, true, false, 1.0f, s));
        OP("norm_backward", norm_backward(rms, a.dresid, D, G(o.ln2_w), G(o.ln2_b), dln, resid(i), D, la.mean2,
                                          la.rstd2, P(o.ln2_w), N, w, a.norm_scratch, s));
        return;
    }
    // the mixer: wo's gradients from the branch's, its output's (N, w) into dsmall; the mixer's own backward turns
    // that into ln1's gradient, also in dsmall; then ln1's norm backward
    const LayerSpec& ls = cfg.layers[l];
    bf16* datty = a.dsmall;  // (N, w)
    OP("matmul o dx", matmul(datty, a.dresid, P(o.wo), none, (int)N, w, w, false, false, 0.0f, s, D));
    OP("matmul o dW", matmul(G(o.wo), a.dresid, la.atty, nonef, w, w, (int)N, true, false, 1.0f, s, D));
    bf16* dln = a.dsmall;  // datty is dead once the mixer's backward has read it
    if (ls.gdn()) {
        gdn_backward(i, s);
    } else {
        const int qkv = ls.qkv_rows();
        bf16* dqkv = a.dbig;  // (N, qkv)
        OP("attention_backward",
           attention_backward(dqkv, a.att_scratch, datty, la.qkv, la.atty, la.lse, B, T, ls, attn_scale(l), s));
        if (ls.rope) OP("rope_backward", rope_backward(dqkv, table_of_.at(ls.head_dim()), B, T, ls, s));
        OP("matmul qkv dx", matmul(dln, dqkv, P(o.wqkv), none, (int)N, w, qkv, false, false, 0.0f, s));
        if (recompute)
            OP("norm_forward",
               norm_forward(rms, la.ln1, la.mean1, la.rstd1, resid(i), D, P(o.ln1_w), P(o.ln1_b), N, w, eps, s));
        OP("matmul qkv dW", matmul(G(o.wqkv), dqkv, la.ln1, nonef, qkv, w, (int)N, true, false, 1.0f, s));
    }
    OP("norm_backward", norm_backward(rms, a.dresid, D, G(o.ln1_w), G(o.ln1_b), dln, resid(i), D, la.mean1, la.rstd1,
                                      P(o.ln1_w), N, w, a.norm_scratch, s));
}

// gdn_forward's backward (ref/gdn.h's gdn_backward op for op), sub-block i (layer l's mixer), between sub_backward's
// wo matmuls and ln1's norm backward (shared with attention): in reverse, gdn_norm_backward (d_o into gdn_do, dz into dbig), dln1 = dz Wz, the
// delta rule's gdn_chunk_backward (dq, dk, dv into gdn_du; dbeta, dg), gdn_gates_backward (dba), dln1 += dba Wba,
// gdn_conv_backward (the L2 norms' and the conv's backward, fused: dp into dbig), dln1 += dp Wqkv; each weight
// gradient fp32 += right after its dx. dln1 (N, w) accumulates in dsmall (bf16, three matmuls with beta 1).
inline void CudaModel::gdn_backward(int i, cudaStream_t s) {
    const long N = (long)B * T;
    const int l = subs_[i].layer, D = cfg.D();
    const LayerSpec& ls = cfg.layers[l];
    const int w = ls.width, h = ls.heads, hd = ls.head_dim();
    const float eps = (float)cfg.norm_eps;
    const bf16* none = nullptr;
    const float* nonef = nullptr;
    const LayerOffsets& o = glayout.layer[l];
    LayerActivations<bf16>& la = a.layer[l];
    const bf16* dy = a.dsmall;           // (N, w): y's gradient, from sub_backward's wo matmul
    bf16 *d_o = a.gdn_do, *dz = a.dbig;  // (N, w) each
    OP("gdn_norm_backward",
       gdn_norm_backward(d_o, dz, G(o.onorm_w), dy, la.o, la.z, la.rn, P(o.onorm_w), N, h, hd, a.gdn_scratch, s));
    bf16* dln = a.dsmall;  // dy is dead
    OP("matmul z dx", matmul(dln, dz, P(o.wz), none, (int)N, w, w, false, false, 0.0f, s));
    if (recompute)
        OP("norm_forward",
           norm_forward(rms, la.ln1, la.mean1, la.rstd1, resid(i), D, P(o.ln1_w), P(o.ln1_b), N, w, eps, s));
    OP("matmul z dW", matmul(G(o.wz), dz, la.ln1, nonef, w, w, (int)N, true, false, 1.0f, s));
    bf16* du = a.gdn_du;  // (N, 3w): [dq | dk | dv]
    OP("gdn_chunk_backward",
       gdn_chunk_backward(du, du + w, du + 2 * w, 3 * w, a.gdn_dbeta, a.gdn_dg, d_o, w, la.states, la.qkv, la.qkv + w,
                          la.qkv + 2 * w, 3 * w, la.beta, la.g, B, T, h, hd, a.gdn_scratch, s));
    OP("gdn_gates_backward", gdn_gates_backward(a.gdn_dba, G(o.a_log), G(o.dt_bias), a.gdn_dbeta, a.gdn_dg, la.ba,
                                                la.beta, la.g, P(o.a_log), P(o.dt_bias), N, h, a.gdn_scratch, s));
    OP("matmul ba dx", matmul(dln, a.gdn_dba, P(o.wba), none, (int)N, w, 2 * h, false, false, 1.0f, s));
    OP("matmul ba dW", matmul(G(o.wba), a.gdn_dba, la.ln1, nonef, 2 * h, w, (int)N, true, false, 1.0f, s));
    bf16* dp = a.dbig;  // (N, 3w); dz is dead
    OP("gdn_conv_backward",
       gdn_conv_backward(dp, G(o.conv_w), du, la.qkv, la.gr, la.p, P(o.conv_w), B, T, h, hd, a.gdn_scratch, s));
    OP("matmul qkv dx", matmul(dln, dp, P(o.wqkv), none, (int)N, w, 3 * w, false, false, 1.0f, s));
    OP("matmul qkv dW", matmul(G(o.wqkv), dp, la.ln1, nonef, 3 * w, w, (int)N, true, false, 1.0f, s));
}

inline void CudaModel::backward(const DevicePlan& eb, cudaEvent_t buckets_ready,
                                const std::function<void(size_t)>& bucket_done, cudaStream_t s) {
    const long N = (long)B * T;
    const int L = cfg.L(), D = cfg.D(), Df = cfg.Df(), d = cfg.d, S = (int)subs_.size();
    // head: dlnf (N, Df) = [dlogits Wout | 0]: the matmul writes the leading d columns in place (row stride Df),
    // columns [d, Df) are zero (the head never reads them)
    bf16* dlnf = a.dbig;
    if (Df != d)
        OP("memset",
           cudaCheck(cudaMemset2DAsync(dlnf + d, (size_t)Df * sizeof(bf16), 0, (size_t)(Df - d) * sizeof(bf16), N, s)));
    OP("matmul logits dx", matmul(dlnf, a.logits, P(Wout()), (const bf16*)nullptr, (int)N, d, Vp, false, false, 0.0f, s,
                                  0, 0, Df, logit_scale()));
    OP("matmul logits dW", matmul(G(Wout()), a.logits, a.lnf, (const float*)nullptr, Vp, d, (int)N, true, false, 1.0f,
                                  s, 0, Df, 0, logit_scale()));
    // The residual-state gradient accumulates from both consumers of every residual state, so it starts at zero.
    OP("memset", cudaCheck(cudaMemsetAsync(a.dresid, 0, (size_t)N * D * sizeof(bf16), s)));
    OP("norm_backward", norm_backward(rms, a.dresid, D, G(glayout.lnf_w), G(glayout.lnf_b), dlnf, resid(S), D, a.meanf,
                                      a.rstdf, P(glayout.lnf_w), N, Df, a.norm_scratch, s));
    bucket_done(L + 1);  // the head: the final norm, and lm_head when untied
    for (int i = S - 1; i >= 0; i--) {
        sub_backward(i, s);
        // layer l's weight gradients are complete after its first sub-block: reduced while the layers below compute
        if (i == 0 || subs_[i - 1].layer != subs_[i].layer) bucket_done(1 + subs_[i].layer);
    }
    cudaCheck(cudaStreamWaitEvent(s, buckets_ready, 0));
    OP("embedding_backward",
       embedding_backward(G(glayout.wte), a.emb_partial, a.dresid, D, eb.positions, eb.seg_start, eb.seg_row,
                          eb.seg_slot, eb.fin_row, eb.fin_first, eb.segments, eb.multi, d, s));
    bucket_done(0);  // the embedding (tied: its head gradient came first, the lookups' last)
}

#undef OP
