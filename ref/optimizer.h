// ref/optimizer.h: the fp32 CPU reference's optimizer and learning-rate schedule, the oracle for adamw.cuh and
// gradnorm.cuh:
//   grad_norm / clip_grad_norm  the global L2 norm of the gradients (in double), and scaling to max_norm
//   adamw_step / adamw_update   PyTorch's AdamW over a ParamLayout (all of it / a range of it), decoupled weight
//                               decay on matrices only, each tensor at its own rate (optimizer_rates.h)
// Deterministic for any thread count: the norm sums fixed chunks in order, AdamW is elementwise.
// adamw_update works on any range of the flat vector (a ZeRO-1 shard, ref/cpu_engine.h); the state it updates is
// the caller's. Does not: keep master weights (the reference is fp32 throughout).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "ref/parallel.h"
#include "lr_schedule.h"  // OptimizerHyper
#include "model_config.h"
#include "optimizer_rates.h"

namespace ref {

// Sum of squares of g (n), in double. Fixed 64K-element chunks, each summed in 16 interleaved partial sums (element
// i of a chunk into sum i mod 16, so the loop vectorises at any width: a single running sum was bound by the
// add's latency at a quarter of the memory's speed) combined in a fixed order, then the chunks in order: the
// same bits for any thread count and vector width. (Data-parallel engines add the ranks' sums of their shards,
// in rank order.)
template <typename S> double grad_sum_squares(const S* g, size_t n) {
    constexpr size_t CH = 1 << 16, L = 16;
    const size_t nch = (n + CH - 1) / CH;
    std::vector<double> part(nch);
#pragma omp parallel for if (n >= (size_t)OMP_MIN_WORK)
    for (size_t c = 0; c < nch; c++) {
        const S* x = g + c * CH;
        const size_t m = std::min(n - c * CH, CH);
        double s[L] = {};
        size_t i = 0;
        for (; i + L <= m; i += L)
            for (size_t j = 0; j < L; j++) s[j] += (double)x[i + j] * x[i + j];
        for (size_t j = 0; i + j < m; j++) s[j] += (double)x[i + j] * x[i + j];
        for (size_t w = L / 2; w > 0; w /= 2)  // pairwise: s[j] += s[j + w]
            for (size_t j = 0; j < w; j++) s[j] += s[j + w];
        part[c] = s[0];
    }
    double s = 0;
    for (double p : part) s += p;
    return s;
}

// L2 norm of g (n), in double.
template <typename S> double grad_norm(const S* g, size_t n) { return std::sqrt(grad_sum_squares(g, n)); }

// The factor clip_grad_norm scales by: max_norm / norm when the norm exceeds max_norm (> 0), else 1.
template <typename S> S clip_scale(double norm, double max_norm) {
    return max_norm > 0 && norm > max_norm ? (S)(max_norm / norm) : S(1);
}

// Scales g so that its norm is at most max_norm (no-op when max_norm <= 0 or the norm is already within).
// Returns the norm before clipping (what the training log reports).
template <typename S> double clip_grad_norm(S* g, size_t n, double max_norm) {
    const double norm = grad_norm(g, n);
    if (max_norm > 0 && norm > max_norm) {
        const S scale = clip_scale<S>(norm, max_norm);
#pragma omp parallel for if (n >= (size_t)OMP_MIN_WORK)
        for (size_t i = 0; i < n; i++) g[i] *= scale;
    }
    return norm;
}

// AdamW state: first and second moments (layout.total each, flat so they checkpoint as one buffer) and the
// number of steps taken.
template <typename S> struct AdamWState {
    std::vector<S> m, v;
    long t = 0;
    explicit AdamWState(size_t n = 0) : m(n, S(0)), v(n, S(0)) {}
};

// One AdamW update (PyTorch's formulation) of the elements [begin, end) of a layout's flat parameter vector,
// at step count t (1 for the first), each tensor k at its rate (rates[k], optimizer_rates.h: lr_k = lr x lr_mult,
// wd_k = wd x wd_mult): m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p *= 1 - lr_k wd_k (decoupled decay, matrices only: ParamTensor::is_matrix, never norms);
// p -= lr_k * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps), the multiply-adds fused (std::fma).
// p, g, m, v point at element `begin` (a ZeRO-1 rank passes its shard; adamw_step the whole vector). The rate
// and decay of each element come from the tensor it belongs to, so a shard may start or end inside any tensor.
// rates empty: every multiplier 1 (PyTorch's one group).
template <typename S>
void adamw_update(S* p, const S* g, S* m, S* v, long t, const ParamLayout& layout, const std::vector<TensorRate>& rates,
                  size_t begin, size_t end, double lr, const OptimizerHyper& hp) {
    const double bc1 = 1.0 - std::pow(hp.beta1, (double)t), bc2 = 1.0 - std::pow(hp.beta2, (double)t);
    const S b1 = (S)hp.beta1, b2 = (S)hp.beta2, eps = (S)hp.eps, rbc2 = (S)(1.0 / bc2);
    for (size_t k = 0; k < layout.tensors.size(); k++) {
        const ParamTensor& x = layout.tensors[k];
        const size_t a = std::max(begin, x.offset), b = std::min(end, x.offset + x.numel());
        if (a >= b) continue;
        const TensorRate r = rates.empty() ? TensorRate() : rates.at(k);
        const double lr_k = lr * r.lr, wd_k = hp.weight_decay * r.wd;  // x 1: exactly lr and wd
        const S step = (S)(lr_k / bc1), decay = (S)(x.is_matrix ? 1.0 - lr_k * wd_k : 1.0);
        const long n = (long)(b - a);
        S *pt = p + (a - begin), *mt = m + (a - begin), *vt = v + (a - begin);
        const S* gt = g + (a - begin);
        // Every multiply-add an explicit fma: the compiler contracts a * b + c as it likes (C++'s default), and
        // the loop compiled scalar (when sqrt's errno kept it from vectorising) rounded otherwise than vectorised.
        // Written out, every compilation of it (vector body, scalar tail, any width) rounds alike.
#pragma omp parallel for if (n >= OMP_MIN_WORK)
        for (long i = 0; i < n; i++) {
            mt[i] = std::fma(b1, mt[i], (S(1) - b1) * gt[i]);
            vt[i] = std::fma(b2, vt[i], (S(1) - b2) * gt[i] * gt[i]);
            pt[i] = std::fma(pt[i], decay, -(step * mt[i] / (std::sqrt(vt[i] * rbc2) + eps)));
        }
    }
}

// One AdamW step of the whole vector: st.t += 1, then adamw_update over [0, layout.total).
template <typename S>
void adamw_step(S* params, const S* grads, AdamWState<S>& st, const ParamLayout& layout, double lr,
                const OptimizerHyper& hp, const std::vector<TensorRate>& rates = {}) {
    st.t++;
    adamw_update(params, grads, st.m.data(), st.v.data(), st.t, layout, rates, 0, layout.total, lr, hp);
}

}  // namespace ref
