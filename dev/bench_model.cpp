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
// MFU = 3 x dense forward FLOPs per token (model_config.h's account(), attention counted over the full T x T square as
// PaLM and llm.c do) x tokens/s / the dense bf16 peak (cuda_common.cuh on a GPU, 989 TFLOP/s for the predictions); a
// GPU missing from the table prints "MFU n/a" rather than a made-up number.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "run/cost_model.h"
#include "util/machine_load.h"
#include "cuda_common.cuh"
#include "cuda_engine_hooks.cuh"
#include "embedding_plan.h"
#include "memory_plan.h"
#include "model/spec.h"
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

// The command line; a usage error prints its line and gives exit status 2.
struct BenchArgs {
    int B = 16, T = 0, steps = 10, V = 50257;
    long n_micro = 1;
    bool recompute = false, cost_only = false, synthetic = false;
    std::string models = "124M,124M:prism,124M:x", token_file;
};
bool parse_args(int argc, char** argv, BenchArgs& a) {
    for (int i = 1; i < argc; i++) {
        std::string f = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                fprintf(stderr, "%s needs a value\n", f.c_str());
                exit(2);
            }
            return argv[++i];
        };
        if (f == "-b") a.B = atoi(next().c_str());
        else if (f == "-t") a.T = atoi(next().c_str());
        else if (f == "--steps") a.steps = atoi(next().c_str());
        else if (f == "--micro-steps") a.n_micro = atol(next().c_str());
        else if (f == "-V") a.V = atoi(next().c_str());
        else if (f == "--models") a.models = next();
        else if (f == "--recompute") a.recompute = true;
        else if (f == "--cost-model") a.cost_only = true;
        else if (f == "--tokens") a.token_file = next();
        else if (f == "--synthetic") a.synthetic = true;
        else {
            fprintf(stderr,
                    "usage: bench_model [-b B (0: the largest that fits)] [-t T] [--micro-steps n] [--steps n] "
                    "[-V vocab] [--recompute] [--cost-model] [--tokens SHARD | --synthetic] "
                    "[--models 124M,124M:prism,124M:x]\n");
            return false;
        }
    }
    if (a.B < 0 || a.steps < 1 || a.n_micro < 1) {
        fprintf(stderr,
                "bench_model: -b must be >= 0 (0: the largest that fits), --steps and --micro-steps positive\n");
        return false;
    }
    return true;
}

// The real-text tokens (up to 4M, from --tokens or the default shard), or none with --synthetic; false after
// printing why there are none.
bool read_text(BenchArgs& a, std::vector<int>& text) {
    if (a.synthetic) {
        printf("tokens: synthetic (spread-out ids: hides how often real tokens repeat)\n");
        return true;
    }
    if (a.token_file.empty()) {
        std::vector<std::string> found;
        try {
            found = glob_shards("data/default/*_train_*.bin");
        } catch (const std::exception&) {
        }
        if (found.empty()) {
            fprintf(stderr,
                    "bench_model: no real-text tokens: data/default/*_train_*.bin not found (bash setup.sh "
                    "fetches it); pass --tokens SHARD, or --synthetic for spread-out ids\n");
            return false;
        }
        a.token_file = found[0];
    }
    try {
        text = shard_tokens(a.token_file, std::min<uint64_t>(read_shard_info(a.token_file).tokens, 1 << 22));
    } catch (const std::exception& err) {
        fprintf(stderr, "bench_model: %s\n", err.what());
        return false;
    }
    printf("tokens: %s (real text, %zu tokens, consecutive sequences)\n", a.token_file.c_str(), text.size());
    return true;
}

// Micro-batch k's tokens: sequence k of the text (inputs; targets the next tokens), or spread-out ids.
struct Batches {
    const std::vector<int>& text;
    bool synthetic;
    size_t Nm;  // tokens per micro-batch, B x T
    int V;
    size_t sequence = 0;
    void operator()(int* i, int* g) {
        if (synthetic) {
            for (size_t k = 0; k < Nm; k++) i[k] = (int)(k * 2654435761u % V), g[k] = (int)(k * 40503u % V);
            return;
        }
        for (size_t k = 0; k < Nm; k++) {
            const size_t at = (sequence * Nm + k) % (text.size() - 1);
            i[k] = text[at] % V, g[k] = text[at + 1] % V;
        }
        sequence++;
    }
};

// The cost model's token statistics from the first micro-batch (embedding_plan), and the line that shows them.
CostOptions token_costs(Batches next, std::string& note) {
    std::vector<int> in0(next.Nm), tg0(next.Nm);
    next(in0.data(), tg0.data());
    const EmbeddingPlan plan = embedding_plan(in0.data(), (long)next.Nm);
    CostOptions copt;
    copt.most_frequent = (double)plan.size.most / next.Nm;
    copt.partials_per_position = (double)plan.size.partials / next.Nm;
    copt.distinct = plan.size.distinct;
    char buf[200];
    snprintf(buf, sizeof buf,
             "  tokens of the first micro-batch: %d distinct, the most frequent %.2f%% (%d), "
             "%d embedding partial rows\n",
             plan.size.distinct, 100 * copt.most_frequent, plan.size.most, plan.size.partials);
    note = buf;
    return copt;
}

