// schedule.h: what a model is. A ModelConfig is d, V, T, L, an MLP rule, a norm type, tied or untied
// embeddings, and one LayerSpec {w_l, h_l} per layer. Uniform, Prism (per-layer head counts) and Xformer
// (per-layer widths) models are the same struct with different LayerSpecs, so every other file (reference,
// kernels, checkpoints) has one code path.
//
// Also here: the head schedules (uniform, prism preset, explicit lists), the width schedules (uniform, the
// geometric X solver of PAPERS.md and its V / lambda / 3 siblings, explicit lists), presets, validation,
// and parameter / FLOP / KV-cache accounting. Pure C++17, no CUDA, no I/O beyond warnings on stderr.
//
// Sizes: B batch, T sequence, d model (embedding) width, w_l layer width, h_l heads, head_dim = w_l / h_l,
// hidden_l the SwiGLU intermediate size, D = max(d, max w_l) the residual stream width, V vocabulary, L layers.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

// Every user-facing problem with a config is a ConfigError: one line saying what is wrong and what to do.
// Callers (train_prism, eval_zeroshot, tests) catch it, print it and exit non-zero.
struct ConfigError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

enum class NormType : int { LayerNorm = 0, RMSNorm = 1 };

inline const char* norm_name(NormType n) { return n == NormType::LayerNorm ? "layernorm" : "rmsnorm"; }

struct LayerSpec {
    int width;   // w_l: the layer reads and writes the leading slice [0, w_l) of the residual stream
    int heads;   // h_l: attention heads; head_dim = w_l / h_l
    int head_dim() const { return width / heads; }
};

struct ModelConfig {
    int d = 768;              // embedding width: the embedding writes [0, d), the output head reads [0, d)
    int V = 50257;            // vocabulary size (the GPU pads it to Vp internally; checkpoints store V rows)
    int T = 1024;             // maximum context length
    int h_base = 12;          // the uniform model's head count (Prism: h_L must equal it)
    double mlp_ratio = 8.0 / 3.0;  // SwiGLU hidden_l = mlp_ratio * w_l rounded to a multiple of mlp_multiple
    int mlp_multiple = 32;    //   (8/3 keeps a 3-matrix SwiGLU at the 8 w^2 parameters of a GPT-2 MLP)
    NormType norm = NormType::LayerNorm;
    bool tied = true;         // output head shares the token embedding (V, d)
    bool mup_attn = false;    // attention scale 1/head_dim (muP, Xformer recipe) instead of 1/sqrt(head_dim)
    bool init_width_scale = false;  // scale layer l's init std by sqrt(d / w_l) (Xformer recipe)
    double rope_theta = 10000.0;
    double norm_eps = 1e-5;
    std::vector<LayerSpec> layers;  // L entries

    int L() const { return (int)layers.size(); }
    // SwiGLU intermediate size of a layer of width w. Never below one quantum so tiny widths still have an MLP.
    int hidden(int w) const {
        long q = mlp_multiple > 0 ? mlp_multiple : 1;
        long h = std::lround(mlp_ratio * w / (double)q) * q;
        return (int)std::max<long>(h, q);
    }
    int hidden_of(int l) const { return hidden(layers[l].width); }
    // Residual stream width: wide enough for the embedding and for every layer.
    int D() const {
        int m = d;
        for (const auto& s : layers) m = std::max(m, s.width);
        return m;
    }
    // The final norm covers [0, Df). PAPERS.md says [0, w_L); we take max(w_L, d) so that the output head,
    // which reads [0, d), never sees unnormalised coordinates when the last layer is narrower than d
    // (lambda shapes). Identical to the paper whenever w_L >= d, as in every X shape.
    int Df() const { return layers.empty() ? d : std::max(d, layers.back().width); }
    bool uniform_widths() const {
        for (const auto& s : layers)
            if (s.width != d) return false;
        return true;
    }
};

// ------------------------------------------------------------------------------------------------------
// Parameter layout: one flat block, in this order (checkpoints, the reference and the GPU model all use it).
// Matrices are row-major (out, in) so that y = x W^T, as in PyTorch and llm.c.
//   wte       (V, d)              token embedding (and the output head when tied)
//   per layer l = 0..L-1, with w = w_l, hid = hidden_l:
//     ln1_w   (w)                 pre-attention norm weight
//     ln1_b   (w)                 pre-attention norm bias (LayerNorm only)
//     wqkv    (3 w, w)            rows [0,w) q, [w,2w) k, [2w,3w) v; head h owns rows h*head_dim..+head_dim
//     wo      (w, w)              attention output projection (a residual output projection)
//     ln2_w   (w)
//     ln2_b   (w)                 (LayerNorm only)
//     wfc     (2 hid, w)          rows [0,hid) gate, [hid,2hid) up: SwiGLU(x) = silu(x Wg^T) * (x Wu^T)
//     wproj   (w, hid)            MLP down projection (a residual output projection)
//   lnf_w     (Df)                final norm weight
//   lnf_b     (Df)                (LayerNorm only)
//   lm_head   (V, d)              untied output head only
// ------------------------------------------------------------------------------------------------------
struct ParamTensor {
    std::string name;   // e.g. "h3.wqkv"
    size_t offset;      // in elements, into the flat block
    size_t rows, cols;  // cols == 1 for vectors
    bool is_matrix;     // AdamW weight decay applies to matrices (embeddings included), never to norms
    int layer;          // -1 for wte / lnf / lm_head
    size_t numel() const { return rows * cols; }
};

struct LayerOffsets {
    size_t ln1_w, ln1_b, wqkv, wo, ln2_w, ln2_b, wfc, wproj;  // ln*_b == SIZE_MAX for RMSNorm
};

struct ParamLayout {
    std::vector<ParamTensor> tensors;
    size_t wte = 0, lnf_w = 0, lnf_b = SIZE_MAX, lm_head = SIZE_MAX;
    std::vector<LayerOffsets> layer;
    size_t total = 0;
};

inline ParamLayout param_layout(const ModelConfig& c) {
    ParamLayout p;
    auto add = [&](const std::string& name, size_t rows, size_t cols, bool matrix, int layer) {
        size_t off = p.total;
        p.tensors.push_back({name, off, rows, cols, matrix, layer});
        p.total += rows * cols;
        return off;
    };
    bool ln = c.norm == NormType::LayerNorm;
    p.wte = add("wte", c.V, c.d, true, -1);
    for (int l = 0; l < c.L(); l++) {
        size_t w = c.layers[l].width, hid = c.hidden_of(l);
        std::string h = "h" + std::to_string(l) + ".";
        LayerOffsets o;
        o.ln1_w = add(h + "ln1_w", w, 1, false, l);
        o.ln1_b = ln ? add(h + "ln1_b", w, 1, false, l) : SIZE_MAX;
        o.wqkv = add(h + "wqkv", 3 * w, w, true, l);
        o.wo = add(h + "wo", w, w, true, l);
        o.ln2_w = add(h + "ln2_w", w, 1, false, l);
        o.ln2_b = ln ? add(h + "ln2_b", w, 1, false, l) : SIZE_MAX;
        o.wfc = add(h + "wfc", 2 * hid, w, true, l);
        o.wproj = add(h + "wproj", w, hid, true, l);
        p.layer.push_back(o);
    }
    p.lnf_w = add("lnf_w", c.Df(), 1, false, -1);
    if (ln) p.lnf_b = add("lnf_b", c.Df(), 1, false, -1);
    if (!c.tied) p.lm_head = add("lm_head", c.V, c.d, true, -1);
    return p;
}
