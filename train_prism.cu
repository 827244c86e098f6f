// train_prism: trains a model (README "Training") on the GPU when one is present, else on the CPU reference,
// or, with --plan, prints a model's per-layer table and totals and the GPU memory a run at -b B needs
// (memory_plan.h), and exits. Under mpirun (or srun, or the environment rendezvous) every process is one
// data-parallel rank (dist.h). This file is the command line: the flag table (cli.h renders --help from it) and
// main; the loop is train_loop.h, the defaults run_defaults.h, the output directory run_dir.h, the engines
// engine.h, the process group dist.h.
#include <memory>
#include <string>
#include <vector>

#include "cli.h"
#include "dist.h"
#include "engines.h"
#include "memory_plan.h"
#include "plan.h"
#include "run_defaults.h"
#include "schedule.h"
#include "train_loop.h"

static std::vector<Flag> make_flags(TrainOptions& o) {
    std::vector<Flag> f;
    f.push_back({"-h, --help", "", "print this help and exit", [&o](const std::string&) { o.help = true; }});
    f.push_back({"--plan", "", "print the model's per-layer table, totals and GPU memory at -b, -t, and exit", [&o](const std::string&) { o.plan = true; }});
    f.push_back({"--json", "", "with --plan: print it as JSON", [&o](const std::string&) { o.json = true; }});
    add_model_flags(f, o.model);
    for (Flag& x : f)
        if (x.names == "-m, --model") x.help = x.help.substr(0, x.help.find(" (default")) + " (default: 124M on a GPU, tiny on the CPU)";
    f.push_back({"--train", "GLOB", "training shards (default data/fineweb10B/*_train_*.bin if that directory exists, else "
                 "data/default/*_train_*.bin)", [&o](const std::string& v) { o.train = v; }});
    f.push_back({"--val", "GLOB", "validation shards (default: the _val_ shards next to the default training shards)",
                 [&o](const std::string& v) { o.val = v; }});
    f.push_back({"-o, --out", "DIR", "output directory: log.jsonl, checkpoints (default out/PRESET[-HEADS][-WIDTHS])",
                 [&o](const std::string& v) { o.out = v; }});
    f.push_back({"-b, --batch", "B", "micro-batch rows (default 16)", int_flag("--batch", o.B, 1, 1 << 20)});
    f.push_back({"-t, --train-seq", "T", "training sequence length (default: the model's context)", int_flag("--train-seq", o.T, 1, 1 << 20)});
    f.push_back({"--total-batch", "TOKENS", "tokens per optimizer step, all ranks together; a multiple of B*T*ranks "
                 "(gradient accumulation); default 524288 for models of 50M parameters or more, else B*T*ranks",
                 long_flag("--total-batch", o.total_batch, 1, kMaxSteps)});
    f.push_back({"--steps", "N", "optimizer steps (default: 25 tokens per parameter for models of 50M or more, else 150)",
                 long_flag("--steps", o.steps, 1, kMaxSteps)});
    f.push_back({"--tokens", "N", "token budget: steps = N / total batch", long_flag("--tokens", o.tokens, 1, kMaxTokens)});
    f.push_back({"--tokens-per-param", "R", "token budget of R tokens per parameter (the papers use 25 to 30)",
                 double_flag("--tokens-per-param", o.tokens_per_param, 1e-9, 1e6)});
    f.push_back({"--epochs", "E", "token budget of E passes over the training shards",
                 double_flag("--epochs", o.epochs, 1e-9, 1e6)});
    f.push_back({"--lr", "LR", "peak learning rate (default by model size: 3e-3 below 50M parameters, 6e-4 to 200M, "
                 "3e-4 to 500M, 2.5e-4 to 1B)", double_flag("--lr", o.lr, 0, 10)});
    f.push_back({"--warmup-frac", "F", "linear warmup over this fraction of the steps (default 0.025)", double_flag("--warmup-frac", o.warmup_frac, 0, 1)});
    f.push_back({"--final-lr-frac", "F", "cosine decays to F * lr (default 0.1)", double_flag("--final-lr-frac", o.final_lr_frac, 0, 1)});
    f.push_back({"--wd", "W", "AdamW weight decay on matrices (default 0.1)", double_flag("--wd", o.opt.weight_decay, 0, 10)});
    f.push_back({"--beta1", "B1", "AdamW beta1 (default 0.9)", double_flag("--beta1", o.opt.beta1, 0, 0.999999)});
    f.push_back({"--beta2", "B2", "AdamW beta2 (default 0.95)", double_flag("--beta2", o.opt.beta2, 0, 0.999999)});
    f.push_back({"--adam-eps", "E", "AdamW epsilon (default 1e-8)", double_flag("--adam-eps", o.opt.eps, 1e-30, 1)});
    f.push_back({"--clip", "C", "clip the global gradient norm to C (0: off; default 1.0)", double_flag("--clip", o.clip, 0, 1e9)});
    f.push_back({"--seed", "S", "seed for init, data order and sampling (default 1337)", [&o](const std::string& v) {
                     long s = 0;
                     long_flag("--seed", s, 0)(v);
                     o.seed = (uint64_t)s;
                 }});
    f.push_back({"--no-shuffle", "", "read shards and windows in order", [&o](const std::string&) { o.shuffle = false; }});
    f.push_back({"--val-every", "N", "validation loss every N steps and at the end (0: never; default 50)", long_flag("--val-every", o.val_every, 0, kMaxSteps)});
    f.push_back({"--val-tokens", "N", "tokens per validation (default 8192)", long_flag("--val-tokens", o.val_tokens, 1, kMaxSteps)});
    f.push_back({"--ckpt-every", "N", "checkpoint every N steps; always one at the end (default: only at the end)",
                 long_flag("--ckpt-every", o.ckpt_every, 0, kMaxSteps)});
    f.push_back({"--keep", "K", "checkpoints to keep (default 2)", int_flag("--keep", o.keep, 1, 1000000)});
    f.push_back({"--stop-after", "N", "stop after N steps of this run, with a checkpoint (e.g. to fit a job time limit)",
                 long_flag("--stop-after", o.stop_after, 1, kMaxSteps)});
    f.push_back({"--resume", "", "continue from OUT/latest (pass the same flags as the first run)",
                 [&o](const std::string&) { o.resume = true; }});
    f.push_back({"--overwrite", "", "start afresh in an OUT that holds a run: delete its checkpoints and log first",
                 [&o](const std::string&) { o.overwrite = true; }});
    f.push_back({"--allow-batch-change", "", "with --resume: go on with another global batch (tokens per step) than "
                 "the checkpoint's (without it, that is an error)", [&o](const std::string&) { o.allow_batch_change = true; }});
    f.push_back({"--max-nonfinite", "K", "a NaN/inf loss or grad norm skips the step; K in a row stop the run (default 3)",
                 int_flag("--max-nonfinite", o.max_nonfinite, 1, 1000000)});
    f.push_back({"--sample-every", "N", "print a text sample every N steps (0: never; default 50)",
                 [&o](const std::string& v) {
                     long_flag("--sample-every", o.sample_every, 0, kMaxSteps)(v);
                     o.sample_flag_given = true;
                 }});
    f.push_back({"--sample-tokens", "N", "tokens per sample (default 48)", int_flag("--sample-tokens", o.sample_tokens, 1, 1 << 20)});
    f.push_back({"--tokenizer", "FILE", "GPT-2 ranks file for samples (default data/cache/gpt2.tiktoken)",
                 [&o](const std::string& v) { o.tokenizer = v; }});
    f.push_back({"--eval-every", "N", "run the zero-shot task --eval-task every N steps and log it (0: never)",
                 long_flag("--eval-every", o.eval_every, 0, kMaxSteps)});
    f.push_back({"--eval-task", "TASK", "hellaswag | piqa | arc_easy | winogrande | lambada | wikitext (default hellaswag)",
                 [&o](const std::string& v) { o.eval_task = find_eval_task(v).name; }});
    f.push_back({"--eval-limit", "N", "examples per in-training eval (0: all; default 500)", long_flag("--eval-limit", o.eval_limit, 0, kMaxSteps)});
    f.push_back({"--eval-data", "DIR", "prepared eval files (default data/eval, see data/get_eval.sh)",
                 [&o](const std::string& v) { o.eval_data = v; }});
    f.push_back({"--cpu", "", "train on the CPU reference even when a GPU is present", [&o](const std::string&) { o.cpu = true; }});
    f.push_back({"--recompute", "", "GPU: recompute norm and SwiGLU outputs in the backward (less memory; automatic when needed)",
                 [&o](const std::string&) { o.recompute = true; }});
    f.push_back({"--zero", "STAGE", "with several ranks: 1 shards the optimizer state across them (default), 0 keeps "
                 "all of it on every rank", [&o](const std::string& v) {
                     o.zero = parse_int_flag("--zero", v);
                     if (o.zero != 0 && o.zero != 1) throw ConfigError("--zero must be 0 or 1");
                 }});
    f.push_back({"--comm-timeout", "S", "with several ranks: end the job when a rank waits S seconds in a collective "
                 "(a rank died or hangs; default 600)", double_flag("--comm-timeout", o.comm_timeout, 1, 1e6)});
    return f;
}