// The real step on the GPU: seconds per step (after a warm-up), the memory it took, and each op's ms from one
// profiled step.
struct Measured {
    double sec = 0, gib = 0;
    std::map<std::string, double> ms;
};
Measured measure(const ModelConfig& c, const BenchArgs& a, int Bm, int t, Batches& next) {
    Measured m;
    size_t free0 = 0, total = 0;
    cudaCheck(cudaMemGetInfo(&free0, &total));
    const std::unique_ptr<CudaEngineHooks> e = make_cuda_engine(c, a.recompute);
    e->init_params(1);
    std::vector<int> in(next.Nm), tg(next.Nm);
    OptimizerHyper hp;
    auto step = [&] { train_step(*e, next, Bm, t, a.n_micro, 1.0, 1e-4, hp, in, tg); };
    step();  // warm-up: allocations, cuBLASLt plans
    const double t0 = now_s();
    for (int s = 0; s < a.steps; s++) step();
    m.sec = (now_s() - t0) / a.steps;
    size_t free1 = 0;
    cudaCheck(cudaMemGetInfo(&free1, &total));
    m.gib = (free0 - free1) / 1073741824.0;
    EventTimer timer;
    e->set_timer(&timer);
    timer.begin(e->stream());
    step();
    cudaCheck(cudaDeviceSynchronize());
    m.ms = timer.ms();
    e->set_timer(nullptr);
    return m;
}

// One model: its sizes, the cost model's table and prediction, and on a GPU the measured step. Returns its summary
// line(s).
std::string bench(const std::string& name, const BenchArgs& a, const std::vector<int>& text, const RooflineGpu& roof,
                  double peak) {
    ModelConfig c = model_from(name, a.V);
    const int t = a.T > 0 ? a.T : c.T;
    c.T = std::max(c.T, t);
    ModelConfig ct = c;
    ct.T = t;
    int Bm = a.B;  // this model's micro-batch
    if (Bm == 0) {
        size_t free_b = 0, total_b = 0;
        if (!a.cost_only) cudaCheck(cudaMemGetInfo(&free_b, &total_b));
        Bm = 16;
        if (!a.cost_only)
            while (Bm > 1 && (double)gpu_memory(c, Bm, t, a.recompute).total() > 0.9 * (double)free_b) Bm /= 2;
    }
    Batches next{text, a.synthetic, (size_t)Bm * t, c.V};
    std::string token_note;
    const CostOptions copt = token_costs(next, token_note);
    const double tokens = (double)Bm * t * a.n_micro, model_flops = 3.0 * account(ct).dense_flops_per_token * tokens;
    const std::vector<OpCost> ops = step_ops(c, Bm, t, a.n_micro, a.recompute, copt);
    double rt = 0, et = 0;
    for (const OpCost& o : ops) rt += op_time(o, roof), et += op_expected(o, roof);
    const double planned = gib(gpu_memory(c, Bm, t, a.recompute).total());
    printf(
        "\n%s: %s\n  B %d x T %d x %ld micro-steps = %.0f tokens/step, %zu params, GPU memory %.2f GiB "
        "(--plan)%s\n%s",
        name.c_str(), describe_config(c).c_str(), Bm, t, a.n_micro, tokens, param_layout(c).total, planned,
        a.recompute ? " (recompute)" : "", token_note.c_str());
    char line[256];
    snprintf(line, sizeof line,
             "%-14s predicted (estimate): roofline %.1f ms/step, MFU %.1f%%; expected %.1f ms/step, "
             "%.0f tok/s, MFU %.1f%%",
             name.c_str(), rt * 1e3, 100 * model_flops / (rt * roof.peak), et * 1e3, tokens / et,
             100 * model_flops / (et * roof.peak));
    std::string sum = line;
    Measured m;
    if (!a.cost_only) {
        m = measure(c, a, Bm, t, next);
        char mfu[32] = "n/a";
        if (peak > 0) snprintf(mfu, sizeof mfu, "%.1f%%", 100 * model_flops / (m.sec * peak));
        snprintf(line, sizeof line,
                 "\n%-14s measured: %.1f ms/step, %.0f tok/s, MFU %s, memory %.2f GiB "
                 "(--plan %.2f GiB), B %d",
                 name.c_str(), m.sec * 1e3, tokens / m.sec, mfu, m.gib, planned, Bm);
        sum += line;
    }
    print_ops(ops, roof, m.ms);
    return sum;
}

}  // namespace

int main(int argc, char** argv) {
    const MachineLoad load;  // the host's load, beside the figures
    BenchArgs a;
    std::vector<int> text;  // real-text tokens, read once, sequences taken in order and wrapped
    if (!parse_args(argc, argv, a) || !read_text(a, text)) return 2;
    const RooflineGpu roof;
    double peak = 0;
    if (!a.cost_only) {
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
    try {
        for (size_t start = 0; start <= a.models.size();) {
            const size_t comma = a.models.find(',', start);
            summary.push_back(
                bench(a.models.substr(start, comma == std::string::npos ? std::string::npos : comma - start), a, text,
                      roof, peak));
            start = comma == std::string::npos ? a.models.size() + 1 : comma + 1;
        }
    } catch (const ConfigError& err) {
        fprintf(stderr, "bench_model: %s\n", err.what());
        return 1;
    }
    printf("\n");
    for (const std::string& s : summary) printf("%s\n", s.c_str());
    if (!a.cost_only) printf("%s\n", load.line().c_str());  // what was measured, beside the machine's load
    return 0;
}
