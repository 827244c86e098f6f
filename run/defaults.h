// run/defaults.h: train_prism's options (TrainOptions: every flag's value, with the plain defaults as initialisers),
// what it does when a flag is not given, where that depends on the machine, the model or the data, the plan they
// resolve to (RunPlan, below: batch, length, schedule) and their flags (make_train_flags, last). The rules
// (docs/training.md, "Flags and defaults"):
//   model (-m)        124M on a GPU, tiny on the CPU (with the head and width schedules asked for)
//   data (--train)    data/fineweb10B/ when it exists (data/get_fineweb.sh), else data/default/; a model of 50M
//                     parameters or more on data/default/ gets a warning: it is a demonstration corpus
//   batch (--total-batch)  the papers' 524,288 tokens for a model of 50M or more on real data (rounded to a
//                     multiple of B x T x ranks when it is not one), else one micro-batch of every rank
//   length (--steps)  a model of 50M or more: the papers' 25 tokens per parameter on real data, 4 passes over
//                     the demonstration corpus; smaller models: 150 steps (the quick CPU run)
//   lr (--lr)         by size, as GPT-3's table: 3e-3 below 50M, 6e-4 to 200M, 3e-4 to 500M, 2.5e-4 to 1B, 2e-4
//   schedule          cosine; wsd decays over the last 20% of the steps in a 1-sqrt shape (lr_schedule.h)
//   output (-o)       out/PRESET[-HEADS][-WIDTHS], e.g. out/124M-prism
// So `mpirun -np 8 ./train_prism -s prism` trains 124M Prism on 8 GPUs: the papers' run on FineWeb, a
// minutes-long demonstration on the default corpus.
// Does not: read more of the data than a directory listing (plan_run checks the batch and length flags, the
// loaders the data).
// default_run's body is run/defaults.cpp (compiled apart: the Makefile's LIB).
#pragma once

#include <cmath>
#include <string>
#include <vector>
#include <utility>
#include <algorithm>
#include <cstdio>

#include "lr_schedule.h"  // OptimizerHyper
#include "model/spec.h"
#include "optimizer_rates.h"  // OptimizerMultipliers
#include "run/cli.h"
#include "util/errors.h"
#include "model_config.h"

// A model spec without a preset: default_model picks it for the machine.
inline ModelSpec spec_without_preset() {
    ModelSpec m;
    m.preset = "";
    return m;
}

// Every flag's value (make_train_flags, below, sets them, and its help shows these initial values as the
// defaults); the defaults below fill in what is left 0, "" or NAN.
struct TrainOptions {
    ModelSpec model = spec_without_preset();  // preset "": 124M on a GPU, tiny on the CPU (default_model)
    bool plan = false, json = false, cpu = false, resume = false, overwrite = false;
    bool recompute = false;           // GPU: recompute norm and SwiGLU outputs in the backward (less activation memory)
    bool allow_batch_change = false;  // --resume with another global batch than the checkpoint's
    bool allow_data_change = false;   // --resume onto other shards than the recorded ones
    std::string branch_from;          // --resume from this earlier checkpoint, the later ones moved aside
    std::string train, val, out;      // "": run/defaults.h (data/fineweb10B/ or data/default/; out/PRESET...)
    std::string tokenizer;            // "": text/tokenizer.h's default_tokenizer_path
    int B = 16, T = 0;                // micro-batch rows; T = 0: the model's context
    long total_batch = 0;  // tokens per optimizer step, all ranks (0: run/defaults.h); a multiple of B T ranks
    long steps = 0;        // optimizer steps (0: from --tokens / --tokens-per-param / --epochs, else 150)
    long tokens = 0;       // token budget
    double tokens_per_param = 0;
    double epochs = 0;  // passes over the training shards
    double lr = NAN;    // NAN: by model size (run/defaults.h)
    double warmup_frac = 0.025, final_lr_frac = 0.1, clip = 1.0;
    long warmup = -1;                    // warmup steps (-1: warmup_frac of the steps)
    std::string lr_schedule = "cosine";  // cosine | wsd | linear | constant (lr_schedule.h's LrSchedule)
    double decay_frac = NAN;             // wsd: the decay's fraction of the steps (NAN: kWsdDecayFrac)
    std::string decay_shape;             // wsd: sqrt | linear | cosine ("": sqrt)
    OptimizerHyper opt;
    std::string lr_mult, wd_mult;  // per-layer multipliers of --lr and --wd ("": 1 for every layer)
    uint64_t seed = 1337;
    bool shuffle = true;
    long val_every = 50, val_tokens = 8192, ckpt_every = 0, sample_every = 50;
    bool sample_flag_given = false;
    long stop_after = 0;  // stop (with a checkpoint) after this many steps of this invocation
    int sample_tokens = 48, keep = 2;
    int max_nonfinite = 3;        // steps in a row with a NaN/inf loss or gradient norm before the run stops
    long layer_stats_every = 10;  // per-layer signals (layer_stats.h) in log.jsonl every N steps and at the last
    long eval_every = 0, eval_limit = 500;  // a zero-shot task every N steps (eval/scoring.h), on this many examples
    std::string eval_task = "hellaswag", eval_data = "data/eval";
    std::vector<std::string> argv;  // this invocation's command line, for the run record
    int zero = -1;                  // ZeRO stage: 0 or 1 (-1: 1 with several ranks)
    double comm_timeout = 600;      // seconds a rank may wait in a collective (dist/process_group.h)
};

