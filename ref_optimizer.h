// ref_optimizer.h: the fp32 CPU reference's optimizer and learning-rate schedule, the oracle for adamw.cuh and
// gradnorm.cuh:
//   grad_norm / clip_grad_norm  the global L2 norm of the gradients (in double), and scaling to max_norm
//   adamw_step                  PyTorch's AdamW over a ParamLayout, decoupled weight decay on matrices only
//   lr_at                       linear warmup, then cosine decay to final_frac * lr
// Deterministic for any thread count: the norm sums fixed chunks in order, AdamW is elementwise.
// Does not: shard the optimizer state, or keep master weights (the reference is fp32 throughout).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "ref_parallel.h"
#include "schedule.h"

namespace ref {

// L2 norm of g (n), in double. Fixed 64K-element chunks summed in order: the same bits for any thread count.
template <typename S>
double grad_norm(const S* g, size_t n) {
    const size_t CH = 1 << 16, nch = (n + CH - 1) / CH;
    std::vector<double> part(nch);
#pragma omp parallel for if (n >= (size_t)OMP_MIN_WORK)
    for (size_t c = 0; c < nch; c++) {
        double s = 0;
        for (size_t i = c * CH; i < std::min(n, (c + 1) * CH); i++) s += (double)g[i] * g[i];
        part[c] = s;
    }
    double s = 0;
    for (double p : part) s += p;
    return std::sqrt(s);
}

// Scales g so that its norm is at most max_norm (no-op when max_norm <= 0 or the norm is already within).
// Returns the norm before clipping (what the training log reports).
template <typename S>
double clip_grad_norm(S* g, size_t n, double max_norm) {
    const double norm = grad_norm(g, n);
    if (max_norm > 0 && norm > max_norm) {
        const S scale = (S)(max_norm / norm);
#pragma omp parallel for if (n >= (size_t)OMP_MIN_WORK)
        for (size_t i = 0; i < n; i++) g[i] *= scale;
    }
    return norm;
}

struct AdamWParams {
    double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

// AdamW state: first and second moments (layout.total each, flat so they checkpoint as one buffer) and the
// number of steps taken.
template <typename S>
struct AdamWState {
    std::vector<S> m, v;
    long t = 0;
    explicit AdamWState(size_t n = 0) : m(n, S(0)), v(n, S(0)) {}
};

// One AdamW step (PyTorch's formulation): t += 1; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p *= 1 - lr wd (decoupled decay, matrices only: ParamTensor::is_matrix, never norms);
// p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps).
template <typename S>
void adamw_step(S* params, const S* grads, AdamWState<S>& st, const ParamLayout& layout, double lr,
                const AdamWParams& hp) {
    st.t++;
    const double bc1 = 1.0 - std::pow(hp.beta1, (double)st.t), bc2 = 1.0 - std::pow(hp.beta2, (double)st.t);
    const S b1 = (S)hp.beta1, b2 = (S)hp.beta2, eps = (S)hp.eps, step = (S)(lr / bc1), rbc2 = (S)(1.0 / bc2);
    for (const ParamTensor& t : layout.tensors) {
        const S decay = (S)(t.is_matrix ? 1.0 - lr * hp.weight_decay : 1.0);
        const long n = (long)t.numel();
        S *p = params + t.offset, *m = st.m.data() + t.offset, *v = st.v.data() + t.offset;
        const S* g = grads + t.offset;
#pragma omp parallel for if (n >= OMP_MIN_WORK)
        for (long i = 0; i < n; i++) {
            m[i] = b1 * m[i] + (S(1) - b1) * g[i];
            v[i] = b2 * v[i] + (S(1) - b2) * g[i] * g[i];
            p[i] = p[i] * decay - step * m[i] / (std::sqrt(v[i] * rbc2) + eps);
        }
    }
}

// Learning rate at step (0-based) of total_steps: linear warmup lr * (step + 1) / warmup for step < warmup,
// then cosine from lr at step = warmup down to final_frac * lr at the last step (total_steps - 1).
inline double lr_at(long step, long total_steps, long warmup, double lr, double final_frac) {
    if (step < warmup) return lr * (double)(step + 1) / (double)warmup;
    const long decay_steps = std::max(1L, total_steps - 1 - warmup);
    const double progress = std::min(1.0, (double)(step - warmup) / (double)decay_steps);
    const double lo = final_frac * lr;
    return lo + (lr - lo) * 0.5 * (1.0 + std::cos(3.141592653589793 * progress));
}

}  // namespace ref
