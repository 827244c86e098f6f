// util/machine_load.h: what the machine was doing while a figure was measured, so that a figure taken on a busy
// machine is never printed as the machine's. MachineLoad, made when the measurement starts, gives at its end one
// line: the cores, the one-minute load average at the start and at the end, the wall time, this process's CPU time
// (its children's included) and whether the machine was busy: other work above 0.5 per core, taken as the load
// average at the start, or at the end less this process's own average parallelism (CPU time / wall time). The
// benchmarks (dev/) and train_prism's last line print it beside their speed figures.
// Does not: measure anything but itself and the kernel's load average (a busy verdict is an estimate: the load
// average trails by about a minute).
#pragma once

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

class MachineLoad {
  public:
    static constexpr double kBusyPerCore = 0.5;  // other work above this per core: the machine was busy

    MachineLoad() : start_load_(load1()), start_cpu_(cpu_seconds()), start_(now()) {
        const time_t t = time(nullptr);
        tm u{};
        gmtime_r(&t, &u);
        strftime(date_, sizeof date_, "%Y-%m-%d %H:%M UTC", &u);
    }

    // The one-minute load average (-1 when the system does not say).
    static double load1() {
        double l[1];
        return getloadavg(l, 1) == 1 ? l[0] : -1;
    }
    // CPU seconds, user and system, of this process and of the children it has waited for.
    static double cpu_seconds() {
        rusage self{}, kids{};
        getrusage(RUSAGE_SELF, &self);
        getrusage(RUSAGE_CHILDREN, &kids);
        auto s = [](const timeval& t) { return (double)t.tv_sec + 1e-6 * (double)t.tv_usec; };
        return s(self.ru_utime) + s(self.ru_stime) + s(kids.ru_utime) + s(kids.ru_stime);
    }
    static int cores() { return std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)); }

    double wall() const { return now() - start_; }
    double cpu() const { return cpu_seconds() - start_cpu_; }
    // Other work per core: at the start, and at the end less this process's own parallelism.
    double others_per_core(double end_load) const {
        const double w = wall(), own = w > 0 ? cpu() / w : 0;
        return std::max(start_load_, end_load - own) / cores();
    }
    bool busy() const { return start_load_ >= 0 && others_per_core(load1()) > kBusyPerCore; }

    // "machine: 2026-12-01 10:00 UTC, 2 cores, load average 0.12 at the start, 2.01 at the end; 61.3 s wall, 120.9 s CPU (1.97 cores
    // busy with this work); quiet (other work 0.02 per core)"; busy: "... BUSY (other work 0.8 per core, over 0.5):
    // the speed figures above are not this machine's".
    std::string line() const {
        const double end = load1(), w = wall(), c = cpu();
        char b[400];
        if (start_load_ < 0 || end < 0) {
            snprintf(b, sizeof b, "machine: %s, %d cores, load average unknown; %.1f s wall, %.1f s CPU", date_,
                     cores(), w, c);
            return b;
        }
        const double others = others_per_core(end);
        const bool is_busy = others > kBusyPerCore;
        snprintf(
            b, sizeof b,
            "machine: %s, %d cores, load average %.2f at the start, %.2f at the end; %.1f s wall, %.1f s CPU (%.2f "
            "cores busy with this work); %s (other work %.2f per core%s)",
            date_, cores(), start_load_, end, w, c, w > 0 ? c / w : 0.0, is_busy ? "BUSY" : "quiet", others,
            is_busy ? ", over 0.5: the speed figures above are not this machine's" : "");
        return b;
    }

  private:
    static double now() {
        return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    }
    double start_load_, start_cpu_, start_;
    char date_[32] = "";  // when the measurement started
};
