// dist/process_group.h: the process group of a data-parallel run: which rank this process is, of how many, which local
// rank on its node, and the host-side collectives the training loop and the CPU engine need (sums of losses and eval
// counts, barriers around checkpoints, the gradient reduce-scatter and parameter all-gather of the CPU engine).
// train_prism and eval_zeroshot start it first thing in main.
//
// How a process group forms (docs/training.md, "Many GPUs and nodes"):
//   1. an MPI launcher: mpirun -np 8, mpirun --host a:8,b:8, mpirun --hostfile H, srun --mpi=pmix. Seen from
//      its environment (launcher_world below); MPI_Init, rank and world from MPI, the local rank from
//      MPI_Comm_split_type(MPI_COMM_TYPE_SHARED). Host collectives are MPI's; the GPUs' NCCL id is broadcast
//      from rank 0 with MPI_Bcast.
//   2. the environment rendezvous, for launchers that start N copies without PMI (srun on a Slurm without
//      PMIx): PRISM_RENDEZVOUS=DIR (a directory every node sees) and RANK, WORLD_SIZE, LOCAL_RANK (or Slurm's
//      SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID). No MPI: rank 0 writes the NCCL id into DIR and the
//      others read it (share_id); host collectives then run over NCCL, installed by comm.cuh as `device`. GPUs
//      only: the CPU engine has no collectives without MPI.
//   3. neither: one process, and every collective returns at once. RANK or WORLD_SIZE in the environment then
//      (a rank > 0 or a world > 1 without PRISM_RENDEZVOUS or a launcher) is an error: such copies would not
//      form a group but run as independent processes writing one output.
// A binary built without MPI that a launcher started as several ranks refuses with one line saying how to
// rebuild, instead of running N copies that overwrite each other's output; so does an Open MPI build started by
// srun without PMIx. Every launcher variable read here (OMPI_*, PMI_*, SLURM_PROCID, SLURM_STEP_NUM_TASKS,
// SLURM_LOCALID, SLURM_STEP_TASKS_PER_NODE, SLURM_JOB_ID, SLURM_STEP_ID, RANK, ...) that is malformed, or missing
// where it is needed, is refused in one line naming it.
//
// Errors: DistError, one line. A collective that fails (MPI's error handler is set to return) throws; one that
// blocks too long is ended by the watchdog (Watchdog, below). all_or_none makes a failure during set-up (bad flags,
// missing data) end every rank with one message instead of N copies of it, or N - 1 ranks waiting forever.
// Does not: pick a GPU or talk to NCCL (cuda_engine.cu and comm.cuh do, with the ranks found here).
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#ifdef PRISM_MPI
#include <mpi.h>
#endif

#include "util/errors.h"

// Bounded waits for a data-parallel run. Every blocking collective (an MPI call, a wait for NCCL
// work, a barrier around a checkpoint) runs inside a Watchdog::Wait scope naming it; a thread checks once a
// second, and when one rank has waited longer than the limit (--comm-timeout, default 600 s: another rank died
// without the launcher noticing, or hangs) it prints one line and ends this process, so that the launcher ends
// the job instead of leaving every GPU spinning forever:
//
//   train_prism: error: rank 0: waited 600 s in the all-reduce of the gradients (step 1234): another rank died
//   or hangs; ending the job (--comm-timeout sets the limit)
//
// The same thread runs the polls registered with add_poll (NCCL's asynchronous error check: a peer that lost
// its network or its process), which end the process the same way.
// Why _exit and not MPI_Abort: the main thread is inside MPI or CUDA when this fires, and MPI_Abort from a
// second thread needs MPI_THREAD_MULTIPLE; a process that exits without MPI_Finalize makes mpirun (and srun
// --kill-on-bad-exit) end every other rank, which is what MPI_Abort would do.
// Does not: time anything outside a Wait (a long checkpoint write or eval on one rank is fine: the others wait
// for it inside a Wait, which is what the limit is sized for), or run at all with one rank.

