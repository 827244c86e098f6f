// model_config.h: what a model is. A ModelConfig is d, V, T, L, an MLP rule, a norm type, tied or untied
// embeddings, and one LayerSpec per layer: {w_l, h_l} and, each defaulting to today's layer, KV heads kv_l (GQA),
// the MLP's hidden size, an attention window, and whether the layer has attention and an MLP at all. Uniform,
// Prism (per-layer head counts), Xformer (per-layer widths), OpenELM-style (heads and MLP scaled with depth),
// GQA, local/global and pruned (no-op sub-block) models are the same struct with different LayerSpecs, so every
// other file (reference, kernels, decoders, checkpoints, the Hugging Face export) has one code path.
//
// Also here: the parameter layout, presets, building a config from a ModelSpec (with the head and width schedules
// of schedules.h), validation, and parameter / FLOP / KV-cache accounting. Pure C++17, no CUDA, no I/O beyond
// warnings on stderr.
//
// Sizes: B batch, T sequence, d model (embedding) width, w_l layer width, h_l heads, head_dim = w_l / h_l,
// kv_l K/V heads (h_l a multiple of it), hidden_l the SwiGLU intermediate size, D = max(d, max w_l) the residual
// stream width, V vocabulary, L layers.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "errors.h"
#include "schedules.h"

enum class NormType : int { LayerNorm = 0, RMSNorm = 1 };

inline const char* norm_name(NormType n) { return n == NormType::LayerNorm ? "layernorm" : "rmsnorm"; }

// A layer's shape. Only width and heads are needed: {w, h} is today's layer (every head its own K and V, the MLP
// rule's hidden size, global attention, both sub-blocks, rotary embeddings), so LayerSpec{w, h} and every config
// written before the other columns existed mean what they meant. The other columns: 0 means "the default",
// resolved by the accessors. layer_columns.h declares each column once (names, flag, bounds, rule, keys).
struct LayerSpec {
    int width;              // w_l: the layer reads and writes the leading slice [0, w_l) of the residual stream
    int heads;              // h_l: query heads; head_dim = w_l / h_l
    int kv_heads = 0;       // kv_l: K/V heads, each shared by h_l / kv_l query heads (GQA); 0: kv_l = h_l
    int hidden = 0;         // SwiGLU intermediate size; 0: the model's rule (ModelConfig::hidden(w_l))
    int window = 0;         // attention window: key j visible to query i iff i - window < j <= i; 0: global (causal)
    bool attention = true;  // false: no attention sub-block (no ln1, wqkv, wo): Megatron's no-op attention
    bool mlp = true;        // false: no MLP sub-block (no ln2, wfc, wproj)
    bool rope = true;       // false: the layer's attention uses no rotary embedding (NoPE)
    int head_dim() const { return width / heads; }
    int kv() const { return kv_heads ? kv_heads : heads; }
    int kv_width() const { return kv() * head_dim(); }       // columns of k (and of v)
    int qkv_rows() const { return width + 2 * kv_width(); }  // rows of wqkv: q (w), k (kv_w), v (kv_w)
};

