// train_util.h: what the end-to-end tests of train_prism share (test_train.cpp, test_checkpoints.cpp,
// test_faults.cpp, test_out_dir.cpp, test_dist.cpp and others): synthetic shards, the micro model's command line, the
// log reader, the one-line-error check, a run in the background, the checkpoints in OUT, a snapshot of OUT's tree, a
// byte patch of a file, and
// check_resume, the end-to-end resume check every engine and launcher runs; and for the tests of what reads runs
// (report, study: test_study_report.cpp, test_stats.cpp), a recorded run directory written directly.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "dataloader.h"
#include "eval/eval_file.h"
#include "run/checkpoint.h"
#include "run/run_record.h"
#include "run/step_dirs.h"
#include "test/test_util.h"
#include "util/fs.h"
#include "util/io.h"

// A fresh directory with a train and a val shard of a repetitive token stream over a vocabulary of 256.
inline std::string make_data_dir() {
    char tmpl[] = "/tmp/prism_train_test_XXXXXX";
    std::string dir = mkdtemp(tmpl);
    std::vector<int> train, val;
    uint64_t s = 7;
    for (int i = 0; i < 40000; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        // Mostly a counting pattern (learnable), sometimes noise: the loss must fall but never hit zero.
        int tok = (s >> 60) < 3 ? (int)((s >> 33) % 256) : (i * 7) % 256;
        (i < 4000 ? val : train).push_back(tok);
    }
    write_shard(dir + "/syn_val_000000.bin", val);
    write_shard(dir + "/syn_train_000001.bin", train);
    return dir;
}

// A piqa eval file for the micro model's vocabulary of 256 (--eval-task piqa --eval-data DIR; eval_zeroshot
// --tasks piqa --data DIR): `n` two-choice examples, tokens below 256.
inline void write_micro_eval_file(const std::string& path, int n = 1) {
    EvalFile f;
    f.task = "piqa", f.kind = EvalKind::Choice, f.has_norm = true, f.V = 256, f.eot = 255, f.fingerprint = 7;
    for (int i = 0; i < n; i++) {
        EvalExample e;
        e.tokens = {10 + i % 200, 11, 12, 13, 14 + i % 100};
        e.req = {{0, 3, 3, 4, 1}, {0, 3, 4, 5, 1}};
        e.gold = i % 2, e.words = 1, e.bytes = 4;
        f.ex.push_back(e);
    }
    save_eval_file(path, f);
}

inline std::string micro(const std::string& dir, const std::string& out) {
    return "./train_prism --vocab 256 --d 32 --layers 2 --heads 2 --seq-len 32 -b 4 --lr 1e-2 --val-every 10 "
           "--val-tokens 256 --train '" +
           dir + "/syn_train_*.bin' --val '" + dir + "/syn_val_*.bin' -o " + out;
}

// step -> the full JSON line, from OUT/log.jsonl
inline std::map<long, std::string> read_log(const std::string& path) {
    std::ifstream f(path);
    std::map<long, std::string> m;
    std::string line;
    while (std::getline(f, line)) {
        long step = -1;
        REQUIRE(sscanf(line.c_str(), "{\"step\": %ld", &step) == 1);
        m[step] = line;
    }
    return m;
}

// The loss fields of a log line (train and val loss, lr and norm, without timings).
inline std::string losses_of(const std::string& line) { return line.substr(0, line.find(", \"tokens_per_s\"")); }

// A failed run: non-zero exit, and the error is the output's last line, the only one saying "error:" (what
// the run printed before finding the problem, such as the model summary, may precede it).
inline bool one_line_error(const Result& r) {
    size_t at = r.out.find("error:");
    if (r.rc == 0 || at == std::string::npos || r.out.find("error:", at + 1) != std::string::npos) return false;
    size_t eol = r.out.find('\n', at);
    return eol == r.out.size() - 1;
}

// A run started in the background: its command, with `until` a shell condition it waits for before returning.
// Returns the pid (as text) in $pid of the following shell commands.
inline std::string background(const std::string& cmd, const std::string& log, const std::string& until) {
    return "(" + cmd + " > " + log + " 2>&1 & pid=$!; n=0; while kill -0 $pid 2>/dev/null && ! (" + until +
           ") && [ $n -lt 3000 ]; do sleep 0.01; n=$((n+1)); done; ";
}

// The step_* directories of OUT, as one string ("step_00000002 step_00000004").
inline std::string checkpoints_in(const std::string& out) {
    Result r = sh("cd '" + out + "' && ls -d step_* 2>/dev/null | tr '\\n' ' '");
    return r.out.empty() ? "" : r.out.substr(0, r.out.size() - 1);
}

// A snapshot of OUT for comparing trees: every name with its kind, link target and size, and every regular file's
// bytes (md5), the lock's note aside (it names the last process that held OUT, whatever that process decided).
inline std::string tree_of(const std::string& out) {
    Result r = sh("cd '" + out +
                  "' && find . ! -name lock -printf '%p %y %l %s\\n' | sort && "
                  "find . -type f ! -name lock -exec md5sum {} + | sort");
    REQUIRE(r.rc == 0);
    return r.out;
}

