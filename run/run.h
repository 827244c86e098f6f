// run/run.h: a training run's life in one type, Run: the only code that knows the run directory (run/run_dir.h),
// the record (run/run_record.h's OUT/run.json) and the resume rules, which are all in this file: what a resume
// restores (the record's flags), what it may change and what it may not (the model, the flags, the data, the lr
// of steps already done), and how it repairs the resumed step. train_prism.cu's main calls it around its loop.
// A resume continues from OUT/latest with the loss sequence of an uninterrupted run (same data position, same
// sampling RNG), on the same or another number of ranks.
// Nothing lost, nothing silently wrong: a step whose loss or gradient norm is NaN or infinite makes no update and
// writes no checkpoint; --max-nonfinite such steps in a row end the run (kExitDiverged) with OUT/latest still
// naming the last good checkpoint. A stop signal ends it after the current step with a checkpoint
// (kExitInterrupted, run/stop_signal.h). A failed log write is an error. With several ranks every rank sees the
// same loss and norm, so all skip alike; a signal that reached any rank stops every rank after the same step.
// Its body is run/run.cpp (compiled apart: the Makefile's LIB).
// Does not: parse flags (run/defaults.h's table, run/cli.h), train (train_step.h), or know which engine it
// drives (engine.h).
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/process_group.h"
#include "layer_stats.h"
#include "lr_schedule.h"
#include "run/defaults.h"

class DataLoader;
class Engine;
class RunDir;
struct BranchIntent;
struct Command;
struct LoaderState;
struct ModelConfig;
struct ResumePoint;
struct RunBranch;
struct RunRecord;
struct RunRecordWriter;
struct TrainOptions;

// One optimizer step's results, as printed and logged.
struct StepRecord {
    long step = 0, tokens = 0;
    double loss = 0, val_loss = NAN, lr = 0, norm = 0, tokens_per_s = 0, elapsed = 0, mfu = NAN;
    bool has_val = false;  // val_loss was measured (it may still be NaN)
    bool skipped = false;  // the loss or the gradient norm was NaN or infinite: no update was made
    LayerStats layers;     // per-layer signals (layer_stats.h); empty on a step that did not measure them
};

// The step's JSON object, without the closing brace (an eval result may follow). Non-finite values are null.
std::string log_step(const StepRecord& r);

// "" when a checkpoint of `saved` can resume a run of `want`, else the first difference, in words: every scalar of
// the model (model_config.h's model_scalars), the layer count, then every column of every layer as the layer
// computes with it (model/layer_columns.h's value: a window is no difference in a layer without attention). Both
// are loops over declarations, so a field or column added later is compared without anyone remembering it.
std::string model_difference(const ModelConfig& saved, const ModelConfig& want);

// A training run's life: its directory, record and resume rules, from the flags to the last checkpoint. Every
// rank holds one; rank 0 (the lead) alone prints, writes log.jsonl and run.json. In the order main calls it:
//   restore_flags  on --resume: the recorded flags beneath the ones given (else: no resume-only flag)
//   open           OUT locked (one writer) and checked (a fresh run never lands on an old one); a branch that a
//                  stopped train_prism left half done is completed
//   plan, decide   batch, length and lr schedule; on --resume the record, flags and data checked and the
//                  checkpoint to continue from read and checked, every rule applied; OUT unchanged
//   begin          then OUT changed, in one ordered sequence a crash can be completed from: a branch, the log cut
//                  back to the checkpoint, run.json
//   repair         the resumed step's validation or eval, when a stop cut it short
//   log, save      one line per step; a checkpoint
//   diverged, interrupted, stopped, done   the ends: the record's status, the last words, the exit code
// Decide, then act (docs/training.md, "Resume"): a command refused at any point before begin leaves OUT as it was
// (the lock's note aside, which names the last process that held OUT).
class Run {
  public:
    explicit Run(const Dist& dist);
    ~Run();

    // The one output rule (util/fs.h), before OUT is created or locked: OUT is none of the files the run reads (the
    // shards, the eval file, the tokenizer) and holds none of them (--overwrite deletes in it).
    static void check_out(const TrainOptions& o);

    // On --resume: the record's flags beneath the ones given (restore_recorded_args), parsed again into o, so
    // that `train_prism --resume -o OUT` alone continues a run as it was started. Without a record (a run from
    // before records) the flags given must be the first run's: a note says so. Without --resume (and --plan) it
    // refuses the flags that only a resume takes (--allow-batch-change, --allow-data-change, --branch-from).
    void restore_flags(TrainOptions& o, Command& cmd, int argc, char** argv, bool gpu, std::vector<std::string>& notes);

    // A set-up error of a resume without a record most likely comes from flags that are not the first run's
    // (run.json was deleted, or the run is from before records): the error again, saying so on the one line.
    AgreedFailure explain(const AgreedFailure& e) const;

    // One writer per OUT (a second one fails before it reads anything), and a forgotten --resume fails at once. A
    // branch a stopped train_prism left half done (OUT/branch.json) is completed and recorded (the lead's).
    void open(const TrainOptions& o, const ModelConfig& cfg);

    // The run's batch, length and lr schedule on these shards; on --resume the record's context, flags and data
    // checked first (what a resume may change and what it may not; the record's args against its own plan); then
    // that OUT can hold the first checkpoint.
    const RunPlan& plan(const DataLoader& train, const DataLoader* val);

