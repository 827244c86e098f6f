// study: a grid of training runs, configurations x seeds, one train_prism run directory each under the study's
// directory, so that the papers' comparisons are made over seeds (docs/studies.md).
//
//   ./study runs/tiny --recipe tiny                                 # 4 configurations x 3 seeds on the CPU
//   ./study runs/p124 --recipe prism124m --launcher "mpirun -np 8"
//   ./study runs/mine -m tiny --heads uniform,prism --widths uniform,x --seeds 3 -- --steps 300 --lr 2e-3
//   ./study runs/lr -m tiny --heads uniform,prism --grid lr=1e-3,3e-3   # a trainer flag as an axis
//   ./study runs/mine ... --list          # one line per run: K, its state, the command that runs it now
//   ./study runs/mine ... --only 5        # only the 5th (a scheduler's job array: --only $SLURM_ARRAY_TASK_ID)
//
// The runs are the grid seeds x heads x widths x axes, in that order (seeds outermost: a study stopped early has
// every configuration on its first seeds, so its comparisons are already paired), named HEADS-WIDTHS-sSEED, with
// each axis's flag and value before the seed (HEADS-WIDTHS-lr1e-3-sSEED). An axis (--grid FLAG=LIST, or a
// recipe's) is any trainer flag that the run record compares and the study does not set itself, checked against
// train_prism's flag table (run/defaults.h); a per-layer list flag's values (--window, --kv-heads, --mlp, ...)
// write '/' for their commas, as --heads does (--grid window=global,local:256/5:1). Every run is `train_prism -m PRESET -s HEADS -w WIDTHS --seed S
// -o DIR/NAME` plus its axes' values, the recipe's trainer flags (less those an axis or `--` gives again) and those
// after `--`. The same command can be rerun until the study is complete: a run whose record
// (run/run_record.h) says "done" at the study's steps is skipped (and a run recorded with other flags is an
// error naming the flag), one with a checkpoint is resumed (--resume, which refuses changed flags), one that
// died before its first checkpoint is started again (--overwrite: only its own directory), the rest start.
// Runs with the same seed read the same data in the same order (the loader's order depends on the seed, B, T
// and the ranks only), so configurations compare seed by seed. After each run, when eval files exist
// (--eval-data, default data/eval), eval_zeroshot scores the run's model on every task present into
// DIR/NAME/eval.json and every example's result into DIR/NAME/samples.jsonl, which `report` reads. Each run's output
// goes to DIR/NAME/train.log.
// Before it starts, a study prints its grid with where each part comes from (command line, recipe, default: an
// override is never silent), its runs and the cost model's estimate (cost_model.h: the CUDA engine's ops at the
// roofline with the stated efficiencies, training steps only) in GPU-hours, and the wall time on this machine: the
// tokens left at the pace a run of the study logged here (validation included); without one yet, the first run's
// first steps measure it (--list prints all this on stderr).
// Exit status: 0 when every run asked for is done, 1 on an error or a failed run (the others still run),
// 75 whenever a stop signal stopped the study: during a run or its evals (whatever the child's own code: a
// second signal ends the trainer at once, 138), between runs, or while it was still planning (at once).
// A study is its trainer's parent and behaves as one ("The trainer as a child" below).
// A grid whose configurations resolve to the same model (-s prism on a model of 3 layers or fewer is the uniform
// schedule) is refused: such a study would compare a model with itself.
#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/layer_columns.h"
#include "run/cli.h"
#include "run/cost_model.h"
#include "eval/tasks.h"
#include "run/run_record.h"
#include "dataloader.h"  // glob_shards
#include "run/stop_signal.h"
#include "util/fs.h"
#include "run/defaults.h"
#include "util/json.h"