class Watchdog {
  public:
    // The process's one watchdog (what it guards, collectives, is process-wide too).
    static Watchdog& get() {
        static Watchdog w;
        return w;
    }

    // Starts the checking thread. program and rank name this process in the message; limit_s bounds every
    // Wait; on_fire runs before the process ends (e.g. ncclCommAbort, so the GPU work stops).
    void start(const std::string& program, int rank, double limit_s) {
        std::lock_guard<std::mutex> lk(mu_);
        program_ = program, rank_ = rank, limit_s_ = limit_s;
        if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    }
    void set_limit(double limit_s) {
        std::lock_guard<std::mutex> lk(mu_);
        limit_s_ = limit_s;
    }
    double limit() const { return limit_s_; }
    void set_step(long step) { step_ = step; }
    // poll() returns "" while all is well, else the one-line reason to end the job.
    void add_poll(std::function<std::string()> poll) {
        std::lock_guard<std::mutex> lk(mu_);
        polls_.push_back(std::move(poll));
    }
    void on_fire(std::function<void()> f) {
        std::lock_guard<std::mutex> lk(mu_);
        on_fire_ = std::move(f);
    }
    void stop() {
        {
            std::lock_guard<std::mutex> lk(mu_);
            stopping_ = true;
        }
        cv_.notify_all();
        if (thread_.joinable()) thread_.join();
        stopping_ = false;
    }
    ~Watchdog() { stop(); }

    // A blocking wait: `what` (a string literal) names it in the message.
    class Wait {
      public:
        explicit Wait(const char* what) : w_(get()), outer_(w_.what_.load()) {
            if (!outer_) {
                w_.since_ = now();
                w_.what_ = what;
            }
        }
        ~Wait() {
            if (!outer_) w_.what_ = nullptr;
        }
        Wait(const Wait&) = delete;
        Wait& operator=(const Wait&) = delete;

      private:
        Watchdog& w_;
        const char* outer_;  // a Wait inside another keeps the outer one's name and start
    };

  private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::thread thread_;
    bool stopping_ = false;
    std::string program_ = "prism";
    int rank_ = 0;
    std::atomic<double> limit_s_{600};
    std::atomic<const char*> what_{nullptr};
    std::atomic<double> since_{0};
    std::atomic<long> step_{-1};
    std::vector<std::function<std::string()>> polls_;
    std::function<void()> on_fire_;

    static double now() {
        return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    }

    void loop() {
        std::unique_lock<std::mutex> lk(mu_);
        while (!cv_.wait_for(lk, std::chrono::seconds(1), [this] { return stopping_; })) {
            for (auto& poll : polls_) {
                std::string why = poll();
                if (!why.empty()) fire(why);
            }
            const char* what = what_.load();
            const double waited = now() - since_.load();
            if (what && waited > limit_s_.load()) {
                std::string at = step_ >= 0 ? " (step " + std::to_string(step_.load() + 1) + ")" : "";
                fire("waited " + std::to_string((long)waited) + " s in " + what + at +
                     ": another rank died or hangs; ending the job (--comm-timeout sets the limit)");
            }
        }
    }

    [[noreturn]] void fire(const std::string& why) {
        fprintf(stderr, "%s: error: rank %d: %s\n", program_.c_str(), rank_, why.c_str());
        fflush(stderr);
        fflush(stdout);
        if (on_fire_) on_fire_();
        _exit(1);
    }
};

// all_or_none's verdicts: its work failed on some rank, and every rank knows. The lowest failing rank throws
// AgreedFailure with its message (printed once); every other rank throws ReportedByAnotherRank (exits 1 without a
// message). Nobody waits in a collective, so nothing needs aborting.
struct AgreedFailure : std::runtime_error {
    using std::runtime_error::runtime_error;
};
struct ReportedByAnotherRank : std::runtime_error {
    ReportedByAnotherRank() : std::runtime_error("reported by another rank") {}
};

// A variable's value as shown in an error: at most 40 characters, control characters as '?'.
inline std::string shown_value(const char* s) {
    std::string shown;
    for (const char* c = s; *c && shown.size() < 40; c++) shown += (unsigned char)*c < 0x20 ? '?' : *c;
    return shown;
}

