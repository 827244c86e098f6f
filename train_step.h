// train_step.h: one optimizer step on an Engine, exactly as train_prism.cu's loop runs it, so the test
// that counts a step's host waits (test_model_cuda.cpp) runs the trainer's own code:
//   zero_grad; n_micro x { next batch; forward_backward(1 / (n_micro world)) }; clip_grad_norm; adamw_step;
//   read_stats
// Everything up to read_stats only queues work; read_stats is the step's one wait, for the loss (the mean over
// the micro-batches, divided by world) and the gradient norm, and the AdamW update it does not wait for runs on
// meanwhile. With `world` data-parallel ranks the gradients are summed over them before clip_grad_norm (the last
// micro-step says so, so the engine can start during its backward); weighted 1 / world, the sum is the mean over
// the global batch, and so is the caller's sum of the ranks' losses.
// The learning rate it is given comes from lr_schedule.h (the loop computes it on the host).
// Does not: log anything, or read flags.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine.h"
#include "util/errors.h"
#include "lr_schedule.h"

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
