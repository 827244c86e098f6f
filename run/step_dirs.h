// run/step_dirs.h: the names of a run's checkpoint directories, OUT/step_XXXXXXXX (run/run_dir.h writes them;
// analyze, export and the loop read them), and the files of a run a tool reading one of its models must never
// write over (run_files, for util/fs.h's check_output_path).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "util/fs.h"

inline std::string step_dir_name(long step) {
    char b[32];
    snprintf(b, sizeof b, "step_%08ld", step);
    return b;
}

// The step of a checkpoint directory's name, exactly as step_dir_name writes it; -1 for any other name (one
// the trainer did not write: step_9999999999999999999 is out of range and ignored, never an error).
inline long step_of_dir_name(const std::string& name) {
    // At most 18 digits: every such number fits a long, so the parse below cannot overflow.
    if (name.size() < 13 || name.size() > 23 || name.compare(0, 5, "step_") != 0 ||
        name.find_first_not_of("0123456789", 5) != std::string::npos)
        return -1;
    long step = 0;
    for (size_t i = 5; i < name.size(); i++) step = step * 10 + (name[i] - '0');
    return step_dir_name(step) == name ? step : -1;
}

// What a tool given `model` (a model.bin, a run directory, or a checkpoint directory step_N) reads or must leave
// as it is: the model file itself, and, when it sits in a checkpoint directory or a run directory, that run's
// files: OUT/model.bin, run.json, log.jsonl, latest, lock, state_rank<r>.bin, and every step_N directory
// (whole). eval.json, samples.jsonl and analyze/ are outputs the tools write into a run, not inputs.
inline std::vector<ReadPath> run_files(const std::string& model) {
    const bool dir = is_dir(model);
    const std::string file = dir ? model + "/model.bin" : model;
    std::vector<ReadPath> in = {{file, "the model"}};
    std::string run = dir ? model : file.find('/') == std::string::npos ? "." : file.substr(0, file.rfind('/'));
    if (run.empty()) run = "/";
    const size_t slash = run.find_last_of('/');
    if (step_of_dir_name(slash == std::string::npos ? run : run.substr(slash + 1)) >= 0) {
        in.push_back({run, "the checkpoint directory", true});
        run = slash == std::string::npos ? "." : slash == 0 ? "/" : run.substr(0, slash);
    }
    for (const char* n : {"model.bin", "run.json", "log.jsonl", "latest", "lock"})
        in.push_back({run + "/" + n, std::string("the run's ") + n});
    for (const std::string& n : list_dir(run)) {
        if (step_of_dir_name(n) >= 0) in.push_back({run + "/" + n, "the checkpoint", true});
        else if (n.compare(0, 10, "state_rank") == 0) in.push_back({run + "/" + n, "the optimizer state"});
    }
    return in;
}
