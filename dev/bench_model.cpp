// dev/bench_model.cpp: GPU training throughput of the CUDA model (model.cuh): tokens/s, MFU and device memory
// for several models in one run (default: 124M uniform, 124M Prism, 124M X), then per-kernel timings at the
// first layer's shapes of the first model. Build and run on a GPU machine:
//   nvcc -std=c++17 -O3 -arch=sm_90 -I. -x cu dev/bench_model.cpp -o build/bench_model -lcublasLt -Xcompiler -fopenmp
//   ./build/bench_model [-b B] [-t T] [--steps n] [--recompute] [--models 124M,124M:prism,124M:x]
// (make bench-model does both.) Built by g++ it runs on the CUDA-on-CPU executor: a smoke test of the code path
// only (make bench-model-smoke runs `tiny` for one step), its timings mean nothing.
// MFU = 3 x dense forward FLOPs per token (schedule.h's account(), attention counted over the full T x T square
// as PaLM and llm.c do) x tokens/s / the GPU's dense bf16 peak from the table below; a GPU missing from the
// table prints "MFU n/a" rather than a made-up number.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "model.cuh"

namespace {

double peak_tflops(const std::string& device) { return peak_bf16_tflops(device); }

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

float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0;
    cudaCheck(cudaEventElapsedTime(&ms, a, b));
    return ms;
}

// Mean ms of fn over reps launches (after one warm-up).
double time_ms(const std::function<void()>& fn, int reps) {
    cudaEvent_t a, b;
    cudaCheck(cudaEventCreate(&a)), cudaCheck(cudaEventCreate(&b));
    fn();
    cudaCheck(cudaEventRecord(a));
    for (int i = 0; i < reps; i++) fn();
    cudaCheck(cudaEventRecord(b));
    cudaCheck(cudaEventSynchronize(b));
    const double ms = elapsed_ms(a, b) / reps;
    cudaCheck(cudaEventDestroy(a)), cudaCheck(cudaEventDestroy(b));
    return ms;
}

