// run/defaults.h: train_prism's options (TrainOptions: every flag's value, with the plain defaults as
// initialisers) and what it does when a flag is not given, where that depends on the machine, the model or the
// data. The rules (docs/training.md, "Flags and defaults"):
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
// Does not: check the values (plan_run and the loaders do), or read more of the data than a directory listing.
// default_run's body is run/defaults.cpp (compiled apart: the Makefile's LIB).
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "lr_schedule.h"  // OptimizerHyper
#include "model/spec.h"

// A model spec without a preset: default_model picks it for the machine.
inline ModelSpec spec_without_preset() {
    ModelSpec m;
    m.preset = "";
    return m;
}

// Every flag's value (run/train_flags.h's table sets them, and its help shows these initial values as the
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
    double comm_timeout = 600;      // seconds a rank may wait in a collective (dist/watchdog.h)
};

constexpr long kPaperBatchTokens = 524288;   // 2^19: GPT-2 / GPT-3 small, llm.c, the Prism paper
constexpr double kPaperTokensPerParam = 25;  // the Prism paper's 25 to 30, at its low end
constexpr double kDemoPasses = 4;            // passes over data/default/ for a paper-size model
constexpr double kLargeModel = 50e6;         // parameters from which the papers' recipe applies
// wsd's decay: the last 20% of the steps, in a 1-sqrt shape. Hägele et al. 2024 ("Scaling Laws and
// Compute-Optimal Training Beyond Fixed Training Durations") find a 20% cooldown matching a cosine schedule's
// loss, and 1-sqrt better than linear; MiniCPM (Hu et al. 2024), which named WSD, decays over about 10%.
constexpr double kWsdDecayFrac = 0.2;

// GPT-3's learning rates by model size (Brown et al. 2020, table 2.1), and tiny's tested 3e-3.
inline double default_lr(double params) {
    return params < kLargeModel ? 3e-3 : params < 200e6 ? 6e-4 : params < 500e6 ? 3e-4 : params < 1e9 ? 2.5e-4 : 2e-4;
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
