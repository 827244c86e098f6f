// train_util.h: what the end-to-end tests of train_prism share (test_train.cpp, test_faults.cpp, test_dist.cpp):
// synthetic shards, the micro model's command line, the log reader and the one-line-error check; and for the tests
// of what reads runs (report, study: test_study.cpp, test_stats.cpp), a recorded run directory written directly.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dataloader.h"
#include "eval/eval_file.h"
#include "run/run_record.h"
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
