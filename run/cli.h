// run/cli.h: the command line of every binary, from one table. A Flag is declared once: its spellings, its argument,
// its help line, the kind of value it takes with its bounds, and the variable it sets; the --help text is generated
// from the very table the parser reads (a usage text naming flags the parser did not accept is a classic trainer bug),
// and the help line's "{default}" is the variable's own initial value. The trainer's flags also carry their run-record
// rule (Flag::record; run/defaults.h's make_train_flags). Errors are ConfigErrors with one line naming the flag and
// what to do.
// One frame runs every binary's main (Command, command_main): positional arguments, --help, errors and exit
// codes in one place. `PRISM_HELP=table BIN --help` prints the table itself, one flag a line (kind, bounds, a
// valid value), for the test that feeds every binary's flags back to it (test/test_cli.cpp).
// Its body is run/cli.cpp (compiled apart: the Makefile's LIB).
#pragma once

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "util/errors.h"

// A double as the shortest text that reads back as the same double, for the run record and
// the flags it re-applies (a value written and read again is the value that was used).

// The shortest of %.15g, %.16g, %.17g that reads back as x: 0.003 stays 0.003, and every double round-trips.
inline std::string exact_number(double x) {
    char b[40];
    for (int p = 15; p <= 17; p++) {
        snprintf(b, sizeof b, "%.*g", p, x);
        if (std::strtod(b, nullptr) == x) break;
    }
    return b;
}

// Two numbers that differ, in the fewest significant digits (6 to 17) that show them differing: two learning rates
// that differ in their last bits are not both printed as 0.003.
inline std::pair<std::string, std::string> distinct_numbers(double a, double b) {
    char x[40], y[40];
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(x, sizeof x, "%.*g", digits, a), snprintf(y, sizeof y, "%.*g", digits, b);
        if (strcmp(x, y) != 0) break;
    }
    return {x, y};
}

enum class FlagKind { Switch, Int, Double, Text, Path, Choice };

struct Flag {
    std::string names;  // "-m, --model": every spelling, comma separated; the last is the canonical one
    std::string arg;    // "" for a switch, else the argument's name ("PRESET")
    std::string help;
    std::function<void(const std::string&)> apply;
    FlagKind kind = FlagKind::Text;
    double lo = 0, hi = 0;               // Int, Double: the bounds
    std::vector<std::string> choices;    // Choice: the values it takes (aliases aside)
    std::function<std::string()> value;  // the variable's value as a command line writes it (null: none)
    std::function<bool()> is_set;        // whether the record keeps value() (null: always)
    // train_prism's run record (run/run_record.h; other binaries keep none): `recorded`: the record keeps the
    // flag's value (not: what the invocation does rather than what the run is); `may_change`: a --resume may
    // give it another value (how long, how often, on what; not what the run computes). Recorded and not
    // may_change: a --resume must match the record.
    bool recorded = true, may_change = false;
    bool empty_ok = false;     // Path: "" is a value (the default), not an error
    bool flag_values = false;  // its value may read as a flag by design (study's --grid --lr=1e-3,2e-3)
    std::string sample;        // Text: a value it takes, for PRISM_HELP=table ("": any text, "x")

    Flag& changes_on_resume() { return may_change = true, *this; }
    Flag& not_recorded() { return recorded = false, *this; }
    Flag& takes_flag_values() { return flag_values = true, *this; }
    // Recorded only while its value is not `unset` ("0": the preset's, the model's context, ...).
    Flag& unless(const std::string& unset) {
        auto v = value;
        is_set = [v, unset] { return v() != unset; };
        return *this;
    }
    Flag& record_if(std::function<bool()> f) { return is_set = std::move(f), *this; }
    // Runs `f` after the value is applied (a flag that also notes it was given).
    Flag& then(std::function<void()> f) {
        auto a = apply;
        apply = [a, f](const std::string& v) { a(v), f(); };
        return *this;
    }
};

// A flag of any kind from its parts (the kind's helpers below fill in the rest).
Flag make_flag(const std::string& names, const std::string& arg, const std::string& help,
               std::function<void(const std::string&)> apply, FlagKind kind = FlagKind::Text, double lo = 0,
               double hi = 0);

