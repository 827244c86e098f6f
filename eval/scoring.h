// eval/scoring.h: zero-shot scoring as lm-evaluation-harness v0.4 does it (docs/zero_shot.md is the protocol): an
// eval file (eval/eval_file.h) run through an Engine, the same interface the trainer drives. Each request becomes
// one row (rolling texts: windows of the model's T), rows are sorted by length and packed `batch` to a
// forward, and the per-row log-likelihoods become acc, acc_norm, perplexities and bits per byte, with
// lm-eval's metric names in the result JSON. Used by eval_zeroshot.cu (checkpoint -> table) and the trainer
// (one task every N steps); including it brings the tasks and the file format along.
//
// Does not: build prompts (eval/tasks.h), tokenise or read files (eval/eval_file.h), parse the command line
// (eval_zeroshot.cu). Never materialises more than one batch of logits (rows x T_batch x V, inside the engine).
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "dist/process_group.h"
#include "engine.h"
#include "eval/eval_file.h"
#include "util/json.h"

// One row of a batch: input seq[0, n-1), the last n_scored targets of seq[1, n) are scored.
struct EvalRow {
    std::vector<int> seq;
    int n_scored;
    int example;  // index into the file
    int request;  // which request (rolling: which window)
};

// The rows of example e for a model of context T. Choice / target requests: ctx + cont, keeping the last
// T + 1 tokens when longer (then all of the continuation that fits is scored). Rolling: disjoint windows, the
// first fed [EOT] + t[0, T-1) to predict t[0, T), each later one predicting the next (at most) T tokens from
// a full-length input that ends just before its last target.
inline void eval_rows(const EvalFile& f, int e, int T, std::vector<EvalRow>& out) {
    const EvalExample& x = f.ex[e];
    if (f.kind == EvalKind::Rolling) {
        const int N = (int)x.tokens.size();
        std::vector<int> buf(1, f.eot);  // buf[i + 1] = t[i]
        buf.insert(buf.end(), x.tokens.begin(), x.tokens.end());
        int first = std::min(N, T);
        out.push_back({std::vector<int>(buf.begin(), buf.begin() + first + 1), first, e, 0});
        for (int done = first, w = 1; done < N; w++) {
            int n = std::min(N - done, T), end = done + n;  // predicts t[done, end) from t[end - T - 1, end - 1)
            out.push_back({std::vector<int>(buf.begin() + end - T, buf.begin() + end + 1), n, e, w});
            done = end;
        }
        return;
    }
    for (int r = 0; r < (int)x.req.size(); r++) {
        const EvalRequest& q = x.req[r];
        EvalRow row{std::vector<int>(x.tokens.begin() + q.ctx_begin, x.tokens.begin() + q.ctx_end), 0, e, r};
        row.seq.insert(row.seq.end(), x.tokens.begin() + q.cont_begin, x.tokens.begin() + q.cont_end);
        if ((int)row.seq.size() > T + 1) row.seq.erase(row.seq.begin(), row.seq.end() - (T + 1));
        row.n_scored = std::min(q.cont_end - q.cont_begin, (int)row.seq.size() - 1);
        out.push_back(std::move(row));
    }
}

// Additive over examples, so data-parallel ranks sum them (all-reduce of kCount doubles) before eval_finish.
struct EvalSums {
    enum { N, ACC, ACC_NORM, LL, WORDS, BYTES, TOKENS, STOPPED, kCount };  // STOPPED: ranks cut short
    std::array<double, kCount> v{};                                        // TOKENS: scored target tokens
    double& operator[](int i) { return v[i]; }
    double operator[](int i) const { return v[i]; }
};

struct EvalResult {
    std::string task;
    EvalKind kind = EvalKind::Choice;
    bool has_norm = false;
    long n = 0;
    double acc = NAN, acc_se = NAN, acc_norm = NAN, acc_norm_se = NAN;  // fractions in [0, 1]
    double ppl = NAN;                            // target: exp(-mean LL per example); rolling: word perplexity
    double byte_ppl = NAN, bits_per_byte = NAN;  // per UTF-8 byte (target: of the targets " word")
    double seconds = 0;
    bool stopped = false;  // cut short by a stop signal (run_eval_task's stop): the metrics are partial
};

