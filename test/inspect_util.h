// inspect_util.h: what the tests of generate, analyze and report share: the small uniform, Prism, X and lambda
// configurations, random weights for them, and a token sequence.
#pragma once

#include <string>
#include <vector>

#include "ref/init.h"
#include "model/spec.h"

// Small models of every shape the decoders must handle: several head_dims in one model (prism), a stream wider
// than d with RMSNorm, untied head and muP scale (x), a last layer narrower than d (lambda), and issue 28's layer
// columns (shapes): GQA, MQA, windows of 3 and 5 tokens (below the T of any test, so a window's cache wraps) beside
// global layers, a window past T, an own MLP width, a layer without attention and one without an MLP; and NoPE
// layers (nope) beside rotary ones. V and T as given.
inline ModelConfig inspect_config(const std::string& kind, int V = 37, int T = 16) {
    ModelConfig c;
    c.V = V, c.T = T, c.mlp_multiple = 32;
    if (kind == "uniform") {
        c.d = 32, c.h_base = 2;
        c.layers = {{32, 2}, {32, 2}};
    } else if (kind == "prism") {  // head_dim 48, 48, 24, 12
        c.d = 48, c.h_base = 4;
        c.layers = {{48, 1}, {48, 1}, {48, 2}, {48, 4}};
    } else if (kind == "x") {
        c.d = 32, c.h_base = 4;
        c.layers = {{64, 4}, {32, 4}, {64, 4}};
        c.norm = NormType::RMSNorm, c.tied = false, c.mup_attn = true, c.init_width_scale = true;
        c.mlp_ratio = 4.0;
    } else if (kind == "shapes") {  // {width, heads, kv_heads, hidden, window, attention, mlp}
        c.d = 48, c.h_base = 4;
        c.layers = {{48, 4, 2, 0, 3},        {48, 4, 1, 0, 0, true, false}, {48, 2, 0, 64, 5},
                    {48, 4, 0, 0, 0, false}, {48, 4, 1, 0, 1000},           {48, 4, 2}};
    } else if (kind == "nope") {  // NoPE in layers 1 and 3 (GQA with a window of 3; MQA), a rotary layer between
        c.d = 48, c.h_base = 4;
        c.layers = {{48, 4, 2, 0, 3}, {48, 4}, {48, 4, 1}};
        c.layers[0].rope = c.layers[2].rope = false;
    } else if (kind == "hybrid") {  // Gated DeltaNet, attention, a narrower gdn layer without an MLP, attention
        c.d = 32, c.h_base = 2;
        c.layers = {{32, 2}, {32, 2}, {16, 2, 0, 0, 0, true, false}, {32, 4}};
        c.layers[0].mixer = c.layers[2].mixer = 1;
    } else {  // "lambda"
        c.d = 32, c.h_base = 2;
        c.layers = {{32, 2}, {16, 2}};
    }
    validate_config(c);
    return c;
}

// GPT-2 init scaled up 20x, so that attention is far from uniform and logits spread over several units: a
// cache that mixed up positions or heads would move them by O(1), not by rounding.
inline std::vector<float> inspect_params(const ModelConfig& c, uint64_t seed) {
    const ParamLayout layout = param_layout(c);
    std::vector<float> p(layout.total);
    ref::init_params(p.data(), c, layout, seed);
    for (const ParamTensor& t : layout.tensors)
        if (t.is_matrix)
            for (size_t i = 0; i < t.numel(); i++) p[t.offset + i] *= 20.0f;
    return p;
}

inline std::vector<int> inspect_tokens(const ModelConfig& c, int n, uint64_t seed) {
    ref::Rng rng(seed);
    std::vector<int> t(n);
    for (int& x : t) x = (int)(rng.next() % c.V);
    return t;
}
