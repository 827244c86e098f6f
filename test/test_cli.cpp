// test_cli.cpp: the command line of every binary (run/cli.h). For each one, its flag table as data
// (PRISM_HELP=table BIN --help) names exactly the flags its --help lists; every spelling of every flag is
// parsed back with a value of its kind (then --help, so nothing runs); a number outside the flag's bounds, a
// choice it does not take, an empty path, are one-line errors naming the flag; an unknown flag and a missing
// value are one-line errors. Then the parts the table does not show: train_prism's record rules (every flag
// that shapes a run is recorded, the resume list comes from the table), the frame's positional arguments and
// "--name=value", and prepare_shards' values.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "test/test_util.h"
#include "test/train_util.h"

#define PREPARE_SHARDS_NO_MAIN
#include "data/prepare_shards.cpp"
#include "run/defaults.h"

namespace {

struct TableRow {
    std::vector<std::string> spellings;
    std::string kind, sample, choices;
    double lo = 0, hi = 0;
};

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    std::string cur;
    std::istringstream in(s);
    while (std::getline(in, cur, sep)) out.push_back(cur);
    if (!s.empty() && s.back() == sep) out.push_back("");
    return out;
}

std::vector<TableRow> flag_table(const std::string& bin) {
    const Result r = sh("PRISM_HELP=table " + bin + " --help");
    REQUIRE(r.rc == 0);
    std::vector<TableRow> rows;
    std::istringstream lines(r.out);
    std::string line;
    while (std::getline(lines, line)) {
        const std::vector<std::string> c = split(line, '\t');
        INFO(bin << ": " << line);
        REQUIRE(c.size() == 6);
        TableRow t;
        for (const std::string& n : split(c[0], ',')) t.spellings.push_back(trim_name(n));
        t.kind = c[1], t.lo = std::stod(c[2]), t.hi = std::stod(c[3]), t.sample = c[4], t.choices = c[5];
        rows.push_back(t);
    }
    return rows;
}

// The spellings the plain --help lists: "  -o, --out DIR   help" -> -o, --out.
std::vector<std::string> help_spellings(const std::string& bin) {
    const Result r = sh(bin + " --help");
    REQUIRE(r.rc == 0);
    std::vector<std::string> out;
    std::istringstream lines(r.out);
    std::string line;
    while (std::getline(lines, line)) {
        if (line.rfind("  -", 0) != 0) continue;
        std::istringstream spec(line.substr(2, line.find("  ", 2) - 2));
        std::string w;
        while (spec >> w)
            if (w[0] == '-') out.push_back(w.back() == ',' ? w.substr(0, w.size() - 1) : w);
    }
    return out;
}

std::string quoted(const std::string& v) { return "'" + v + "'"; }

void check_binary(const std::string& bin, size_t min_flags) {
    const std::vector<TableRow> rows = flag_table(bin);
    std::vector<std::string> table_spellings;
    for (const TableRow& t : rows)
        table_spellings.insert(table_spellings.end(), t.spellings.begin(), t.spellings.end());
    CHECK(table_spellings == help_spellings(bin));  // the help lists the table, the whole table
    CHECK(rows.size() >= min_flags);                // and the table was really read
    for (const TableRow& t : rows) {
        const std::string name = t.spellings.back();
        INFO(bin << " " << name << " (" << t.kind << ")");
        for (const std::string& s : t.spellings) {
            const Result ok = sh(bin + " " + s + (t.kind == "switch" ? "" : " " + quoted(t.sample)) + " --help");
            INFO(ok.out);
            CHECK(ok.rc == 0);
        }
        std::vector<std::string> bad;  // values the flag must refuse
        if (t.kind == "int" || t.kind == "double") {
            if (t.lo > -1e18) bad.push_back(exact_number(t.kind == "int" ? t.lo - 1 : t.lo - std::max(1e-3, t.lo)));
            if (t.hi < 1e15) bad.push_back(exact_number(t.kind == "int" ? t.hi + 1 : t.hi * 2 + 1));
            bad.push_back("x");
        }
        if (t.kind == "choice") bad.push_back("no-such-choice");
        if (t.kind == "path") bad.push_back("");
        for (const std::string& v : bad) {
            const Result r = sh(bin + " " + name + " " + quoted(v) + " --help");
            INFO("value " << quoted(v) << ": " << r.out);
            CHECK(r.rc == 1);
            CHECK(one_line_error(r));
            CHECK(r.out.find(name) != std::string::npos);
        }
        if (t.kind != "switch") {
            const Result r = sh(bin + " " + name);  // its value missing
            INFO(r.out);
            CHECK(one_line_error(r));
            CHECK(r.out.find("needs a value") != std::string::npos);
        }
    }
    const Result r = sh(bin + " --frobnicate");
    CHECK(one_line_error(r));
    CHECK(r.out.find("unknown flag '--frobnicate'") != std::string::npos);
}

}  // namespace

