// run/cli.h: command-line flags from one table. Each Flag names its spellings, its argument, its help line and
// the function that applies it, so the --help text is generated from the very table the parser reads (a
// usage text naming flags the parser did not accept is a classic trainer bug). Errors are ConfigErrors with
// one line naming the flag and what to do.
#pragma once

#include <cerrno>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include "model_config.h"

struct Flag {
    std::string names;  // "-m, --model": every spelling, comma separated
    std::string arg;    // "" for a switch, else the argument's name ("PRESET")
    std::string help;
    std::function<void(const std::string&)> apply;
};

inline std::vector<std::string> flag_spellings(const Flag& f) {
    std::vector<std::string> out;
    size_t a = 0;
    while (a < f.names.size()) {
        size_t b = f.names.find(',', a);
        out.push_back(trim(f.names.substr(a, b == std::string::npos ? std::string::npos : b - a)));
        if (b == std::string::npos) break;
        a = b + 1;
    }
    return out;
}

inline void print_flags(FILE* out, const std::vector<Flag>& flags) {
    for (const auto& f : flags) {
        std::string lhs = f.names + (f.arg.empty() ? "" : " " + f.arg);
        fprintf(out, "  %-28s %s\n", lhs.c_str(), f.help.c_str());
    }
}

// Applies argv to the flags; "--name value" and "--name=value" both work. `program` names the binary in errors.
inline void parse_flags(int argc, char** argv, const std::vector<Flag>& flags, const std::string& program) {
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i], value;
        bool has_value = false;
        size_t eq = a.find('=');
        if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
            value = a.substr(eq + 1);
            a = a.substr(0, eq);
            has_value = true;
        }
        const Flag* hit = nullptr;
        for (const auto& f : flags)
            for (const auto& n : flag_spellings(f))
                if (n == a) hit = &f;
        if (!hit)
            throw ConfigError("unknown flag '" + a + "'; run " + program + " --help for the list");
        if (hit->arg.empty()) {
            if (has_value) throw ConfigError("flag " + a + " takes no value");
        } else if (!has_value) {
            if (i + 1 >= argc) throw ConfigError("flag " + a + " needs a value (" + hit->arg + ")");
            value = argv[++i];
        }
        // An empty path (an unset shell variable: -o "$RUN") is never taken as "the default": that default may
        // hold a run that --overwrite would then delete.
        if (value.empty() && (hit->arg == "FILE" || hit->arg == "DIR" || hit->arg == "GLOB" || hit->arg == "PATH"))
            throw ConfigError("flag " + a + " was given an empty " + hit->arg + "; pass a path (an unset shell "
                              "variable?), or leave the flag out for its default");
        hit->apply(value);
    }
}

// Takes a tool's positional arguments (those that are neither a flag nor a flag's value) out of argv, in order,
// into `positional`, at most `max` of them (further ones stay, and parse_flags rejects them). Returns the rest,
// argv[0] first, for parse_flags.
inline std::vector<char*> take_positional(int argc, char** argv, const std::vector<Flag>& flags,
                                          std::vector<std::string>& positional, size_t max = (size_t)-1) {
    std::vector<char*> rest{argv[0]};
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        const bool is_flag = a.size() > 1 && a[0] == '-';
        if (!is_flag && positional.size() < max) {
            positional.push_back(a);
            continue;
        }
        rest.push_back(argv[i]);
        if (is_flag && a.find('=') == std::string::npos && i + 1 < argc)
            for (const auto& f : flags)
                for (const auto& n : flag_spellings(f))
                    if (n == a && !f.arg.empty()) rest.push_back(argv[++i]);
    }
    return rest;
}

// How a single-process tool (generate, analyze, report) ends on an error: what it printed first, then one line
// on stderr, "PROGRAM: error: ..." (out of memory: followed by oom_hint when it is not empty), and exit status 1.
// Returns body's exit status otherwise. dist/process_group.h's run_ranks is the same for the binaries that run as ranks.
// SIGXFSZ is ignored, so that a write past a file-size limit is the ordinary one-line disk error (EFBIG).
inline int run_tool(const char* program, const std::string& oom_hint, const std::function<int()>& body) {
    signal(SIGXFSZ, SIG_IGN);
    return run_reporting(program, oom_hint, [] { return std::string(); }, body);
}

// Numeric flag values: the whole string must parse, and out-of-range values are errors, not wraparounds.
inline long parse_long_flag(const std::string& flag, const std::string& v) {
    char* end = nullptr;
    errno = 0;
    long x = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != 0 || errno) throw ConfigError(flag + ": '" + v + "' is not an integer");
    return x;
}
inline int parse_int_flag(const std::string& flag, const std::string& v) {
    long x = parse_long_flag(flag, v);
    if (x < -2147483647L || x > 2147483647L) throw ConfigError(flag + ": " + v + " is out of range");
    return (int)x;
}
inline double parse_double_flag(const std::string& flag, const std::string& v) {
    char* end = nullptr;
    errno = 0;
    double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != 0 || errno || !std::isfinite(x)) throw ConfigError(flag + ": '" + v + "' is not a number");
    return x;
}

