// ref/init.h: the model's initial weights, shared by both engines so that a CPU run and a GPU run from the
// same seed start from the same parameters: a platform-independent RNG (Rng: splitmix64 and Box-Muller,
// because std::normal_distribution differs across standard libraries) and GPT-2's init over a ParamLayout.
//   init_params  params (layout.total) in param_layout order (model_config.h), from (seed, tensor index)
// Does not: depend on the thread count or the tensor order of anything but the layout.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "model_config.h"
#include "optimizer_rates.h"  // param_group, mup_layer_ratio

namespace ref {

struct Rng {
    uint64_t state;
    explicit Rng(uint64_t seed) : state(seed) {}
    uint64_t next() {  // splitmix64
        uint64_t z = (state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    double uniform() { return ((next() >> 11) + 0.5) * 0x1.0p-53; }  // in (0, 1), never 0 (log below)
    double normal() {                                                // Box-Muller, one value per call
        const double r = std::sqrt(-2.0 * std::log(uniform())), a = 6.283185307179586 * uniform();
        return r * std::cos(a);
    }
};

// GPT-2 init into params (layout.total): matrices N(0, 0.02); residual output projections (wo, wproj)
// N(0, 0.02 / sqrt(2 L)); norm weights 1, biases 0; with cfg.init_width_scale, layer l's matrices' std is
// multiplied by sqrt(d / w_l). A gdn layer's own tensors (docs/model.md): conv_w uniform in [-1/2, 1/2] (PyTorch's
// Conv1d bound 1/sqrt(4)), a_log = log A with A uniform in (0, 16], dt_bias the inverse softplus of dt = exp(u (ln 0.1
// - ln 0.001) + ln 0.001), u uniform, dt >= 1e-4 (flash-linear-attention's GatedDeltaNet), onorm_w 1. Under muP
// (cfg.mup_base_d) layer l's matrices' std is multiplied by sqrt(base_fan_in / fan_in) = sqrt(base_d / w_l) instead
// (optimizer_rates.h's mup_layer_ratio: std proportional to 1 / sqrt(fan_in), today's at the base width; it replaces
// init_width_scale's sqrt(d / w_l), the same per-layer correction taken from base_d rather than d, so the two never
// compose); the embedding and an untied head keep 0.02, a gdn layer's conv_w its bound (docs/model.md's table). Each
// tensor draws from its own stream seeded by (seed, tensor index).
template <typename S> void init_params(S* params, const ModelConfig& cfg, const ParamLayout& layout, uint64_t seed) {
    // Each tensor draws from its own stream, so the tensors are filled in parallel with the same result (a 2B
    // model: ~40 s on one core).
#pragma omp parallel for schedule(dynamic)
    for (size_t ti = 0; ti < layout.tensors.size(); ti++) {
        const ParamTensor& t = layout.tensors[ti];
        S* p = params + t.offset;
        Rng rng(Rng(seed).next() ^ Rng(0x5EED0000ull + ti).next());
        const LayerOffsets* lo = t.layer >= 0 ? &layout.layer[t.layer] : nullptr;
        if (lo && t.offset == lo->conv_w) {
            for (size_t i = 0; i < t.numel(); i++) p[i] = (S)(rng.uniform() - 0.5);
            continue;
        }
        if (lo && t.offset == lo->a_log) {
            for (size_t i = 0; i < t.numel(); i++) p[i] = (S)std::log(16.0 * rng.uniform());
            continue;
        }
        if (lo && t.offset == lo->dt_bias) {
            const double lo_dt = std::log(0.001), hi_dt = std::log(0.1);
            for (size_t i = 0; i < t.numel(); i++) {
                const double dt = std::max(1e-4, std::exp(rng.uniform() * (hi_dt - lo_dt) + lo_dt));
                p[i] = (S)(dt + std::log(-std::expm1(-dt)));
            }
            continue;
        }
        if (!t.is_matrix) {  // norm weight or bias
            bool bias = t.offset == layout.lnf_b;
            if (t.layer >= 0) bias = t.offset == layout.layer[t.layer].ln1_b || t.offset == layout.layer[t.layer].ln2_b;
            std::fill_n(p, t.numel(), S(bias ? 0 : 1));
            continue;
        }
        double std = 0.02;
        const bool resid_out =
            t.layer >= 0 && (t.offset == layout.layer[t.layer].wo || t.offset == layout.layer[t.layer].wproj);
        if (resid_out) std /= std::sqrt(2.0 * cfg.L());
        if (cfg.mup_base_d) {  // muP: the matrix's fan-in in the base model over its own
            if (param_group(t) == ParamGroup::matrix) std *= std::sqrt(mup_layer_ratio(cfg, t.layer));
        } else if (t.layer >= 0 && cfg.init_width_scale) {
            std *= std::sqrt((double)cfg.d / cfg.layers[t.layer].width);
        }
        for (size_t i = 0; i < t.numel(); i++) p[i] = (S)(std * rng.normal());
    }
}

}  // namespace ref