TEST_CASE("every binary's --help: each flag parsed back with a value of its kind, bounds refused", "[cli]") {
    // The binaries `make` builds, with the number of flags each had when this was written (a floor, so that a
    // table read wrong shows).
    const std::vector<std::pair<std::string, size_t>> bins = {{"./train_prism", 57},
                                                              {"./eval_zeroshot", 8},
                                                              {"./generate", 11},
                                                              {"./analyze", 8},
                                                              {"./report", 7},
                                                              {"./export", 5},
                                                              {"./import", 3},
                                                              {"./study", 13},
                                                              {"./build/prepare_shards", 11},
                                                              {"./build/prepare_eval", 5}};
    for (const auto& [bin, n] : bins) {
        INFO(bin);
        check_binary(bin, n);
    }
}

TEST_CASE("train_prism's flags: the record and the resume rules are the table's", "[cli][record]") {
    TrainOptions o;
    // Every conditional entry set, so that a recorded flag that record_args leaves out shows.
    o.model.d = 32, o.model.L = 2, o.model.h_base = 2, o.model.head_dim = 16, o.model.T = 32, o.model.V = 256;
    o.model.mlp_ratio = 3, o.model.mlp_multiple = 16, o.model.norm = "rmsnorm", o.model.untied = 1;
    o.model.shape.k = 2, o.model.allow_ablation = true, o.T = 32, o.shuffle = false, o.sample_flag_given = true;
    o.model.no_rope = "2", o.model.param = "mup", o.model.mup_base_d = 16, o.model.mixer = "gdn";
    o.lr_mult = "1,0.5", o.wd_mult = "0x2";
    o.cpu = o.recompute = true, o.zero = 0, o.lr = 1e-3, o.opt.weight_decay = 0.05;
    o.warmup = 3, o.lr_schedule = "wsd", o.decay_frac = 0.1, o.decay_shape = "linear";
    RunPlan p;
    p.total_batch = 4096, p.steps = 7;
    const auto args = record_args(o, p);
    auto recorded = [&](const std::string& f) -> const std::string* {
        for (const auto& a : args)
            if (a.first == f) return &a.second;
        return nullptr;
    };
    TrainOptions fresh;
    for (const Flag& f : make_train_flags(fresh)) {
        const std::string n = canonical_name(f);
        INFO(n);
        CHECK((recorded(n) != nullptr) == (f.recorded && n != "--tied"));  // --untied is set, so --tied is not
    }
    REQUIRE(recorded("--wd"));
    CHECK(*recorded("--wd") == "0.05");
    CHECK(*recorded("--total-batch") == "4096");  // the plan's, not the option's 0
    CHECK(*recorded("--steps") == "7");
    CHECK(*recorded("--lr-mult") == "1,0.5");
    CHECK(*recorded("--untied") == "");
    CHECK(!recorded("--tokens"));
    // The defaults of a fresh table: conditional flags left out, the rest as the help shows them.
    TrainOptions d;
    d.lr = 3e-3;
    const auto plain = record_args(d, p);
    for (const char* f : {"--d", "--norm", "--train-seq", "--zero", "--sample-every", "--no-shuffle", "--cpu",
                          "--warmup", "--lr-schedule", "--decay-frac", "--decay-shape", "--no-rope"})
        for (const auto& a : plain) CHECK(a.first != f);
    const std::vector<std::string> may = may_change_on_resume();
    for (const char* f : {"--steps", "--tokens", "--stop-after", "--out", "--batch", "--keep", "--zero"})
        CHECK(std::find(may.begin(), may.end(), f) != may.end());
    for (const char* f : {"--wd", "--lr", "--seed", "--model", "--total-batch", "--lr-schedule", "--decay-frac"})
        CHECK(std::find(may.begin(), may.end(), f) == may.end());
    // The help shows each default from the value itself: every number flag given another value in its bounds, a
    // table built on those options shows the new value where the first table showed the old one, and nothing else
    // of the help changes.
    TrainOptions shown;
    const std::vector<Flag> before = make_train_flags(shown);
    std::vector<std::pair<std::string, std::string>> changed;  // old value, new value, for each number flag
    for (const Flag& f : before) {
        const std::string was = f.value ? f.value() : "";
        std::string now;
        if (f.kind == FlagKind::Int || f.kind == FlagKind::Double)
            for (double v : {std::stod(was) * 2, std::stod(was) + 1, f.lo, f.hi}) {
                now = exact_number(f.kind == FlagKind::Int ? std::floor(v) : v);
                if (v >= f.lo && v <= f.hi && now != was) break;
                now.clear();
            }
        if (!now.empty()) f.apply(now);
        changed.push_back({was, now});
    }
    const std::vector<Flag> after = make_train_flags(shown);
    REQUIRE(after.size() == before.size());
    int defaults_shown = 0;
    for (size_t i = 0; i < before.size(); i++) {
        const auto& [was, now] = changed[i];
        INFO(canonical_name(before[i]) << ": " << was << " -> " << now << "\n"
                                       << before[i].help << "\n"
                                       << after[i].help);
        CHECK(before[i].help.find("{default}") == std::string::npos);
        if (before[i].help == after[i].help) continue;
        REQUIRE(!now.empty());
        std::string want = before[i].help;
        const size_t at = want.find(was);
        REQUIRE(at != std::string::npos);
        CHECK(want.replace(at, was.size(), now) == after[i].help);
        defaults_shown++;
    }
    CHECK(defaults_shown >= 10);
}

