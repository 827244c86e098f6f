// run/train_flags.cpp: train_prism's flag table and its record rules (declared in run/defaults.h).
#include "run/defaults.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>
#include <tuple>

#include "eval/tasks.h"
#include "lr_schedule.h"
#include "model/schedules.h"  // trim, parse_positive_int
#include "run/model_flags.h"
#include "run/plan_views.h"
#include "text/tokenizer_path.h"

// Sizes and rates in the help as the papers write them, from the constants the defaults use: "50M", "1B"; "3e-3".
static std::string size_text(double n) { return n >= 1e9 ? exact_number(n / 1e9) + "B" : exact_number(n / 1e6) + "M"; }
// Every significant digit of the rate is kept (15), so the help never shows a rounded value.
static std::string rate_text(double x) {
    char b[32];
    snprintf(b, sizeof b, "%.14e", x);  // d.dddddddddddddde-XX
    char* e = strchr(b, 'e');
    std::string m(b, e);
    m.erase(m.find_last_not_of('0') + 1);
    if (m.back() == '.') m.pop_back();
    return m + "e" + std::to_string(atoi(e + 1));
}

std::vector<Flag> make_train_flags(TrainOptions& o) {
    std::vector<Flag> f;
    f.push_back(
        switch_flag("--plan", "print the model's per-layer table, totals and GPU memory at -b, -t, and exit", o.plan)
            .not_recorded());
    f.push_back(switch_flag("--json", "with --plan: print it as JSON", o.json).not_recorded());
    add_model_flags(f, o.model, "default: 124M on a GPU, tiny on the CPU");
    f.push_back(path_flag("--train", "GLOB",
                          "training shards (default data/fineweb10B/*_train_*.bin if that directory "
                          "exists, else data/default/*_train_*.bin)",
                          o.train));
    f.push_back(path_flag("--val", "GLOB",
                          "validation shards (default: the _val_ shards next to the default training "
                          "shards)",
                          o.val));
    f.push_back(path_flag("-o, --out", "DIR",
                          "output directory: log.jsonl, checkpoints (default "
                          "out/PRESET[-HEADS][-WIDTHS])",
                          o.out)
                    .changes_on_resume());
    // how it runs, not what it computes: the micro-batch (the total batch stays, so another rank count reads the
    // same sequences), the engine, ZeRO, recomputation
    f.push_back(
        number_flag("-b, --batch", "B", "micro-batch rows (default {default})", o.B, 1, 1 << 20).changes_on_resume());
    f.push_back(
        number_flag("-t, --train-seq", "T", "training sequence length (default: the model's context)", o.T, 1, 1 << 20)
            .unless("0"));
    f.push_back(number_flag("--total-batch", "TOKENS",
                            "tokens per optimizer step, all ranks together; a multiple of "
                            "B*T*ranks (gradient accumulation); default " +
                                std::to_string(kPaperBatchTokens) + " for models of " + size_text(kLargeModel) +
                                " parameters or more, else B*T*ranks",
                            o.total_batch, 1, kMaxSteps));
    // The length: --tokens, --tokens-per-param and --epochs resolve to --steps, which is what the record keeps.
    f.push_back(number_flag("--steps", "N",
                            "optimizer steps (default: " + exact_number(kPaperTokensPerParam) +
                                " tokens per parameter for models of " + size_text(kLargeModel) + " or more, else " +
                                std::to_string(kSmallModelSteps) + ")",
                            o.steps, 1, kMaxSteps)
                    .changes_on_resume());
    f.push_back(number_flag("--tokens", "N", "token budget: steps = N / total batch", o.tokens, 1, kMaxTokens)
                    .not_recorded()
                    .changes_on_resume());
    f.push_back(number_flag("--tokens-per-param", "R",
                            "token budget of R tokens per parameter (the papers use 25 to "
                            "30)",
                            o.tokens_per_param, 1e-9, 1e6)
                    .not_recorded()
                    .changes_on_resume());
    f.push_back(number_flag("--epochs", "E", "token budget of E passes over the training shards", o.epochs, 1e-9, 1e6)
                    .not_recorded()
                    .changes_on_resume());
    std::string lrs;
    for (const auto& [below, lr] : kLrBySize)
        lrs += lrs.empty() ? rate_text(lr) + " below " + size_text(below) + " parameters"
                           : ", " + rate_text(lr) + " to " + size_text(below);
    f.push_back(number_flag("--lr", "LR", "peak learning rate (default by model size: " + lrs + ")", o.lr, 0, 10));
    f.push_back(number_flag("--warmup-frac", "F", "linear warmup over this fraction of the steps (default {default})",
                            o.warmup_frac, 0, 1));
    // The schedule (lr_schedule.h's LrSchedule). --warmup, --lr-schedule, --decay-frac and --decay-shape may
    // change on a resume only where the lr of every step done stays the same (lr_branch_flags): a wsd run
    // branched into another decay from its stable phase.
    f.push_back(number_flag("--warmup", "N", "linear warmup over N steps (default: --warmup-frac of the steps)",
                            o.warmup, 0, kMaxSteps)
                    .unless("-1"));
    f.push_back(choice_flag("--lr-schedule", "KIND",
                            "after the warmup: cosine to --final-lr-frac (default); wsd: stable, then a decay over "
                            "the last --decay-frac of the steps (resumable into another decay); linear; constant",
                            o.lr_schedule, lr_schedule_kinds())
                    .unless("cosine"));
    f.push_back(number_flag("--decay-frac", "F",
                            "wsd: decay over the last F of the steps (default " + exact_number(kWsdDecayFrac) +
                                ", the cooldown Hagele et al. 2024 find matches cosine)",
                            o.decay_frac, 0, 1)
                    .record_if([&o] { return o.lr_schedule == "wsd"; }));
    f.push_back(choice_flag("--decay-shape", "SHAPE",
                            "wsd: the decay's shape: sqrt (1 - sqrt of its progress; the default, best in "
                            "Hagele et al. 2024's comparison), linear or cosine",
                            o.decay_shape, lr_decay_shapes())
                    .record_if([&o] { return o.lr_schedule == "wsd"; }));
    f.push_back(number_flag("--final-lr-frac", "F", "the schedule decays to F * lr (default {default})",
                            o.final_lr_frac, 0, 1));
    f.push_back(
        number_flag("--wd", "W", "AdamW weight decay on matrices (default {default})", o.opt.weight_decay, 0, 10));
    // Per-layer optimizer multipliers (optimizer_rates.h): flags of the run, not of the model (model.bin never holds
    // them), recorded when given, so a resume with other values is refused.
    for (auto [flag, dst, what] :
         {std::tuple<const char*, std::string*, const char*>{"--lr-mult", &o.lr_mult, "learning rate (--lr)"},
          {"--wd-mult", &o.wd_mult, "weight decay (--wd)"}}) {
        Flag m = text_flag(flag, "LIST",
                           std::string("per-layer multipliers of the ") + what +
                               ": one number >= 0 per layer, run-length lists like 1x6,0.5x6 (default: 1 for "
                               "every layer)",
                           *dst);
        m.apply = [dst, flag = std::string(flag)](const std::string& v) { parse_multiplier_list(v, flag), *dst = v; };
        m.sample = "1";
        f.push_back(m.unless(""));
    }
    f.push_back(number_flag("--beta1", "B1", "AdamW beta1 (default {default})", o.opt.beta1, 0, 0.999999));
    f.push_back(number_flag("--beta2", "B2", "AdamW beta2 (default {default})", o.opt.beta2, 0, 0.999999));
    f.push_back(number_flag("--adam-eps", "E", "AdamW epsilon (default {default})", o.opt.eps, 1e-30, 1));
    f.push_back(
        number_flag("--clip", "C", "clip the global gradient norm to C (0: off; default {default})", o.clip, 0, 1e9));
    f.push_back(
        number_flag("--seed", "S", "seed for init, data order and sampling (default {default})", o.seed, 0, kMaxLong));
    f.push_back(switch_flag("--no-shuffle", "read shards and the sequences within them in order", o.shuffle, false));
    f.push_back(number_flag("--val-every", "N",
                            "validation loss every N steps and at the end (0: never; default "
                            "{default})",
                            o.val_every, 0, kMaxSteps)
                    .changes_on_resume());
    f.push_back(
        number_flag("--val-tokens", "N", "tokens per validation (default {default})", o.val_tokens, 1, kMaxSteps));
    f.push_back(number_flag("--ckpt-every", "N",
                            "checkpoint every N steps; always one at the end (default: only at "
                            "the end)",
                            o.ckpt_every, 0, kMaxSteps)
                    .changes_on_resume());
    f.push_back(
        number_flag("--keep", "K", "checkpoints to keep (default {default})", o.keep, 1, 1000000).changes_on_resume());
    f.push_back(number_flag("--stop-after", "N",
                            "stop after N steps of this run, with a checkpoint (e.g. to fit a job "
                            "time limit)",
                            o.stop_after, 1, kMaxSteps)
                    .not_recorded()
                    .changes_on_resume());
    f.push_back(switch_flag("--resume",
                            "continue the run in OUT from OUT/latest with its recorded flags "
                            "(OUT/run.json); -o OUT alone is enough",
                            o.resume)
                    .not_recorded());
    f.push_back(switch_flag("--overwrite",
                            "start afresh in an OUT that holds a run: delete its checkpoints and log "
                            "first",
                            o.overwrite)
                    .not_recorded());
    f.push_back(switch_flag("--allow-batch-change",
                            "with --resume: go on with another global batch (tokens per step) "
                            "than the checkpoint's (without it, that is an error)",
                            o.allow_batch_change)
                    .not_recorded());
    f.push_back(switch_flag("--allow-data-change",
                            "with --resume: go on with other training or validation shards "
                            "than the ones OUT/run.json recorded (without it, that is an error)",
                            o.allow_data_change)
                    .not_recorded());
    f.push_back(path_flag("--branch-from", "STEP_DIR",
                          "with --resume: go on from this earlier checkpoint of OUT (step_00000020): OUT/latest names "
                          "it, the checkpoints of later steps move aside into OUT/lineage_TIME/ (kept, never deleted) "
                          "and the log is cut back to it",
                          o.branch_from)
                    .not_recorded()
                    .changes_on_resume());
    f.push_back(number_flag("--max-nonfinite", "K",
                            "a NaN/inf loss or grad norm skips the step; K in a row stop the "
                            "run (default {default})",
                            o.max_nonfinite, 1, 1000000));
    // Recorded only when given: else the default, and a missing tokenizer stays a note.
    f.push_back(number_flag("--sample-every", "N", "print a text sample every N steps (0: never; default {default})",
                            o.sample_every, 0, kMaxSteps)
                    .then([&o] { o.sample_flag_given = true; })
                    .record_if([&o] { return o.sample_flag_given; })
                    .changes_on_resume());
    f.push_back(
        number_flag("--sample-tokens", "N", "tokens per sample (default {default})", o.sample_tokens, 1, 1 << 20)
            .changes_on_resume());
    f.push_back(path_flag("--tokenizer", "FILE", std::string("GPT-2 ranks file for samples (") + kTokenizerHelp + ")",
                          o.tokenizer));
    f.push_back(number_flag("--layer-stats-every", "N",
                            "log each layer's gradient norm and RMS (whole, attention, MLP), update/weight "
                            "ratio and output RMS every N steps, with a line naming the layer furthest from the "
                            "others (0: never; default {default})",
                            o.layer_stats_every, 0, kMaxSteps)
                    .changes_on_resume());
    f.push_back(number_flag("--eval-every", "N",
                            "run the zero-shot task --eval-task every N steps and log it (0: "
                            "never)",
                            o.eval_every, 0, kMaxSteps)
                    .changes_on_resume());
    std::vector<std::string> tasks;
    for (const EvalTaskInfo& t : eval_tasks()) tasks.push_back(t.name);
    f.push_back(choice_flag("--eval-task", "TASK", eval_task_names(" | ") + " (default {default})", o.eval_task, tasks,
                            [](const std::string& v) { return std::string(find_eval_task(v).name); }));
    f.push_back(number_flag("--eval-limit", "N", "examples per in-training eval (0: all; default {default})",
                            o.eval_limit, 0, kMaxSteps));
    f.push_back(
        path_flag("--eval-data", "DIR", "prepared eval files (default {default}, see data/get_eval.sh)", o.eval_data));
    f.push_back(
        switch_flag("--cpu", "train on the CPU reference even when a GPU is present", o.cpu).changes_on_resume());
    f.push_back(switch_flag("--recompute",
                            "GPU: recompute norm and SwiGLU outputs in the backward (less memory; "
                            "automatic when needed)",
                            o.recompute)
                    .changes_on_resume());
    Flag zero = make_flag(
        "--zero", "STAGE",
        "with several ranks: 1 shards the optimizer state across them (default), 0 keeps all "
        "of it on every rank",
        [&o](const std::string& v) {
            o.zero = parse_int_flag("--zero", v);
            if (o.zero != 0 && o.zero != 1) throw ConfigError("--zero must be 0 or 1");
        },
        FlagKind::Choice);
    zero.choices = {"0", "1"};
    zero.value = [&o] { return std::to_string(o.zero); };
    f.push_back(zero.unless("-1").changes_on_resume());
    f.push_back(number_flag("--comm-timeout", "S",
                            "with several ranks: end the job when a rank waits S seconds in a "
                            "collective (a rank died or hangs; default {default})",
                            o.comm_timeout, 1, 1e6)
                    .changes_on_resume());
    return f;
}