// Appliers for numeric flags with bounds: the value must parse whole and lie in [lo, hi], else a one-line error
// naming the flag ("--d must be positive", "--keep must be at least 1", "--d must be at most 65536", "--lr must
// lie in [0, 10]"). Every numeric flag goes through one of them, so no value reaches the code unbounded.
inline std::string below_message(const std::string& flag, double lo) {
    return flag + (lo == 1 ? " must be positive" : " must be at least " + std::to_string((long)lo));
}
inline std::function<void(const std::string&)> int_flag(const std::string& flag, int& dst, int lo,
                                                         int hi = 2147483647) {
    return [flag, &dst, lo, hi](const std::string& v) {
        int x = parse_int_flag(flag, v);
        if (x < lo) throw ConfigError(below_message(flag, lo));
        if (x > hi) throw ConfigError(flag + " must be at most " + std::to_string(hi));
        dst = x;
    };
}
inline std::function<void(const std::string&)> long_flag(const std::string& flag, long& dst, long lo,
                                                          long hi = 9223372036854775807L) {
    return [flag, &dst, lo, hi](const std::string& v) {
        long x = parse_long_flag(flag, v);
        if (x < lo) throw ConfigError(below_message(flag, (double)lo));
        if (x > hi) throw ConfigError(flag + " must be at most " + std::to_string(hi));
        dst = x;
    };
}
inline std::function<void(const std::string&)> double_flag(const std::string& flag, double& dst, double lo, double hi) {
    return [flag, &dst, lo, hi](const std::string& v) {
        double x = parse_double_flag(flag, v);
        if (x < lo || x > hi) {
            char b[96];
            snprintf(b, sizeof b, " must lie in [%g, %g]", lo, hi);
            throw ConfigError(flag + b);
        }
        dst = x;
    };
}

// Upper bounds shared by the command lines (model_config.h's validate_config holds the model's own: d and widths
// <= 65536, V <= 2^24, T <= 2^20, L <= 10000).
constexpr long kMaxSteps = 1000000000000L;          // steps, step intervals and token counts per step: 10^12
constexpr long kMaxTokens = 1000000000000000000L;   // token budgets: 10^18

// The model flags shared by train_prism and the dev tools: a preset, schedules and overrides.
inline void add_model_flags(std::vector<Flag>& flags, ModelSpec& m) {
    std::string names;
    for (const auto& p : presets()) names += std::string(names.empty() ? "" : ", ") + p.name;
    flags.push_back({"-m, --model", "PRESET", "model size: " + names + " (default tiny)",
                     [&m](const std::string& v) { m.preset = v; }});
    flags.push_back({"-s, --heads-schedule", "HEADS", "uniform | prism | list like 3x3,6x3,12x6 or 5,5,5 (default uniform)",
                     [&m](const std::string& v) { m.heads = v; }});
    flags.push_back({"-w, --widths", "WIDTHS", "uniform | x | v | lambda | 3 | list of widths (default uniform)",
                     [&m](const std::string& v) { m.widths = v; }});
    flags.push_back({"--d", "N", "embedding width d", int_flag("--d", m.d, 1, 65536)});
    flags.push_back({"--layers", "N", "number of layers L", int_flag("--layers", m.L, 1, 10000)});
    flags.push_back({"--heads", "N", "h_base: the uniform model's heads (and the fixed count under -w)",
                     int_flag("--heads", m.h_base, 1, 65536)});
    flags.push_back({"--head-dim", "N", "under -w: a fixed head_dim per layer instead of a fixed head count",
                     int_flag("--head-dim", m.head_dim, 1, 65536)});
    flags.push_back({"--seq-len", "T", "context length T", int_flag("--seq-len", m.T, 1, 1 << 20)});
    flags.push_back({"--vocab", "V", "vocabulary size (default 50257, GPT-2)", int_flag("--vocab", m.V, 1, 1 << 24)});
    flags.push_back({"--mlp-ratio", "R", "SwiGLU hidden = R * w_l, to the nearest multiple (8/3 Prism presets, 4 Xformer)",
                     double_flag("--mlp-ratio", m.mlp_ratio, 1e-3, 64)});
    flags.push_back({"--mlp-multiple", "N", "round the SwiGLU hidden size to a multiple of N (default 32)",
                     int_flag("--mlp-multiple", m.mlp_multiple, 1, 65536)});
    flags.push_back({"--norm", "NORM", "layernorm | rmsnorm", [&m](const std::string& v) {
                         parse_norm(v);
                         m.norm = v;
                     }});
    flags.push_back({"--untied", "", "separate output head (default: tied to the embedding, except Xformer presets)",
                     [&m](const std::string&) { m.untied = 1; }});
    flags.push_back({"--tied", "", "output head shares the token embedding", [&m](const std::string&) { m.untied = 0; }});
    flags.push_back({"--turn", "K", "X / 3 shapes: 1-indexed turning layer (default round(0.75 L))",
                     int_flag("--turn", m.shape.k, 1, 10000)});
    flags.push_back({"--bottleneck", "R", "width shapes: narrowest width / d (default 0.3)",
                     double_flag("--bottleneck", m.shape.ratio, 0.01, 0.99)});
    flags.push_back({"--width-quantum", "Q", "widths are multiples of Q (default 32)",
                     int_flag("--width-quantum", m.shape.quantum, 1, 65536)});
    flags.push_back({"--allow-ablation", "", "permit head schedules that break monotonicity or h_L = h_base",
                     [&m](const std::string&) { m.allow_ablation = true; }});
}