namespace {

constexpr long kPaceSteps = 5;  // steps of a run's log from which the study measures its pace

// A named recipe: the papers' experiments, and one that runs on two CPU cores.
struct Recipe {
    const char* name;
    const char* preset;
    const char* heads;
    const char* widths;
    int seeds;
    std::vector<std::string> flags;                         // trainer flags
    std::vector<std::pair<std::string, std::string>> grid;  // axes: trainer flag (no dashes) and its values
    const char* what;
};

const std::vector<Recipe>& recipes() {
    // The papers' batch (2^19 tokens) and budget (25 tokens per parameter, the low end of the Prism paper's 25
    // to 30), on FineWeb (data/get_fineweb.sh). Their learning rate is an axis: the trainer's default for the
    // size (GPT-3's table, run/defaults.h: 6e-4 to 200M parameters, 3e-4 to 500M) with half and twice it, so
    // each arm is compared at its own best rate (report's "each arm at its best lr"). tiny: 60 steps of 8 x 128
    // tokens per run, about 11 minutes for its 12 runs on two otherwise idle CPU cores; tiny-lr: its sweep, the
    // same length and budget.
    // Issue 28's comparisons. openelm124m: the head schedule (uniform, Prism, OpenELM's alpha rule) crossed with the
    // MLP schedule (the ratio rule, OpenELM's beta rule), every arm parameter-matched to uniform by --match mlp
    // (Prism and OpenELM heads keep the attention's parameters, so only OpenELM's MLP profile needs the match):
    // Prism heads (prism, uniform MLP), OpenELM's layer-wise scaling (openelm, openelm), both (prism, openelm),
    // and each half of OpenELM alone. window124m: global attention vs Gemma's local/global 5:1 interleave (a
    // window of T / 4), under uniform and Prism heads; a window changes no parameter, only FLOPs and the cache.
    // tiny-openelm and tiny-window: the same grids at tiny on the CPU (window 32 of T 128), tiny's length.
    // Issue 52's hybrids, every arm with --match mlp (a gdn layer has more parameters than an attention layer of its
    // width and heads: the MLPs give them back). hybrid124m: all-attention vs Gated DeltaNet 3:1 (gdn:3:1, attention
    // in layers 4, 8, 12), under uniform and Prism heads (Prism's schedule sets every layer's heads, the gdn layers'
    // too). placement124m: the same three attention layers of twelve placed interleaved (gdn:3:1), first, middle
    // (layers 5 to 7) or last, against all-attention. Both train on the CUDA engine's gdn (issue 53: its kernels are
    // tested on the CPU executor, no GPU has timed them yet), so their GPU-hours are the cost model's estimate of
    // those kernels (the listing says which runs that covers). tiny-hybrid: the CPU demonstration,
    // all-attention vs gdn:3:1 (one attention layer of six, layer 4) at equal parameters, 2 seeds of 120 steps.
    auto plus = [](std::vector<std::string> v, const std::vector<std::string>& more) {
        v.insert(v.end(), more.begin(), more.end());
        return v;
    };
    static const std::vector<std::string> paper = {"--total-batch", "524288", "--tokens-per-param", "25"};
    static const std::vector<std::string> cpu = {
        "--steps", "60", "-b", "8", "--val-every", "20", "--val-tokens", "4096", "--sample-every", "0"};
    // coord: a coordinate check (report's, inspect/report_coord.h): the first steps at one constant rate, the
    // per-layer signals at every step; -t 64 keeps d 512 at about a second a step.
    // clang-format off
    static const std::vector<std::string> coord = {"--steps", "5", "-b", "8", "-t", "64", "--lr", "3e-3",
        "--lr-schedule", "constant", "--warmup", "0", "--val-every", "0", "--sample-every", "0",
        "--layer-stats-every", "1"};
    // clang-format on
    // mup-lr and mup-shapes: the lr-transfer study (docs/studies.md#lr-transfer-across-widths-and-shapes), sized for
    // two shared CPU cores: 40 steps of 8 x 32 tokens, validation once at the end.
    // clang-format off
    static const std::vector<std::string> lr_cpu = {"--steps", "40", "-b", "8", "-t", "32", "--val-every", "40",
        "--val-tokens", "4096", "--sample-every", "0", "--layer-stats-every", "0"};
    // clang-format on
    static const std::vector<std::string> paper_match = plus(paper, {"--match", "mlp"}),
                                          cpu_match = plus(cpu, {"--match", "mlp"});
    static const std::vector<std::string> cpu_hybrid = {"--steps",        "120", "-b",           "8",
                                                        "--val-every",    "40",  "--val-tokens", "8192",
                                                        "--sample-every", "0",   "--match",      "mlp"};
    // clang-format off
    static const std::vector<Recipe> r = {
        {"prism124m", "124M", "uniform,prism", "uniform", 3, paper, {{"lr", "3e-4,6e-4,1.2e-3"}},
         "Prism 124M: uniform vs the Prism schedule, each at lr 3e-4, 6e-4, 1.2e-3"},
        {"prism354m", "354M", "uniform,prism", "uniform", 3, paper, {{"lr", "1.5e-4,3e-4,6e-4"}},
         "Prism 354M: uniform vs the Prism schedule, each at lr 1.5e-4, 3e-4, 6e-4"},
        {"xformer200m", "200M", "uniform", "uniform,x", 3, paper, {{"lr", "3e-4,6e-4,1.2e-3"}},
         "Xformer 200M: uniform vs X widths, each at lr 3e-4, 6e-4, 1.2e-3"},
        {"both124m", "124M", "uniform,prism", "uniform,x", 3, paper, {{"lr", "3e-4,6e-4,1.2e-3"}},
         "124M: uniform, Prism, X, Prism + X, each at lr 3e-4, 6e-4, 1.2e-3"},
        {"openelm124m", "124M", "uniform,prism,openelm", "uniform", 3, paper_match,
         {{"mlp", "uniform,openelm"}, {"lr", "3e-4,6e-4,1.2e-3"}},
         "124M at equal parameters: heads uniform, Prism, OpenELM x MLP uniform, OpenELM (OpenELM's layer-wise "
         "scaling is openelm x openelm; Prism + OpenELM's MLP is prism x openelm), each at lr 3e-4, 6e-4, 1.2e-3"},
        {"window124m", "124M", "uniform,prism", "uniform", 3, paper,
         {{"window", "global,local:256/5:1"}, {"lr", "3e-4,6e-4,1.2e-3"}},
         "124M: global attention vs local 256 / global 5:1, under uniform and Prism heads, each at lr 3e-4, 6e-4, "
         "1.2e-3"},
        {"hybrid124m", "124M", "uniform,prism", "uniform", 3, paper_match,
         {{"mixer", "attention,gdn:3:1"}, {"lr", "3e-4,6e-4,1.2e-3"}},
         "124M at equal parameters: all-attention vs Gated DeltaNet 3:1 (gdn:3:1), under uniform and Prism heads, "
         "each at lr 3e-4, 6e-4, 1.2e-3 (the gdn kernels are untimed on a GPU: the GPU-hours are an estimate)"},
        {"placement124m", "124M", "uniform", "uniform", 3, paper_match,
         {{"mixer", "attention,gdn:3:1,attentionx3/gdnx9,gdnx4/attentionx3/gdnx5,gdnx9/attentionx3"},
          {"lr", "3e-4,6e-4,1.2e-3"}},
         "124M at equal parameters: all-attention vs 3 attention layers of 12 among gdn ones, interleaved (gdn:3:1), "
         "first, middle, last, each at lr 3e-4, 6e-4, 1.2e-3 (the gdn kernels are untimed on a GPU: the GPU-hours are "
         "an estimate)"},
        {"tiny", "tiny", "uniform,prism", "uniform,x", 3, cpu, {},
         "tiny on the CPU: uniform, Prism, X, Prism + X (a demonstration of the method, not of the papers' effects)"},
        {"tiny-lr", "tiny", "uniform,prism", "uniform", 2, cpu, {{"lr", "1.5e-3,3e-3,6e-3"}},
         "tiny on the CPU: uniform vs Prism, each at lr 1.5e-3, 3e-3, 6e-3 (the sweep of a study, demonstrated)"},
        {"tiny-openelm", "tiny", "uniform,prism,openelm", "uniform", 2, cpu_match, {{"mlp", "uniform,openelm"}},
         "tiny on the CPU at equal parameters: heads uniform, Prism, OpenELM x MLP uniform, OpenELM"},
        {"tiny-window", "tiny", "uniform,prism", "uniform", 3, cpu, {{"window", "global,local:32/5:1"}},
         "tiny on the CPU: global vs local 32 / global 5:1 attention, under uniform and Prism heads"},
        {"coord", "tiny", "uniform", "uniform", 2, coord, {{"d", "64,128,256,512"}, {"param", "sp,mup"}},
         "coordinate check on the CPU: tiny at d 64 to 512 under the standard parameterisation and muP (base d "
         "128), 5 steps at a constant lr, every layer's signals at every step (report draws them against d)"},
        {"mup-lr", "tiny", "uniform", "uniform", 1, lr_cpu,
         {{"d", "32,64,128"}, {"param", "sp,mup"}, {"lr", "2.2e-3,4.6e-3,1e-2,2.2e-2,4.6e-2"}},
         "lr transfer across widths on the CPU: tiny at d 32, 64, 128, standard vs muP (base d 128), each at 5 "
         "rates"},
        {"mup-shapes", "tiny", "uniform,prism", "uniform,x", 1, lr_cpu,
         {{"d", "128"}, {"param", "mup"}, {"lr", "2.2e-3,4.6e-3,1e-2,2.2e-2,4.6e-2"}},
         "lr transfer across layer shapes on the CPU: tiny d 128 under muP, uniform, Prism heads, X widths and "
         "both, each at mup-lr's 5 rates (its uniform runs are mup-lr's: give both the same directory)"},
        {"tiny-hybrid", "tiny", "uniform", "uniform", 2, cpu_hybrid, {{"mixer", "attention,gdn:3:1"}},
         "tiny on the CPU at equal parameters: all-attention vs gdn:3:1 (one attention layer of six), 120 steps"},
    };
    // clang-format on
    return r;
}

struct Options {
    std::string dir, recipe, preset, heads, widths, seeds, launcher, trainer, evaluator;
    std::string eval_data = "data/eval";
    std::vector<std::string> trainer_flags;  // after `--`
    std::vector<std::string> grid;           // --grid FLAG=V1,V2, in the order given
    bool list = false;
    long only = 0, eval_limit = 0;
};

std::vector<Flag> make_flags(Options& o) {
    std::string names;
    for (const Recipe& r : recipes()) names += std::string(names.empty() ? "" : ", ") + r.name;
    return {
        text_flag("--recipe", "NAME", "a named study: " + names + " (its flags; any given here override them)",
                  o.recipe),
        text_flag("-m, --model", "PRESET", "the preset of every run (default: the recipe's, else tiny)", o.preset),
        text_flag("--heads", "LIST",
                  "head schedules, comma-separated (uniform, prism, or a list with / for its commas: "
                  "3x3/6x3/12x6; default uniform)",
                  o.heads),
        text_flag("--widths", "LIST",
                  "width schedules, comma-separated (uniform, x, v, lambda, 3, or a list with /; "
                  "default uniform)",
                  o.widths),
        text_flag("--seeds", "N|LIST", "N seeds (1..N), or a comma-separated list of two or more (default 3)", o.seeds),
        make_flag(
            "--grid", "FLAG=LIST",
            "a trainer flag as an axis of the grid, e.g. lr=3e-4,6e-4,1e-3 (repeatable; replaces a recipe's "
            "axis of that flag)",
            [&o](const std::string& v) { o.grid.push_back(v); }, FlagKind::Text)
            .takes_flag_values(),
        text_flag("--launcher", "CMD", "run each trainer and eval under CMD, e.g. \"mpirun -np 8\" or \"srun\"",
                  o.launcher),
        switch_flag("--list", "print one line per run (K, state, the command that runs it now) and exit", o.list),
        number_flag("--only", "K", "run only the K-th run of --list (1-based)", o.only, 1, 1000000),
        path_flag("--trainer", "PATH", "the train_prism binary (default: the one next to study)", o.trainer),
        path_flag("--eval-zeroshot", "PATH", "the eval_zeroshot binary (default: the one next to study)", o.evaluator),
        path_flag("--eval-data", "DIR",
                  "zero-shot eval files; each task present is scored after each run (default "
                  "{default})",
                  o.eval_data),
        number_flag("--eval-limit", "N", "examples per task in those evals (default: all)", o.eval_limit, 1, kMaxSteps),
    };
}

// The parts of s between the separators, trimmed; empty ones are dropped unless keep_empty (an axis's value ""
// is a value: --grid no-rope=,1 is the baseline and layer 1).
std::vector<std::string> split(const std::string& s, char sep, bool keep_empty = false) {
    std::vector<std::string> out;
    for (size_t a = 0; a <= s.size();) {
        size_t b = s.find(sep, a);
        if (b == std::string::npos) b = s.size();
        const std::string t = trim(s.substr(a, b - a));
        if (!t.empty() || keep_empty) out.push_back(t);
        a = b + 1;
    }
    return out;
}

// A word for /bin/sh: as it is when it is safe, else in single quotes.
std::string shell_quote(const std::string& s) {
    if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=./,:@%") ==
                          std::string::npos)
        return s;
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}
std::string shell_join(const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& a : v) s += (s.empty() ? "" : " ") + shell_quote(a);
    return s;
}

