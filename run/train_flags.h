// run/train_flags.h: train_prism's flag table (run/cli.h renders --help from it), and the run record's side of it:
// record_args turns resolved options into the [flag, value] list OUT/run.json keeps (run/run_record.h), and
// restore_recorded_args puts a recorded run's flags back under the ones given on a --resume, so that
// `train_prism --resume -o OUT` alone continues a run as it was started. check_resume_args then refuses a
// flag given on the resume that differs from the record, except kMayChangeOnResume: the length (--steps and
// the flags that set it), --stop-after (never recorded), and the evaluation, sampling, logging and
// checkpointing cadence, none of which changes what the run computes. The output directory itself is not
// compared (a run directory may have been moved). study.cpp parses its trainer flags with the same table.
#pragma once

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "run/cli.h"
#include "run/run_record.h"
#include "eval/tasks.h"
#include "run/defaults.h"
#include "text/tokenizer.h"

inline std::vector<Flag> make_train_flags(TrainOptions& o) {
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
    f.push_back({"--resume", "", "continue the run in OUT from OUT/latest with its recorded flags (OUT/run.json); -o OUT alone is enough",
                 [&o](const std::string&) { o.resume = true; }});
    f.push_back({"--overwrite", "", "start afresh in an OUT that holds a run: delete its checkpoints and log first",
                 [&o](const std::string&) { o.overwrite = true; }});
    f.push_back({"--allow-batch-change", "", "with --resume: go on with another global batch (tokens per step) than "
                 "the checkpoint's (without it, that is an error)", [&o](const std::string&) { o.allow_batch_change = true; }});
    f.push_back({"--allow-data-change", "", "with --resume: go on with other training or validation shards than "
                 "the ones OUT/run.json recorded (without it, that is an error)",
                 [&o](const std::string&) { o.allow_data_change = true; }});
    f.push_back({"--max-nonfinite", "K", "a NaN/inf loss or grad norm skips the step; K in a row stop the run (default 3)",
                 int_flag("--max-nonfinite", o.max_nonfinite, 1, 1000000)});
    f.push_back({"--sample-every", "N", "print a text sample every N steps (0: never; default 50)",
                 [&o](const std::string& v) {
                     long_flag("--sample-every", o.sample_every, 0, kMaxSteps)(v);
                     o.sample_flag_given = true;
                 }});
    f.push_back({"--sample-tokens", "N", "tokens per sample (default 48)", int_flag("--sample-tokens", o.sample_tokens, 1, 1 << 20)});
    f.push_back({"--tokenizer", "FILE", std::string("GPT-2 ranks file for samples (") + kTokenizerHelp + ")",
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

// A flag's canonical spelling: its last one ("-m, --model" -> "--model").
inline std::string canonical_name(const Flag& f) { return flag_spellings(f).back(); }

// The canonical names of the flags argv gives, in order (values skipped).
inline std::vector<std::string> given_flags(int argc, char** argv, const std::vector<Flag>& flags) {
    std::vector<std::string> out;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        const size_t eq = a.find('=');
        const bool inline_value = a.rfind("--", 0) == 0 && eq != std::string::npos;
        if (inline_value) a = a.substr(0, eq);
        for (const Flag& f : flags)
            for (const std::string& n : flag_spellings(f))
                if (n == a) {
                    out.push_back(canonical_name(f));
                    if (!f.arg.empty() && !inline_value) i++;
                }
    }
    return out;
}

// The argument list a --resume parses: the record's flags, minus those the user gives again (and minus
// --steps when a length flag is given), then the user's own. argv[0] first.
inline std::vector<std::string> restore_recorded_args(const RunRecord& rec, int argc, char** argv,
                                                      const std::vector<Flag>& flags) {
    const std::vector<std::string> given = given_flags(argc, argv, flags);
    auto is_given = [&](const std::string& f) { return std::find(given.begin(), given.end(), f) != given.end(); };
    const bool length = is_given("--steps") || is_given("--tokens") || is_given("--tokens-per-param") || is_given("--epochs");
    // --allow-batch-change: the global batch is this invocation's (its own --total-batch, else the default for
    // its B and ranks), not the record's.
    const bool new_batch = is_given("--allow-batch-change");
    std::vector<std::string> out{argv[0]};
    for (const auto& [flag, value] : rec.args) {
        if (is_given(flag) || (flag == "--steps" && length) || (flag == "--total-batch" && new_batch)) continue;
        if ((flag == "--tied" && is_given("--untied")) || (flag == "--untied" && is_given("--tied"))) continue;
        out.push_back(flag);
        bool takes_value = false;
        for (const Flag& f : flags)
            if (canonical_name(f) == flag) takes_value = !f.arg.empty();
        if (takes_value && value.empty()) out.pop_back();  // recorded as "" (the default): no empty path flag
        else if (takes_value) out.push_back(value);
    }
    for (int i = 1; i < argc; i++) out.push_back(argv[i]);
    return out;
}