template <class T> T* dev_alloc(size_t n, float fill = 0.01f) {
    std::vector<T> h(n, T(fill));
    T* p;
    cudaCheck(cudaMalloc(&p, n * sizeof(T)));
    cudaCheck(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    return p;
}

// Each kernel family once at layer 0's shapes (and the head), ms per call.
void kernel_timings(const ModelConfig& c, int B, int T, int reps) {
    const long N = (long)B * T;
    const int w = c.layers[0].width, h = c.layers[0].heads, hid = c.hidden_of(0), D = c.D(), d = c.d;
    const int Vp = padded_vocab(c.V);
    const bool rms = c.norm == NormType::RMSNorm;
    bf16 *x = dev_alloc<bf16>(N * D), *ln = dev_alloc<bf16>(N * w), *qkv = dev_alloc<bf16>(N * 3 * w);
    bf16 *att = dev_alloc<bf16>(N * w), *dqkv = dev_alloc<bf16>(N * 3 * w), *fc = dev_alloc<bf16>(N * 2 * hid);
    bf16 *sw = dev_alloc<bf16>(N * hid), *wqkv = dev_alloc<bf16>((size_t)3 * w * w), *g = dev_alloc<bf16>(w, 1.0f);
    bf16 *logits = dev_alloc<bf16>(N * Vp), *wte = dev_alloc<bf16>((size_t)Vp * d), *dx = dev_alloc<bf16>(N * D);
    bf16* dw = dev_alloc<bf16>((size_t)3 * w * w);
    const int hmax = std::max(h, w / 64);  // heads at layer 0, or at head_dim 64 in the sweep below
    float *mean = dev_alloc<float>(N), *rstd = dev_alloc<float>(N, 1.0f), *lse = dev_alloc<float>(N * hmax);
    float *scratch = dev_alloc<float>(std::max(norm_backward_scratch_floats(N, w), (size_t)N * hmax));
    float* losses = dev_alloc<float>(N);
    std::vector<int> tok(N);
    for (long n = 0; n < N; n++) tok[n] = (int)(n * 7919 % c.V);
    int* dtok = dev_alloc<int>(N);
    cudaCheck(cudaMemcpy(dtok, tok.data(), N * sizeof(int), cudaMemcpyHostToDevice));
    std::vector<float> tab = rope_table(T, w / h, c.rope_theta);
    float* dtab = dev_alloc<float>(tab.size());
    cudaCheck(cudaMemcpy(dtab, tab.data(), tab.size() * sizeof(float), cudaMemcpyHostToDevice));
    const bf16* none = nullptr;
    const float scale = 1.0f / std::sqrt((float)(w / h));
    struct Row { const char* name; std::function<void()> fn; double flops; };
    std::vector<Row> rows = {
        {"embedding_forward", [&] { embedding_forward(x, dtok, wte, N, d, D, 0); }, 0},
        {"norm_forward", [&] { norm_forward(rms, ln, mean, rstd, x, D, g, g, N, w, 1e-5f, 0); }, 0},
        {"residual_norm_forward", [&] { residual_norm_forward(rms, x, x, ln, D, w, ln, mean, rstd, g, g, N, w, 1e-5f, 0); }, 0},
        {"norm_backward", [&] { norm_backward(rms, dx, D, g, g, ln, x, D, mean, rstd, g, N, w, scratch, 0); }, 0},
        {"matmul qkv forward", [&] { matmul(qkv, ln, wqkv, none, (int)N, 3 * w, w, false, true, 0.0f, 0); }, 2.0 * N * 3 * w * w},
        {"matmul qkv dW (beta 1)", [&] { matmul(dw, qkv, ln, none, 3 * w, w, (int)N, true, false, 1.0f, 0); }, 2.0 * N * 3 * w * w},
        {"rope_forward", [&] { rope_forward(qkv, dtab, B, T, w, h, 0); }, 0},
        {"attention_forward", [&] { attention_forward(att, lse, qkv, B, T, w, h, scale, 0); }, 2.0 * B * T * T * w},
        {"attention_backward", [&] { attention_backward(dqkv, scratch, att, qkv, att, lse, B, T, w, h, scale, 0); }, 5.0 * B * T * T * w},
        {"swiglu_forward", [&] { swiglu_forward(sw, fc, N, hid, 0); }, 0},
        {"swiglu_backward", [&] { swiglu_backward(fc, sw, fc, N, hid, 0); }, 0},
        {"matmul logits", [&] { matmul(logits, ln, wte, none, (int)N, Vp, d, false, true, 0.0f, 0); }, 2.0 * N * Vp * d},
        {"softmax_crossentropy_forward", [&] { softmax_crossentropy_forward(losses, lse, logits, dtok, N, c.V, Vp, 0); }, 0},
        {"softmax_crossentropy_backward", [&] { softmax_crossentropy_backward(logits, lse, dtok, N, c.V, Vp, 1e-4f, 0); }, 0},
    };
    printf("\nper-kernel timings, layer 0 of the first model (w %d, h %d, hid %d, B %d, T %d):\n", w, h, hid, B, T);
    for (const Row& r : rows) {
        const double ms = time_ms(r.fn, reps);
        if (r.flops > 0) printf("  %-32s %9.3f ms  %8.1f TFLOP/s\n", r.name, ms, r.flops / ms / 1e9);
        else printf("  %-32s %9.3f ms\n", r.name, ms);
    }
    // attention at every head_dim the Prism and X presets use, at the same B, T and width
    for (int hd : {64, 128, 256}) {
        if (w % hd) continue;
        const float sc = 1.0f / std::sqrt((float)hd);
        const double fl = 2.0 * B * T * T * w;
        const double f = time_ms([&] { attention_forward(att, lse, qkv, B, T, w, w / hd, sc, 0); }, reps);
        const double b = time_ms([&] { attention_backward(dqkv, scratch, att, qkv, att, lse, B, T, w, w / hd, sc, 0); }, reps);
        printf("  attention head_dim %-3d forward %9.3f ms (%6.1f TFLOP/s)  backward %9.3f ms (%6.1f TFLOP/s)\n", hd, f,
               fl / f / 1e9, b, 2.5 * fl / b / 1e9);
    }
    for (void* p : {(void*)x, (void*)ln, (void*)qkv, (void*)att, (void*)dqkv, (void*)fc, (void*)sw, (void*)wqkv,
                    (void*)g, (void*)logits, (void*)wte, (void*)dx, (void*)dw, (void*)mean, (void*)rstd, (void*)lse,
                    (void*)scratch, (void*)losses, (void*)dtok, (void*)dtab})
        cudaFree(p);
}

}  // namespace