constexpr long kPaperBatchTokens = 524288;   // 2^19: GPT-2 / GPT-3 small, llm.c, the Prism paper
constexpr double kPaperTokensPerParam = 25;  // the Prism paper's 25 to 30, at its low end
constexpr double kDemoPasses = 4;            // passes over data/default/ for a paper-size model
constexpr double kLargeModel = 50e6;         // parameters from which the papers' recipe applies
// wsd's decay: the last 20% of the steps, in a 1-sqrt shape. Hägele et al. 2024 ("Scaling Laws and
// Compute-Optimal Training Beyond Fixed Training Durations") find a 20% cooldown matching a cosine schedule's
// loss, and 1-sqrt better than linear; MiniCPM (Hu et al. 2024), which named WSD, decays over about 10%.
constexpr double kWsdDecayFrac = 0.2;

constexpr long kSmallModelSteps = 150;  // the length of a run of a model below kLargeModel: the quick CPU run

// GPT-3's learning rates by model size (Brown et al. 2020, table 2.1), and tiny's tested 3e-3: {a model below this
// many parameters, its lr}; a larger one kLrLargest. --lr's help is written from the table.
constexpr std::pair<double, double> kLrBySize[] = {{kLargeModel, 3e-3}, {200e6, 6e-4}, {500e6, 3e-4}, {1e9, 2.5e-4}};
constexpr double kLrLargest = 2e-4;
inline double default_lr(double params) {
    for (const auto& [below, lr] : kLrBySize)
        if (params < below) return lr;
    return kLrLargest;
}

// The model when -m is not given: 124M with a GPU engine, tiny on the CPU. Call before build_config.
inline void default_model(TrainOptions& o, bool gpu) {
    if (o.model.preset.empty()) o.model.preset = gpu ? "124M" : "tiny";
}

// out/PRESET[-HEADS][-WIDTHS], e.g. out/124M-prism (after default_model).
inline std::string default_out_dir(const ModelSpec& m) {
    std::string name = m.preset;
    for (const std::string& s : {m.heads, m.widths})
        if (s != "uniform") name += "-" + s;
    for (char& c : name)
        if (c == ',' || c == '/' || c == ' ') c = '_';
    return "out/" + name;
}

// Everything else, once the model is built; notes (one line each) say what was chosen where it matters.
void default_run(TrainOptions& o, const ModelConfig& cfg, int world, std::vector<std::string>& notes);

// The ZeRO stage of a run: --zero, else 1 with several ranks (ZeRO-1 costs nothing more than the all-reduce it
// replaces) and 0 with one.
inline int zero_stage(const TrainOptions& o, int world) { return o.zero >= 0 ? o.zero : world > 1 ? 1 : 0; }

