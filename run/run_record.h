// run/run_record.h: OUT/run.json, what a training run is. train_prism writes it (rank 0) once the run has
// started and again when the invocation ends; each invocation (the first, and every --resume) appends one
// entry to "invocations". The file is one JSON object:
//   "prism_run": 1                         the format's version
//   "args": [["--model", "tiny"], ...]     every flag's resolved value (defaults filled in, --tokens and the other
//                                          length flags resolved to --steps; a switch has the value ""), which
//                                          `train_prism --resume -o OUT` re-applies (run/defaults.h)
//   "model": {...}                         the preset and schedules asked for, d, L, h_base, T, V, norm, tied,
//                                          parameters, and the per-layer table (layers numbered from 1)
//   "plan": {...}                          B, T, ranks, micro-steps, total batch, steps, warmup, lr, seed (the
//                                          latest invocation's)
//   "data": {"train": "...", "val": "..." | null}   fingerprints of the shards (dataloader.h's shards_fingerprint):
//                                          a --resume onto other data is refused unless --allow-data-change
//   "branches": [{"step": 30, "flag": "--decay-frac", "old": "0.25", "new": "0.1"}, ...]   (only when there
//                                          are some) each resume that changed the lr schedule of a non-cosine
//                                          run, or any schedule flag (run/run.h's check_lr_branch): the step
//                                          it went on from, the flag, its value before and after (null: absent)
//   "invocations": [{"argv": [...], "started": "...Z", "ended": "...Z" | null, "status": "running" | "done" |
//                    "stopped" | "interrupted" | "diverged", "start_step", "end_step", "commit", "build", "host",
//                    "cores", "engine", "engine_why", "ranks", "zero"}, ...]
// "ended": null with "status": "running" is an invocation that is running, or was killed without a word.
// The record is replaced by an atomic rename each time, so a reader never sees half of one.
// Readers: report (the runs' table, the seed groups), analyze and eval_zeroshot (what they print and write),
// study (which runs are done), train_prism --resume (the flags). A directory without run.json (a run from
// before records) reads as "no record"; a malformed one is an error naming the file.
// Does not: know the flag table (run/defaults.h's record_args turns options into args, and back).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "util/io.h"
#include "util/json.h"
#include "run/cli.h"
#include "run/plan_views.h"
#include "util/fs.h"
#include "model/spec.h"

// The commit a binary was built from (`git describe --always --dirty`): defined by the object the Makefile makes of
// it, build/commit.o, which train_prism and eval_zeroshot link, so that a new commit relinks them and recompiles
// nothing. Weak: a binary without it (a test, a bundle build) records "unknown".
extern "C" const char prism_commit_text[] __attribute__((weak));
inline const char* prism_commit() { return prism_commit_text ? prism_commit_text : "unknown"; }

struct RunRecordError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

namespace run_record {

// A JSON value back to text (numbers as their literal: what was read is written unchanged).
inline std::string dump(const json::Value& v) {
    switch (v.kind) {
        case json::Value::Null:
            return "null";
        case json::Value::Bool:
            return v.b ? "true" : "false";
        case json::Value::Number:
            return v.str;
        case json::Value::String:
            return json::quote(v.str);
        case json::Value::Array: {
            std::string s = "[";
            for (size_t i = 0; i < v.arr.size(); i++) s += (i ? ", " : "") + dump(v.arr[i]);
            return s + "]";
        }
        case json::Value::Object: {
            std::string s = "{";
            for (size_t i = 0; i < v.obj.size(); i++)
                s += (i ? ", " : "") + json::quote(v.obj[i].first) + ": " + dump(v.obj[i].second);
            return s + "}";
        }
    }
    return "null";
}

inline std::string utc_now() {
    char b[32];
    const time_t t = time(nullptr);
    strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
    return b;
}

// The shortest of %.15g, %.16g, %.17g that reads back as x: 0.003 stays 0.003, and every double round-trips.
inline std::string exact(double x) { return exact_number(x); }

inline std::string build_description() {
    std::string s = "g++ " __VERSION__;
#ifdef __CUDACC__
    s = "nvcc " + std::to_string(__CUDACC_VER_MAJOR__) + "." + std::to_string(__CUDACC_VER_MINOR__) + " (host " + s +
        ")";
#endif
#if defined(PRISM_CUDA) && defined(PRISM_NVCC_VERSION)
    s += ", CUDA engine (nvcc " PRISM_NVCC_VERSION ")";  // cuda_engine.cu, compiled by nvcc and linked in
#elif defined(PRISM_CUDA)
    s += ", CUDA engine";
#else
    s += ", CPU only";
#endif
#ifdef PRISM_MPI
    s += ", MPI";
#endif
#ifdef PRISM_NCCL
    s += ", NCCL";
#endif
    return s;
}

inline std::string host_name() {
    char b[256] = {0};
    if (gethostname(b, sizeof b - 1) != 0) return "unknown";
    return b;
}

}  // namespace run_record

// The record as read back: the args in order, and the whole document for the rest.
struct RunRecord {
    std::string path;
    std::vector<std::pair<std::string, std::string>> args;
    json::Value doc;

