// run/loop_seam.h: train_prism's LoopSeam (train_loop.h): the parts of a run that live outside the loop's folder,
// joined here so that the loop includes none of them: the run record's flags (run/train_flags.h), text samples
// (inspect/sampling.h's sampler, text/tokenizer.h) and the in-training zero-shot eval (eval/scoring.h).
#pragma once

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "eval/scoring.h"
#include "inspect/sampling.h"
#include "run/stop_signal.h"
#include "run/train_flags.h"
#include "text/tokenizer.h"
#include "train_loop.h"

// A text sample at temperature 1 from EOT: inspect/sampling.h's sampler (as `generate` samples) on a KV-cache decoder of
// the engine, drawing from the run's own RNG state so that samples are part of the reproducible state.
// A stop signal ends it after the token in progress once its grace has passed (the text so far, marked).
inline std::string sample_text(Engine& eng, const Tokenizer& tok, int n, uint64_t& rng, int T) {
    std::unique_ptr<Decoder> dec = eng.make_decoder(T);
    struct Stopped {};
    std::vector<int> got;
    StopGrace grace;
    try {
        continue_text(*dec, eng.config().V, {tok.eot()}, n, SamplingOptions(), rng, tok.eot(), [&](int t) {
            got.push_back(t);
            if (grace.expired()) throw Stopped();
        });
    } catch (const Stopped&) {
        return tok.decode(got) + " [sample cut short by the stop signal]";
    }
    return tok.decode(got);
}

// The sampler of a run: its tokenizer loaded up front. Without --sample-every a missing tokenizer is a note and
// no samples; asked for explicitly, it is an error.
inline LoopSeam::Sampler make_sampler(const TrainOptions& o, const ModelConfig& cfg) {
    std::shared_ptr<Tokenizer> tok;
    try {
        tok.reset(new Tokenizer(Tokenizer::load(o.tokenizer.empty() ? default_tokenizer_path() : o.tokenizer)));
        if (tok->vocab_size() > cfg.V)  // samples start from EOT, which such a model cannot read
            throw ConfigError("the tokenizer's " + std::to_string(tok->vocab_size()) +
                              " tokens do not fit the model's vocabulary V = " + std::to_string(cfg.V));
    } catch (const std::runtime_error& e) {
        if (o.sample_flag_given) throw;  // asked for samples explicitly: a missing tokenizer is an error
        fprintf(stderr, "note: no text samples (%s)\n", e.what());
        return nullptr;
    }
    return [tok](Engine& eng, int n, uint64_t& rng, int T) { return sample_text(eng, *tok, n, rng, T); };
}

// The in-training eval of --eval-task on --eval-limit examples, its file loaded up front.
inline LoopSeam::Scorer make_scorer(const TrainOptions& o, const ModelConfig& cfg) {
    auto evalf = std::make_shared<EvalFile>(load_eval_file(o.eval_data + "/" + o.eval_task + ".bin", cfg.V));
    const int B = o.B;
    const long limit = o.eval_limit;
    return [evalf, B, limit](Engine& eng, const Dist& dist, bool lead) -> std::string {
        StopGrace grace;
        EvalResult e = run_eval_task(eng, *evalf, B, limit, &dist, [&] { return grace.expired(); });
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
    };
}

inline LoopSeam train_prism_seam() {
    LoopSeam s;
    s.record_args = [](const TrainOptions& o, const RunPlan& p) { return record_args(o, p); };
    s.may_change = may_change_on_resume();
    s.lr_branch_flags = lr_branch_flags();
    s.make_sampler = make_sampler;
    s.make_scorer = make_scorer;
    return s;
}