// An integer from the environment (primary, else fallback, else dflt). A value that is not a whole number
// (RANK=abc, RANK=) is an error naming the variable and its value, never read as 0: rank 0 is the one that
// writes OUT. lenient: only the leading number counts (Slurm's SLURM_STEP_TASKS_PER_NODE reads "2(x3)"), but
// there must be one ("abc" is refused).
inline int env_int(const char* primary, const char* fallback, int dflt, bool lenient = false) {
    const char* name = primary;
    const char* s = getenv(primary);
    if (!s && fallback) s = getenv(name = fallback);
    if (!s) return dflt;
    char* end = nullptr;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (end == s || (*end && !lenient) || errno || v < INT32_MIN || v > INT32_MAX)
        throw DistError(
            std::string(name) + "=" + shown_value(s) +
            " in the environment is not a whole number; set it to this process's value (e.g. 0) or unset it");
    return (int)v;
}

// The rank count a launcher announces in the environment (0: none), and the variable that said so. OpenMPI's
// mpirun sets OMPI_COMM_WORLD_SIZE, MPICH / Intel MPI / srun --mpi=pmi2 set PMI_SIZE, every srun step sets
// SLURM_STEP_NUM_TASKS. (Not SLURM_NTASKS: an sbatch script has it too, where it describes the allocation, so
// a single process started by the script would be mistaken for one of several.) A value that is not a count of
// at least 1 is an error naming the variable: a launcher's variable read as "no launcher" would let every rank
// run alone into one output.
inline int launcher_world(std::string& var) {
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"}) {
        const char* s = getenv(v);
        if (!s) continue;
        char* end = nullptr;
        errno = 0;
        const long n = strtol(s, &end, 10);
        if (end == s || *end || errno || n < 1 || n > INT32_MAX)
            throw DistError(std::string(v) + "=" + shown_value(s) +
                            " in the environment is not a number of processes (a whole number, at least 1); the "
                            "launcher sets it: unset it when starting one process by hand");
        var = v;
        return (int)n;
    }
    var.clear();
    return 0;
}

// ------------------------------------------------------------------------------------------------------
// The shared-file exchange of the environment rendezvous: rank 0 publishes `bytes` (the NCCL unique id) as
// DIR/prism_id.KEY, the others wait for it. KEY is the Slurm job and step when there is one, so concurrent
// jobs sharing DIR never read each other's id; a file older than this process (minus slack for clock skew
// between nodes) is a stale one from a crashed run and is ignored until rank 0 replaces it. Rank 0 removes the
// file once every rank has joined (remove_id).

// A part of the id file's name from the environment ("" when var is unset): SLURM_JOB_ID and SLURM_STEP_ID are
// whole numbers, PRISM_RENDEZVOUS_KEY letters, digits, '.', '_' and '-'. Anything else (a '/' would put the file
// outside DIR) is an error naming the variable.
inline std::string rendezvous_key_part(const char* var, bool digits) {
    const char* s = getenv(var);
    if (!s) return "";
    bool ok = *s && strlen(s) <= 64;
    for (const char* c = s; ok && *c; c++)
        ok = isdigit((unsigned char)*c) || (!digits && (isalnum((unsigned char)*c) || strchr("._-", *c)));
    if (!ok)
        throw DistError(std::string(var) + "=" + shown_value(s) + " in the environment is not " +
                        (digits ? "a whole number (Slurm sets it to the job's or step's id)"
                                : "a name of at most 64 letters, digits, '.', '_' and '-'") +
                        "; unset it or correct it");
    return s;
}

inline std::string rendezvous_key() {
    const std::string job = rendezvous_key_part("SLURM_JOB_ID", true),
                      step = rendezvous_key_part("SLURM_STEP_ID", true),
                      user = rendezvous_key_part("PRISM_RENDEZVOUS_KEY", false);  // for launchers without job ids
    const std::string k = job.empty() ? "nojob" : job + "." + (step.empty() ? "0" : step);
    return user.empty() ? k : k + "." + user;
}

