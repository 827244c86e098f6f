// run/run_dir.h: a training run's output directory OUT and everything on disk in it:
//   OUT/step_XXXXXXXX/model.bin, state_rank0.bin   a checkpoint (run/checkpoint.h's formats), written into
//                                                  OUT/step_XXXXXXXX.tmp/ and renamed into place when complete
//   OUT/latest                                     one line naming the newest complete checkpoint
//   OUT/model.bin                                  a hard link to that checkpoint's model
//   OUT/log.jsonl                                  one JSON object per step (written by the training loop)
// latest and the model.bin link are replaced by atomic renames after the checkpoint directory is complete, so
// a crash at any moment leaves OUT/latest naming a complete checkpoint. After each save, --keep K prunes the
// complete checkpoints older than the new one (found by listing OUT, whichever run wrote them) down to K in
// all; the new one is never pruned, and a checkpoint of non-finite parameters is never written. Leftovers of
// a crash (step_N.tmp/, latest.tmp, ...) are removed at start. A fresh run refuses an OUT that holds a run
// (checkpoints, latest or a non-empty log) unless told --overwrite, so a forgotten --resume loses nothing.
//
// Several ranks (dist/process_group.h) share one OUT, on a file system every node sees. Rank 0 creates step_N.tmp/ and
// writes model.bin; every rank that holds a shard of the optimizer state (ZeRO-1: each; ZeRO-0: rank 0, which
// holds all of it) writes state_rank<r>.bin with the range of parameters it covers; the ranks agree that every
// write succeeded (Dist::all_or_none, a collective); then rank 0 alone renames the directory, moves latest and
// prunes. No rank can publish a checkpoint another is still writing, and a failed write on any rank ends every
// rank with one message. Resuming, every rank reads model.bin and the state files whose ranges overlap the part
// of the optimizer state it holds now: the same files when the rank count is unchanged, others when it changed
// (re-sharding is a copy of overlapping ranges). Only rank 0 writes log.jsonl and cleans up OUT.
// Does not: decide when to checkpoint or what a step is (train_loop.h), or know how an engine stores its
// weights (everything crosses the Engine interface as fp32 in param_layout order, shards as interface ranges).
#pragma once

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "run/checkpoint.h"
#include "dataloader.h"
#include "dist/process_group.h"
#include "engine.h"
#include "util/json.h"
#include "model_config.h"

