// layer_stats.h: the per-layer training signals of one step (Engine::layer_stats), what a researcher watches to
// see a narrow or few-headed layer starve or blow up. Per layer l (L of each):
//   grad_norm     L2 norm of the gradient of layer l's parameters (norms and matrices), before clipping; with
//                 several ranks of the gradient summed over them (the global norm's, split by layer)
//   grad_rms      the same gradient's RMS per parameter: grad_norm / sqrt(n_l), n_l the layer's parameter count.
//                 A norm grows with sqrt(size), so grad_norm ranks layers of unlike widths by size; grad_rms does
//                 not (a 32-wide layer's smaller grad_norm is no sign of starving)
//   grad_rms_attn the RMS over the mixer sub-block's tensors: ln1_w, ln1_b (LayerNorm), wqkv, wo (and a gdn layer's
//                 conv_w, wz, wba, a_log, dt_bias, onorm_w); NaN for a layer without attention (null in log.jsonl)
//   grad_rms_mlp  the RMS over the MLP sub-block's tensors: ln2_w, ln2_b (LayerNorm), wfc, wproj; NaN without an MLP
//   update_ratio  ||delta W|| / ||W|| over layer l's matrices (wqkv, wo, wfc, wproj; a gdn layer's conv_w, wz, wba
//                 too: every is_matrix tensor) for the step's AdamW update,
//                 W as it was before the update; 0 for a step the engine skipped (non-finite loss or norm)
//   out_rms       RMS of the residual stream's slice [0, w_l) after layer l (what the layer writes, plus what it
//                 passed on), over the step's last micro-batch; with several ranks over every rank's
// The engines add the sums of squares (LayerSums: the gradient's per sub-block) over their parameters and
// activations and finish here; the parameter counts come from the layout (layer_block_params), not the engines.
// delta W is recovered after the update from the new weight and moments (adamw_delta): the update is
// p' = p decay - step m' / (sqrt(v' rbc2) + eps), so p = (p' + step u) / decay and delta = p' - p =
// p' (1 - 1 / decay) - (step / decay) u, u = m' / (sqrt(v' rbc2) + eps); no copy of the weights is kept.
// The device's table (layer_stats_plan, built on the host for layer_stats.cuh, as adamw_ranges.h for AdamW) is here
// too, and the layer the trainer's summary names (furthest_layer).
// Does not: compute anything per element (ref/cpu_engine.h and layer_stats.cuh do), or log (run/run.h).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "lr_schedule.h"  // OptimizerHyper
#include "model_config.h"
#include "optimizer_rates.h"  // TensorRate

struct LayerStats {
    std::vector<double> grad_norm, grad_rms, grad_rms_attn, grad_rms_mlp, update_ratio, out_rms;  // (L) each
    // The signals by their names in log.jsonl's "layers", in the line's order: signal(k) is kNames[k]'s.
    static constexpr int kCount = 6;
    static constexpr const char* kNames[kCount] = {"grad_norm",    "grad_rms",     "grad_rms_attn",
                                                   "grad_rms_mlp", "update_ratio", "out_rms"};
    std::vector<double>& signal(int k) {
        std::vector<double>* v[kCount] = {&grad_norm,    &grad_rms,     &grad_rms_attn,
                                          &grad_rms_mlp, &update_ratio, &out_rms};
        return *v[k];
    }
    const std::vector<double>& signal(int k) const { return const_cast<LayerStats*>(this)->signal(k); }
};

// A layer's two sub-blocks, each with its own pre-norm: MLP (ln2_w, ln2_b, wfc, wproj) and the mixer, attention's
// or a gdn layer's (every other tensor of the layer: ln1_w, ln1_b, wqkv, wo, and a gdn layer's conv_w, wz, wba,
// a_log, dt_bias, onorm_w). The block of layer tensor t of `lay` (the host's layout or the device's: the same
// offsets per layer).
enum LayerBlock { kAttnBlock = 0, kMlpBlock = 1 };
inline LayerBlock layer_block(const ParamLayout& lay, const ParamTensor& t) {
    const LayerOffsets& o = lay.layer[t.layer];
    for (size_t a : {o.ln2_w, o.ln2_b, o.wfc, o.wproj})
        if (t.offset == a) return kMlpBlock;
    return kAttnBlock;
}
// Parameters per layer and sub-block: n[l][block], 0 for a sub-block the layer does not have.
inline std::vector<std::array<double, 2>> layer_block_params(const ModelConfig& c) {
    const ParamLayout lay = param_layout(c);
    std::vector<std::array<double, 2>> n(c.L(), {0.0, 0.0});
    for (const ParamTensor& t : lay.tensors)
        if (t.layer >= 0) n[t.layer][layer_block(lay, t)] += (double)t.numel();
    return n;
}