inline std::string rendezvous_file(const std::string& dir) { return dir + "/prism_id." + rendezvous_key(); }

// Rank 0: write atomically (NAME.tmp, then rename), so a reader never sees half an id.
inline void rendezvous_publish(const std::string& dir, const void* bytes, size_t n) {
    const std::string path = rendezvous_file(dir), tmp = path + ".tmp";
    FILE* f = fopen(tmp.c_str(), "wb");
    if (!f)
        throw DistError("rendezvous: cannot write " + tmp + ": " + strerror(errno) +
                        "; PRISM_RENDEZVOUS must be a writable directory every node sees");
    const bool ok = fwrite(bytes, 1, n, f) == n && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if ((fclose(f) != 0) || !ok || rename(tmp.c_str(), path.c_str()) != 0)
        throw DistError("rendezvous: cannot write " + path + ": " + strerror(errno));
}

// The others: poll until a file at least as new as started_at - 120 s holds n bytes, for at most timeout_s.
inline void rendezvous_read(const std::string& dir, void* bytes, size_t n, double timeout_s, time_t started_at) {
    const std::string path = rendezvous_file(dir);
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
        struct stat st;
        if (stat(path.c_str(), &st) == 0 && (size_t)st.st_size == n && st.st_mtime >= started_at - 120) {
            FILE* f = fopen(path.c_str(), "rb");
            bool ok = f && fread(bytes, 1, n, f) == n;
            if (f) fclose(f);
            if (ok) return;
        }
        if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s)
            throw DistError("rendezvous: rank 0 did not publish " + path + " within " +
                            std::to_string((long)timeout_s) +
                            " s; is rank 0 running, and is PRISM_RENDEZVOUS the same shared directory on every node?");
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
}

// ------------------------------------------------------------------------------------------------------

class Dist {
  public:
    int rank = 0, world = 1, local_rank = 0, local_world = 1;

    // Host collectives over NCCL for the rendezvous (installed by comm.cuh once the communicator is up):
    // in-place sum of n doubles on every rank, and a barrier.
    std::function<void(double*, int)> device_sum;
    std::function<void()> device_barrier;

    Dist() = default;
    Dist(const Dist&) = delete;
    Dist& operator=(const Dist&) = delete;
    ~Dist() { finish(); }

