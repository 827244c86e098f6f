// dev/bench_model.cpp: a training step of the CUDA model (model.cuh) for several models in one run (default:
// 124M uniform, 124M Prism, 124M X at B 16, T 1024), kernel by kernel against the roofline cost model
// (run/cost_model.h: bytes moved, FLOPs, the time at an H100's 3.35 TB/s and 989 TFLOP/s, attention at an assumed
// 50% of the tensor peak), with the predicted step time and MFU.
//   --cost-model   only the model: no GPU needed, runs anywhere in milliseconds (make cost-model, part of
//                  make test: the CPU build prints the table CI keeps)
//   on a GPU       also tokens/s, MFU and memory of the real step (train_step.h, the trainer's own step), and each
//                  op's measured time from one profiled step (the engine's OpTimer marks) next to its roofline
//                  time, as the fraction of the roofline achieved
// It holds the engine through cuda_engine_hooks.cuh and links the one compiled engine (cuda_engine.cu's object),
// so it compiles no kernel itself. Build and run on a GPU machine (make bench-model does both; the Makefile builds
// build/native/cuda_engine.o for it):
//   ./build/bench_model [-b B] [-t T] [--micro-steps n] [--steps n] [--recompute] [--models 124M,124M:prism,124M:x]
// Built by g++ it runs on the CUDA-on-CPU executor: make bench-model-smoke runs `tiny` for one step there (the
// code path only; its timings mean nothing).
// Tokens: real text, consecutive B x T sequences of a token shard (--tokens FILE; default the first of
// data/default/*_train_*.bin, targets the next token), because kernels like the embedding backward depend on how
// often tokens repeat (near-uniform synthetic ids hid its serial walk over the most frequent token); the first
// micro-batch's token statistics (embedding_plan) also go into the cost model. --synthetic: the old spread ids.
// -b 0: the largest B of 16, 8, 4, 2, 1 whose --plan memory fits 90% of the GPU's free memory (on the cost-model
// path: B 16).
// MFU = 3 x dense forward FLOPs per token (model_config.h's account(), attention counted over the full T x T square
// as PaLM and llm.c do) x tokens/s / the dense bf16 peak (util/mfu.h on a GPU, 989 TFLOP/s for the predictions); a GPU
// missing from the table prints "MFU n/a" rather than a made-up number.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "run/cost_model.h"
#include "util/machine_load.h"
#include "util/mfu.h"
#include "cuda_engine_hooks.cuh"
#include "embedding_plan.h"
#include "memory_plan.h"
#include "run/plan_views.h"
#include "dataloader.h"
#include "train_step.h"

