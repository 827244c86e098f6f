// run/run.cpp: Run (run/run.h), and the resume rules it applies.
#include "model/layer_columns.h"
#include "run/run.h"

#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "dataloader.h"
#include "engine.h"
#include "model_config.h"
#include "run/cli.h"
#include "run/defaults.h"
#include "run/run_dir.h"
#include "run/run_record.h"
#include "run/stop_signal.h"
#include "text/tokenizer_path.h"
#include "util/fs.h"
#include "util/json.h"

std::string log_step(const StepRecord& r) {
    std::string s = "{\"step\": " + std::to_string(r.step) + ", \"tokens\": " + std::to_string(r.tokens) +
                    ", \"train_loss\": " + json::number(r.loss, "%.6f");
    if (r.has_val) s += ", \"val_loss\": " + json::number(r.val_loss, "%.6f");
    s += ", \"lr\": " + json::number(r.lr, "%.6e") + ", \"grad_norm\": " + json::number(r.norm, "%.6f") +
         ", \"tokens_per_s\": " + json::number(r.tokens_per_s, "%.1f") +
         ", \"elapsed_s\": " + json::number(r.elapsed, "%.3f");
    if (!std::isnan(r.mfu)) s += ", \"mfu\": " + json::number(r.mfu, "%.4f");
    if (r.skipped) s += ", \"skipped\": true";
    if (!r.layers.grad_norm.empty()) {
        auto list = [](const std::vector<double>& v) {
            std::string a = "[";
            for (size_t i = 0; i < v.size(); i++) a += (i ? ", " : "") + json::number(v[i], "%.4e");
            return a + "]";
        };
        for (int k = 0; k < LayerStats::kCount; k++)  // "layers": {"grad_norm": [...], ...}
            s += std::string(k ? ", \"" : ", \"layers\": {\"") + LayerStats::kNames[k] +
                 "\": " + list(r.layers.signal(k));
        s += "}";
    }
    return s;
}

std::string model_difference(const ModelConfig& saved, const ModelConfig& want) {
    auto diff = [](const std::string& what, double a, double b) {
        return what + " " + exact_number(a) + " vs " + exact_number(b) + " asked for";
    };
    for (const ModelScalar& s : model_scalars())
        if (s.get(saved) != s.get(want)) return diff(s.name, s.get(saved), s.get(want));
    if (saved.L() != want.L()) return diff("layers", saved.L(), want.L());
    for (int l = 0; l < saved.L(); l++)
        for (bool switches : {true, false})  // a dropped sub-block first: it is why its sizes differ
            for (const LayerColumn& col : layer_columns())
                if (col.is_switch == switches && col.value(saved, l) != col.value(want, l)) {
                    const std::string what = "layer " + std::to_string(l + 1) + " " + col.key;
                    const int a = col.value(saved, l), b = col.value(want, l);
                    if (col.words) return what + " " + col.words[a] + " vs " + col.words[b] + " asked for";
                    return diff(what, a, b);
                }
    if (param_layout(saved).total != param_layout(want).total)
        return diff("parameters", (double)param_layout(saved).total, (double)param_layout(want).total);
    return "";
}

// What a checkpoint restores besides the parameters and AdamW moments (which go straight into the engine).
struct ResumePoint {
    std::string dir;  // the checkpoint directory
    long step = 0, tokens = 0;
    long total_batch = 0;  // the global batch it was trained with, tokens per step (0: not known)
    uint64_t rng = 0;      // sampling RNG state (rank 0's, the one that samples)
    LoaderState loader;
};

// On a --resume: the model's context T (--seq-len, else the preset's) must be the recorded model's ("model"
// "T"), the first thing a changed --seq-len (given, or edited into the record's args) would break.
static void check_resume_context(const RunRecord& rec, int T) {
    const json::Value* m = rec.doc.find("model");
    const json::Value* t = m && m->kind == json::Value::Object ? m->find("T") : nullptr;
    if (!t || t->kind != json::Value::Number || t->str == std::to_string(T)) return;
    throw ConfigError("--resume: the model's context would be T " + std::to_string(T) + " (--seq-len " +
                      std::to_string(T) + ", given or in " + rec.path +
                      "'s \"args\"), but the recorded run's model "
                      "has T " +
                      t->str + " (\"model\": {\"T\"}); resume with --seq-len " + t->str + ", or restore " + rec.path +
                      " if it was edited");
}

// Whether the record fingerprints its training data (records from before fingerprints do not): then --train and --val
// may name the shards by any path, and their fingerprints decide (check_resume_data).
static bool data_fingerprinted(const RunRecord& rec) {
    const json::Value* d = rec.doc.find("data");
    const json::Value* t = d && d->kind == json::Value::Object ? d->find("train") : nullptr;
    return t && t->kind == json::Value::String;
}

// On a --resume: the shards must be those the record's "data" fingerprints (the validation ones when both the
// record and this invocation have some), else a ConfigError naming the shards, both fingerprints and the flag
// that accepts the change (data_may_change: --allow-data-change). A record from before fingerprints ("data"
// absent) is not compared: a note says so.
static void check_resume_data(const RunRecord& rec, const std::string& train_glob, const std::string& train,
                              const std::string& val_glob, const std::string& val, bool data_may_change,
                              std::vector<std::string>& notes) {
    if (!data_fingerprinted(rec)) {
        notes.push_back(rec.path +
                        " records no fingerprint of its data (written by an older train_prism): the "
                        "shards are not compared with the first run's; this invocation records them");
        return;
    }
    const json::Value* d = rec.doc.find("data");
    const json::Value *t = d->find("train"), *v = d->find("val");
    auto differs = [&](const char* what, const std::string& glob, const std::string& was, const std::string& now) {
        if (was == now) return;
        const std::string m = "--resume: the " + std::string(what) + " shards " + glob + " are not the data " +
                              rec.path + " recorded (fingerprint " + was + ", now " + now +
                              ": another set, or its "
                              "shards were replaced)";
        if (!data_may_change)
            throw ConfigError(m + "; resume on the recorded data, or pass --allow-data-change to go on with this data");
        notes.push_back(m + "; going on with this data (--allow-data-change), the record now fingerprints it");
    };
    differs("training", train_glob, t->str, train);
    if (v && v->kind == json::Value::String && !val.empty()) differs("validation", val_glob, v->str, val);
}