TEST_CASE("the frame: positional arguments, --name=value, a missing argument", "[cli]") {
    int n = 0;
    std::string s;
    Command cmd("tool", "FILE... [flags]", "about",
                {number_flag("-n, --number", "N", "n", n, 1, 10), text_flag("--text", "S", "s", s)});
    cmd.missing = "file", cmd.min_positional = 1, cmd.max_positional = 2;
    auto parse = [&](std::vector<std::string> args) {
        args.insert(args.begin(), "tool");
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(&a[0]);
        return parse_command(cmd, (int)argv.size(), argv.data());
    };
    const Parsed p = parse({"a", "-n", "3", "--text=x=y", "b"});
    CHECK(p.positional == std::vector<std::string>{"a", "b"});
    CHECK(n == 3);
    CHECK(s == "x=y");
    CHECK_THROWS_WITH(parse({"a", "b", "c"}), Catch::Contains("unexpected argument 'c'"));  // a third is one too many
    CHECK_THROWS_WITH(parse({"-n", "3"}), Catch::Contains("no file given; usage: tool FILE... [flags] (--help)"));
    CHECK_THROWS_WITH(parse({"a", "--number", "11"}), "--number must be at most 10");
    CHECK_THROWS_WITH(parse({"a", "-n", "0"}), "--number must be positive");
    CHECK_THROWS_WITH(parse({"a", "--help=1"}), "flag --help takes no value");
    CHECK_NOTHROW(parse({"--help"}));  // --help needs no positional argument
    CHECK(cmd.help);
}