struct ModelConfig {
    int d = 768;                   // embedding width: the embedding writes [0, d), the output head reads [0, d)
    int V = 50257;                 // vocabulary size (the GPU pads it to Vp internally; checkpoints store V rows)
    int T = 1024;                  // maximum context length
    int h_base = 12;               // the uniform model's head count (Prism: h_L must equal it)
    double mlp_ratio = 8.0 / 3.0;  // SwiGLU hidden_l = mlp_ratio * w_l rounded to a multiple of mlp_multiple
    int mlp_multiple = 32;         //   (8/3 keeps a 3-matrix SwiGLU at the 8 w^2 parameters of a GPT-2 MLP)
    NormType norm = NormType::LayerNorm;
    bool tied = true;               // output head shares the token embedding (V, d)
    bool mup_attn = false;          // attention scale 1/head_dim (muP, Xformer recipe) instead of 1/sqrt(head_dim)
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
    // Layer l's SwiGLU intermediate size: its own (--mlp), else the rule's; 0 for a layer without an MLP.
    int hidden_of(int l) const {
        const LayerSpec& s = layers[l];
        return !s.mlp ? 0 : s.hidden ? s.hidden : hidden(s.width);
    }
    // Residual stream width: wide enough for the embedding and for every layer.
    int D() const {
        int m = d;
        for (const auto& s : layers) m = std::max(m, s.width);
        return m;
    }
    // The final norm covers [0, Df). docs/papers.md says [0, w_L); we take max(w_L, d) so that the output head,
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
//   per layer l = 0..L-1, with w = w_l, hid = hidden_l, kw = kv_l * head_dim (= w without GQA):
//     ln1_w   (w)                 pre-attention norm weight
//     ln1_b   (w)                 pre-attention norm bias (LayerNorm only)
//     wqkv    (w + 2 kw, w)       rows [0,w) q, [w,w+kw) k, [w+kw,w+2kw) v; head j owns rows j*head_dim..+head_dim
//                                 of its part; query head j reads K/V head j / (h_l / kv_l)
//     wo      (w, w)              attention output projection (a residual output projection)
//                                 (ln1_*, wqkv and wo are absent from a layer without attention)
//     ln2_w   (w)                 (ln2_*, wfc and wproj are absent from a layer without an MLP)
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
        const LayerSpec& s = c.layers[l];
        size_t w = s.width, hid = c.hidden_of(l);
        std::string h = "h" + std::to_string(l) + ".";
        LayerOffsets o = {SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX};
        if (s.attention) {
            o.ln1_w = add(h + "ln1_w", w, 1, false, l);
            o.ln1_b = ln ? add(h + "ln1_b", w, 1, false, l) : SIZE_MAX;
            o.wqkv = add(h + "wqkv", s.qkv_rows(), w, true, l);
            o.wo = add(h + "wo", w, w, true, l);
        }
        if (s.mlp) {
            o.ln2_w = add(h + "ln2_w", w, 1, false, l);
            o.ln2_b = ln ? add(h + "ln2_b", w, 1, false, l) : SIZE_MAX;
            o.wfc = add(h + "wfc", 2 * hid, w, true, l);
            o.wproj = add(h + "wproj", w, hid, true, l);
        }
        p.layer.push_back(o);
    }
    p.lnf_w = add("lnf_w", c.Df(), 1, false, -1);
    if (ln) p.lnf_b = add("lnf_b", c.Df(), 1, false, -1);
    if (!c.tied) p.lm_head = add("lm_head", c.V, c.d, true, -1);
    return p;
}

// ------------------------------------------------------------------------------------------------------
// Presets and building a config from what the user asked for
// ------------------------------------------------------------------------------------------------------

struct Preset {
    const char* name;
    int d, L, h_base, T;
    double mlp_ratio;
    NormType norm;
    bool tied;
    bool xformer_recipe;  // RMSNorm, untied, SwiGLU 4w, 16 heads, muP attention scale, init scaled by sqrt(d/w_l)
    const char* what;
};

// Prism sizes: nanoGPT + RoPE + SwiGLU (8/3 d keeps GPT-2's MLP parameter count), tied GPT-2 vocabulary,
// head_dim 64. Xformer sizes: the released recipe, sequence 4096. tiny: trains on two CPU cores in minutes.
inline const std::vector<Preset>& presets() {
    static const std::vector<Preset> p = {
        {"tiny", 128, 6, 4, 128, 8.0 / 3.0, NormType::LayerNorm, true, false, "CPU-sized model for the default run"},
        {"124M", 768, 12, 12, 1024, 8.0 / 3.0, NormType::LayerNorm, true, false, "Prism 124M"},
        {"354M", 1024, 24, 16, 1024, 8.0 / 3.0, NormType::LayerNorm, true, false, "Prism 354M"},
        {"757M", 1536, 24, 24, 1024, 8.0 / 3.0, NormType::LayerNorm, true, false, "Prism 757M"},
        {"200M", 640, 16, 16, 4096, 4.0, NormType::RMSNorm, false, true, "Xformer 200M"},
        {"500M", 960, 24, 16, 4096, 4.0, NormType::RMSNorm, false, true, "Xformer 500M"},
        {"1B", 1280, 32, 16, 4096, 4.0, NormType::RMSNorm, false, true, "Xformer 1B"},
        {"2B", 1600, 40, 16, 4096, 4.0, NormType::RMSNorm, false, true, "Xformer 2B"},
    };
    return p;
}

inline const Preset& find_preset(const std::string& name) {
    std::string known;
    for (const auto& p : presets()) {
        if (name == p.name) return p;
        known += std::string(known.empty() ? "" : ", ") + p.name;
    }
    throw ConfigError("unknown preset '" + name + "'; choose one of " + known);
}