// Overwrites `n` bytes of a file at `offset`.
inline void poke(const std::string& path, long offset, const void* bytes, size_t n) {
    FILE* f = fopen(path.c_str(), "r+b");
    REQUIRE(f);
    fseek(f, offset, SEEK_SET);
    REQUIRE(fwrite(bytes, 1, n, f) == n);
    fclose(f);
}

// Two logs (log.jsonl) agree on every loss and norm of steps 1..last, to the last printed digit.
inline void require_same_losses(const std::string& log_a, const std::string& log_b, long last) {
    auto a = read_log(log_a), b = read_log(log_b);
    for (long s = 1; s <= last; s++) {
        INFO("step " << s);
        REQUIRE(a.count(s));
        REQUIRE(b.count(s));
        REQUIRE(losses_of(a[s]) == losses_of(b[s]));
    }
}

// A training command: train_prism (or another build of it, or mpirun of it) into OUT with `extra` flags.
using Train = std::function<Result(const std::string& out, const std::string& extra)>;

// What check_resume ran: each run's output, and the logs (step -> line) of the straight and the resumed run.
struct ResumedRuns {
    Result straight, stopped, resumed;
    std::map<long, std::string> straight_log, resumed_log;
};

// The end-to-end resume check, once per engine and launcher (test_checkpoints.cpp: the CPU engine, the CUDA engine
// on the executor; test_dist.cpp: mpirun) and reused by the tests that need a resumed run. `train` runs `steps` steps
// into DIR/straight, then into DIR/resumed stopped after `stop` steps, resumed by `resume` (by default `train` with
// --resume): the resume starts from step `stop`'s checkpoint, every step is logged once, every logged loss and norm
// is the straight run's to the last printed digit, and both end with the same parameters, bit for bit.
inline ResumedRuns check_resume(const std::string& dir, const Train& train, long steps, long stop,
                                const std::function<Result(const std::string& out)>& resume = nullptr) {
    const std::string a = dir + "/straight", b = dir + "/resumed", n = " --steps " + std::to_string(steps);
    ResumedRuns r;
    r.straight = train(a, n);
    INFO(r.straight.out);
    REQUIRE(r.straight.rc == 0);
    r.stopped = train(b, n + " --stop-after " + std::to_string(stop));
    INFO(r.stopped.out);
    REQUIRE(r.stopped.rc == 0);
    REQUIRE(has(r.stopped.out, "stopped after " + std::to_string(stop) + " steps"));
    r.resumed = resume ? resume(b) : train(b, n + " --resume");
    INFO(r.resumed.out);
    REQUIRE(r.resumed.rc == 0);
    REQUIRE(has(r.resumed.out, "resumed from " + b + "/" + step_dir_name(stop) + " at step " + std::to_string(stop)));
    r.straight_log = read_log(a + "/log.jsonl"), r.resumed_log = read_log(b + "/log.jsonl");
    REQUIRE(r.straight_log.size() == (size_t)steps);  // a line per step
    REQUIRE(r.resumed_log.size() == (size_t)steps);
    require_same_losses(a + "/log.jsonl", b + "/log.jsonl", steps);
    REQUIRE(load_model(a + "/model.bin").params == load_model(b + "/model.bin").params);
    return r;
}

// The lines of `text` that start with `prefix`.
inline std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix) {
    std::vector<std::string> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line))
        if (line.rfind(prefix, 0) == 0) out.push_back(line);
    return out;
}

// A finished run's record (run.json) in dir: tiny, heads `heads`, widths uniform, then `args`, --out and --steps.
inline void write_run_record(const std::string& dir, const std::string& heads,
                             const std::vector<std::pair<std::string, std::string>>& args, long steps) {
    RunRecordWriter w;
    w.dir = dir;
    w.args = {{"--model", "tiny"}, {"--heads-schedule", heads}, {"--widths", "uniform"}};
    w.args.insert(w.args.end(), args.begin(), args.end());
    w.args.insert(w.args.end(), {{"--out", dir}, {"--steps", std::to_string(steps)}});
    w.model_json = w.plan_json = "{}";
    w.started = "2026-01-01T00:00:00Z";
    w.write("done", steps, true);
}

// A run directory as train_prism leaves it, without training: log.jsonl with a validation loss every 5 steps
// (vals[k] at step 5 (k + 1), the training loss 0.1 above it) and the record run.json, status done, of --model tiny,
// --heads-schedule HEADS, --widths uniform, then `args` in their order (--lr, --seed...), --out DIR and --steps.
inline void write_recorded_run(const std::string& dir, const std::string& heads,
                               const std::vector<std::pair<std::string, std::string>>& args,
                               const std::vector<double>& vals) {
    make_dirs(dir);
    std::string log;
    for (size_t k = 0; k < vals.size(); k++) {
        const long step = 5 * (long)(k + 1);
        char b[256];
        snprintf(b, sizeof b,
                 "{\"step\": %ld, \"tokens\": %ld, \"train_loss\": %.6f, \"val_loss\": %.6f, \"lr\": 1e-3, "
                 "\"grad_norm\": 0.5, \"tokens_per_s\": 1000.0, \"elapsed_s\": %.3f}\n",
                 step, step * 128, vals[k] + 0.1, vals[k], step * 0.1);
        log += b;
    }
    write_atomically(dir + "/log.jsonl", {{log.data(), log.size()}});
    write_run_record(dir, heads, args, 5 * (long)vals.size());
}
