// forward_contract.h: what both engines' forward and both KV-cache decoders accept, and what a backward asks of
// the forward, written once so that the CPU reference and the CUDA engine fail alike, with the same message,
// before any op runs:
//   validate_forward_inputs  B, T within the config, every token id in [0, V) (a bad batch is a ConfigError)
//   validate_decoder_capacity, validate_decode_append   a decoder's capacity in [1, T]; an append within it and
//                            its tokens in [0, V) (ref/cpu_decoder.h, inspect/cuda_decoder.cuh)
//   BackwardGate             a backward needs exactly one preceding forward with targets (a logic_error); the
//                            reference's separate backward needs it, the engines' forward_backward is one call
// Does not: check the config itself (validate_config, model_config.h, does that when a model is built).
#pragma once

#include <stdexcept>
#include <string>

#include "model_config.h"
#include "util/errors.h"

// Throws ConfigError unless 1 <= B, 1 <= T <= c.T, every input id lies in [0, V) and every target id below V
// (a negative target is masked, not an error). inputs, targets (B, T); targets may be null (inference).
inline void validate_forward_inputs(const ModelConfig& c, const int* inputs, const int* targets, int B, int T) {
    if (B < 1 || T < 1 || T > c.T)
        throw ConfigError("forward: need B >= 1 and 1 <= T <= cfg.T = " + std::to_string(c.T) +
                          ", got B=" + std::to_string(B) + " T=" + std::to_string(T));
    const long N = (long)B * T;
    for (long n = 0; n < N; n++)
        if (inputs[n] < 0 || inputs[n] >= c.V || (targets && targets[n] >= c.V))
            throw ConfigError("forward: token id out of range [0, V=" + std::to_string(c.V) + ") at position " +
                              std::to_string(n) + "; check the tokenizer / vocabulary size");
}

// A KV-cache decoder holds 1 .. T positions.
inline void validate_decoder_capacity(const ModelConfig& c, int capacity) {
    if (capacity < 1 || capacity > c.T)
        throw ConfigError("decoder capacity " + std::to_string(capacity) +
                          " must lie in [1, T = " + std::to_string(c.T) + "]");
}
// Appending tokens[0, n) at position pos of a cache of `capacity`: the caller's mistake (a logic_error) when it
// overflows the cache, the input's (a ConfigError) when a token is outside the vocabulary.
inline void validate_decode_append(const ModelConfig& c, int capacity, int pos, const int* tokens, int n) {
    if (n < 1 || pos + n > capacity)
        throw std::logic_error("decoder append: " + std::to_string(n) + " tokens at position " + std::to_string(pos) +
                               " exceed the capacity " + std::to_string(capacity));
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c.V)
            throw ConfigError("token " + std::to_string(tokens[i]) + " is outside the vocabulary (" +
                              std::to_string(c.V) + ")");
}

// Opened by a forward with targets, closed by the backward that uses it: the saved activations belong to one
// forward, and a second backward would add its gradients twice. A forward without targets (inference) keeps
// no loss to differentiate, so it leaves the gate shut.
class BackwardGate {
  public:
    void forward_ran(bool with_targets) { open_ = with_targets; }
    void backward_starts() {
        if (!open_) throw std::logic_error("backward() needs exactly one preceding forward() with targets");
        open_ = false;
    }

  private:
    bool open_ = false;
};
