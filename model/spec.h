// model/spec.h: what the user asks for, before a model is built: the presets (sizes and recipes) and ModelSpec, a
// preset with its schedules and overrides as the flags give them (run/model_flags.h). model/build.h builds it.
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
