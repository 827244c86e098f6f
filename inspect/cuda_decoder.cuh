// inspect/cuda_decoder.cuh: CudaDecoder, the KV-cache Decoder (engine.h) on the GPU, reading the CUDA model's bf16
// weights in place (model.cuh's CudaModel: no copy, so it decodes with the weights the engine holds at each call)
// and queuing on the engine's compute stream (so a decode orders after any training work queued before it).
// The engine makes one through make_cuda_decoder, handed to it by cuda_engine.cu (the engine does not include
// inspect/).
// A chunk of n new tokens at positions p0 .. p0 + n - 1 runs as n rows through the model's own kernels:
//   x (n, D) = embed(tokens)
//   per layer l (w, h, kv, hd = w / h, window W, hid):
//     ln = norm1(x[:, :w]); qkv (n, w + 2 kv hd) = ln Wqkv^T; rope_forward on the table rows p0 .. p0 + n - 1
//         (a NoPE layer: none)
//     atty = decode_attention(q, cache, the chunk's k and v)       inspect/decode.cuh: each query over its keys
//     K_l, V_l slots (p0 + i) mod slots = k_i, v_i  (decode_store)  the cache: K_l, V_l (slots_l, kv hd) bf16 each
//     x = residual_norm(x + atty Wo^T) -> ln = norm2;  x += swiglu(ln Wfc^T) Wproj^T   (inspect/decode.cuh)
//     (a layer without attention: ln = norm2(x), and no cache; without an MLP: x += atty Wo^T alone)
//   logits (rows, Vp) fp32 = normf(x[:, :Df])[:, :d] Wout^T, for the last row (or all n), V columns read back
// slots_l = the capacity, or min(capacity, W) in a window layer: a ring, since no query past j + W - 1 reads key j.
// So the cache holds 2 kv_l hd_l bf16 per layer and position kept: at capacity T, account(cfg).kv_cache_bytes
// (--plan's KV-cache bytes; tested).
// The same kernels as the engine's forward except attention, and the logits kept in fp32 (the engine's are bf16):
// test_decode_cuda.cpp checks the logits against the engine's full forward at every position.
// Memory: the cache and RoPE tables at construction; the chunk's activations grow to the largest chunk seen.
// Each append waits once (the logits' read-back).
// Does not: outlive its engine, batch sequences, or run a prefill fast (inspect/decode.cuh's kernel is per query).
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cuda_common.cuh"
#include "inspect/decode.cuh"
#include "embedding.cuh"
#include "engine.h"
#include "layernorm.cuh"
#include "matmul.cuh"
#include "memory_plan.h"
#include "model.cuh"
#include "model_config.h"
#include "rope.cuh"
#include "swiglu.cuh"

class CudaDecoder : public Decoder {
  public:
    // On the model's bf16 weights in the device layout (memory_plan.h's device_layout: V padded to Vp), in place;
    // `stream`: the one its work orders after (the engine's compute stream). The weights must outlive the decoder.
    CudaDecoder(const ModelConfig& cfg, const bf16* weights, cudaStream_t stream, int capacity);
    CudaDecoder(const CudaModel& model, cudaStream_t stream, int capacity)
        : CudaDecoder(model.cfg, model.weights(), stream, capacity) {}
    ~CudaDecoder() override;
    CudaDecoder(const CudaDecoder&) = delete;
    CudaDecoder& operator=(const CudaDecoder&) = delete;

    int capacity() const override { return cap_; }
    int position() const override { return pos_; }
    void reset() override { pos_ = 0; }
    size_t cache_bytes() const override { return cache_elems_ * sizeof(bf16); }
    std::string describe() const override { return "CUDA (bf16 KV cache)"; }
    void append(const int* tokens, int n, float* logits, bool all = false) override;

  private:
    const bf16* params_;
    ModelConfig cfg_;
    const ParamLayout gl_;  // the device layout
    int Vp_, cap_, pos_ = 0;
    cudaStream_t stream_;
    bf16* cache_ = nullptr;  // per layer K (slots, kv_l hd_l) then V (slots, kv_l hd_l)
    size_t cache_elems_ = 0;
    std::vector<int> slots_;  // per layer: positions its cache holds (0 without attention)
    std::vector<bf16*> k_, v_;
    float* tables_ = nullptr;  // RoPE (cap, hd) per distinct head_dim of the attention layers
    std::map<int, float*> table_of_;
    // The chunk's activations, for up to rows_ rows (logits for logit_rows_): carved from one allocation.
    char* scratch_ = nullptr;
    int rows_ = 0, logit_rows_ = 0;
    int* tokens_ = nullptr;                                      // (n)
    bf16 *x_, *ln_, *qkv_, *atty_, *branch_, *fc_, *sw_, *lnf_;  // (n, D) (n, wmax) (n, qkv max) ... (n, Df)
    float *mean_, *rstd_, *logits_;                              // (n) (n) (logit rows, Vp)
    std::vector<float> host_logits_;