// The words of a recorded [flag, value] pair on a command line, appended to `out`: the flag, and its value when it
// takes one; nothing for a value recorded as "" (the default: no empty path flag).
static void append_recorded_arg(std::vector<std::string>& out, const std::string& flag, const std::string& value,
                                const std::vector<Flag>& flags) {
    bool takes_value = false;
    for (const Flag& f : flags)
        if (canonical_name(f) == flag) takes_value = !f.arg.empty();
    if (takes_value && value.empty()) return;
    out.push_back(flag);
    if (takes_value) out.push_back(value);
}

// parse_flags over a list of words, argv[0] first.
static void parse_words(std::vector<std::string> words, const std::vector<Flag>& flags) {
    std::vector<char*> av;
    for (std::string& a : words) av.push_back(&a[0]);
    parse_flags((int)av.size(), av.data(), flags, "train_prism");
}

// The argument list a --resume parses: the record's flags, minus those the user gives again (and minus
// --steps when a length flag is given), then the user's own. argv[0] first.
static std::vector<std::string> restore_recorded_args(const RunRecord& rec, int argc, char** argv,
                                                      const std::vector<Flag>& flags) {
    const std::vector<std::string> given = given_flags(argc, argv, flags);
    auto is_given = [&](const std::string& f) { return std::find(given.begin(), given.end(), f) != given.end(); };
    const bool length =
        is_given("--steps") || is_given("--tokens") || is_given("--tokens-per-param") || is_given("--epochs");
    // --allow-batch-change: the global batch is this invocation's (its own --total-batch, else the default for
    // its B and ranks), not the record's.
    const bool new_batch = is_given("--allow-batch-change");
    std::string schedule;  // --lr-schedule as given now ("": not given)
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "--lr-schedule" && i + 1 < argc) schedule = argv[i + 1];
        else if (a.rfind("--lr-schedule=", 0) == 0) schedule = a.substr(a.find('=') + 1);
    }
    std::vector<std::string> out{argv[0]};
    for (const auto& [flag, value] : rec.args) {
        if (is_given(flag) || (flag == "--steps" && length) || (flag == "--total-batch" && new_batch)) continue;
        if ((flag == "--tied" && is_given("--untied")) || (flag == "--untied" && is_given("--tied"))) continue;
        // Another schedule than wsd given: the recorded wsd decay is not carried into it (an error there).
        if ((flag == "--decay-frac" || flag == "--decay-shape") && !schedule.empty() && schedule != "wsd") continue;
        append_recorded_arg(out, flag, value, flags);
    }
    for (int i = 1; i < argc; i++) out.push_back(argv[i]);
    return out;
}

// A number of the record's "plan" (NAN when the record does not have the field: an older record). A value that is
// not a finite JSON number is an error naming the field, never read as another number.
static double recorded_plan_number(const RunRecord& rec, const char* key) {
    const json::Value* plan = rec.doc.find("plan");
    const json::Value* v = plan && plan->kind == json::Value::Object ? plan->find(key) : nullptr;
    if (!v) return NAN;
    char* end = nullptr;
    const double x = v->kind == json::Value::Number ? std::strtod(v->str.c_str(), &end) : NAN;
    if (!std::isfinite(x) || *end)
        throw ConfigError("--resume: " + rec.path + "'s \"plan\": {\"" + key +
                          "\": " + run_record::dump(*v).substr(0, 60) +
                          "} is not a number the trainer writes; restore " + rec.path + " from a copy");
    return x;
}

// The warmup a recorded run's steps so far had ("plan" in run.json; -1 when it does not say).
static long recorded_warmup(const RunRecord& rec) {
    const double w = recorded_plan_number(rec, "warmup");
    return std::isnan(w) ? -1 : (long)w;
}

// The record's "args" parsed alone, with the bounds of the flags (run/defaults.h's table): a value edited out of range
// or of the wrong kind (a warmup of 1e300, a word where a number goes) is an error naming run.json, never read as
// another value.
static TrainOptions parse_recorded_args(const RunRecord& rec) {
    TrainOptions r;
    const std::vector<Flag> flags = make_train_flags(r);
    std::vector<std::string> args{"train_prism"};
    for (const auto& [flag, value] : rec.args) append_recorded_arg(args, flag, value, flags);
    try {
        parse_words(args, flags);
    } catch (const ConfigError& e) {
        throw ConfigError("--resume: " + rec.path + "'s \"args\": " + e.what() + "; restore " + rec.path +
                          " from a copy (a resume changes a run by the flags given with it)");
    }
    return r;
}

