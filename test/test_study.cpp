// test_study.cpp: the study tool end to end on a micro model: a grid run, rerun until done, --list, --only, an
// interrupted run resumed, zero-shot evals written and read back by report; a good parent to its trainers (signals,
// kills, a live trainer named); train.log and a failed run's reason; a grid of identical models refused; --grid's
// axes (any trainer flag, checked against the trainer's table) listed and trained; and the recipes (openelm124m,
// window124m, hybrid124m, placement124m and their tiny versions) at equal parameters with their GPU-hours. Report's pages of a study are
// test_study_report.cpp; the statistics behind them test_stats.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "run/checkpoint.h"
#include "util/json.h"
#include "run/run_record.h"
#include "run/defaults.h"
#include "run/run.h"
#include "studies/stats.h"
#include "test/train_util.h"

TEST_CASE("study: a grid of runs, rerun until done; --list, --only, a resumed run, zero-shot evals", "[study][cli]") {
    const std::string data = make_data_dir(), dir = data + "/study";
    {
        std::ofstream f(data + "/hs.jsonl");
        f << "{\"activity_label\": \"Baking\", \"ctx_a\": \"A man puts flour in a bowl.\", \"ctx_b\": \"he\", "
             "\"endings\": [\"mixes it.\", \"flies away.\", \"sings.\", \"eats the bowl.\"], \"label\": 0}\n";
    }
    REQUIRE(sh("./build/prepare_eval hellaswag " + data + "/hs.jsonl -o " + data + "/hellaswag.bin").rc == 0);
    std::string m = micro(data, "X");
    m = m.substr(std::string("./train_prism --vocab 256 ").size(),
                 m.find(" -o ") - std::string("./train_prism --vocab 256 ").size());  // GPT-2 eval tokens need V 50257
    const std::string base = "./study " + dir + " --heads uniform,1/2 --seeds 2 --eval-data " + data,
                      trainer = " -- " + m + " --steps 6", study = base + trainer;
    Result l = sh(base + " --list" + trainer);
    INFO(l.out);
    REQUIRE(l.rc == 0);
    CHECK(l.out.find("\n1\tnew+eval\t./train_prism -m tiny -s uniform -w uniform --seed 1 -o " + dir +
                     "/uniform-uniform-s1 --d 32") != std::string::npos);
    CHECK(l.out.find("4\tnew+eval\t./train_prism -m tiny -s 1,2 -w uniform --seed 2 -o " + dir + "/1_2-uniform-s2") !=
          std::string::npos);
    // One run interrupted after 3 steps, as a job time limit would leave it.
    const std::string line4 = l.out.substr(l.out.find("4\tnew+eval\t") + 11);
    REQUIRE(sh(line4.substr(0, line4.find('\n')) + " --stop-after 3").rc == 0);
    Result l2 = sh(base + " --list --only 4" + trainer);
    CHECK(l2.out.find("4\tresume+eval\t") != std::string::npos);

    Result r = sh(study);
    INFO(r.out);
    REQUIRE(r.rc == 0);
    CHECK(r.out.find("2 configurations x 2 seeds = 4 runs (0 done)") != std::string::npos);
    CHECK(r.out.find("estimated cost: ") != std::string::npos);
    CHECK(r.out.find("zero-shot evals after each run: hellaswag") != std::string::npos);
    CHECK(r.out.find("[4/4] 1_2-uniform-s2: resuming") != std::string::npos);
    CHECK(r.out.find("complete") != std::string::npos);
    for (const char* n : {"uniform-uniform-s1", "uniform-uniform-s2", "1_2-uniform-s1", "1_2-uniform-s2"}) {
        INFO(n);
        RunRecord rec;
        REQUIRE(read_run_record(dir + "/" + n, rec));
        CHECK(rec.status() == "done");
        CHECK(read_log(dir + "/" + n + "/log.jsonl").size() == 6);
        CHECK(read_text(dir + "/" + n + "/eval.json").find("\"task\": \"hellaswag\"") != std::string::npos);
    }
    // Same seed, same data: the two configurations' seed-1 runs differ in heads only, so their records' args
    // differ in --heads-schedule and -o alone.
    RunRecord a, b;
    REQUIRE(read_run_record(dir + "/uniform-uniform-s1", a));
    REQUIRE(read_run_record(dir + "/1_2-uniform-s1", b));
    REQUIRE(a.args.size() == b.args.size());
    for (size_t i = 0; i < a.args.size(); i++)
        if (a.args[i].first != "--heads-schedule" && a.args[i].first != "--out") CHECK(a.args[i] == b.args[i]);

    // Rerun: everything skipped. --only 2 after its directory is removed: that run alone.
    Result again = sh(study);
    CHECK(again.rc == 0);
    CHECK(again.out.find("(4 done)") != std::string::npos);
    // Issue 43 #5: evals are done only when every file they write is there: eval.json alone (the samples lost to a
    // full disk) has them run again, for that run alone.
    REQUIRE(sh("rm " + dir + "/1_2-uniform-s1/samples.jsonl").rc == 0);
    Result l3 = sh(base + " --list" + trainer);
    CHECK(has(l3.out, "\n2\tdone+eval\t"));
    CHECK(has(l3.out, "\n1\tdone\t"));
    Result redo = sh(study);
    INFO(redo.out);
    CHECK(redo.rc == 0);
    CHECK(has(redo.out, "[2/4] 1_2-uniform-s1: zero-shot evals"));
    CHECK(!has(redo.out, "[1/4] uniform-uniform-s1: zero-shot evals"));
    CHECK(has(read_text(dir + "/1_2-uniform-s1/samples.jsonl"), "{\"task\": \"hellaswag\", \"index\": 0"));
    sh("rm -rf " + dir + "/uniform-uniform-s2");
    Result only = sh(base + " --only 3" + trainer);
    INFO(only.out);
    CHECK(only.rc == 0);
    CHECK(only.out.find("[3/4] uniform-uniform-s2: training") != std::string::npos);
    CHECK(only.out.find("[1/4]") == std::string::npos);
    // A study whose flags changed does not mix its runs with the old ones.
    Result changed = sh(study + " --lr 0.02");
    CHECK(one_line_error(changed));
    CHECK(
        changed.out.find("is done with other flags than this study's: --lr 0.02 differs from the recorded --lr 0.01") !=
        std::string::npos);
    // Issue 43 #7: rerun with another length, a finished run is not resumed to it (its lr curve would be two
    // schedules): refused, naming the run, and no run changes.
    const std::string before = read_text(dir + "/uniform-uniform-s1/log.jsonl");
    Result longer = sh(base + " -- " + m + " --steps 8");
    CHECK(one_line_error(longer));
    CHECK(has(longer.out,
              "/uniform-uniform-s1 is done at --steps 6 and this study asks for --steps 8; a study never "
              "changes a finished run"));
    CHECK(read_text(dir + "/uniform-uniform-s1/log.jsonl") == before);
    // The report groups the study by heads and shows the evals' metrics with their paired differences.
    Result rep = sh("./report " + dir + "/* -o " + dir + "/r.html");
    INFO(rep.out);
    CHECK(rep.rc == 0);
    CHECK(rep.out.find("heads uniform (baseline)") != std::string::npos);
    CHECK(rep.out.find("hellaswag acc") != std::string::npos);
    // Bad input: one line each.
    for (const std::string& bad :
         {std::string("./study"), "./study " + dir + " --recipe nope", "./study " + dir + " --seeds 0",
          "./study " + dir + " -- --resume", "./study " + dir + " --list --only 9 -- " + m}) {
        Result e = sh(bad);
        INFO(bad << ": " << e.out);
        CHECK(one_line_error(e));
    }
    sh("rm -rf '" + data + "'");
}

