// inspect/cuda_decoder.cuh: CudaDecoder, the KV-cache Decoder (engine.h) on the GPU, reading the CUDA model's bf16
// weights in place (no copy, so it decodes with the weights the engine holds at each call) and queuing on the engine's
// compute stream (so a decode orders after any training work queued before it).
// The engine makes one through make_cuda_decoder, handed to it by cuda_engine.cu (the engine does not include
// inspect/).
// A chunk of n new tokens at positions p0 .. p0 + n - 1 runs through model.cuh's own forward (CudaModel::forward_layers:
// the engine's sub-blocks, kernels and fused residual-norms) as one sequence of n rows with this decoder's caches: each
// attention layer's queries read the keys before p0 from its cache (decode.cuh), and the chunk's keys and values join
// it; each gdn layer's delta rule runs from its cached state into it. Then the head, for the last row (or all n):
// logits (rows, Vp) fp32 = s lnf[:, :d] Wout^T (s: cfg.logit_scale(), muP's multiplier), V columns read back.
// The cache: per attention layer K_l, V_l (slots_l, kv_l hd_l) bf16 each, slots_l = the capacity, or min(capacity, W)
// in a window layer (a ring, since no query past j + W - 1 reads key j). So at capacity T it holds
// account(cfg).kv_cache_bytes (--plan's KV-cache bytes; tested). Per gdn layer its recurrent state S (h, hd, hd) fp32
// and the conv's last 3 inputs (3, 3w) bf16 (model.cuh's LayerCache): --plan's state bytes, whatever the capacity;
// both zeroed when a sequence starts (the first append after construction or reset).
// The same kernels as the engine's forward except attention and a gdn layer's one-row step, and fp32 logits (the
// engine's are bf16): test_decode_cuda.cpp checks the logits against the engine's full forward at every position.
// Memory: the cache and the model's RoPE tables at construction; the model's activations for the largest chunk seen
// (memory_plan.h's layout at 1 x n). Each append waits once (the logits' read-back).
// Does not: outlive its engine, batch sequences, or run attention's prefill fast (decode.cuh's kernel is per query).
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "cuda_common.cuh"
#include "engine.h"
#include "matmul.cuh"
#include "model.cuh"
#include "model_config.h"

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
    size_t cache_bytes() const override { return cache_elems_ * sizeof(bf16) + state_floats_ * sizeof(float); }
    std::string describe() const override { return "CUDA (bf16 KV cache)"; }
    void append(const int* tokens, int n, float* logits, bool all = false) override;

  private:
    CudaModel model_;  // the forward, on the weights handed in, its activations carved for each chunk
    int cap_, pos_ = 0;
    cudaStream_t stream_;
    bf16* cache_ = nullptr;  // per layer K (slots, kv_l hd_l) then V (slots, kv_l hd_l), or a gdn layer's tail (3, 3w)
    size_t cache_elems_ = 0;
    float* states_ = nullptr;  // per gdn layer S (h, hd, hd)
    size_t state_floats_ = 0;
    std::vector<CudaModel::LayerCache> caches_;  // per layer (slots 0 without attention)
    char* acts_ = nullptr;                       // the model's activations for up to rows_ rows
    float* logits_ = nullptr;                    // (logit_rows_, Vp)
    int rows_ = 0, logit_rows_ = 0;
    std::vector<float> host_logits_;

    void ensure_scratch(int n, int logit_rows);
};

inline CudaDecoder::CudaDecoder(const ModelConfig& cfg, const bf16* weights, cudaStream_t stream, int capacity)
    : model_(cfg, false), cap_(capacity), stream_(stream) {
    validate_decoder_capacity(cfg, capacity);
    model_.attach(weights, nullptr);
    // A layer's bf16 elements (K and V, or a gdn layer's tail) and fp32 state.
    auto kv = [&](const LayerSpec& s, int slots) { return s.softmax() ? (size_t)slots * s.kv_width() : 0; };
    auto tail = [](const LayerSpec& s) { return s.gdn() ? (size_t)GDN_TAIL_ROWS * 3 * s.width : 0; };
    auto state = [](const LayerSpec& s) { return s.gdn() ? (size_t)s.heads * s.head_dim() * s.head_dim() : 0; };
    for (const LayerSpec& s : cfg.layers) {
        CudaModel::LayerCache lc;
        lc.slots = !s.softmax() ? 0 : s.window ? std::min(s.window, cap_) : cap_;
        caches_.push_back(lc);
        cache_elems_ += 2 * kv(s, lc.slots) + tail(s), state_floats_ += state(s);
    }
    cudaCheck(cudaMalloc(&cache_, std::max<size_t>(cache_elems_, 1) * sizeof(bf16)));
    cudaCheck(cudaMalloc(&states_, std::max<size_t>(state_floats_, 1) * sizeof(float)));
    bf16* p = cache_;
    float* f = states_;
    for (int l = 0; l < cfg.L(); l++) {
        const LayerSpec& s = cfg.layers[l];
        CudaModel::LayerCache& lc = caches_[l];
        lc.k = p, p += kv(s, lc.slots);
        lc.v = p, p += kv(s, lc.slots);
        if (s.gdn()) lc.tail = p, p += tail(s), lc.S = f, f += state(s);
    }
}