// On a --resume: the record's "plan" must be what its own "args" give (`was`: parse_recorded_args), field by field:
// the length, the warmup, the peak and final lr, the batch and the seed. A record edited by hand in one place and not
// the other is refused naming the field: which of the two the run trained with cannot be told.
static void check_record_agrees(const RunRecord& rec, const TrainOptions& was) {
    const long steps = was.steps;
    const double want[][2] = {
        {(double)steps, recorded_plan_number(rec, "steps")},
        {(double)(was.warmup >= 0 ? was.warmup : default_warmup(was, steps)), recorded_plan_number(rec, "warmup")},
        {was.lr, recorded_plan_number(rec, "lr")},
        {was.lr * was.final_lr_frac, recorded_plan_number(rec, "final_lr")},
        {(double)was.total_batch, recorded_plan_number(rec, "total_batch")},
        {(double)was.seed, recorded_plan_number(rec, "seed")}};
    const char* keys[] = {"steps", "warmup", "lr", "final_lr", "total_batch", "seed"};
    const char* from[] = {"--steps",       "--warmup (else --warmup-frac of --steps)",
                          "--lr",          "--lr x --final-lr-frac",
                          "--total-batch", "--seed"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const double args = want[i][0], plan = want[i][1];
        if (std::isnan(plan) || std::isnan(args)) continue;  // an older record without the field
        if (args == plan) continue;                          // the same arithmetic on the same values: the same bits
        throw ConfigError("--resume: " + rec.path + " disagrees with itself: its \"plan\" has \"" + keys[i] +
                          "\": " + exact_number(plan) + ", its \"args\" give " + exact_number(args) + " (" + from[i] +
                          "): it was edited by hand; restore it from a copy (a resume changes a run by the flags "
                          "given with it, which run.json then records)");
    }
}

// On a --resume of a recorded run whose warmup was the default (--warmup not given, so --warmup-frac of the
// steps): it keeps its recorded length, as everything the resume does not name does, when another --steps would
// make the fraction give another one (record_args then records it as --warmup). Returns the note that says so.
static std::string keep_recorded_warmup(const RunRecord& rec, const TrainOptions& o, RunPlan& p) {
    const long was = recorded_warmup(rec);
    if (o.warmup >= 0 || was < 0 || was == p.warmup) return "";
    if (was > p.steps)
        throw ConfigError("--resume: the run's warmup is " + std::to_string(was) + " steps (--warmup-frac " +
                          exact_number(o.warmup_frac) + " of its recorded length), more than --steps " +
                          std::to_string(p.steps) + "; resume with --steps " + std::to_string(was) +
                          " or more, or pass --warmup N (at most " + std::to_string(p.steps) + ") to change it");
    const std::string note = "the warmup keeps its recorded " + std::to_string(was) + " steps (--warmup-frac " +
                             exact_number(o.warmup_frac) + " of --steps " + std::to_string(p.steps) + " would give " +
                             std::to_string(p.warmup) + "); pass --warmup N to change it";
    p.warmup = was;
    return note;
}

// On a --resume of a recorded run (`recorded`: its args, parse_recorded_args) from the checkpoint at step `start`:
// this invocation's schedule (o, p) may
// differ from the recorded one (`changes`: the schedule flags check_resume_args let differ; or another --steps)
// only where no step already done is touched: every step before `start` must get the same lr under both,
// exactly. So a wsd
// run is branched into another decay length or shape from its stable phase, and refused once its decay began.
// A cosine run whose length alone changes goes on with its decay stretched (the lr of steps done would differ: `note`
// says so), recorded as a branch. Returns the changes at `start` for run.json's "branches" (--steps among them when
// it changed).
static std::vector<RunBranch> check_lr_branch(const RunRecord& rec, const TrainOptions& recorded,
                                              std::vector<RunBranch> changes, const TrainOptions& o,
                                              const ModelConfig& cfg, const RunPlan& p, size_t train_tokens, long start,
                                              std::string& note) {
    TrainOptions was = o;  // the record's schedule flags; the rest equal the record (check_resume_args)
    was.lr_schedule = recorded.lr_schedule, was.decay_frac = recorded.decay_frac;
    was.decay_shape = recorded.decay_shape;
    was.warmup = recorded.warmup >= 0 ? recorded.warmup : recorded_warmup(rec);
    if (rec.has("--steps")) was.steps = recorded.steps;
    was.tokens = 0, was.tokens_per_param = 0, was.epochs = 0;
    const RunPlan wp = plan_run(was, cfg, p.world, train_tokens);
    const LrSchedule before = lr_schedule(was, wp), after = lr_schedule(o, p);
    // A default warmup kept at its recorded length (keep_recorded_warmup) is now recorded, but did not change.
    changes.erase(std::remove_if(changes.begin(), changes.end(),
                                 [&](const RunBranch& c) {
                                     return c.flag == "--warmup" && c.old_value.empty() &&
                                            c.new_value == std::to_string(wp.warmup);
                                 }),
                  changes.end());
    const bool stretched = changes.empty() && before.kind == "cosine" && wp.steps != p.steps;
    if (wp.steps != p.steps) changes.push_back({0, "--steps", std::to_string(wp.steps), std::to_string(p.steps)});
    if (changes.empty()) return {};
    if (stretched) {  // a cosine run's length alone: its decay stretches, a branch that run.json records
        for (RunBranch& c : changes) c.step = start;
        for (long s = 0; s < start; s++)
            if (lr_at(before, s) != lr_at(after, s)) {
                const auto [a, b] = distinct_numbers(lr_at(before, s), lr_at(after, s));
                note = "--steps " + std::to_string(p.steps) + " (recorded " + std::to_string(wp.steps) +
                       ") stretches the cosine decay: the lr of step " + std::to_string(s + 1) +
                       ", already done, was " + a + " and would now be " + b + "; going on from step " +
                       std::to_string(start) +
                       " as a branch, which run.json's \"branches\" records (to keep the run as it was, resume "
                       "with --steps " +
                       std::to_string(wp.steps) + ", or branch a copy: docs/training.md)";
                break;
            }
        return changes;
    }
    std::string what;
    for (RunBranch& c : changes) {
        if (c.flag == "--lr-schedule") {  // not recorded when cosine
            if (c.old_value.empty()) c.old_value = "cosine";
            if (c.new_value.empty()) c.new_value = "cosine";
        }
        c.step = start;
        what += (what.empty() ? "" : ", ") + (c.new_value.empty() ? "no " + c.flag : c.flag + " " + c.new_value) +
                " (recorded " + (c.old_value.empty() ? "none" : c.old_value) + ")";
    }
    for (long s = 0; s < start; s++) {
        const double a = lr_at(before, s), b = lr_at(after, s);
        if (a == b) continue;
        const auto [was_lr, now_lr] = distinct_numbers(a, b);
        const std::string lr = " (" + was_lr + ", now " + now_lr + ")";
        const long last_peak = before.decay_start() + 1;  // the last step at the peak, counted from 1
        // What would keep the steps done: the recorded warmup; a decay that starts at the checkpoint or later.
        std::string fix = "resume with the recorded schedule, or branch a copy of the run from an earlier checkpoint";
        if (s < std::max(before.warmup, after.warmup) && before.warmup != after.warmup)
            fix = "pass --warmup " + std::to_string(before.warmup) + " to keep the recorded warmup";
        else if (before.kind == "wsd" && start > last_peak)
            fix = "the recorded decay began after step " + std::to_string(last_peak) + ": only a checkpoint at step " +
                  std::to_string(last_peak) + " or before can go into another decay";
        else if (before.kind == "wsd" && after.kind == "wsd" && after.decay_start() < start - 1)
            fix = "a decay of at most " + std::to_string(p.steps - start) + " steps (--decay-frac " +
                  exact_number(std::floor(1000.0 * (double)(p.steps - start) / (double)p.steps) / 1000) +
                  " or less, or a larger --steps) keeps the steps done";
        throw ConfigError("--resume: " + what + " would change the lr of step " + std::to_string(s + 1) +
                          ", already done" + lr + ", and the checkpoint is at step " + std::to_string(start) + "; " +
                          fix + " (docs/training.md, \"Learning-rate schedules\")");
    }
    return changes;
}

