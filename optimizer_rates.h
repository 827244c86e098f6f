// optimizer_rates.h: the optimizer's per-tensor rates. Tensor k of a layout is updated with the learning rate
// lr x lr_mult_k and the weight decay wd x wd_mult_k (decay on matrices only, as ever: ParamTensor::is_matrix).
// A tensor's multipliers are its layer's (the run's --lr-mult and --wd-mult lists; 1 for a tensor of no layer)
// times its group's: the groups muP treats apart (the embedding, the output head, the per-channel vectors: norms'
// gains and biases and a gdn layer's conv taps, whose fan-in of 4 does not grow with width; the layers' matrices),
// 1 each until a parameterisation sets them. With every multiplier 1 (the default) each rate
// is the scalar's, bit for bit (lr x 1 = lr). Under muP (docs/model.md) each layer matrix's lr is further
// multiplied by base_fan_in / fan_in, its fan-in in the base model over its own. The base model is the uniform model
// of width base_d, so a matrix of layer l whose fan-in is the layer's width w_l (wqkv, wo, wfc) has base fan-in
// base_d, and one whose fan-in is the layer's MLP hidden size (wproj: hidden_l, proportional to w_l by the MLP rule;
// an explicit --mlp hidden size alike) has fan_in x base_d / w_l: every matrix of layer l gets base_d / w_l
// (mup_layer_ratio), so a narrow Xformer layer and a wide one each get their own. Only the matrix group takes it: a
// tensor whose fan-in does not grow with the width (a norm's gain, anything param_group puts outside the matrices)
// keeps lr. The logits' multiplier base_d / d is the model's (ModelConfig::logit_scale), not a rate.
// tensor_rates turns them into one rate per tensor of a layout; ref::adamw_update reads that table, and the CUDA
// engine's AdamW ranges (adamw_ranges.h) carry it, sliced with the ranges by a ZeRO-1 shard.
// Does not: parse flags (run/defaults.h), or know the learning rate.
#pragma once

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "model_config.h"  // ParamLayout

// The groups of tensors a parameterisation gives rules apart. A tied head is the embedding.
enum class ParamGroup { embedding, head, norm, matrix };
constexpr int kParamGroups = 4;

inline ParamGroup param_group(const ParamTensor& t) {
    const bool conv = t.name.size() > 7 && t.name.compare(t.name.size() - 7, 7, ".conv_w") == 0;
    if (!t.is_matrix || conv) return ParamGroup::norm;
    if (t.layer >= 0) return ParamGroup::matrix;
    return t.name == "lm_head" ? ParamGroup::head : ParamGroup::embedding;
}

struct OptimizerMultipliers {
    std::vector<double> layer_lr, layer_wd;  // one per layer, or empty: 1 for every layer
    double group_lr[kParamGroups] = {1, 1, 1, 1}, group_wd[kParamGroups] = {1, 1, 1, 1};  // by ParamGroup
    std::vector<double> layer_fan_in;  // muP: each layer's base_fan_in / fan_in (mup_layer_ratios), or empty: none
};

// muP's fan-in rule for layer l's matrices: base_d / w_l (1 without muP). The init's std takes its square root
// (ref/init.h), the Adam rate the ratio itself (tensor_rates).
inline double mup_layer_ratio(const ModelConfig& c, int l) {
    return c.mup_base_d ? (double)c.mup_base_d / c.layers[l].width : 1.0;
}
// One per layer under muP (OptimizerMultipliers::layer_fan_in), empty without it.
inline std::vector<double> mup_layer_ratios(const ModelConfig& c) {
    std::vector<double> r;
    if (c.mup_base_d)
        for (int l = 0; l < c.L(); l++) r.push_back(mup_layer_ratio(c, l));
    return r;
}

// A tensor's multipliers of the learning rate and of the weight decay.
struct TensorRate {
    double lr = 1, wd = 1;
    bool operator==(const TensorRate& o) const { return lr == o.lr && wd == o.wd; }
};

// One rate per tensor of p, in its order. A list of the wrong length or a negative or non-finite multiplier is
// the caller's mistake (the flags are checked before: run/defaults.h's layer_multipliers).
inline std::vector<TensorRate> tensor_rates(const ParamLayout& p, const OptimizerMultipliers& m) {
    const size_t L = p.layer.size();
    for (const std::vector<double>* v : {&m.layer_lr, &m.layer_wd, &m.layer_fan_in}) {
        if (!v->empty() && v->size() != L)
            throw std::logic_error("tensor_rates: " + std::to_string(v->size()) + " layer multipliers for " +
                                   std::to_string(L) + " layers");
        for (double x : *v)
            if (!(x >= 0) || !std::isfinite(x)) throw std::logic_error("tensor_rates: a multiplier is not finite >= 0");
    }
    for (double x : m.layer_fan_in)
        if (!(x > 0)) throw std::logic_error("tensor_rates: a fan-in ratio is not > 0");
    std::vector<TensorRate> r;
    for (const ParamTensor& t : p.tensors) {
        const int g = (int)param_group(t);
        TensorRate x{m.group_lr[g], m.group_wd[g]};
        if (t.layer >= 0 && !m.layer_lr.empty()) x.lr *= m.layer_lr[t.layer];
        if (t.layer >= 0 && !m.layer_wd.empty()) x.wd *= m.layer_wd[t.layer];
        if (g == (int)ParamGroup::matrix && !m.layer_fan_in.empty())  // muP: lr x base_fan_in / fan_in
            x.lr *= m.layer_fan_in[t.layer];
        r.push_back(x);
    }
    return r;
}