    // Forms the process group (see the top). program names the binary in messages.
    void start(int* argc, char*** argv, const std::string& program) {
        program_ = program;
        started_at_ = time(nullptr);
        std::string var;
        const int announced = launcher_world(var);
        const char* rdv = getenv("PRISM_RENDEZVOUS");
        if (rdv && *rdv) {
            rendezvous_dir_ = rdv;
            // Each from the generic variable or Slurm's: missing, not a whole number or out of range is an
            // error naming the variable.
            auto from = [](const char* a, const char* b, int lowest) {
                const char* name = getenv(a) ? a : b;
                if (!getenv(name))
                    throw DistError(std::string("PRISM_RENDEZVOUS is set but neither ") + a + " nor " + b +
                                    " is in the environment: srun sets " + b + "; other launchers must set " + a +
                                    " per process");
                const int v = env_int(name, nullptr, 0);
                if (v < lowest)
                    throw DistError(std::string(name) + "=" + std::to_string(v) + " in the environment is below " +
                                    std::to_string(lowest) + "; correct it or unset it");
                return std::make_pair(v, std::string(name));
            };
            const auto r = from("RANK", "SLURM_PROCID", 0), w = from("WORLD_SIZE", "SLURM_STEP_NUM_TASKS", 1),
                       l = from("LOCAL_RANK", "SLURM_LOCALID", 0);
            rank = r.first, world = w.first, local_rank = l.first;
            if (rank >= world)
                throw DistError(r.second + "=" + std::to_string(rank) + " in the environment is not below " + w.second +
                                "=" + std::to_string(world) + ": the ranks are 0 to " + w.second + " - 1");
            local_world = env_int("LOCAL_WORLD_SIZE", "SLURM_STEP_TASKS_PER_NODE", 0, true);
            rendezvous_key();                                             // its variables checked now, before any work
            if (local_world <= local_rank) local_world = local_rank + 1;  // only used to split CPU threads
            how_ = std::to_string(world) + " ranks by environment rendezvous in " + rendezvous_dir_;
        } else if (announced > 1) {
#ifdef PRISM_MPI
#ifdef OPEN_MPI
            // Open MPI joins the tasks of an srun step through PMIx only: srun without it (MpiDefault=none, no
            // --mpi=pmix) sets none of PMI's variables, and MPI_Init would print a page and abort every task.
            if (var == "SLURM_STEP_NUM_TASKS" && !getenv("PMIX_RANK"))
                throw DistError("srun started " + std::to_string(announced) +
                                " tasks (SLURM_STEP_NUM_TASKS=" + std::to_string(announced) +
                                ") without PMIx (PMIX_RANK is not set), and this " + program +
                                "'s Open MPI joins an srun step through PMIx only: run srun --mpi=pmix (srun "
                                "--mpi=list names this Slurm's plugins), or set PRISM_RENDEZVOUS (GPUs; "
                                "docs/training.md, Many GPUs and nodes)");
#endif
            // The watchdog bounds MPI_Init too: a rank that never joins (stopped, or lost) ends the job after the
            // limit instead of leaving the others waiting in MPI_Init forever.
            Watchdog::get().start(program,
                                  env_int("OMPI_COMM_WORLD_RANK", "PMI_RANK", env_int("SLURM_PROCID", nullptr, -1)),
                                  Watchdog::get().limit());
            Watchdog::Wait joining("MPI_Init (the forming of the process group)");
            int provided = 0;
            MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
            mpi_ = true;
            MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
            MPI_Comm_rank(MPI_COMM_WORLD, &rank);
            MPI_Comm_size(MPI_COMM_WORLD, &world);
            MPI_Comm node;
            MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
            MPI_Comm_rank(node, &local_rank);
            MPI_Comm_size(node, &local_world);
            MPI_Comm_free(&node);
            if (world != announced)
                throw DistError("the launcher started " + std::to_string(announced) + " ranks (" + var +
                                ") but MPI sees " + std::to_string(world) +
                                ": this MPI cannot talk to the launcher (srun without PMIx?); use "
                                "srun --mpi=pmix, mpirun, or PRISM_RENDEZVOUS (docs/training.md, Many GPUs and nodes)");
            int leader = local_rank == 0, nodes = 0;  // node count = local rank 0s
            MPI_Allreduce(&leader, &nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
            char version[MPI_MAX_LIBRARY_VERSION_STRING];
            int len = 0;
            MPI_Get_library_version(version, &len);
            std::string v(version, strnlen(version, len));
            v = v.substr(0, v.find(','));
            how_ = std::to_string(world) + " ranks over MPI (" + v + ") on " + std::to_string(nodes) +
                   (nodes == 1 ? " node" : " nodes");
#else
            throw DistError("started as " + std::to_string(announced) + " ranks (" + var + "=" +
                            std::to_string(announced) + ") but this " + program +
                            " was built without MPI; install OpenMPI (bash setup.sh) and "
                            "rebuild with make clean && make");
#endif
        } else {
            const int r = env_int("RANK", nullptr, 0), w = env_int("WORLD_SIZE", nullptr, 1);
            if (r != 0 || w != 1)
                throw DistError("RANK=" + std::to_string(r) + " and WORLD_SIZE=" + std::to_string(w) +
                                " are set, but "
                                "neither a launcher (mpirun, srun --mpi=pmix) nor PRISM_RENDEZVOUS=DIR: these copies "
                                "would run as independent processes into one output; set PRISM_RENDEZVOUS, launch "
                                "with mpirun or srun, or unset RANK and WORLD_SIZE");
        }
        (void)argc, (void)argv;
        if (world > 1) Watchdog::get().start(program, rank, Watchdog::get().limit());
    }

    // MPI_Finalize (idempotent). Called by the destructor too.
    void finish() {
        if (world > 1) Watchdog::get().stop();
#ifdef PRISM_MPI
        if (mpi_) {
            int done = 0;
            MPI_Finalized(&done);
            if (!done) MPI_Finalize();
        }
#endif
        mpi_ = false;
    }

    bool over_mpi() const { return mpi_; }
    bool rendezvous() const { return !rendezvous_dir_.empty(); }
    // One line for the log: "one process", "8 ranks over MPI (Open MPI v4.1.4) on 1 node", ...
    std::string describe() const { return world == 1 ? "one process" : how_; }
    const std::string& program() const { return program_; }

    // ---- collectives: every rank calls them in the same order; `what` names the wait for the watchdog ----

    // x (n) in place: the sum over ranks, the same bits on every rank.
    void sum(double* x, int n, const char* what) const {
        if (world == 1) return;
        Watchdog::Wait w(what);
#ifdef PRISM_MPI
        if (mpi_) return check(MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), what);
#endif
        need_device(what);
        device_sum(x, n);
    }
    double sum(double x, const char* what) const {
        sum(&x, 1, what);
        return x;
    }
    double mean(double x, const char* what) const { return sum(x, what) / world; }