// Why the run stopped early, for the error line: which steps were not finite and what OUT/latest names. When
// the first bad step is the first one after that checkpoint, the checkpoint itself is their source (its
// parameters are finite but make non-finite steps at once), so it is not called a good one.
static std::string nonfinite_message(const RunDir& run, long first_bad, long last_bad) {
    std::string latest = run.latest();
    const bool source = !latest.empty() && step_of_dir_name(latest) + 1 == first_bad;
    return "steps " + std::to_string(first_bad) + ".." + std::to_string(last_bad) +
           " had a NaN or infinite loss or gradient norm and were skipped (no update, no checkpoint); " +
           (latest.empty() ? "no checkpoint was written; start again with a lower --lr or a higher --warmup-frac, plus "
                             "--overwrite (it deletes this log)"
            : source
                ? run.path() + "/latest names " + latest +
                      ", which every one of these steps started from: "
                      "it makes non-finite steps at once; resume from an earlier checkpoint (--resume --branch-from "
                      "step_N), or start again with a lower --lr plus --overwrite (a resume keeps the recorded lr)"
                : run.path() + "/latest names " + latest +
                      ", the last good one; --resume retries from it, or start again with a lower --lr or a "
                      "higher --warmup-frac plus --overwrite (a resume keeps the recorded lr)");
}

// The flags a resume may change when the lr of every step done stays the same (Run::plan checks it and
// records each change in run.json's "branches"): a wsd run branched into another decay. --steps may change in
// any case (may_change_on_resume); for a schedule other than cosine it is checked the same way.
static std::vector<std::string> lr_branch_flags() {
    return {"--warmup", "--lr-schedule", "--decay-frac", "--decay-shape"};
}

std::vector<RunBranch> check_resume_args(const RunRecord& rec,
                                         const std::vector<std::pair<std::string, std::string>>& now,
                                         const std::vector<std::string>& may_change, bool batch_may_change,
                                         bool data_may_change, const std::vector<std::string>& may_branch) {
    std::vector<RunBranch> changes;
    for (const std::string& f : may_branch) {
        std::string value;
        for (const auto& x : now)
            if (x.first == f) value = x.second;
        if (value != rec.arg(f)) changes.push_back({0, f, rec.arg(f), value});
    }
    std::vector<std::string> ok = may_change;
    ok.insert(ok.end(), may_branch.begin(), may_branch.end());
    if (batch_may_change) ok.push_back("--total-batch");
    if (data_may_change) ok.push_back("--train"), ok.push_back("--val");
    auto show = [](const std::string& f, const std::string& v) { return v.empty() ? f : f + " " + v; };
    auto find = [](const std::vector<std::pair<std::string, std::string>>& v,
                   const std::string& f) -> const std::string* {
        for (const auto& x : v)
            if (x.first == f) return &x.second;
        return nullptr;
    };
    std::string list;
    for (size_t i = 0; i < ok.size(); i++) list += (i ? ", " : "") + ok[i];
    const std::string tail = " (" + rec.path +
                             "); resume without it to continue the run as recorded, or start a new "
                             "run in another -o (a resume may change only " +
                             list + ")";
    for (const auto& [flag, value] : now) {
        if (std::find(ok.begin(), ok.end(), flag) != ok.end()) continue;
        const std::string* was = find(rec.args, flag);
        if (!was) throw ConfigError("--resume: " + show(flag, value) + " is not part of the recorded run" + tail);
        if (*was != value)
            throw ConfigError("--resume: " + show(flag, value) + " differs from the recorded " + show(flag, *was) +
                              tail);
    }
    for (const auto& [flag, value] : rec.args)
        if (std::find(ok.begin(), ok.end(), flag) == ok.end() && !find(now, flag))
            throw ConfigError("--resume: the recorded " + show(flag, value) + " cannot be taken back" + tail);
    return changes;
}