namespace {

// The study command of the signal and log tests: one run of the micro model (2 layers), long enough to be
// stopped, no evals. `extra` goes before `--`.
std::string study_cmd(const std::string& data, const std::string& dir, const std::string& extra = "") {
    std::string m = micro(data, "X");
    m = m.substr(std::string("./train_prism ").size(), m.find(" -o ") - std::string("./train_prism ").size());
    return "./study " + dir + " --heads uniform --seeds 1 --eval-data " + data + "/noevals " + extra + " -- " + m +
           " --sample-every 0 --steps 100000";
}

size_t count(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) n++;
    return n;
}

std::string fs_cwd() {
    char b[4096];
    return getcwd(b, sizeof b) ? b : ".";
}

// A shell loop waiting (up to 60 s) for `cond`.
std::string wait_until(const std::string& cond) {
    return "n=0; until " + cond + " || [ $n -ge 6000 ]; do sleep 0.01; n=$((n+1)); done; ";
}

}  // namespace

TEST_CASE(
    "study is a good parent: a stop signal reaches the trainer and the study exits with its code; a study "
    "killed outright stops its trainer; a live trainer is named as the reason",
    "[study][cli][signals]") {
    const std::string data = make_data_dir(), dir = data + "/s", run = dir + "/uniform-uniform-s1",
                      cmd = study_cmd(data, dir), logged = "[ -s " + run + "/log.jsonl ]";
    // SIGTERM to the study (Slurm's --signal=B:TERM with exec): the trainer checkpoints, the study exits 75 after it.
    Result t = sh("(" + cmd + " > " + data + "/t.txt 2>&1 & pid=$!; " + wait_until(logged) +
                  "kill -TERM $pid; wait $pid; echo \"study exit $?\"; cat " + data + "/t.txt)");
    INFO(t.out);
    CHECK(t.out.find("study exit 75") != std::string::npos);
    CHECK(t.out.find("study: uniform-uniform-s1 was stopped (exit 75); rerun the same command to continue") !=
          std::string::npos);
    const std::string log1 = read_text(run + "/train.log");
    CHECK(log1.find("stopped by SIGUSR1 after step ") != std::string::npos);
    CHECK(access((run + "/latest").c_str(), F_OK) == 0);
    CHECK(sh("pgrep -f -- '^[.]/train_prism .*-o " + run + " '").rc != 0);  // no trainer left

    // kill -9 to the study: the trainer is told by the kernel (its parent died) and stops with a checkpoint.
    const std::string before = read_text(run + "/latest");
    Result k = sh("(" + cmd + " > " + data + "/k.txt 2>&1 & pid=$!; " +
                  wait_until("grep -q 'resumed from' " + run + "/train.log") +
                  "sleep 1; echo \"trainer $(sed "
                  "'s/^pid \\([0-9]*\\).*/\\1/' " +
                  run + "/lock)\"; kill -9 $pid; wait $pid; echo \"study exit $?\")");
    INFO(k.out);
    CHECK(k.out.find("study exit 137") != std::string::npos);
    const size_t at = k.out.find("trainer ");
    REQUIRE(at != std::string::npos);
    const std::string tpid = k.out.substr(at + 8, k.out.find('\n', at) - at - 8);
    REQUIRE(!tpid.empty());
    CHECK(sh(wait_until("! kill -0 " + tpid + " 2>/dev/null") + "kill -0 " + tpid + " 2>/dev/null").rc != 0);
    const std::string log2 = read_text(run + "/train.log");
    CHECK(log2.rfind("stopped by SIGUSR1 after step ") > log2.rfind("resumed from"));
    CHECK(read_text(run + "/latest") != before);

    // A trainer still running in the run's directory (started by hand, or left by an older study): the study's
    // reason is the trainer's own error naming it, not the live one's progress lines in the same log.
    Result l = sh(study_cmd(data, dir, "--list"));
    REQUIRE(l.rc == 0);
    std::string line = l.out.substr(l.out.find('\t', l.out.find('\t') + 1) + 1);
    line = line.substr(0, line.find('\n'));
    Result u = sh("(" + line + " >> " + run + "/train.log 2>&1 & pid=$!; " +
                  wait_until("[ -s " + run + "/lock ] && grep -q \"pid $pid \" " + run + "/lock") + "sleep 1; " + cmd +
                  "; echo \"study exit $?\"; kill -TERM $pid; wait $pid; echo \"live exit $?\")");
    INFO(u.out);
    CHECK(u.out.find("study exit 1") != std::string::npos);
    CHECK(u.out.find("live exit 75") != std::string::npos);
    CHECK(u.out.find("study: uniform-uniform-s1 failed (exit 1): train_prism: error: " + run +
                     " is in use by another train_prism (pid ") != std::string::npos);

    // A --trainer script that runs the trainer without exec dies of the stop signal itself; what it left
    // running is stopped and waited for by the study (its subreaper), not left training in the run's directory.
    {
        std::ofstream w(data + "/wrap.sh");
        w << "#!/bin/sh\n" << fs_cwd() << "/train_prism \"$@\"\n";
    }
    sh("chmod +x " + data + "/wrap.sh");
    const size_t stops = count(read_text(run + "/train.log"), "stopped by SIGUSR1");
    Result g =
        sh("(" + study_cmd(data, dir, "--trainer " + data + "/wrap.sh") + " > " + data + "/g.txt 2>&1 & pid=$!; " +
           wait_until("[ \"$(grep -c '^step' " + run + "/train.log)\" -gt " +
                      std::to_string(count(read_text(run + "/train.log"), "\nstep")) + " ]") +
           "kill -TERM $pid; wait $pid; echo \"study exit $?\"; pgrep -f -- '^/[^ ]*/train_prism .*-o " + run +
           " ' || echo 'no trainer left')");
    INFO(g.out);
    // The script's own end (138, 128 + SIGUSR1) is named, and the study still exits 75: a stop is always 75, so
    // a scheduler's `[ $? -eq 75 ] && requeue` continues it (issue 34 #3).
    CHECK(g.out.find("study exit 75") != std::string::npos);
    CHECK(read_text(data + "/g.txt").find("was stopped (exit 138); rerun the same command") != std::string::npos);
    CHECK(g.out.find("no trainer left") != std::string::npos);
    CHECK(count(read_text(run + "/train.log"), "stopped by SIGUSR1") == stops + 1);
    sh("rm -rf '" + data + "'");
}

