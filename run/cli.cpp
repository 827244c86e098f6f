// run/cli.cpp: the flag tables and the command frame (run/cli.h).
#include "run/cli.h"

#include "util/io.h"

Flag make_flag(const std::string& names, const std::string& arg, const std::string& help,
               std::function<void(const std::string&)> apply, FlagKind kind, double lo, double hi) {
    Flag f;
    f.names = names, f.arg = arg, f.help = help, f.apply = std::move(apply), f.kind = kind, f.lo = lo, f.hi = hi;
    return f;
}

std::vector<std::string> flag_spellings(const Flag& f) {
    std::vector<std::string> out;
    size_t a = 0;
    while (a < f.names.size()) {
        size_t b = f.names.find(',', a);
        out.push_back(trim_name(f.names.substr(a, b == std::string::npos ? std::string::npos : b - a)));
        if (b == std::string::npos) break;
        a = b + 1;
    }
    return out;
}

long parse_long_flag(const std::string& flag, const std::string& v) {
    char* end = nullptr;
    errno = 0;
    long x = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != 0 || errno) throw ConfigError(flag + ": '" + shown_arg(v) + "' is not an integer");
    return x;
}

int parse_int_flag(const std::string& flag, const std::string& v) {
    long x = parse_long_flag(flag, v);
    if (x < -2147483647L || x > 2147483647L) throw ConfigError(flag + ": " + shown_arg(v) + " is out of range");
    return (int)x;
}

double parse_double_flag(const std::string& flag, const std::string& v) {
    char* end = nullptr;
    errno = 0;
    double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != 0 || errno || !std::isfinite(x))
        throw ConfigError(flag + ": '" + shown_arg(v) + "' is not a number");
    return x;
}

std::string with_default(std::string help, const std::function<std::string()>& value) {
    const size_t at = help.find("{default}");
    if (at != std::string::npos && value) help.replace(at, 9, value());
    return help;
}

Flag text_flag(const std::string& names, const std::string& arg, const std::string& help, std::string& dst) {
    Flag f = make_flag(
        names, arg, "", [&dst](const std::string& v) { dst = v; }, FlagKind::Text);
    f.value = [&dst] { return dst; };
    f.help = with_default(help, f.value);
    return f;
}

Flag path_flag(const std::string& names, const std::string& arg, const std::string& help, std::string& dst,
               bool empty_ok) {
    const std::string name = canonical_name(names);
    Flag f = make_flag(
        names, arg, "",
        [name, &dst, empty_ok](const std::string& v) {
            // An empty path (an unset shell variable: -o "$RUN") is never taken as "the default": that default
            // may hold a run that --overwrite would then delete.
            if (v.empty() && !empty_ok)
                throw ConfigError("flag " + name +
                                  " was given an empty path; pass a path (an unset shell "
                                  "variable?), or leave the flag out for its default");
            dst = v;
        },
        FlagKind::Path);
    f.value = [&dst] { return dst; };
    f.empty_ok = empty_ok;
    f.help = with_default(help, f.value);
    return f;
}

Flag choice_flag(const std::string& names, const std::string& arg, const std::string& help, std::string& dst,
                 const std::vector<std::string>& choices, std::function<std::string(const std::string&)> resolve) {
    const std::string name = canonical_name(names);
    Flag f = make_flag(
        names, arg, "",
        [name, &dst, choices, resolve](const std::string& v) {
            if (resolve) {
                try {
                    dst = resolve(v);
                } catch (const std::runtime_error& e) {  // its own words, with the flag's name
                    throw ConfigError(name + ": " + e.what());
                }
                return;
            } else {
                bool ok = false;
                for (const auto& c : choices) ok = ok || c == v;
                if (!ok) {
                    std::string list;
                    for (size_t i = 0; i < choices.size(); i++)
                        list += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
                    throw ConfigError(name + " must be " + list + ", not '" + shown_arg(v) + "'");
                }
            }
            dst = v;
        },
        FlagKind::Choice);
    f.choices = choices;
    f.value = [&dst] { return dst; };
    f.help = with_default(help, f.value);
    return f;
}

void print_flags(FILE* out, const std::vector<Flag>& flags) {
    for (const auto& f : flags) {
        std::string lhs = f.names + (f.arg.empty() ? "" : " " + f.arg), help = f.help;
        for (size_t at = help.find('\n'); at != std::string::npos; at = help.find('\n', at + 1))
            help.insert(at + 1, std::string(31, ' '));
        fprintf(out, "  %-28s %s\n", lhs.c_str(), help.c_str());
    }
}

