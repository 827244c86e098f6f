// test_study.cpp: issue 20's pieces. The t distribution against published table values; the run record and
// `train_prism --resume -o OUT` alone (bit-identical to an uninterrupted run; a differing flag refused in one
// line); every flag of the table recorded; report's seed groups recomputed here from the runs' log.jsonl files
// by an independent computation; and the study tool end to end on a micro model (a grid run, rerun skips,
// --list, --only, an interrupted run resumed, zero-shot evals written and read back by report).
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "run/checkpoint.h"
#include "util/json.h"
#include "run/run_record.h"
#include "run/train_flags.h"
#include "train_loop.h"
#include "studies/stats.h"
#include "test/train_util.h"

TEST_CASE("every flag that shapes a run is in its record", "[study][record]") {
    TrainOptions o;
    std::vector<Flag> flags = make_train_flags(o);
    // Every conditional entry set, so that a flag missing from record_args shows.
    o.model.d = 32, o.model.L = 2, o.model.h_base = 2, o.model.head_dim = 16, o.model.T = 32, o.model.V = 256;
    o.model.mlp_ratio = 3, o.model.mlp_multiple = 16, o.model.norm = "rmsnorm", o.model.untied = 1;
    o.model.shape.k = 2, o.model.allow_ablation = true, o.T = 32, o.shuffle = false, o.sample_flag_given = true;
    o.model.no_rope = "2";
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

TEST_CASE("--resume -o OUT alone continues a run bit-identically; a differing flag is refused in one line",
          "[study][record][train]") {
    const std::string dir = make_data_dir();
    Result a = sh(micro(dir, dir + "/straight") + " --steps 24");
    INFO(a.out);
    REQUIRE(a.rc == 0);
    Result b1 = sh(micro(dir, dir + "/resumed") + " --steps 24 --stop-after 12");
    INFO(b1.out);
    REQUIRE(b1.rc == 0);
    REQUIRE(b1.out.find("continue with train_prism --resume -o " + dir + "/resumed") != std::string::npos);

    // A flag that differs from the record, one that was not in it, and a changed model: one line each.
    for (const auto& [flag, says] : std::vector<std::pair<std::string, std::string>>{
             {"--lr 0.02", "--resume: --lr 0.02 differs from the recorded --lr 0.01 ("},
             {"--no-shuffle", "--resume: --no-shuffle is not part of the recorded run"},
             {"--layers 3", "--resume: --layers 3 differs from the recorded --layers 2"},
             {"--total-batch 256", "--resume: --total-batch 256 differs from the recorded --total-batch 128"}}) {
        Result r = sh("./train_prism --resume -o " + dir + "/resumed " + flag);
        INFO(flag << ": " << r.out);
        CHECK(one_line_error(r));
        CHECK(r.out.find(says) != std::string::npos);
        CHECK(r.out.find("a resume may change only --out, --batch, --steps") != std::string::npos);
    }
    // The refusals changed nothing: the resume alone continues as if never interrupted.
    Result b2 = sh("./train_prism --resume -o " + dir + "/resumed");
    INFO(b2.out);
    REQUIRE(b2.rc == 0);
    REQUIRE(b2.out.find("resumed from " + dir + "/resumed/step_00000012 at step 12") != std::string::npos);
    auto la = read_log(dir + "/straight/log.jsonl"), lb = read_log(dir + "/resumed/log.jsonl");
    REQUIRE(la.size() == 24);
    REQUIRE(lb.size() == 24);
    for (long s = 1; s <= 24; s++) {
        INFO("step " << s);
        REQUIRE(losses_of(la[s]) == losses_of(lb[s]));
    }
    REQUIRE(load_model(dir + "/straight/model.bin").params == load_model(dir + "/resumed/model.bin").params);

    // The record: the resolved flags, the model, and one entry per invocation.
    RunRecord rec;
    REQUIRE(read_run_record(dir + "/resumed", rec));
    CHECK(rec.arg("--lr") == "0.01");
    CHECK(rec.arg("--steps") == "24");
    CHECK(rec.arg("--seed") == "1337");
    CHECK(rec.status() == "done");
    const json::Value* inv = rec.doc.find("invocations");
    REQUIRE(inv);
    REQUIRE(inv->arr.size() == 2);
    CHECK(json::str_field(inv->arr[0], "status") == "stopped");
    CHECK(json::int_field(inv->arr[0], "end_step") == 12);
    CHECK(json::int_field(inv->arr[1], "start_step") == 12);
    CHECK(json::str_field(inv->arr[1], "commit") != "");
    CHECK(json::field(inv->arr[1], "ended").kind == json::Value::String);
    const json::Value& layers = json::field(json::field(rec.doc, "model"), "layers");
    REQUIRE(layers.arr.size() == 2);
    CHECK(json::int_field(layers.arr[0], "layer") == 1);
    CHECK(json::int_field(layers.arr[0], "head_dim") == 16);

    // What may change: the length (continuing a finished run), and the cadence.
    Result c = sh("./train_prism --resume -o " + dir + "/resumed --steps 30 --val-every 3");
    INFO(c.out);
    REQUIRE(c.rc == 0);
    CHECK(read_log(dir + "/resumed/log.jsonl").size() == 30);
    REQUIRE(read_run_record(dir + "/resumed", rec));
    CHECK(rec.arg("--steps") == "30");
    CHECK(json::field(rec.doc, "invocations").arr.size() == 3);
    sh("rm -rf '" + dir + "'");
}

namespace {

// The validation losses of a log.jsonl, read with sscanf alone (not json.h, not run_log.h).
std::vector<double> val_losses(const std::string& path) {
    std::ifstream f(path);
    std::vector<double> v;
    std::string line;
    while (std::getline(f, line)) {
        const size_t at = line.find("\"val_loss\": ");
        double x;
        if (at != std::string::npos && sscanf(line.c_str() + at + 12, "%lf", &x) == 1) v.push_back(x);
    }
    return v;
}

}  // namespace

TEST_CASE("report's seed groups: the statistics recomputed from the runs' logs", "[study][report]") {
    char tmpl[] = "/tmp/prism_groups_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    // Two configurations x three seeds, and an unrecorded run of a fourth seed that must stay a group of its own.
    const double u[3][3] = {{6.9, 6.5, 6.31}, {6.8, 6.45, 6.28}, {7.0, 6.6, 6.40}};
    const double p[3][3] = {{6.85, 6.4, 6.25}, {6.8, 6.44, 6.29}, {6.9, 6.5, 6.33}};
    std::vector<std::string> dirs;
    for (int s = 0; s < 3; s++) {
        dirs.push_back(dir + "/uniform-s" + std::to_string(s + 1));
        write_recorded_run(dirs.back(), "uniform", {{"--lr", "0.003"}, {"--seed", std::to_string(s + 1)}},
                           {u[s][0], u[s][1], u[s][2]});
        dirs.push_back(dir + "/prism-s" + std::to_string(s + 1));
        write_recorded_run(dirs.back(), "prism", {{"--lr", "0.003"}, {"--seed", std::to_string(s + 1)}},
                           {p[s][0], p[s][1], p[s][2]});
    }
    Result r = sh("./report " + dir + "/prism-s1 " + dir + "/uniform-s1 " + dir + "/prism-s2 " + dir + "/uniform-s2 " +
                  dir + "/prism-s3 " + dir + "/uniform-s3 -o " + dir + "/r.html --json " + dir + "/r.json");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    CHECK(r.out.find("heads uniform (baseline)") != std::string::npos);  // the default baseline, though listed second

    // Independently: final and best validation loss per run from the logs, the groups' means and sample stds, and
    // the paired difference prism - uniform by seed with the tabled t_{0.975, 2} = 4.30265.
    auto mean = [](const std::vector<double>& v) {
        double s = 0;
        for (double x : v) s += x;
        return s / v.size();
    };
    auto sd = [&](const std::vector<double>& v) {
        const double m = mean(v);
        double s = 0;
        for (double x : v) s += (x - m) * (x - m);
        return std::sqrt(s / (v.size() - 1));
    };
    std::vector<double> uf, pf, ub, pb, df, db;
    for (int s = 1; s <= 3; s++) {
        const std::vector<double> a = val_losses(dir + "/uniform-s" + std::to_string(s) + "/log.jsonl");
        const std::vector<double> b = val_losses(dir + "/prism-s" + std::to_string(s) + "/log.jsonl");
        uf.push_back(a.back()), pf.push_back(b.back());
        ub.push_back(*std::min_element(a.begin(), a.end())), pb.push_back(*std::min_element(b.begin(), b.end()));
        df.push_back(pf.back() - uf.back()), db.push_back(pb.back() - ub.back());
    }
    const json::Value js = json::parse(read_text(dir + "/r.json"));
    CHECK(json::str_field(js, "baseline") == "heads uniform");
    const json::Value& groups = json::field(js, "groups");
    REQUIRE(groups.arr.size() == 2);
    auto num = [](const json::Value& o, const char* k) { return std::strtod(json::field(o, k).str.c_str(), nullptr); };
    for (const json::Value& g : groups.arr) {
        const bool prism = json::str_field(g, "label") == "heads prism";
        INFO(json::str_field(g, "label"));
        CHECK(json::field(g, "runs").arr.size() == 3);
        const json::Value& q = json::field(g, "quantities");
        const json::Value& fin = json::field(q, "final val loss");
        const json::Value& best = json::field(q, "best val loss");
        CHECK(num(fin, "mean") == Approx(mean(prism ? pf : uf)).epsilon(1e-7));
        CHECK(num(fin, "std") == Approx(sd(prism ? pf : uf)).epsilon(1e-6));
        CHECK(num(best, "mean") == Approx(mean(prism ? pb : ub)).epsilon(1e-7));
        if (!prism) {
            CHECK(fin.find("vs_baseline") == nullptr);
            continue;
        }
        for (const auto& [v, d] : {std::make_pair(&fin, &df), std::make_pair(&best, &db)}) {
            const json::Value& vs = json::field(*v, "vs_baseline");
            CHECK(json::int_field(vs, "n") == 3);
            CHECK(num(vs, "mean") == Approx(mean(*d)).epsilon(1e-6));
            const double half = 4.30265 * sd(*d) / std::sqrt(3.0);
            CHECK(num(vs, "lo") == Approx(mean(*d) - half).margin(1e-5));
            CHECK(num(vs, "hi") == Approx(mean(*d) + half).margin(1e-5));
        }
    }
    // The page shows the same numbers, and a band per group.
    const std::string html = read_text(dir + "/r.html");
    char want[64];
    snprintf(want, sizeof want, "%.4f ± %.4f", mean(pf), sd(pf));
    CHECK(html.find(want) != std::string::npos);
    CHECK(html.find("Validation loss, mean over seeds") != std::string::npos);
    CHECK(html.find("<polygon fill=\"currentColor\" fill-opacity=\"0.16\"") != std::string::npos);

    // --baseline by a run's name; an unknown one is one line naming the groups.
    Result b = sh("./report " + dirs[0] + " " + dirs[1] + " -o " + dir + "/b.html --baseline prism-s1");
    CHECK(b.rc == 0);
    CHECK(b.out.find("heads prism (baseline)") != std::string::npos);
    Result e = sh("./report " + dirs[0] + " " + dirs[1] + " -o " + dir + "/b.html --baseline nope");
    CHECK(one_line_error(e));
    CHECK(e.out.find("--baseline 'nope' is neither a group nor a run; the groups are 'heads uniform', 'heads prism'") !=
          std::string::npos);
    sh("rm -rf '" + dir + "'");
}

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
    CHECK(g.out.find("study exit 138") != std::string::npos);  // the script's own end: 128 + SIGUSR1
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
std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix) {
    std::vector<std::string> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line))
        if (line.rfind(prefix, 0) == 0) out.push_back(line);
    return out;
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
             {"--grid wd=0,0.1 -- --wd 0.2", "--grid wd=0,0.1: --wd is also given after --; give it in one place"}}) {
        const size_t dd = grid.find(" -- ");
        Result r = sh(base + " --list " + grid.substr(0, dd) + " -- " + m +
                      (dd == std::string::npos ? "" : grid.substr(dd + 3)));
        INFO(grid << ": " << r.out);
        CHECK(one_line_error(r));
        CHECK(r.out.find("study: error: ") != std::string::npos);
        CHECK(r.out.find(says) != std::string::npos);
    }
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