// What the user asked for: a preset, schedules, and overrides (0 / empty = keep the preset's value).
// AdamW's hyperparameters, as the engines take them (engine.h's adamw_step) and train_prism's flags set them
// (--beta1, --beta2, --adam-eps, --wd): here rather than in engine.h so that the trainer's options need no engine.
struct OptimizerHyper {
    double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

struct ModelSpec {
    std::string preset = "tiny";
    std::string heads = "uniform";     // uniform | prism | list ("3x3,6x3,12x6" or "3,3,3,6,...")
    std::string widths = "uniform";    // uniform | x | v | lambda | 3 | list of widths
    std::string kv_heads = "uniform";  // uniform (kv_l = h_l) | mqa | gqa:G | list (schedules.h's kv_schedule)
    std::string mlp = "uniform";       // uniform (--mlp-ratio) | openelm[:LO-HI] | list of hidden sizes
    std::string window = "global";     // global | local:W | local:W,N:M | list (0 = global)
    std::string no_attention, no_mlp;  // layer numbers from 1 ("3,5,7-9") whose sub-block is dropped
    std::string no_rope;               // layer numbers from 1 whose attention has no rotary embedding (NoPE)
    std::string match;                 // "" | mlp: scale that column until the layers match the uniform model's
    WidthShape shape;                  // turning layer, bottleneck ratio, quantum for the solver
    int d = 0, L = 0, h_base = 0, T = 0, V = 0;
    int head_dim = 0;  // fixed head_dim under a width schedule (instead of a fixed head count)
    double mlp_ratio = 0;
    int mlp_multiple = 0;
    std::string norm;             // "" | layernorm | rmsnorm
    int untied = -1;              // -1 preset, 0 tied, 1 untied
    bool allow_ablation = false;  // permit Prism schedules that break monotonicity or h_L = h_base
};

inline NormType parse_norm(const std::string& s) {
    if (s == "layernorm" || s == "ln") return NormType::LayerNorm;
    if (s == "rmsnorm" || s == "rms") return NormType::RMSNorm;
    throw ConfigError("unknown norm '" + s + "'; use layernorm or rmsnorm");
}

// layer_columns.h (included at the end of this file) declares the per-layer columns; these use its table.
inline void validate_layer_columns(const ModelConfig& c);
inline void build_layer_columns(const ModelSpec& s, ModelConfig& c);
inline void check_layer_flags(const ModelSpec& s, int L);

// Checks that hold for every model that can run: positive sizes, then every layer column's bounds and rule (h_l
// divides w_l, even head_dim: RoPE rotates pairs, ...). Used on built configs and on configs read back from
// checkpoints and config.json.
inline void validate_config(const ModelConfig& c) {
    auto pos = [](long v, const char* what) {
        if (v <= 0) throw ConfigError(std::string(what) + " must be positive, got " + std::to_string(v));
    };
    pos(c.d, "d");
    pos(c.V, "V (vocabulary)");
    pos(c.T, "T (sequence length)");
    pos(c.L(), "L (layers)");
    pos(c.h_base, "h_base (--heads)");
    if (!(c.mlp_ratio >= 1e-3 && c.mlp_ratio <= 64)) throw ConfigError("--mlp-ratio must lie in [0.001, 64]");
    if (c.d > 65536 || c.V > 1 << 24 || c.T > 1 << 20)
        throw ConfigError("model sizes out of range (d <= 65536, V <= 2^24, T <= 2^20)");
    validate_layer_columns(c);  // every column's bounds and rule (layer_columns.h)
}

// Whether every layer's MLP hidden size is the --mlp-ratio rule's (no --mlp list or scaling, no --match).
inline bool rule_hidden(const ModelConfig& c) {
    for (int l = 0; l < c.L(); l++)
        if (c.layers[l].mlp && c.hidden_of(l) != c.hidden(c.layers[l].width)) return false;
    return true;
}

inline void match_parameters(ModelConfig& c, const std::string& column);

// Builds and validates the model. Design-rule violations are appended to `warnings` (not errors: ablations
// break them on purpose); anything that cannot run, or a Prism schedule breaking a hard constraint without
// allow_ablation, throws ConfigError.
inline ModelConfig build_config(const ModelSpec& s, std::vector<std::string>& warnings) {
    const Preset& p = find_preset(s.preset);
    ModelConfig c;
    c.d = s.d ? s.d : p.d;
    c.T = s.T ? s.T : p.T;
    c.V = s.V ? s.V : 50257;
    c.h_base = s.h_base ? s.h_base : p.h_base;
    c.mlp_ratio = s.mlp_ratio > 0 ? s.mlp_ratio : p.mlp_ratio;
    if (s.mlp_multiple) c.mlp_multiple = s.mlp_multiple;
    c.norm = s.norm.empty() ? p.norm : parse_norm(s.norm);
    c.tied = s.untied < 0 ? p.tied : s.untied == 0;
    c.mup_attn = p.xformer_recipe;
    c.init_width_scale = p.xformer_recipe;
    int L = s.L ? s.L : p.L;
    for (int v : {c.d, L, c.h_base, c.T, c.V, s.head_dim, s.mlp_multiple})
        if (v < 0) throw ConfigError("sizes must be positive");
    if (L <= 0) throw ConfigError("L (--layers) must be positive");
    if (L > 10000) throw ConfigError("L (--layers) is out of range");
    check_layer_flags(s, L);  // every column's flag text, as the flag parser checks it, and its length

    // Widths.
    std::vector<int> w;
    bool width_schedule = s.widths != "uniform";
    if (!width_schedule) {
        w.assign(L, c.d);
    } else if (s.widths == "x" || s.widths == "v" || s.widths == "lambda" || s.widths == "3") {
        WidthShape sh = s.shape;
        sh.name = s.widths;
        // Every width a multiple of what the head rule needs (a fixed head_dim, or h_base heads of even head_dim),
        // so that no solved width is refused below: lcm(quantum, that).
        const long need = s.head_dim > 0 ? s.head_dim : 2L * c.h_base, q = sh.quantum;
        long g = q, b = need;
        while (b) g %= b, std::swap(g, b);
        if (q / g * need > 65536)
            throw ConfigError("width quantum " + std::to_string(q) + " and the head rule's " + std::to_string(need) +
                              " have no common multiple below 65536");
        sh.quantum = (int)(q / g * need);
        w = solve_widths(sh, c.d, L, c.mlp_ratio);
    } else if (s.widths.find_first_not_of("0123456789,xX* ") == std::string::npos) {
        w = parse_layer_list(s.widths, "width schedule");
        if ((int)w.size() != L)
            throw ConfigError("width schedule has " + std::to_string(w.size()) + " entries but the model has " +
                              std::to_string(L) + " layers; give one width per layer");
        for (int l = 0; l < L; l++)
            if (w[l] % s.shape.quantum != 0 && w[l] != c.d)
                throw ConfigError("layer " + std::to_string(l + 1) + ": width " + std::to_string(w[l]) +
                                  " is not a multiple of the width quantum " + std::to_string(s.shape.quantum) +
                                  "; round it or set --width-quantum");
    } else {
        throw ConfigError("unknown width schedule '" + s.widths + "'; use uniform, x, v, lambda, 3 or a list");
    }

    // Baseline head count of each layer: a fixed head_dim, or a fixed head count (h_base).
    std::vector<int> base(L);
    for (int l = 0; l < L; l++) {
        if (s.head_dim > 0) {
            if (w[l] % s.head_dim != 0)
                throw ConfigError("layer " + std::to_string(l + 1) + ": width " + std::to_string(w[l]) +
                                  " is not a multiple of --head-dim " + std::to_string(s.head_dim));
            base[l] = w[l] / s.head_dim;
        } else {
            // The model's own rule, with or without a width schedule: h_base heads in every layer (the Xformer
            // presets' h_base is the paper's 16). Solved widths are multiples of 2 h_base (above).
            base[l] = c.h_base;
        }
    }

    // Heads.
    std::vector<int> h(L);
    bool head_schedule = s.heads != "uniform";
    if (!head_schedule) {
        h = base;
    } else if (s.heads == "prism") {
        std::vector<int> m = prism_multipliers(L);
        for (int l = 0; l < L; l++) {
            if (base[l] % m[l] != 0)
                throw ConfigError("prism preset: layer " + std::to_string(l + 1) + " needs " + std::to_string(base[l]) +
                                  " / " + std::to_string(m[l]) + " heads, which is not whole; give -s as a list");
            h[l] = base[l] / m[l];
        }
    } else if (s.heads == "openelm" || s.heads.compare(0, 8, "openelm:") == 0) {
        // OpenELM's head scaling at Prism's fixed layer width: heads grow linearly with depth from LO to HI times
        // the baseline, each rounded to the nearest count that divides w_l with an even head_dim.
        const auto r = parse_range(s.heads, "openelm", kOpenElmHeads[0], kOpenElmHeads[1], "head schedule");
        for (int l = 0; l < L; l++) h[l] = nearest_head_count(layerwise(r.first, r.second, l, L) * base[l], w[l]);
    } else if (s.heads.find_first_not_of("0123456789,xX* ") == std::string::npos) {
        h = parse_layer_list(s.heads, "head schedule");
        if ((int)h.size() != L)
            throw ConfigError("head schedule has " + std::to_string(h.size()) + " entries but the model has " +
                              std::to_string(L) + " layers; give one head count per layer (e.g. 3x3,6x3,12x6)");
    } else {
        throw ConfigError("unknown head schedule '" + s.heads +
                          "'; use uniform, prism, openelm, openelm:LO-HI or a list like 3x3,6x3,12x6");
    }
    // The other columns, each from its flag (layer_columns.h).
    c.layers.resize(L);
    for (int l = 0; l < L; l++) c.layers[l] = {w[l], h[l]};
    build_layer_columns(s, c);
    validate_config(c);
    if (!s.match.empty()) match_parameters(c, s.match);
    for (int l = 0; l < L; l++)
        if (c.layers[l].window >= c.T)
            warnings.push_back("layer " + std::to_string(l + 1) + ": window " + std::to_string(c.layers[l].window) +
                               " is not below T = " + std::to_string(c.T) + ", so the layer attends globally");
    // Heads narrower than 16 barely learn (at head_dim 2 to 4 a tiny model's attention stays uniform).
    std::string narrow;
    int narrowest = 1 << 30;
    for (int l = 0; l < L; l++)
        if (c.layers[l].head_dim() < 16)
            narrow += (narrow.empty() ? "" : ", ") + std::to_string(l + 1),
                narrowest = std::min(narrowest, c.layers[l].head_dim());
    if (!narrow.empty())
        warnings.push_back("layer" + std::string(narrow.find(',') == std::string::npos ? " " : "s ") + narrow +
                           ": head_dim below 16 (down to " + std::to_string(narrowest) +
                           "); such narrow heads learn little: use fewer heads (--heads, -s) or --head-dim");

    // A head schedule that is the uniform one (-s prism below 4 layers) would be compared with itself unawares.
    if (head_schedule && h == base)
        warnings.push_back("head schedule '" + s.heads +
                           "' gives every layer its baseline heads: this is the uniform "
                           "model" +
                           (s.heads == "prism" ? " (the Prism schedule needs 4 or more layers; this model has " +
                                                     std::to_string(L) + ")"
                                               : std::string()));
    // Prism constraints, on heads relative to each layer's baseline (with uniform widths: h_l itself).
    if (head_schedule) {
        auto rel = [&](int l) { return (double)h[l] / base[l]; };
        for (int l = 1; l < L; l++)
            if (rel(l) < rel(l - 1) && !s.allow_ablation)
                throw ConfigError("head schedule decreases at layer " + std::to_string(l + 1) + " (" +
                                  std::to_string(h[l - 1]) + " -> " + std::to_string(h[l]) +
                                  "); Prism needs h_1 <= ... <= h_L (pass --allow-ablation to run it anyway)");
        if (h[L - 1] != base[L - 1] && !s.allow_ablation)
            throw ConfigError("head schedule ends at " + std::to_string(h[L - 1]) + " heads but h_base is " +
                              std::to_string(base[L - 1]) + "; Prism needs h_L = h_base (pass --allow-ablation)");
    }
    // The paper's design rules are Prism's; a rule of another paper (openelm) is not held to them.
    if (head_schedule && s.heads.compare(0, 7, "openelm") != 0) {
        int at_base = 0;
        for (int l = 0; l < L; l++) at_base += h[l] == base[l];
        if (2 * at_base < L)
            warnings.push_back("design rule: only " + std::to_string(at_base) + " of " + std::to_string(L) +
                               " layers use h_base; the paper keeps at least L/2");
        // Staircase: every run of equal heads before the final h_base run lasts 2 to 4 layers.
        for (int a = 0; a < L;) {
            int b = a;
            while (b < L && h[b] == h[a] && base[b] == base[a]) b++;
            if (b < L && (b - a < 2 || b - a > 4))
                warnings.push_back("design rule: layers " + std::to_string(a + 1) + ".." + std::to_string(b) +
                                   " hold " + std::to_string(h[a]) + " heads for " + std::to_string(b - a) +
                                   " layers; the paper holds each step for 2 to 4");
            a = b;
        }
    }
    return c;
}

// The uniform model a schedule is compared with: same d, L, T, V, MLP rule, norm and head; every layer d wide
// with h_base heads.
inline ModelConfig uniform_baseline(const ModelConfig& c) {
    ModelConfig u = c;
    for (auto& s : u.layers) s = {c.d, c.h_base};
    return u;
}

// ------------------------------------------------------------------------------------------------------
// Accounting. FLOPs are forward FLOPs per token (multiply-add = 2): every matmul, plus attention's QK^T and AV
// over the keys a query attends to, counted as the full square: T keys at context T for a global layer (4 T w_l
// per layer, the convention of PaLM's MFU formula and llm.c; causal masking halves the useful part), min(W, T)
// for a layer of window W. GQA does not change them (every query head still scores every key it attends to).
// Training FLOPs are 3x forward. KV-cache bytes are for bf16 K and V: 2 * 2 * kv_l * head_dim per layer per
// token cached (w_l without GQA, 0 without attention); at context T a window layer caches only its last
// min(W, T) tokens, so `kv_cache_bytes` (one sequence of T tokens) is where a window saves.
//
// Two counts, because the Xformer paper matches parameters after discounting "dead" weights: the first layer's
// input columns beyond d of its first matrix (inputs the embedding never writes: wqkv's, or wfc's in a layer
// without attention) and the last layer's output rows beyond d of its last matrix (outputs the head never reads:
// wproj's, or wo's in a layer without an MLP). `matched_params` and `flops_per_token` discount them as the paper
// does; `params` and `dense_flops_per_token` count everything a dense implementation stores and executes (use
// these for memory and MFU). For models with w_1, w_L <= d (uniform, Prism) the two counts are equal.
// ------------------------------------------------------------------------------------------------------

struct LayerCost {
    int width, heads, kv_heads, head_dim, hidden, window;  // window 0: global
    bool attention, mlp;
    long long params;              // norms + wqkv + wo + wfc + wproj (those the layer has)
    long long matrix_params;       // wqkv + wo + wfc + wproj
    long long dead_params;         // of those, discounted by the paper's count (first and last layer only)
    double flops_per_token;        // 2 (matrix_params - dead_params) + 4 keys w, keys = T or min(W, T)
    double dense_flops_per_token;  // 2 matrix_params + 4 keys w
    long long kv_bytes_per_token;  // per token cached
    long long kv_cache_bytes;      // one sequence at context T: kv_bytes_per_token x keys
};

struct Accounting {
    std::vector<LayerCost> layers;
    long long params = 0;          // everything: embeddings, layers, final norm, head
    long long layer_params = 0;    // all layer tensors
    long long matched_params = 0;  // as the Xformer paper counts: layer matrices minus dead weights
    double flops_per_token = 0;    // forward, paper count, including the output head's 2 d V
    double dense_flops_per_token = 0;
    long long kv_bytes_per_token = 0;
    long long kv_cache_bytes = 0;  // one sequence at context T
    double avg_width = 0;
};

inline Accounting account(const ModelConfig& c) {
    Accounting a;
    a.params = (long long)param_layout(c).total;
    int norm_vecs = c.norm == NormType::LayerNorm ? 2 : 1;
    int L = c.L();
    for (int l = 0; l < L; l++) {
        const LayerSpec& s = c.layers[l];
        long long w = s.width, hid = c.hidden_of(l), qkv = s.attention ? s.qkv_rows() : 0;
        const long long keys = !s.attention ? 0 : s.window ? std::min(s.window, c.T) : c.T;
        LayerCost lc;
        lc.width = (int)w;
        lc.heads = s.heads;
        lc.kv_heads = s.kv();
        lc.head_dim = s.head_dim();
        lc.hidden = (int)hid;
        lc.window = s.window;
        lc.attention = s.attention, lc.mlp = s.mlp;
        const long long attn = s.attention ? qkv * w + w * w : 0, mlp = 3 * w * hid;
        lc.matrix_params = attn + mlp;
        lc.params = lc.matrix_params + ((int)s.attention + (int)s.mlp) * norm_vecs * w;
        lc.dead_params = 0;
        if (l == 0 && w > c.d) lc.dead_params += (s.attention ? qkv : 2 * hid) * (w - c.d);
        if (l == L - 1 && w > c.d) lc.dead_params += (s.mlp ? hid : w) * (w - c.d);
        lc.flops_per_token = 2.0 * (lc.matrix_params - lc.dead_params) + 4.0 * keys * w;
        lc.dense_flops_per_token = 2.0 * lc.matrix_params + 4.0 * keys * w;
        lc.kv_bytes_per_token = s.attention ? 2 * 2 * (long long)s.kv_width() : 0;
        lc.kv_cache_bytes = lc.kv_bytes_per_token * keys;
        a.layers.push_back(lc);
        a.layer_params += lc.params;
        a.matched_params += lc.matrix_params - lc.dead_params;
        a.flops_per_token += lc.flops_per_token;
        a.dense_flops_per_token += lc.dense_flops_per_token;
        a.kv_bytes_per_token += lc.kv_bytes_per_token;
        a.kv_cache_bytes += lc.kv_cache_bytes;
        a.avg_width += (double)w / L;
    }
    a.flops_per_token += 2.0 * c.d * c.V;
    a.dense_flops_per_token += 2.0 * c.d * c.V;
    return a;
}

// --match mlp: the parameter match of a schedule to its uniform baseline, as the width solver matches the X shape's:
// every layer's SwiGLU hidden size (as built: the rule's, --mlp's or OpenELM's) is scaled by one factor f and rounded
// to the nearest mlp_multiple, and f is chosen so that the layer matrices (the paper's count, matched_params) come
// closest to the uniform model's. So a schedule that saves parameters elsewhere (GQA's smaller wqkv, dropped
// attention, OpenELM's small early MLPs) spends them on MLP width, and one that spends more gives them back, keeping
// the MLP's profile across depth. Each layer's size stays within one multiple of f times its own, and the match is
// within one rounding step of one layer's MLP (3 w_l mlp_multiple parameters).
inline void match_parameters(ModelConfig& c, const std::string& column) {
    if (column != "mlp") throw ConfigError("unknown --match column '" + column + "'; use mlp (the MLP hidden sizes)");
    const long long target = account(uniform_baseline(c)).matched_params;
    std::vector<int> h0(c.L(), 0);
    for (int l = 0; l < c.L(); l++) h0[l] = c.hidden_of(l);
    if (std::all_of(h0.begin(), h0.end(), [](int h) { return h == 0; }))
        throw ConfigError("--match mlp: no layer has an MLP to scale; drop --match or keep an MLP (--no-mlp)");
    const long q = std::max(1, c.mlp_multiple);
    auto apply = [&](double f) {
        for (int l = 0; l < c.L(); l++)
            if (h0[l])
                c.layers[l].hidden = (int)std::min<long>(1 << 20, std::max<long>(q, std::lround(f * h0[l] / q) * q));
        return account(c).matched_params;
    };
    double lo = 1e-3, hi = 1e3;
    if (apply(lo) > target)
        throw ConfigError("--match mlp: even MLPs of " + std::to_string(q) +
                          " leave the layers above the uniform model's parameters; match another way");
    if (apply(hi) < target)
        throw ConfigError("--match mlp: the MLPs would need more than 2^20 hidden units to match the uniform model");
    for (int i = 0; i < 100; i++) {  // the smallest f whose count reaches the target (the count grows with f)
        const double mid = std::sqrt(lo * hi);
        (apply(mid) >= target ? hi : lo) = mid;
    }
    const long long below = apply(lo), above = apply(hi);
    long long now = apply(target - below <= above - target ? lo : hi);
    // Equal hidden sizes cross their rounding boundaries together (a step of L layers); from the last layer back,
    // move a layer's hidden one multiple up or down while that brings the count closer (each stays within one
    // multiple of the factor's).
    for (int l = c.L() - 1; l >= 0; l--) {
        if (!h0[l]) continue;
        for (int step : {(int)q, -(int)q}) {
            const int was = c.layers[l].hidden;
            if (was + step < q || was + step > 1 << 20) continue;
            c.layers[l].hidden = was + step;
            const long long next = account(c).matched_params;
            if (std::llabs(next - target) < std::llabs(now - target)) {
                now = next;
                break;
            }
            c.layers[l].hidden = was;
        }
    }
    validate_config(c);  // --plan shows the match reached
}

#include "layer_columns.h"  // the per-layer columns, declared once