// Per-example results (eval_zeroshot --log-samples): each example's log-likelihood per request (choice tasks: one
// per choice), of its target (target tasks: one) or of its whole text over all windows (rolling: one), and for a
// target task whether every target token was the argmax. Laid out over all the examples scored (every rank's),
// zero where another rank scored the example, so that the ranks' copies summed hold every example's values.
struct EvalSamples {
    std::vector<size_t> first;       // example i's values are ll[first[i], first[i + 1])
    std::vector<double> ll, greedy;  // greedy: per example, 1 or 0 (target tasks)
    void layout(const EvalFile& f, long n) {
        first.assign(1, 0);
        for (long i = 0; i < n; i++)
            first.push_back(first.back() + (f.kind == EvalKind::Choice ? f.ex[i].req.size() : 1));
        ll.assign(first.back(), 0.0), greedy.assign(n, 0.0);
    }
};

// A choice example's picks from its choices' log-likelihoods ll[0, req.size()): the argmax (the first of equal
// scores, as numpy), and where the task has acc_norm the argmax of the log-likelihood per code point (-1 otherwise).
struct EvalPick {
    int pick = 0, pick_norm = -1;
};
inline EvalPick eval_pick(const EvalFile& f, const EvalExample& x, const double* ll) {
    EvalPick p;
    for (int k = 0; k < (int)x.req.size(); k++) {
        if (ll[k] > ll[p.pick]) p.pick = k;
        if (f.has_norm &&
            (p.pick_norm < 0 || ll[k] / x.req[k].norm_len > ll[p.pick_norm] / x.req[p.pick_norm].norm_len))
            p.pick_norm = k;
    }
    return p;
}

// Scores this rank's share (examples i < limit with i % world == rank; limit <= 0: all) with `batch` rows
// per forward. Rows are sorted by length so a batch is padded to its own longest row, not to T. Padded
// positions are fed EOT and carry target -1. Leaves the engine's activations overwritten (call between steps).
// stop: when it returns true, the examples not yet scored are left out and STOPPED is set (the sums are partial).
// samples: when given, laid out for every example and filled in for this rank's share (EvalSamples).
inline EvalSums eval_task_sums(Engine& eng, const EvalFile& f, int batch, long limit = 0, int rank = 0, int world = 1,
                               const std::function<bool()>& stop = nullptr, EvalSamples* samples = nullptr) {
    const ModelConfig& cfg = eng.config();
    if (f.V != cfg.V)
        throw EvalError("eval file " + f.path + ": tokenised for V = " + std::to_string(f.V) +
                        " but the model has V = " + std::to_string(cfg.V));
    if (batch < 1) throw EvalError("eval batch must be at least 1 row");
    const long n = limit > 0 ? std::min<long>(limit, (long)f.ex.size()) : (long)f.ex.size();
    std::vector<EvalRow> rows;
    for (long i = rank; i < n; i += world) eval_rows(f, (int)i, cfg.T, rows);
    std::vector<size_t> order(rows.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return rows[a].seq.size() > rows[b].seq.size(); });

    std::vector<double> ll(rows.size(), 0.0);
    std::vector<char> greedy(rows.size(), 1);
    std::vector<int> inputs, targets;
    std::vector<float> lp, logits(f.kind == EvalKind::Target ? cfg.V : 0);
    bool stopped = false;
    for (size_t b0 = 0; b0 < order.size(); b0 += batch) {
        if (stop && stop()) {
            stopped = true;
            break;
        }
        const int B = (int)std::min<size_t>(batch, order.size() - b0);
        int Tb = 1;
        for (int j = 0; j < B; j++) Tb = std::max(Tb, (int)rows[order[b0 + j]].seq.size() - 1);
        inputs.assign((size_t)B * Tb, f.eot), targets.assign((size_t)B * Tb, -1), lp.assign((size_t)B * Tb, 0.f);
        for (int j = 0; j < B; j++) {
            const EvalRow& r = rows[order[b0 + j]];
            const int len = (int)r.seq.size() - 1;
            std::copy(r.seq.begin(), r.seq.end() - 1, inputs.begin() + (size_t)j * Tb);
            for (int t = len - r.n_scored; t < len; t++) targets[(size_t)j * Tb + t] = r.seq[t + 1];
        }
        eng.forward(inputs.data(), nullptr, B, Tb);
        eng.target_logprobs(targets.data(), lp.data());
        for (int j = 0; j < B; j++) {
            const size_t ri = order[b0 + j];
            double s = 0;
            for (int t = 0; t < Tb; t++) s += lp[(size_t)j * Tb + t];
            ll[ri] = s;
            if (f.kind != EvalKind::Target) continue;
            for (int t = 0; t < Tb && greedy[ri]; t++) {
                int tg = targets[(size_t)j * Tb + t];
                if (tg < 0) continue;
                eng.logits_at(j, t, logits.data());
                greedy[ri] = (int)(std::max_element(logits.begin(), logits.end()) - logits.begin()) == tg;
            }
        }
    }

    EvalSums s;
    if (samples) samples->layout(f, n);
    for (size_t a = 0; a < rows.size();) {  // rows of one example are adjacent (built in example order)
        size_t b = a;
        while (b < rows.size() && rows[b].example == rows[a].example) b++;
        const int e = rows[a].example;
        const EvalExample& x = f.ex[e];
        double total = 0;
        for (size_t k = a; k < b; k++) total += ll[k], s[EvalSums::TOKENS] += rows[k].n_scored;
        s[EvalSums::N] += 1, s[EvalSums::WORDS] += (double)x.words, s[EvalSums::BYTES] += (double)x.bytes;
        if (f.kind == EvalKind::Choice) {  // one row per request, in request order
            const EvalPick p = eval_pick(f, x, &ll[a]);
            s[EvalSums::ACC] += p.pick == x.gold;
            s[EvalSums::ACC_NORM] += f.has_norm && p.pick_norm == x.gold;
            if (samples) std::copy(ll.begin() + a, ll.begin() + b, samples->ll.begin() + samples->first[e]);
        } else {
            s[EvalSums::ACC] += f.kind == EvalKind::Target && greedy[a];
            s[EvalSums::LL] += total;
            if (samples) samples->ll[samples->first[e]] = total, samples->greedy[e] = greedy[a];
        }
        a = b;
    }
    s[EvalSums::STOPPED] = stopped ? 1 : 0;
    return s;
}

