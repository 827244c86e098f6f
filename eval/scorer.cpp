// eval/scorer.cpp: TaskScorer (eval/scorer.h).
#include "eval/scorer.h"

#include <cstdio>

#include "eval/scoring.h"
#include "run/stop_signal.h"

TaskScorer::TaskScorer(const std::string& path, int V) : file_(new EvalFile(load_eval_file(path, V))) {}
TaskScorer::~TaskScorer() = default;

std::string TaskScorer::score(Engine& eng, int B, long limit, const Dist& dist) const {
    StopGrace grace;
    const EvalResult e = run_eval_task(eng, *file_, B, limit, &dist, [&] { return grace.expired(); });
    const bool lead = dist.rank == 0;
    if (e.stopped) {
        if (lead) printf("eval %s: cut short by the stop signal, not logged\n", e.task.c_str());
        return "";
    }
    if (lead) {
        printf("eval %s: %ld examples, acc %.4f", e.task.c_str(), e.n, e.acc);
        if (e.has_norm) printf(", acc_norm %.4f", e.acc_norm);
        printf(" (%.1f s)\n", e.seconds);
    }
    return eval_result_json(e);
}