namespace {

// "124M", "124M:prism", "124M:x", "tiny:prism:x" -> a config (preset, head schedule, width schedule).
ModelConfig model_from(const std::string& s, int V) {
    ModelSpec spec;
    size_t a = s.find(':');
    spec.preset = s.substr(0, a);
    std::string rest = a == std::string::npos ? "" : s.substr(a + 1);
    while (!rest.empty()) {
        size_t b = rest.find(':');
        std::string part = rest.substr(0, b);
        if (part == "prism") spec.heads = "prism";
        else spec.widths = part;
        rest = b == std::string::npos ? "" : rest.substr(b + 1);
    }
    spec.V = V;
    std::vector<std::string> warnings;
    return build_config(spec, warnings);
}

// The first `n` tokens of a shard (repeated if it is shorter), or an error naming the file.
std::vector<int> shard_tokens(const std::string& path, size_t n) {
    const ShardInfo info = read_shard_info(path);
    if (info.tokens < 2) throw std::runtime_error("shard " + path + " holds fewer than 2 tokens");
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) throw std::runtime_error("cannot open " + path);
    std::vector<uint16_t> raw(std::min<uint64_t>(info.tokens, n));
    fseek(f, (long)SHARD_HEADER_BYTES, SEEK_SET);
    const size_t got = fread(raw.data(), sizeof(uint16_t), raw.size(), f);
    fclose(f);
    if (got != raw.size()) throw std::runtime_error("cannot read " + path);
    std::vector<int> t(n);
    for (size_t i = 0; i < n; i++) t[i] = raw[i % raw.size()];
    return t;
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Records an event after every op of a step; ms per op name once the step has been waited for.
struct EventTimer : OpTimer {
    std::vector<cudaEvent_t> events;
    std::vector<std::string> names;
    size_t used = 0;
    cudaEvent_t start;
    EventTimer() { cudaCheck(cudaEventCreate(&start)); }
    ~EventTimer() override {
        for (cudaEvent_t e : events) cudaEventDestroy(e);
        cudaEventDestroy(start);
    }
    void begin(cudaStream_t s) {
        used = 0, names.clear();
        cudaCheck(cudaEventRecord(start, s));
    }
    void mark(const char* op, cudaStream_t s) override {
        if (used == events.size()) events.emplace_back(), cudaCheck(cudaEventCreate(&events.back()));
        cudaCheck(cudaEventRecord(events[used++], s));
        names.push_back(op);
    }
    std::map<std::string, double> ms() const {
        std::map<std::string, double> m;
        cudaEvent_t prev = start;
        for (size_t i = 0; i < used; i++) {
            float t = 0;
            cudaCheck(cudaEventElapsedTime(&t, prev, events[i]));
            m[names[i]] += t;
            prev = events[i];
        }
        return m;
    }
};

// The per-op table of one model: the cost model, and the measured ms when `measured` is not empty.
void print_ops(const std::vector<OpCost>& ops, const RooflineGpu& g, const std::map<std::string, double>& measured) {
    const bool m = !measured.empty();
    printf("  %-22s %5s %6s %9s %9s %10s %10s", "op", "count", "launch", "GB", "GFLOP", "roofline", "expected");
    if (m) printf(" %10s %9s", "measured", "fraction");
    printf("\n");
    double rt = 0, et = 0, mt = 0;
    for (const OpGroup& o : group_ops(ops, g)) {
        printf("  %-22s %5d %6d %9.3f %9.1f %8.3f ms %7.3f ms", o.name.c_str(), o.count, o.launches, o.bytes / 1e9,
               o.flops / 1e9, o.roofline_s * 1e3, o.expected_s * 1e3);
        rt += o.roofline_s, et += o.expected_s;
        if (m) {
            auto it = measured.find(o.name);
            const double ms = it == measured.end() ? 0 : it->second;
            mt += ms;
            printf(" %7.3f ms %8.1f%%", ms, ms > 0 ? 100 * o.roofline_s * 1e3 / ms : 0.0);
        }
        printf("\n");
    }
    printf("  %-22s %5s %6s %9s %9s %8.3f ms %7.3f ms", "total", "", "", "", "", rt * 1e3, et * 1e3);
    if (m) printf(" %7.3f ms %8.1f%%", mt, 100 * rt * 1e3 / mt);
    printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
    const MachineLoad load;  // the host's load, beside the figures
    int B = 16, T = 0, steps = 10, V = 50257;
    long n_micro = 1;
    bool recompute = false, cost_only = false, synthetic = false;
    std::string models = "124M,124M:prism,124M:x", token_file;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                fprintf(stderr, "%s needs a value\n", a.c_str());
                exit(2);
            }
            return argv[++i];
        };
        if (a == "-b") B = atoi(next().c_str());
        else if (a == "-t") T = atoi(next().c_str());
        else if (a == "--steps") steps = atoi(next().c_str());
        else if (a == "--micro-steps") n_micro = atol(next().c_str());
        else if (a == "-V") V = atoi(next().c_str());
        else if (a == "--models") models = next();
        else if (a == "--recompute") recompute = true;
        else if (a == "--cost-model") cost_only = true;
        else if (a == "--tokens") token_file = next();
        else if (a == "--synthetic") synthetic = true;
        else {
            fprintf(stderr,
                    "usage: bench_model [-b B (0: the largest that fits)] [-t T] [--micro-steps n] [--steps n] "
                    "[-V vocab] [--recompute] [--cost-model] [--tokens SHARD | --synthetic] "
                    "[--models 124M,124M:prism,124M:x]\n");
            return 2;
        }
    }
    if (B < 0 || steps < 1 || n_micro < 1) {
        fprintf(stderr,
                "bench_model: -b must be >= 0 (0: the largest that fits), --steps and --micro-steps positive\n");
        return 2;
    }
    if (!synthetic && token_file.empty()) {
        std::vector<std::string> found;
        try {
            found = glob_shards("data/default/*_train_*.bin");
        } catch (const std::exception&) {
        }
        if (found.empty()) {
            fprintf(stderr,
                    "bench_model: no real-text tokens: data/default/*_train_*.bin not found (bash setup.sh "
                    "fetches it); pass --tokens SHARD, or --synthetic for spread-out ids\n");
            return 2;
        }
        token_file = found[0];
    }
    std::vector<int> text;  // real-text tokens, read once (up to 4M), sequences taken in order and wrapped
    if (!synthetic) {
        try {
            text = shard_tokens(token_file, std::min<uint64_t>(read_shard_info(token_file).tokens, 1 << 22));
        } catch (const std::exception& err) {
            fprintf(stderr, "bench_model: %s\n", err.what());
            return 2;
        }
        printf("tokens: %s (real text, %zu tokens, consecutive sequences)\n", token_file.c_str(), text.size());
    } else {
        printf("tokens: synthetic (spread-out ids: hides how often real tokens repeat)\n");
    }
    const RooflineGpu roof;
    double peak = 0;
    if (!cost_only) {
        cudaDeviceProp prop;
        cudaCheck(cudaGetDeviceProperties(&prop, 0));
        peak = peak_bf16_tflops(prop.name) * 1e12;
        printf("device: %s (dense bf16 peak %s)\n", prop.name,
               peak > 0 ? (std::to_string((int)(peak / 1e12)) + " TFLOP/s").c_str() : "unknown");
    }
    printf(
        "cost model: H100 SXM roofline, HBM %.2f TB/s, %.0f TFLOP/s dense bf16; attention at %.0f%% of the peak "
        "(flash FLOPs, causal); expected = matmuls at %.0f%%, memory at %.0f%% of HBM, %.0f us per launch "
        "(estimates)\n",
        roof.bandwidth / 1e12, roof.peak / 1e12, 100 * roof.attention_eff, 100 * roof.matmul_eff, 100 * roof.memory_eff,
        roof.launch_s * 1e6);
    std::vector<std::string> summary;
    size_t start = 0;
    try {
        while (start <= models.size()) {
            size_t comma = models.find(',', start);
            std::string name = models.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
            start = comma == std::string::npos ? models.size() + 1 : comma + 1;
            ModelConfig c = model_from(name, V);
            const int t = T > 0 ? T : c.T;
            c.T = std::max(c.T, t);
            ModelConfig ct = c;
            ct.T = t;
            int Bm = B;  // this model's micro-batch
            if (Bm == 0) {
                size_t free_b = 0, total_b = 0;
                if (!cost_only) cudaCheck(cudaMemGetInfo(&free_b, &total_b));
                Bm = 16;
                if (!cost_only)
                    while (Bm > 1 && (double)gpu_memory(c, Bm, t, recompute).total() > 0.9 * (double)free_b) Bm /= 2;
            }
            // Micro-batch k's tokens: sequence k of the text (inputs; targets the next tokens), or spread-out ids.
            const size_t Nm = (size_t)Bm * t;
            size_t sequence = 0;
            auto next = [&](int* i, int* g) {
                if (synthetic) {
                    for (size_t k = 0; k < Nm; k++) i[k] = (int)(k * 2654435761u % c.V), g[k] = (int)(k * 40503u % c.V);
                    return;
                }
                for (size_t k = 0; k < Nm; k++) {
                    const size_t at = (sequence * Nm + k) % (text.size() - 1);
                    i[k] = text[at] % c.V, g[k] = text[at + 1] % c.V;
                }
                sequence++;
            };
            CostOptions copt;
            std::string token_note;
            {
                std::vector<int> in0(Nm), tg0(Nm);
                next(in0.data(), tg0.data());
                sequence = 0;
                const EmbeddingPlan plan = embedding_plan(in0.data(), (long)Nm);
                copt.most_frequent = (double)plan.size.most / Nm;
                copt.partials_per_position = (double)plan.size.partials / Nm;
                copt.distinct = plan.size.distinct;
                char buf[200];
                snprintf(buf, sizeof buf,
                         "  tokens of the first micro-batch: %d distinct, the most frequent %.2f%% (%d), "
                         "%d embedding partial rows\n",
                         plan.size.distinct, 100 * copt.most_frequent, plan.size.most, plan.size.partials);
                token_note = buf;
            }
            const double tokens = (double)Bm * t * n_micro,
                         model_flops = 3.0 * account(ct).dense_flops_per_token * tokens;
            const std::vector<OpCost> ops = step_ops(c, Bm, t, n_micro, recompute, copt);
            double rt = 0, et = 0;
            for (const OpCost& o : ops) rt += op_time(o, roof), et += op_expected(o, roof);
            const double planned = gib(gpu_memory(c, Bm, t, recompute).total());
            printf(
                "\n%s: %s\n  B %d x T %d x %ld micro-steps = %.0f tokens/step, %zu params, GPU memory %.2f GiB "
                "(--plan)%s\n%s",
                name.c_str(), describe_config(c).c_str(), Bm, t, n_micro, tokens, param_layout(c).total, planned,
                recompute ? " (recompute)" : "", token_note.c_str());
            char line[256];
            snprintf(line, sizeof line,
                     "%-14s predicted (estimate): roofline %.1f ms/step, MFU %.1f%%; expected %.1f ms/step, "
                     "%.0f tok/s, MFU %.1f%%",
                     name.c_str(), rt * 1e3, 100 * model_flops / (rt * roof.peak), et * 1e3, tokens / et,
                     100 * model_flops / (et * roof.peak));
            std::string sum = line;
            std::map<std::string, double> measured;
            if (!cost_only) {
                size_t free0 = 0, total = 0;
                cudaCheck(cudaMemGetInfo(&free0, &total));
                const std::unique_ptr<CudaEngineHooks> e = make_cuda_engine(c, recompute);
                e->init_params(1);
                std::vector<int> in(Nm), tg(Nm);
                OptimizerHyper hp;
                train_step(*e, next, Bm, t, n_micro, 1.0, 1e-4, hp, in, tg);  // warm-up: allocations, cuBLASLt plans
                const double t0 = now_s();
                for (int s = 0; s < steps; s++) train_step(*e, next, Bm, t, n_micro, 1.0, 1e-4, hp, in, tg);
                const double sec = (now_s() - t0) / steps;
                size_t free1 = 0;
                cudaCheck(cudaMemGetInfo(&free1, &total));
                EventTimer timer;
                e->set_timer(&timer);
                timer.begin(e->stream());
                train_step(*e, next, Bm, t, n_micro, 1.0, 1e-4, hp, in, tg);
                cudaCheck(cudaDeviceSynchronize());
                measured = timer.ms();
                e->set_timer(nullptr);
                char mfu[32] = "n/a";
                if (peak > 0) snprintf(mfu, sizeof mfu, "%.1f%%", 100 * model_flops / (sec * peak));
                snprintf(line, sizeof line,
                         "\n%-14s measured: %.1f ms/step, %.0f tok/s, MFU %s, memory %.2f GiB "
                         "(--plan %.2f GiB), B %d",
                         name.c_str(), sec * 1e3, tokens / sec, mfu, (free0 - free1) / 1073741824.0, planned, Bm);
                sum += line;
            }
            print_ops(ops, roof, measured);
            summary.push_back(sum);
        }
    } catch (const ConfigError& err) {
        fprintf(stderr, "bench_model: %s\n", err.what());
        return 1;
    }
    printf("\n");
    for (const std::string& s : summary) printf("%s\n", s.c_str());
    if (!cost_only) printf("%s\n", load.line().c_str());  // what was measured, beside the machine's load
    return 0;
}
