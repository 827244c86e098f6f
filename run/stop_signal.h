// run/stop_signal.h: a training run's graceful stop. SIGTERM (what batch schedulers send before they kill a job),
// SIGINT (Ctrl-C), SIGHUP (a closed terminal), SIGUSR1 (what study and mpirun pass on) and SIGPIPE (its output
// piped to a reader that went away: `train_prism ... | head`) only set a flag: the loop ends the step or phase it
// is in (a validation, an eval, a sample, the start-up's checks are cut short; a checkpoint write is finished),
// writes a checkpoint when there is new work, says where, and exits with kExitInterrupted. main installs the
// handlers before anything else. A second one of these signals ends the process at once (the default action of
// that signal, so the shell sees 128 + its number), except SIGPIPE: every later write to the closed pipe raises
// it again, so a SIGPIPE after the first stop is not a second signal. A signal the process was started with
// ignored (nohup ignores SIGHUP) stays ignored; train_prism says so at start-up for SIGTERM, SIGINT and SIGUSR1
// (ignored_stop_signals_note, below).
// The exit codes of train_prism are here too, so that they are documented in one place. eval_zeroshot installs
// the same handlers: a stop ends it after the batch in progress with kExitInterrupted, writing nothing.
// Does not: coordinate ranks (under data parallelism every rank must stop at the same step).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>

// Exit codes of train_prism (docs/training.md, "Exit codes").
constexpr int kExitOk = 0;            // trained to the last step, or stopped by --stop-after, with a checkpoint
constexpr int kExitError = 1;         // a one-line error: flags, data, checkpoint, output directory, disk
constexpr int kExitDiverged = 3;      // --max-nonfinite steps in a row had a NaN/inf loss or gradient norm
constexpr int kExitInterrupted = 75;  // stopped by a stop signal (above) after a checkpoint (sysexits' TEMPFAIL:
                                      // resume with the same flags plus --resume)

// The signal that asked for a stop, 0 while none has. Written only by the handler.
inline volatile sig_atomic_t g_stop_signal = 0;
inline bool stop_requested() { return g_stop_signal != 0; }

// For a phase that a stop may cut short (a validation, an in-training eval, a text sample): it finishes when
// it can within kStopGraceSeconds of noticing the signal (so that the usual short validation is still logged and
// a resumed run's log reads as one run), and is cut after that (a --val-tokens 1e12 validation is not waited
// for). expired() is checked between the phase's batches.
constexpr double kStopGraceSeconds = 3;
class StopGrace {
  public:
    bool expired() {
        if (!stop_requested()) return false;
        const auto now = std::chrono::steady_clock::now();
        if (!seen_) seen_ = true, since_ = now;
        return std::chrono::duration<double>(now - since_).count() > kStopGraceSeconds;
    }

  private:
    bool seen_ = false;
    std::chrono::steady_clock::time_point since_;
};

// What the handler says on the first signal (eval_zeroshot sets its own: it stops without a checkpoint).
inline const char* g_stop_message =
    "\ntrain_prism: stop signal: ending the step or phase in progress, then a "
    "checkpoint when there is new work (send it again to exit at once)\n";

// Async-signal-safe: sets the flag and writes a fixed message with write(2) (to a closed pipe it fails, and the
// SIGPIPE that raises is the ignored kind below); the second signal restores the default action and raises itself.
// From the first signal on, a write to a pipe or socket on stdout or stderr that nobody reads fails (O_NONBLOCK:
// EAGAIN) instead of waiting: mpirun stops reading its ranks' output once told to end the job and sends SIGKILL a
// second later, and a step line printed after the signal into the full pipe would otherwise wait there, the
// checkpoint never written. A terminal or a file is left as it is.
inline void stop_signal_handler(int sig) {
    if (g_stop_signal != 0) {
        if (sig == SIGPIPE) return;  // a further write to the closed pipe, not someone asking again
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    g_stop_signal = sig;
    for (int fd : {STDOUT_FILENO, STDERR_FILENO}) {
        struct stat st;
        const int flags = fcntl(fd, F_GETFL);
        if (flags >= 0 && fstat(fd, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)))
            fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    }
    ssize_t rc = write(STDERR_FILENO, g_stop_message, strlen(g_stop_message));
    (void)rc;
}

// Installs `handler` for each signal of `sigs` but one the process was started with ignored (it stays ignored);
// `restart`: SA_RESTART (interrupted system calls resume).
template <size_t N> void install_handlers(void (*handler)(int), const int (&sigs)[N], bool restart) {
    for (int sig : sigs) {
        struct sigaction old;
        if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = handler;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = restart ? SA_RESTART : 0;
        sigaction(sig, &sa, nullptr);
    }
}

// Also ignores SIGXFSZ, so that a write past a file-size limit (ulimit -f) fails with EFBIG and is reported as
// the one-line disk error it is, instead of killing the process without a word.
// No SA_RESTART: a write blocked on output nobody reads (mpirun stops reading its ranks' terminals once it is told
// to end the job, then sends SIGTERM, then SIGKILL a second later) returns EINTR, so the loop reaches the
// checkpoint (train_prism.cu then holds stdout in its buffer until the checkpoint is written). The project's own reads of pipes and sockets retry EINTR; files on disk are not interrupted.
inline void install_stop_handlers() {
    signal(SIGXFSZ, SIG_IGN);
    static const int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGPIPE};
    install_handlers(stop_signal_handler, sigs, false);
}

inline const char* stop_signal_name(int sig) {
    return sig == SIGTERM   ? "SIGTERM"
           : sig == SIGINT  ? "SIGINT"
           : sig == SIGHUP  ? "SIGHUP"
           : sig == SIGUSR1 ? "SIGUSR1"
           : sig == SIGPIPE ? "SIGPIPE"
                            : "a signal";
}

// The one-line note for a process started with some of the stop signals a user sends (SIGTERM, SIGINT, SIGUSR1)
// ignored, "" when none is: a script's background job starts with SIGINT ignored, and `kill -INT` would then do
// nothing without a word. It names the ignored ones and the first that still stops the process `pid`. SIGHUP is
// left out: nohup ignores it on purpose, so that closing the terminal does not stop the run, and it is not how a
// user stops one. Reads the dispositions as they are: install_handlers leaves an ignored signal ignored.
inline std::string ignored_stop_signals_note(const char* program, long pid) {
    static const int asked[] = {SIGTERM, SIGINT, SIGUSR1};
    std::string ignored, kills, works;
    for (int sig : asked) {
        struct sigaction now;
        if (sigaction(sig, nullptr, &now) == 0 && now.sa_handler == SIG_IGN) {
            const std::string name = stop_signal_name(sig);
            ignored += (ignored.empty() ? "" : " and ") + name;
            kills += (kills.empty() ? "kill -" : " or kill -") + name.substr(3);
        } else if (works.empty()) {
            works = std::string(stop_signal_name(sig)).substr(3);
        }
    }
    if (ignored.empty()) return "";
    const bool one = ignored.find(" and ") == std::string::npos;
    const bool sigint = ignored.find("SIGINT") != std::string::npos;  // what a script's background job ignores
    std::string note = "note: " + ignored + (one ? " was" : " were") + " ignored when " + program + " started" +
                       (sigint ? " (as in a script's background job)" : "") + ", so " + kills + " does not stop it; ";
    if (works.empty())
        return note +
               "no stop signal does: it ends at its last step (kill -KILL loses the work since the last checkpoint)";
    return note + "stop it with kill -" + works + " " + std::to_string(pid);
}