Command train_prism_command(TrainOptions& o) {
    Command c;
    c.name = "train_prism";
    c.usage = "[flags]";
    c.about =
        "Trains a model on the GPU when one is present (default: 124M on FineWeb, or on data/default/ when "
        "data/fineweb10B/ is missing), else on the CPU (default: tiny); under mpirun, one data-parallel rank "
        "per process.";
    c.flags = make_train_flags(o);
    c.help_line = "print this help and exit";
    c.help_first = true;
    return c;
}

std::vector<double> parse_multiplier_list(const std::string& text, const std::string& flag) {
    std::vector<double> out;
    size_t start = 0;
    while (start <= text.size()) {
        const size_t comma = text.find(',', start);
        const std::string item =
            trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        const size_t x = item.find_first_of("xX*");
        const std::string num = trim(item.substr(0, x));
        char* end = nullptr;
        const double v = std::strtod(num.c_str(), &end);
        if (num.empty() || *end || !(v >= 0 && v <= 1000))
            throw ConfigError(flag + " " + text + ": '" + item +
                              "' is not a multiplier; give numbers from 0 to 1000, one per layer (1x6,0.5x6 works)");
        const int n = x == std::string::npos ? 1 : parse_positive_int(item.substr(x + 1), flag + " repeat count");
        if (out.size() + n > 100000) throw ConfigError(flag + ": list is absurdly long");
        out.insert(out.end(), n, v);
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return out;
}

std::vector<double> layer_multipliers(const std::string& text, const std::string& flag, int L) {
    if (text.empty()) return {};
    std::vector<double> v = parse_multiplier_list(text, flag);
    if ((int)v.size() != L)
        throw ConfigError(flag + " " + text + " has " + std::to_string(v.size()) + " entries but the model has " +
                          std::to_string(L) + " layers; give one per layer (run-length lists like 0.5x" +
                          std::to_string(L) + " work)");
    return v;
}

OptimizerMultipliers optimizer_multipliers(const TrainOptions& o, const ModelConfig& cfg) {
    OptimizerMultipliers m;
    m.layer_lr = layer_multipliers(o.lr_mult, "--lr-mult", cfg.L());
    m.layer_wd = layer_multipliers(o.wd_mult, "--wd-mult", cfg.L());
    m.layer_fan_in = mup_layer_ratios(cfg);  // muP's fan-in rule for the layers' matrices (none without it)
    return m;
}

std::vector<RunLayerColumn> optimizer_plan_columns(const TrainOptions& o, const ModelConfig& cfg) {
    const OptimizerMultipliers m = optimizer_multipliers(o, cfg);
    std::vector<RunLayerColumn> out;
    if (!m.layer_lr.empty()) out.push_back({"lr x", "lr_mult", m.layer_lr});
    if (!m.layer_wd.empty()) out.push_back({"wd x", "wd_mult", m.layer_wd});
    return out;
}

std::vector<std::string> may_change_on_resume() {
    TrainOptions o;
    std::vector<std::string> v;
    for (const Flag& f : make_train_flags(o))
        if (f.may_change) v.push_back(canonical_name(f));
    return v;
}

std::vector<std::pair<std::string, std::string>> record_args(const TrainOptions& resolved, const RunPlan& p) {
    TrainOptions o = resolved;
    o.total_batch = p.total_batch, o.steps = p.steps;
    if (o.warmup < 0 && p.warmup != default_warmup(o, p.steps)) o.warmup = p.warmup;
    std::vector<std::pair<std::string, std::string>> a;
    for (const Flag& f : make_train_flags(o))
        if (f.recorded && (!f.is_set || f.is_set())) a.push_back({canonical_name(f), f.value()});
    return a;
}

std::vector<std::string> given_flags(int argc, char** argv, const std::vector<Flag>& flags) {
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
