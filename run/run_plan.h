// run/run_plan.h: the batch and length of a training run (RunPlan), from the options, the model and the rank
// count: tokens per step (the global batch, over all ranks), micro-steps per rank, steps and warmup, and its
// learning-rate schedule; and the plan part of the run record. plan_run is the one check of these flags: training,
// train_prism --plan and study all call it, so each refuses the same inputs with the same line.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "util/errors.h"
#include "lr_schedule.h"
#include "model_config.h"
#include "run/defaults.h"
#include "util/number_text.h"

// The batch and length of a run, from the options, the model and the rank count: tokens per step (the global
// batch, over all ranks), micro-steps per rank, steps, warmup.
struct RunPlan {
    int T = 0, world = 1;
    long micro_tokens = 0, total_batch = 0, n_micro = 0, steps = 0, warmup = 0;  // micro_tokens: B T, one rank
};

// The training sequence length: -t, else the model's context.
inline int train_seq_len(const TrainOptions& o, const ModelConfig& cfg) {
    const int T = o.T ? o.T : cfg.T;
    if (T > cfg.T)
        throw ConfigError("--train-seq " + std::to_string(T) +
                          " exceeds the model's context T = " + std::to_string(cfg.T));
    return T;
}

// The warmup a run of `steps` steps gets when --warmup is not given: --warmup-frac of the steps, rounded.
inline long default_warmup(const TrainOptions& o, long steps) { return std::lround(o.warmup_frac * steps); }

// The run's learning-rate schedule; a bad combination of its flags is a ConfigError naming the flag.
inline LrSchedule lr_schedule(const TrainOptions& o, const RunPlan& p) {
    return make_lr_schedule(o.lr_schedule, p.steps, p.warmup, o.lr, o.final_lr_frac, o.decay_frac, o.decay_shape);
}

// Every check of the batch, length and schedule flags (train_tokens: the training shards' size, for --epochs).
inline RunPlan plan_run(const TrainOptions& o, const ModelConfig& cfg, int world = 1, size_t train_tokens = 0) {
    RunPlan p;
    p.T = train_seq_len(o, cfg);
    p.world = world;
    p.micro_tokens = (long)o.B * p.T;
    const long all_ranks = p.micro_tokens * world;  // one micro-step of every rank
    p.total_batch = o.total_batch ? o.total_batch : all_ranks;
    if (p.total_batch % all_ranks != 0)
        throw ConfigError("--total-batch " + std::to_string(p.total_batch) + " is not a multiple of " +
                          (world == 1 ? "B*T = " + std::to_string(all_ranks)
                                      : "B*T*ranks = " + std::to_string(all_ranks) + " (B " + std::to_string(o.B) +
                                            " x T " + std::to_string(p.T) + " x " + std::to_string(world) + " ranks)") +
                          "; change --total-batch or -b");
    p.n_micro = p.total_batch / all_ranks;
    const size_t P = param_layout(cfg).total;
    p.steps = o.steps;
    if (!p.steps && o.tokens) p.steps = std::max(1L, o.tokens / p.total_batch);
    if (!p.steps && o.tokens_per_param > 0) p.steps = std::max(1L, (long)(o.tokens_per_param * P / p.total_batch));
    if (!p.steps && o.epochs > 0) p.steps = std::max(1L, std::lround(o.epochs * (double)train_tokens / p.total_batch));
    if (!p.steps) p.steps = 150;
    p.warmup = o.warmup >= 0 ? o.warmup : default_warmup(o, p.steps);  // --warmup, else the fraction
    if ((double)p.steps * p.total_batch > 1e18)  // keeps the token count (a long) far from overflow
        throw ConfigError("--steps " + std::to_string(p.steps) + " of " + std::to_string(p.total_batch) +
                          " tokens is beyond 10^18 tokens; lower --steps or --total-batch");
    if (o.lr * o.opt.weight_decay >= 1) {  // the weights would not shrink but flip sign and grow: NaN by design
        char b[200];
        snprintf(b, sizeof b,
                 "--lr %g times --wd %g is %g; it must be below 1 (decoupled weight decay multiplies "
                 "the matrices by 1 - lr * wd every step)",
                 o.lr, o.opt.weight_decay, o.lr * o.opt.weight_decay);
        throw ConfigError(b);
    }
    lr_schedule(o, p);  // its refusals (--decay-frac without wsd, --warmup beyond --steps, ...)
    return p;
}

// The batch plan part of the run record.
inline std::string plan_record_json(const TrainOptions& o, const RunPlan& p) {
    return "{\"B\": " + std::to_string(o.B) + ", \"T\": " + std::to_string(p.T) +
           ", \"ranks\": " + std::to_string(p.world) + ", \"micro_steps\": " + std::to_string(p.n_micro) +
           ", \"total_batch\": " + std::to_string(p.total_batch) + ", \"steps\": " + std::to_string(p.steps) +
           ", \"tokens\": " + std::to_string(p.steps * p.total_batch) + ", \"warmup\": " + std::to_string(p.warmup) +
           ", \"lr\": " + exact_number(o.lr) + ", \"final_lr\": " + exact_number(o.lr * o.final_lr_frac) +
           ", \"seed\": " + std::to_string(o.seed) + "}";
}
