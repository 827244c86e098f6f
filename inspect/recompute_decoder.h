// inspect/recompute_decoder.h: RecomputeDecoder, engine.h's Decoder interface with no cache at all (a full forward
// over the whole prefix for every token: generate --no-cache, and the oracle of the cache tests). The cached
// decoders come from Engine::make_decoder.
// Does not: sample (inspect/sampling.h), or load a checkpoint.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine.h"

// No cache: every append runs Engine::forward over all the tokens so far and reads the wanted logits back
// (O(position) work per token instead of O(1) rows: for checking the cache, not for speed).
class RecomputeDecoder : public Decoder {
  public:
    RecomputeDecoder(Engine& eng, int capacity) : eng_(eng), cap_(capacity) {
        validate_decoder_capacity(eng.config(), capacity);
    }
    int capacity() const override { return cap_; }
    int position() const override { return (int)ctx_.size(); }
    void reset() override { ctx_.clear(); }
    size_t cache_bytes() const override { return 0; }
    std::string describe() const override { return eng_.describe() + ", no KV cache (full recompute per token)"; }
    void append(const int* tokens, int n, float* logits, bool all = false) override {
        validate_decode_append(eng_.config(), cap_, position(), tokens, n);
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