    const bf16* P(size_t off) const { return off == SIZE_MAX ? nullptr : params_ + off; }
    void ensure_scratch(int n, int logit_rows);
};

inline CudaDecoder::CudaDecoder(const ModelConfig& cfg, const bf16* weights, cudaStream_t stream, int capacity)
    : params_(weights), cfg_(cfg), gl_(device_layout(cfg)), Vp_(padded_vocab(cfg.V)), cap_(capacity), stream_(stream) {
    validate_decoder_capacity(cfg_, capacity);
    refuse_gdn_on_cuda(cfg_);
    for (const LayerSpec& s : cfg_.layers) {
        slots_.push_back(!s.attention ? 0 : s.window ? std::min(s.window, cap_) : cap_);
        cache_elems_ += 2 * (size_t)slots_.back() * (s.attention ? s.kv_width() : 0);
    }
    cudaCheck(cudaMalloc(&cache_, std::max<size_t>(cache_elems_, 1) * sizeof(bf16)));
    bf16* p = cache_;
    for (int l = 0; l < cfg_.L(); l++) {
        const size_t e = (size_t)slots_[l] * (cfg_.layers[l].attention ? cfg_.layers[l].kv_width() : 0);
        k_.push_back(p), p += e;
        v_.push_back(p), p += e;
    }
    std::vector<int> hds;
    for (const LayerSpec& s : cfg_.layers)
        if (s.attention && s.rope && std::find(hds.begin(), hds.end(), s.head_dim()) == hds.end())
            hds.push_back(s.head_dim());
    size_t total = 0;
    for (int hd : hds) total += (size_t)cap_ * hd;
    cudaCheck(cudaMalloc(&tables_, std::max<size_t>(total, 1) * sizeof(float)));
    size_t off = 0;
    for (int hd : hds) {
        std::vector<float> t = rope_table(cap_, hd, cfg_.rope_theta);
        cudaCheck(cudaMemcpy(tables_ + off, t.data(), t.size() * sizeof(float), cudaMemcpyHostToDevice));
        table_of_[hd] = tables_ + off;
        off += t.size();
    }
}

inline CudaDecoder::~CudaDecoder() {
    cudaStreamSynchronize(stream_);
    cudaFree(cache_), cudaFree(tables_), cudaFree(scratch_);
}

inline void CudaDecoder::ensure_scratch(int n, int logit_rows) {
    if (n <= rows_ && logit_rows <= logit_rows_) return;
    rows_ = std::max(rows_, n), logit_rows_ = std::max(logit_rows_, logit_rows);
    int wmax = 0, hidmax = 0, qkvmax = 0;
    for (int l = 0; l < cfg_.L(); l++) {
        const LayerSpec& s = cfg_.layers[l];
        wmax = std::max(wmax, s.width), hidmax = std::max(hidmax, cfg_.hidden_of(l));
        if (s.attention) qkvmax = std::max(qkvmax, s.qkv_rows());
    }
    const long N = rows_;
    cudaCheck(cudaStreamSynchronize(stream_));  // the old scratch may still be in use by queued work
    cudaCheck(cudaFree(scratch_));
    scratch_ = nullptr;
    for (int pass = 0; pass < 2; pass++) {  // measure, then carve
        Carver c{scratch_, 0};
        tokens_ = c.take<int>(N);
        x_ = c.take<bf16>(N * cfg_.D()), ln_ = c.take<bf16>(N * wmax), qkv_ = c.take<bf16>(N * qkvmax);
        atty_ = c.take<bf16>(N * wmax), branch_ = c.take<bf16>(N * wmax), fc_ = c.take<bf16>(N * 2 * hidmax);
        sw_ = c.take<bf16>(N * hidmax), lnf_ = c.take<bf16>(N * cfg_.Df());
        mean_ = c.take<float>(N), rstd_ = c.take<float>(N), logits_ = c.take<float>((size_t)logit_rows_ * Vp_);
        if (pass == 0) cudaCheck(cudaMalloc(&scratch_, c.bytes));
    }
}