TEST_CASE(
    "study: train.log is a regular file of the run's own; a failed run's reason is its own error line, and "
    "a log that cannot be written says so",
    "[study][cli][trainlog]") {
    const std::string data = make_data_dir(), dir = data + "/s", run = dir + "/uniform-uniform-s1";
    REQUIRE(sh("mkdir -p " + run + " && echo mine > " + data + "/outside.txt").rc == 0);
    // A FIFO is refused at once (not waited on), a link is not followed, a second name of an outside file refused.
    for (const auto& [make, says] : std::vector<std::pair<std::string, std::string>>{
             {"mkfifo " + run + "/train.log", run + "/train.log is a FIFO, not the log the study writes; remove it"},
             {"ln -s " + data + "/outside.txt " + run + "/train.log",
              run + "/train.log is a symbolic link, not the log"},
             {"ln " + data + "/outside.txt " + run + "/train.log", run + "/train.log has 2 names (a hard link)"},
             {"mkfifo " + run + "/eval.log", run + "/eval.log is a FIFO"}}) {
        sh("rm -f " + run + "/train.log " + run + "/eval.log; " + make);
        Result r = sh("timeout 60 " + study_cmd(data, dir));
        INFO(make << ": " << r.out);
        CHECK(one_line_error(r));
        CHECK(r.out.find(says) != std::string::npos);
        CHECK(read_text(data + "/outside.txt") == "mine");
    }
    sh("rm -f " + run + "/train.log " + run + "/eval.log");

    // Stand-in trainers: the reason is the invocation's own error line, though a stray writer's progress follows
    // it (a trainer an older study left running); without one, the last line; an earlier invocation's error is
    // not this one's.
    auto stub = [&](const std::string& name, const std::string& body) {
        std::ofstream f(data + "/" + name);
        f << "#!/bin/sh\n" << body << "\n";
        f.close();
        sh("chmod +x " + data + "/" + name);
        return " --trainer " + data + "/" + name;
    };
    Result e = sh(study_cmd(data, dir,
                            stub("err.sh",
                                 "echo 'step 1/9 | loss 5'; echo 'train_prism: error: the real "
                                 "reason' >&2; echo 'step 1224/3000 | loss 3.1'; exit 1")));
    INFO(e.out);
    CHECK(e.rc == 1);
    CHECK(e.out.find("study: uniform-uniform-s1 failed (exit 1): train_prism: error: the real reason\n") !=
          std::string::npos);
    Result n = sh(study_cmd(data, dir, stub("noerr.sh", "echo 'step 1/9 | loss 5'; echo 'last words'; exit 3")));
    INFO(n.out);
    CHECK(n.out.find("study: uniform-uniform-s1 failed (exit 3): last words\n") != std::string::npos);
    Result q = sh(study_cmd(data, dir, stub("quiet.sh", "exit 2")));
    INFO(q.out);
    CHECK(q.out.find("failed (exit 2): no output in " + run + "/train.log\n") != std::string::npos);
    Result x = sh(study_cmd(data, dir, " --trainer " + data + "/nonexistent"));
    INFO(x.out);
    CHECK(x.out.find("failed (exit 127): study: error: cannot run " + data +
                     "/nonexistent: No such file or directory") != std::string::npos);
    // The log records each invocation's command and exit.
    const std::string log = read_text(run + "/train.log");
    CHECK(log.find("study: ") == 0);
    CHECK(log.find("/err.sh -m tiny -s uniform") != std::string::npos);
    CHECK(log.find("study: exit 127") != std::string::npos);

    // A full disk (here a file-size limit of 4 KiB): before the run, the run is not started; during it, the
    // reason says the log could not be written, beside the last line that was.
    sh("rm -f " + run + "/train.log; head -c 4096 /dev/zero > " + run + "/train.log");
    Result f1 = sh("ulimit -f 8; " + study_cmd(data, dir, stub("ok.sh", "exit 0")));
    INFO(f1.out);
    CHECK(f1.out.find("failed (exit 1): cannot write " + run +
                      "/train.log: File too large (over the file-size limit, "
                      "ulimit -f?); the run was not started") != std::string::npos);
    sh("rm -f " + run + "/train.log");
    Result f2 = sh("ulimit -f 8; " + study_cmd(data, dir,
                                               stub("fill.sh",
                                                    "i=0; while [ $i -lt 200 ]; do echo \"step $i/9 "
                                                    "| loss 5\"; i=$((i+1)); done; exit 1")));
    INFO(f2.out);
    CHECK(f2.out.find("failed (exit 1): step ") != std::string::npos);
    CHECK(f2.out.find("(and " + run + "/train.log cannot be written: File too large") != std::string::npos);
    sh("rm -rf '" + data + "'");
}

