// model/build.h: a model built from what the user asked for (model/spec.h's ModelSpec): the preset's sizes, the head
// and width schedules (model/schedules.h), every per-layer column (model/layer_columns.h), the design rules'
// warnings, and --match's parameter match to the uniform model. Its body is model/build.cpp (compiled apart: the
// Makefile's LIB).
#pragma once

#include <string>
#include <vector>

#include "model/spec.h"

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