struct Run {
    std::string name, dir, heads, widths;
    std::vector<std::string> axis_values;  // one per axis of the grid
    uint64_t seed = 0;
    std::vector<std::string> flags;  // the trainer's flags, without the binary
    TrainOptions o;                  // those flags, resolved as train_prism resolves them
    ModelConfig cfg;
    RunPlan plan;
    size_t train_tokens = 0;  // the shards' token count when --epochs needs it (else 0)
    std::string state;        // done | resume | restart | new
    bool eval_missing = false;
};

// The run's flags resolved as train_prism does (defaults for a GPU machine: only the default model depends on
// it, and a study names its preset), and its plan.
void resolve(Run& r) {
    std::vector<Flag> flags = make_train_flags(r.o);
    std::vector<std::string> args{"train_prism"};
    args.insert(args.end(), r.flags.begin(), r.flags.end());
    std::vector<char*> av;
    for (std::string& a : args) av.push_back(&a[0]);
    parse_flags((int)av.size(), av.data(), flags, "train_prism (in the study's trainer flags)");
    if (r.o.resume || r.o.overwrite || r.o.plan)
        throw ConfigError(
            "--resume, --overwrite and --plan are the study's to give; leave them out of its trainer flags");
    if (r.o.stop_after) throw ConfigError("--stop-after would leave every run unfinished; leave it out of a study");
    std::vector<std::string> warnings, notes;
    r.cfg = build_config(r.o.model, warnings);
    default_run(r.o, r.cfg, 1, notes);
    if (r.o.epochs > 0)  // the shards' token count, from their sizes (header 256 int32, then uint16 tokens)
        for (const std::string& path : glob_shards(r.o.train)) {
            struct stat st;
            if (stat(path.c_str(), &st) == 0 && st.st_size > 1024) r.train_tokens += (size_t)(st.st_size - 1024) / 2;
        }
    r.plan = plan_run(r.o, r.cfg, 1, r.train_tokens);
}

// The model's per-layer column flags (model/layer_columns.h): as an axis, like --heads, each value writes '/' for its
// commas (--grid window=global,local:256/5:1), since the axis's own values are comma-separated.
bool is_layer_list_flag(const std::string& canon) {
    for (const LayerColumn& col : layer_columns())
        if (canon == canonical_flag(col)) return true;
    return false;
}

// One axis of the grid besides heads and widths: a trainer flag and its values (--grid FLAG=LIST, or a recipe's).
struct Axis {
    std::string flag;                 // the trainer flag's canonical name: "--lr"
    std::vector<std::string> values;  // as given, in order
    std::string source;               // where it comes from, as the grid is printed
    std::string tag() const { return flag.substr(flag.find_first_not_of('-')); }  // in run names: "lr"
    // Value i as the trainer takes it ('/' back to ',' for a layer list flag).
    std::string arg(size_t i) const {
        std::string v = values[i];
        if (is_layer_list_flag(flag)) std::replace(v.begin(), v.end(), '/', ',');
        return v;
    }
};

// The flags the study gives every run itself, and what sets them.
const std::vector<std::pair<std::string, std::string>>& study_set_flags() {
    static const std::vector<std::pair<std::string, std::string>> v = {{"--model", "-m"},
                                                                       {"--heads-schedule", "--heads"},
                                                                       {"--widths", "--widths"},
                                                                       {"--seed", "--seeds"},
                                                                       {"--out", "the study's directory"}};
    return v;
}

// FLAG=V1,V2 checked against train_prism's flag table (FLAG with or without its dashes): a flag that tells runs
// apart in their records (not one the study sets, not a switch, not one a resume may change, which the record and
// report's groups do not compare), values the flag takes, none of them twice (6e-4 and 0.0006 are one value).
Axis parse_axis(const std::string& spec, const std::string& source) {
    const size_t eq = spec.find('=');
    const std::string name = trim(spec.substr(0, eq)), where = "--grid " + spec;
    if (eq == std::string::npos || name.empty())
        throw ConfigError(where + ": give a trainer flag and its values, e.g. --grid lr=3e-4,6e-4,1e-3");
    TrainOptions scratch;
    const std::vector<Flag> flags = make_train_flags(scratch);
    const std::string dashed = name[0] == '-' ? name : "--" + name;
    const Flag* f = find_flag(flags, dashed);
    if (!f && name[0] != '-') f = find_flag(flags, "-" + name);
    if (!f) throw ConfigError(where + ": train_prism has no flag " + dashed + " (train_prism --help lists them)");
    Axis a;
    a.flag = canonical_name(*f), a.source = source;
    for (const auto& [flag, by] : study_set_flags())
        if (a.flag == flag)
            throw ConfigError(where + ": the study sets " + flag + " of every run itself (" + by +
                              "), so it cannot be a --grid axis");
    if (f->arg.empty())
        throw ConfigError(where + ": " + a.flag + " is a switch, with no values to sweep; give it after -- to set it " +
                          "for every run");
    if (!f->recorded || f->may_change)
        throw ConfigError(where + ": " + a.flag + " is not compared between runs (" +
                          (f->recorded ? "a resume may change it" : "the run record does not keep it") +
                          "), so its runs could not be told apart; give it after -- to set it for every run");
    a.values = split(spec.substr(eq + 1), ',', true);
    if (trim(spec.substr(eq + 1)).empty()) throw ConfigError(where + ": no values; give one or more, comma-separated");
    std::unordered_map<std::string, size_t> resolved;  // each value as the record writes it -> its index
    for (size_t i = 0; i < a.values.size(); i++) {
        const std::string& v = a.values[i];
        try {
            f->apply(a.arg(i));
        } catch (const ConfigError& e) {
            throw ConfigError(where + ": " + e.what());
        }
        const auto [it, fresh] = resolved.emplace(f->value ? f->value() : v, i);  // hashed: linear in the values
        if (!fresh) {
            const std::string& was = a.values[it->second];
            throw ConfigError(
                where + ": " +
                (was == v ? v + " is given twice" : was + " and " + v + " are the same value of " + a.flag) +
                "; give each value once");
        }
    }
    return a;
}

// The canonical names of the trainer flags an argument list gives.
std::vector<std::string> trainer_flags_in(const std::vector<std::string>& args, const std::vector<Flag>& flags) {
    std::vector<std::string> v{"train_prism"};
    v.insert(v.end(), args.begin(), args.end());
    std::vector<char*> av;
    for (std::string& a : v) av.push_back(&a[0]);
    return given_flags((int)av.size(), av.data(), flags);
}

// The argument list without the trainer flag `canon` (and its value).
std::vector<std::string> without_flag(const std::vector<std::string>& args, const std::string& canon,
                                      const std::vector<Flag>& flags, std::string* removed = nullptr) {
    std::vector<std::string> out;
    for (size_t i = 0; i < args.size(); i++) {
        const size_t eq = inline_value_at(args[i]);
        const Flag* f = find_flag(flags, args[i].substr(0, eq));
        if (!f || canonical_name(*f) != canon) {
            out.push_back(args[i]);
            continue;
        }
        std::string text = args[i];
        if (!f->arg.empty() && eq == std::string::npos && i + 1 < args.size()) text += " " + args[++i];
        if (removed) *removed += (removed->empty() ? "" : " ") + text;
    }
    return out;
}

// What the study runs, and where each part of it comes from (the recipe, the command line, a default), as it is
// printed before the study starts: a recipe's part that the command line replaces is named beside it.
struct Grid {
    const Recipe* recipe = nullptr;
    std::string preset, preset_from;
    std::vector<std::string> heads, widths;
    std::string heads_from, widths_from;
    std::vector<uint64_t> seeds;
    std::string seeds_from;
    std::vector<Axis> axes;                 // in name order: the recipe's, then --grid's
    std::vector<std::string> recipe_flags;  // the recipe's trainer flags, less those an axis or `--` replaces
    std::vector<std::string> overrides;     // one line each: what replaced a recipe's trainer flag or axis
    size_t configurations() const {
        size_t n = heads.size() * widths.size();
        for (const Axis& a : axes) n *= a.values.size();
        return n;
    }
};

// A grid is counted from its axes before any run is made, refused past kMaxGridRuns (3 axes of 100 values would
// be millions of runs); so is a value that would put a control character (a newline) in a run directory's name.
constexpr double kMaxGridRuns = 100000;
void check_grid_size(const Grid& g) {
    std::vector<std::pair<std::string, const std::vector<std::string>*>> parts = {{"heads", &g.heads},
                                                                                  {"widths", &g.widths}};
    for (const Axis& a : g.axes) parts.push_back({a.tag(), &a.values});
    double n = (double)g.seeds.size();  // exact below 2^53, far past the bound
    std::string sizes = std::to_string(g.seeds.size()) + " seeds";
    for (const auto& [what, values] : parts) {
        n *= (double)values->size(), sizes += " x " + std::to_string(values->size()) + " " + what;
        for (const std::string& v : *values)
            if (std::any_of(v.begin(), v.end(), [](char c) { return (unsigned char)c < 0x20 || c == 0x7f; }))
                throw ConfigError(what + " value " + json::quote(v) +
                                  " holds a control character (a newline?), which would be in a run directory's "
                                  "name; give values without them");
    }
    if (n > kMaxGridRuns) {
        char count[64];
        snprintf(count, sizeof count, "%.17g", n);
        throw ConfigError("the grid has " + std::string(count) + " runs (" + sizes + "), more than the " +
                          std::to_string((long)kMaxGridRuns) +
                          " a study runs; split it into several studies, or give fewer values");
    }
}