TEST_CASE("a value that reads as a flag is refused where a flag takes a value, unless written FLAG=VALUE", "[cli]") {
    // Issue 43 #10: `train_prism -o --plan` trained into a directory named --plan; `--no-rope --plan` said
    // "'' is not a positive integer".
    int n = 0;
    std::string s, path;
    Command cmd("tool", "FILE... [flags]", "about",
                {number_flag("-n, --number", "N", "n", n, -10, 10), text_flag("--text", "S", "s", s),
                 path_flag("-o, --out", "DIR", "o", path)});
    cmd.missing = "file", cmd.min_positional = 1, cmd.max_positional = 2;
    auto parse = [&](std::vector<std::string> args) {
        args.insert(args.begin(), "tool");
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(&a[0]);
        return parse_command(cmd, (int)argv.size(), argv.data());
    };
    CHECK_THROWS_WITH(parse({"a", "-o", "--text"}),
                      "flag -o needs a value (DIR), not the flag '--text'; for a value that starts with '-', write "
                      "-o=./--text");
    CHECK_THROWS_WITH(parse({"a", "--text", "-n"}),
                      Catch::StartsWith("flag --text needs a value (S), not the flag '-n'"));
    CHECK(path.empty());
    const Parsed p = parse({"a", "-o=./--plan", "--text=-n", "-n", "-3", "b"});  // on purpose; a negative number
    CHECK(path == "./--plan");
    CHECK(s == "-n");
    CHECK(n == -3);
    CHECK(p.positional == std::vector<std::string>{"a", "b"});
    CHECK_NOTHROW(parse({"a", "--text", "-"}));  // "-" (stdin) is a value
    CHECK(s == "-");
    // End to end: the trainer refuses before it writes anything.
    char cwd[4096];
    const std::string dir = make_data_dir(), here = getcwd(cwd, sizeof cwd) ? cwd : ".";
    Result r = sh("cd " + dir + " && " + here + "/train_prism --cpu -o --plan");
    CHECK(r.rc == 1);
    CHECK(has(r.out, "train_prism: error: flag -o needs a value (DIR), not the flag '--plan'"));
    Result nr = sh("cd " + dir + " && " + here + "/train_prism --cpu --no-rope --plan");
    CHECK(nr.rc == 1);
    CHECK(has(nr.out, "flag --no-rope needs a value"));
    CHECK(list_dir(dir).size() == 2);  // the shards alone: no directory named --plan
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("prepare_shards' command line sets its options", "[cli][prepare_shards]") {
    const PrepareCli c = parse_prepare_cli({"-o", "d/p", "--format", "lines", "--shard-tokens", "1e6", "--val-tokens",
                                            "1000", "--on-error", "skip", "--threads", "3", "--quiet", "a.txt", "-"});
    CHECK(c.o.out_prefix == "d/p");
    CHECK(c.o.format == InputFormat::LINES);
    CHECK(c.o.shard_tokens == 1000000);
    CHECK(c.o.val_tokens == 1000);
    CHECK(c.o.skip_errors);
    CHECK(c.o.threads == 3);
    CHECK(c.o.progress == 0);
    CHECK(c.o.inputs == std::vector<std::string>{"a.txt", "-"});
    CHECK_THROWS_WITH(parse_prepare_cli({"--bogus"}), Catch::Contains("unknown flag '--bogus'"));
    CHECK_THROWS_WITH(parse_prepare_cli({"--on-error", "ignore"}), Catch::Contains("must be skip or stop"));
    CHECK_THROWS_WITH(parse_prepare_cli({"--shard-tokens", "1.5"}), Catch::Contains("positive whole number"));
    CHECK_THROWS_WITH(parse_prepare_cli({"-o"}), Catch::Contains("-o needs a value"));
}

TEST_CASE("every flag that shapes a run is in its record", "[study][record]") {
    TrainOptions o;
    std::vector<Flag> flags = make_train_flags(o);
    // Every conditional entry set, so that a flag missing from record_args shows.
    o.model.d = 32, o.model.L = 2, o.model.h_base = 2, o.model.head_dim = 16, o.model.T = 32, o.model.V = 256;
    o.model.mlp_ratio = 3, o.model.mlp_multiple = 16, o.model.norm = "rmsnorm", o.model.untied = 1;
    o.model.shape.k = 2, o.model.allow_ablation = true, o.T = 32, o.shuffle = false, o.sample_flag_given = true;
    o.model.no_rope = "2", o.model.param = "mup", o.model.mup_base_d = 16, o.model.mixer = "gdn";
    o.lr_mult = "1,0.5", o.wd_mult = "0x2";
    o.cpu = o.recompute = true, o.zero = 0, o.lr = 1e-3;
    o.warmup = 3, o.lr_schedule = "wsd", o.decay_frac = 0.1, o.decay_shape = "linear";
    RunPlan p;
    const auto args = record_args(o, p);
    for (const Flag& f : flags) {
        const std::string n = canonical_name(f);
        if (!f.recorded || n == "--tied") continue;
        INFO(n);
        CHECK(std::find_if(args.begin(), args.end(), [&](const auto& a) { return a.first == n; }) != args.end());
    }
    CHECK(run_record::exact(0.003) == "0.003");
    CHECK(std::strtod(run_record::exact(8.0 / 3).c_str(), nullptr) == 8.0 / 3);
}

// A near miss of a flag names the flag meant; a value after a switch names the flag it most likely belongs to.
TEST_CASE("train_prism's unknown arguments say what was likely meant: --step, --resume DIR", "[cli]") {
    const Result a = sh("./train_prism --step 3 --plan");
    CHECK(one_line_error(a));
    CHECK(a.out.find("unknown flag '--step'; did you mean --steps?") != std::string::npos);
    const Result b = sh("./train_prism --resume out/nowhere --plan");
    CHECK(one_line_error(b));
    CHECK(b.out.find("unexpected argument 'out/nowhere': --resume takes no value; did you mean --resume -o "
                     "out/nowhere?") != std::string::npos);
    const Result c = sh("./train_prism --zzzzzzzz");
    CHECK(c.out.find("unknown flag '--zzzzzzzz'; run train_prism --help for the list") != std::string::npos);
}

// A suggestion is close to what was typed, or there is none: within one edit per four letters (at most two), or
// the start of a flag; a one- or two-letter typo is near nothing. Unit cases on a table of the trainer's kind.
TEST_CASE("an unknown flag's suggestion is close to what was typed, or there is none", "[cli]") {
    int n = 0;
    std::string s;
    bool b = false;
    const std::vector<Flag> flags = {number_flag("--steps", "N", "", n, 1, 10),
                                     number_flag("--val-every", "N", "", n, 1, 10),
                                     number_flag("--val-tokens", "N", "", n, 1, 10),
                                     number_flag("--warmup", "N", "", n, 1, 10),
                                     number_flag("--lr", "R", "", n, 1, 10),
                                     path_flag("-o, --out", "DIR", "", s),
                                     switch_flag("--resume", "", b)};
    CHECK(near_flag("--step", flags) == "--steps");     // a letter missing
    CHECK(near_flag("--stpes", flags) == "--steps");    // two letters swapped: one edit
    CHECK(near_flag("--STEPS", flags) == "--steps");    // another case
    CHECK(near_flag("-steps", flags) == "--steps");     // one dash
    CHECK(near_flag("--wramup", flags) == "--warmup");  // swapped
    CHECK(near_flag("--val", flags) == "--val-every");  // the start of a flag: the shortest it begins
    CHECK(near_flag("--LR", flags) == "--lr");
    CHECK(near_flag("--zz", flags) == "");  // two edits from --lr, but of two letters: nothing
    CHECK(near_flag("--x", flags) == "");
    CHECK(near_flag("--stop", flags) == "");        // two edits from --steps, of four letters: too far
    CHECK(near_flag("--resumption", flags) == "");  // --resume is its start, not it; four edits
    CHECK(near_flag("--ou", flags) == "");          // too short to be a flag's start
    CHECK(near_flag("--" + std::string(100000, 's'), flags) == "");
    CHECK(shown_arg("--abc") == "--abc");
    CHECK(shown_arg("a\nb") == "a\\x0ab");
    const std::string longest = std::string(70, 'y');
    CHECK(shown_arg(longest) == std::string(60, 'y') + "... (70 bytes)");
    // A UTF-8 character is never cut: the 60th byte is the first of a two-byte one.
    CHECK(shown_arg(std::string(59, 'a') + "\xc3\xa9" + std::string(20, 'b')) ==
          std::string(59, 'a') + "... (81 bytes)");
}

// Every binary parses with run/cli.h: a near miss of each of its flags is answered with a flag (its own, or one as
// close), an argument near none is answered with --help, and an argument of 100,000 characters is shown by its
// first 60 and its size, in one line.
TEST_CASE("every binary: near misses get a close flag, far ones none, a huge argument is not echoed whole", "[cli]") {
    for (const char* b : {"./train_prism", "./eval_zeroshot", "./generate", "./analyze", "./report", "./export",
                          "./import", "./study", "./build/prepare_shards", "./build/prepare_eval"}) {
        const std::string bin = b;
        INFO(bin);
        const Result far = sh(bin + " --qq");
        CHECK(one_line_error(far));
        CHECK(has(far.out, "unknown flag '--qq'; run "));
        const std::string huge = "--steps" + std::string(100000, 'x');
        const Result h = sh(bin + " " + huge);
        INFO(h.out.substr(0, 300));
        CHECK(h.rc == 1);
        CHECK(one_line_error(h));
        CHECK(h.out.size() < 400);
        CHECK(has(h.out, "unknown flag '--steps" + std::string(53, 'x') + "... (100007 bytes)'; run "));
        const std::vector<TableRow> rows = flag_table(bin);
        std::vector<std::string> spellings;
        for (const TableRow& t : rows) spellings.insert(spellings.end(), t.spellings.begin(), t.spellings.end());
        for (const std::string& name : spellings) {
            const std::string typo = name.substr(0, name.size() - 1);  // its last letter lost: --step
            if (name.size() < 7 || std::find(spellings.begin(), spellings.end(), typo) != spellings.end()) continue;
            const Result r = sh(bin + " " + typo);
            INFO(typo << ": " << r.out);
            CHECK(one_line_error(r));
            // --beta is one letter from --beta1 and --beta2: either is as near; else the one flag it is near.
            std::vector<std::string> nearest;
            for (const std::string& n : spellings)
                if (n.size() == name.size() && n.compare(0, typo.size(), typo) == 0) nearest.push_back(n);
            const size_t at = r.out.find("; did you mean ");
            REQUIRE(at != std::string::npos);
            const std::string said = r.out.substr(at + 15, r.out.find('?', at) - at - 15);
            CHECK(std::find(nearest.begin(), nearest.end(), said) != nearest.end());
            if (nearest.size() == 1) CHECK(said == name);
        }
    }
}

// Two numbers a message sets side by side (a learning rate before and after) are printed differing when they differ.
TEST_CASE("two numbers that differ in their last bits are printed to digits that differ", "[cli]") {
    CHECK(distinct_numbers(0.003, 0.004) == std::make_pair(std::string("0.003"), std::string("0.004")));
    const double a = 0.003, b = std::nextafter(a, 1.0);  // one ulp apart: %.6g reads 0.003 for both
    const auto [x, y] = distinct_numbers(a, b);
    CHECK(x != y);
    CHECK(std::strtod(x.c_str(), nullptr) == a);  // 17 digits: each reads back as itself
    CHECK(std::strtod(y.c_str(), nullptr) == b);
    CHECK(distinct_numbers(1e-3, 1e-3) == std::make_pair(std::string("0.001"), std::string("0.001")));
}