inline CudaDecoder::~CudaDecoder() {
    cudaStreamSynchronize(stream_);
    cudaFree(cache_), cudaFree(states_), cudaFree(acts_), cudaFree(logits_);
}

inline void CudaDecoder::ensure_scratch(int n, int logit_rows) {
    if (n > rows_ || logit_rows > logit_rows_) {
        rows_ = std::max(rows_, n), logit_rows_ = std::max(logit_rows_, logit_rows);
        cudaCheck(cudaStreamSynchronize(stream_));  // the old buffers may still be in use by queued work
        cudaCheck(cudaFree(acts_)), cudaCheck(cudaFree(logits_));
        cudaCheck(cudaMalloc(&acts_, model_.activation_bytes(1, rows_)));
        cudaCheck(cudaMalloc(&logits_, (size_t)logit_rows_ * model_.Vp * sizeof(float)));
    }
    model_.carve(1, n, acts_);  // the layout at 1 x n fits in the bytes of 1 x rows_
}

inline void CudaDecoder::append(const int* tokens, int n, float* logits, bool all) {
    const ModelConfig& c = model_.cfg;
    validate_decode_append(c, cap_, pos_, tokens, n);
    const int rows = all ? n : 1, first = n - rows, Vp = model_.Vp;
    ensure_scratch(n, rows);
    int* dtokens = model_.acts().upload[0];
    cudaCheck(cudaMemcpyAsync(dtokens, tokens, n * sizeof(int), cudaMemcpyHostToDevice, stream_));
    if (pos_ == 0)  // a new sequence: every gdn layer's state and conv tail start at zero
        for (int l = 0; l < c.L(); l++)
            if (c.layers[l].gdn()) {
                const LayerSpec& s = c.layers[l];
                const CudaModel::LayerCache& lc = caches_[l];
                cudaCheck(
                    cudaMemsetAsync(lc.S, 0, (size_t)s.heads * s.head_dim() * s.head_dim() * sizeof(float), stream_));
                cudaCheck(cudaMemsetAsync(lc.tail, 0, (size_t)GDN_TAIL_ROWS * 3 * s.width * sizeof(bf16), stream_));
            }
    model_.forward_layers(dtokens, pos_, caches_.data(), stream_);
    // fp32 logits (the engine's are bf16): sampling sees them unrounded. The head reads lnf's first d columns.
    const ParamLayout& gl = model_.glayout;
    matmul(logits_, model_.acts().lnf + (size_t)first * c.Df(), model_.weights() + (c.tied ? gl.wte : gl.lm_head),
           (const float*)nullptr, rows, Vp, c.d, false, true, 0.0f, stream_, c.Df(), 0, 0,
           (float)c.logit_scale());  // muP's multiplier
    host_logits_.resize((size_t)rows * Vp);
    cudaCheck(cudaMemcpyAsync(host_logits_.data(), logits_, host_logits_.size() * sizeof(float), cudaMemcpyDeviceToHost,
                              stream_));
    cudaCheck(cudaStreamSynchronize(stream_));
    for (int r = 0; r < rows; r++) std::copy_n(host_logits_.data() + (size_t)r * Vp, c.V, logits + (size_t)r * c.V);
    pos_ += n;
}

// The engine's decoder maker (cuda_engine.cuh's CudaDecoderMaker).
inline std::unique_ptr<Decoder> make_cuda_decoder(const CudaModel& model, cudaStream_t stream, int capacity) {
    return std::unique_ptr<Decoder>(new CudaDecoder(model, stream, capacity));
}