Run::Run(const Dist& dist) : dist_(dist), lead_(dist.rank == 0), record_(new RunRecord), writer_(new RunRecordWriter) {}
Run::~Run() = default;

void Run::check_out(const TrainOptions& o) {
    std::vector<ReadPath> inputs;
    for (const std::string& pattern : {o.train, o.val}) {
        glob_t g;
        if (glob(pattern.c_str(), 0, nullptr, &g) == 0)
            for (size_t i = 0; i < g.gl_pathc; i++) inputs.push_back({g.gl_pathv[i], "the shard"});
        globfree(&g);
    }
    if (o.eval_every > 0) inputs.push_back({o.eval_data + "/" + o.eval_task + ".bin", "the eval file"});
    inputs.push_back({tokenizer_path(o.tokenizer), "the tokenizer"});
    check_output_path(o.out, "-o", inputs, true);
}

void Run::restore_flags(TrainOptions& o, Command& cmd, int argc, char** argv, bool gpu,
                        std::vector<std::string>& notes) {
    if (!o.resume && !o.plan)
        for (auto [given, flag] : {std::pair<bool, const char*>{o.allow_batch_change, "--allow-batch-change"},
                                   {o.allow_data_change, "--allow-data-change"},
                                   {!o.branch_from.empty(), "--branch-from"}})
            if (given) throw ConfigError(std::string(flag) + " only applies to --resume");
    if (!o.resume || o.plan) return;
    default_model(o, gpu);
    const std::string out = o.out.empty() ? default_out_dir(o.model) : o.out;
    if (read_run_record(out, *record_)) {
        recorded_options_.reset(new TrainOptions(parse_recorded_args(*record_)));
        std::vector<std::string> args = restore_recorded_args(*record_, argc, argv, cmd.flags);
        find_recorded_data(args);
        o = TrainOptions();
        parse_words(args, cmd.flags);
        if (o.out.empty()) o.out = out;
        recorded_ = true;
    } else if (is_dir(out)) {
        unrecorded_ = out;
        notes.push_back(out +
                        " holds no run.json (a run from before run records): resuming with the flags "
                        "given, which must be the first run's");
    }
}

void Run::find_recorded_data(std::vector<std::string>& args) const {
    const json::Value* d = record_->doc.find("data");
    for (size_t i = 1; i + 1 < args.size(); i++) {
        const char* key = args[i] == "--train" ? "train_path" : args[i] == "--val" ? "val_path" : nullptr;
        const json::Value* abs = key && d && d->kind == json::Value::Object ? d->find(key) : nullptr;
        if (!abs || abs->kind != json::Value::String || args[i + 1].empty() || args[i + 1][0] == '/') continue;
        glob_t g;
        const bool here = glob(args[i + 1].c_str(), 0, nullptr, &g) == 0;
        globfree(&g);
        if (!here) args[i + 1] = abs->str;
    }
}

AgreedFailure Run::explain(const AgreedFailure& e) const {
    if (unrecorded_.empty() || access(run_record_path(unrecorded_).c_str(), F_OK) == 0) return e;
    return AgreedFailure(std::string(e.what()) + " (" + unrecorded_ +
                         "/run.json is missing, so only the flags given "
                         "apply: pass the first run's flags, or restore run.json from a copy)");
}