std::string joined(const std::vector<std::string>& v, const char* sep = ",") {
    std::string s;
    for (const std::string& x : v) s += (s.empty() ? "" : sep) + x;
    return s;
}

Grid make_grid(const Options& o) {
    Grid g;
    if (!o.recipe.empty()) {
        std::string known;
        for (const Recipe& r : recipes()) {
            if (o.recipe == r.name) g.recipe = &r;
            known += std::string(known.empty() ? "" : ", ") + r.name;
        }
        if (!g.recipe) throw ConfigError("unknown recipe '" + o.recipe + "'; choose one of " + known);
    }
    const Recipe* rec = g.recipe;
    const std::string recipe_name = rec ? std::string("recipe ") + rec->name : "";
    // "command line; recipe tiny: uniform,prism", "recipe tiny", "default"
    auto from = [&](bool given, const std::string& recipe_value) {
        if (given) return std::string("command line") + (rec ? "; " + recipe_name + ": " + recipe_value : "");
        return rec ? recipe_name : std::string("default");
    };
    g.preset = !o.preset.empty() ? o.preset : rec ? rec->preset : "tiny";
    g.preset_from = from(!o.preset.empty(), rec ? rec->preset : "");
    g.heads = split(!o.heads.empty() ? o.heads : rec ? rec->heads : "uniform", ',');
    g.heads_from = from(!o.heads.empty(), rec ? rec->heads : "");
    g.widths = split(!o.widths.empty() ? o.widths : rec ? rec->widths : "uniform", ',');
    g.widths_from = from(!o.widths.empty(), rec ? rec->widths : "");
    const std::string seed_arg = !o.seeds.empty() ? o.seeds : std::to_string(rec ? rec->seeds : 3);
    g.seeds_from = from(!o.seeds.empty(), rec ? std::to_string(rec->seeds) : "");
    if (seed_arg.find(',') == std::string::npos) {
        const long n = parse_long_flag("--seeds", seed_arg);
        if (n < 1 || n > 1000)
            throw ConfigError("--seeds " + seed_arg + ": give a count from 1 to 1000, or a list like 1,2,3");
        for (long s = 1; s <= n; s++) g.seeds.push_back((uint64_t)s);
    } else {
        for (const std::string& s : split(seed_arg, ',')) {
            const long v = parse_long_flag("--seeds", s);
            if (v < 0) throw ConfigError("--seeds: " + s + " is negative");
            if (std::find(g.seeds.begin(), g.seeds.end(), (uint64_t)v) != g.seeds.end())
                throw ConfigError("--seeds: " + s + " is given twice");
            g.seeds.push_back((uint64_t)v);
        }
    }
    if (g.heads.empty() || g.widths.empty()) throw ConfigError("--heads and --widths need at least one schedule each");

    // The axes: --grid's, each checked, then the recipe's that neither --grid nor `--` replaces (first in names).
    TrainOptions scratch;
    const std::vector<Flag> flags = make_train_flags(scratch);
    const std::vector<std::string> after = trainer_flags_in(o.trainer_flags, flags);
    auto given_after = [&](const std::string& f) { return std::find(after.begin(), after.end(), f) != after.end(); };
    auto after_text = [&](const std::string& f) {  // "--steps 30": the flag as given after `--`
        std::string t;
        without_flag(o.trainer_flags, f, flags, &t);
        return t;
    };
    std::vector<Axis> mine;
    for (const std::string& spec : o.grid) {
        Axis a = parse_axis(spec, "command line");
        for (const Axis& b : mine)
            if (b.flag == a.flag)
                throw ConfigError("--grid " + spec + ": " + a.flag + " is an axis already; give it once");
        if (given_after(a.flag))
            throw ConfigError("--grid " + spec + ": " + a.flag + " is also given after --; give it in one place");
        mine.push_back(a);
    }
    if (rec)
        for (const auto& [flag, values] : rec->grid) {
            Axis a = parse_axis(flag + "=" + values, recipe_name);
            const std::string was = a.tag() + " " + joined(a.values) + " of " + recipe_name;
            auto it = std::find_if(mine.begin(), mine.end(), [&](const Axis& b) { return b.flag == a.flag; });
            if (it != mine.end()) {
                it->source = "command line; " + recipe_name + ": " + joined(a.values);
                continue;
            }
            if (given_after(a.flag)) {
                g.overrides.push_back("the axis " + was + " is replaced by " + after_text(a.flag) + " (after --)");
                continue;
            }
            g.axes.push_back(a);
        }
    g.axes.insert(g.axes.end(), mine.begin(), mine.end());
    // The recipe's trainer flags, less those an axis sets or `--` gives again (named as replaced).
    if (rec) {
        g.recipe_flags = rec->flags;
        for (const std::string& f : trainer_flags_in(rec->flags, flags)) {
            const bool axis = std::any_of(g.axes.begin(), g.axes.end(), [&](const Axis& a) { return a.flag == f; });
            if (!axis && !given_after(f)) continue;
            std::string removed;
            g.recipe_flags = without_flag(g.recipe_flags, f, flags, &removed);
            g.overrides.push_back(removed + " of " + recipe_name + " is replaced by " +
                                  (axis ? "the axis " + f.substr(2) : after_text(f) + " (after --)"));
        }
    }
    check_grid_size(g);
    return g;
}

std::vector<Run> make_runs(const Options& o, const Grid& g) {
    std::vector<Run> runs;
    const size_t per_seed = g.configurations();
    for (uint64_t s : g.seeds)  // seed-major: a study stopped early has compared every configuration on its first seeds
        for (size_t c = 0; c < per_seed; c++) {
            // Configuration c: heads, widths, then each axis, the first the slowest to change.
            size_t rest = c;
            std::vector<size_t> at(g.axes.size());
            for (size_t i = g.axes.size(); i-- > 0;)
                at[i] = rest % g.axes[i].values.size(), rest /= g.axes[i].values.size();
            const std::string& h = g.heads[rest / g.widths.size()];
            const std::string& w = g.widths[rest % g.widths.size()];
            Run r;
            r.heads = h, r.widths = w, r.seed = s;
            std::string hs = h, ws = w;
            for (std::string* x : {&hs, &ws}) std::replace(x->begin(), x->end(), '/', ',');
            r.name = h + "-" + w;
            std::vector<std::string> axis_flags;
            for (size_t i = 0; i < g.axes.size(); i++) {
                const std::string& v = g.axes[i].values[at[i]];
                r.name += "-" + g.axes[i].tag() + v;
                r.axis_values.push_back(v);
                axis_flags.insert(axis_flags.end(), {g.axes[i].flag, g.axes[i].arg(at[i])});
            }
            r.name += "-s" + std::to_string(s);
            for (char& ch : r.name)
                if (ch == '/' || ch == ',' || ch == ' ') ch = '_';
            r.dir = o.dir + "/" + r.name;
            r.flags = {"-m", g.preset, "-s", hs, "-w", ws, "--seed", std::to_string(s), "-o", r.dir};
            r.flags.insert(r.flags.end(), axis_flags.begin(), axis_flags.end());
            r.flags.insert(r.flags.end(), g.recipe_flags.begin(), g.recipe_flags.end());
            r.flags.insert(r.flags.end(), o.trainer_flags.begin(), o.trainer_flags.end());
            resolve(r);
            runs.push_back(r);
        }
    // Two configurations that resolve to one run (the same model and the same flags once resolved) would make
    // every comparison of the study between a run and itself. A configuration's key is every layer column as built,
    // so that one model spelled two ways (--window global and 0x12) is one model, and the flags compared once the
    // flags that spell the columns are left out; the keys are hashed, so the check is linear in the grid's size.
    auto list = [](const ModelConfig& c, bool w) {
        std::string s;
        for (const LayerSpec& l : c.layers) s += (s.empty() ? "" : ",") + std::to_string(w ? l.width : l.heads);
        return s;
    };
    // The flags left out: every layer column's (model/layer_columns.h), --match (which sets the hidden column) and --out.
    auto key_of = [](const Run& r) {
        std::string s;
        for (int l = 0; l < r.cfg.L(); l++) s += layer_json_members(r.cfg, l) + ";";
        for (const auto& a : record_args(r.o, r.plan))
            if (!is_layer_list_flag(a.first) && a.first != "--match" && a.first != "--out")
                s += "\n" + a.first + "=" + json::quote(a.second);
        return s;
    };
    std::unordered_map<std::string, size_t> seen;
    for (size_t b = 0; b < per_seed; b++) {
        const auto [it, fresh] = seen.emplace(key_of(runs[b]), b);
        if (fresh) continue;
        const size_t a = it->second;
        const ModelConfig& x = runs[a].cfg;
        if (runs[a].axis_values != runs[b].axis_values)
            throw ConfigError(runs[a].name + " and " + runs[b].name +
                              " resolve to the same run here (the same model and flags): the study would compare "
                              "a run with itself; drop one of the values");
        throw ConfigError("--heads " + runs[a].heads + " --widths " + runs[a].widths + " and --heads " + runs[b].heads +
                          " --widths " + runs[b].widths + " give the same model here (" + std::to_string(x.L()) +
                          " layers, heads " + list(x, false) + ", widths " + list(x, true) +
                          "): the study would compare a model with itself; drop one, or use a model on which they "
                          "differ (-s prism is the uniform schedule below 4 layers)");
    }
    std::unordered_map<std::string, size_t> named;
    for (size_t b = 0; b < runs.size(); b++)
        if (!named.emplace(runs[b].name, b).second)
            throw ConfigError("two runs of the grid would both be named " + runs[b].name +
                              " (a run's name writes '/', ',' and ' ' as '_'); give values that name them apart");
    return runs;
}