TEST_CASE("study refuses a grid of identical models; a head schedule that is the uniform one warns",
          "[study][cli][schedule]") {
    const std::string data = make_data_dir(), dir = data + "/s";
    std::string m = micro(data, "X");
    m = m.substr(std::string("./train_prism ").size(), m.find(" -o ") - std::string("./train_prism ").size());
    // 2 layers: -s prism is the uniform schedule; so is the list 2,2.
    for (const std::string heads : {"uniform,prism", "2x2,uniform", "uniform,uniform"}) {
        Result r = sh("./study " + dir + " --heads " + heads + " --seeds 1 -- " + m + " --steps 2");
        INFO(heads << ": " << r.out);
        CHECK(one_line_error(r));
        CHECK(
            r.out.find("give the same model here (2 layers, heads 2,2, widths 32,32): the study would compare a model "
                       "with itself") != std::string::npos);
    }
    // One model spelled two ways by a layer-column axis: global and a list of zeros are both global attention.
    Result g = sh("./study " + dir + " --heads uniform --grid window=global,0x2 --seeds 1 -- " + m + " --steps 2");
    INFO(g.out);
    CHECK(one_line_error(g));
    CHECK(g.out.find("resolve to the same run here (the same model and flags)") != std::string::npos);
    CHECK(!is_dir(dir));
    Result w = sh("./train_prism " + m + " -s prism --plan");
    INFO(w.out);
    CHECK(w.rc == 0);
    CHECK(w.out.find("warning: head schedule 'prism' gives every layer its baseline heads: this is the uniform model "
                     "(the Prism schedule needs 4 or more layers; this model has 2)\n") != std::string::npos);
    Result ok = sh("./train_prism " + m + " --layers 4 -s prism --plan");
    CHECK(ok.out.find("warning: head schedule") == std::string::npos);
    sh("rm -rf '" + data + "'");
}

namespace {

// The micro model's trainer flags without --lr (an axis of the grid tests), for `study ... -- FLAGS`.
std::string micro_flags_without_lr(const std::string& data) {
    std::string m = micro(data, "X");
    m = m.substr(std::string("./train_prism ").size(), m.find(" -o ") - std::string("./train_prism ").size());
    const size_t at = m.find(" --lr 1e-2");
    REQUIRE(at != std::string::npos);
    return m.erase(at, 10);
}

// The lines of `text` that start with `prefix`.

}  // namespace

namespace {
// n distinct values step, 2 step, ... comma-separated.
std::string many(int n, double step) {
    std::string s;
    for (int i = 1; i <= n; i++) {
        char b[32];
        snprintf(b, sizeof b, "%g", i * step);
        s += (s.empty() ? "" : ",") + std::string(b);
    }
    return s;
}
}  // namespace

