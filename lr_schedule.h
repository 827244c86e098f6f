// lr_schedule.h: the learning-rate schedule of a run (--lr-schedule: LrSchedule, lr_at), the one function every
// engine's lr comes from: the loop computes it on the host and passes it to adamw_step, on the CPU reference and
// the GPU alike. Plain arithmetic, so the flag table (run/defaults.h) checks a schedule without the engines.
// Does not: log anything, or read flags (run/defaults.h's lr_schedule builds the schedule from the options).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "util/errors.h"

// The learning-rate schedule of a run (--lr-schedule). Steps are 0-based here (the log's step is step + 1).
// Every kind warms up linearly, lr * (step + 1) / warmup for step < warmup, then:
//   cosine    cosine from lr at step = warmup to final_frac * lr at the last step (total - 1): the schedule of
//             the GPT-2/GPT-3 recipes and of every run before the others existed, kept to the bit
//   linear    the same with a straight line
//   wsd       warmup-stable-decay: lr until the last `decay` steps, then down to final_frac * lr at the last step
//             in `shape`: sqrt (1 - sqrt of the decay's progress), linear or cosine
//   constant  lr to the end (wsd with no decay)
// One mechanism for all: a decay that starts at decay_start() (where the lr is still the peak: progress 0) and
// reaches final_frac * lr at the last step; cosine and linear start it at the warmup's end, wsd `decay` steps
// before the end, constant never. Because the stable phase is exactly lr, a wsd run may be branched into
// another decay (length or shape) wherever its checkpoint lies before the decay (run/run.h checks that the
// lr of every step done is the same under both schedules).
struct LrSchedule {
    std::string kind = "cosine";   // cosine | wsd | linear | constant
    std::string shape = "cosine";  // the decay's shape: cosine | linear | sqrt
    long total = 1, warmup = 0;
    long decay = 1;  // wsd: the steps after decay_start() (those below the peak); cosine, linear: total; constant: 0
    double lr = 0, final_frac = 0.1;

    // The step where the decay starts, at progress 0 (the steps before it, warmup aside, are exactly lr).
    long decay_start() const { return std::max(warmup, total - 1 - decay); }
};

inline const std::vector<std::string>& lr_schedule_kinds() {
    static const std::vector<std::string> k = {"cosine", "wsd", "linear", "constant"};
    return k;
}
inline const std::vector<std::string>& lr_decay_shapes() {
    static const std::vector<std::string> k = {"sqrt", "linear", "cosine"};
    return k;
}

// The schedule of a run of `total` steps. decay_frac and shape are wsd's, which needs both (the fraction of the
// steps the decay takes, rounded like the warmup; run/defaults.h's default_run fills in their defaults); any
// other kind takes neither (NAN and ""): given, they are an error, as are values out of range. Errors are
// one-line ConfigErrors naming the flag.
inline LrSchedule make_lr_schedule(const std::string& kind, long total, long warmup, double lr, double final_frac,
                                   double decay_frac = NAN, const std::string& shape = "") {
    auto one_of = [](const std::vector<std::string>& v, const std::string& x) {
        return std::find(v.begin(), v.end(), x) != v.end();
    };
    if (!one_of(lr_schedule_kinds(), kind))
        throw ConfigError("--lr-schedule must be cosine, wsd, linear or constant, not '" + kind + "'");
    if (kind != "wsd" && (!std::isnan(decay_frac) || !shape.empty()))
        throw ConfigError(std::string(std::isnan(decay_frac) ? "--decay-shape" : "--decay-frac") +
                          " shapes the decay of --lr-schedule wsd, not of " + kind +
                          "; add --lr-schedule wsd, or leave it out");
    if (!std::isnan(decay_frac) && !(decay_frac >= 0 && decay_frac <= 1))
        throw ConfigError("--decay-frac must lie in [0, 1]");
    if (!shape.empty() && !one_of(lr_decay_shapes(), shape))
        throw ConfigError("--decay-shape must be sqrt, linear or cosine, not '" + shape + "'");
    if (kind == "wsd" && (std::isnan(decay_frac) || shape.empty()))
        throw std::logic_error("make_lr_schedule: wsd without its decay fraction and shape (default_run's)");
    if (total < 1) throw ConfigError("--steps must be at least 1");
    if (warmup < 0 || warmup > total)
        throw ConfigError("--warmup " + std::to_string(warmup) + " must lie in [0, --steps " + std::to_string(total) +
                          "]; lower --warmup");
    LrSchedule s;
    s.kind = kind, s.total = total, s.warmup = warmup, s.lr = lr, s.final_frac = final_frac;
    s.shape = kind == "linear" ? "linear" : kind == "wsd" ? shape : "cosine";
    s.decay = kind == "constant" ? 0 : kind == "wsd" ? std::lround(decay_frac * total) : total;
    return s;
}