// The body of main on every rank; errors are thrown (run_ranks reports them).
static int train_main(int argc, char** argv, Dist& dist) {
    TrainOptions o;
    o.model.preset = "";  // run_defaults.h: 124M on a GPU, tiny on the CPU
    std::vector<Flag> flags = make_flags(o);
    ModelConfig cfg;
    std::vector<std::string> warnings, notes;
    dist.all_or_none([&] {  // a bad flag is one message, not one per rank
        parse_flags(argc, argv, flags, "train_prism");
        if (o.json && !o.plan) throw ConfigError("--json only applies to --plan");
        std::string length;  // the run's length is set by one flag at most
        for (auto [given, name] : {std::pair<bool, const char*>{o.steps > 0, "--steps"}, {o.tokens > 0, "--tokens"},
                                   {o.tokens_per_param > 0, "--tokens-per-param"}, {o.epochs > 0, "--epochs"}}) {
            if (given && !length.empty())
                throw ConfigError(length + " and " + name + " both set the run's length; pass one of them");
            if (given) length = name;
        }
        if (o.allow_batch_change && !o.resume && !o.plan) throw ConfigError("--allow-batch-change only applies to --resume");
        if (o.help) return;
        default_model(o, gpu_engine_available(o.cpu));
        cfg = build_config(o.model, warnings);
        default_run(o, cfg, dist.world, notes);
        if (dist.rank == 0) {
            for (const auto& w : warnings) fprintf(stderr, "warning: %s\n", w.c_str());
            if (!o.plan)
                for (const auto& n : notes) fprintf(stderr, "note: %s\n", n.c_str());
        }
    });
    if (o.help) {
        if (dist.rank == 0) {
            printf("usage: train_prism [flags]\n\nTrains a model on the GPU when one is present (default: 124M on "
                   "FineWeb, or on data/default/ when data/fineweb10B/ is missing), else on the CPU (default: tiny); under "
                   "mpirun, one data-parallel rank per process.\n\n");
            print_flags(stdout, flags);
        }
        return 0;
    }
    if (o.plan) {
        if (dist.rank > 0) return 0;
        std::string title = o.model.preset + " (heads " + o.model.heads + ", widths " + o.model.widths + ")";
        if (o.json) {
            print_plan_json(stdout, title, cfg, warnings);
        } else {
            print_plan(stdout, title, cfg);
            print_gpu_memory(stdout, cfg, o.B, o.T ? o.T : cfg.T);
        }
        return 0;
    }
    Watchdog::get().set_limit(o.comm_timeout);
    std::string why;
    std::unique_ptr<Engine> eng;
    EngineOptions eo;
    eo.force_cpu = o.cpu, eo.recompute = o.recompute, eo.B = o.B, eo.T = o.T ? o.T : cfg.T;
    eo.dp = DataParallel{&dist, zero_stage(o, dist.world)};
    dist.all_or_none([&] { eng = make_engine(cfg, eo, why); });
    return run_training(o, cfg, *eng, why, dist);
}

// Before main, as the program's static objects are built: a stop signal from then on is honoured (train_loop.h
// ends a run stopped during its start-up with kExitInterrupted); only one that lands while the kernel and the
// dynamic loader start the process takes the signal's default action.
static const bool g_stop_handlers_installed = (install_stop_handlers(), true);

int main(int argc, char** argv) {
    for (int i = 1; i + 1 < argc; i++)  // the watchdog's limit bounds the process group's forming too (dist.h)
        if (std::string(argv[i]) == "--comm-timeout") {
            char* end = nullptr;
            const double s = strtod(argv[i + 1], &end);
            if (*end == 0 && s >= 1 && s <= 1e6) Watchdog::get().set_limit(s);  // else parse_flags says why
        }
    Dist dist;
    return run_ranks(dist, "use a smaller model or batch (-b)", [&] {
        dist.start(&argc, &argv, "train_prism");
        return train_main(argc, argv, dist);
    });
}
