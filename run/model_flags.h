// run/model_flags.h: the model's command-line flags (a preset, schedules and overrides into a ModelSpec), shared by
// train_prism and the dev tools. Apart from run/cli.h so that the data tools, which parse flags too, never compile
// the model.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "model/layer_columns.h"
#include "model/spec.h"
#include "run/cli.h"

// The model flags shared by train_prism and the dev tools: a preset, schedules and overrides. preset_help: what
// the help says of the preset's default (default: the spec's own, "tiny").
inline void add_model_flags(std::vector<Flag>& flags, ModelSpec& m, const std::string& preset_help = "") {
    std::string names;
    for (const auto& p : presets()) names += std::string(names.empty() ? "" : ", ") + p.name;
    flags.push_back(text_flag(
        "-m, --model", "PRESET",
        "model size: " + names + " (" + (preset_help.empty() ? "default {default}" : preset_help) + ")", m.preset));
    // One flag per layer column (model/layer_columns.h): its text is checked as it is parsed (syntax and bounds).
    for (const LayerColumn& col : layer_columns()) {
        std::string& dst = m.*col.spec;
        Flag f = text_flag(col.flag, col.arg, col.help, dst);
        f.apply = [&dst, &col](const std::string& v) { check_column_text(col, v), dst = v; };
        f.sample = col.is_switch ? "1" : ModelSpec().*col.spec;
        if (!col.record_default) f.unless(ModelSpec().*col.spec);
        flags.push_back(f);
    }
    flags.push_back(text_flag("--match", "COLUMN",
                              "parameter-match the uniform model by scaling one column: mlp (every layer's MLP "
                              "hidden size by one factor)",
                              m.match));
    flags.push_back(number_flag("--d", "N", "embedding width d", m.d, 1, 65536).unless("0"));
    flags.push_back(number_flag("--layers", "N", "number of layers L", m.L, 1, 10000).unless("0"));
    flags.push_back(number_flag("--heads", "N", "h_base: the uniform model's heads (and the fixed count under -w)",
                                m.h_base, 1, 65536)
                        .unless("0"));
    flags.push_back(number_flag("--head-dim", "N", "under -w: a fixed head_dim per layer instead of a fixed head count",
                                m.head_dim, 1, 65536)
                        .unless("0"));
    flags.push_back(number_flag("--seq-len", "T", "context length T", m.T, 1, 1 << 20).unless("0"));
    flags.push_back(number_flag("--vocab", "V", "vocabulary size (default 50257, GPT-2)", m.V, 1, 1 << 24).unless("0"));
    flags.push_back(number_flag("--mlp-ratio", "R",
                                "SwiGLU hidden = R * w_l, to the nearest multiple (8/3 Prism presets, 4 Xformer)",
                                m.mlp_ratio, 1e-3, 64)
                        .unless("0"));
    flags.push_back(number_flag("--mlp-multiple", "N", "round the SwiGLU hidden size to a multiple of N (default 32)",
                                m.mlp_multiple, 1, 65536)
                        .unless("0"));
    flags.push_back(choice_flag("--norm", "NORM", "layernorm | rmsnorm", m.norm, {"layernorm", "rmsnorm"},
                                [](const std::string& v) { return parse_norm(v), v; })
                        .unless(""));
    flags.push_back(switch_flag(
        "--untied", "separate output head (default: tied to the embedding, except Xformer presets)", m.untied, 1));
    flags.push_back(switch_flag("--tied", "output head shares the token embedding", m.untied, 0));
    flags.push_back(
        number_flag("--turn", "K", "X / 3 shapes: 1-indexed turning layer (default round(0.75 L))", m.shape.k, 1, 10000)
            .unless("0"));
    flags.push_back(number_flag("--bottleneck", "R", "width shapes: narrowest width / d (default {default})",
                                m.shape.ratio, 0.01, 0.99));
    flags.push_back(number_flag("--width-quantum", "Q", "widths are multiples of Q (default {default})",
                                m.shape.quantum, 1, 65536));
    flags.push_back(choice_flag("--param", "KIND",
                                "parameterisation: sp (standard, default) or mup (muP: layer l's matrices' Adam lr "
                                "and init variance x base_d / w_l, logits x base_d / d, attention 1/head_dim; "
                                "docs/model.md)",
                                m.param, {"sp", "mup"})
                        .unless("sp"));
    flags.push_back(number_flag("--mup-base-d", "N",
                                "with --param mup: the base width the learning rate was tuned at (default: the "
                                "preset's d, so --d widens a preset at its lr)",
                                m.mup_base_d, 1, 65536)
                        .unless("0"));
    flags.push_back(switch_flag("--allow-ablation", "permit head schedules that break monotonicity or h_L = h_base",
                                m.allow_ablation));
}

// The model a run record's args describe (its model flags applied to a fresh spec, other flags ignored), built
// as train_prism built it: what report compares (is_uniform). A ConfigError when they do not build.
inline ModelConfig model_of_args(const std::vector<std::pair<std::string, std::string>>& args) {
    ModelSpec s;
    std::vector<Flag> flags;
    add_model_flags(flags, s);
    for (const auto& [name, value] : args)
        if (const Flag* f = find_flag(flags, name)) f->apply(value);
    std::vector<std::string> warnings;
    return build_config(s, warnings);
}
