// run/run_log.h: a finished (or running, or crashed) training run read back from its output directory, for `report`:
// the steps of OUT/log.jsonl (run/run.h's log_step writes one JSON object per step: step, tokens, train_loss, val_loss,
// lr, grad_norm, tokens_per_s, elapsed_s, mfu, skipped, eval), and the model's config from the header of
// OUT/model.bin (only the header and layer table are read, not the parameters), the run record OUT/run.json
// (run/run_record.h: flags, seed, machine) and the zero-shot results OUT/eval.json (eval_zeroshot --json, as
// `study` writes them) when they exist; a malformed one of those is a warning, not an error.
// A line that is not whole JSON is skipped with a warning: the last one is what a crash or a full disk leaves
// (torn), any other is named by its line number; so is a line whose step is not a whole number >= 1 or not
// above the step before it (a duplicated or reordered line), or whose number field holds another type (a
// string loss). The log must be a regular file (a FIFO or a device is refused, never waited on). Wall-clock:
// elapsed_s restarts at each --resume, so each restart's times are added to the last time before it
// (elapsed_total). Task and metric names are kept as cut_text shows them (at most kShownText bytes and the size).
// The log is streamed (a line's memory besides the steps kept, whatever the file's size: a 3 GB log of one line
// costs a MiB); a line longer than kMaxLineBytes is skipped unread, and past the tenth skipped line the rest are
// one warning with their count. eval.json is read only up to kMaxEvalJson.
// Errors (RunLogError, one line): a path that is not a directory, a directory without log.jsonl or with no step
// in it (nothing to report).
// Does not: read checkpoints' parameters, or write anything.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "util/errors.h"
#include "run/checkpoint.h"
#include "util/json.h"
#include "util/fs.h"
#include "run/run_record.h"
#include "model_config.h"

struct RunStep {
    long step = 0, tokens = 0;
    double train_loss = NAN, val_loss = NAN, lr = NAN, grad_norm = NAN, tokens_per_s = NAN, elapsed_s = NAN;
    double elapsed_total = NAN;  // elapsed_s summed across resumed invocations
    bool skipped = false;
    // The per-layer signals of a step that logged them (log.jsonl's "layers": each array in it by its key, in the
    // line's order, a null entry as NaN, so a signal added to layer_stats.h needs no change here); empty otherwise.
    std::vector<std::pair<std::string, std::vector<double>>> layers;
};

struct RunEval {
    long step = 0, tokens = 0;
    std::string task;
    bool after_training = false;  // from OUT/eval.json (the finished model's), not logged during training
    std::vector<std::pair<std::string, double>> metrics;  // in file order: examples, acc, acc_stderr, ...
    double get(const std::string& k) const {
        for (const auto& m : metrics)
            if (m.first == k) return m.second;
        return NAN;
    }
};

struct RunLog {
    std::string dir, name;  // name: the directory's last component
    std::vector<RunStep> steps;
    std::vector<RunEval> evals;
    bool has_model = false;  // OUT/model.bin's header was read
    ModelConfig cfg;
    long model_step = 0;
    bool has_record = false;  // OUT/run.json was read
    RunRecord record;
    std::vector<std::string> warnings;
};

// The ModelConfig and step of a model.bin from its header and layer table alone (run/checkpoint.h's checks).
inline ModelConfig read_model_header(const std::string& path, long& step) {
    auto bad = [&](const std::string& why) { return CheckpointError("checkpoint " + path + ": " + why); };
    size_t size;
    FileHandle fh = open_sized(path, "checkpoint", size);
    const ModelHead head = read_model_head(fh.get(), size, bad);
    step = (long)get64(head.h, 22);
    return head.cfg;
}

// A string read from a run's files as the tools show it: at most kShownText bytes (cut at a character's start),
// then "… (cut from N bytes)", so that what a page or a table holds grows with the runs, not with what a file
// claims (a task name of 100 MB is shown as its first bytes and its size).
constexpr size_t kShownText = 120;
inline std::string cut_text(const std::string& s, size_t max = kShownText) {
    if (s.size() <= max) return s;
    size_t n = max;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--;
    return s.substr(0, n) + "… (cut from " + std::to_string(s.size()) + " bytes)";
}

