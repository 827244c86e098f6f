// train_loop.h: the training loop of train_prism on whichever Engine this machine has (engine.h), on one rank
// or as one of `world` data-parallel ranks (dist/process_group.h). One step (train_step.h), on every rank: zero_grad; for each
// of n_micro micro-batches: forward_backward(1 / (n_micro world)) (gradient accumulation); the gradients summed
// over the ranks (the mean over the global batch); clip the global norm; lr from the schedule (lr_schedule.h's
// lr_at, on the host for every engine: warmup, then cosine, wsd, linear or constant); AdamW; one read-back of
// the loss and the norm
// then, on their own schedules: the validation loss, a zero-shot eval task, a text sample, a checkpoint.
// The global batch is what the user asked for: total_batch = B x T x world x n_micro tokens (RunPlan); rank r
// reads sequences [r B, r B + B) of each group of B x world (dataloader.h), so the ranks' micro-batches together
// are the micro-batch of one process with B x world rows. The training loss and the gradient norm come back
// from the engine already summed over the ranks, validation losses and eval counts are summed here; only rank 0
// prints, writes OUT/log.jsonl and samples text. Each step prints one line and appends one JSON object to the
// log; checkpoints and the run directory are run/run_dir.h's, OUT/run.json (what the run is: its resolved flags,
// model, plan, and one entry per invocation with commit, machine and engine) run/run_record.h's. --resume continues from OUT/latest with the identical
// loss sequence of an uninterrupted run (same data position, same sampling RNG), on the same or another number
// of ranks.
// Nothing lost, nothing silently wrong: a step whose loss or gradient norm is NaN or infinite makes no update
// (its gradients are dropped) and writes no checkpoint; --max-nonfinite such steps in a row end the run
// (kExitDiverged) with OUT/latest still naming the last good checkpoint. SIGTERM, SIGINT and SIGHUP end it
// after the current step with a checkpoint (kExitInterrupted, run/stop_signal.h). A failed log write is an error.
// With several ranks every rank sees the same loss and norm, so all skip alike; a signal that reached any rank
// stops every rank after the same step (the ranks exchange their signal state once a step).
// Does not: parse flags (train_prism.cu), know which engine it drives (engine_factory.h makes it), or include
// the eval, sampling and flag-table code a run uses: it reaches them through its LoopSeam, which
// run/loop_seam.h fills in for train_prism.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dataloader.h"
#include "dist/process_group.h"
#include "engine.h"
#include "run/defaults.h"
#include "run/plan_views.h"
#include "run/run_dir.h"
#include "run/run_plan.h"
#include "run/run_record.h"
#include "model_config.h"
#include "run/stop_signal.h"
#include "util/json.h"
#include "util/machine_load.h"
#include "train_step.h"

inline double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Mean loss over `tokens` validation tokens, always from the start of the validation shards. Each rank reads
// its share of every group of B x world sequences (its own loader), and the mean is over all ranks: the same
// sequences and the same mean as one process with B x world rows. A stop signal (stop_signal.h) ends it after the
// batch in progress once its grace has passed (StopGrace): then no rank has a whole validation, and the result
// is NaN on every rank (not logged; a resume from that step runs it again: run_training).
inline double validation_loss(Engine& eng, DataLoader& val, int B, int T, long tokens, const Dist& dist,
                              bool* cut = nullptr) {
    long batches = std::max(1L, tokens / ((long)B * T * dist.world));
    std::vector<int> in((size_t)B * T), tg((size_t)B * T);
    val.reset();
    long done = 0;
    StopGrace grace;
    for (; done < batches && !grace.expired(); done++) {
        val.next_batch(in.data(), tg.data());
        eng.forward(in.data(), tg.data(), B, T);  // adds the batch's mean loss to the engine's loss sum
    }
    double sums[2] = {eng.read_stats().loss / batches, done < batches ? 1.0 : 0.0};
    dist.sum(sums, 2, "the sum of the validation losses");
    if (cut) *cut = sums[1] > 0;
    return sums[1] > 0 ? NAN : sums[0] / dist.world;
}

// One optimizer step's results, as printed and logged.
struct StepRecord {
    long step = 0, tokens = 0;
    double loss = 0, val_loss = NAN, lr = 0, norm = 0, tokens_per_s = 0, elapsed = 0, mfu = NAN;
    bool has_val = false;  // val_loss was measured (it may still be NaN)
    bool skipped = false;  // the loss or the gradient norm was NaN or infinite: no update was made
};

