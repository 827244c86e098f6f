// dev/bench_layer_stats.cpp: what Engine::layer_stats (layer_stats.h) adds to a CPU training step, as a ratio: the
// CPU engine's step (zero_grad, forward_backward, clip, AdamW, read_stats) with and without layer_stats() after it,
// on `tiny` with the per-layer columns of issue 42 (--no-attention 5 --kv-heads 1x2,2x4 -w x), B 16 x T 128. The two
// kinds of step alternate, so that a shared machine's load falls on both alike; medians, and the load beside them.
//   make build/bench_layer_stats CPU_ONLY=1 (make test builds it, so that it keeps compiling)
//   OMP_NUM_THREADS=2 ./build/bench_layer_stats [pairs]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "model/spec.h"
#include "ref/cpu_engine.h"
#include "util/machine_load.h"

static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

int main(int argc, char** argv) {
    const MachineLoad load;
    const int pairs = argc > 1 ? atoi(argv[1]) : 6, B = 16, T = 128;
    ModelSpec s;
    s.widths = "x", s.kv_heads = "1x2,2x4", s.no_attention = "5";
    std::vector<std::string> warnings;
    const ModelConfig c = build_config(s, warnings);
    CpuEngine e(c);
    e.init_params(1);
    std::vector<int> in((size_t)B * T), tg((size_t)B * T);
    ref::Rng rng(3);
    for (size_t i = 0; i < in.size(); i++) in[i] = (int)(rng.next() % c.V), tg[i] = (int)(rng.next() % c.V);
    printf("tiny -w x --kv-heads 1x2,2x4 --no-attention 5: L=%d params=%zu B=%d T=%d threads=%d\n", c.L(),
           e.num_params(), B, T, omp_get_max_threads());
    std::vector<double> plain, with, stats;
    for (int k = 0; k < 2 * pairs + 1; k++) {
        const double a = now();
        e.zero_grad();
        e.forward_backward(in.data(), tg.data(), B, T, 1.0f, true);
        e.clip_grad_norm(1.0);
        e.adamw_step(1e-4, OptimizerHyper());
        e.read_stats();
        const double b = now();
        if (k == 0) continue;  // the first step pays the first-touch page faults
        if (k % 2) {
            const LayerStats ls = e.layer_stats();
            const double d = now();
            with.push_back(d - a), stats.push_back(d - b);
            if (ls.grad_norm.size() != (size_t)c.L()) return 1;
        } else {
            plain.push_back(b - a);
        }
    }
    const double p = median(plain), w = median(with), st = median(stats);
    printf("step without: %.1f ms  with layer_stats: %.1f ms  layer_stats alone: %.2f ms (medians of %d)\n", p * 1e3,
           w * 1e3, st * 1e3, pairs);
    printf("layer_stats / step: %.3f%% (alone); every 10th step: %.4f%%\n", 100 * st / p, 10 * st / p);
    printf("%s\n", load.line().c_str());
    return 0;
}