std::vector<std::string> eval_tasks_present(const Options& o) {
    std::vector<std::string> tasks;
    for (const std::string& t : split(eval_task_names(","), ','))
        if (access((o.eval_data + "/" + t + ".bin").c_str(), R_OK) == 0) tasks.push_back(t);
    return tasks;
}

// The one output rule (util/fs.h): the study directory is none of the shards or eval files its runs read (nor
// inside a checkpoint; each run's trainer checks its own -o DIR/NAME the same way).
void check_study_dir(const Options& o, const std::vector<Run>& runs, const std::vector<std::string>& tasks) {
    std::set<std::string> patterns;
    for (const Run& r : runs) patterns.insert(r.o.train), patterns.insert(r.o.val);
    std::vector<ReadPath> inputs;
    for (const std::string& pattern : patterns) {
        glob_t g;
        if (glob(pattern.c_str(), 0, nullptr, &g) == 0)
            for (size_t i = 0; i < g.gl_pathc; i++) inputs.push_back({g.gl_pathv[i], "the shard"});
        globfree(&g);
    }
    for (const std::string& t : tasks) inputs.push_back({o.eval_data + "/" + t + ".bin", "the eval file"});
    check_output_path(o.dir, "the study directory", inputs);
}

// The files a run's evals write (eval_command): they are done only when every one is there.
std::vector<std::string> eval_outputs(const Run& r) { return {r.dir + "/eval.json", r.dir + "/samples.jsonl"}; }

// Whether every one of the files is there, a regular file (eval_zeroshot and train_prism write each atomically,
// renamed into place whole, so one that is there is whole; one a failure left out is not there).
bool all_there(const std::vector<std::string>& paths) {
    struct stat st;
    return std::all_of(paths.begin(), paths.end(),
                       [&](const std::string& p) { return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode); });
}

// What the run needs now (see the top), from its directory. A done run recorded with other flags than the
// study's is an error: the study would otherwise compare runs it did not ask for.
void find_state(Run& r, bool evals) {
    RunRecord rec;
    const bool recorded = read_run_record(r.dir, rec);
    // The study plans each run for one process; a run that a launcher started as several ranks (--launcher
    // "srun -n 2") recorded the default global batch of its rank count (B x T x ranks) and the steps that follow
    // from it. Without --total-batch, the run is compared with the plan for the ranks it recorded.
    const long ranks = recorded ? rec.latest_long("ranks") : 1;
    const RunPlan plan =
        !r.o.total_batch && ranks > 1 && ranks <= 1 << 20 ? plan_run(r.o, r.cfg, (int)ranks, r.train_tokens) : r.plan;
    if (recorded && rec.status() == "done" && rec.arg("--steps") == std::to_string(plan.steps) &&
        all_there({r.dir + "/model.bin", r.dir + "/log.jsonl"})) {
        try {
            check_resume_args(rec, record_args(r.o, plan), may_change_on_resume());
        } catch (const ConfigError& e) {
            std::string why = e.what();
            why = why.substr(0, why.find(" ("));
            throw ConfigError(r.dir + " is done with other flags than this study's: " + why.substr(why.find(": ") + 2) +
                              "; rerun the study with the flags it was run with, or use another study directory");
        }
        r.state = "done";
    } else if (recorded && rec.status() == "done" && rec.arg("--steps") != std::to_string(plan.steps)) {
        // A finished run is never changed: resumed to another length its lr curve would be two schedules.
        throw ConfigError(r.dir + " is done at --steps " + rec.arg("--steps") + " and this study asks for --steps " +
                          std::to_string(plan.steps) +
                          "; a study never changes a finished run: rerun it with the "
                          "length it was run with, or use another study directory for the new length");
    } else if (access((r.dir + "/latest").c_str(), F_OK) == 0) {
        r.state = "resume";
    } else if (is_dir(r.dir) && !list_dir(r.dir).empty()) {
        r.state = "restart";
    } else {
        r.state = "new";
    }
    r.eval_missing = evals && !all_there(eval_outputs(r));
}

std::string binary_next_to(const char* argv0, const char* name) {
    std::string s = argv0;
    const size_t slash = s.find_last_of('/');
    return slash == std::string::npos ? std::string("./") + name : s.substr(0, slash + 1) + name;
}

std::vector<std::string> launcher_words(const Options& o) { return split(o.launcher, ' '); }

std::vector<std::string> train_command(const Options& o, const Run& r) {
    std::vector<std::string> c = launcher_words(o);
    c.push_back(o.trainer);
    c.insert(c.end(), r.flags.begin(), r.flags.end());
    if (r.state == "resume") c.push_back("--resume");
    if (r.state == "restart") c.push_back("--overwrite");
    return c;
}

std::vector<std::string> eval_command(const Options& o, const Run& r, const std::vector<std::string>& tasks) {
    std::vector<std::string> c = launcher_words(o);
    std::string list;
    for (const std::string& t : tasks) list += (list.empty() ? "" : ",") + t;
    const std::vector<std::string> out = eval_outputs(r);  // report pairs the runs per example with the samples
    c.insert(c.end(),
             {o.evaluator, r.dir, "--tasks", list, "--data", o.eval_data, "--json", out[0], "--log-samples", out[1]});
    if (o.eval_limit) c.insert(c.end(), {"--limit", std::to_string(o.eval_limit)});
    if (r.o.cpu) c.push_back("--cpu");
    return c;
}

// ------------------------------------------------------------------------------------------------------
// The trainer as a child. It is started with fork and exec (no shell), in a process group of its own (so that a
// Ctrl-C at the terminal reaches the study alone, which passes it on once: two would end the trainer at once),
// with stdin from /dev/null and its output appended to the run's log. A stop signal to the study (SIGTERM,
// SIGINT, SIGHUP, SIGUSR1: what the trainer treats as a stop, run/stop_signal.h) is passed on to the child as
// SIGUSR1 (a stop to the trainer, and the signal mpirun passes on to every rank; SIGTERM would make mpirun end
// the job; eval_zeroshot handles it as train_prism does); the study then waits for it and exits 75. A second
// signal is passed on too, which ends the child at once. The child asks the kernel for SIGUSR1 when the study dies (PR_SET_PDEATHSIG), so a study
// killed outright (kill -9) leaves no trainer running on: it stops with a checkpoint like any stopped run.

constexpr int kForwardSignal = SIGUSR1;
volatile sig_atomic_t g_stop = 0;      // the first stop signal the study received, 0 while none has
volatile sig_atomic_t g_child = 0;     // the running child's pid, 0 while none runs
volatile sig_atomic_t g_planning = 0;  // 1 while the study only reads (its grid, its runs' states): nothing to finish

void study_stop_handler(int sig) {
    if (g_planning) {  // nothing written yet and no child: stop at once, whatever is being checked
        static const char msg[] = "\nstudy: stop signal: stopped before any run started\n";
        ssize_t rc = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)rc;
        _exit(kExitInterrupted);
    }
    const int child = g_child;  // negative: a process group
    if (child != 0) {
        kill((pid_t)child, kForwardSignal);
    } else if (g_stop) {  // a second signal with no child to wait for: the signal's default action
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    if (g_stop) return;
    g_stop = sig;
    static const char running[] =
        "\nstudy: stop signal: passed on to the running trainer (or evaluator); waiting for its checkpoint "
        "(send it again to end it at once)\n";
    static const char idle[] = "\nstudy: stop signal: no further run will start\n";
    ssize_t rc =
        child != 0 ? write(STDERR_FILENO, running, sizeof running - 1) : write(STDERR_FILENO, idle, sizeof idle - 1);
    (void)rc;
}