// The learning rate at step (0-based) under s.
inline double lr_at(const LrSchedule& s, long step) {
    if (step < s.warmup) return s.lr * (double)(step + 1) / (double)s.warmup;
    const long start = s.decay_start();
    if (step < start) return s.lr;
    const long decay_steps = std::max(1L, s.total - 1 - start);
    const double progress = std::min(1.0, (double)(step - start) / (double)decay_steps);
    const double lo = s.final_frac * s.lr;
    if (s.kind == "cosine")  // today's expression, so that a cosine run's every lr is what it always was
        return lo + (s.lr - lo) * 0.5 * (1.0 + std::cos(3.141592653589793 * progress));
    // The part of the way down at `progress`; 0 at progress 0, so the decay's first step is exactly lr.
    const double down = s.shape == "sqrt"     ? std::sqrt(progress)
                        : s.shape == "linear" ? progress
                                              : 0.5 * (1.0 - std::cos(3.141592653589793 * progress));
    return s.lr - (s.lr - lo) * down;
}

// The cosine schedule by its parts (linear warmup, cosine from lr at step = warmup to final_frac * lr at the
// last step), as the reference tests and dev/peer/peer_torch.py name it.
inline double lr_at(long step, long total_steps, long warmup, double lr, double final_frac) {
    return lr_at(make_lr_schedule("cosine", total_steps, warmup, lr, final_frac), step);
}

// "lr: wsd, warmup 5, stable at 0.003 to step 30, 1-sqrt decay over 10 steps to 0.0003" (steps 1-based, as
// the log counts them).
inline std::string describe_lr_schedule(const LrSchedule& s) {
    char b[256];
    const std::string warm = s.warmup ? "warmup " + std::to_string(s.warmup) : std::string("no warmup");
    const double lo = s.final_frac * s.lr;
    if (s.kind == "constant")
        snprintf(b, sizeof b, "lr: constant, %s, then %g to step %ld", warm.c_str(), s.lr, s.total);
    else if (s.kind == "wsd" && s.decay_start() + 1 == s.total)
        snprintf(b, sizeof b, "lr: wsd, %s, stable at %g to step %ld (no decay: --decay-frac 0)", warm.c_str(), s.lr,
                 s.total);
    else if (s.kind == "wsd")
        snprintf(b, sizeof b, "lr: wsd, %s, stable at %g to step %ld, %s decay over %ld steps to %g", warm.c_str(),
                 s.lr, s.decay_start() + 1, s.shape == "sqrt" ? "1-sqrt" : s.shape.c_str(),
                 s.total - 1 - s.decay_start(), lo);
    else snprintf(b, sizeof b, "lr: %s, %s, %g -> %g at step %ld", s.kind.c_str(), warm.c_str(), s.lr, lo, s.total);
    return b;
}

// AdamW's hyperparameters, as the engines take them (engine.h's adamw_step, the reference's ref::adamw_update)
// beside the learning rate of this file's schedule, and train_prism's flags set them (--beta1, --beta2,
// --adam-eps, --wd).
struct OptimizerHyper {
    double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};
