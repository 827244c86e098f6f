// inspect/sampler.cpp: TextSampler (inspect/sampler.h).
#include "inspect/sampler.h"

#include <cstdio>
#include <vector>

#include "engine.h"
#include "inspect/sampling.h"
#include "run/stop_signal.h"
#include "text/tokenizer.h"

TextSampler::TextSampler(std::unique_ptr<Tokenizer> tok) : tok_(std::move(tok)) {}
TextSampler::~TextSampler() = default;

std::unique_ptr<TextSampler> TextSampler::open(const std::string& path, int V, bool required) {
    try {
        std::unique_ptr<Tokenizer> tok(new Tokenizer(Tokenizer::load(tokenizer_path(path))));
        if (tok->vocab_size() > V)  // samples start from EOT, which such a model cannot read
            throw ConfigError("the tokenizer's " + std::to_string(tok->vocab_size()) +
                              " tokens do not fit the model's vocabulary V = " + std::to_string(V));
        return std::unique_ptr<TextSampler>(new TextSampler(std::move(tok)));
    } catch (const std::runtime_error& e) {
        if (required) throw;  // asked for samples explicitly: a missing tokenizer is an error
        fprintf(stderr, "note: no text samples (%s)\n", e.what());
        return nullptr;
    }
}

std::string TextSampler::sample(Engine& eng, int n, uint64_t& rng, int T) const {
    std::unique_ptr<Decoder> dec = eng.make_decoder(T);
    struct Stopped {};
    std::vector<int> got;
    StopGrace grace;
    try {
        continue_text(*dec, eng.config().V, {tok_->eot()}, n, SamplingOptions(), rng, tok_->eot(), [&](int t) {
            got.push_back(t);
            if (grace.expired()) throw Stopped();
        });
    } catch (const Stopped&) {
        return tok_->decode(got) + " [sample cut short by the stop signal]";
    }
    return tok_->decode(got);
}