// Before anything is loaded: OUT's own names (latest, log.jsonl, model.bin) must be regular files when they
// exist (a link, a FIFO or a device there is refused, never followed, waited on or read without end). A
// fresh run (no --resume) into an OUT that holds anything the trainer writes (a step_N checkpoint or a link
// under such a name, latest, model.bin, a non-empty log) is refused unless `overwrite`, so that forgetting
// --resume never loses anything. Changes nothing on disk.
static void check_start(const RunDir& dir, bool resume, bool overwrite) {
    const std::string& out = dir.path();
    if (resume && overwrite) throw ConfigError("--resume and --overwrite contradict each other; pass one");
    struct stat st;
    for (const char* n : {"latest", "log.jsonl", "model.bin", "lock"}) {
        const std::string p = out + "/" + n;
        if (lstat(p.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
            throw ConfigError(
                p + " is " + file_kind(st.st_mode) + ", not the file train_prism writes there; " +
                (S_ISDIR(st.st_mode) ? "move it aside (mv " + p + " " + p + ".aside)" : "remove it (rm " + p + ")") +
                " or pass another -o");
    }
    if (resume || overwrite) return;
    const std::string what = dir.earlier_run();
    if (what.empty()) return;
    if (dir.checkpoint_steps().empty() && access((out + "/latest").c_str(), F_OK) != 0)  // nothing to resume
        throw ConfigError(out + " holds an earlier run with no checkpoint --resume could continue (" + what +
                          "); pass --overwrite to delete " + dir.overwritten() +
                          " and start afresh, or pass another -o");
    throw ConfigError(out + " holds an earlier run (" + what +
                      "); pass --resume to continue it, or --overwrite to delete " + dir.overwritten() +
                      " and start afresh");
}

void Run::open(const TrainOptions& o, const ModelConfig& cfg) {
    o_ = &o, cfg_ = &cfg;
    rng_ = o.seed * 0x9E3779B97F4A7C15ull + 1;
    dir_.reset(new RunDir(o.out, o.keep, dist_));
    dir_->lock();
    check_start(*dir_, o.resume, o.overwrite);
    finish_pending_branch();
}

void Run::finish_pending_branch() {
    if (!lead_) return;
    const std::unique_ptr<BranchIntent> b = dir_->pending_branch();
    if (!b) return;
    dir_->apply_branch(*b);
    dir_->truncate_log(step_of_dir_name(b->to));
    RunRecord rec;
    if (read_run_record(o_->out, rec)) {  // the branch into "branches", unless run.json has it already
        const std::string entry = branch_json({step_of_dir_name(b->to), "--branch-from", b->was, b->to});
        json::Value* br = nullptr;
        for (auto& [k, v] : rec.doc.obj)
            if (k == "branches" && v.kind == json::Value::Array) br = &v;
        if (!br) {
            auto at = std::find_if(rec.doc.obj.begin(), rec.doc.obj.end(),
                                   [](const auto& kv) { return kv.first == "invocations"; });
            br = &rec.doc.obj.insert(at, {"branches", json::parse("[]")})->second;
        }
        bool there = false;
        for (const json::Value& e : br->arr) there = there || run_record::dump(e) == entry;
        if (!there) {
            br->arr.push_back(json::parse(entry));
            const std::string text = run_record::dump(rec.doc) + "\n";
            write_atomically(rec.path, {{text.data(), text.size()}});
        }
    }
    dir_->end_branch();
    fprintf(stderr,
            "note: %s/branch.json: a --branch-from to %s was stopped half way; completed now (%s/latest names it%s) "
            "and recorded in run.json\n",
            o_->out.c_str(), b->to.c_str(), o_->out.c_str(),
            b->aside.empty() ? "" : ("; the later checkpoints are in " + o_->out + "/" + b->aside).c_str());
}

const RunPlan& Run::plan(const DataLoader& train, const DataLoader* val) {
    const TrainOptions& o = *o_;
    if (recorded_) {
        check_record_agrees(*record_, *recorded_options_);
        check_resume_context(*record_, cfg_->T);  // before plan_run, which would blame --total-batch
    }
    plan_ = plan_run(o, *cfg_, dist_.world, train.tokens_total());
    if (recorded_) {
        const std::string note = keep_recorded_warmup(*record_, o, plan_);
        if (lead_ && !note.empty()) fprintf(stderr, "note: %s\n", note.c_str());
    }
    sched_ = lr_schedule(o, plan_);
    if (recorded_)
        lr_changes_ = check_resume_args(*record_, record_args(o, plan_), may_change_on_resume(), o.allow_batch_change,
                                        o.allow_data_change || data_fingerprinted(*record_), lr_branch_flags());
    if (lead_) {  // the data the run trains on, as the record keeps it (and a resume checks it)
        const std::string tf = shards_fingerprint(train.shards()), vf = val ? shards_fingerprint(val->shards()) : "";
        std::vector<std::string> notes;
        if (recorded_) check_resume_data(*record_, o.train, tf, o.val, vf, o.allow_data_change, notes);
        for (const std::string& n : notes) fprintf(stderr, "note: %s\n", n.c_str());
        data_json_ = data_record_json(tf, vf, o.train, o.val);
    }
    dir_->set_total_batch(plan_.total_batch);
    dir_->check_writable(plan_.steps, dist_.world);  // what the first checkpoint needs, before any work
    return plan_;
}

void Run::decide(Engine& eng, DataLoader& train) {
    const TrainOptions& o = *o_;
    if (!o.resume) return eng.init_params(o.seed);
    // --branch-from: what it changes, decided on every rank (a name that is not a checkpoint of OUT is refused here)
    std::unique_ptr<BranchIntent> branch = o.branch_from.empty() ? nullptr : dir_->plan_branch(o.branch_from);
    ResumePoint r = load_checkpoint(eng, o.branch_from.empty() ? resume_from() : o.branch_from);
    if (r.total_batch > 0 && r.total_batch != plan_.total_batch && !o.allow_batch_change)
        throw ConfigError("--resume: " + r.dir + " was trained with a global batch of " +
                          std::to_string(r.total_batch) + " tokens per step, this run would take " +
                          std::to_string(plan_.total_batch) + " (B " + std::to_string(o.B) + " x T " +
                          std::to_string(plan_.T) + " x " + std::to_string(dist_.world) + " rank" +
                          (dist_.world > 1 ? "s" : "") + " x " + std::to_string(plan_.n_micro) +
                          " micro-steps); pass --total-batch " + std::to_string(r.total_batch) +
                          " to keep it, or --allow-batch-change to go on with the new one");
    if (r.step > plan_.steps)
        throw ConfigError("--resume: the checkpoint " + r.dir + " is at step " + std::to_string(r.step) +
                          ", beyond --steps " + std::to_string(plan_.steps) + "; pass --steps " +
                          std::to_string(r.step) + " or more" +
                          (o.branch_from.empty() ? "" : ", or branch from an earlier checkpoint"));
    if (recorded_) {
        std::string note;
        lr_changes_ = check_lr_branch(*record_, *recorded_options_, lr_changes_, o, *cfg_, plan_, train.tokens_total(),
                                      r.step, note);
        if (lead_ && !note.empty()) fprintf(stderr, "note: %s\n", note.c_str());
    }
    if (o.allow_data_change && r.loader.fingerprint != train.state().fingerprint) {
        if (lead_)
            fprintf(stderr,
                    "note: --allow-data-change: the training shards hold other token counts than "
                    "the checkpoint's, so its data position does not apply: reading from their start\n");
    } else {
        train.restore(r.loader);
    }
    start_ = r.step, tokens_ = r.tokens, rng_ = r.rng, resumed_dir_ = r.dir;
    if (lead_ && branch) {  // only the lead carries it out (begin)
        branched_.reset(new RunBranch{start_, "--branch-from", branch->was, branch->to});
        branch_ = std::move(branch);
    }
}

void Run::begin(const Engine& eng, const std::string& why) {
    const TrainOptions& o = *o_;
    dir_->create();
    if (o.resume) {
        if (branch_) {
            dir_->begin_branch(*branch_);
            printf("branch: %s/latest names %s%s\n", o.out.c_str(), branch_->to.c_str(),
                   branch_->aside.empty()
                       ? ""
                       : ("; the later checkpoints and the log moved to " + o.out + "/" + branch_->aside).c_str());
        } else if (lead_ && !o.branch_from.empty()) {
            printf("branch: %s/latest names %s already, with nothing later: nothing to move\n", o.out.c_str(),
                   o.branch_from.c_str());
        }
        resumed_line_ = dir_->truncate_log(start_);
        if (lead_) printf("resumed from %s at step %ld (%ld tokens)\n", resumed_dir_.c_str(), start_, tokens_);
    } else {
        dir_->start_fresh(o.overwrite);
    }
    if (!lead_) return;
    writer_->dir = o.out, writer_->args = record_args(o, plan_), writer_->argv = o.argv;
    writer_->model_json = model_record_json(o.model, *cfg_);
    writer_->plan_json = plan_record_json(o, plan_);
    writer_->data_json = data_json_;
    writer_->started = run_record::utc_now(), writer_->engine = eng.describe(), writer_->engine_why = why;
    writer_->ranks = dist_.world, writer_->zero = zero_stage(o, dist_.world), writer_->start_step = start_;
    writer_->load_earlier(o.resume);
    if (branched_) writer_->branches.push_back(branch_json(*branched_));  // not an lr change
    for (const RunBranch& b : lr_changes_) writer_->branches.push_back(branch_json(b));
    writer_->write("running", start_, false);
    if (branch_) dir_->end_branch();  // recorded: nothing left to complete
}

void Run::repair(const std::function<double(bool*)>& validate, const std::function<std::string()>& score) {
    const TrainOptions& o = *o_;
    dir_->agree_run_id();
    auto due = [&](long every) { return start_ > 0 && (start_ % every == 0 || start_ == plan_.steps); };
    if (validate && due(o.val_every)) {
        double missing = lead_ && !resumed_line_.empty() && resumed_line_.find("\"val_loss\": ") == std::string::npos;
        dist_.sum(&missing, 1, "the check of the resumed step's validation");
        if (missing > 0) {
            bool cut = false;
            const double v = validate(&cut);
            const size_t at = resumed_line_.find(", \"lr\": ");
            if (lead_ && !cut && at != std::string::npos) {
                dir_->truncate_log(start_, resumed_line_.insert(at, ", \"val_loss\": " + json::number(v, "%.6f")));
                printf(
                    "validation at step %ld, not in the log (a stop cut it short): val %.4f, added to its "
                    "line\n",
                    start_, v);
            }
        }
    }
    if (score && due(o.eval_every)) {  // so that a stop during the last step's eval does not leave a run "done"
        double missing = lead_ && !resumed_line_.empty() && resumed_line_.back() == '}' &&
                         resumed_line_.find("\"eval\": ") == std::string::npos;
        dist_.sum(&missing, 1, "the check of the resumed step's eval");
        if (missing > 0) {
            const std::string e = score();
            if (lead_ && !e.empty()) {
                dir_->truncate_log(start_, resumed_line_.insert(resumed_line_.size() - 1, ", \"eval\": " + e));
                printf("eval at step %ld, not in the log (a stop cut it short): added to its line\n", start_);
            }
        }
    }
}

int Run::stop_signal() const {
    if (dist_.world == 1) return g_stop_signal;
    std::vector<double> all(dist_.world);
    dist_.all_gather((double)g_stop_signal, all.data(), "the exchange of stop signals");
    for (double x : all)
        if (x != 0) return (int)x;
    return 0;
}

void Run::log(const std::string& line) {
    if (!lead_) return;
    if (!log_) log_.reset(fopen(dir_->log_path().c_str(), "a"));
    if (!log_) throw ConfigError("cannot append to " + dir_->log_path() + ": " + strerror(errno));
    if (fputs(line.c_str(), log_.get()) < 0 || fflush(log_.get()) != 0) {
        const int e = errno;
        throw IoError("cannot write " + dir_->log_path() + ": " + write_error(e) + "; the run stopped here: make " +
                      (dir_->latest().empty()
                           ? "room, then run the same command with --overwrite (no checkpoint yet: it deletes only "
                             "this log)"
                           : "room, then continue from its last checkpoint: the same command with --resume"));
    }
}

void Run::save(Engine& eng, const LoaderState& loader, long step, long tokens, uint64_t rng) {
    dir_->save(eng, loader, step, tokens, rng);
}

void Run::no_checkpoint(long step) const {
    if (!lead_) return;
    const std::string latest = dir_->latest();
    printf("no checkpoint at step %ld: it was not finite; %s\n", step,
           latest.empty() ? "there is none yet" : (o_->out + "/latest still names " + latest).c_str());
}

int Run::interrupted_at_start(int sig) const {
    if (lead_) {
        const std::string latest = dir_->latest();
        printf("stopped by %s during the start-up, before step %ld; %s\n", stop_signal_name(sig), start_ + 1,
               latest.empty()
                   ? "no checkpoint yet: run the same command again"
                   : (o_->out + "/latest names " + latest + "; continue with the same flags plus --resume").c_str());
    }
    fflush(stdout);
    return kExitInterrupted;
}

int Run::diverged(long first_bad, long last) const {
    if (lead_) fprintf(stderr, "train_prism: error: %s\n", nonfinite_message(*dir_, first_bad, last).c_str());
    end_record("diverged", last);
    return kExitDiverged;
}

int Run::interrupted(int sig, long step) const {
    end_record("interrupted", step);
    if (lead_) {
        const std::string latest = dir_->latest();
        printf("stopped by %s after step %ld; %s; continue with train_prism --resume -o %s\n", stop_signal_name(sig),
               step, latest.empty() ? "no checkpoint yet" : (o_->out + "/latest names " + latest).c_str(),
               o_->out.c_str());
    }
    fflush(stdout);
    return kExitInterrupted;
}

int Run::stopped(long step) const {
    if (lead_)
        printf("stopped after %ld steps; continue with train_prism --resume -o %s\n", o_->stop_after, o_->out.c_str());
    end_record("stopped", step);
    return kExitOk;
}

int Run::done(const std::string& machine) const {
    if (lead_) printf("done: %s/model.bin\n%s\n", o_->out.c_str(), machine.c_str());
    end_record("done", plan_.steps);
    return kExitOk;
}

std::string Run::resume_from() const {
    const std::string& out_ = o_->out;
    const std::vector<long> steps = dir_->checkpoint_steps();
    const std::string newest = steps.empty() ? "" : step_dir_name(steps.back());
    std::string latest_name = dir_->latest();
    if (latest_name.empty()) {
        if (steps.empty()) {
            const std::string what = dir_->earlier_run();  // a run stopped before its first checkpoint
            if (!what.empty())
                throw ConfigError("--resume: " + out_ + " holds no checkpoint to continue from, only " + what +
                                  "; start afresh with --overwrite (it deletes " + dir_->overwritten() + ")");
            throw ConfigError("--resume: " + out_ +
                              " holds no checkpoint (no latest, no step_* directory); train "
                              "without --resume first");
        }
        throw ConfigError("--resume: " + out_ + "/latest is missing, but " + out_ + " holds " +
                          std::to_string(steps.size()) + " checkpoint" + (steps.size() > 1 ? "s" : "") + " (newest " +
                          newest + "); to resume from it: echo " + newest + " > " + out_ + "/latest, then run again");
    }
    // Two or more checkpoints later than OUT/latest are another lineage's (latest written back by hand); one is
    // also what a crash between a checkpoint's rename and latest's rewrite leaves, resumed from latest as before
    // (the next save of that step replaces it).
    const long after =
        std::count_if(steps.begin(), steps.end(), [&](long s) { return s > step_of_dir_name(latest_name); });
    if (after >= 2)
        throw ConfigError("--resume: " + out_ + "/latest names " + latest_name + ", but " + out_ + " holds " + newest +
                          ", a later checkpoint of another lineage, which a later resume would splice "
                          "into this one; pass --branch-from " +
                          latest_name +
                          " to go on from it (the later "
                          "checkpoints move aside, kept), or echo " +
                          newest + " > " + out_ + "/latest to go on from the newest");
    const std::string dir = out_ + "/" + latest_name;
    struct stat st;
    if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        const std::string what = lstat(dir.c_str(), &st) != 0 ? "which does not exist"
                                                              : std::string("which is ") + file_kind(st.st_mode) +
                                                                    ", not a checkpoint directory of this run";
        throw ConfigError("--resume: " + out_ + "/latest names " + latest_name + ", " + what +
                          (newest.empty() ? "; " + out_ + " holds no other checkpoint: start afresh with --overwrite"
                                          : "; " + out_ + " holds " + newest + ": echo " + newest + " > " + out_ +
                                                "/latest to resume from it"));
    }
    return latest_name;
}

ResumePoint Run::load_checkpoint(Engine& eng, const std::string& name) {
    const ModelConfig& cfg = *cfg_;
    ResumePoint r;
    r.dir = o_->out + "/" + name;
    LoadedModel m = load_model(r.dir + "/model.bin");
    std::string diff = model_difference(m.cfg, cfg);
    if (!diff.empty())
        throw ConfigError("--resume: " + r.dir + " holds a different model (" + diff +
                          "); pass the model flags of the first run");
    const size_t P = param_layout(cfg).total;
    TrainState st_ = RunDir::load_optimizer_range(r.dir, P, eng.optimizer_range(), m.run_id);
    if (st_.step != m.step)
        throw CheckpointError(r.dir + ": model.bin is at step " + std::to_string(m.step) +
                              " but state_rank0.bin at step " + std::to_string(st_.step) +
                              "; the checkpoint mixes two steps");
    if ((long)m.step != step_of_dir_name(name))
        throw CheckpointError(r.dir + " holds the checkpoint of step " + std::to_string(m.step) +
                              " (a directory renamed or copied in?); resume from a checkpoint under its own name");
    eng.set_params(m.params.data());
    eng.set_optimizer(st_.m, st_.v, (long)st_.step);
    if (st_.loader.size() != sizeof r.loader)
        throw CheckpointError(r.dir + ": data-loader position has the wrong size");
    memcpy(&r.loader, st_.loader.data(), sizeof r.loader);
    r.step = st_.step, r.tokens = st_.tokens, r.rng = st_.rng;
    r.total_batch = st_.total_batch                              ? (long)st_.total_batch
                    : st_.step > 0 && st_.tokens % st_.step == 0 ? (long)(st_.tokens / st_.step)
                                                                 : 0;
    dir_->set_run_id(m.run_id);
    return r;
}

void Run::end_record(const char* status, long step) const {
    if (!lead_) return;
    try {
        writer_->write(status, step, true);
    } catch (const IoError& e) {
        fprintf(stderr, "warning: the run record was not updated: %s\n", e.what());
    }
}
