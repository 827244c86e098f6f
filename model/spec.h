// model/spec.h: what the user asks for, before a model is built: the presets (sizes and recipes) and ModelSpec, a
// preset with its schedules and overrides as the flags give them (run/model_flags.h); and the model built from it
// (build_config, below; its body is model/build.cpp, compiled apart: the Makefile's LIB).
#pragma once

#include <string>
#include <vector>

#include "model_config.h"
#include "util/errors.h"

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

// A width schedule's shape (model/schedules.h's solve_widths).
struct WidthShape {
    std::string name = "x";   // x, 3, v, lambda
    double turn_frac = 0.75;  // k = round(turn_frac * L) when k == 0
    int k = 0;                // 1-indexed turning layer (x and 3)
    double ratio = 0.3;       // narrowest width / d
    int quantum = 32;         // widths are rounded to multiples of this
};

// What the user asked for: a preset, schedules, and overrides (0 / empty = keep the preset's value).
struct ModelSpec {
    std::string preset = "tiny";
    std::string heads = "uniform";     // uniform | prism | list ("3x3,6x3,12x6" or "3,3,3,6,...")
    std::string widths = "uniform";    // uniform | x | v | lambda | 3 | list of widths
    std::string kv_heads = "uniform";  // uniform (kv_l = h_l) | mqa | gqa:G | list (model/schedules.h's kv_schedule)
    std::string mlp = "uniform";       // uniform (--mlp-ratio) | openelm[:LO-HI] | list of hidden sizes
    std::string window = "global";     // global | local:W | local:W,N:M | list (0 = global)
    std::string no_attention, no_mlp;  // layer numbers from 1 ("3,5,7-9") whose sub-block is dropped
    std::string no_rope;               // layer numbers from 1 whose attention has no rotary embedding (NoPE)
    std::string mixer = "attention";   // attention | gdn | gdn:N:M | list of words (model/schedules.h's mixer_schedule)
    std::string match;                 // "" | mlp: scale that column until the layers match the uniform model's
    WidthShape shape;                  // turning layer, bottleneck ratio, quantum for the solver
    int d = 0, L = 0, h_base = 0, T = 0, V = 0;
    int head_dim = 0;  // fixed head_dim under a width schedule (instead of a fixed head count)
    double mlp_ratio = 0;
    int mlp_multiple = 0;
    std::string norm;             // "" | layernorm | rmsnorm
    int untied = -1;              // -1 preset, 0 tied, 1 untied
    bool allow_ablation = false;  // permit Prism schedules that break monotonicity or h_L = h_base
    std::string param = "sp";     // sp (standard) | mup (docs/model.md's parameterisation table)
    int mup_base_d = 0;           // --param mup's base width (0: the preset's d)
};

inline NormType parse_norm(const std::string& s) {
    if (s == "layernorm" || s == "ln") return NormType::LayerNorm;
    if (s == "rmsnorm" || s == "rms") return NormType::RMSNorm;
    throw ConfigError("unknown norm '" + s + "'; use layernorm or rmsnorm");
}

// A model built from a ModelSpec: the preset's sizes, the head and width schedules (model/schedules.h), every
// per-layer column (model/layer_columns.h), the design rules' warnings, and --match's parameter match to the
// uniform model.

// The preset's sizes under the spec's overrides, and L; the layers are still to be built.
ModelConfig preset_sizes(const ModelSpec& s, int& L);

// The width of every layer: uniform (d), a solved shape (x, v, lambda, 3) or a list.
std::vector<int> build_widths(const ModelSpec& s, const ModelConfig& c, int L);

// The baseline head count of each layer: a fixed head_dim's, or the model's own rule, h_base heads in every layer
// with or without a width schedule (the Xformer presets' h_base is the paper's 16; solved widths are multiples of
// 2 h_base).
std::vector<int> base_heads(const ModelSpec& s, const ModelConfig& c, const std::vector<int>& w);

// The head count of every layer: the baseline (uniform), the Prism preset, OpenELM's scaling or a list.
std::vector<int> build_heads(const ModelSpec& s, const std::vector<int>& base, const std::vector<int>& w);

// "layer 3" or "layers 2, 5": the layers of a warning.
std::string layers_text(const std::vector<int>& ls);

// What a built model warns of, once each and only where it holds: windows that do not cut, heads too narrow to
// learn (in layers that have attention), no attention anywhere.
void model_warnings(const ModelConfig& c, std::vector<std::string>& warnings);

// The Prism paper's constraints and design rules on a head schedule, relative to each layer's baseline heads (with
// uniform widths: h_l itself): the constraints throw unless allow_ablation, the rules warn.
void check_head_schedule(const ModelSpec& s, const std::vector<int>& base, const std::vector<int>& h,
                         std::vector<std::string>& warnings);

// Builds and validates the model. Design-rule violations are appended to `warnings` (not errors: ablations
// break them on purpose); anything that cannot run, or a Prism schedule breaking a hard constraint without
// allow_ablation, throws ConfigError.
ModelConfig build_config(const ModelSpec& s, std::vector<std::string>& warnings);

// --match mlp: the parameter match of a schedule to its uniform baseline, as the width solver matches the X shape's:
// every layer's SwiGLU hidden size (as built: the rule's, --mlp's or OpenELM's) is scaled by one factor f and rounded
// to the nearest mlp_multiple, and f is chosen so that the layer matrices (the paper's count, matched_params) come
// closest to the uniform model's. So a schedule that saves parameters elsewhere (GQA's smaller wqkv, dropped
// attention, OpenELM's small early MLPs) spends them on MLP width, and one that spends more gives them back, keeping
// the MLP's profile across depth. Each layer's size stays within one multiple of f times its own, and the match is
// within one rounding step of one layer's MLP (3 w_l mlp_multiple parameters).
void match_parameters(ModelConfig& c, const std::string& column);