const int kStopSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1};

// A signal the study was started with ignored (nohup's SIGHUP) stays ignored, in the study and its children.
// The study is the subreaper of what its children start (run_logged waits for what they leave behind).
void install_study_handlers() {
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    install_handlers(study_stop_handler, kStopSignals, true);
}

bool is_stop_code(int rc) {
    return rc == kExitInterrupted || rc == 128 + SIGINT || rc == 128 + SIGTERM || rc == 128 + SIGHUP ||
           rc == 128 + SIGUSR1;
}

// DIR/NAME/train.log (or eval.log) opened for appending (and reading back the reason of a failure) like every file the project writes: a regular file
// only, no link followed (O_NOFOLLOW), a FIFO never waited on (O_NONBLOCK), and a file with other names (a hard
// link to a file outside DIR) refused. One line otherwise.
// The error for what stands at a log's path (st: its lstat or fstat) when it is not a file of one name.
ConfigError not_a_log(const std::string& path, const struct stat& st) {
    const std::string what = S_ISREG(st.st_mode)
                                 ? "has " + std::to_string((long)st.st_nlink) +
                                       " names (a hard link), so writing it would change a file outside the run"
                                 : std::string("is ") + file_kind(st.st_mode) + ", not the log the study writes";
    return ConfigError(path + " " + what + "; remove it (rm " + path + ") and rerun");
}

int open_log(const std::string& path) {
    const int fd =
        open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0644);
    struct stat st;
    const int e = errno;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
        if (fd >= 0) close(fd);
        if (fd >= 0 || lstat(path.c_str(), &st) == 0) throw not_a_log(path, st);
        throw ConfigError("cannot open " + path + ": " + write_error(e) + "; check the study directory");
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

// Appends `s` to the log; "" when it was written whole, else why not.
std::string append(int fd, const std::string& s) {
    for (size_t at = 0; at < s.size();) {
        const ssize_t n = write(fd, s.data() + at, s.size() - at);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return write_error(n < 0 ? errno : ENOSPC);
        at += (size_t)n;
    }
    return "";
}

// The reason a run failed, from what its command wrote to the log after byte `from`: the last line that
// carries an error ("train_prism: error: ...", "rank 1: ..."), else the last non-empty line. An earlier
// invocation's lines are not looked at, and a stray writer's (a trainer left running by an older study, still
// printing its progress) do not hide the error. Control bytes are escaped; at most the last MiB is read.
std::string failure_reason(int fd, off_t from) {
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size <= from) return "";
    const off_t a = std::max(from, st.st_size - (off_t)(1 << 20));
    std::string t((size_t)(st.st_size - a), '\0');
    const ssize_t n = pread(fd, &t[0], t.size(), a);
    t.resize(n > 0 ? (size_t)n : 0);
    std::string last, error;
    for (size_t p = 0; p < t.size();) {
        size_t q = t.find('\n', p);
        if (q == std::string::npos) q = t.size();
        std::string line = trim(t.substr(p, q - p));
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (!line.empty()) last = line;
        if (line.find("error:") != std::string::npos) error = line;
        p = q + 1;
    }
    const std::string r = printable(error.empty() ? last : error);
    return r.size() > 2000 ? r.substr(0, 2000) + "..." : r;
}

// Runs the command (argv, no shell) with its output appended to `log`, first a line naming it. Returns the exit
// status (128 + N for a signal N); `reason` gets why it failed (the child's own error line; a log the study could
// not write says so), or "" when it succeeded.
// While the command runs, tick (when given) is called about once a second until it returns false.
int run_logged(const std::vector<std::string>& cmd, const std::string& log, std::string& reason,
               const std::function<bool()>& tick = nullptr) {
    const int fd = open_log(log);
    struct Closer {
        int fd;
        ~Closer() { close(fd); }
    } closer{fd};
    const time_t now = time(nullptr);
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    const std::string wrote = append(fd, std::string("study: ") + when + ": " + shell_join(cmd) + "\n");
    if (!wrote.empty()) {
        reason = "cannot write " + log + ": " + wrote + "; the run was not started";
        return 1;
    }
    const off_t from = lseek(fd, 0, SEEK_END);
    std::vector<char*> argv;
    for (const std::string& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    sigset_t stops, old;
    sigemptyset(&stops);
    for (int sig : kStopSignals) sigaddset(&stops, sig);
    sigprocmask(SIG_BLOCK, &stops, &old);  // no signal between fork and g_child goes unforwarded
    if (g_stop) {                          // a stop that came since the caller looked: nothing is started
        sigprocmask(SIG_SETMASK, &old, nullptr);
        return kExitInterrupted;
    }
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0) {  // the child: only async-signal-safe calls until exec
        for (int sig : kStopSignals) {
            struct sigaction sa;
            if (sigaction(sig, nullptr, &sa) == 0 && sa.sa_handler == study_stop_handler) signal(sig, SIG_DFL);
        }
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, kForwardSignal);
        if (getppid() != parent) _exit(kExitInterrupted);  // the study died before the line above: start nothing
        const int in = open("/dev/null", O_RDONLY);
        if (in >= 0) dup2(in, 0);
        dup2(fd, 1), dup2(fd, 2);
        sigprocmask(SIG_SETMASK, &old, nullptr);
        execvp(argv[0], argv.data());
        const int e = errno;
        static const char pre[] = "study: error: cannot run ";
        ssize_t w = write(2, pre, sizeof pre - 1);
        w = write(2, argv[0], strlen(argv[0]));
        w = write(2, ": ", 2);
        w = write(2, strerror(e), strlen(strerror(e)));
        w = write(2, "\n", 1);
        (void)w;
        _exit(127);
    }
    if (pid < 0) {
        const int e = errno;
        sigprocmask(SIG_SETMASK, &old, nullptr);
        throw ConfigError(std::string("cannot start ") + argv[0] + ": " + strerror(e));
    }
    setpgid(pid, pid);
    g_child = pid;
    sigprocmask(SIG_SETMASK, &old, nullptr);  // a signal that came meanwhile is handled now, and passed on
    siginfo_t info;
    memset(&info, 0, sizeof info);
    for (bool polling = (bool)tick;;) {
        memset(&info, 0, sizeof info);
        if (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOWAIT | (polling ? WNOHANG : 0)) != 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (!polling || info.si_pid != 0) break;
        polling = tick();
        if (polling) {
            struct timespec second = {1, 0};
            nanosleep(&second, nullptr);  // a signal cuts it short: handled (passed on) and the loop goes on
        }
    }
    sigprocmask(SIG_BLOCK, &stops, nullptr);  // the pid is forgotten before it is reaped (and could be reused)
    g_child = 0;
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    // What the child started and left behind in its process group (a wrapper script that ran the trainer without
    // exec, ended by the stop signal its trainer never saw) is the study's now: the study is their subreaper, so
    // they are stopped and waited for here, not left running into the run's directory. A further signal reaches
    // the whole group meanwhile.
    if (kill(-pid, 0) == 0) {
        g_child = -pid;
        sigprocmask(SIG_SETMASK, &old, nullptr);
        kill(-pid, kForwardSignal);
        while (kill(-pid, 0) == 0)
            if (waitpid(-pid, nullptr, WNOHANG) <= 0) usleep(50000);
        sigprocmask(SIG_BLOCK, &stops, nullptr);
        g_child = 0;
    }
    sigprocmask(SIG_SETMASK, &old, nullptr);
    const int rc = WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
    reason.clear();
    if (rc != 0) {
        reason = failure_reason(fd, from);
        const std::string foot = append(fd, "study: exit " + std::to_string(rc) + "\n");
        if (reason.empty()) reason = "no output in " + log;
        if (!foot.empty())
            reason +=
                " (and " + log + " cannot be written: " + foot + "; the trainer's own error may be missing from it)";
    }
    return rc;
}

// A run's pace on this machine, from its log.jsonl (streamed: util/fs.h's for_each_line): the tokens and seconds
// of its latest invocation (elapsed_s restarts at each resume; validation is in it, the start-up is not), the
// tokens the run has done in all, and its last validation loss. A run whose record names another host (a study
// directory copied from elsewhere) measures nothing here (its loss is still read).
struct Pace {
    long steps = 0, tokens = 0, done = 0;
    double seconds = 0, val_loss = NAN;
    bool validated = false;  // the latest invocation has logged a validation loss
    double rate() const { return steps > 0 && tokens > 0 && seconds > 0 ? tokens / seconds : NAN; }
};