int main(int argc, char** argv) {
    int B = 16, T = 0, steps = 10, V = 50257;
    bool recompute = false;
    std::string models = "124M,124M:prism,124M:x";
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) { fprintf(stderr, "%s needs a value\n", a.c_str()); exit(2); }
            return argv[++i];
        };
        if (a == "-b") B = atoi(next().c_str());
        else if (a == "-t") T = atoi(next().c_str());
        else if (a == "--steps") steps = atoi(next().c_str());
        else if (a == "-V") V = atoi(next().c_str());
        else if (a == "--models") models = next();
        else if (a == "--recompute") recompute = true;
        else {
            fprintf(stderr, "usage: bench_model [-b B] [-t T] [--steps n] [-V vocab] [--recompute] [--models 124M,124M:prism,124M:x]\n");
            return 2;
        }
    }
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    const double peak = peak_tflops(prop.name);
    printf("device: %s (dense bf16 peak %s)\n", prop.name, peak > 0 ? (std::to_string((int)peak) + " TFLOP/s").c_str() : "unknown");
    printf("%-18s %6s %6s %12s %10s %8s %10s %10s\n", "model", "B", "T", "params", "tok/s", "MFU", "ms/step", "mem GiB");
    ModelConfig first;
    int first_T = 0;
    size_t start = 0;
    try {
        while (start <= models.size()) {
            size_t comma = models.find(',', start);
            std::string name = models.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
            start = comma == std::string::npos ? models.size() + 1 : comma + 1;
            ModelConfig c = model_from(name, V);
            const int t = T > 0 ? T : c.T;
            c.T = std::max(c.T, t);
            if (first.layers.empty()) first = c, first_T = t;
            size_t free0 = 0, total = 0;
            cudaCheck(cudaMemGetInfo(&free0, &total));
            double ms;
            {
                CudaEngine e(c, recompute);
                e.init_params(1);
                std::vector<int> in((size_t)B * t), tg((size_t)B * t);
                for (size_t i = 0; i < in.size(); i++) in[i] = (int)(i * 2654435761u % c.V), tg[i] = (int)(i * 40503u % c.V);
                OptimizerHyper hp;
                auto step = [&] {
                    e.zero_grad();
                    e.forward(in.data(), tg.data(), B, t);
                    e.backward(1.0f);
                    e.clip_grad_norm(1.0);
                    e.adamw_step(1e-4, hp);
                };
                ms = time_ms(step, steps);  // the warm-up step allocates the activations
                size_t free1 = 0;
                cudaCheck(cudaMemGetInfo(&free1, &total));
                const double tok_s = (double)B * t / (ms / 1e3);
                ModelConfig ct = c;
                ct.T = t;
                const double mfu = peak > 0 ? 3.0 * account(ct).dense_flops_per_token * tok_s / (peak * 1e12) : -1;
                char mfu_s[16];
                if (mfu >= 0) snprintf(mfu_s, sizeof(mfu_s), "%.1f%%", 100 * mfu);
                else snprintf(mfu_s, sizeof(mfu_s), "n/a");
                printf("%-18s %6d %6d %12zu %10.0f %8s %10.1f %10.2f\n", name.c_str(), B, t, e.num_params(), tok_s, mfu_s,
                       ms, (free0 - free1) / 1073741824.0);
            }
        }
    } catch (const ConfigError& err) {
        fprintf(stderr, "bench_model: %s\n", err.what());
        return 1;
    }
    kernel_timings(first, B, first_T, std::max(1, steps));
    return 0;
}