TEST_CASE(
    "study --grid: any trainer flag as an axis, checked against the trainer's table; runs named by it; the "
    "grid printed with what overrides what",
    "[study][cli][grid]") {
    const std::string data = make_data_dir(), dir = data + "/s", m = micro_flags_without_lr(data);
    const std::string base = "./study " + dir + " --heads uniform,1/2 --seeds 2 --eval-data " + data + "/none";
    // Two axes: seeds outermost, then heads, widths and the axes in the order given; the values name the runs.
    Result l = sh(base + " --grid lr=1e-2,3e-2 --grid wd=0,0.1 --list -- " + m);
    INFO(l.out);
    REQUIRE(l.rc == 0);
    std::vector<std::string> listed;
    for (const std::string& line : lines_starting(l.out, ""))
        if (!line.empty() && isdigit((unsigned char)line[0])) listed.push_back(line);
    REQUIRE(listed.size() == 16);
    const std::vector<std::string> names = {"uniform-uniform-lr1e-2-wd0-s1", "uniform-uniform-lr1e-2-wd0.1-s1",
                                            "uniform-uniform-lr3e-2-wd0-s1", "uniform-uniform-lr3e-2-wd0.1-s1",
                                            "1_2-uniform-lr1e-2-wd0-s1",     "1_2-uniform-lr1e-2-wd0.1-s1",
                                            "1_2-uniform-lr3e-2-wd0-s1",     "1_2-uniform-lr3e-2-wd0.1-s1"};
    for (size_t k = 0; k < 16; k++) {
        INFO(listed[k]);
        std::string name = names[k % 8];
        name.back() = k < 8 ? '1' : '2';
        const std::string lr = k % 8 % 4 < 2 ? "1e-2" : "3e-2", wd = k % 2 ? "0.1" : "0";
        CHECK(listed[k].rfind(std::to_string(k + 1) + "\tnew\t./train_prism -m tiny -s " +
                                  (k % 8 < 4 ? "uniform" : "1,2") + " -w uniform --seed " + (k < 8 ? "1" : "2") +
                                  " -o " + dir + "/" + name + " --lr " + lr + " --wd " + wd + " --vocab 256",
                              0) == 0);
    }
    // The grid and its cost on stderr, stdout one line per run.
    CHECK(l.out.find("grid: 2 heads x 1 widths x 2 lr x 2 wd x 2 seeds = 16 runs\n") != std::string::npos);
    CHECK(l.out.find("\n  lr      1e-2,3e-2                (command line)\n") != std::string::npos);
    CHECK(l.out.find("\n  widths  uniform                  (default)\n") != std::string::npos);
    CHECK(l.out.find("8 configurations x 2 seeds = 16 runs (0 done)") != std::string::npos);
    CHECK(l.out.find("wall time on this machine: measured after the first run's first steps\n") != std::string::npos);
    Result quiet = sh("(" + base + " --grid lr=1e-2,3e-2 --list -- " + m + " 2>/dev/null)");
    CHECK(lines_starting(quiet.out, "").size() == 8);

    // Bad axes: one line each, naming the problem.
    for (const auto& [grid, says] : std::vector<std::pair<std::string, std::string>>{
             {"--grid nope=1,2", "--grid nope=1,2: train_prism has no flag --nope"},
             {"--grid lr", "--grid lr: give a trainer flag and its values, e.g. --grid lr=3e-4,6e-4,1e-3"},
             {"--grid lr=", "--grid lr=: no values"},
             {"--grid lr=1e-2,0.01", "1e-2 and 0.01 are the same value of --lr; give each value once"},
             {"--grid lr=1e-2,1e-2", "1e-2 is given twice"},
             {"--grid lr=1e-2,99", "--grid lr=1e-2,99: --lr must lie in [0, 10]"},
             {"--grid seed=1,2", "the study sets --seed of every run itself (--seeds)"},
             {"--grid s=uniform,prism", "the study sets --heads-schedule of every run itself (--heads)"},
             {"--grid out=a,b", "the study sets --out of every run itself"},
             {"--grid steps=5,10", "--steps is not compared between runs (a resume may change it)"},
             {"--grid tokens=5,10", "--tokens is not compared between runs (the run record does not keep it)"},
             {"--grid no-shuffle=1", "--no-shuffle is a switch, with no values to sweep"},
             {"--grid tokenizer=x/y,x_y", "two runs of the grid would both be named uniform-uniform-tokenizerx_y-s1"},
             {"--grid lr=1e-2 --grid --lr=2e-2", "--lr is an axis already; give it once"},
             {"--grid wd=0,0.1 -- --wd 0.2", "--grid wd=0,0.1: --wd is also given after --; give it in one place"},
             // Issue 43 #6: a grid counted from its axes before it is built; a newline in a run directory's name.
             {"--grid lr=" + many(100, 1e-4) + " --grid wd=" + many(300, 1e-4),
              "the grid has 120000 runs (2 seeds x 2 heads x 1 widths x 100 lr x 300 wd), more than the 100000 a "
              "study runs"},
             {"--grid \"$(printf 'tokenizer=x\\ny,z')\"",
              "tokenizer value \"x\\u000ay\" holds a control character (a newline?)"}}) {
        const size_t dd = grid.find(" -- ");
        Result r = sh(base + " --list " + grid.substr(0, dd) + " -- " + m +
                      (dd == std::string::npos ? "" : grid.substr(dd + 3)));
        INFO(grid << ": " << r.out);
        CHECK(one_line_error(r));
        CHECK(r.out.find("study: error: ") != std::string::npos);
        CHECK(r.out.find(says) != std::string::npos);
    }
    // An empty value is a value (the baseline of a list flag): two runs, --no-rope '' and --no-rope 1.
    Result nr = sh("(" + base + " --heads uniform --grid no-rope=,1 --list -- " + m + " 2>/dev/null)");
    INFO(nr.out);
    CHECK(nr.rc == 0);
    CHECK(has(nr.out, "/uniform-uniform-no-rope-s1 --no-rope '' --vocab"));
    CHECK(has(nr.out, "/uniform-uniform-no-rope1-s1 --no-rope 1 --vocab"));
    CHECK(lines_starting(nr.out, "").size() == 4);
    // With dashes or without: the same axis.
    Result dashed = sh("(" + base + " --grid --lr=1e-2,3e-2 --list -- " + m + " 2>/dev/null)");
    CHECK(dashed.out == quiet.out);

    // A recipe with overrides: each part's source, the recipe's value beside the one that replaces it, the recipe's
    // other axes kept; a recipe flag an axis or `--` gives again is replaced, not repeated.
    Result o = sh("./study " + dir + " --recipe tiny-lr --heads uniform --grid wd=0,0.1 --seeds 1 --eval-data " + data +
                  "/none --list -- --steps 2");
    INFO(o.out);
    REQUIRE(o.rc == 0);
    CHECK(o.out.find("grid: 1 heads x 1 widths x 3 lr x 2 wd x 1 seed = 6 runs\n") != std::string::npos);
    CHECK(o.out.find("\n  heads   uniform                  (command line; recipe tiny-lr: uniform,prism)\n") !=
          std::string::npos);
    CHECK(o.out.find("\n  lr      1.5e-3,3e-3,6e-3         (recipe tiny-lr)\n") != std::string::npos);
    CHECK(o.out.find("\n  wd      0,0.1                    (command line)\n") != std::string::npos);
    CHECK(o.out.find("\n  seeds   1                        (command line; recipe tiny-lr: 2)\n") != std::string::npos);
    CHECK(o.out.find("\n  --steps 60 of recipe tiny-lr is replaced by --steps 2 (after --)\n") != std::string::npos);
    CHECK(o.out.find("6\tnew\t./train_prism -m tiny -s uniform -w uniform --seed 1 -o " + dir +
                     "/uniform-uniform-lr6e-3-wd0.1-s1 --lr 6e-3 --wd 0.1 -b 8 --val-every 20 --val-tokens 4096 "
                     "--sample-every 0 --steps 2\n") != std::string::npos);
    CHECK(count(o.out, "--steps 60") == 1);  // in the override's line only, in no run's command
    Result o2 = sh("(./study " + dir + " --recipe tiny-lr --grid lr=1e-3,2e-3 --list 2>&1 >/dev/null)");
    CHECK(o2.out.find("\n  lr      1e-3,2e-3                (command line; recipe tiny-lr: 1.5e-3,3e-3,6e-3)\n") !=
          std::string::npos);
    Result o3 = sh("(./study " + dir + " --recipe tiny-lr --list -- --lr 1e-3 2>&1 >/dev/null)");
    CHECK(o3.out.find("grid: 2 heads x 1 widths x 2 seeds = 4 runs\n") != std::string::npos);
    CHECK(o3.out.find("\n  the axis lr 1.5e-3,3e-3,6e-3 of recipe tiny-lr is replaced by --lr 1e-3 (after --)\n") !=
          std::string::npos);
    // The papers' recipes sweep lr around the default for their size, and their cost covers the axis: three
    // times the runs of one rate.
    Result p = sh("(./study " + dir + " --recipe prism124m --list 2>&1 >/dev/null)");
    Result p1 = sh("(./study " + dir + " --recipe prism124m --list -- --lr 6e-4 2>&1 >/dev/null)");
    INFO(p.out << p1.out);
    CHECK(p.out.find("\n  lr      3e-4,6e-4,1.2e-3         (recipe prism124m)\n") != std::string::npos);
    CHECK(p.out.find("6 configurations x 3 seeds = 18 runs") != std::string::npos);
    auto hours = [](const std::string& t) {
        const size_t at = t.find("estimated cost: ");
        return at == std::string::npos ? NAN : std::strtod(t.c_str() + at + 16, nullptr);
    };
    CHECK(hours(p.out) == Approx(3 * hours(p1.out)).epsilon(0.01));
    sh("rm -rf '" + data + "'");
}