Pace read_pace(const std::string& dir) {
    Pace p;
    RunRecord rec;
    long before = 0;  // tokens done before the latest invocation
    double last_s = -1;
    try {
        const bool here = read_run_record(dir, rec) && rec.latest("host") == run_record::host_name();
        if (access((dir + "/log.jsonl").c_str(), F_OK) != 0) return p;
        for_each_line(dir + "/log.jsonl", "log", [&](const std::string& line, long, bool overlong, bool) {
            if (overlong) return;
            try {
                const json::Value v = json::parse(line);
                if (const json::Value* vl = v.find("val_loss"); vl && vl->kind == json::Value::Number)
                    p.val_loss = std::strtod(vl->str.c_str(), nullptr);
                if (!here) return;
                const long tokens = std::strtol(json::field(v, "tokens").str.c_str(), nullptr, 10);
                const double s = std::strtod(json::field(v, "elapsed_s").str.c_str(), nullptr);
                if (s < last_s) before = p.done, p.steps = 0, p.validated = false;
                p.validated |= v.find("val_loss") != nullptr;
                p.steps++, p.tokens = tokens - before, p.seconds = s, p.done = tokens, last_s = s;
            } catch (const std::exception&) {  // a torn last line (the trainer is writing it): the next poll reads it
            }
        });
    } catch (const std::exception&) {  // unreadable: no measurement (the run itself reports its own errors)
        return Pace();
    }
    return p;
}

std::string about(double s) {
    char b[64];
    if (s < 60) return "under a minute";
    if (s < 90 * 60) snprintf(b, sizeof b, "about %.0f min", s / 60);
    else snprintf(b, sizeof b, "about %.1f h", s / 3600);
    return b;
}

// "about 19 min on this machine for the 12 runs to do (measured: 1234 tok/s on NAME, ...)"
std::string wall_text(double tokens_left, size_t runs_left, double rate, const std::string& on) {
    char b[96];
    snprintf(b, sizeof b, "%.0f tok/s", rate);
    return about(tokens_left / rate) + " on this machine for the " + std::to_string(runs_left) + " run" +
           (runs_left == 1 ? "" : "s") + " to do (measured: " + b + " on " + on +
           ", validation included; evals not counted)";
}

// The grid as it is printed before the study starts: each part, its values and where they come from.
std::string grid_text(const Grid& g, size_t runs) {
    std::string s =
        "grid: " + std::to_string(g.heads.size()) + " heads x " + std::to_string(g.widths.size()) + " widths";
    for (const Axis& a : g.axes) s += " x " + std::to_string(a.values.size()) + " " + a.tag();
    s += " x " + std::to_string(g.seeds.size()) + " seed" + (g.seeds.size() == 1 ? "" : "s") + " = " +
         std::to_string(runs) + " runs\n";
    int w = 6;  // the names' column
    for (const Axis& a : g.axes) w = std::max(w, (int)a.tag().size());
    auto row = [&](const std::string& what, const std::string& values, const std::string& src) {
        char line[64];
        snprintf(line, sizeof line, "  %-*s  ", w, what.c_str());
        s += line + values + std::string(values.size() < 24 ? 24 - values.size() : 0, ' ') + " (" + src + ")\n";
    };
    row("model", g.preset, g.preset_from);
    row("heads", joined(g.heads), g.heads_from);
    row("widths", joined(g.widths), g.widths_from);
    for (const Axis& a : g.axes) row(a.tag(), joined(a.values), a.source);
    std::vector<std::string> seeds;
    for (uint64_t x : g.seeds) seeds.push_back(std::to_string(x));
    row("seeds", joined(seeds), g.seeds_from);
    if (g.recipe && !g.recipe_flags.empty())
        row("flags", shell_join(g.recipe_flags), std::string("recipe ") + g.recipe->name);
    for (const std::string& x : g.overrides) s += "  " + x + "\n";
    return s;
}

// The study's plan: its grid, its runs with their states, the eval tasks present.
struct Study {
    Grid grid;
    std::vector<Run> runs;
    std::vector<std::string> tasks;
    bool to_do(const Options& o, size_t k) const {
        return (!o.only || (long)k + 1 == o.only) && runs[k].state != "done";
    }
};

Study plan_study(const Options& o) {
    Study st;
    st.grid = make_grid(o);
    st.runs = make_runs(o, st.grid);
    st.tasks = eval_tasks_present(o);
    check_study_dir(o, st.runs, st.tasks);
    for (Run& r : st.runs) find_state(r, !st.tasks.empty());
    if (o.only && o.only > (long)st.runs.size())
        throw ConfigError("--only " + std::to_string(o.only) + ": the study has " + std::to_string(st.runs.size()) +
                          " runs");
    return st;
}

// The plan's cost on the cost model's GPU, and its wall time here: the runs' tokens left at the pace measured on
// the first run of the study that has steps logged on this machine (updated as the study trains).
struct Estimate {
    double gpu_s = 0, rate = NAN;
    long done = 0;
    std::string measured_on;
    std::vector<double> left;       // tokens each run has still to train
    std::vector<long> done_before;  // tokens each run's log holds before this study's invocation
    std::vector<char> to_do;
    double tokens_left(size_t from) const { return std::accumulate(left.begin() + (long)from, left.end(), 0.0); }
    size_t runs_left(size_t from) const { return (size_t)std::count(to_do.begin() + (long)from, to_do.end(), 1); }
};

Estimate estimate(const Options& o, const Study& st) {
    const RooflineGpu gpu;
    Estimate e;
    e.left.assign(st.runs.size(), 0), e.done_before.assign(st.runs.size(), 0), e.to_do.assign(st.runs.size(), 0);
    for (size_t k = 0; k < st.runs.size(); k++) {
        const Run& r = st.runs[k];
        double step_s = 0;
        for (const OpCost& op : step_ops(r.cfg, r.o.B, r.plan.T, r.plan.n_micro, false)) step_s += op_expected(op, gpu);
        e.gpu_s += step_s * r.plan.steps;
        e.done += r.state == "done";
        const Pace p = r.state == "new" ? Pace() : read_pace(r.dir);
        if (std::isnan(e.rate) && std::isfinite(p.rate())) e.rate = p.rate(), e.measured_on = r.name;
        e.done_before[k] = r.state == "resume" ? p.done : 0;  // a restart's log starts afresh (--overwrite)
        e.to_do[k] = st.to_do(o, k);
        if (e.to_do[k]) e.left[k] = std::max(0.0, (double)r.plan.steps * r.plan.total_batch - (double)e.done_before[k]);
    }
    return e;
}

// What the study prints before it starts (on stderr under --list): the grid, the runs, the cost, the wall time.
std::string header(const Options& o, const Study& st, const Estimate& e) {
    const std::vector<Run>& runs = st.runs;
    const Run& r0 = runs[0];
    std::string steps =
        std::to_string(r0.plan.steps) + " steps of " + std::to_string(r0.plan.total_batch) + " tokens each";
    for (const Run& r : runs)
        if (r.plan.steps != r0.plan.steps || r.plan.total_batch != r0.plan.total_batch)
            steps = "steps and tokens per step differ between runs (--list shows each run's command)";
    std::string head = grid_text(st.grid, runs.size());
    char line[2048];
    snprintf(line, sizeof line, "study %s%s: %s, %zu configurations x %zu seed%s = %zu runs (%ld done); %s\n",
             o.dir.c_str(), o.recipe.empty() ? "" : (" (recipe " + o.recipe + ")").c_str(), r0.o.model.preset.c_str(),
             st.grid.configurations(), st.grid.seeds.size(), st.grid.seeds.size() == 1 ? "" : "s", runs.size(), e.done,
             steps.c_str());
    head += line;
    snprintf(line, sizeof line,
             "estimated cost: %.3g GPU-hours for all %zu runs (cost_model.h: the CUDA engine's ops on an H100 SXM at "
             "the roofline with its stated efficiencies; training steps only, validation and evals not counted)\n",
             e.gpu_s / 3600, runs.size());
    head += line;
    const size_t gdn_runs =
        (size_t)std::count_if(runs.begin(), runs.end(), [](const Run& r) { return has_gdn(r.cfg); });
    if (gdn_runs)  // the cost model prices a gdn layer's kernels, which no GPU has timed yet
        head += "  (" + std::to_string(gdn_runs) +
                " of the runs have gdn layers: their cost is the cost model's estimate for GDN kernels no GPU has " +
                "timed yet)\n";
    const size_t n_to_do = e.runs_left(0);
    if (n_to_do == 0) head += "wall time on this machine: nothing left to train\n";
    else if (std::isnan(e.rate)) head += "wall time on this machine: measured after the first run's first steps\n";
    else head += "wall time: " + wall_text(e.tokens_left(0), n_to_do, e.rate, e.measured_on) + "\n";
    if (st.tasks.empty())
        head += "zero-shot evals: none (no eval files in " + o.eval_data + "; bash data/get_eval.sh makes them)\n";
    else head += "zero-shot evals after each run: " + joined(st.tasks, ", ") + " (from " + o.eval_data + ")\n";
    return head;
}