// "42 s", "3.5 min", "2.1 h"
inline std::string short_duration(double s) {
    char b[32];
    if (!std::isfinite(s) || s < 0) return "?";
    if (s < 120) snprintf(b, sizeof b, "%.0f s", s);
    else if (s < 7200) snprintf(b, sizeof b, "%.1f min", s / 60);
    else snprintf(b, sizeof b, "%.1f h", s / 3600);
    return b;
}

// `left`: the estimated seconds to the last step (this invocation's mean step time, validation included).
inline void print_step(const StepRecord& r, long steps, double left) {
    printf("step %5ld/%ld | loss %.4f", r.step, steps, r.loss);
    if (r.has_val) printf(" | val %.4f", r.val_loss);
    printf(" | lr %.2e | norm %6.3f | %7.0f tok/s", r.lr, r.norm, r.tokens_per_s);
    if (!std::isnan(r.mfu)) printf(" | MFU %4.1f%%", 100 * r.mfu);
    printf(" | %.1f s, %s left\n", r.elapsed, short_duration(left).c_str());
}

// The step's JSON object, without the closing brace (an eval result may follow). Non-finite values are null.
inline std::string log_step(const StepRecord& r) {
    std::string s = "{\"step\": " + std::to_string(r.step) + ", \"tokens\": " + std::to_string(r.tokens) +
                    ", \"train_loss\": " + json::number(r.loss, "%.6f");
    if (r.has_val) s += ", \"val_loss\": " + json::number(r.val_loss, "%.6f");
    s += ", \"lr\": " + json::number(r.lr, "%.6e") + ", \"grad_norm\": " + json::number(r.norm, "%.6f") +
         ", \"tokens_per_s\": " + json::number(r.tokens_per_s, "%.1f") +
         ", \"elapsed_s\": " + json::number(r.elapsed, "%.3f");
    if (!std::isnan(r.mfu)) s += ", \"mfu\": " + json::number(r.mfu, "%.4f");
    if (r.skipped) s += ", \"skipped\": true";
    return s;
}

// Appends one line to the log and flushes it; a failed write (a full disk) is an error, not a silent gap.
inline void append_log(FILE* log, const std::string& line, const std::string& path) {
    if (fputs(line.c_str(), log) < 0 || fflush(log) != 0)
        throw IoError("cannot write " + path + ": " + write_error(errno) +
                      "; the run stopped here: make "
                      "room, then continue from its last checkpoint with --resume");
}

// The warmup a recorded run's steps so far had ("plan" in run.json; -1 when it does not say).
inline long recorded_warmup(const RunRecord& rec) {
    const json::Value* plan = rec.doc.find("plan");
    const json::Value* w = plan ? plan->find("warmup") : nullptr;
    return w && w->kind == json::Value::Number ? std::strtol(w->str.c_str(), nullptr, 10) : -1;
}

// On a --resume of a recorded run whose warmup was the default (--warmup not given, so --warmup-frac of the
// steps): it keeps its recorded length, as everything the resume does not name does, when another --steps would
// make the fraction give another one (record_args then records it as --warmup). Returns the note that says so.
inline std::string keep_recorded_warmup(const RunRecord& rec, const TrainOptions& o, RunPlan& p) {
    const long was = recorded_warmup(rec);
    if (o.warmup >= 0 || was < 0 || was == p.warmup) return "";
    const std::string note = "the warmup keeps its recorded " + std::to_string(was) + " steps (--warmup-frac " +
                             exact_number(o.warmup_frac) + " of --steps " + std::to_string(p.steps) + " would give " +
                             std::to_string(p.warmup) + "); pass --warmup N to change it";
    p.warmup = was;
    return note;
}