    void barrier(const char* what) const {
        if (world == 1) return;
        Watchdog::Wait w(what);
#ifdef PRISM_MPI
        if (mpi_) return check(MPI_Barrier(MPI_COMM_WORLD), what);
#endif
        need_device(what);
        device_barrier();
    }

    // Rank 0's `bytes` to every rank: MPI_Bcast, or the rendezvous file. For the NCCL unique id.
    void share_id(void* bytes, size_t n) const {
        if (world == 1) return;
        Watchdog::Wait w("the exchange of the NCCL id");
#ifdef PRISM_MPI
        if (mpi_) return check(MPI_Bcast(bytes, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD), "the broadcast of the NCCL id");
#endif
        if (rank == 0) rendezvous_publish(rendezvous_dir_, bytes, n);
        else rendezvous_read(rendezvous_dir_, bytes, n, Watchdog::get().limit(), started_at_);
    }
    // Rank 0, once every rank has joined: the id file is no longer needed (a later job must not read it).
    void remove_id() const {
        if (rendezvous() && rank == 0) unlink(rendezvous_file(rendezvous_dir_).c_str());
    }

    // The CPU engine's gradient and parameter collectives over MPI (float, host memory):
    // reduce-scatter: recv (chunk) = sum over ranks of send[rank * chunk, (rank + 1) * chunk)
    void reduce_scatter_sum(const float* send, float* recv, size_t chunk, const char* what) const {
        if (world == 1) return (void)std::copy(send, send + chunk, recv);
        Watchdog::Wait w(what);
#ifdef PRISM_MPI
        if (mpi_)
            return check(MPI_Reduce_scatter_block(send, recv, (int)chunk, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), what);
#endif
        throw DistError(std::string(what) + ": the CPU engine needs MPI for several ranks; launch with mpirun");
    }
    // all-gather: recv (world * chunk) = every rank's send (chunk), in rank order
    void all_gather(const float* send, float* recv, size_t chunk, const char* what) const {
        if (world == 1) return (void)std::copy(send, send + chunk, recv);
        Watchdog::Wait w(what);
#ifdef PRISM_MPI
        if (mpi_)
            return check(MPI_Allgather(send, (int)chunk, MPI_FLOAT, recv, (int)chunk, MPI_FLOAT, MPI_COMM_WORLD), what);
#endif
        throw DistError(std::string(what) + ": the CPU engine needs MPI for several ranks; launch with mpirun");
    }
    // all-gather of one double per rank: out (world), in rank order (for sums in a fixed order)
    void all_gather(double x, double* out, const char* what) const {
        if (world == 1) return (void)(out[0] = x);
        Watchdog::Wait w(what);
#ifdef PRISM_MPI
        if (mpi_) return check(MPI_Allgather(&x, 1, MPI_DOUBLE, out, 1, MPI_DOUBLE, MPI_COMM_WORLD), what);
#endif
        need_device(what);
        for (int r = 0; r < world; r++) out[r] = r == rank ? x : 0.0;
        device_sum(out, world);
    }

