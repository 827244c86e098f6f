// train_step.h: one optimizer step on an Engine, exactly as train_prism runs it (train_loop.h), so the test
// that counts a step's host waits (test_model_cuda.cpp) runs the trainer's own code:
//   zero_grad; n_micro x { next batch; forward_backward(1 / (n_micro world)) }; clip_grad_norm; adamw_step;
//   read_stats
// Everything up to read_stats only queues work; read_stats is the step's one wait, for the loss (the mean over
// the micro-batches, divided by world) and the gradient norm, and the AdamW update it does not wait for runs on
// meanwhile. With `world` data-parallel ranks the gradients are summed over them before clip_grad_norm (the last
// micro-step says so, so the engine can start during its backward); weighted 1 / world, the sum is the mean over
// the global batch, and so is the caller's sum of the ranks' losses.
// Also here: lr_at, the learning-rate schedule (linear warmup, then cosine decay to final_frac * lr).
// Does not: log anything.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine.h"

// next_batch(inputs, targets) fills one micro-batch (B, T) of each; in and tg are its buffers (B T ints each).
template <class NextBatch>
StepStats train_step(Engine& eng, NextBatch&& next_batch, int B, int T, long n_micro, double clip, double lr,
                     const OptimizerHyper& hp, std::vector<int>& in, std::vector<int>& tg, int world = 1) {
    eng.zero_grad();
    for (long k = 0; k < n_micro; k++) {
        next_batch(in.data(), tg.data());
        eng.forward_backward(in.data(), tg.data(), B, T, 1.0f / (float)(n_micro * world), k + 1 == n_micro);
    }
    eng.clip_grad_norm(clip);
    eng.adamw_step(lr, hp);
    return eng.read_stats();
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
