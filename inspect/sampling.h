// inspect/sampling.h: text from a model, one token at a time, over a KV-cache Decoder (engine.h; Engine::make_decoder makes one).
// Used by `generate` and by the trainer's periodic samples (train_prism.cu), so both sample the same way.
//   sample_token     logits (V) -> a token: temperature (0: greedy argmax, no random draw), then top-k, then top-p
//                    (the nucleus of the top-k), then one draw from the renormalised distribution
//   continue_text    feeds a context, then samples up to n tokens, calling back after each (streaming); when the
//                    cache is full it slides (below)
//   Utf8Stream       bytes of tokens in, printable UTF-8 out: a character split across tokens is held back until
//                    its last byte arrives; bytes that can never be valid UTF-8 become U+FFFD
// The random stream: a 64-bit LCG (Knuth's MMIX constants) whose whole state is one uint64, so the trainer saves
// it in its checkpoints (state_rank0.bin word [8..9]) and a resumed run's samples continue it exactly. One draw
// per sampled token (none when greedy): u = (state >> 11) / 2^53 in [0, 1), and the token is the first v (in
// vocabulary order) whose cumulative weight reaches u x (sum of weights), weights exp((l_v - max l) / T) for the
// tokens kept by top-k / top-p and 0 for the rest. (At temperature 1 with neither, this is the sampler the
// trainer always had, draw for draw.)
// Context longer than the cache (a prompt past T, or generation running on past it): the cache holds at most
// `capacity` positions (the model's T: RoPE positions past T were never trained). A prompt longer than that keeps
// its last `capacity` tokens; when generation fills the cache, the last capacity / 2 tokens are fed again from
// position 0 into the emptied cache and sampling goes on, so every token sees between capacity / 2 and capacity
// tokens of context, at the cost of one re-prefill per capacity / 2 tokens.
// Does not: batch several samples, or apply repetition penalties.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine.h"
#include "util/utf8.h"

struct SamplingOptions {
    double temperature = 1.0;  // 0: greedy
    int top_k = 0;             // 0: all V tokens
    double top_p = 1.0;        // 1: no nucleus cut
    int vocab_limit = 0;       // sample only ids below this (0: all V), e.g. a vocabulary padded past the tokenizer's
};

// The sampling RNG's state for a seed (the trainer's, so `generate --seed S` and a run with --seed S start alike).
inline uint64_t sampling_rng_state(uint64_t seed) { return seed * 0x9E3779B97F4A7C15ull + 1; }
// One draw in [0, 1) with 53 random bits; advances the state.
inline double sampling_uniform(uint64_t& state) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(state >> 11) * 0x1.0p-53;
}