inline bool is_dir(const std::string& p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// mkdir -p
inline void make_dirs(const std::string& path) {
    std::string cur;
    for (size_t i = 0; i <= path.size(); i++) {
        if (i == path.size() || path[i] == '/') {
            if (!cur.empty() && !is_dir(cur) && mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
                throw ConfigError("cannot create directory " + cur + ": " + strerror(errno));
        }
        if (i < path.size()) cur += path[i];
    }
}

// Removes a checkpoint directory (its files, then itself). Checkpoints hold no subdirectories.
inline void remove_tree(const std::string& dir) {
    DIR* d = opendir(dir.c_str());
    if (!d) return;
    while (dirent* e = readdir(d)) {
        std::string n = e->d_name;
        if (n != "." && n != "..") unlink((dir + "/" + n).c_str());
    }
    closedir(d);
    rmdir(dir.c_str());
}

// The whole file without trailing newlines and spaces; "" when it cannot be read.
inline std::string read_text(const std::string& path) {
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) return "";
    std::string s;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
    fclose(f);
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
}

inline std::string step_dir_name(long step) {
    char b[32];
    snprintf(b, sizeof b, "step_%08ld", step);
    return b;
}

// The step of a checkpoint directory's name, exactly as step_dir_name writes it; -1 for any other name.
inline long step_of_dir_name(const std::string& name) {
    if (name.size() < 13 || name.size() > 24 || name.compare(0, 5, "step_") != 0 ||
        name.find_first_not_of("0123456789", 5) != std::string::npos)
        return -1;
    long step = std::stol(name.substr(5));
    return step_dir_name(step) == name ? step : -1;
}

// The names in a directory ("." and ".." left out); empty when it cannot be read.
inline std::vector<std::string> list_dir(const std::string& dir) {
    std::vector<std::string> names;
    DIR* d = opendir(dir.c_str());
    if (!d) return names;
    while (dirent* e = readdir(d)) {
        std::string n = e->d_name;
        if (n != "." && n != "..") names.push_back(n);
    }
    closedir(d);
    return names;
}

// "" when a checkpoint of `saved` can resume a run of `want`, else the first difference, in words.
inline std::string model_difference(const ModelConfig& saved, const ModelConfig& want) {
    auto diff = [](const char* what, long a, long b) {
        return std::string(what) + " " + std::to_string(a) + " vs " + std::to_string(b) + " asked for";
    };
    if (saved.d != want.d) return diff("d", saved.d, want.d);
    if (saved.V != want.V) return diff("vocabulary", saved.V, want.V);
    if (saved.L() != want.L()) return diff("layers", saved.L(), want.L());
    for (int l = 0; l < saved.L(); l++) {
        if (saved.layers[l].width != want.layers[l].width)
            return diff(("layer " + std::to_string(l + 1) + " width").c_str(), saved.layers[l].width, want.layers[l].width);
        if (saved.layers[l].heads != want.layers[l].heads)
            return diff(("layer " + std::to_string(l + 1) + " heads").c_str(), saved.layers[l].heads, want.layers[l].heads);
    }
    if (saved.norm != want.norm) return std::string("norm ") + norm_name(saved.norm) + " vs " + norm_name(want.norm);
    if (saved.tied != want.tied) return saved.tied ? "tied vs untied embeddings" : "untied vs tied embeddings";
    if (param_layout(saved).total != param_layout(want).total)
        return diff("parameters", (long)param_layout(saved).total, (long)param_layout(want).total);
    return "";
}

// What a checkpoint restores besides the parameters and AdamW moments (which go straight into the engine).
struct ResumePoint {
    std::string dir;   // the checkpoint directory
    long step = 0, tokens = 0;
    uint64_t rng = 0;  // sampling RNG state (rank 0's, the one that samples)
    LoaderState loader;
};

class RunDir {
  public:
    RunDir(const std::string& out, int keep, const Dist& dist) : out_(out), keep_(keep), dist_(dist) {}
    const std::string& path() const { return out_; }
    std::string log_path() const { return out_ + "/log.jsonl"; }

    // Steps of the complete checkpoints in OUT, oldest first.
    std::vector<long> checkpoint_steps() const {
        std::vector<long> steps;
        for (const std::string& n : list_dir(out_)) {
            long s = step_of_dir_name(n);
            if (s >= 0 && is_dir(out_ + "/" + n)) steps.push_back(s);
        }
        std::sort(steps.begin(), steps.end());
        return steps;
    }

    // Before anything is loaded: a fresh run (no --resume) into an OUT that holds a run is refused unless
    // `overwrite`, so that forgetting --resume never wipes a log or checkpoints. Changes nothing on disk.
    void check_start(bool resume, bool overwrite) const {
        if (resume && overwrite) throw ConfigError("--resume and --overwrite contradict each other; pass one");
        if (resume || overwrite) return;
        std::vector<long> steps = checkpoint_steps();
        struct stat st;
        const bool log = stat(log_path().c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
        const bool latest = access((out_ + "/latest").c_str(), F_OK) == 0;
        if (steps.empty() && !log && !latest) return;
        std::string what = steps.empty() ? "" : "checkpoints up to " + step_dir_name(steps.back());
        if (steps.empty() && latest) what = "a latest file";
        if (log) what += std::string(what.empty() ? "" : " and ") + "a log of " + std::to_string(st.st_size) + " bytes";
        throw ConfigError(out_ + " holds an earlier run (" + what +
                          "); pass --resume to continue it, or --overwrite to delete it and start afresh");
    }

    // Creates OUT and removes what a crash can leave behind: step_N.tmp directories and the .tmp files of
    // atomic writes (latest.tmp, model.bin.tmp, log.jsonl.tmp). Never touches a complete checkpoint. Rank 0's.
    void create() const {
        if (!lead()) return;
        make_dirs(out_);
        for (const std::string& n : list_dir(out_)) {
            if (n.size() > 4 && n.compare(n.size() - 4, 4, ".tmp") == 0 &&
                step_of_dir_name(n.substr(0, n.size() - 4)) >= 0)
                remove_tree(out_ + "/" + n);
            else if (n == "latest.tmp" || n == "model.bin.tmp" || n == "log.jsonl.tmp" || n == "run.json.tmp")
                unlink((out_ + "/" + n).c_str());
        }
    }

    // A fresh run: with `overwrite`, deletes the earlier run's checkpoints, latest and model.bin; then starts
    // an empty log. Called once everything else has been checked, so a run that fails to start deletes nothing.
    // Rank 0's.
    void start_fresh(bool overwrite) const {
        if (!lead()) return;
        if (overwrite) {
            unlink((out_ + "/latest").c_str());
            unlink((out_ + "/model.bin").c_str());
            for (long s : checkpoint_steps()) remove_tree(out_ + "/" + step_dir_name(s));
        }
        FILE* lf = fopen(log_path().c_str(), "w");
        if (!lf) throw ConfigError("cannot write " + log_path() + ": " + strerror(errno));
        fclose(lf);
    }

    // Writes OUT/step_N.tmp/{model.bin,state_rank<r>.bin}, renames the directory to OUT/step_N, then points
    // OUT/latest and OUT/model.bin at it (each by an atomic rename), and prunes older checkpoints to `keep`.
    // Refuses (CheckpointError) parameters that are not all finite: such a checkpoint would replace a good one.
    // Every rank calls it (see the top for who writes what).
    void save(Engine& eng, const LoaderState& loader, long step, long tokens, uint64_t rng) {
        std::string name = step_dir_name(step), dir = out_ + "/" + name, tmp = dir + ".tmp";
        std::vector<float> params(eng.num_params());
        eng.get_params(params.data());  // on every rank: with ZeRO-1 on the GPU it gathers the master weights
        for (size_t i = 0; i < params.size(); i++)  // the same parameters on every rank: they all stop here
            if (!std::isfinite(params[i]))
                throw CheckpointError("not writing a checkpoint at step " + std::to_string(step) + ": parameter " +
                                      std::to_string(i) + " is " + std::to_string(params[i]) +
                                      "; OUT/latest still names the last good one");
        const std::pair<size_t, size_t> range = eng.optimizer_range();
        const bool whole = range.first == 0 && range.second == eng.num_params();
        try {
            dist_.all_or_none([&] {  // a collective: afterwards step_N.tmp/ exists for every rank, or all know
                if (lead()) remove_tree(tmp), make_dirs(tmp);
            });
            dist_.all_or_none([&] {  // afterwards every rank's files are complete, or every rank knows
                if (lead()) save_model(tmp + "/model.bin", eng.config(), params.data(), params.size(), step);
                if (!whole || lead()) {  // ZeRO-0 with several ranks: every rank holds all of it, rank 0 writes it
                    TrainState st;
                    st.step = step;
                    st.tokens = tokens;
                    st.rng = rng;
                    st.loader.assign((const unsigned char*)&loader, (const unsigned char*)&loader + sizeof loader);
                    long t;
                    eng.get_optimizer(st.m, st.v, t);
                    if (!whole) {
                        st.rank = dist_.rank, st.world = dist_.world;
                        st.first_param = (int64_t)range.first, st.model_params = (int64_t)eng.num_params();
                    }
                    save_state(tmp + "/" + state_file_name(dist_.rank), st);
                }
            });
        } catch (const ReportedByAnotherRank&) {
            if (lead()) remove_tree(tmp);
            throw;
        } catch (const AgreedFailure& e) {  // a full disk: free what this attempt took, keep the last one
            if (lead()) remove_tree(tmp);
            std::string last = latest();
            throw AgreedFailure("checkpoint " + name + " not written: " + e.what() + "; " +
                                (last.empty() ? "no checkpoint yet" : out_ + "/latest still names " + last));
        }
        if (!lead()) return;
        remove_tree(dir);
        if (rename(tmp.c_str(), dir.c_str()) != 0)
            throw CheckpointError("cannot rename " + tmp + " to " + dir + ": " + strerror(errno));
        write_atomically(out_ + "/latest", {{name.c_str(), name.size()}, {"\n", 1}});
        std::string link_tmp = out_ + "/model.bin.tmp";
        unlink(link_tmp.c_str());
        if (link((dir + "/model.bin").c_str(), link_tmp.c_str()) == 0)
            rename(link_tmp.c_str(), (out_ + "/model.bin").c_str());
        prune(step);
    }

    // The checkpoint OUT/latest names ("" when there is no OUT/latest). A name that is not a checkpoint
    // directory's (a corrupt or hand-edited file) is an error that shows it, control bytes escaped.
    std::string latest() const {
        if (access((out_ + "/latest").c_str(), F_OK) != 0) return "";
        std::string name = read_text(out_ + "/latest");
        if (step_of_dir_name(name) < 0)
            throw CheckpointError(out_ + "/latest is corrupt: it holds \"" + printable(name.substr(0, 200)) +
                                  "\", not a checkpoint name like step_00000100; write the name of a step_* "
                                  "directory of " + out_ + " into it");
        return name;
    }

    // Loads the checkpoint OUT/latest names into eng, after checking that it holds the model of cfg. Every rank
    // calls it and reads the optimizer state it holds from whichever state files cover it.
    ResumePoint resume(Engine& eng, const ModelConfig& cfg) {
        std::string latest_name = latest();
        if (latest_name.empty())
            throw ConfigError("--resume: no checkpoint in " + out_ +
                              " (OUT/latest is missing); train without --resume first");
        ResumePoint r;
        r.dir = out_ + "/" + latest_name;
        LoadedModel m = load_model(r.dir + "/model.bin");
        std::string diff = model_difference(m.cfg, cfg);
        if (!diff.empty())
            throw ConfigError("--resume: " + r.dir + " holds a different model (" + diff +
                              "); pass the model flags of the first run");
        const size_t P = param_layout(cfg).total;
        TrainState st = load_optimizer_range(r.dir, P, eng.optimizer_range());
        if (st.step != m.step)
            throw CheckpointError(r.dir + ": model.bin is at step " + std::to_string(m.step) + " but state_rank0.bin at step " +
                                  std::to_string(st.step) + "; the checkpoint is corrupt");
        eng.set_params(m.params.data());
        eng.set_optimizer(st.m, st.v, (long)st.step);
        if (st.loader.size() != sizeof r.loader)
            throw CheckpointError(r.dir + ": data-loader position has the wrong size");
        memcpy(&r.loader, st.loader.data(), sizeof r.loader);
        r.step = st.step, r.tokens = st.tokens, r.rng = st.rng;
        return r;
    }

    // Keeps the log lines of steps <= last_step (a resumed run rewrites what the interrupted one logged after
    // its checkpoint, so the log reads as one uninterrupted run). A line that is not whole JSON (torn by a
    // crash or a full disk) is dropped. Rank 0's.
    void truncate_log(long last_step) const {
        if (!lead()) return;
        std::string all = read_text(log_path()), kept;
        size_t a = 0;
        while (a < all.size()) {
            size_t b = all.find('\n', a);
            std::string line = all.substr(a, b == std::string::npos ? std::string::npos : b - a);
            long s = -1;
            if (sscanf(line.c_str(), "{\"step\": %ld", &s) == 1 && s <= last_step && is_json(line)) kept += line + "\n";
            if (b == std::string::npos) break;
            a = b + 1;
        }
        write_atomically(log_path(), {{kept.data(), kept.size()}});
    }

  private:
    static bool is_json(const std::string& line) {
        try {
            json::parse(line);
            return true;
        } catch (const json::Error&) {
            return false;
        }
    }

    // Removes the complete checkpoints older than `newest` beyond the keep_ - 1 most recent of them, so that
    // keep_ remain with `newest`. Newer ones (left by an abandoned longer run) are not this run's to prune.
    void prune(long newest) const {
        std::vector<long> older;
        for (long s : checkpoint_steps())
            if (s < newest) older.push_back(s);
        for (size_t i = 0; i + (size_t)(keep_ - 1) < older.size(); i++)
            remove_tree(out_ + "/" + step_dir_name(older[i]));
    }

    std::string out_;
    int keep_;
    const Dist& dist_;

    bool lead() const { return dist_.rank == 0; }
    static std::string state_file_name(int rank) { return "state_rank" + std::to_string(rank) + ".bin"; }

    // The AdamW moments of the parameters [range.first, range.second) from the state files of checkpoint dir,
    // and the rest of its training state (step, tokens, RNG and loader position, which every file carries).
    // state_rank0.bin's header says how many files there are; their ranges must tile [0, P), all at one step.
    // Only the files that overlap the range are read (and checksummed); rank 0's range starts at 0, so it takes
    // the RNG state from state_rank0.bin, rank 0's own.
    static TrainState load_optimizer_range(const std::string& dir, size_t P, std::pair<size_t, size_t> range) {
        std::vector<StateRange> files{load_state_range(dir + "/" + state_file_name(0))};
        for (int i = 1; i < std::max(1, files[0].world); i++)
            files.push_back(load_state_range(dir + "/" + state_file_name(i)));
        int64_t covered = 0;
        for (size_t i = 0; i < files.size(); i++) {
            const StateRange& f = files[i];
            if (f.P != (int64_t)P || f.first != covered || f.world != files[0].world || f.step != files[0].step)
                throw CheckpointError(dir + ": " + state_file_name((int)i) + " does not continue the optimizer state of " +
                                      state_file_name(0) + " (parameters from " + std::to_string(f.first) + " of " +
                                      std::to_string(f.P) + ", step " + std::to_string(f.step) +
                                      "); the checkpoint is incomplete or mixes two runs");
            covered += f.n;
        }
        if (covered != (int64_t)P)
            throw CheckpointError(dir + ": the state files hold the moments of " + std::to_string(covered) + " of " +
                                  std::to_string(P) + " parameters; the checkpoint is incomplete");
        TrainState out;
        const size_t n = range.second - range.first;
        out.m.resize(n), out.v.resize(n);
        bool have_rest = false;
        for (size_t i = 0; i < files.size(); i++) {
            const size_t first = (size_t)files[i].first, a = std::max(range.first, first),
                         b = std::min(range.second, first + (size_t)files[i].n);
            if (a >= b && (have_rest || i + 1 < files.size())) continue;  // no overlap (the last file: for the rest)
            TrainState f = load_state(dir + "/" + state_file_name((int)i), (size_t)files[i].n);
            for (size_t k = a; k < b; k++) out.m[k - range.first] = f.m[k - first], out.v[k - range.first] = f.v[k - first];
            if (!have_rest) out.step = f.step, out.tokens = f.tokens, out.rng = f.rng, out.loader = f.loader;
            have_rest = true;
        }
        return out;
    }
};
