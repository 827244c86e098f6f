// inspect/sampler.h: the trainer's text samples (--sample-every): a sample at temperature 1 from EOT, drawn by
// inspect/sampling.h's sampler (as `generate` samples) on a KV-cache decoder of the engine, decoded by the run's
// tokenizer. Its body is inspect/sampler.cpp (compiled apart: the trainer compiles this interface alone).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

class Engine;
class Tokenizer;

class TextSampler {
  public:
    // The tokenizer at `path` ("" for the default), loaded up front, for a model of vocabulary V. When it is
    // missing or does not fit V: an error when samples were asked for explicitly (`required`), else a note on
    // stderr and null (no samples).
    static std::unique_ptr<TextSampler> open(const std::string& path, int V, bool required);
    ~TextSampler();

    // n tokens from EOT on the engine's current weights, drawing from `rng` (the run's own RNG state, so that
    // samples are part of the reproducible state). A stop signal ends it after the token in progress once its
    // grace has passed: the text so far, marked.
    std::string sample(Engine& eng, int n, uint64_t& rng, int T) const;

  private:
    explicit TextSampler(std::unique_ptr<Tokenizer> tok);
    std::unique_ptr<Tokenizer> tok_;
};
