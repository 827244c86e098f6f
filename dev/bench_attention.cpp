// dev/bench_attention.cpp: throughput of the flash attention kernels (attention.cuh), forward and backward, causal,
// one row per (T, head_dim): ms and TFLOP/s. B and h fill the GPU the way FlashAttention's own benchmark does:
// B = tokens / T sequences (16k tokens by default) of h = width / hd heads (width 2048). FLOPs are counted as
// there too: forward 2 x 2 x B h T^2 hd / 2 (two matmuls, half the square), backward 2.5 x that (the kernels
// execute 7 matmuls of that size for the counted 5: the deterministic dQ pass recomputes S and dP).
//   make bench-attention [ARGS="--T 1024 --hd 128"]    nvcc for NATIVE_ARCH (sm_90), needs a GPU
//   make bench-attention-smoke                         g++, the CUDA-on-CPU executor: a tiny shape, the same table
//                                                      (the timings mean nothing; CI runs the code path)
// --window W runs a sliding window (FLOPs counted over the W T - W (W - 1) / 2 visible scores instead of T^2 / 2),
// --group G lets G query heads share each K/V head (GQA; h must be a multiple of G). The "tiles" column is the
// work the kernels do against the global kernel's at the same shape, from the tiles they visit (attention_span.h,
// the cost model's count): what a window should save in time, an estimate the ms columns then measure.
// Every row also checks that lse came out finite, so a launch failure cannot pass for a fast kernel.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "attention.cuh"
#include "util/machine_load.h"
#include "cuda_common.cuh"
#include "dev/bench_util.cuh"
#include "ref/init.h"

namespace {

// One (T, hd) row of the table. Returns false if the kernels produced a non-finite lse.
bool bench_row(int T, int hd, long tokens, int width, int reps, double peak, int window, int group) {
    const int h = std::max(1, width / hd / group) * group, w = h * hd, B = (int)std::max(1L, tokens / T);
    LayerSpec ls{w, h};
    ls.kv_heads = h / group, ls.window = window;
    const size_t N = (size_t)B * T;
    std::vector<bf16> host(N * ls.qkv_rows());
    ref::Rng rng(hd * 7919u + T);
    for (bf16& x : host) x = bf16(2.0f * (float)rng.uniform() - 1.0f);
    bf16 *qkv = upload(host), *out = nullptr, *dqkv = nullptr;
    host.resize(N * w);
    bf16* dout = upload(host);
    float *lse = nullptr, *scratch = nullptr;
    cudaCheck(cudaMalloc(&out, N * w * sizeof(bf16)));
    cudaCheck(cudaMalloc(&dqkv, N * ls.qkv_rows() * sizeof(bf16)));
    cudaCheck(cudaMalloc(&lse, (size_t)B * h * T * sizeof(float)));
    cudaCheck(cudaMalloc(&scratch, (size_t)B * h * T * sizeof(float)));
    const float scale = 1.0f / std::sqrt((float)hd);
    const double fwd = time_ms([&] { attention_forward(out, lse, qkv, B, T, ls, scale, 0); }, reps);
    const double bwd =
        time_ms([&] { attention_backward(dqkv, scratch, dout, qkv, out, lse, B, T, ls, scale, 0); }, reps);
    std::vector<float> l((size_t)B * h * T);
    cudaCheck(cudaMemcpy(l.data(), lse, l.size() * sizeof(float), cudaMemcpyDeviceToHost));
    bool finite = true;
    for (float x : l) finite = finite && std::isfinite(x);
    const double scores = window && window < T ? (double)window * T - window * (window - 1) / 2.0 : T * (double)T / 2;
    const double flops = 4.0 * B * h * scores * hd;  // forward: 2 x 2 x B h hd x the visible scores
    const AttVisits vw = att_visits(hd, T, window), vg = att_visits(hd, T, 0);
    auto work = [](const AttVisits& v) {
        return 2 * v.fwd_pairs + 3 * v.dq_pairs + 2 * v.dkv_a_pairs + 2 * v.dkv_b_pairs;
    };
    const double tf = flops / fwd / 1e9, tb = 2.5 * flops / bwd / 1e9, tfb = 3.5 * flops / (fwd + bwd) / 1e9;
    char pct[32] = "";
    if (peak > 0) snprintf(pct, sizeof(pct), "%5.1f%%", 100 * tfb / peak);
    printf("%6d %5d %4d %4d %10.3f %9.1f %10.3f %9.1f %9.1f %7s %6.2fx %6.3f%s\n", T, hd, B, h, fwd, tf, bwd, tb, tfb,
           pct, attention_wide_cost(hd), work(vw) / work(vg), finite ? "" : "  NON-FINITE lse: FAILED");
    for (void* p : {(void*)qkv, (void*)dout, (void*)out, (void*)dqkv, (void*)lse, (void*)scratch})
        cudaCheck(cudaFree(p));
    return finite;
}

}  // namespace

int main(int argc, char** argv) {
#ifdef __CUDACC__
    std::string Ts = "1024,2048,4096", hds = "64,128,256,40,72,96,776";
    long tokens = 16384;
    int width = 2048, reps = 10, window = 0, group = 1;
#else  // the executor: one tiny shape per instance, one head
    std::string Ts = "40", hds = "64,72,256,520";
    long tokens = 40;
    int width = 0, reps = 1, window = 0, group = 1;
#endif
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (i + 1 >= argc) {
            fprintf(stderr,
                    "usage: bench_attention [--T 1024,2048,4096] [--hd 64,128,256] [--tokens 16384] "
                    "[--width 2048] [--reps 10] [--window 0] [--group 1]\n");
            return 2;
        }
        const std::string v = argv[++i];
        if (a == "--T") Ts = v;
        else if (a == "--hd") hds = v;
        else if (a == "--tokens") tokens = int_list(v, "bench_attention")[0];
        else if (a == "--width") width = int_list(v, "bench_attention")[0];
        else if (a == "--reps") reps = int_list(v, "bench_attention")[0];
        else if (a == "--window") window = v == "0" ? 0 : int_list(v, "bench_attention")[0];
        else if (a == "--group") group = int_list(v, "bench_attention")[0];
        else {
            fprintf(stderr,
                    "bench_attention: unknown flag %s (flags: --T --hd --tokens --width --reps --window --group)\n",
                    a.c_str());
            return 2;
        }
    }
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    const double peak = peak_bf16_tflops(prop.name);
    printf(
        "device: %s; causal, window %d, %d query heads per K/V head; %ld tokens per row, h = width %d / head_dim; "
        "TFLOP/s counted as FlashAttention does\n",
        prop.name, window, group, tokens, width);
    printf("%6s %5s %4s %4s %10s %9s %10s %9s %9s %7s %7s %6s\n", "T", "hd", "B", "h", "fwd ms", "fwd TF/s", "bwd ms",
           "bwd TF/s", "f+b TF/s", "% peak", "wide", "tiles");
    const MachineLoad load;  // the host's load, beside the figures (a busy host slows the launches)
    bool ok = true;
    for (int T : int_list(Ts, "bench_attention"))
        for (int hd : int_list(hds, "bench_attention"))
            ok = bench_row(T, hd, tokens, width, reps, peak, window, group) && ok;
    printf("%s\n", load.line().c_str());
    return ok ? 0 : 1;
}