    // The parameters the run starts from: on --resume the checkpoint OUT/latest (or --branch-from) names, loaded
    // into eng with its data position into train after every check (model, files, batch, length, schedule: a
    // branch's too), else new ones. Reads OUT, changes nothing in it.
    void decide(Engine& eng, DataLoader& train);

    // Once every rank has decided: creates OUT (removing a crash's leftovers); on --resume carries out the branch
    // and cuts the log back to the checkpoint, else starts an empty log (--overwrite: deleting the earlier run);
    // writes run.json with this invocation's entry, status "running".
    void begin(const Engine& eng, const std::string& why);

    // After the set-up, on every rank: the ranks agree on the run id; then the resumed step's validation
    // (validate: null without validation) and eval (score: null without one) run again where a stop cut them
    // short (its log line has no val_loss or eval), on the checkpoint's parameters, what they would have
    // measured, and go into that line: so the log has one at every step they were due. A stop during one
    // leaves the line as it was, for the next resume.
    void repair(const std::function<double(bool*)>& validate, const std::function<std::string()>& score);

    long start_step() const { return start_; }
    long tokens() const { return tokens_; }
    uint64_t rng() const { return rng_; }
    const LrSchedule& schedule() const { return sched_; }

    // The stop signal (run/stop_signal.h) every rank acts on: one that reached any rank (a launcher may signal one
    // process, or all of them a step apart), the lowest such rank's.
    int stop_signal() const;

    // Appends the step's line to log.jsonl and flushes it (the lead's); a failed write (a full disk) is an
    // error, not a silent gap.
    void log(const std::string& line);

    // The checkpoint of `step` (run/run_dir.h's save: every rank calls it).
    void save(Engine& eng, const LoaderState& loader, long step, long tokens, uint64_t rng);
    // A checkpoint was due at `step`, but its parameters came from a non-finite step: none written.
    void no_checkpoint(long step) const;

    // The ends of a run. Each updates run.json's entry (status, step) and says what OUT/latest holds; they
    // return the exit code (run/stop_signal.h).
    // A stop signal during the set-up: no step was done, so nothing new to save; OUT/latest is what it was.
    int interrupted_at_start(int sig) const;
    // Steps first_bad..last had a NaN or infinite loss or gradient norm (--max-nonfinite in a row, or at the end).
    int diverged(long first_bad, long last) const;
    // Stopped by a signal after `step`, saved and recorded before the last words (an output nobody reads may
    // block them).
    int interrupted(int sig, long step) const;
    // Stopped by --stop-after after `step`.
    int stopped(long step) const;
    // The last step done; `machine` is MachineLoad's closing line.
    int done(const std::string& machine) const;

  private:
    // A resume from another working directory: a recorded relative --train or --val glob that matches no file here
    // becomes the record's absolute one ("data": "train_path", "val_path"), the same shards by another path (their
    // fingerprints decide whether the data is the run's: check_resume_data).
    void find_recorded_data(std::vector<std::string>& args) const;

    // The checkpoint a resume without --branch-from continues from: the one OUT/latest names, after checking that
    // OUT/latest can be trusted (ConfigError saying what to do otherwise).
    std::string resume_from() const;

    // Loads the checkpoint OUT/`name` into eng, after checking that it holds the model of the run and that its
    // files belong together (one run, one step). Every rank calls it and reads the optimizer state it holds from
    // whichever state files cover it.
    ResumePoint load_checkpoint(Engine& eng, const std::string& name);

    // A branch OUT/branch.json says a stopped train_prism began: completed and recorded in run.json (the lead's).
    void finish_pending_branch();

    // The record's end: how this invocation ended, at which step (the lead's; the run is not failed by it).
    void end_record(const char* status, long step) const;

    const Dist& dist_;
    const bool lead_;
    const TrainOptions* o_ = nullptr;
    const ModelConfig* cfg_ = nullptr;
    std::unique_ptr<RunDir> dir_;
    std::unique_ptr<RunRecord> record_;               // OUT/run.json of the run a --resume continues
    std::unique_ptr<TrainOptions> recorded_options_;  // its "args" alone, parsed with the flags' bounds
    bool recorded_ = false;
    std::string unrecorded_;                   // a --resume of an OUT without run.json: that OUT
    std::unique_ptr<RunRecordWriter> writer_;  // this invocation's run.json (the lead's)
    RunPlan plan_;
    LrSchedule sched_;                      // the lr of every step, on every engine
    std::vector<RunBranch> lr_changes_;     // a resume's changes of the schedule, for run.json's "branches"
    std::unique_ptr<RunBranch> branched_;   // --branch-from's move of OUT/latest (the lead's), for "branches" too
    std::unique_ptr<BranchIntent> branch_;  // what that move changes in OUT (decide), done by begin
    std::string data_json_;                 // the shards' fingerprints for the record (the lead's)
    long start_ = 0, tokens_ = 0;
    uint64_t rng_ = 0;
    std::string resumed_dir_;   // the checkpoint a --resume loaded
    std::string resumed_line_;  // the log's line of the checkpoint's step (the lead's, on --resume)
    std::unique_ptr<FILE, int (*)(FILE*)> log_{nullptr, fclose};
};
