// inspect/decoders.h: make_decoder, the one place that sees both KV-cache decoders and picks the one for an engine (as
// engine_factory.h picks the engine): CudaDecoder (inspect/cuda_decoder.cuh) for the CUDA engine, CpuDecoder (ref/cpu_decoder.h)
// otherwise; and RecomputeDecoder, the same interface with no cache at all (a full forward over the whole prefix
// for every token: generate --no-cache, and the oracle of the cache tests).
// Does not: sample (inspect/sampling.h), or load a checkpoint.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ref/cpu_decoder.h"
#include "engine.h"
#include "engine_factory.h"
#ifdef PRISM_HAS_CUDA_ENGINE
#include "inspect/cuda_decoder.cuh"
#endif

// A decoder of `capacity` positions (at most the model's T) on eng's current weights; eng must outlive it.
inline std::unique_ptr<Decoder> make_decoder(Engine& eng, int capacity) {
#ifdef PRISM_HAS_CUDA_ENGINE
    if (const CudaEngine* ce = dynamic_cast<const CudaEngine*>(&eng))
        return std::unique_ptr<Decoder>(new CudaDecoder(*ce, capacity));
#endif
    std::vector<float> params(eng.num_params());
    eng.get_params(params.data());
    return std::unique_ptr<Decoder>(new CpuDecoder(eng.config(), std::move(params), capacity));
}

// No cache: every append runs Engine::forward over all the tokens so far and reads the wanted logits back
// (O(position) work per token instead of O(1) rows: for checking the cache, not for speed).
class RecomputeDecoder : public Decoder {
  public:
    RecomputeDecoder(Engine& eng, int capacity) : eng_(eng), cap_(capacity) {
        if (capacity < 1 || capacity > eng.config().T)
            throw ConfigError("decoder capacity " + std::to_string(capacity) + " must lie in [1, T = " +
                              std::to_string(eng.config().T) + "]");
    }
    int capacity() const override { return cap_; }
    int position() const override { return (int)ctx_.size(); }
    void reset() override { ctx_.clear(); }
    size_t cache_bytes() const override { return 0; }
    std::string describe() const override { return eng_.describe() + ", no KV cache (full recompute per token)"; }
    void append(const int* tokens, int n, float* logits, bool all = false) override {
        if (n < 1 || position() + n > cap_)
            throw std::logic_error("RecomputeDecoder::append: " + std::to_string(n) + " tokens at position " +
                                   std::to_string(position()) + " exceed the capacity " + std::to_string(cap_));
        ctx_.insert(ctx_.end(), tokens, tokens + n);
        const int T = (int)ctx_.size(), V = eng_.config().V;
        eng_.forward(ctx_.data(), nullptr, 1, T);
        for (int t = all ? T - n : T - 1, r = 0; t < T; t++, r++) eng_.logits_at(0, t, logits + (size_t)r * V);
    }

  private:
    Engine& eng_;
    int cap_;
    std::vector<int> ctx_;
};
