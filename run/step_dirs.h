// run/step_dirs.h: the names of a run's checkpoint directories, OUT/step_XXXXXXXX (run/run_dir.h writes them;
// analyze, export and the loop read them).
#pragma once

#include <cstdio>
#include <string>

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