inline EvalResult eval_finish(const EvalFile& f, const EvalSums& s, double seconds) {
    EvalResult r;
    r.task = f.task, r.kind = f.kind, r.has_norm = f.has_norm, r.n = (long)s[EvalSums::N], r.seconds = seconds;
    const double n = s[EvalSums::N];
    auto se = [&](double p) {
        return n > 1 ? std::sqrt(p * (1 - p) / (n - 1)) : NAN;
    };  // sample std (n-1) / sqrt(n), 0/1 items
    if (n <= 0) return r;
    if (f.kind != EvalKind::Rolling) r.acc = s[EvalSums::ACC] / n, r.acc_se = se(r.acc);
    if (f.has_norm) r.acc_norm = s[EvalSums::ACC_NORM] / n, r.acc_norm_se = se(r.acc_norm);
    const double ll = s[EvalSums::LL], bytes = s[EvalSums::BYTES];
    if (f.kind == EvalKind::Target) r.ppl = std::exp(-ll / n);
    if (f.kind == EvalKind::Rolling) r.ppl = std::exp(-ll / s[EvalSums::WORDS]);
    if (f.kind != EvalKind::Choice && bytes > 0)
        r.byte_ppl = std::exp(-ll / bytes), r.bits_per_byte = -ll / bytes / std::log(2.0);
    return r;
}

