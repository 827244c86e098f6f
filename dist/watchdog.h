// dist/watchdog.h: bounded waits for a data-parallel run. Every blocking collective (an MPI call, a wait for NCCL
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
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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
