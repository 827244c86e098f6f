// run/run_dir.h: a training run's output directory OUT and everything on disk in it:
//   OUT/step_XXXXXXXX/model.bin, state_rank0.bin   a checkpoint (run/checkpoint.h's formats), written into
//                                                  OUT/step_XXXXXXXX.tmp/ and renamed into place when complete
//   OUT/latest                                     one line naming the newest complete checkpoint
//   OUT/model.bin                                  a hard link to that checkpoint's model
//   OUT/log.jsonl                                  one JSON object per step (written by the training loop)
//   OUT/lineage_<UTC time>/                        the checkpoints and log a --branch-from moved aside
//   OUT/branch.json                                a branch begun and not yet recorded (BranchIntent, below)
// latest and the model.bin link are replaced by atomic renames after the checkpoint directory is complete, so
// a crash at any moment leaves OUT/latest naming a complete checkpoint. After each save, --keep K prunes the
// complete checkpoints older than the new one (found by listing OUT, whichever run wrote them) down to K in
// all; the new one is never pruned, and a checkpoint of non-finite parameters is never written. Leftovers of
// a crash (step_N.tmp/, latest.tmp, ...) are removed at start. earlier_run says what of a run OUT holds
// (checkpoints, latest or a non-empty log): a fresh run refuses it unless told --overwrite (run/run.cpp).
//
// Several ranks (dist/process_group.h) share one OUT, on a file system every node sees. Rank 0 creates step_N.tmp/ and
// writes model.bin; every rank that holds a shard of the optimizer state (ZeRO-1: each; ZeRO-0: rank 0, which
// holds all of it) writes state_rank<r>.bin with the range of parameters it covers; the ranks agree that every
// write succeeded (Dist::all_or_none, a collective); then rank 0 alone renames the directory, moves latest and
// prunes. No rank can publish a checkpoint another is still writing, and a failed write on any rank ends every
// rank with one message. Resuming, every rank reads model.bin and the state files whose ranges overlap the part
// of the optimizer state it holds now: the same files when the rank count is unchanged, others when it changed
// (re-sharding is a copy of overlapping ranges). Only rank 0 writes log.jsonl and cleans up OUT.
// Does not: decide when to checkpoint, resume or what a step is (run/run.h), or know how an engine stores its
// weights (everything crosses the Engine interface as fp32 in param_layout order, shards as interface ranges).
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "run/checkpoint.h"
#include "run/step_dirs.h"
#include "util/fs.h"
#include "dataloader.h"
#include "dist/process_group.h"
#include "engine.h"
#include "util/json.h"
#include "model_config.h"

// The names of the files the trainer writes inside a checkpoint directory: model.bin, state_rank<r>.bin, and
// the .tmp files of their atomic writes.
inline bool is_checkpoint_file_name(std::string n) {
    if (n.size() > 4 && n.compare(n.size() - 4, 4, ".tmp") == 0) n.resize(n.size() - 4);
    if (n == "model.bin") return true;
    return n.size() > 14 && n.compare(0, 10, "state_rank") == 0 && n.compare(n.size() - 4, 4, ".bin") == 0 &&
           n.find_first_not_of("0123456789", 10) == n.size() - 4;
}

// Removes a checkpoint directory the trainer wrote, and only what the trainer wrote in it (is_checkpoint_file_name).
// A link under a checkpoint's name (to another run's step_N, say) is unlinked, never entered; a link inside is
// unlinked, not followed; the directory is opened without following a link, so nothing outside OUT is touched.
// Anything else inside (a file of the user's) stays, and then the directory stays too. Returns whether `path`
// is gone.
inline bool remove_checkpoint_dir(const std::string& path) {
    struct stat st;
    if (lstat(path.c_str(), &st) != 0) return errno == ENOENT;
    if (!S_ISDIR(st.st_mode)) return unlink(path.c_str()) == 0;
    const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return false;
    DIR* d = fdopendir(fd);
    if (!d) {
        close(fd);
        return false;
    }
    std::vector<std::string> names;
    while (dirent* e = readdir(d)) names.push_back(e->d_name);
    for (const std::string& n : names)
        if (is_checkpoint_file_name(n)) unlinkat(dirfd(d), n.c_str(), 0);  // flags 0: a link itself, or a file
    closedir(d);
    return rmdir(path.c_str()) == 0;
}

