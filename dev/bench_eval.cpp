// bench_eval: items per second per eval task for a model preset (default tiny) on the engine make_engine
// picks (--cpu forces the CPU reference), through the same scorer eval_zeroshot uses (eval/scoring.h).
//
//   make bench-eval                                   # tiny, synthetic items, 2 OpenMP threads
//   build/bench_eval --items 32 --batch 32 --model 124M
//   build/bench_eval --data data/eval                 # the real eval files (first --items of each)
//
// Synthetic items have each task's typical GPT-2 token lengths (random ids, random init: the speed does not
// depend on what the tokens are): HellaSwag a 40-token context and 4 endings of 25; PIQA 15 and 2 x 25;
// ARC-Easy 25 and 4 x 5; WinoGrande 2 contexts of 15 and a continuation of 8; LAMBADA 75 and a 2-token
// target (with the greedy check); WikiText one page of 4,600 tokens (the WikiText-2 test mean) per item.
// Lengths vary uniformly by +-50% so batches pad as real ones do.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "run/cli.h"
#include "run/model_flags.h"
#include "engine.h"
#include "eval/scoring.h"
#include "util/machine_load.h"

namespace {

struct Shape {
    const char* task;
    int n_ctx, ctx_len, n_cont, cont_len;  // n_ctx contexts (WinoGrande 2, else 1), n_cont requests
};

EvalFile synthetic(const Shape& s, int items, int V, uint64_t seed) {
    const EvalTaskInfo& info = find_eval_task(s.task);
    EvalFile f;
    f.task = s.task, f.kind = info.kind, f.has_norm = info.has_norm, f.V = V, f.eot = V - 1;
    uint64_t x = seed;
    auto rnd = [&](int n) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        return (int)((x >> 33) % (uint64_t)n);
    };
    auto len = [&](int mean) { return std::max(1, mean / 2 + rnd(mean + 1)); };
    for (int i = 0; i < items; i++) {
        EvalExample e;
        e.gold = info.kind == EvalKind::Rolling ? -1 : 0;
        if (info.kind == EvalKind::Rolling) {
            for (int t = 0, n = len(s.ctx_len); t < n; t++) e.tokens.push_back(rnd(V - 1));
            e.words = e.tokens.size() * 3 / 4, e.bytes = e.tokens.size() * 4;
            f.ex.push_back(e);
            continue;
        }
        std::vector<std::pair<int, int>> ctx;
        for (int c = 0; c < s.n_ctx; c++) {
            int b = (int)e.tokens.size();
            for (int t = 0, n = len(s.ctx_len); t < n; t++) e.tokens.push_back(rnd(V - 1));
            ctx.push_back({b, (int)e.tokens.size()});
        }
        for (int r = 0; r < s.n_cont; r++) {
            int b = (int)e.tokens.size();
            for (int t = 0, n = len(s.cont_len); t < n; t++) e.tokens.push_back(rnd(V - 1));
            auto c = ctx[std::min(r, s.n_ctx - 1)];
            e.req.push_back({c.first, c.second, b, (int)e.tokens.size(), 4 * (int)(e.tokens.size() - b)});
        }
        f.ex.push_back(e);
    }
    return f;
}

}  // namespace

int main(int argc, char** argv) {
    const MachineLoad load;  // printed beside the figures: a busy machine's are not the machine's
    ModelSpec spec;
    int items = 16, batch = 16;
    bool cpu = false, help = false;
    std::string data, only;
    std::vector<Flag> flags;
    add_model_flags(flags, spec);
    flags.push_back(make_flag("--items", "N", "items per task (default 16)",
                              [&](const std::string& v) { items = parse_int_flag("--items", v); }));
    flags.push_back(make_flag("--batch", "B", "rows per forward (default 16)",
                              [&](const std::string& v) { batch = parse_int_flag("--batch", v); }));
    flags.push_back(make_flag("--tasks", "LIST", "comma-separated subset (default: all six)",
                              [&](const std::string& v) { only = "," + v + ","; }));
    flags.push_back(make_flag("--data", "DIR", "score the real eval files DIR/TASK.bin instead of synthetic items",
                              [&](const std::string& v) { data = v; }));
    flags.push_back(make_flag("--cpu", "", "force the CPU reference", [&](const std::string&) { cpu = true; }));
    flags.push_back(make_flag("-h, --help", "", "this text", [&](const std::string&) { help = true; }));
    try {
        parse_flags(argc, argv, flags, "bench_eval");
        if (help) {
            printf("usage: bench_eval [flags]\n\nItems per second per eval task.\n\n");
            print_flags(stdout, flags);
            return 0;
        }
        if (items <= 0 || batch <= 0) throw ConfigError("--items and --batch must be positive");
        std::vector<std::string> warnings;
        ModelConfig cfg = build_config(spec, warnings);
        std::string why;
        std::unique_ptr<Engine> eng = make_engine(cfg, cpu, why);
        eng->init_params(1);
        printf("bench_eval: %s (d %d, L %d, T %d, V %d), %s, %d rows per forward\n", spec.preset.c_str(), cfg.d,
               cfg.L(), cfg.T, cfg.V, eng->describe().c_str(), batch);
        printf("%-11s %6s %6s %9s %9s %9s %10s\n", "task", "items", "rows", "tokens", "seconds", "items/s", "tokens/s");
        const Shape shapes[] = {{"hellaswag", 1, 40, 4, 25}, {"piqa", 1, 15, 2, 25},   {"arc_easy", 1, 25, 4, 5},
                                {"winogrande", 2, 15, 2, 8}, {"lambada", 1, 75, 1, 2}, {"wikitext", 1, 4600, 0, 0}};
        for (const auto& s : shapes) {
            if (!only.empty() && only.find("," + std::string(s.task) + ",") == std::string::npos) continue;
            EvalFile f = data.empty() ? synthetic(s, s.n_cont ? items : std::max(1, items / 16), cfg.V, 7)
                                      : load_eval_file(data + "/" + s.task + ".bin", cfg.V);
            long n = std::min<long>((long)f.ex.size(), data.empty() ? (long)f.ex.size() : items);
            std::vector<EvalRow> rows;
            long tokens = 0;
            for (long i = 0; i < n; i++) eval_rows(f, (int)i, cfg.T, rows);
            for (const auto& r : rows) tokens += (long)r.seq.size() - 1;
            auto t0 = std::chrono::steady_clock::now();
            eval_task_sums(*eng, f, batch, n);
            double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            printf("%-11s %6ld %6zu %9ld %9.2f %9.2f %10.0f\n", s.task, n, rows.size(), tokens, sec, n / sec,
                   tokens / sec);
            fflush(stdout);
        }
        printf(
            "tokens: unpadded row lengths (a batch pads its rows to its longest). WikiText items are pages of ~4,600 "
            "tokens.\n");
        printf("%s\n", load.line().c_str());
        return 0;
    } catch (const std::runtime_error& e) {
        fprintf(stderr, "bench_eval: error: %s\n", e.what());
    }
    return 1;
}