    bool has(const std::string& flag) const {
        for (const auto& a : args)
            if (a.first == flag) return true;
        return false;
    }
    // The flag's recorded value ("" when absent or a switch).
    std::string arg(const std::string& flag) const {
        for (const auto& a : args)
            if (a.first == flag) return a.second;
        return "";
    }
    const json::Value* last_invocation() const {
        const json::Value* inv = doc.find("invocations");
        return inv && inv->kind == json::Value::Array && !inv->arr.empty() ? &inv->arr.back() : nullptr;
    }
    // A string field of the latest invocation ("" when missing).
    std::string latest(const char* key) const {
        const json::Value* v = last_invocation();
        const json::Value* f = v ? v->find(key) : nullptr;
        return f && (f->kind == json::Value::String || f->kind == json::Value::Number) ? f->str : "";
    }
    long latest_long(const char* key) const {
        const std::string s = latest(key);
        return s.empty() ? -1 : std::strtol(s.c_str(), nullptr, 10);
    }
    std::string status() const { return latest("status"); }
    // Everything that makes the run what it is, as "flag value" pairs: the args without the output directory
    // and without the flags that may change on a resume (run/defaults.h's list, passed in), and without
    // `drop` (report: "--seed", so that runs differing only in seed compare equal).
    std::vector<std::pair<std::string, std::string>> identity(const std::vector<std::string>& drop) const {
        std::vector<std::pair<std::string, std::string>> out;
        for (const auto& a : args)
            if (std::find(drop.begin(), drop.end(), a.first) == drop.end()) out.push_back(a);
        return out;
    }
};

inline std::string run_record_path(const std::string& dir) { return dir + "/run.json"; }

// Reads DIR/run.json into r; false when there is none. A file that is not a record is a RunRecordError.
inline bool read_run_record(const std::string& dir, RunRecord& r) {
    r.path = run_record_path(dir);
    if (access(r.path.c_str(), F_OK) != 0) return false;
    const std::string text = read_text(r.path, (size_t)-1, (size_t)64 << 20);  // a record is a few KB
    auto bad = [&](const std::string& why) {
        return RunRecordError(r.path + " is not a run record (" + why + "); move it aside, or restore it from a copy");
    };
    try {
        r.doc = json::parse(text);
    } catch (const json::Error& e) {
        throw bad(e.what());
    }
    const json::Value* ver = r.doc.find("prism_run");
    const json::Value* args = r.doc.find("args");
    if (r.doc.kind != json::Value::Object || !ver || ver->kind != json::Value::Number)
        throw bad("no \"prism_run\" version");
    if (ver->str != "1") throw bad("version " + ver->str + " is newer than this build reads (1)");
    if (!args || args->kind != json::Value::Array) throw bad("no \"args\" list");
    r.args.clear();
    for (const json::Value& a : args->arr) {
        if (a.kind != json::Value::Array || a.arr.size() != 2 || a.arr[0].kind != json::Value::String ||
            a.arr[1].kind != json::Value::String)
            throw bad("an \"args\" entry is not a [flag, value] pair");
        r.args.push_back({a.arr[0].str, a.arr[1].str});
    }
    return true;
}

// A change of a schedule flag at a resume (run.json's "branches"); "" is a flag the record does not have.
struct RunBranch {
    long step = 0;  // the checkpoint the resume went on from
    std::string flag, old_value, new_value;
};

inline std::string branch_json(const RunBranch& b) {
    auto value = [](const std::string& v) { return v.empty() ? std::string("null") : json::quote(v); };
    return "{\"step\": " + std::to_string(b.step) + ", \"flag\": " + json::quote(b.flag) +
           ", \"old\": " + value(b.old_value) + ", \"new\": " + value(b.new_value) + "}";
}

// On a --resume: every recorded flag not in `may_change` (run/defaults.h's may_change_on_resume) must have the
// value the record has, and no such flag may be new. The first difference is a ConfigError naming the flag, both
// values and what to do. batch_may_change (--allow-batch-change): --total-batch may differ too; data_may_change
// (--allow-data-change): --train and --val. The flags of `may_branch` (run/run.cpp's lr_branch_flags) may differ,
// be new or be gone: their changes are returned (step 0) for the caller to check (run/run.cpp's check_lr_branch)
// and record. Defined in run/run.cpp, with the other resume rules.
std::vector<RunBranch> check_resume_args(const RunRecord& rec,
                                         const std::vector<std::pair<std::string, std::string>>& now,
                                         const std::vector<std::string>& may_change, bool batch_may_change = false,
                                         bool data_may_change = false, const std::vector<std::string>& may_branch = {});

// What one invocation of the trainer writes: the rest of the record is kept from the file.
struct RunRecordWriter {
    std::string dir;
    std::vector<std::pair<std::string, std::string>> args;
    std::string model_json, plan_json;
    std::string data_json;              // data_record_json: the shards' fingerprints
    std::vector<std::string> earlier;   // the earlier invocations' objects, as text
    std::vector<std::string> branches;  // "branches": the earlier ones (as text), then this invocation's
    std::vector<std::string> argv;
    std::string started, engine, engine_why;
    int ranks = 1, zero = 0;
    long start_step = 0;