// A --branch-from's changes to OUT (RunDir::plan_branch, begin_branch; OUT/branch.json while under way).
struct BranchIntent {
    std::string to, was;      // the checkpoint OUT/latest will name; the one it named before
    std::string aside;        // lineage_<UTC time>: where the later checkpoints go ("" when there are none)
    std::vector<long> moved;  // their steps
};

class RunDir {
  public:
    RunDir(const std::string& out, int keep, const Dist& dist) : out_(out), keep_(keep), dist_(dist) {}
    ~RunDir() {
        if (lock_fd_ >= 0) close(lock_fd_);
        if (dir_fd_ >= 0) close(dir_fd_);
        // A run that failed before it wrote anything leaves no OUT behind that it created itself: the lock goes,
        // then the directories lock() made, innermost first (rmdir removes only empty ones).
        if (created_.empty() || !only_lock_in(out_)) return;
        unlink((out_ + "/lock").c_str());
        for (auto d = created_.rbegin(); d != created_.rend(); ++d) rmdir(d->c_str());
    }
    RunDir(const RunDir&) = delete;
    RunDir& operator=(const RunDir&) = delete;
    // Whether dir holds nothing but the lock file.
    static bool only_lock_in(const std::string& dir) {
        DIR* d = opendir(dir.c_str());
        if (!d) return false;
        bool only = true;
        while (const dirent* e = readdir(d)) {
            const std::string n = e->d_name;
            if (n != "." && n != ".." && n != "lock") only = false;
        }
        closedir(d);
        return only;
    }
    const std::string& path() const { return out_; }
    std::string log_path() const { return out_ + "/log.jsonl"; }
    std::string branch_path() const { return out_ + "/branch.json"; }  // a branch begun and not yet recorded
    // The global batch (tokens per step, all ranks) every checkpoint of this run records.
    void set_total_batch(long tokens) { total_batch_ = tokens; }

    // Steps of the complete checkpoints in OUT, oldest first: step_N directories (a link under such a name is
    // not a checkpoint of this run: it is never pruned through, or resumed from).
    std::vector<long> checkpoint_steps() const {
        std::vector<long> steps;
        for (const std::string& n : list_dir(out_)) {
            long s = step_of_dir_name(n);
            struct stat st;
            if (s >= 0 && lstat((out_ + "/" + n).c_str(), &st) == 0 && S_ISDIR(st.st_mode)) steps.push_back(s);
        }
        std::sort(steps.begin(), steps.end());
        return steps;
    }

