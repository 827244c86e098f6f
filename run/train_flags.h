// run/train_flags.h: train_prism's flags, each declared once in make_train_flags (run/cli.h renders --help from
// the table and parses with it), and the run record's side of them: record_args is a loop over the table that
// turns resolved options into the [flag, value] list OUT/run.json keeps (run/run_record.h), may_change_on_resume
// the loop that lists what a --resume may change, and restore_recorded_args puts a recorded run's flags back
// under the ones given on a --resume, so that `train_prism --resume -o OUT` alone continues a run as it was
// started. check_resume_args then refuses a flag given on the resume that differs from the record, except those
// marked changes_on_resume: the length (--steps and the flags that set it), --stop-after (never recorded), and
// the evaluation, sampling, logging and checkpointing cadence, none of which changes what the run computes.
// The output directory itself is not compared (a run directory may have been moved). study.cpp parses its
// trainer flags with the same table. Its body is run/train_flags.cpp (compiled apart: the Makefile's LIB).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "run/cli.h"

struct RunPlan;
struct TrainOptions;

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