// Sums of squares per layer (L each): of the gradient of the attention and of the MLP sub-block, of the matrices
// before the update, of their update, and of the residual slice after the layer (rows x w_l elements, x ranks).
struct LayerSums {
    static constexpr int kCount = 5;  // the vectors, in this order (the device's (5, L) and the all-reduce)
    std::vector<double> grad_sq_attn, grad_sq_mlp, weight_sq, delta_sq, out_sq;
    explicit LayerSums(int L)
        : grad_sq_attn(L, 0.0), grad_sq_mlp(L, 0.0), weight_sq(L, 0.0), delta_sq(L, 0.0), out_sq(L, 0.0) {}
    std::vector<double>* all(int k) {
        std::vector<double>* v[kCount] = {&grad_sq_attn, &grad_sq_mlp, &weight_sq, &delta_sq, &out_sq};
        return v[k];
    }
    std::vector<double>& grad_sq(LayerBlock b) { return b == kAttnBlock ? grad_sq_attn : grad_sq_mlp; }
};

// The coefficients of delta = cw p' - cu u for a matrix element after AdamW step t (ref/optimizer.h's
// adamw_update): computed in double on the host, because 1 - 1 / decay (~ lr wd) loses its digits in fp32.
struct AdamWDelta {
    double cw = 0, cu = 0, rbc2 = 1, eps = 0;  // cw = cu = 0: no update was applied
    static AdamWDelta of(double lr, const OptimizerHyper& hp, long t) {
        AdamWDelta a;
        if (t <= 0) return a;
        const double bc1 = 1.0 - std::pow(hp.beta1, (double)t), bc2 = 1.0 - std::pow(hp.beta2, (double)t);
        const double decay = 1.0 - lr * hp.weight_decay;
        a.cw = 1.0 - 1.0 / decay, a.cu = lr / bc1 / decay, a.rbc2 = 1.0 / bc2, a.eps = hp.eps;
        return a;
    }
    // A tensor's, updated at its rate (optimizer_rates.h): lr x lr_mult, weight decay x wd_mult (the scalars' bits
    // at multipliers 1).
    static AdamWDelta of(double lr, const OptimizerHyper& hp, long t, const TensorRate& r) {
        OptimizerHyper h = hp;
        h.weight_decay *= r.wd;
        return of(lr * r.lr, h, t);
    }
    double delta(double p, double m, double v) const {  // 0 without an update, whatever the moments hold
        return cu == 0 ? 0.0 : cw * p - cu * m / (std::sqrt(v * rbc2) + eps);
    }
};

// The signals from the sums; rows: the residual rows each rank's sums cover, ranks: how many added theirs.
inline LayerStats finish_layer_stats(const LayerSums& s, const ModelConfig& c, long rows, int ranks) {
    LayerStats r;
    const std::vector<std::array<double, 2>> params = layer_block_params(c);
    auto rms = [](double sq, double count) { return count > 0 ? std::sqrt(sq / count) : NAN; };
    for (int l = 0; l < c.L(); l++) {
        const double a = s.grad_sq_attn[l], m = s.grad_sq_mlp[l];
        r.grad_norm.push_back(std::sqrt(a + m));
        r.grad_rms.push_back(rms(a + m, params[l][kAttnBlock] + params[l][kMlpBlock]));
        r.grad_rms_attn.push_back(rms(a, params[l][kAttnBlock]));
        r.grad_rms_mlp.push_back(rms(m, params[l][kMlpBlock]));
        r.update_ratio.push_back(s.weight_sq[l] > 0 ? std::sqrt(s.delta_sq[l] / s.weight_sq[l]) : NAN);
        const double n = (double)rows * c.layers[l].width * ranks;
        r.out_rms.push_back(n > 0 ? std::sqrt(s.out_sq[l] / n) : NAN);
    }
    return r;
}

