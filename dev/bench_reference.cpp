// dev/bench_reference.cpp: forward+backward ms per step of the fp32 CPU reference (ref/reference.h) at the `tiny`
// size, plus the GFLOP/s of the logits matmul that dominates it. Build and run:
//   make build/bench_reference CPU_ONLY=1   (make test builds it, so that it keeps compiling)
//   OMP_NUM_THREADS=2 ./build/bench_reference [B T d L h V]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "ref/reference.h"
#include "util/machine_load.h"

static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
// Process CPU time: on a shared machine wall time includes other people's jobs; with OMP_NUM_THREADS=1 this is
// the step's own cost (OpenMP threads spin at barriers, so with more threads it over-counts).
static double cpu() {
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(int argc, char** argv) {
    const MachineLoad load;  // printed beside the figures: a busy machine's are not the machine's
    int B = 8, T = 128, d = 128, L = 6, h = 4, V = 50257;
    if (argc == 7)
        B = atoi(argv[1]), T = atoi(argv[2]), d = atoi(argv[3]), L = atoi(argv[4]), h = atoi(argv[5]),
        V = atoi(argv[6]);
    ModelConfig cfg;
    cfg.d = d, cfg.V = V, cfg.T = T, cfg.h_base = h;
    cfg.layers.assign(L, LayerSpec{d, h});
    ref::RefModel<float> model(cfg);
    model.init_params(1337);
    printf("B=%d T=%d d=%d L=%d h=%d V=%d params=%zu threads=%d\n", B, T, d, L, h, V, model.layout.total,
           omp_get_max_threads());

    // the logits matmul alone: (B*T, d) x (V, d)^T
    const long N = (long)B * T;
    std::vector<float> x(N * d, 0.5f), y(N * V);
    double t0 = now();
    ref::matmul_forward(y.data(), V, x.data(), d, model.params.data(), N, d, V);
    double t1 = now();
    printf("logits matmul forward: %.1f ms, %.1f GFLOP/s\n", (t1 - t0) * 1e3, 2.0 * N * d * V / (t1 - t0) / 1e9);

    ref::Rng rng(7);
    std::vector<int> in(N), tg(N);
    for (long i = 0; i < N; i++) in[i] = (int)(rng.next() % V), tg[i] = (int)(rng.next() % V);
    double best = 1e9;
    for (int step = 0; step < 5; step++) {
        double a = now(), ca = cpu();
        model.zero_grad();
        float loss = model.forward(in.data(), tg.data(), B, T);
        double b = now();
        model.backward();
        double c = now(), cc = cpu();
        printf("step %d: loss %.4f  forward %.0f ms  backward %.0f ms  total %.0f ms  (cpu %.0f ms)\n", step, loss,
               (b - a) * 1e3, (c - b) * 1e3, (c - a) * 1e3, (cc - ca) * 1e3);
        if (step > 0) best = std::min(best, c - a);  // step 0 pays the first-touch page faults
    }
    printf("best forward+backward: %.0f ms/step\n", best * 1e3);
    printf("%s\n", load.line().c_str());
    return 0;
}