TEST_CASE(
    "study --grid end to end: the axis trained, a rerun skips it, a new value adds its runs; wall time "
    "measured on this machine",
    "[study][cli][grid]") {
    const std::string data = make_data_dir(), dir = data + "/s", m = micro_flags_without_lr(data);
    const std::string base = "./study " + dir + " --heads uniform --eval-data " + data + "/none --seeds ";
    Result r = sh(base + "1 --grid lr=1e-2,2e-2 -- " + m + " --steps 6");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    CHECK(r.out.find("wall time on this machine: measured after the first run's first steps\n") != std::string::npos);
    CHECK(r.out.find("[1/2] wall time left: ") != std::string::npos);
    CHECK(r.out.find(" on this machine for the 1 run to do (measured: ") != std::string::npos);
    CHECK(r.out.find(" tok/s on uniform-uniform-lr1e-2-s1, validation included; evals not counted)\n") !=
          std::string::npos);
    for (const char* lr : {"1e-2", "2e-2"}) {
        RunRecord rec;
        REQUIRE(read_run_record(dir + "/uniform-uniform-lr" + lr + "-s1", rec));
        CHECK(rec.status() == "done");
        CHECK(rec.arg("--lr") == (lr[0] == '1' ? "0.01" : "0.02"));
    }
    // Rerun with a second seed and a third value: the done runs are skipped, the new ones' time is measured on
    // the runs already here.
    Result again = sh(base + "2 --grid lr=1e-2,2e-2,4e-2 -- " + m + " --steps 6");
    INFO(again.out);
    REQUIRE(again.rc == 0);
    CHECK(again.out.find("3 configurations x 2 seeds = 6 runs (2 done)") != std::string::npos);
    CHECK(again.out.find("wall time: ") != std::string::npos);
    CHECK(again.out.find("on this machine for the 4 runs to do (measured: ") != std::string::npos);
    CHECK(again.out.find("[1/6] uniform-uniform-lr1e-2-s1: done already, skipped") != std::string::npos);
    CHECK(again.out.find("[3/6] uniform-uniform-lr4e-2-s1: training") != std::string::npos);
    Result done = sh(base + "2 --grid lr=1e-2,2e-2,4e-2 -- " + m + " --steps 6");
    CHECK(done.out.find("wall time on this machine: nothing left to train\n") != std::string::npos);
    // The report compares the arm at its best lr over the two seeds.
    Result rep = sh("./report " + dir + " -o " + data + "/r.html");
    INFO(rep.out);
    CHECK(rep.rc == 0);
    CHECK(rep.out.find("each arm at its best lr, chosen on final validation loss (mean over 2 seeds):\n") !=
          std::string::npos);
    sh("rm -rf '" + data + "'");
}

// Issue 28's recipes. Each listed run's command is parsed by the trainer's own flag table and built as
// train_prism builds it, so the arms' parameters come from the model's accounting (model_config.h's account).
namespace {
struct ListedRun {
    std::string name, command;
    TrainOptions o;
    ModelConfig cfg;
};
std::vector<ListedRun> listed_runs(const std::string& args) {
    std::vector<ListedRun> runs;
    std::istringstream lines(sh("(./study " + args + " --list 2>/dev/null)").out);
    for (std::string line; std::getline(lines, line);) {
        ListedRun r;
        r.command = line.substr(line.rfind('\t') + 1);
        std::istringstream words(r.command);
        std::vector<std::string> av;
        for (std::string w; words >> w;) av.push_back(w);  // no value of these recipes needs quoting
        for (size_t i = 0; i + 1 < av.size(); i++)
            if (av[i] == "-o") r.name = av[i + 1].substr(av[i + 1].rfind('/') + 1);
        std::vector<char*> argv;
        for (std::string& w : av) argv.push_back(&w[0]);
        std::vector<Flag> flags = make_train_flags(r.o);
        parse_flags((int)argv.size(), argv.data(), flags, "train_prism");
        std::vector<std::string> warnings;
        r.cfg = build_config(r.o.model, warnings);
        runs.push_back(r);
    }
    return runs;
}
// args, then trainer flags after `--` (after).
double gpu_hours(const std::string& args, const std::string& after = "") {
    const std::string t =
        sh("(./study " + args + " --list" + (after.empty() ? "" : " -- " + after) + " 2>&1 >/dev/null)").out;
    const size_t at = t.find("estimated cost: ");
    return at == std::string::npos ? NAN : std::strtod(t.c_str() + at + 16, nullptr);
}
bool has_words(const std::string& command, const std::string& words) {
    return (command + " ").find(" " + words + " ") != std::string::npos;
}
}  // namespace