// The layer furthest from the others by one signal (the trainer's summary uses grad_rms): the largest
// |ln(v_l / median)|, the median over the layers whose value is positive and finite (of the logarithms: for an even
// count the geometric mean of the middle two); the first such layer on a tie. layer -1 with fewer than two values.
struct LayerOutlier {
    int layer = -1;
    double median = NAN, factor = NAN;  // factor: v_layer / median (2 is twice the median, 0.5 half of it)
};
inline LayerOutlier furthest_layer(const std::vector<double>& v) {
    std::vector<double> logs;
    for (double x : v)
        if (std::isfinite(x) && x > 0) logs.push_back(std::log(x));
    LayerOutlier o;
    if (logs.size() < 2) return o;
    std::sort(logs.begin(), logs.end());
    const size_t n = logs.size();
    const double mid = n % 2 ? logs[n / 2] : 0.5 * (logs[n / 2 - 1] + logs[n / 2]);
    double far = -1;
    for (size_t l = 0; l < v.size(); l++)
        if (std::isfinite(v[l]) && v[l] > 0 && std::fabs(std::log(v[l]) - mid) > far)
            far = std::fabs(std::log(v[l]) - mid), o.layer = (int)l;
    o.median = std::exp(mid), o.factor = v[o.layer] / o.median;
    return o;
}

// A layer's tensor cut to [from, to) of the flat vector: params and grads at offset, master, m and v at state;
// blocks of the device's first pass from first_block; the last update's delta = cw p' - cu m' / (sqrt(v' rbc2) +
// eps) at the tensor's rate, in fp32 (LayerStatsPlan::set_update; cw = cu = 0: none applied).
struct LayerStatsSegment {
    size_t offset, state, n;
    int layer, matrix, first_block, blocks;
    float cw = 0, cu = 0, rbc2 = 1, eps = 0;
};
// The segments in layer order, layer l's blocks [first[l], first[l + 1]): its attention tensors' [first[l], mid[l]),
// its MLP's [mid[l], first[l + 1]); rate[s]: segment s's tensor's multipliers; at[l]: the residual state after
// layer l (model.cuh's sub-block count so far), width[l]: w_l. blocks: the first pass's grid.
struct LayerStatsPlan {
    std::vector<LayerStatsSegment> segs;
    std::vector<TensorRate> rate;
    std::vector<int> first, mid, at, width;
    int blocks = 0;
    // Each segment's coefficients for the update AdamW step t applied at lr and hp (AdamWDelta::of at the
    // segment's rate, as the CPU engine's layer_stats), or for none.
    void set_update(bool applied, double lr, const OptimizerHyper& hp, long t) {
        for (size_t s = 0; s < segs.size(); s++) {
            const AdamWDelta a = applied ? AdamWDelta::of(lr, hp, t, rate[s]) : AdamWDelta();
            segs[s].cw = (float)a.cw, segs[s].cu = (float)a.cu, segs[s].rbc2 = (float)a.rbc2,
            segs[s].eps = (float)a.eps;
        }
    }
};
// [from, to) of a (device) layout, `state`: where `from` sits in master, m and v; rates: one per tensor of the
// layout (optimizer_rates.h; empty: 1 for all); a segment of n elements gets ceil(n / per_block) blocks, at most
// max_blocks (layer_stats.cuh's sizes).
inline LayerStatsPlan layer_stats_plan(const ModelConfig& c, const ParamLayout& layout, size_t from, size_t to,
                                       size_t state, size_t per_block, size_t max_blocks,
                                       const std::vector<TensorRate>& rates = {}) {
    LayerStatsPlan p;
    int sub = 0;
    for (int l = 0; l < c.L(); l++) {
        p.first.push_back(p.blocks);
        for (LayerBlock block : {kAttnBlock, kMlpBlock}) {
            if (block == kMlpBlock) p.mid.push_back(p.blocks);
            for (size_t k = 0; k < layout.tensors.size(); k++) {
                const ParamTensor& t = layout.tensors[k];
                const size_t a = std::max(from, t.offset), b = std::min(to, t.offset + t.numel());
                if (t.layer != l || a >= b || layer_block(layout, t) != block) continue;
                const int nb = (int)std::min(max_blocks, (b - a + per_block - 1) / per_block);
                p.segs.push_back({a, a - from + state, b - a, l, t.is_matrix ? 1 : 0, p.blocks, nb});
                p.rate.push_back(rates.empty() ? TensorRate() : rates.at(k));
                p.blocks += nb;
            }
        }
        sub += (c.layers[l].attention ? 1 : 0) + (c.layers[l].mlp ? 1 : 0);
        p.at.push_back(sub), p.width.push_back(c.layers[l].width);
    }
    p.first.push_back(p.blocks);
    return p;
}