// A per-layer multiplier list (--lr-mult, --wd-mult): numbers >= 0 (at most 1000), comma-separated, each item
// a value or value x repeat ("1x6,0.5x6"); the flag's syntax alone, before the model is known.
std::vector<double> parse_multiplier_list(const std::string& text, const std::string& flag);
// One multiplier per layer of an L-layer model from a flag's text ("": 1 for every layer, an empty list).
std::vector<double> layer_multipliers(const std::string& text, const std::string& flag, int L);
// The optimizer's multipliers of a run (the engine's EngineOptions::multipliers): each layer's tensors at its
// --lr-mult and --wd-mult values and, under muP (--param mup), its matrices at base_fan_in / fan_in = base_d / w_l
// (optimizer_rates.h's mup_layer_ratios); the embedding, head and norm groups at 1.
OptimizerMultipliers optimizer_multipliers(const TrainOptions& o, const ModelConfig& cfg);

// What --plan shows of them (run/plan_views.h's RunLayerColumn): a per-layer column for each flag given ("lr x",
// "wd x"), none without. Its body is run/train_flags.cpp.
struct RunLayerColumn;
std::vector<RunLayerColumn> optimizer_plan_columns(const TrainOptions& o, const ModelConfig& cfg);

// The batch and length of a run (RunPlan), from the options, the model and the rank count: tokens per step (the
// global batch, over all ranks), micro-steps per rank, steps and warmup, and its learning-rate schedule; and the plan
// part of the run record. plan_run is the one check of these flags: training, train_prism --plan and study all call
// it, so each refuses the same inputs with the same line.
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
    if (!p.steps) p.steps = kSmallModelSteps;
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
    const OptimizerMultipliers mult = optimizer_multipliers(o, cfg);  // their counts; then each layer's decay
    for (int l = 0; l < cfg.L(); l++) {
        const double lm = mult.layer_lr.empty() ? 1 : mult.layer_lr[l],
                     wm = mult.layer_wd.empty() ? 1 : mult.layer_wd[l],
                     r = mult.layer_fan_in.empty() ? 1 : mult.layer_fan_in[l];  // r: muP's
        if (o.lr * lm * r * o.opt.weight_decay * wm < 1) continue;
        char b[300], mup[64] = "";
        if (r != 1) snprintf(mup, sizeof mup, " x muP's base_d / w_l %g", r);
        snprintf(b, sizeof b,
                 "layer %d: --lr %g x --lr-mult %g%s times --wd %g x --wd-mult %g is %g; it must be below 1 "
                 "(decoupled weight decay multiplies the matrices by 1 - lr * wd every step)",
                 l + 1, o.lr, lm, mup, o.opt.weight_decay, wm, o.lr * lm * r * o.opt.weight_decay * wm);
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

// train_prism's flags, each declared once in make_train_flags (run/cli.h renders --help from
// the table and parses with it), and the run record's side of them: record_args is a loop over the table that
// turns resolved options into the [flag, value] list OUT/run.json keeps (run/run_record.h), may_change_on_resume
// the loop that lists what a --resume may change, and restore_recorded_args puts a recorded run's flags back
// under the ones given on a --resume, so that `train_prism --resume -o OUT` alone continues a run as it was
// started. check_resume_args then refuses a flag given on the resume that differs from the record, except those
// marked changes_on_resume: the length (--steps and the flags that set it), --stop-after (never recorded), and
// the evaluation, sampling, logging and checkpointing cadence, none of which changes what the run computes.
// The output directory itself is not compared (a run directory may have been moved). study.cpp parses its
// trainer flags with the same table. Their bodies are run/train_flags.cpp (compiled apart: the Makefile's LIB).

// Every flag of train_prism, each declared once: spellings, value kind and bounds, help ("{default}" is the
// option's initial value), the TrainOptions field it sets, and its run-record rule (Fixed unless marked).
std::vector<Flag> make_train_flags(TrainOptions& o);

// train_prism's command line: its flags and what --help says first.
Command train_prism_command(TrainOptions& o);

// The flags a resume may change (the rest must equal the record), from the table.
std::vector<std::string> may_change_on_resume();

// The resolved options as the record keeps them (after default_model, build_config, default_run and plan_run):
// every recorded flag that is set, with its value, in the table's order; the length and the batch as the plan
// resolved them (steps, total_batch), and the warmup when it is not --warmup-frac's of the steps (a resume's
// kept warmup, run/run.cpp's keep_recorded_warmup).
std::vector<std::pair<std::string, std::string>> record_args(const TrainOptions& resolved, const RunPlan& p);

// The canonical names of the flags argv gives, in order (values skipped).
std::vector<std::string> given_flags(int argc, char** argv, const std::vector<Flag>& flags);