TEST_CASE("report: each arm at its best value of a swept flag, on validation loss averaged over seeds",
          "[study][report][sweep]") {
    char tmpl[] = "/tmp/prism_sweep_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    // Two arms x three rates x two seeds (the last cell of prism has one seed): uniform is best at 0.001 on
    // average though seed 2 alone prefers 0.003; prism is best at 0.003.
    const std::vector<std::string> lrs = {"0.003", "0.001", "0.01"};  // not in order: the table sorts them
    const std::map<std::string, std::vector<std::vector<double>>> val = {
        {"uniform", {{5.30, 5.10}, {5.00, 5.25}, {5.60, 5.70}}},  // [lr][seed], lrs' order
        {"prism", {{4.90, 4.96}, {5.20, 5.22}, {5.50}}}};
    for (const auto& [heads, v] : val)
        for (size_t i = 0; i < lrs.size(); i++)
            for (size_t s = 0; s < v[i].size(); s++)
                write_recorded_run(dir + "/" + heads + "-lr" + lrs[i] + "-s" + std::to_string(s + 1), heads,
                                   {{"--lr", lrs[i]}, {"--seed", std::to_string(s + 1)}}, {v[i][s] + 0.5, v[i][s]});
    Result r = sh("./report " + dir + " -o " + dir + "/r.html --json " + dir + "/r.json");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    {  // --json has the sweep: the values in order, each arm's best and every cell's n and mean
        const json::Value doc = json::parse(read_text(dir + "/r.json"));
        const json::Value* sw = doc.find("sweeps");
        REQUIRE((sw && sw->kind == json::Value::Array && sw->arr.size() == 1));
        const json::Value& s0 = sw->arr[0];
        CHECK(json::str_field(s0, "flag") == "--lr");
        const json::Value* values = s0.find("values");
        REQUIRE((values && values->arr.size() == 3));
        CHECK(values->arr[0].str == "0.001");
        CHECK(values->arr[2].str == "0.01");
        const json::Value* arms = s0.find("arms");
        REQUIRE((arms && arms->arr.size() == 2));
        for (const json::Value& a : arms->arr) {
            const std::string arm = json::str_field(a, "arm"), best = json::str_field(a, "best");
            CHECK(best == (arm == "heads prism" ? "0.003" : "0.001"));
            const json::Value* cells = a.find("cells");
            REQUIRE((cells && cells->arr.size() == 3));
            const std::vector<double>& at_best =
                val.at(arm == "heads prism" ? "prism" : "uniform")[best == "0.001" ? 1 : 0];
            double m = 0;
            for (double x : at_best) m += x / at_best.size();
            const json::Value& c = cells->arr[best == "0.001" ? 0 : 1];
            CHECK(json::int_field(c, "n") == (long)at_best.size());
            CHECK(std::fabs(std::strtod(c.find("mean")->str.c_str(), nullptr) - m) < 1e-9);
        }
    }
    // The expected rows, computed here: mean and sample std of each cell, the best the lowest mean.
    auto cell = [](const std::vector<double>& x) {
        double m = 0;
        for (double v : x) m += v;
        m /= x.size();
        char b[64];
        if (x.size() == 1) {
            snprintf(b, sizeof b, "%.4f (n 1)", m);
            return std::string(b);
        }
        double s = 0;
        for (double v : x) s += (v - m) * (v - m);
        snprintf(b, sizeof b, "%.4f ± %.4f (n %zu)", m, std::sqrt(s / (x.size() - 1)), x.size());
        return std::string(b);
    };
    const std::string head =
        "each arm at its best lr, chosen on final validation loss (mean over each value's "
        "seeds, n 1 to 2):\n";
    const size_t at = r.out.find(head);
    REQUIRE(at != std::string::npos);
    const std::string table = r.out.substr(at + head.size());
    // A row: the arm, its best lr and the loss there, the difference to the baseline arm at its best, then every
    // value's cell in lr order (0.001, 0.003, 0.01 = lrs' indices 1, 0, 2).
    auto check_row = [&](const std::string& arm, const std::string& best, const std::vector<std::vector<double>>& v,
                         const std::string& vs_base) {
        const std::vector<std::string> rows = lines_starting(table, arm + " ");
        REQUIRE(rows.size() == 1);
        INFO(rows[0]);
        char b[512];
        snprintf(b, sizeof b, "%-28s %-12s %-24s ", arm.c_str(), best.c_str(),
                 cell(v[best == "0.001" ? 1 : 0]).c_str());
        CHECK(rows[0].rfind(b, 0) == 0);
        CHECK(rows[0].find(vs_base, 28 + 12 + 24 + 3) == 28 + 12 + 24 + 3);
        snprintf(b, sizeof b, " | %-24s | %-24s | %-24s", cell(v[1]).c_str(), cell(v[0]).c_str(), cell(v[2]).c_str());
        CHECK(rows[0].size() >= strlen(b));
        CHECK(rows[0].compare(rows[0].size() - strlen(b), strlen(b), b) == 0);
    };
    check_row("heads uniform", "0.001", val.at("uniform"), "baseline");
    // prism at 0.003 against uniform at 0.001, by seed: 4.90 - 5.00 and 4.96 - 5.25.
    check_row("heads prism", "0.003", val.at("prism"), "-0.1950");
    CHECK(table.find("lr 0.001                 | lr 0.003                 | lr 0.01") != std::string::npos);
    // The page: the table with the method stated, the best cell marked, the sweep's chart with a line per arm.
    const std::string html = read_text(dir + "/r.html");
    CHECK(html.find("<h2>Each arm at its best lr</h2>") != std::string::npos);
    CHECK(html.find("Best lr chosen on final validation loss (mean over each value&#39;s seeds, n 1 to 2)") !=
          std::string::npos);
    CHECK(html.find("<td><b>" + cell(val.at("prism")[0]) + "</b></td>") != std::string::npos);
    CHECK(html.find("<title>Final validation loss against lr (mean over seeds)</title>") != std::string::npos);
    CHECK(html.find("log10 lr") != std::string::npos);
    CHECK(html.find("<g data-series=\"heads prism\"") != std::string::npos);

    // Runs that differ in their schedules alone: no sweep section.
    Result none = sh("./report " + dir + "/uniform-lr0.001-s1 " + dir + "/prism-lr0.001-s1 -o " + dir + "/n.html");
    CHECK(none.rc == 0);
    CHECK(none.out.find("each arm at its best") == std::string::npos);
    CHECK(read_text(dir + "/n.html").find("Each arm at its best") == std::string::npos);
    sh("rm -rf '" + dir + "'");
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
bool has(const std::string& command, const std::string& words) {
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
                        CHECK(has(r.command, "-m " + std::string(paper ? "124M" : "tiny")));
                        CHECK(has(r.command, "-s " + heads));
                        CHECK(has(r.command, "--mlp " + mlp));
                        CHECK(has(r.command, "--match mlp"));
                        CHECK(has(r.command, "--seed " + std::to_string(s)));
                        if (paper) CHECK(has(r.command, "--lr " + lr + " --total-batch 524288 --tokens-per-param 25"));
                        else CHECK(has(r.command, "--steps 60 -b 8"));
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
                        CHECK(has(r.command, "--window " + window));
                        CHECK(has(r.command, "-s " + heads));
                        CHECK(has(r.command, "--seed " + std::to_string(s)));
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

TEST_CASE("report's default baseline has every layer column uniform, not only heads and widths", "[study][report]") {
    char tmpl[] = "/tmp/prism_baseline_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    // Listed first: uniform heads and widths, but OpenELM's MLP scaling; the all-uniform group comes second.
    write_recorded_run(dir + "/u-openelm", "uniform", {{"--mlp", "openelm"}}, {6.9, 6.5});
    write_recorded_run(dir + "/u-uniform", "uniform", {{"--mlp", "uniform"}}, {6.8, 6.4});
    write_recorded_run(dir + "/u-window", "uniform", {{"--mlp", "uniform"}, {"--window", "local:8"}}, {6.7, 6.3});
    Result r = sh("./report " + dir + "/u-openelm " + dir + "/u-window " + dir + "/u-uniform -o " + dir + "/r.html");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    CHECK(r.out.find("mlp uniform, window - (baseline)") != std::string::npos);
    CHECK(r.out.find("mlp openelm, window - (baseline)") == std::string::npos);
    sh("rm -rf '" + dir + "'");
}