TEST_CASE("recipes openelm124m and tiny-openelm: heads x MLP schedules at equal parameters, with their GPU-hours",
          "[study]") {
    const std::string dir = make_data_dir();
    for (const std::string recipe : {"openelm124m", "tiny-openelm"}) {
        INFO(recipe);
        const bool paper = recipe == "openelm124m";
        const std::vector<ListedRun> runs = listed_runs(dir + "/st --recipe " + recipe);
        const std::vector<std::string> lrs =
            paper ? std::vector<std::string>{"3e-4", "6e-4", "1.2e-3"} : std::vector<std::string>{""};
        const int seeds = paper ? 3 : 2;
        REQUIRE(runs.size() == 3 * 2 * lrs.size() * seeds);
        size_t k = 0;  // seeds outermost, then heads, MLP, lr
        for (int s = 1; s <= seeds; s++)
            for (std::string heads : {"uniform", "prism", "openelm"})
                for (std::string mlp : {"uniform", "openelm"})
                    for (const std::string& lr : lrs) {
                        const ListedRun& r = runs[k++];
                        INFO(r.command);
                        CHECK(r.name ==
                              heads + "-uniform-mlp" + mlp + (lr.empty() ? "" : "-lr" + lr) + "-s" + std::to_string(s));
                        CHECK(has_words(r.command, "-m " + std::string(paper ? "124M" : "tiny")));
                        CHECK(has_words(r.command, "-s " + heads));
                        CHECK(has_words(r.command, "--mlp " + mlp));
                        CHECK(has_words(r.command, "--match mlp"));
                        CHECK(has_words(r.command, "--seed " + std::to_string(s)));
                        if (paper)
                            CHECK(has_words(r.command, "--lr " + lr + " --total-batch 524288 --tokens-per-param 25"));
                        else CHECK(has_words(r.command, "--steps 60 -b 8"));
                        // The arm is the model it claims: OpenELM's MLP grows with depth, its heads too; uniform
                        // keeps both flat.
                        const ModelConfig& c = r.cfg;
                        const int L = c.L();
                        CHECK((c.hidden_of(0) < c.hidden_of(L - 1)) == (mlp == "openelm"));
                        CHECK((c.layers[0].heads < c.layers[L - 1].heads) == (heads != "uniform"));
                        if (heads == "openelm")  // OpenELM's alpha from 0.5: the first layer at half the heads
                            CHECK(c.layers[0].heads == c.h_base / 2);
                        // Equal parameters: the layer matrices within one layer's rounding step of the MLP solver
                        // (3 w x mlp_multiple), and so the embeddings and the whole model too.
                        const Accounting a = account(c), u = account(uniform_baseline(c));
                        CHECK(std::llabs(a.matched_params - u.matched_params) <= 3LL * c.d * c.mlp_multiple);
                        CHECK(std::fabs((double)a.params / u.params - 1) < 0.01);
                    }
    }
    // Hours: openelm124m is 54 runs of 124M at equal parameters, three times prism124m's 18 (the MLPs' FLOPs
    // follow their parameters; attention is the same in every arm).
    const double h = gpu_hours(dir + "/st --recipe openelm124m"), p = gpu_hours(dir + "/st --recipe prism124m");
    INFO(h << " GPU-hours vs prism124m's " << p);
    CHECK(h > 0);
    CHECK(h == Approx(3 * p).epsilon(0.02));
    CHECK(gpu_hours(dir + "/st --recipe tiny-openelm") > 0);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("recipes window124m and tiny-window: global vs local/global 5:1 under uniform and Prism heads, cheaper",
          "[study]") {
    const std::string dir = make_data_dir();
    for (const std::string recipe : {"window124m", "tiny-window"}) {
        INFO(recipe);
        const bool paper = recipe == "window124m";
        const int W = paper ? 256 : 32;
        const std::vector<ListedRun> runs = listed_runs(dir + "/st --recipe " + recipe);
        REQUIRE(runs.size() == (paper ? 36u : 12u));
        size_t k = 0;
        for (int s = 1; s <= 3; s++)
            for (std::string heads : {"uniform", "prism"})
                for (bool local : {false, true})
                    for (int lr = 0; lr < (paper ? 3 : 1); lr++) {
                        const ListedRun& r = runs[k++];
                        INFO(r.command);
                        const std::string window = local ? "local:" + std::to_string(W) + ",5:1" : "global";
                        CHECK(r.name.rfind(heads + "-uniform-window" +
                                               (local ? "local:" + std::to_string(W) + "_5:1" : "global"),
                                           0) == 0);
                        CHECK(has_words(r.command, "--window " + window));
                        CHECK(has_words(r.command, "-s " + heads));
                        CHECK(has_words(r.command, "--seed " + std::to_string(s)));
                        // 5:1 from layer 1: five local layers then a global one, repeated (layers 6 and 12 of
                        // 124M, 6 of tiny); a window changes no parameter.
                        const ModelConfig& c = r.cfg;
                        for (int l = 0; l < c.L(); l++) CHECK(c.layers[l].window == (local && l % 6 != 5 ? W : 0));
                        const Accounting a = account(c), u = account(uniform_baseline(c));
                        CHECK(a.params == u.params);
                        if (local) {
                            CHECK(a.flops_per_token < u.flops_per_token);  // min(W, T) keys in the local layers
                            CHECK(a.kv_cache_bytes < u.kv_cache_bytes);
                        } else {
                            CHECK(a.flops_per_token == u.flops_per_token);
                        }
                    }
    }
    // The local arms cost less: window124m's hours are below twice those of its global half alone (-- --window
    // global replaces the axis), and above the global half's (the local arms still train every matrix).
    const double both = gpu_hours(dir + "/st --recipe window124m"),
                 global = gpu_hours(dir + "/st --recipe window124m", "--window global");
    INFO(both << " GPU-hours, global only " << global);
    CHECK(global > 0);
    CHECK(both < 2 * global);
    CHECK(both > 1.5 * global);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("study: runs a launcher trained on 2 ranks are done for the rerun, with 2 ranks' default global batch",
          "[study][cli][mpi]") {
    // study --launcher "srun -n 2" (or mpirun -np 2): each run records B x T x 2 tokens a step, the default for 2
    // ranks, while the study plans for one process; a rerun must find those runs done (it used to call them "done
    // with other flags": --total-batch 64 against the recorded 128).
    const std::string data = make_data_dir(), dir = data + "/study";
    const std::string m = study_cmd(data, dir).substr(study_cmd(data, dir).find(" -- ") + 4);
    const std::string study = "OMP_NUM_THREADS=1 ./study " + dir + " --heads uniform,1/2 --seeds 1 --eval-data " +
                              data + "/noevals --launcher 'mpirun --oversubscribe --allow-run-as-root -np 2' -- " +
                              m.substr(0, m.find(" --steps ")) + " -b 2 --steps 4";
    Result first = sh(study.substr(0, study.find(" -- ")) + " --only 1" + study.substr(study.find(" -- ")));
    INFO(first.out);
    REQUIRE(first.rc == 0);
    CHECK(read_text(dir + "/uniform-uniform-s1/train.log").find("2 ranks over MPI") != std::string::npos);
    Result again = sh(study);
    INFO(again.out);
    REQUIRE(again.rc == 0);
    CHECK(again.out.find("2 configurations x 1 seed = 2 runs (1 done)") != std::string::npos);
    CHECK(again.out.find("complete") != std::string::npos);
    RunRecord rec;
    REQUIRE(read_run_record(dir + "/1_2-uniform-s1", rec));
    CHECK(rec.status() == "done");
    CHECK(rec.arg("--total-batch") == "128");  // B 2 x T 32 x 2 ranks
    sh("rm -rf '" + data + "'");
}

TEST_CASE(
    "recipes hybrid124m, placement124m and tiny-hybrid: Gated DeltaNet 3:1 vs all-attention, Prism heads and where "
    "the attention layers sit, at equal parameters, with their GPU-hours",
    "[study][gdn]") {
    const std::string dir = make_data_dir();
    // Layer l (0-based) of an arm is attention exactly where its mixer puts it.
    const std::map<std::string, std::function<bool(int, int)>> attention_at = {
        {"attention", [](int, int) { return true; }},
        {"gdn:3:1", [](int l, int) { return l % 4 == 3; }},  // 124M: layers 4, 8, 12; tiny: layer 4 of 6
        {"attentionx3,gdnx9", [](int l, int) { return l < 3; }},
        {"gdnx4,attentionx3,gdnx5", [](int l, int) { return l >= 4 && l < 7; }},
        {"gdnx9,attentionx3", [](int l, int L) { return l >= L - 3; }},
    };
    struct Want {
        std::string recipe, preset;
        std::vector<std::string> heads, mixers, lrs;
        int seeds;
    };
    const std::vector<std::string> paper_lrs = {"3e-4", "6e-4", "1.2e-3"};
    for (const Want& w : std::vector<Want>{
             {"hybrid124m", "124M", {"uniform", "prism"}, {"attention", "gdn:3:1"}, paper_lrs, 3},
             {"placement124m",
              "124M",
              {"uniform"},
              {"attention", "gdn:3:1", "attentionx3,gdnx9", "gdnx4,attentionx3,gdnx5", "gdnx9,attentionx3"},
              paper_lrs,
              3},
             {"tiny-hybrid", "tiny", {"uniform"}, {"attention", "gdn:3:1"}, {""}, 2}}) {
        INFO(w.recipe);
        const std::vector<ListedRun> runs = listed_runs(dir + "/st --recipe " + w.recipe);
        REQUIRE(runs.size() == w.heads.size() * w.mixers.size() * w.lrs.size() * w.seeds);
        size_t k = 0;  // seeds outermost, then heads, mixer, lr
        for (int s = 1; s <= w.seeds; s++)
            for (const std::string& heads : w.heads)
                for (const std::string& mixer : w.mixers)
                    for (const std::string& lr : w.lrs) {
                        const ListedRun& r = runs[k++];
                        INFO(r.command);
                        std::string tag = mixer;
                        std::replace(tag.begin(), tag.end(), ',', '_');
                        CHECK(r.name == heads + "-uniform-mixer" + tag + (lr.empty() ? "" : "-lr" + lr) + "-s" +
                                            std::to_string(s));
                        CHECK(has_words(r.command, "-m " + w.preset));
                        CHECK(has_words(r.command, "-s " + heads));
                        CHECK(has_words(r.command, "--mixer " + mixer));
                        CHECK(has_words(r.command, "--match mlp"));
                        CHECK(has_words(r.command, "--seed " + std::to_string(s)));
                        if (!lr.empty()) CHECK(has_words(r.command, "--lr " + lr));
                        else CHECK(has_words(r.command, "--steps 120 -b 8"));
                        const ModelConfig& c = r.cfg;
                        int n_attention = 0;
                        for (int l = 0; l < c.L(); l++) {
                            INFO("layer " << l + 1);
                            CHECK(c.layers[l].gdn() == !attention_at.at(mixer)(l, c.L()));
                            n_attention += !c.layers[l].gdn();
                        }
                        // Every hybrid arm has the same count of attention layers (3 of 12; 1 of 6 at tiny).
                        if (mixer != "attention") CHECK(n_attention == (w.preset == "tiny" ? 1 : 3));
                        CHECK((c.layers[0].heads < c.layers[c.L() - 1].heads) == (heads == "prism"));
                        // Equal parameters: the layer matrices within one layer's rounding step of the MLP solver
                        // (3 w x mlp_multiple), the whole model within 1%; the same arm unmatched is not (a gdn
                        // layer's z, beta and decay projections add about 6% to the layer matrices).
                        const Accounting a = account(c), u = account(uniform_baseline(c));
                        const long long step = 3LL * c.d * c.mlp_multiple;
                        CHECK(std::llabs(a.matched_params - u.matched_params) <= step);
                        CHECK(std::fabs((double)a.params / u.params - 1) < 0.01);
                        if (mixer != "attention" && s == 1) {
                            TrainOptions o = r.o;
                            o.model.match.clear();
                            std::vector<std::string> warnings;
                            const Accounting unmatched = account(build_config(o.model, warnings));
                            CHECK(unmatched.matched_params - u.matched_params > 5 * step);
                        }
                    }
    }
    // Hours: the all-attention half of hybrid124m (-- --mixer attention replaces the axis) is prism124m's grid, so
    // its estimate too; the gdn arms' estimate is below the attention arms' (fewer FLOPs at T 1024) but close.
    const double hybrid = gpu_hours(dir + "/st --recipe hybrid124m"),
                 attention = gpu_hours(dir + "/st --recipe hybrid124m", "--mixer attention"),
                 prism = gpu_hours(dir + "/st --recipe prism124m");
    const double placement = gpu_hours(dir + "/st --recipe placement124m"),
                 placement_attention = gpu_hours(dir + "/st --recipe placement124m", "--mixer attention");
    INFO("hybrid124m " << hybrid << ", its attention half " << attention << ", prism124m " << prism
                       << "; placement124m " << placement << ", its attention arm " << placement_attention);
    CHECK(attention == Approx(prism).epsilon(0.01));
    CHECK(hybrid - attention < attention);
    CHECK(hybrid - attention > 0.8 * attention);
    CHECK(placement < 5 * placement_attention);
    CHECK(placement > 0.8 * 5 * placement_attention);
    CHECK(gpu_hours(dir + "/st --recipe tiny-hybrid") > 0);
    // The README's recipe table and docs/studies.md state these estimates.
    auto fixed = [](double x, int digits) {
        char b[32];
        snprintf(b, sizeof b, "%.*f", digits, x);
        return std::string(b);
    };
    const std::string readme = read_text("README.md");
    std::string studies;  // docs/studies.md with its lines joined
    for (std::istringstream in(read_text("docs/studies.md")); !in.eof();) {
        std::string line;
        std::getline(in, line);
        studies += " " + trim(line);
    }
    auto row = [&](const std::string& recipe) {
        const size_t at = readme.find("\n| `" + recipe + "` |");
        return at == std::string::npos ? std::string() : readme.substr(at + 1, readme.find('\n', at + 1) - at - 1);
    };
    CHECK(has(row("hybrid124m"),
              "| " + fixed(hybrid, 0) + " GPU-hours; the gdn arms' (" + fixed(hybrid - attention, 0) + ")"));
    CHECK(has(row("placement124m"), "| " + fixed(placement, 1) + " GPU-hours, the same caveat (the gdn arms: " +
                                        fixed(placement - placement_attention, 0) + ")"));
    CHECK(has(studies, "**" + fixed(hybrid, 0) + " GPU-hours**, of which the all-attention half is " +
                           fixed(attention, 1) + " (`prism124m`'s grid exactly) and the gdn half " +
                           fixed(hybrid - attention, 1) + " "));
    const std::string each =
        "**" + fixed(placement, 1) + " GPU-hours** (" + fixed(placement_attention, 1) + " for the all-attention arm, " +
        fixed(gpu_hours(dir + "/st --recipe placement124m", "--mixer gdn:3:1"), 1) + " for each placement";
    CHECK(has(studies, each));
    for (const char* mixer : {"attentionx3,gdnx9", "gdnx4,attentionx3,gdnx5", "gdnx9,attentionx3"})
        CHECK(gpu_hours(dir + "/st --recipe placement124m", std::string("--mixer ") + mixer) ==
              gpu_hours(dir + "/st --recipe placement124m", "--mixer gdn:3:1"));
    // The listing says which runs' cost prices GDN kernels no GPU has timed yet (issue 53).
    const std::string note = " of the runs have gdn layers: their cost is the cost model's estimate for GDN kernels";
    CHECK(has(sh("(./study " + dir + "/st --recipe hybrid124m --list 2>&1 >/dev/null)").out, "(18" + note));
    CHECK(has(sh("(./study " + dir + "/st --recipe placement124m --list 2>&1 >/dev/null)").out, "(36" + note));
    CHECK(!has(sh("(./study " + dir + "/st --recipe prism124m --list 2>&1 >/dev/null)").out, note));
    sh("rm -rf '" + dir + "'");
}