// A token from logits (V) (below s.vocab_limit); `logits` is overwritten with the sampling weights. Greedy (temperature 0): the
// largest logit (the lowest id on a tie), no draw.
inline int sample_token(float* logits, int V, const SamplingOptions& s, uint64_t& rng) {
    if (s.vocab_limit > 0 && s.vocab_limit < V) V = s.vocab_limit;
    const int top = (int)(std::max_element(logits, logits + V) - logits);
    if (s.temperature <= 0) return top;
    const float mx = logits[top], inv_t = (float)(1.0 / s.temperature);
    // The tokens kept: those with the k largest logits (ties to the lower id), then the smallest prefix of them,
    // in decreasing probability, whose mass reaches top_p (at least one).
    std::vector<int> keep;
    const bool cut = (s.top_k > 0 && s.top_k < V) || s.top_p < 1.0;
    if (cut) {
        keep.resize(V);
        std::iota(keep.begin(), keep.end(), 0);
        auto before = [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
        const int k = s.top_k > 0 && s.top_k < V ? s.top_k : V;
        std::partial_sort(keep.begin(), keep.begin() + k, keep.end(), before);
        keep.resize(k);
        if (s.top_p < 1.0) {
            double total = 0;
            for (int v : keep) total += std::exp((double)(logits[v] - mx) * inv_t);
            double mass = 0;
            size_t n = 0;
            while (n < keep.size() && (n == 0 || mass < s.top_p * total))
                mass += std::exp((double)(logits[keep[n]] - mx) * inv_t), n++;
            keep.resize(n);
        }
    }
    double sum = 0;
    if (cut) {
        std::vector<float> w(V, 0.0f);
        for (int v : keep) w[v] = std::exp((logits[v] - mx) * inv_t);
        std::copy(w.begin(), w.end(), logits);
    } else {
        for (int v = 0; v < V; v++) logits[v] = std::exp((logits[v] - mx) * inv_t);
    }
    for (int v = 0; v < V; v++) sum += logits[v];
    double u = sampling_uniform(rng) * sum;
    for (int v = 0; v < V; v++)
        if (logits[v] > 0 && (u -= logits[v]) <= 0) return v;
    for (int v = V - 1; v >= 0; v--)  // rounding left u a hair above 0: the last token with weight
        if (logits[v] > 0) return v;
    return top;
}

// Feeds `context` (at least one token; V the vocabulary) into dec from an empty cache, then samples up to n tokens. After each
// sampled token, emit(token) is called; sampling stops early at `stop` (>= 0, e.g. EOT; it is not emitted).
// Returns the sampled tokens. See the top for what happens when the context or the generation passes capacity.
template <class Emit>
std::vector<int> continue_text(Decoder& dec, int V, std::vector<int> context, int n, const SamplingOptions& s,
                               uint64_t& rng, int stop, Emit emit) {
    const int cap = dec.capacity();
    if (context.empty()) throw std::logic_error("continue_text needs at least one context token");
    if ((int)context.size() > cap) context.erase(context.begin(), context.end() - cap);
    std::vector<float> logits(V);
    std::vector<int> out, history = context;
    dec.reset();
    dec.append(context.data(), (int)context.size(), logits.data());
    for (int i = 0; i < n; i++) {
        const int tok = sample_token(logits.data(), V, s, rng);
        if (tok == stop) break;
        out.push_back(tok), history.push_back(tok);
        emit(tok);
        if (i + 1 == n) break;
        if (dec.position() == cap) {  // full: slide (see the top)
            const int keep = std::max(1, cap / 2);
            dec.reset();
            dec.append(history.data() + history.size() - keep, keep, logits.data());
        } else {
            dec.append(&tok, 1, logits.data());
        }
    }
    return out;
}

// Printable UTF-8 from a stream of bytes cut anywhere (tokens' bytes): push returns what can be printed now;
// finish flushes what is left. Invalid bytes are replaced as Python's decode(errors="replace") does: one U+FFFD
// per maximal subpart (a lead byte and the continuation bytes that fit it, up to the first that does not); an
// incomplete character at the very end is held back until more bytes come, or becomes U+FFFD at finish.
class Utf8Stream {
  public:
    std::string push(const std::string& bytes) {
        pending_ += bytes;
        std::string out;
        const unsigned char* s = (const unsigned char*)pending_.data();
        const size_t n = pending_.size();
        size_t i = 0;
        while (i < n) {
            const size_t k = utf8_seq_len(s, i, n);
            if (k > 0) {
                out.append(pending_, i, k);
                i += k;
                continue;
            }
            const size_t m = valid_prefix(s + i, n - i);
            if (m > 0 && i + m == n) break;  // the start of a character whose last bytes have not come yet
            out += "\xEF\xBF\xBD";
            i += std::max<size_t>(1, m);
        }
        pending_.erase(0, i);
        return out;
    }
    std::string finish() {
        std::string out = pending_.empty() ? "" : "\xEF\xBF\xBD";
        pending_.clear();
        return out;
    }

  private:
    std::string pending_;
    // How many of s[0, n) begin a well-formed sequence without completing it (0: s[0] starts none): the lead
    // byte and the continuation bytes after it that util/utf8.h's rules allow (the second byte's range depends on the
    // lead, the others are 80..BF).
    static size_t valid_prefix(const unsigned char* s, size_t n) {
        const unsigned c = s[0];
        const size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (len == 0) return 0;
        size_t j = 1;
        for (; j < n && j < len; j++) {
            unsigned lo = 0x80, hi = 0xBF;
            if (j == 1) {
                if (c == 0xE0) lo = 0xA0;
                if (c == 0xED) hi = 0x9F;
                if (c == 0xF0) lo = 0x90;
                if (c == 0xF4) hi = 0x8F;
            }
            if (s[j] < lo || s[j] > hi) break;
        }
        return j;
    }
};