// The whole task (or its first `limit` examples): one process, or every rank of dist scoring its share and the
// counts summed over the ranks (every rank calls it and gets the same result).
// stop (a stop signal's check): on any rank, the task is cut short and the result says so (stopped, no metrics
// worth logging), on every rank alike.
// samples: when given, every example's values (EvalSamples), on every rank.
inline EvalResult run_eval_task(Engine& eng, const EvalFile& f, int batch, long limit = 0, const Dist* dist = nullptr,
                                const std::function<bool()>& stop = nullptr, EvalSamples* samples = nullptr) {
    auto t0 = std::chrono::steady_clock::now();
    EvalSums s = dist ? eval_task_sums(eng, f, batch, limit, dist->rank, dist->world, stop, samples)
                      : eval_task_sums(eng, f, batch, limit, 0, 1, stop, samples);
    if (dist) dist->sum(s.v.data(), EvalSums::kCount, "the sum of the eval counts");
    if (dist && samples) {
        dist->sum(samples->ll.data(), (int)samples->ll.size(), "the sum of the per-example log-likelihoods");
        dist->sum(samples->greedy.data(), (int)samples->greedy.size(), "the sum of the per-example greedy flags");
    }
    EvalResult r = eval_finish(f, s, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    r.stopped = s[EvalSums::STOPPED] > 0;
    return r;
}

// {"task": ..., "examples": n, "acc": ..., ...}: the metrics the task defines, lm-eval's names, NaN omitted.
inline std::string eval_result_json(const EvalResult& r) {
    std::string s = "{\"task\": " + json::quote(r.task) + ", \"examples\": " + std::to_string(r.n);
    auto add = [&](const char* k, double v) {
        if (!std::isfinite(v)) return;
        char b[64];
        snprintf(b, sizeof b, "%.10g", v);
        s += std::string(", \"") + k + "\": " + b;
    };
    add("acc", r.acc), add("acc_stderr", r.acc_se), add("acc_norm", r.acc_norm), add("acc_norm_stderr", r.acc_norm_se);
    add(r.kind == EvalKind::Rolling ? "word_perplexity" : "perplexity", r.ppl);
    add("byte_perplexity", r.byte_ppl), add("bits_per_byte", r.bits_per_byte), add("seconds", r.seconds);
    return s + "}";
}

// The lines of one task in eval_zeroshot --log-samples's JSON Lines file (docs/zero_shot.md, "Per-example
// results"): one object per example in file order, {"task", "index", "label", "acc", "acc_norm" (where the task
// has it), "loglik": [per choice]} and, for error analysis, "pred", "pred_norm", "loglik_norm" (per code point),
// each choice's continuation "tokens" and, where the task has acc_norm, "chars" (its divisor). Target tasks: one
// "loglik" (the target's), acc the greedy match. Rolling tasks (no choices, no accuracy): "loglik" of the whole
// text, its "tokens", "words", "bytes".
// Log-likelihoods are written with 17 significant digits: the doubles the scorer summed, exactly.
inline std::string eval_samples_jsonl(const EvalFile& f, const EvalSamples& s) {
    auto num = [](double v) { return json::number(v, "%.17g"); };
    std::string out;
    for (size_t i = 0; i + 1 < s.first.size(); i++) {
        const EvalExample& x = f.ex[i];
        const double* ll = &s.ll[s.first[i]];
        const size_t k = s.first[i + 1] - s.first[i];
        std::string line = "{\"task\": " + json::quote(f.task) + ", \"index\": " + std::to_string(i);
        std::string lls = "[", norm = "[", tokens = "[", chars = "[";
        for (size_t c = 0; c < k; c++) {
            const char* sep = c ? ", " : "";
            lls += sep + num(ll[c]);
            if (f.kind == EvalKind::Choice) {
                const EvalRequest& q = x.req[c];
                tokens += sep + std::to_string(q.cont_end - q.cont_begin), chars += sep + std::to_string(q.norm_len);
                if (f.has_norm) norm += sep + num(ll[c] / q.norm_len);
            }
        }
        if (f.kind == EvalKind::Choice) {
            const EvalPick p = eval_pick(f, x, ll);
            line += ", \"label\": " + std::to_string(x.gold) + ", \"acc\": " + (p.pick == x.gold ? "1" : "0");
            if (f.has_norm) line += std::string(", \"acc_norm\": ") + (p.pick_norm == x.gold ? "1" : "0");
            line += ", \"pred\": " + std::to_string(p.pick);
            if (f.has_norm) line += ", \"pred_norm\": " + std::to_string(p.pick_norm);
            line += ", \"loglik\": " + lls + "]";
            if (f.has_norm) line += ", \"loglik_norm\": " + norm + "]";
            line += ", \"tokens\": " + tokens + "]";
            if (f.has_norm) line += ", \"chars\": " + chars + "]";
        } else if (f.kind == EvalKind::Target) {
            const EvalRequest& q = x.req[0];
            line += std::string(", \"label\": 0, \"acc\": ") + (s.greedy[i] > 0 ? "1" : "0") + ", \"loglik\": " + lls +
                    "], \"tokens\": [" + std::to_string(q.cont_end - q.cont_begin) + "]";
        } else {
            line += ", \"loglik\": " + lls + "], \"tokens\": [" + std::to_string(x.tokens.size()) +
                    "], \"words\": " + std::to_string(x.words) + ", \"bytes\": " + std::to_string(x.bytes);
        }
        out += line + "}\n";
    }
    return out;
}
