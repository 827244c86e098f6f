// util/errors.h: the error types every part of Prism throws, and the one ladder that turns them into a program's last
// line. A user-facing problem is a one-line typed exception saying what is wrong and what to do; main catches it.
// Does not: know about ranks (run_ranks in dist/process_group.h wraps this ladder for a process group).
#pragma once

#include <cstdio>
#include <exception>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>

// A bad flag, model config, schedule or batch.
struct ConfigError : std::runtime_error {
    using std::runtime_error::runtime_error;
};
// A file that cannot be read or written (util/io.h).
struct IoError : std::runtime_error {
    using std::runtime_error::runtime_error;
};
// A model.bin or state file that is corrupt, truncated or from another run (run/checkpoint.h).
struct CheckpointError : std::runtime_error {
    using std::runtime_error::runtime_error;
};
// The process group: a launcher, a rendezvous, a collective (dist/process_group.h).
struct DistError : std::runtime_error {
    using std::runtime_error::runtime_error;
};
// An eval file or a raw task input (eval/).
struct EvalError : std::runtime_error {
    using std::runtime_error::runtime_error;
};
// A run directory's log read back (run/run_log.h).
struct RunLogError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// "program: what: message" on stderr, after whatever the program printed on stdout.
inline void print_error(const std::string& program, const char* what, const std::string& message) {
    fflush(stdout);
    fprintf(stderr, "%s: %s: %s\n", program.c_str(), what, message.c_str());
}

// Runs body and returns its status; or prints its failure in one line and returns 1: a runtime_error (every type
// above, data and tokenizer errors) as "error", out of memory as "error: out of memory; oom_hint", anything else
// as "internal error". who() prefixes the message (e.g. "rank 1: "), asked only after body ran. *failed says
// whether body failed.
inline int run_reporting(const std::string& program, const std::string& oom_hint,
                         const std::function<std::string()>& who, const std::function<int()>& body,
                         bool* failed = nullptr) {
    if (failed) *failed = true;
    try {
        const int rc = body();
        if (failed) *failed = false;
        return rc;
    } catch (const std::runtime_error& e) {
        print_error(program, "error", who() + e.what());
    } catch (const std::bad_alloc&) {
        print_error(program, "error", who() + "out of memory" + (oom_hint.empty() ? "" : "; " + oom_hint));
    } catch (const std::exception& e) {
        print_error(program, "internal error", who() + e.what());
    }
    return 1;
}
