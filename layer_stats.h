// layer_stats.h: the per-layer training signals of one step (Engine::layer_stats), what a researcher watches to
// see a narrow or few-headed layer starve or blow up. Per layer l (L of each):
//   grad_norm     L2 norm of the gradient of layer l's parameters (norms and matrices), before clipping; with
//                 several ranks of the gradient summed over them (the global norm's, split by layer)
//   update_ratio  ||delta W|| / ||W|| over layer l's matrices (wqkv, wo, wfc, wproj) for the step's AdamW update,
//                 W as it was before the update; 0 for a step the engine skipped (non-finite loss or norm)
//   out_rms       RMS of the residual stream's slice [0, w_l) after layer l (what the layer writes, plus what it
//                 passed on), over the step's last micro-batch; with several ranks over every rank's
// The engines add the sums of squares (LayerSums) over their parameters and activations and finish here.
// delta W is recovered after the update from the new weight and moments (adamw_delta): the update is
// p' = p decay - step m' / (sqrt(v' rbc2) + eps), so p = (p' + step u) / decay and delta = p' - p =
// p' (1 - 1 / decay) - (step / decay) u, u = m' / (sqrt(v' rbc2) + eps); no copy of the weights is kept.
// The device's table (layer_stats_plan, built on the host for layer_stats.cuh, as adamw_ranges.h for AdamW) is here too.
// Does not: compute anything per element (ref/cpu_engine.h and layer_stats.cuh do), or log (run/run.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "lr_schedule.h"  // OptimizerHyper
#include "model_config.h"

struct LayerStats {
    std::vector<double> grad_norm, update_ratio, out_rms;  // (L) each
};

// Sums of squares per layer (L each): of the gradient, of the matrices before the update, of their update, and of
// the residual slice after the layer (over out_count elements: rows x w_l, times the ranks).
struct LayerSums {
    std::vector<double> grad_sq, weight_sq, delta_sq, out_sq;
    explicit LayerSums(int L) : grad_sq(L, 0.0), weight_sq(L, 0.0), delta_sq(L, 0.0), out_sq(L, 0.0) {}
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
    double delta(double p, double m, double v) const {  // 0 without an update, whatever the moments hold
        return cu == 0 ? 0.0 : cw * p - cu * m / (std::sqrt(v * rbc2) + eps);
    }
};

// The signals from the sums; rows: the residual rows each rank's sums cover, ranks: how many added theirs.
inline LayerStats finish_layer_stats(const LayerSums& s, const ModelConfig& c, long rows, int ranks) {
    LayerStats r;
    for (int l = 0; l < c.L(); l++) {
        r.grad_norm.push_back(std::sqrt(s.grad_sq[l]));
        r.update_ratio.push_back(s.weight_sq[l] > 0 ? std::sqrt(s.delta_sq[l] / s.weight_sq[l]) : NAN);
        const double n = (double)rows * c.layers[l].width * ranks;
        r.out_rms.push_back(n > 0 ? std::sqrt(s.out_sq[l] / n) : NAN);
    }
    return r;
}

// A layer's tensor cut to [from, to) of the flat vector: params and grads at offset, master, m and v at state;
// blocks of the device's first pass from first_block.
struct LayerStatsSegment {
    size_t offset, state, n;
    int layer, matrix, first_block, blocks;
};
// The segments in layer order, layer l's blocks [first[l], first[l + 1]); at[l]: the residual state after layer l
// (model.cuh's sub-block count so far), width[l]: w_l. blocks: the first pass's grid.
struct LayerStatsPlan {
    std::vector<LayerStatsSegment> segs;
    std::vector<int> first, at, width;
    int blocks = 0;
};
// [from, to) of a (device) layout, `state`: where `from` sits in master, m and v; a segment of n elements gets
// ceil(n / per_block) blocks, at most max_blocks (layer_stats.cuh's sizes).
inline LayerStatsPlan layer_stats_plan(const ModelConfig& c, const ParamLayout& layout, size_t from, size_t to,
                                       size_t state, size_t per_block, size_t max_blocks) {
    LayerStatsPlan p;
    int sub = 0;
    for (int l = 0; l < c.L(); l++) {
        p.first.push_back(p.blocks);
        for (const ParamTensor& t : layout.tensors) {
            const size_t a = std::max(from, t.offset), b = std::min(to, t.offset + t.numel());
            if (t.layer != l || a >= b) continue;
            const int nb = (int)std::min(max_blocks, (b - a + per_block - 1) / per_block);
            p.segs.push_back({a, a - from + state, b - a, l, t.is_matrix ? 1 : 0, p.blocks, nb});
            p.blocks += nb;
        }
        sub += (c.layers[l].attention ? 1 : 0) + (c.layers[l].mlp ? 1 : 0);
        p.at.push_back(sub), p.width.push_back(c.layers[l].width);
    }
    p.first.push_back(p.blocks);
    return p;
}