    // Keeps the invocations of DIR/run.json (a resumed run); a fresh run passes keep = false.
    void load_earlier(bool keep) {
        earlier.clear(), branches.clear();
        RunRecord r;
        if (!keep || !read_run_record(dir, r)) return;
        const json::Value* inv = r.doc.find("invocations");
        if (inv && inv->kind == json::Value::Array)
            for (const json::Value& v : inv->arr) earlier.push_back(run_record::dump(v));
        const json::Value* br = r.doc.find("branches");
        if (br && br->kind == json::Value::Array)
            for (const json::Value& v : br->arr) branches.push_back(run_record::dump(v));
    }

    // Writes the record with this invocation's entry: status "running" and end null until it ends.
    void write(const std::string& status, long end_step, bool ended) const {
        std::string s = "{\"prism_run\": 1,\n \"args\": [";
        for (size_t i = 0; i < args.size(); i++)
            s += std::string(i ? ", " : "") + "[" + json::quote(args[i].first) + ", " + json::quote(args[i].second) +
                 "]";
        s += "],\n \"model\": " + model_json + ",\n \"plan\": " + plan_json + ",\n";
        if (!data_json.empty()) s += " \"data\": " + data_json + ",\n";
        if (!branches.empty()) {
            s += " \"branches\": [";
            for (size_t i = 0; i < branches.size(); i++) s += (i ? ", " : "") + branches[i];
            s += "],\n";
        }
        s += " \"invocations\": [";
        for (const std::string& e : earlier) s += "\n  " + e + ",";
        std::string a = "[";
        for (size_t i = 0; i < argv.size(); i++) a += (i ? ", " : "") + json::quote(argv[i]);
        a += "]";
        s += "\n  {\"argv\": " + a + ", \"started\": " + json::quote(started) +
             ", \"ended\": " + (ended ? json::quote(run_record::utc_now()) : std::string("null")) +
             ", \"status\": " + json::quote(status) + ", \"start_step\": " + std::to_string(start_step) +
             ", \"end_step\": " + std::to_string(end_step) + ", \"commit\": " + json::quote(prism_commit()) +
             ", \"build\": " + json::quote(run_record::build_description()) +
             ", \"host\": " + json::quote(run_record::host_name()) +
             ", \"cores\": " + std::to_string(sysconf(_SC_NPROCESSORS_ONLN)) + ", \"engine\": " + json::quote(engine) +
             ", \"engine_why\": " + json::quote(engine_why) + ", \"ranks\": " + std::to_string(ranks) +
             ", \"zero\": " + std::to_string(zero) + "}\n ]}\n";
        write_atomically(run_record_path(dir), {{s.data(), s.size()}});
    }
};

// The model part of a record.
inline std::string model_record_json(const ModelSpec& spec, const ModelConfig& c) {
    std::string s = "{\"preset\": " + json::quote(spec.preset) + ", \"heads_schedule\": " + json::quote(spec.heads) +
                    ", \"widths_schedule\": " + json::quote(spec.widths) + ", \"d\": " + std::to_string(c.d) +
                    ", \"L\": " + std::to_string(c.L()) + ", \"h_base\": " + std::to_string(c.h_base) +
                    ", \"T\": " + std::to_string(c.T) + ", \"V\": " + std::to_string(c.V) + ", \"norm\": \"" +
                    norm_name(c.norm) + "\", \"tied\": " + (c.tied ? "true" : "false") +
                    ", \"mlp_ratio\": " + run_record::exact(c.mlp_ratio) +
                    ", \"params\": " + std::to_string(param_layout(c).total) +
                    ", \"widths\": " + json::quote(rle_list(layer_widths(c))) +
                    ", \"heads\": " + json::quote(rle_list(layer_heads(c))) + ",\n   \"layers\": [";
    for (int l = 0; l < c.L(); l++) s += std::string(l ? ", " : "") + "{" + layer_json_members(c, l) + "}";
    return s + "]}";
}

// The data part of a record: {"train": FINGERPRINT, "val": FINGERPRINT | null, "train_path": GLOB, "val_path": GLOB |
// null} (dataloader.h's shards_fingerprint; val null when the run validates on nothing; the paths absolute, so that
// a resume from another directory finds the shards: Run::restore_flags).
inline std::string data_record_json(const std::string& train, const std::string& val, const std::string& train_glob,
                                    const std::string& val_glob) {
    auto abs = [](const std::string& g) { return g.empty() ? g : resolved_path(g); };  // the glob's folder resolved
    auto text = [](const std::string& v) { return v.empty() ? std::string("null") : json::quote(v); };
    return "{\"train\": " + json::quote(train) + ", \"val\": " + text(val) +
           ", \"train_path\": " + json::quote(abs(train_glob)) +
           ", \"val_path\": " + text(val.empty() ? "" : abs(val_glob)) + "}";
}