// On a --resume of a recorded run from the checkpoint at step `start`: this invocation's schedule (o, p) may
// differ from the recorded one (`changes`: the schedule flags check_resume_args let differ; or another --steps)
// only where no step already done is touched: every step before `start` must get the same lr under both,
// exactly. So a wsd
// run is branched into another decay length or shape from its stable phase, and refused once its decay began.
// A cosine run whose length alone changes keeps the rule it always had (its decay stretches; nothing checked).
// Returns the changes at `start` for run.json's "branches" (--steps among them when it changed).
inline std::vector<RunBranch> check_lr_branch(const RunRecord& rec, std::vector<RunBranch> changes,
                                              const TrainOptions& o, const ModelConfig& cfg, const RunPlan& p,
                                              size_t train_tokens, long start) {
    TrainOptions was = o;  // the record's schedule flags; the rest equal the record (check_resume_args)
    was.lr_schedule = rec.has("--lr-schedule") ? rec.arg("--lr-schedule") : "cosine";
    was.decay_frac = rec.has("--decay-frac") ? std::strtod(rec.arg("--decay-frac").c_str(), nullptr) : NAN;
    was.decay_shape = rec.arg("--decay-shape");
    was.warmup = rec.has("--warmup") ? std::strtol(rec.arg("--warmup").c_str(), nullptr, 10) : recorded_warmup(rec);
    if (rec.has("--steps")) was.steps = std::strtol(rec.arg("--steps").c_str(), nullptr, 10);
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
    if (changes.empty() && before.kind == "cosine") return {};
    if (wp.steps != p.steps) changes.push_back({0, "--steps", std::to_string(wp.steps), std::to_string(p.steps)});
    if (changes.empty()) return {};
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
        char lr[96];
        snprintf(lr, sizeof lr, " (%.6g, now %.6g)", a, b);
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

// The run's header: engine, ranks, model, data, batch, learning-rate schedule.
// start, tokens: where a resumed run starts (0, 0 for a fresh one).
inline void print_header(const TrainOptions& o, const Engine& eng, const std::string& why, const ModelConfig& cfg,
                         const DataLoader& train, bool val, const RunPlan& p, const Dist& dist, int zero, long start,
                         long tokens) {
    Accounting acc = account(cfg);
    printf("engine: %s (%s)\n", eng.describe().c_str(), why.c_str());
    if (dist.world > 1)
        printf("ranks: %s, ZeRO-%d%s\n", dist.describe().c_str(), zero,
               zero ? " (optimizer state sharded across ranks)" : " (every rank keeps the whole optimizer state)");
    printf("model: %s\n  widths %s\n  heads  %s\n%s  parameters %s, forward FLOPs/token %s\n",
           describe_config(cfg).c_str(), rle_list(layer_widths(cfg)).c_str(), rle_list(layer_heads(cfg)).c_str(),
           layer_column_lines(cfg).c_str(), human((double)acc.params).c_str(),
           human(acc.dense_flops_per_token).c_str());
    printf("data: %s (%s tokens, every token below V checked in %.2f s), val %s\n", o.train.c_str(),
           human((double)train.tokens_total()).c_str(), train.validate_seconds(), val ? o.val.c_str() : "off");
    std::string ranks = p.world > 1 ? " x " + std::to_string(p.world) + " ranks" : "";
    const double total = (double)tokens + (double)(p.steps - start) * p.total_batch;  // seen + still to come
    std::string length = std::to_string(p.steps) + " steps (" + human(total) + " tokens";
    if (start > 0)
        length += ", of which " + human((double)tokens) + " in steps 1.." + std::to_string(start) + " already done";
    printf("batch: B %d x T %d%s x %ld micro-steps = %ld tokens/step; %s)\n", o.B, p.T, ranks.c_str(), p.n_micro,
           p.total_batch, length.c_str());
    printf("%s\n", describe_lr_schedule(lr_schedule(o, p)).c_str());
    fflush(stdout);
}

// Why the run stopped early, for the error line: which steps were not finite and what OUT/latest names. When
// the first bad step is the first one after that checkpoint, the checkpoint itself is their source (its
// parameters are finite but make non-finite steps at once), so it is not called a good one.
inline std::string nonfinite_message(const RunDir& run, long first_bad, long last_bad) {
    std::string latest = run.latest();
    const bool source = !latest.empty() && step_of_dir_name(latest) + 1 == first_bad;
    return "steps " + std::to_string(first_bad) + ".." + std::to_string(last_bad) +
           " had a NaN or infinite loss or gradient norm and were skipped (no update, no checkpoint); " +
           (latest.empty() ? "no checkpoint was written; lower --lr or raise --warmup-frac and start again"
            : source
                ? run.path() + "/latest names " + latest +
                      ", which every one of these steps started from: "
                      "it makes non-finite steps at once; resume from an earlier checkpoint (write its name into " +
                      run.path() + "/latest), or lower --lr"
                : run.path() + "/latest names " + latest +
                      ", the last good one; lower --lr or raise "
                      "--warmup-frac, then --resume");
}

// The ZeRO stage of a run: --zero, else 1 with several ranks (ZeRO-1 costs nothing more than the all-reduce it
// replaces) and 0 with one.
inline int zero_stage(const TrainOptions& o, int world) { return o.zero >= 0 ? o.zero : world > 1 ? 1 : 0; }

// The stop signal (run/stop_signal.h) every rank acts on: one that reached any rank (a launcher may signal one
// process, or all of them a step apart), the lowest such rank's.
inline int agreed_stop_signal(const Dist& dist) {
    if (dist.world == 1) return g_stop_signal;
    std::vector<double> all(dist.world);
    dist.all_gather((double)g_stop_signal, all.data(), "the exchange of stop signals");
    for (double x : all)
        if (x != 0) return (int)x;
    return 0;
}

// What the loop does through parts outside its folder (eval/, inspect/, text/, the flag table), filled in by
// train_prism.cu (run/loop_seam.h's train_prism_seam): the loop includes none of them.
struct LoopSeam {
    // The run record's [flag, value] list for the resolved options and plan, and the flags a --resume may change.
    std::function<std::vector<std::pair<std::string, std::string>>(const TrainOptions&, const RunPlan&)> record_args;
    std::vector<std::string> may_change;
    std::vector<std::string> lr_branch_flags;  // the schedule flags a resume may change where no step done changes
    // Text samples: called on rank 0 when --sample-every > 0, before training; returns the sampler (n tokens from
    // EOT, drawing from the run's RNG, cut short by a stop signal), or null when there is none (it said why), or
    // throws (a tokenizer asked for and missing).
    using Sampler = std::function<std::string(Engine&, int n, uint64_t& rng, int T)>;
    std::function<Sampler(const TrainOptions&, const ModelConfig&)> make_sampler;
    // The in-training zero-shot eval: called on every rank when --eval-every > 0, before training (a missing
    // file fails before any step); returns the scorer, which prints its line on the lead rank and returns the
    // log's "eval" value ("" when a stop signal cut it short).
    using Scorer = std::function<std::string(Engine&, const Dist&, bool lead)>;
    std::function<Scorer(const TrainOptions&, const ModelConfig&)> make_scorer;
};

// Trains the model of o.model on `eng` (made by the caller for cfg and this rank of dist; `why` says which
// engine and why). Every rank runs this; see the top for what each does. Returns the exit code
// (run/stop_signal.h); errors are thrown.
// `recorded`: the run's OUT/run.json when this is a --resume of a recorded run (its flags must match).
inline int run_training(const TrainOptions& o, const ModelConfig& cfg, Engine& eng, const std::string& why,
                        const Dist& dist, const LoopSeam& seam, const RunRecord* recorded = nullptr) {
    const bool lead = dist.rank == 0;  // the rank that prints, logs and samples
    const MachineLoad load;            // the last line says whether the machine was busy (tokens/s not its own)
    RunPlan p;
    LrSchedule sched;                   // the lr of every step (train_step.h), on every engine
    std::vector<RunBranch> lr_changes;  // a resume's changes of the schedule, for run.json's "branches"
    RunDir run(o.out, o.keep, dist);
    RunRecordWriter record;  // OUT/run.json (run/run_record.h), rank 0's
    std::unique_ptr<DataLoader> train, val;
    LoopSeam::Sampler sampler;  // rank 0's, when it samples
    LoopSeam::Scorer scorer;    // made up front so that a missing eval file fails before training starts
    long start = 0, tokens = 0;
    std::string resumed_line;        // the log's line of the checkpoint's step (rank 0's, on --resume)
    long val_tokens = o.val_tokens;  // bounded by what the validation shards hold (a note says when)
    std::string data_json;           // the shards' fingerprints for the record (rank 0's)
    uint64_t rng = o.seed * 0x9E3779B97F4A7C15ull + 1;
    // Set-up on every rank; a failure anywhere ends every rank with one message (dist/process_group.h).
    dist.all_or_none([&] {
        run.lock();                              // one writer per OUT: a second one fails before it reads anything
        run.check_start(o.resume, o.overwrite);  // before the slow checks: a forgotten --resume fails at once
        const int T = train_seq_len(o, cfg);
        train.reset(new DataLoader(o.train, o.B, T, dist.rank, dist.world, o.shuffle, o.seed, cfg.V));
        if (o.val_every > 0) {
            val.reset(new DataLoader(o.val, o.B, T, dist.rank, dist.world, false, 0, cfg.V));
            check_shard_sets(train->shards(), val->shards());
        }
        if (recorded) check_resume_context(*recorded, cfg.T);  // before plan_run, which would blame --total-batch
        p = plan_run(o, cfg, dist.world, train->tokens_total());
        if (recorded) {
            const std::string note = keep_recorded_warmup(*recorded, o, p);
            if (lead && !note.empty()) fprintf(stderr, "note: %s\n", note.c_str());
        }
        sched = lr_schedule(o, p);
        if (recorded)
            lr_changes = check_resume_args(*recorded, seam.record_args(o, p), seam.may_change, o.allow_batch_change,
                                           o.allow_data_change, seam.lr_branch_flags);
        if (val) {  // more would read the same sequences again, for as long as it is asked (hours at 1e11)
            const long all = (long)val->batches_per_epoch() * o.B * T * dist.world;
            if (val_tokens > all) {
                val_tokens = all;
                if (lead)
                    fprintf(stderr,
                            "note: --val-tokens %ld is more than the validation shards %s hold in batches "
                            "of B %d x T %d x %d rank%s; each validation reads their %ld tokens\n",
                            o.val_tokens, o.val.c_str(), o.B, T, dist.world, dist.world > 1 ? "s" : "", all);
            }
        }
        if (lead) {  // the data the run trains on, as the record keeps it (and a resume checks it)
            const std::string tf = shards_fingerprint(train->shards()),
                              vf = val ? shards_fingerprint(val->shards()) : "";
            std::vector<std::string> notes;
            if (recorded) check_resume_data(*recorded, o.train, tf, o.val, vf, o.allow_data_change, notes);
            for (const std::string& n : notes) fprintf(stderr, "note: %s\n", n.c_str());
            data_json = data_record_json(tf, vf);
        }
        run.set_total_batch(p.total_batch);
        run.check_writable(p.steps, dist.world);  // what the first checkpoint needs, before any work
        if (o.sample_every > 0 && lead) sampler = seam.make_sampler(o, cfg);
        if (o.eval_every > 0) scorer = seam.make_scorer(o, cfg);
        run.create();
        if (o.resume) {
            ResumePoint r = run.resume(eng, cfg);
            if (r.total_batch > 0 && r.total_batch != p.total_batch && !o.allow_batch_change)
                throw ConfigError("--resume: " + r.dir + " was trained with a global batch of " +
                                  std::to_string(r.total_batch) + " tokens per step, this run would take " +
                                  std::to_string(p.total_batch) + " (B " + std::to_string(o.B) + " x T " +
                                  std::to_string(p.T) + " x " + std::to_string(dist.world) + " rank" +
                                  (dist.world > 1 ? "s" : "") + " x " + std::to_string(p.n_micro) +
                                  " micro-steps); pass --total-batch " + std::to_string(r.total_batch) +
                                  " to keep it, or --allow-batch-change to go on with the new one");
            if (o.allow_data_change && r.loader.fingerprint != train->state().fingerprint) {
                if (lead)
                    fprintf(stderr,
                            "note: --allow-data-change: the training shards hold other token counts than "
                            "the checkpoint's, so its data position does not apply: reading from their start\n");
            } else {
                train->restore(r.loader);
            }
            start = r.step, tokens = r.tokens, rng = r.rng;
            if (start > p.steps)
                throw ConfigError("--resume: the checkpoint is at step " + std::to_string(start) + ", beyond --steps " +
                                  std::to_string(p.steps));
            if (recorded) lr_changes = check_lr_branch(*recorded, lr_changes, o, cfg, p, train->tokens_total(), start);
            resumed_line = run.truncate_log(start);
            if (lead) printf("resumed from %s at step %ld (%ld tokens)\n", r.dir.c_str(), start, tokens);
        } else {
            eng.init_params(o.seed);
            run.start_fresh(o.overwrite);
        }
        if (lead) {
            record.dir = o.out, record.args = seam.record_args(o, p), record.argv = o.argv;
            record.model_json = model_record_json(o.model, cfg);
            record.plan_json = plan_record_json(o, p);
            record.data_json = data_json;
            record.started = run_record::utc_now(), record.engine = eng.describe(), record.engine_why = why;
            record.ranks = dist.world, record.zero = zero_stage(o, dist.world), record.start_step = start;
            record.load_earlier(o.resume);
            for (const RunBranch& b : lr_changes) record.branches.push_back(branch_json(b));
            record.write("running", start, false);
        }
    });
    // The record's end: how this invocation ended, at which step (rank 0; the run is not failed by it).
    auto record_end = [&](const char* status, long step) {
        if (!lead) return;
        try {
            record.write(status, step, true);
        } catch (const IoError& e) {
            fprintf(stderr, "warning: the run record was not updated: %s\n", e.what());
        }
    };
    run.agree_run_id();
    // The validation at the checkpoint's step when a stop cut it short (its line has no val_loss): run now, on the
    // checkpoint's parameters (what it would have measured), and its val_loss written into that line, so that the
    // log has one at every --val-every step. A stop during it leaves the line as it was, for the next resume.
    if (val && start > 0 && (start % o.val_every == 0 || start == p.steps)) {
        double missing = lead && !resumed_line.empty() && resumed_line.find("\"val_loss\": ") == std::string::npos;
        dist.sum(&missing, 1, "the check of the resumed step's validation");
        if (missing > 0) {
            bool cut = false;
            const double v = validation_loss(eng, *val, o.B, p.T, val_tokens, dist, &cut);
            const size_t at = resumed_line.find(", \"lr\": ");
            if (lead && !cut && at != std::string::npos) {
                run.truncate_log(start, resumed_line.insert(at, ", \"val_loss\": " + json::number(v, "%.6f")));
                printf("validation at step %ld, not in the log (a stop cut it short): val %.4f, added to its line\n",
                       start, v);
            }
        }
    }
    // The same for the in-training eval at the checkpoint's step (its line has no "eval"): so that a stop during
    // the last step's eval does not leave a run "done" without it. A stop during this one ends the start-up below.
    if (scorer && start > 0 && (start % o.eval_every == 0 || start == p.steps)) {
        double missing = lead && !resumed_line.empty() && resumed_line.back() == '}' &&
                         resumed_line.find("\"eval\": ") == std::string::npos;
        dist.sum(&missing, 1, "the check of the resumed step's eval");
        if (missing > 0) {
            const std::string e = scorer(eng, dist, lead);
            if (lead && !e.empty()) {
                run.truncate_log(start, resumed_line.insert(resumed_line.size() - 1, ", \"eval\": " + e));
                printf("eval at step %ld, not in the log (a stop cut it short): added to its line\n", start);
            }
        }
    }
    // A stop signal during the set-up (run/stop_signal.h: the handlers are installed first thing in main): no step
    // was done, so nothing new to save; OUT/latest is what it was.
    if (const int sig = agreed_stop_signal(dist)) {
        const std::string latest = lead ? run.latest() : "";
        if (lead)
            printf("stopped by %s during the start-up, before step %ld; %s\n", stop_signal_name(sig), start + 1,
                   latest.empty()
                       ? "no checkpoint yet: run the same command again"
                       : (o.out + "/latest names " + latest + "; continue with the same flags plus --resume").c_str());
        fflush(stdout);
        return kExitInterrupted;
    }
    if (lead) print_header(o, eng, why, cfg, *train, val != nullptr, p, dist, zero_stage(o, dist.world), start, tokens);

    const double peak = eng.peak_flops() * dist.world;  // 0 on the CPU: no MFU column
    const double flops_per_token = account(cfg).dense_flops_per_token;
    FILE* log = lead ? fopen(run.log_path().c_str(), "a") : nullptr;
    if (lead && !log) throw ConfigError("cannot append to " + run.log_path() + ": " + strerror(errno));
    std::unique_ptr<FILE, int (*)(FILE*)> log_closer(log, fclose);  // none on the other ranks
    std::vector<int> in((size_t)p.micro_tokens), tg((size_t)p.micro_tokens);
    install_stop_handlers();  // main installed them already; here for callers that did not (the tests)
    long streak = 0;          // steps in a row whose loss or gradient norm was not finite
    const double t0 = now_seconds();
    for (long step = start; step < p.steps; step++) {
        Watchdog::get().set_step(step);
        const double ts = now_seconds();
        StepRecord r;
        r.lr = lr_at(sched, step);
        const StepStats s = train_step(
            eng, [&](int* i, int* t) { train->next_batch(i, t); }, o.B, p.T, p.n_micro, o.clip, r.lr, o.opt, in, tg,
            dist.world);
        r.loss = s.loss, r.norm = s.grad_norm;  // both summed over the ranks by the engine: the same on every rank
        // A NaN or inf anywhere reaches the loss or the norm. The engine's adamw_step skips such a step by itself
        // (on the GPU without a wait: the update kernel reads the step's loss and norm on the device), so it
        // changes nothing: no update, the moments and the step count stay, the next zero_grad drops its gradients.
        r.skipped = !std::isfinite(r.loss) || !std::isfinite(r.norm);
        streak = r.skipped ? streak + 1 : 0;
        tokens += p.total_batch;
        r.step = step + 1, r.tokens = tokens;
        r.tokens_per_s = p.total_batch / (now_seconds() - ts);
        const bool last = step + 1 == p.steps, stopping = o.stop_after > 0 && step + 1 - start == o.stop_after;
        if (val && ((step + 1) % o.val_every == 0 || last)) {
            bool cut = false;
            r.val_loss = validation_loss(eng, *val, o.B, p.T, val_tokens, dist, &cut);
            r.has_val = !cut;  // cut short by a stop signal: not logged
            if (cut && lead) printf("validation at step %ld: cut short by the stop signal, not logged\n", step + 1);
        }
        r.elapsed = now_seconds() - t0;
        if (peak > 0) r.mfu = 3.0 * flops_per_token * r.tokens_per_s / peak;
        if (lead) print_step(r, p.steps, r.elapsed / (step + 1 - start) * (p.steps - step - 1));
        if (lead && r.skipped)
            printf("step %ld: non-finite %s: update skipped (%ld in a row; the run stops at --max-nonfinite %d)\n",
                   r.step, std::isfinite(r.loss) ? "gradient norm" : "loss", streak, o.max_nonfinite);
        std::string line = log_step(r);
        if (scorer && ((step + 1) % o.eval_every == 0 || last)) {
            // Uses the engine's activations; the next step's forward rebuilds them, so training is unaffected.
            const std::string e = scorer(eng, dist, lead);
            if (!e.empty()) line += ", \"eval\": " + e;
        }
        if (lead) append_log(log, line + "}\n", run.log_path());
        if (sampler && (step + 1) % o.sample_every == 0)  // rank 0 only: forward passes, no collectives
            printf("sample: %s\n", sampler(eng, o.sample_tokens, rng, p.T).c_str());
        fflush(stdout);
        int sig = agreed_stop_signal(dist);
        if (streak >= o.max_nonfinite || (streak > 0 && (last || stopping))) {
            if (lead)
                fprintf(stderr, "train_prism: error: %s\n",
                        nonfinite_message(run, r.step - streak + 1, r.step).c_str());
            record_end("diverged", r.step);
            return kExitDiverged;
        }
        const bool ckpt = (o.ckpt_every > 0 && (step + 1) % o.ckpt_every == 0) || last || stopping || sig;
        if (ckpt && streak == 0) {
            run.save(eng, train->state(), step + 1, tokens, rng);
            if (!sig) sig = agreed_stop_signal(dist);  // one that came during the write: stop now, it is saved
        }
        const std::string latest = lead && (ckpt || sig) ? run.latest() : "";
        if (lead && ckpt && streak > 0)
            printf("no checkpoint at step %ld: it was not finite; %s\n", r.step,
                   latest.empty() ? "there is none yet" : (o.out + "/latest still names " + latest).c_str());
        if (sig) {  // saved and recorded before the last words (an output nobody reads may block them)
            record_end("interrupted", r.step);
            if (lead)
                printf("stopped by %s after step %ld; %s; continue with train_prism --resume -o %s\n",
                       stop_signal_name(sig), r.step,
                       latest.empty() ? "no checkpoint yet" : (o.out + "/latest names " + latest).c_str(),
                       o.out.c_str());
            fflush(stdout);
            return kExitInterrupted;
        }
        fflush(stdout);
        if (stopping && !last) {
            if (lead)
                printf("stopped after %ld steps; continue with train_prism --resume -o %s\n", o.stop_after,
                       o.out.c_str());
            record_end("stopped", r.step);
            return kExitOk;
        }
    }
    if (lead) printf("done: %s/model.bin\n%s\n", o.out.c_str(), load.line().c_str());
    record_end("done", p.steps);
    return kExitOk;
}