    // ---- failures ----

    // Runs f (set-up that may throw a runtime_error on some ranks, such as reading flags or data). If any rank
    // failed, the lowest such rank rethrows its error (named "rank r: " when r > 0) and every other rank throws
    // ReportedByAnotherRank, so the job prints one line and every rank exits. Without host collectives yet (the
    // rendezvous before the engine exists) each rank reports its own failure.
    void all_or_none(const std::function<void()>& f) const {
        std::string err;
        try {
            f();
        } catch (const std::runtime_error& e) {
            err = e.what();
        }
        if (world == 1 || (!mpi_ && !device_sum)) {
            if (!err.empty()) throw AgreedFailure(world > 1 ? "rank " + std::to_string(rank) + ": " + err : err);
            return;
        }
        double first = err.empty() ? world : rank;  // min over ranks as -max(-x)
        std::vector<double> all(world);
        all_gather(first, all.data(), "the check that every rank finished its set-up");
        int lowest = world;
        for (int r = 0; r < world; r++) lowest = std::min(lowest, (int)all[r]);
        if (lowest == world) return;
        if (lowest != rank) throw ReportedByAnotherRank();
        throw AgreedFailure(rank > 0 ? "rank " + std::to_string(rank) + ": " + err : err);
    }

    // Ends every rank of the job after this rank failed on its own (an error while the others wait in a
    // collective): MPI_Abort, or the end of this process (the launcher or the others' watchdogs end the rest).
    [[noreturn]] void abort_job() const {
        fflush(stdout);
        fflush(stderr);
#ifdef PRISM_MPI
        if (mpi_) MPI_Abort(MPI_COMM_WORLD, 1);
#endif
        _exit(1);
    }

  private:
    std::string program_ = "prism", how_, rendezvous_dir_;
    bool mpi_ = false;
    time_t started_at_ = 0;

    void need_device(const char* what) const {
        if (!device_sum)
            throw DistError(std::string(what) +
                            ": no collectives yet (the environment rendezvous needs the GPUs' "
                            "NCCL, set up with the engine; on CPUs launch with mpirun)");
    }
#ifdef PRISM_MPI
    static void check(int rc, const char* what) {
        if (rc == MPI_SUCCESS) return;
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        throw DistError(std::string(what) + " failed: " + std::string(msg, len) + " (did another rank die?)");
    }
#endif
};

// Runs a program's body with the process group's error handling: a runtime_error prints
// "program: error: [rank r: ]message" once. A failure that all ranks agreed on (all_or_none) exits 1 on every
// rank; one that struck a rank alone while the others may wait in a collective ends the whole job
// (Dist::abort_job). oom_hint completes the out-of-memory message ("use a smaller model or batch (-b)").
// Returns the exit status.
inline int run_ranks(Dist& dist, const char* oom_hint, const std::function<int()>& body) {
    signal(SIGXFSZ, SIG_IGN);  // past a file-size limit a write fails (EFBIG): the ordinary one-line disk error
    // body starts the process group: who this rank is is known only after it ran. What the run printed comes
    // first, the error line last (util/errors.h's ladder).
    auto who = [&] { return dist.world > 1 ? "rank " + std::to_string(dist.rank) + ": " : std::string(); };
    bool failed = false;
    const int rc = run_reporting(
        dist.program(), oom_hint, who,
        [&] {
            try {
                return body();
            } catch (const ReportedByAnotherRank&) {
                return 1;
            } catch (const AgreedFailure& e) {
                print_error(dist.program(), "error", e.what());
                return 1;
            }
        },
        &failed);
    if (failed && dist.world > 1) dist.abort_job();
    return rc;
}