void print_flag_table(FILE* out, const std::vector<Flag>& flags) {
    static const char* kinds[] = {"switch", "int", "double", "text", "path", "choice"};
    for (const auto& f : flags) {
        std::string sample = f.kind == FlagKind::Int || f.kind == FlagKind::Double ? exact_number(f.lo)
                             : f.kind == FlagKind::Choice                          ? f.choices.at(0)
                             : f.kind == FlagKind::Switch                          ? ""
                             : f.sample.empty()                                    ? "x"
                                                                                   : f.sample;
        std::string choices;
        for (const auto& c : f.choices) choices += (choices.empty() ? "" : ",") + c;
        fprintf(out, "%s\t%s\t%s\t%s\t%s\t%s\n", f.names.c_str(), kinds[(int)f.kind], exact_number(f.lo).c_str(),
                exact_number(f.hi).c_str(), sample.c_str(), choices.c_str());
    }
}

const Flag* find_flag(const std::vector<Flag>& flags, const std::string& spelling) {
    for (const auto& f : flags)
        for (const auto& n : flag_spellings(f))
            if (n == spelling) return &f;
    return nullptr;
}

std::string shown_arg(const std::string& a) {
    if (a.size() <= kShownArgChars) return printable(a);
    size_t n = kShownArgChars;
    while (n > 0 && ((unsigned char)a[n] & 0xC0) == 0x80) n--;  // not inside a UTF-8 character
    return printable(a.substr(0, n)) + "... (" + std::to_string(a.size()) + " bytes)";
}

// The edits (insert, delete, replace, swap two neighbours) from x to y, letters compared without case: the
// optimal-string-alignment distance.
static size_t edit_distance(const std::string& x, const std::string& y) {
    auto same = [](char p, char q) { return tolower((unsigned char)p) == tolower((unsigned char)q); };
    std::vector<std::vector<size_t>> d(x.size() + 1, std::vector<size_t>(y.size() + 1));
    for (size_t i = 0; i <= x.size(); i++) d[i][0] = i;
    for (size_t j = 0; j <= y.size(); j++) d[0][j] = j;
    for (size_t i = 1; i <= x.size(); i++)
        for (size_t j = 1; j <= y.size(); j++) {
            d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + !same(x[i - 1], y[j - 1])});
            if (i > 1 && j > 1 && same(x[i - 1], y[j - 2]) && same(x[i - 2], y[j - 1]))
                d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
        }
    return d[x.size()][y.size()];
}

std::string near_flag(const std::string& a, const std::vector<Flag>& flags) {
    auto body = [](const std::string& s) { return s.substr(std::min(s.find_first_not_of('-'), s.size())); };
    const std::string typed = body(a);
    std::string best, prefixed;
    size_t best_d = (size_t)-1;
    for (const Flag& f : flags)
        for (const std::string& n : flag_spellings(f)) {
            const std::string name = body(n);
            if (name.size() < 2) continue;  // a one-letter flag is near everything
            // One edit per four letters of the shorter word, at most two: --steps for --step, --warmup for
            // --wramup; --zz is near nothing (--lr is two edits from it, of two letters).
            const size_t shorter = std::min(typed.size(), name.size()), allowed = std::min<size_t>(2, shorter / 4);
            const size_t gap = typed.size() > name.size() ? typed.size() - name.size() : name.size() - typed.size();
            if (gap <= allowed) {  // else no distance is small enough: a long argument costs nothing
                const size_t d = edit_distance(typed, name);
                if (d <= allowed && d < best_d) best_d = d, best = n;
            }
            // The start of a flag, three letters or more: --val for --val-every (the shortest such flag).
            if (typed.size() >= 3 && typed.size() < name.size() && name.compare(0, typed.size(), typed) == 0 &&
                (prefixed.empty() || n.size() < prefixed.size()))
                prefixed = n;
        }
    return best.empty() ? prefixed : best;
}

std::string unknown_argument(const std::string& a, const std::string& before, const std::vector<Flag>& flags,
                             const std::string& program) {
    const std::string list = "; run " + program + " --help for the list";
    if (!looks_like_flag(a)) {
        const Flag* prev = find_flag(flags, before);
        const Flag* out = find_flag(flags, "-o");
        // The suggestion is a command to type: it names the argument whole, or not at all.
        if (prev && prev->arg.empty())
            return "unexpected argument '" + shown_arg(a) + "': " + before + " takes no value" +
                   (out && a.size() <= kShownArgChars ? "; did you mean " + before + " -o " + printable(a) + "?"
                                                      : list);
        return "unexpected argument '" + shown_arg(a) + "'" + list;
    }
    const std::string near = near_flag(a, flags);
    return "unknown flag '" + shown_arg(a) + "'" + (near.empty() ? list : "; did you mean " + near + "?");
}