inline std::string trim_name(const std::string& s) {
    size_t a = s.find_first_not_of(' '), b = s.find_last_not_of(' ');
    return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::vector<std::string> flag_spellings(const Flag& f);

// A flag's canonical spelling: its last one ("-m, --model" -> "--model").
inline std::string canonical_name(const Flag& f) { return flag_spellings(f).back(); }
inline std::string canonical_name(const std::string& names) {
    return canonical_name(make_flag(names, "", "", nullptr));
}

// Numeric flag values: the whole string must parse, and out-of-range values are errors, not wraparounds.
long parse_long_flag(const std::string& flag, const std::string& v);
int parse_int_flag(const std::string& flag, const std::string& v);
double parse_double_flag(const std::string& flag, const std::string& v);

inline std::string below_message(const std::string& flag, double lo) {
    return flag + (lo == 1 ? " must be positive" : " must be at least " + std::to_string((long)lo));
}

// The help line with "{default}" replaced by the flag's value now (the table is built on fresh options).
std::string with_default(std::string help, const std::function<std::string()>& value);

// A switch: sets dst to `on`. Recorded (as "") while dst is `on`.
template <class T> Flag switch_flag(const std::string& names, const std::string& help, T& dst, T on) {
    Flag f = make_flag(
        names, "", help, [&dst, on](const std::string&) { dst = on; }, FlagKind::Switch);
    f.value = [] { return std::string(); };
    f.is_set = [&dst, on] { return dst == on; };
    return f;
}
inline Flag switch_flag(const std::string& names, const std::string& help, bool& dst) {
    return switch_flag<bool>(names, help, dst, true);
}

// A number in [lo, hi] (int, long, uint64_t or double): it must parse whole and lie in the bounds, else a
// one-line error naming the flag ("--d must be positive", "--keep must be at least 1", "--d must be at most
// 65536", "--lr must lie in [0, 10]"). Every numeric flag is one of these, so no value reaches the code unbounded.
template <class T>
Flag number_flag(const std::string& names, const std::string& arg, const std::string& help, T& dst, double lo,
                 double hi) {
    const std::string name = canonical_name(names);
    Flag f =
        make_flag(names, arg, "", nullptr, std::is_floating_point<T>::value ? FlagKind::Double : FlagKind::Int, lo, hi);
    if constexpr (std::is_floating_point<T>::value) {
        f.apply = [name, &dst, lo, hi](const std::string& v) {
            const double x = parse_double_flag(name, v);
            if (x < lo || x > hi) {
                char b[96];
                snprintf(b, sizeof b, " must lie in [%g, %g]", lo, hi);
                throw ConfigError(name + b);
            }
            dst = (T)x;
        };
        f.value = [&dst] { return exact_number((double)dst); };
    } else {
        f.apply = [name, &dst, lo, hi](const std::string& v) {
            const long x = parse_long_flag(name, v);
            if ((double)x < lo) throw ConfigError(below_message(name, lo));
            if ((double)x > hi) throw ConfigError(name + " must be at most " + std::to_string((long)hi));
            dst = (T)x;
        };
        f.value = [&dst] { return std::to_string(dst); };
    }
    f.help = with_default(help, f.value);
    return f;
}

// A string taken as given (a preset's name, a schedule, a glob: checked where it is used).
Flag text_flag(const std::string& names, const std::string& arg, const std::string& help, std::string& dst);

// A file or directory: "" is refused (an empty -o would write "" or "/..."), unless empty_ok (then "" is the default).
Flag path_flag(const std::string& names, const std::string& arg, const std::string& help, std::string& dst,
               bool empty_ok = false);

// One of `choices`. resolve (optional) checks the value itself and returns what to keep (it may take aliases:
// "rms"); without it any other value is "FLAG must be A, B or C, not 'X'".
Flag choice_flag(const std::string& names, const std::string& arg, const std::string& help, std::string& dst,
                 const std::vector<std::string>& choices,
                 std::function<std::string(const std::string&)> resolve = nullptr);

// One line a flag; a help text's own line breaks continue in its column.
void print_flags(FILE* out, const std::vector<Flag>& flags);

// The table as data, one flag a line, tab-separated: spellings, kind, lo, hi, a value it takes, the choices.
void print_flag_table(FILE* out, const std::vector<Flag>& flags);

const Flag* find_flag(const std::vector<Flag>& flags, const std::string& spelling);

// Where a flag's value written into its argument starts: "--name=value" and "-o=value" (the '=' at the
// returned index); npos for an argument without one (or that is no flag).
inline size_t inline_value_at(const std::string& a) {
    return a.size() > 1 && a[0] == '-' ? a.find('=') : std::string::npos;
}

// Whether an argument reads as a flag rather than as a value: "-x...", "--x..." ("-" alone is stdin, and "-1",
// "-.5" are numbers).
inline bool looks_like_flag(const std::string& a) {
    return a.size() > 1 && a[0] == '-' && !isdigit((unsigned char)a[1]) && a[1] != '.';
}

// An argument as a message shows it: util/io.h's printable (control bytes escaped), and at most kShownArgChars
// bytes of it, the rest said as its size ("--xxxx... (100002 bytes)"): a pasted file is not echoed whole.
constexpr size_t kShownArgChars = 60;
std::string shown_arg(const std::string& a);

// The flag a mistyped one most likely meant, or "": the nearest within one edit (insert, delete, replace, swap) per
// four letters and at most two, case ignored (--step, --STEPS, --stpes: --steps; --zz: none), else the shortest
// flag the typed letters (three or more) begin (--val: --val-every).
std::string near_flag(const std::string& a, const std::vector<Flag>& flags);

// Applies argv to the flags; "--name value", "--name=value" and "-o=value" all work. A flag's value that reads as
// a flag ("-o --plan": a value forgotten) is an error naming both; "-o=./--plan" gives such a value on purpose.
// `program` names the binary in errors.
// The error for an argument no flag takes: a flag's near miss (--step: "did you mean --steps?"), or a value after a
// flag that takes none (--resume DIR: "did you mean --resume -o DIR?" where there is an -o).
std::string unknown_argument(const std::string& a, const std::string& before, const std::vector<Flag>& flags,
                             const std::string& program);

void parse_flags(int argc, char** argv, const std::vector<Flag>& flags, const std::string& program);

// Takes a tool's positional arguments (those that are neither a flag nor a flag's value) out of argv, in order,
// into `positional`, at most `max` of them (further ones stay, and parse_flags rejects them). Returns the rest,
// argv[0] first, for parse_flags. "-" is a positional argument (stdin).
std::vector<char*> take_positional(int argc, char** argv, const std::vector<Flag>& flags,
                                   std::vector<std::string>& positional, size_t max = (size_t)-1);

// How a single-process tool ends on an error: what it printed first, then one line on stderr, "PROGRAM: error:
// ..." (out of memory: followed by oom_hint when it is not empty), and exit status 1. Returns body's exit status
// otherwise. dist/process_group.h's run_ranks is the same for the binaries that run as ranks. SIGXFSZ is
// ignored, so that a write past a file-size limit is the ordinary one-line disk error (EFBIG).
int run_tool(const char* program, const std::string& oom_hint, const std::function<int()>& body);

// A binary's command line: what --help prints first, its flags, its positional arguments.
struct Command {
    Command() = default;
    Command(std::string name_, std::string usage_, std::string about_, std::vector<Flag> flags_)
        : name(std::move(name_)), usage(std::move(usage_)), about(std::move(about_)), flags(std::move(flags_)) {}
    std::string name;         // "report": errors read "report: error: ..."
    std::string usage;        // after "usage: NAME ": "RUN_DIR... [flags]"
    std::string about;        // the paragraph under the usage line
    std::vector<Flag> flags;  // parse_command adds "-h, --help"
    std::string help_line = "this text";
    bool help_first = false;  // the help flag heads the list (train_prism's) instead of ending it
    std::string missing;      // "run directory": "no run directory given" when there are too few positionals
    size_t min_positional = 0, max_positional = 0;
    std::string stop_at;  // "--": everything after it is left to the body (study's trainer flags)
    std::string epilog;   // a line under the flags
    bool help = false;    // --help was given
};

// What parse_command found besides the flags.
struct Parsed {
    std::vector<std::string> positional, after;  // after: the arguments after cmd.stop_at
};

void add_help_flag(Command& cmd);

void print_help(FILE* out, Command& cmd);

// Parses argv against the command: every flag is applied (so a bad value is an error even beside --help), then
// --help wins over missing positional arguments. Errors are ConfigErrors.
Parsed parse_command(Command& cmd, int argc, char** argv);

// The main of a single-process tool: parses argv (parse_command), prints --help and exits 0, else runs
// body(the positional arguments); errors end it as run_tool does.
int command_main(Command& cmd, int argc, char** argv, const std::string& oom_hint,
                 const std::function<int(const Parsed&)>& body);

// Upper bounds shared by the command lines (model_config.h's validate_config holds the model's own: d and widths
// <= 65536, V <= 2^24, T <= 2^20, L <= 10000).
constexpr long kMaxSteps = 1000000000000L;         // steps, step intervals and token counts per step: 10^12
constexpr long kMaxTokens = 1000000000000000000L;  // token budgets: 10^18
constexpr double kMaxInt = 2147483647;
constexpr double kMaxLong = 9223372036854775807.0;