    // One writer per OUT: rank 0 creates OUT and holds an exclusive lock (flock) on the directory OUT itself
    // until the process ends (the kernel drops it when the process dies, however it dies, so a lock is never
    // stale). A directory cannot be deleted or replaced by a path operation while it is open, so no rm, mv or
    // ln in OUT lets a second writer in; a second trainer on the same OUT (a --resume beside a live run
    // included, or one through a link to OUT) fails here naming the holder's process. OUT/lock is only the
    // note of that holder ("pid N on HOST"), for people and for this message. On a file system without flock
    // on directories (some NFS setups) the lock is taken on OUT/lock instead, whose identity every checkpoint
    // then checks (check_identity). A moved or replaced OUT is noticed before the next checkpoint write.
    void lock() {
        if (!lead()) return;
        for (size_t at = 0; at != std::string::npos;) {  // the directories make_dirs is about to create
            at = out_.find('/', at + 1);
            const std::string d = out_.substr(0, at);
            if (!d.empty() && !is_dir(d)) created_.push_back(d);
        }
        make_dirs(out_);
        const std::string p = out_ + "/lock";
        auto holder = [&] {
            std::string h = read_note(p);
            return h.empty() ? std::string("its process id not known: its note was removed or not written yet") : h;
        };
        auto busy = [&] {
            return ConfigError(out_ + " is in use by another train_prism (" + holder() + " holds " + p +
                               "); wait for it to end or stop it, or pass another -o");
        };
        dir_fd_ = open(out_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dir_fd_ < 0 || fstat(dir_fd_, &dir_st_) != 0)
            throw ConfigError("cannot open " + out_ + ": " + strerror(errno) + "; -o must name a writable directory");
        bool dir_locked = flock(dir_fd_, LOCK_EX | LOCK_NB) == 0;
        if (!dir_locked && errno == EWOULDBLOCK) throw busy();
        lock_fd_ = open(p.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
        struct stat st;
        if (lock_fd_ < 0 || fstat(lock_fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
            const std::string why = lock_fd_ < 0 ? strerror(errno) : "it is not a regular file";
            if (lock_fd_ >= 0) close(lock_fd_), lock_fd_ = -1;
            throw ConfigError("cannot create the lock file " + p + ": " + why + "; -o must name a writable directory");
        }
        // The lock file too (what an older train_prism locks), and the only lock where the directory's fails.
        if (flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
            const int e = errno;
            if (e == EWOULDBLOCK) throw busy();
            if (!dir_locked) throw ConfigError("cannot lock " + out_ + " or " + p + ": " + strerror(e));
        }
        file_lock_only_ = !dir_locked;
        lock_st_ = st;
        write_note();
    }

    // Rank 0's, before a checkpoint is written: OUT is still the directory lock() locked (not moved, renamed or
    // replaced since), so that a run never splits its checkpoints between two directories or writes into one
    // that another trainer may have taken. Where only OUT/lock could be locked, it must be the file locked.
    void check_identity() {
        if (!lead() || dir_fd_ < 0) return;
        struct stat st;
        if (stat(out_.c_str(), &st) != 0 || st.st_dev != dir_st_.st_dev || st.st_ino != dir_st_.st_ino)
            throw CheckpointError(out_ +
                                  " is no longer the directory this run started in (moved, renamed or "
                                  "replaced while it ran); stopping without writing a checkpoint: the run's "
                                  "checkpoints are wherever its directory went; move it back and --resume there");
        const bool note_gone =
            stat((out_ + "/lock").c_str(), &st) != 0 || st.st_dev != lock_st_.st_dev || st.st_ino != lock_st_.st_ino;
        if (note_gone && !file_lock_only_) {  // harmless under the directory's lock: put the note back
            const int fd = open((out_ + "/lock").c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
            if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
                close(lock_fd_);
                lock_fd_ = fd, lock_st_ = st;
                try {
                    write_note();
                } catch (const ConfigError&) {  // only a note
                }
            } else if (fd >= 0) {
                close(fd);
            }
        } else if (note_gone) {
            throw CheckpointError(out_ +
                                  "/lock was removed or replaced while this run held it (this file system "
                                  "locks only that file), so another train_prism may write here; stopping without "
                                  "writing a checkpoint: check for another trainer on " +
                                  out_ + ", then --resume");
        }
    }

    // What in OUT makes a fresh run refuse it without --overwrite, in words ("" when nothing): checkpoints,
    // files or links named like one, latest, model.bin, a non-empty log.
    std::string earlier_run() const {
        struct stat st;
        std::vector<std::string> held;
        std::vector<long> steps = checkpoint_steps();
        if (!steps.empty()) held.push_back("checkpoints up to " + step_dir_name(steps.back()));
        long links = 0;
        for (const std::string& n : list_dir(out_))
            if (step_of_dir_name(n) >= 0 && lstat((out_ + "/" + n).c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) links++;
        if (links)
            held.push_back(std::to_string(links) + (links > 1 ? " files or links" : " file or link") +
                           " named like a checkpoint");
        if (access((out_ + "/latest").c_str(), F_OK) == 0) held.push_back("a latest file");
        if (access((out_ + "/model.bin").c_str(), F_OK) == 0) held.push_back("a model.bin");
        if (stat(log_path().c_str(), &st) == 0 && st.st_size > 0)
            held.push_back("a log of " + std::to_string(st.st_size) + " bytes");
        std::string what;
        for (size_t i = 0; i < held.size(); i++)
            what += (i == 0 ? "" : i + 1 == held.size() ? " and " : ", ") + held[i];
        return what;
    }

    // What --overwrite deletes in OUT (start_fresh), in words, for the messages that advise it.
    std::string overwritten() const {
        const size_t n = checkpoint_steps().size();
        return (n ? "its " + std::to_string(n) + " checkpoint" + (n > 1 ? "s" : "") + ", " : std::string()) +
               "latest, model.bin and log.jsonl";
    }

    // Creates OUT and removes what a crash can leave behind: step_N.tmp directories and the .tmp files of
    // atomic writes (latest.tmp, model.bin.tmp, log.jsonl.tmp). Never touches a complete checkpoint. Rank 0's.
    void create() const {
        if (!lead()) return;
        make_dirs(out_);
        for (const std::string& n : list_dir(out_)) {
            if (n.size() > 4 && n.compare(n.size() - 4, 4, ".tmp") == 0 &&
                step_of_dir_name(n.substr(0, n.size() - 4)) >= 0)
                remove_checkpoint_dir(out_ + "/" + n);
            else if (n == "latest.tmp" || n == "model.bin.tmp" || n == "log.jsonl.tmp" || n == "run.json.tmp" ||
                     n == "branch.json.tmp")
                unlink((out_ + "/" + n).c_str());
        }
    }

    // Before step 1, what the first checkpoint will need: the longest path it writes (step `last_step`'s
    // directory, the last rank's state file, its .tmp) is created and removed again, so that a name too long
    // for the file system or an OUT that cannot be written to fails now, not after the work. What is there already
    // (a crash's leftover of that step) is left as it was: only what this check created goes. Rank 0's.
    void check_writable(long last_step, int world) const {
        if (!lead()) return;
        const std::string dir = out_ + "/" + step_dir_name(last_step) + ".tmp",
                          file = dir + "/" + state_file_name(std::max(0, world - 1)) + ".tmp";
        if (file.size() >= PATH_MAX)
            throw ConfigError("-o " + out_ + " is too long: the checkpoints' paths (" + std::to_string(file.size()) +
                              " bytes, e.g. " + file.substr(file.size() - 40) + ") must stay below " +
                              std::to_string(PATH_MAX) + "; pass a shorter -o");
        int fd = -1;
        const bool made_dir = mkdir(dir.c_str(), 0755) == 0;
        const bool ok = (made_dir || errno == EEXIST) &&
                        ((fd = open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644)) >= 0 ||
                         errno == EEXIST);
        const int e = errno;
        if (fd >= 0) close(fd), unlink(file.c_str());
        if (made_dir) rmdir(dir.c_str());
        if (!ok)
            throw ConfigError("the first checkpoint could not be written: creating " + file +
                              " failed: " + strerror(e) + "; pass a shorter or writable -o");
    }

    // A fresh run: with `overwrite`, deletes the earlier run's checkpoints (remove_checkpoint_dir: only what the
    // trainer wrote, links unlinked, never entered), latest and model.bin; then starts an empty log, created
    // afresh (a link there is never followed). Called once everything else has been checked, so a run that fails
    // to start deletes nothing. Rank 0's.
    void start_fresh(bool overwrite) const {
        if (!lead()) return;
        if (overwrite) {
            unlink((out_ + "/latest").c_str());
            unlink((out_ + "/model.bin").c_str());
            for (const std::string& n : list_dir(out_))
                if (step_of_dir_name(n) >= 0 && !remove_checkpoint_dir(out_ + "/" + n))
                    fprintf(stderr, "note: %s/%s left in place: it holds files train_prism did not write\n",
                            out_.c_str(), n.c_str());
        }
        unlink(log_path().c_str());
        const int fd = open(log_path().c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0) throw ConfigError("cannot write " + log_path() + ": " + strerror(errno));
        close(fd);
    }

    // The run id of the checkpoint a resume loaded (0 for a version 2 one: agree_run_id draws a new one).
    void set_run_id(uint64_t id) { run_id_ = id; }

    // Every rank takes rank 0's run id (the one of the checkpoint it resumed, else a new random one), so that
    // the files of one checkpoint all name one run. A collective; after the set-up.
    void agree_run_id() {
        if (lead() && run_id_ == 0) run_id_ = random_id();
        double halves[2] = {lead() ? (double)(run_id_ >> 32) : 0.0, lead() ? (double)(run_id_ & 0xffffffffu) : 0.0};
        dist_.sum(halves, 2, "the exchange of the run id");
        run_id_ = ((uint64_t)halves[0] << 32) | (uint64_t)halves[1];
    }

    // Writes OUT/step_N.tmp/{model.bin,state_rank<r>.bin}, renames the directory to OUT/step_N, then points
    // OUT/latest and OUT/model.bin at it (each by an atomic rename), and prunes older checkpoints to `keep`.
    // Refuses (CheckpointError) parameters that are not all finite: such a checkpoint would replace a good one.
    // Every rank calls it (see the top for who writes what).
    void save(Engine& eng, const LoaderState& loader, long step, long tokens, uint64_t rng) {
        std::string name = step_dir_name(step), dir = out_ + "/" + name, tmp = dir + ".tmp";
        std::vector<float> params(eng.num_params());
        eng.get_params(params.data());  // on every rank: with ZeRO-1 on the GPU it gathers the master weights
        const size_t bad = first_nonfinite(params.data(), params.size());
        if (bad < params.size())  // the same parameters on every rank: they all stop here
            throw CheckpointError("not writing a checkpoint at step " + std::to_string(step) + ": parameter " +
                                  std::to_string(bad) + " is " + std::to_string(params[bad]) +
                                  "; OUT/latest still names the last one written");
        const std::pair<size_t, size_t> range = eng.optimizer_range();
        const bool whole = range.first == 0 && range.second == eng.num_params();
        dist_.all_or_none([&] { check_identity(); });  // a moved OUT ends every rank here, before any write
        try {
            dist_.all_or_none([&] {  // a collective: afterwards step_N.tmp/ exists for every rank, or all know
                if (!lead()) return;
                remove_checkpoint_dir(tmp);
                if (mkdir(tmp.c_str(), 0755) != 0)  // not make_dirs: a moved OUT is never made again here
                    throw IoError("cannot create directory " + tmp + ": " + write_error(errno));
            });
            dist_.all_or_none([&] {  // afterwards every rank's files are complete, or every rank knows
                if (lead()) save_model(tmp + "/model.bin", eng.config(), params.data(), params.size(), step, run_id_);
                if (!whole || lead()) {  // ZeRO-0 with several ranks: every rank holds all of it, rank 0 writes it
                    TrainState st;
                    st.step = step;
                    st.tokens = tokens;
                    st.rng = rng;
                    st.run_id = run_id_, st.total_batch = total_batch_;
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
            if (lead()) remove_checkpoint_dir(tmp);
            throw;
        } catch (const AgreedFailure& e) {  // a full disk: free what this attempt took, keep the last one
            if (lead()) check_identity();   // or OUT moved while the files were written: say that
            if (lead()) remove_checkpoint_dir(tmp);
            std::string last = latest();
            throw AgreedFailure("checkpoint " + name + " not written: " + e.what() + "; " +
                                (last.empty() ? "no checkpoint yet" : out_ + "/latest still names " + last));
        }
        if (!lead()) return;
        try {
            remove_checkpoint_dir(dir);
            if (rename(tmp.c_str(), dir.c_str()) != 0)
                throw CheckpointError("cannot rename " + tmp + " to " + dir + ": " + strerror(errno) +
                                      (errno == ENOTEMPTY || errno == EEXIST
                                           ? " (" + dir + " holds files train_prism did not write; move them away)"
                                           : std::string()));
            write_atomically(out_ + "/latest", {{name.c_str(), name.size()}, {"\n", 1}});
        } catch (const std::runtime_error&) {
            check_identity();  // OUT moved between the check above and here: that is the reason, not the write
            throw;
        }
        link_model(dir);
        prune(step);
    }

    // A branch (--branch-from NAME): what it will change, decided before anything is (plan_branch), then done in an
    // order that a crash at any point can be completed from (begin_branch): its intent first, in OUT/branch.json
    // (atomically), then the old lineage's log linked into OUT/lineage_<UTC time>/ and its later checkpoints moved
    // there (kept, never deleted, never resumed by mistake), OUT/latest naming NAME and OUT/model.bin linking its
    // model. The caller then cuts the log, records the branch in run.json and calls end_branch, which removes
    // branch.json. A train_prism stopped anywhere in between leaves branch.json behind, and the next one on OUT
    // completes the branch from it (pending_branch, apply_branch: every step can be done again). Rank 0's.
    // What --branch-from `name` would change ("to" a checkpoint directory of OUT, else a ConfigError); changes
    // nothing. A branch to the checkpoint OUT/latest already names, with nothing later, is no change: null.
    std::unique_ptr<BranchIntent> plan_branch(const std::string& name) const {
        const long at = step_of_dir_name(name);
        struct stat st;
        if (at < 0 || lstat((out_ + "/" + name).c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
            throw ConfigError("--branch-from " + printable(name.substr(0, 200)) + ": not a checkpoint directory of " +
                              out_ + " (a name like step_00000020; " + out_ + " holds " +
                              (checkpoint_steps().empty() ? std::string("none")
                                                          : step_dir_name(checkpoint_steps().back()) + " and earlier") +
                              ")");
        std::unique_ptr<BranchIntent> b(new BranchIntent{name, latest(), "", {}});
        for (long s : checkpoint_steps())
            if (s > at) b->moved.push_back(s);
        if (b->moved.empty() && b->was == name) return nullptr;
        if (!b->moved.empty()) {
            char stamp[32];
            const time_t now = time(nullptr);
            strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", gmtime(&now));
            b->aside = std::string("lineage_") + stamp;
            for (int k = 2; access((out_ + "/" + b->aside).c_str(), F_OK) == 0; k++)
                b->aside = std::string("lineage_") + stamp + "_" + std::to_string(k);
        }
        return b;
    }

    // The branch's intent into OUT/branch.json, then its changes (apply_branch).
    void begin_branch(const BranchIntent& b) const {
        std::string moved;
        for (size_t i = 0; i < b.moved.size(); i++) moved += (i ? ", " : "") + std::to_string(b.moved[i]);
        const std::string j = "{\"to\": " + json::quote(b.to) + ", \"was\": " + json::quote(b.was) +
                              ", \"aside\": " + json::quote(b.aside) + ", \"moved\": [" + moved + "]}\n";
        write_atomically(branch_path(), {{j.data(), j.size()}});
        apply_branch(b);
    }

    // The branch's changes, each of which may have been done already (by a train_prism stopped half way).
    void apply_branch(const BranchIntent& b) const {
        if (!b.aside.empty()) {
            const std::string aside = out_ + "/" + b.aside;
            if (mkdir(aside.c_str(), 0755) != 0 && errno != EEXIST)
                throw ConfigError("cannot create " + aside + ": " + strerror(errno));
            // The old lineage's log, whole (the caller cuts OUT's back to the branch point): a hard link, so that
            // the cut (a new file renamed over log.jsonl) leaves it as it was.
            const std::string log_aside = aside + "/log.jsonl";
            if (access(log_aside.c_str(), F_OK) != 0 && access(log_path().c_str(), F_OK) == 0 &&
                link(log_path().c_str(), log_aside.c_str()) != 0)
                throw ConfigError("cannot link " + log_path() + " into " + aside + ": " + strerror(errno));
            for (long s : b.moved) {
                const std::string from = out_ + "/" + step_dir_name(s), to = aside + "/" + step_dir_name(s);
                struct stat st;
                if (lstat(from.c_str(), &st) != 0 && lstat(to.c_str(), &st) == 0) continue;  // moved already
                if (rename(from.c_str(), to.c_str()) != 0)
                    throw ConfigError("cannot move " + from + " to " + to + ": " + strerror(errno));
            }
        }
        write_atomically(out_ + "/latest", {{b.to.c_str(), b.to.size()}, {"\n", 1}});
        link_model(out_ + "/" + b.to);
    }

    // The branch a train_prism began on OUT and did not finish (OUT/branch.json), else null. A file that is not
    // one the trainer wrote is an error naming it.
    std::unique_ptr<BranchIntent> pending_branch() const {
        struct stat st;
        if (lstat(branch_path().c_str(), &st) != 0) return nullptr;
        auto bad = [&](const std::string& why) {
            return ConfigError(branch_path() + " is not a branch train_prism began (" + why +
                               "); a branch that was stopped half way leaves it: move it aside if it is not one");
        };
        if (!S_ISREG(st.st_mode)) throw bad(std::string("it is ") + file_kind(st.st_mode));
        json::Value v;
        try {
            v = json::parse(read_text(branch_path(), 1 << 16));
        } catch (const std::runtime_error& e) {
            throw bad(e.what());
        }
        const json::Value *to = v.find("to"), *was = v.find("was"), *aside = v.find("aside"), *moved = v.find("moved");
        auto text = [](const json::Value* x) { return x && x->kind == json::Value::String; };
        if (v.kind != json::Value::Object || !text(to) || !text(was) || !text(aside) || !moved ||
            moved->kind != json::Value::Array)
            throw bad("not {\"to\", \"was\", \"aside\", \"moved\"}");
        std::unique_ptr<BranchIntent> b(new BranchIntent{to->str, was->str, aside->str, {}});
        const bool aside_ok =
            b->aside.empty() || (b->aside.rfind("lineage_", 0) == 0 &&
                                 b->aside.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLM"
                                                            "NOPQRSTUVWXYZ0123456789_") == std::string::npos);
        if (step_of_dir_name(b->to) < 0 || (!b->was.empty() && step_of_dir_name(b->was) < 0) || !aside_ok)
            throw bad("a name in it is not a checkpoint's or a lineage's");
        for (const json::Value& m : moved->arr) {
            if (m.kind != json::Value::Number || m.str.empty() || m.str.size() > 15 ||
                m.str.find_first_not_of("0123456789") != std::string::npos)
                throw bad("a moved step is not a whole number");
            b->moved.push_back(std::stol(m.str));
        }
        if (!b->moved.empty() && b->aside.empty()) throw bad("moved steps but no lineage to move them to");
        return b;
    }

    // The branch is recorded (run.json): OUT/branch.json goes.
    void end_branch() const { unlink(branch_path().c_str()); }

    // The checkpoint OUT/latest names ("" when there is no OUT/latest). A name that is not a checkpoint
    // directory's (a corrupt or hand-edited file) is an error that shows it, control bytes escaped.
    std::string latest() const {
        if (access((out_ + "/latest").c_str(), F_OK) != 0) return "";
        std::string name = read_text(out_ + "/latest", 4096);
        if (step_of_dir_name(name) < 0)
            throw CheckpointError(out_ + "/latest is corrupt: it holds \"" + printable(name.substr(0, 200)) +
                                  "\", not a checkpoint name like step_00000100; write the name of a step_* "
                                  "directory of " +
                                  out_ + " into it");
        return name;
    }

    // Keeps the log lines of steps <= last_step (a resumed run rewrites what the interrupted one logged after
    // its checkpoint, so the log reads as one uninterrupted run). A line that is not whole JSON (torn by a
    // crash or a full disk) is dropped. Rank 0's. Returns the line of step last_step as it was ("" when there is
    // none); replace_last, when not empty, is written in its place (a validation re-run at resume adds its loss).
    std::string truncate_log(long last_step, const std::string& replace_last = "") const {
        std::string kept;
        if (!lead()) return kept;
        // Streamed line by line through log.jsonl.tmp (util/io.h's write_via_tmp), so a log of any size costs one
        // line's memory; a "line" longer than any the trainer writes (kMaxLogLine) is not one of its lines and is
        // dropped unread.
        constexpr size_t kMaxLogLine = (size_t)1 << 20;
        write_via_tmp(log_path(), [&](FILE* out) {
            bool wrote = true;
            if (access(log_path().c_str(), F_OK) != 0) return wrote;
            size_t size;
            FileHandle fh = open_sized(log_path(), "log", size);
            std::string line;
            bool overlong = false;
            char buf[1 << 16];
            size_t got;
            auto take = [&] {
                long s = -1;
                if (!overlong && sscanf(line.c_str(), "{\"step\": %ld", &s) == 1 && s <= last_step && is_json(line)) {
                    if (s == last_step) kept = line;
                    const std::string& w = s == last_step && !replace_last.empty() ? replace_last : line;
                    wrote = wrote && fwrite(w.data(), 1, w.size(), out) == w.size() && fputc('\n', out) != EOF;
                }
                line.clear(), overlong = false;
            };
            while ((got = fread(buf, 1, sizeof buf, fh.get())) > 0) {
                for (size_t a = 0; a < got;) {
                    const char* nl = (const char*)memchr(buf + a, '\n', got - a);
                    const size_t b = nl ? (size_t)(nl - buf) : got;
                    if (!overlong && line.size() + (b - a) <= kMaxLogLine) line.append(buf + a, b - a);
                    else overlong = true, line.clear();
                    if (nl) take();
                    a = b + 1;
                }
            }
            if (!line.empty() || overlong) take();
            if (ferror(fh.get())) throw IoError("error reading " + log_path() + ": " + strerror(errno));
            return wrote;
        });
        return kept;
    }

    // The AdamW moments of the parameters [range.first, range.second) from the state files of checkpoint dir
    // (each must name the run `run_id` that model.bin names), and the rest of its training state (step, tokens,
    // RNG and loader position, which every file carries).
    // state_rank0.bin's header says how many files there are; their ranges must tile [0, P), all at one step.
    // Only the files that overlap the range are read (and checksummed); rank 0's range starts at 0, so it takes
    // the RNG state from state_rank0.bin, rank 0's own.
    static TrainState load_optimizer_range(const std::string& dir, size_t P, std::pair<size_t, size_t> range,
                                           uint64_t run_id) {
        std::vector<StateRange> files{load_state_range(dir + "/" + state_file_name(0))};
        for (int i = 1; i < std::max(1, files[0].world); i++)
            files.push_back(load_state_range(dir + "/" + state_file_name(i)));
        auto run = [](uint64_t id) {
            char b[32];
            snprintf(b, sizeof b, id ? "run %016llx" : "no run id (version 2)", (unsigned long long)id);
            return std::string(b);
        };
        int64_t covered = 0;
        for (size_t i = 0; i < files.size(); i++) {
            const StateRange& f = files[i];
            if (f.run_id != run_id)
                throw CheckpointError(dir + ": " + state_file_name((int)i) + " names " + run(f.run_id) +
                                      ", model.bin " + run(run_id) +
                                      ": the checkpoint mixes two runs (a file copied in from another "
                                      "run?); resume from a checkpoint written whole, or put its own files back");
            if (f.P != (int64_t)P || f.first != covered || f.world != files[0].world || f.step != files[0].step)
                throw CheckpointError(
                    dir + ": " + state_file_name((int)i) + " does not continue the optimizer state of " +
                    state_file_name(0) + " (parameters from " + std::to_string(f.first) + " of " + std::to_string(f.P) +
                    ", step " + std::to_string(f.step) + "); the checkpoint is incomplete or mixes two runs");
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
            for (size_t k = a; k < b; k++)
                out.m[k - range.first] = f.m[k - first], out.v[k - range.first] = f.v[k - first];
            if (!have_rest)
                out.step = f.step, out.tokens = f.tokens, out.rng = f.rng, out.loader = f.loader,
                out.total_batch = f.total_batch;
            have_rest = true;
        }
        return out;
    }

  private:
    // OUT/model.bin becomes a hard link to the checkpoint dir's model.bin, by an atomic rename (best effort: the
    // checkpoint and OUT/latest are what a resume reads).
    void link_model(const std::string& dir) const {
        const std::string link_tmp = out_ + "/model.bin.tmp";
        unlink(link_tmp.c_str());
        if (link((dir + "/model.bin").c_str(), link_tmp.c_str()) == 0)
            rename(link_tmp.c_str(), (out_ + "/model.bin").c_str());
    }

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
            if (!remove_checkpoint_dir(out_ + "/" + step_dir_name(older[i])))
                fprintf(stderr, "note: %s/%s not pruned: it holds files train_prism did not write\n", out_.c_str(),
                        step_dir_name(older[i]).c_str());
    }

    std::string out_;
    int keep_;
    const Dist& dist_;
    int lock_fd_ = -1, dir_fd_ = -1;          // OUT/lock and OUT itself, locked (lock())
    struct stat dir_st_ = {}, lock_st_ = {};  // their identities when locked
    bool file_lock_only_ = false;             // the file system would not lock the directory

    // "pid N on HOST" into OUT/lock (lock_fd_).
    void write_note() const {
        char host[256] = "";
        gethostname(host, sizeof host - 1);
        const std::string me = "pid " + std::to_string((long)getpid()) + " on " + host + "\n";
        if (ftruncate(lock_fd_, 0) != 0 || pwrite(lock_fd_, me.data(), me.size(), 0) != (ssize_t)me.size())
            throw ConfigError("cannot write " + out_ + "/lock: " + write_error(errno));
    }

    // The holder's note in OUT/lock, one line of at most 200 bytes, control bytes escaped ("" when none).
    static std::string read_note(const std::string& p) {
        const int fd = open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) return "";
        struct stat st;
        char who[200] = "";
        const ssize_t n = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? pread(fd, who, sizeof who - 1, 0) : 0;
        close(fd);
        std::string h(who, n > 0 ? (size_t)n : 0);
        h = h.substr(0, h.find('\n'));
        while (!h.empty() && h.back() == ' ') h.pop_back();
        return printable(h);
    }
    std::vector<std::string> created_;  // the directories lock() created (OUT and any missing parents), outermost first
    uint64_t run_id_ = 0;               // written into every file of every checkpoint (agree_run_id)
    long total_batch_ = 0;

    bool lead() const { return dist_.rank == 0; }
    static std::string state_file_name(int rank) { return "state_rank" + std::to_string(rank) + ".bin"; }
};