// --list: one line per run on stdout (K, its state, the command it needs now), for scripts.
void list_runs(const Options& o, const Study& st) {
    for (size_t k = 0; k < st.runs.size(); k++) {
        const Run& r = st.runs[k];
        printf("%zu\t%s%s\t%s\n", k + 1, r.state.c_str(), r.eval_missing ? "+eval" : "",
               r.state == "done" && r.eval_missing ? shell_join(eval_command(o, r, st.tasks)).c_str()
                                                   : shell_join(train_command(o, r)).c_str());
    }
    fflush(stdout);
}

// The logs of the runs to do are checked before any run starts (open_log checks each again as it opens it).
void check_logs(const Options& o, const Study& st) {
    for (size_t k = 0; k < st.runs.size(); k++) {
        if (o.only && (long)k + 1 != o.only) continue;
        for (const char* n : {"train.log", "eval.log"}) {
            const std::string p = st.runs[k].dir + "/" + n;
            struct stat sb;
            if (lstat(p.c_str(), &sb) == 0 && (!S_ISREG(sb.st_mode) || sb.st_nlink != 1)) throw not_a_log(p, sb);
        }
    }
}

// A stopped child (a run or its evals): the study ends with 75, whatever the child's own code (75 when it
// stopped with a checkpoint, 128 + N when a second signal ended it, 0 when it finished anyway), so that a
// scheduler's `[ $? -eq 75 ] && requeue` always continues it.
int stopped(const Run& r, int rc, const char* what) {
    printf("study: %s%s was stopped (exit %d); rerun the same command to continue\n", r.name.c_str(), what, rc);
    fflush(stdout);
    return kExitInterrupted;
}

// Trains run k (its state says how). Returns the trainer's exit status; a failure is printed with its reason.
int train_run(const Options& o, Study& st, Estimate& e, size_t k) {
    Run& r = st.runs[k];
    const size_t n = st.runs.size();
    const std::string log = r.dir + "/train.log";
    make_dirs(r.dir);
    printf("[%zu/%zu] %s: %s (output: %s)\n", k + 1, n, r.name.c_str(),
           r.state == "new"      ? "training"
           : r.state == "resume" ? "resuming"
                                 : "starting again (no checkpoint)",
           log.c_str());
    fflush(stdout);
    const auto t0 = std::chrono::steady_clock::now();
    // Until the study has a pace measured here, this run's first steps give it: at least kPaceSteps, and up to its
    // first validation (what every val_every steps cost is in the pace).
    std::function<bool()> tick;
    if (std::isnan(e.rate))
        tick = [&, k] {
            const Pace p = read_pace(r.dir);
            if (p.done <= e.done_before[k] || p.steps < kPaceSteps || (r.o.val_every > 0 && !p.validated) ||
                !std::isfinite(p.rate()))
                return true;  // not yet: (a resumed run's log holds its earlier invocation's lines first)
            e.rate = p.rate(), e.measured_on = r.name + "'s first " + std::to_string(p.steps) + " steps";
            printf(
                "[%zu/%zu] %s: wall time: %s\n", k + 1, n, r.name.c_str(),
                wall_text(std::max(0.0, e.tokens_left(k) - p.tokens), e.runs_left(k), e.rate, e.measured_on).c_str());
            fflush(stdout);
            return false;
        };
    std::string reason;
    const int rc = run_logged(train_command(o, r), log, reason, tick);
    if (is_stop_code(rc) || rc != 0) {
        if (!is_stop_code(rc)) fprintf(stderr, "study: %s failed (exit %d): %s\n", r.name.c_str(), rc, reason.c_str());
        fflush(stderr);
        return rc;
    }
    const Pace p = read_pace(r.dir);  // the whole run now: the pace for the rest
    printf("[%zu/%zu] %s: done in %.0f s, val loss %.4f\n", k + 1, n, r.name.c_str(),
           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), p.val_loss);
    if (std::isfinite(p.rate())) e.rate = p.rate(), e.measured_on = r.name;
    if (e.runs_left(k + 1) && std::isfinite(e.rate))
        printf("[%zu/%zu] wall time left: %s\n", k + 1, n,
               wall_text(e.tokens_left(k + 1), e.runs_left(k + 1), e.rate, e.measured_on).c_str());
    return 0;
}

// Scores run k's model on the study's tasks (every file eval_outputs names). Returns eval_zeroshot's exit status.
int eval_run(const Options& o, const Study& st, size_t k) {
    const Run& r = st.runs[k];
    printf("[%zu/%zu] %s: zero-shot evals -> %s/eval.json, samples.jsonl\n", k + 1, st.runs.size(), r.name.c_str(),
           r.dir.c_str());
    fflush(stdout);
    std::string reason;
    const int rc = run_logged(eval_command(o, r, st.tasks), r.dir + "/eval.log", reason);
    if (rc != 0 && !is_stop_code(rc) && !g_stop)
        fprintf(stderr, "study: the evals of %s failed (exit %d): %s\n", r.name.c_str(), rc, reason.c_str());
    return rc;
}

int run(Options& o, char** argv) {
    if (o.trainer.empty()) o.trainer = binary_next_to(argv[0], "train_prism");
    if (o.evaluator.empty()) o.evaluator = binary_next_to(argv[0], "eval_zeroshot");
    g_planning = 1;  // until the first write (make_dirs below): a stop exits 75 at once, even mid-check
    install_study_handlers();
    Study st = plan_study(o);
    Estimate e = estimate(o, st);
    // --list: stdout stays one line per run (for scripts); the grid and its cost go to stderr.
    fputs(header(o, st, e).c_str(), o.list ? stderr : stdout);
    fflush(o.list ? stderr : stdout);
    if (o.list) return list_runs(o, st), 0;
    check_logs(o, st);
    g_planning = 0;  // a stop from here on is passed on to the running child, or ends the study between runs
    if (g_stop) return kExitInterrupted;
    make_dirs(o.dir);
    int failed = 0;
    for (size_t k = 0; k < st.runs.size(); k++) {
        if (o.only && (long)k + 1 != o.only) continue;
        Run& r = st.runs[k];
        if (g_stop) {
            printf("study: stopped by %s before %s; rerun the same command to continue\n", stop_signal_name(g_stop),
                   r.name.c_str());
            return kExitInterrupted;
        }
        if (r.state != "done") {
            const int rc = train_run(o, st, e, k);
            if (is_stop_code(rc)) return stopped(r, rc, "");
            if (rc != 0) {
                failed++;
                if (g_stop) return rc;
                continue;
            }
        } else {
            printf("[%zu/%zu] %s: done already, skipped\n", k + 1, st.runs.size(), r.name.c_str());
        }
        if (r.eval_missing && !g_stop) {
            const int rc = eval_run(o, st, k);
            if (is_stop_code(rc) || (g_stop && rc != 0)) return stopped(r, rc, "'s evals");
            failed += rc != 0;
        }
        fflush(stdout);
    }
    if (failed) {
        fprintf(stderr,
                "study: error: %d of the runs failed (their logs are named above); fix the cause and rerun "
                "the same command: finished runs are skipped\n",
                failed);
        return 1;
    }
    printf("study %s: complete; compare the runs with: report %s -o %s/report.html\n", o.dir.c_str(), o.dir.c_str(),
           o.dir.c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    Command cmd{"study",
                "DIR [--recipe NAME] [-m PRESET] [--heads LIST] [--widths LIST] [--seeds N|LIST] [--grid FLAG=LIST]... "
                "[flags] "
                "[-- TRAINER FLAGS]",
                "Runs a grid of train_prism runs, configurations x seeds, one run directory each "
                "under DIR; rerun the same command until it is complete.",
                make_flags(o)};
    cmd.missing = "study directory", cmd.min_positional = 1, cmd.max_positional = 1, cmd.stop_at = "--";
    return command_main(cmd, argc, argv, "", [&](const Parsed& p) {
        o.trainer_flags = p.after;  // everything after `--` is the trainer's
        o.dir = p.positional[0];
        if (o.dir.empty())  // "$DIR" unset: its runs would go to /HEADS-WIDTHS-sS
            throw ConfigError("the study directory is an empty path; pass a directory (an unset shell variable?)");
        while (o.dir.size() > 1 && o.dir.back() == '/') o.dir.pop_back();
        check_output_path(o.dir, "the study directory", {});  // the root is refused, as for every -o
        return run(o, argv);
    });
}