void parse_flags(int argc, char** argv, const std::vector<Flag>& flags, const std::string& program) {
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i], value;
        const size_t eq = inline_value_at(a);
        const bool has_value = eq != std::string::npos;
        if (has_value) value = a.substr(eq + 1), a = a.substr(0, eq);
        const Flag* hit = find_flag(flags, a);
        if (!hit) throw ConfigError(unknown_argument(a, i > 1 ? argv[i - 1] : "", flags, program));
        if (hit->arg.empty()) {
            if (has_value) throw ConfigError("flag " + a + " takes no value");
        } else if (!has_value) {
            if (i + 1 >= argc) throw ConfigError("flag " + a + " needs a value (" + hit->arg + ")");
            if (looks_like_flag(argv[i + 1]) && !hit->flag_values)
                throw ConfigError(
                    "flag " + a + " needs a value (" + hit->arg + "), not the flag '" + shown_arg(argv[i + 1]) +
                    "'; for a value that starts with '-', write " + a + "=" +
                    (hit->kind == FlagKind::Path ? "./" : "") +
                    (std::string(argv[i + 1]).size() <= kShownArgChars ? printable(argv[i + 1]) : hit->arg));
            value = argv[++i];
        }
        hit->apply(value);
    }
}

std::vector<char*> take_positional(int argc, char** argv, const std::vector<Flag>& flags,
                                   std::vector<std::string>& positional, size_t max) {
    std::vector<char*> rest{argv[0]};
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        const bool is_flag = a.size() > 1 && a[0] == '-';
        if (!is_flag && positional.size() < max) {
            positional.push_back(a);
            continue;
        }
        rest.push_back(argv[i]);
        if (is_flag && inline_value_at(a) == std::string::npos && i + 1 < argc) {
            const Flag* f = find_flag(flags, a);
            if (f && !f->arg.empty()) rest.push_back(argv[++i]);
        }
    }
    return rest;
}

int run_tool(const char* program, const std::string& oom_hint, const std::function<int()>& body) {
    signal(SIGXFSZ, SIG_IGN);
    return run_reporting(
        program, oom_hint, [] { return std::string(); }, body);
}

void add_help_flag(Command& cmd) {
    if (find_flag(cmd.flags, "--help")) return;
    Flag h = switch_flag("-h, --help", cmd.help_line, cmd.help).not_recorded();
    cmd.flags.insert(cmd.help_first ? cmd.flags.begin() : cmd.flags.end(), h);
}

void print_help(FILE* out, Command& cmd) {
    add_help_flag(cmd);
    const char* mode = getenv("PRISM_HELP");
    if (mode && std::string(mode) == "table") return print_flag_table(out, cmd.flags);
    fprintf(out, "usage: %s %s\n\n%s\n\n", cmd.name.c_str(), cmd.usage.c_str(), cmd.about.c_str());
    print_flags(out, cmd.flags);
    if (!cmd.epilog.empty()) fprintf(out, "%s\n", cmd.epilog.c_str());
}

Parsed parse_command(Command& cmd, int argc, char** argv) {
    add_help_flag(cmd);
    Parsed p;
    int n = argc;
    if (!cmd.stop_at.empty())
        for (int i = 1; i < argc; i++)
            if (argv[i] == cmd.stop_at) {
                n = i;
                for (int j = i + 1; j < argc; j++) p.after.push_back(argv[j]);
                break;
            }
    std::vector<char*> rest = take_positional(n, argv, cmd.flags, p.positional, cmd.max_positional);
    parse_flags((int)rest.size(), rest.data(), cmd.flags, cmd.name);
    if (!cmd.help && p.positional.size() < cmd.min_positional)
        throw ConfigError("no " + cmd.missing + " given; usage: " + cmd.name + " " + cmd.usage + " (--help)");
    return p;
}

int command_main(Command& cmd, int argc, char** argv, const std::string& oom_hint,
                 const std::function<int(const Parsed&)>& body) {
    return run_tool(cmd.name.c_str(), oom_hint, [&] {
        const Parsed p = parse_command(cmd, argc, argv);
        if (cmd.help) return print_help(stdout, cmd), 0;
        return body(p);
    });
}