inline void CudaDecoder::append(const int* tokens, int n, float* logits, bool all) {
    validate_decode_append(cfg_, cap_, pos_, tokens, n);
    const int rows = all ? n : 1, first = n - rows;
    ensure_scratch(n, rows);
    const int L = cfg_.L(), D = cfg_.D(), Df = cfg_.Df(), d = cfg_.d;
    const bool rms = cfg_.norm == NormType::RMSNorm;
    const float eps = (float)cfg_.norm_eps;
    const bf16* none = nullptr;
    cudaCheck(cudaMemcpyAsync(tokens_, tokens, n * sizeof(int), cudaMemcpyHostToDevice, stream_));
    embedding_forward(x_, tokens_, P(gl_.wte), n, d, D, stream_);
    for (int l = 0; l < L; l++) {
        const LayerSpec& s = cfg_.layers[l];
        const int w = s.width, hid = cfg_.hidden_of(l), hd = s.head_dim();
        const LayerOffsets& o = gl_.layer[l];
        if (s.attention) {
            const float scale = (float)(cfg_.mup_attn ? 1.0 / hd : 1.0 / std::sqrt((double)hd));
            norm_forward(rms, ln_, mean_, rstd_, x_, D, P(o.ln1_w), P(o.ln1_b), n, w, eps, stream_);
            matmul(qkv_, ln_, P(o.wqkv), none, n, s.qkv_rows(), w, false, true, 0.0f, stream_);
            // The table's row t holds position t's angles, so rows p0 .. p0 + n - 1 start at table + p0 hd.
            if (s.rope) rope_forward(qkv_, table_of_.at(hd) + (size_t)pos_ * hd, 1, n, s, stream_);
            decode_attention(atty_, qkv_, k_[l], v_[l], n, pos_, slots_[l], s, scale, stream_);
            decode_store(k_[l], v_[l], qkv_, n, pos_, slots_[l], s, stream_);
            matmul(branch_, atty_, P(o.wo), none, n, w, w, false, true, 0.0f, stream_);
            if (s.mlp)
                residual_norm_forward(rms, x_, x_, branch_, D, w, ln_, mean_, rstd_, P(o.ln2_w), P(o.ln2_b), n, w, eps,
                                      stream_);
            else residual_forward(x_, x_, branch_, n, D, w, stream_);
        } else {
            norm_forward(rms, ln_, mean_, rstd_, x_, D, P(o.ln2_w), P(o.ln2_b), n, w, eps, stream_);
        }
        if (s.mlp) {
            matmul(fc_, ln_, P(o.wfc), none, n, 2 * hid, w, false, true, 0.0f, stream_);
            swiglu_forward(sw_, fc_, n, hid, stream_);
            matmul(branch_, sw_, P(o.wproj), none, n, w, hid, false, true, 0.0f, stream_);
            residual_forward(x_, x_, branch_, n, D, w, stream_);
        }
    }
    norm_forward(rms, lnf_, mean_, rstd_, x_ + (size_t)first * D, D, P(gl_.lnf_w), P(gl_.lnf_b), rows, Df, eps,
                 stream_);
    // fp32 logits (the engine's are bf16): sampling sees them unrounded. The head reads lnf's first d columns.
    matmul(logits_, lnf_, P(cfg_.tied ? gl_.wte : gl_.lm_head), (const float*)nullptr, rows, Vp_, d, false, true, 0.0f,
           stream_, Df);
    host_logits_.resize((size_t)rows * Vp_);
    cudaCheck(cudaMemcpyAsync(host_logits_.data(), logits_, host_logits_.size() * sizeof(float), cudaMemcpyDeviceToHost,
                              stream_));
    cudaCheck(cudaStreamSynchronize(stream_));
    for (int r = 0; r < rows; r++)
        std::copy_n(host_logits_.data() + (size_t)r * Vp_, cfg_.V, logits + (size_t)r * cfg_.V);
    pos_ += n;
}

// The engine's decoder maker (cuda_engine.cuh's CudaDecoderMaker).
inline std::unique_ptr<Decoder> make_cuda_decoder(const CudaModel& model, cudaStream_t stream, int capacity) {
    return std::unique_ptr<Decoder>(new CudaDecoder(model, stream, capacity));
}
