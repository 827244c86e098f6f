// eval/scorer.h: the trainer's zero-shot eval (--eval-task, every --eval-every steps): the task's file, loaded up
// front (a missing one fails before training), scored on --eval-limit examples by eval/scoring.h on every rank.
// Its body is eval/scorer.cpp (compiled apart: the trainer compiles this interface alone).
#pragma once

#include <memory>
#include <string>

class Dist;
class Engine;
struct EvalFile;

class TaskScorer {
  public:
    // The eval file at `path` for a model of vocabulary V; throws when it is missing or does not fit.
    TaskScorer(const std::string& path, int V);
    ~TaskScorer();

    // Scores the engine's current weights on the first `limit` examples (0: all) in batches of B, on every rank
    // (the sums are over the ranks); prints its line on rank 0 and returns the log's "eval" value, or "" when a
    // stop signal cut it short (after its grace).
    std::string score(Engine& eng, int B, long limit, const Dist& dist) const;

  private:
    std::unique_ptr<EvalFile> file_;
};