// eval_zeroshot's JSON is a few KiB (a line per task); a larger eval.json is not its and is not read.
constexpr size_t kMaxEvalJson = (size_t)16 << 20;

namespace run_log_detail {
// A number field: NaN when absent or null.
inline double number(const json::Value& o, const char* key) {
    const json::Value* v = o.find(key);
    if (!v || v->kind != json::Value::Number) return NAN;
    return std::strtod(v->str.c_str(), nullptr);
}

// Throws json::Error unless `o` is a step's object: a whole step >= 1 above last_step, its number fields numbers.
inline void check_step(const json::Value& o, long last_step) {
    if (o.kind != json::Value::Object || !std::isfinite(number(o, "step"))) throw json::Error("no \"step\" number");
    const double st = number(o, "step");
    if (st < 1 || st != std::floor(st) || st > 1e15)
        throw json::Error("step " + json::number(st, "%.17g") + " is not a whole number >= 1");
    if ((long)st <= last_step)
        throw json::Error("step " + std::to_string((long)st) + " does not follow step " + std::to_string(last_step) +
                          ": a duplicated or reordered line");
    for (const char* k : {"tokens", "train_loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "elapsed_s"}) {
        const json::Value* v = o.find(k);
        if (v && v->kind != json::Value::Number && v->kind != json::Value::Null)
            throw json::Error(std::string("\"") + k + "\" is not a number");
    }
}

// One task's results (a log line's "eval", or one of eval.json's "results"): its name and its number fields.
inline RunEval task_eval(const json::Value& t, long step, long tokens, bool after_training) {
    RunEval e;
    e.step = step, e.tokens = tokens, e.after_training = after_training;
    const json::Value* task = t.find("task");
    e.task = cut_text(task && task->kind == json::Value::String ? task->str : "?");
    for (const auto& kv : t.obj)
        if (kv.second.kind == json::Value::Number)
            e.metrics.push_back({cut_text(kv.first), std::strtod(kv.second.str.c_str(), nullptr)});
    return e;
}

// OUT/log.jsonl's steps (and their evals) into r; returns the file's size. Streamed (util/fs.h's for_each_line): a log
// of any size costs a line's memory besides its steps; a line longer than any the trainer writes is skipped unread,
// and past kNamedSkips skipped lines the rest are counted in one warning.
inline size_t read_steps(const std::string& path, RunLog& r, const std::function<void(const std::string&)>& note) {
    constexpr long kNamedSkips = 10;
    long last_step = 0, skipped = 0;
    double offset = 0, last_elapsed = -1;
    auto skip = [&](const std::string& msg) {
        if (++skipped <= kNamedSkips) note(msg);
    };
    auto take = [&](const std::string& line, long line_no, bool overlong, bool last) {
        if (overlong)
            return skip(path + " line " + std::to_string(line_no) + " is longer than " +
                        std::to_string(kMaxLineBytes >> 20) +
                        " MiB, more than any line train_prism writes (not a step's JSON): skipped");
        if (line.find_first_not_of(" \t\r") == std::string::npos) return;
        json::Value o;
        bool parsed = false;
        try {
            o = json::parse(line);
            parsed = true;
            check_step(o, last_step);
        } catch (const json::Error& e) {
            return skip(path + " line " + std::to_string(line_no) +
                        (last && !parsed ? " is torn (not whole JSON: a crash or a full disk cut it): skipped"
                                         : std::string(" is not a step's JSON (") + e.what() + "): skipped"));
        }
        RunStep s;
        last_step = (long)number(o, "step");
        s.step = (long)number(o, "step"), s.tokens = (long)number(o, "tokens");
        s.train_loss = number(o, "train_loss"), s.val_loss = number(o, "val_loss"), s.lr = number(o, "lr");
        s.grad_norm = number(o, "grad_norm"), s.tokens_per_s = number(o, "tokens_per_s");
        s.elapsed_s = number(o, "elapsed_s");
        const json::Value* sk = o.find("skipped");
        s.skipped = sk && sk->kind == json::Value::Bool && sk->b;
        const json::Value* ly = o.find("layers");  // {"grad_norm": [...], ...}: a duplicated key, its last
        if (ly && ly->kind == json::Value::Object) {
            std::unordered_map<std::string, size_t> at;  // a key's place in s.layers (hashed: linear in the line)
            for (const auto& [key, a] : ly->obj) {
                if (a.kind != json::Value::Array) continue;
                std::vector<double> v;
                for (const json::Value& x : a.arr)
                    v.push_back(x.kind == json::Value::Number ? std::strtod(x.str.c_str(), nullptr) : NAN);
                const auto [it, fresh] = at.emplace(key, s.layers.size());
                if (fresh) s.layers.emplace_back(key, std::move(v));
                else s.layers[it->second].second = std::move(v);
            }
        }
        if (std::isfinite(s.elapsed_s)) {
            if (s.elapsed_s < last_elapsed) offset += last_elapsed;  // a resumed invocation's clock restarted
            last_elapsed = s.elapsed_s;
            s.elapsed_total = offset + s.elapsed_s;
        }
        r.steps.push_back(s);
        const json::Value* ev = o.find("eval");
        if (ev && ev->kind == json::Value::Object) r.evals.push_back(task_eval(*ev, s.step, s.tokens, false));
    };
    size_t size;
    try {
        size = for_each_line(path, "log", take);
    } catch (const IoError& e) {
        throw RunLogError(e.what());
    }
    if (skipped > kNamedSkips)
        note(path + ": " + std::to_string(skipped - kNamedSkips) +
             " more lines are not a step's JSON, as above: skipped");
    return size;
}

// OUT/eval.json's results (the finished model's), when the file exists.
inline void read_eval_json(const std::string& dir, RunLog& r, const std::function<void(const std::string&)>& note) {
    const std::string evals = dir + "/eval.json";
    if (access(evals.c_str(), F_OK) != 0) return;
    try {
        const json::Value doc = json::parse(read_text(evals, (size_t)-1, kMaxEvalJson));
        const json::Value* results = doc.kind == json::Value::Object ? doc.find("results") : nullptr;
        const json::Value* step = doc.kind == json::Value::Object ? doc.find("step") : nullptr;
        if (!results || results->kind != json::Value::Array) throw json::Error("no \"results\" list");
        const long at = step && step->kind == json::Value::Number ? std::strtol(step->str.c_str(), nullptr, 10) : 0;
        for (const json::Value& t : results->arr) r.evals.push_back(task_eval(t, at, r.steps.back().tokens, true));
    } catch (const std::runtime_error& e) {  // json::Error, or io's: too large, not a regular file
        note(evals + " is not eval_zeroshot's JSON (" + e.what() + "): not shown");
    }
}
}  // namespace run_log_detail

// Reads RUN_DIR; warn(message) gets each skipped line (also kept in warnings).
inline RunLog read_run(const std::string& dir, const std::function<void(const std::string&)>& warn) {
    RunLog r;
    r.dir = dir;
    std::string trimmed = dir;
    while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
    r.name = trimmed.substr(trimmed.find_last_of('/') == std::string::npos ? 0 : trimmed.find_last_of('/') + 1);
    if (!is_dir(dir)) throw RunLogError(dir + " is not a directory; pass train_prism output directories (-o OUT)");
    const std::string path = dir + "/log.jsonl";
    if (access(path.c_str(), F_OK) != 0)
        throw RunLogError(dir +
                          " holds no log.jsonl: it is not a train_prism output directory, or its run has not "
                          "started; pass the directory a run wrote (-o OUT)");
    auto note = [&](const std::string& msg) {
        r.warnings.push_back(msg);
        warn(msg);
    };
    const size_t size = run_log_detail::read_steps(path, r, note);
    if (r.steps.empty())
        throw RunLogError(path + " holds no step (" + (size == 0 ? "it is empty" : "no line is a step's JSON") +
                          "): nothing to report for " + dir);
    try {
        r.has_record = read_run_record(dir, r.record);
    } catch (const std::runtime_error& e) {
        note(std::string(e.what()) + ": the run's flags are not shown and it forms a group of its own");
    }
    run_log_detail::read_eval_json(dir, r, note);
    const std::string model = dir + "/model.bin";
    if (access(model.c_str(), F_OK) == 0) {
        try {
            r.cfg = read_model_header(model, r.model_step);
            r.has_model = true;
        } catch (const std::runtime_error& e) {
            note(std::string(e.what()) + ": the schedule is not shown");
        }
    }
    return r;
}
