// dev/bench_gdn.cpp: the chunked gated delta rule's kernels (gdn_chunk_forward and gdn_chunk_backward, issue 53's
// chunk kernels: the delta rule alone, what flash-linear-attention's chunk_gated_delta_rule computes; not
// gdn.cuh's per-row ops, the conv, L2 norms, gates and gated norm) against our flash attention (attention.cuh,
// causal, forward + backward) at the same B, T, h and head_dim: one row per (T, head_dim), ms of each and the ratio
// attention / gdn of forward + backward (above 1: the delta rule is faster; where it crosses 1 is the crossover).
// Shapes: h = width / head_dim heads (width 768, the 124M model's: hd 64 -> 12 heads, 128 -> 6, 256 -> 3),
// B = tokens / T sequences (16384 tokens by default: a 124M step's micro-batch, B 16 at T 1024). Inputs: q and k
// L2-normalised per head, v and dout normal (sd 0.5), beta = sigmoid(normal), g = log-decay in [-0.3, 0).
// "counted TF/s" counts model_config.h's chunked-form FLOPs (h (6 hd^2 + 10 C hd + 2/3 C^2) per token forward, C = 64;
// backward twice that), as the cost model does; attention's column counts FlashAttention's (as bench_attention).
//   bench_gdn [--T 1024,2048,4096,8192,16384] [--hd 64,128,256] [--width 768] [--tokens 16384] [--reps 5]
//             [--dump DIR]          the GPU bundle's (nvcc); build/bench_gdn_cpu is the same on the CUDA-on-CPU
//                                   executor, by default one tiny shape (T 130, hd 64, w 128, B 2: its timings mean
//                                   nothing; the code path and the dumps)
// --dump DIR writes, for two small shapes (B 2, T 1000, h 4, hd 64 and B 1, T 2048, h 2, hd 128: T not a multiple
// of the chunk, and hd 128), the kernels' inputs and outputs to DIR/gdn_T1000_hd64.bin and DIR/gdn_T2048_hd128.bin
// for dev/peer/gdn_fla.py, which runs flash-linear-attention on the same inputs and compares. File layout
// (little-endian): the 8 bytes "PRISMGDN", int32 B, T, h, hd; then, packed, heads contiguous within a row (row n =
// b T + t): q, k, v bf16 (B T, h hd) each; beta, g fp32 (B T, h); dout bf16 (B T, h hd); o bf16 (B T, h hd);
// dq, dk, dv bf16 (B T, h hd) each; dbeta, dg fp32 (B T, h).
// Exit status: 0, 1 when a kernel's output is not finite, 2 on a usage error.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "attention.cuh"
#include "cuda_common.cuh"
#include "dev/bench_util.cuh"
#include "gdn_chunk.cuh"
#include "gdn_chunk_bwd.cuh"
#include "ref/init.h"
#include "util/machine_load.h"

namespace {

template <class T> T* device(size_t n) {
    T* p = nullptr;
    cudaCheck(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
    return p;
}
template <class T> std::vector<T> download(const T* p, size_t n) {
    std::vector<T> h(n);
    cudaCheck(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

// One shape's buffers on the GPU: the engine's layouts (qkv (N, 3w), o and dout (N, w), dqkv (N, 3w)).
struct Shape {
    int B, T, h, hd;
    long N() const { return (long)B * T; }
    int w() const { return h * hd; }
};
// Standard normal draws, made once and shared by every shape (drawing 16384 x 2304 of them per shape would take
// longer than the kernels' timings), grown to n.
const std::vector<float>& normals(size_t n) {
    static std::vector<float> pool;
    static ref::Rng rng(7919);
    while (pool.size() < n) pool.push_back((float)rng.normal());
    return pool;
}
struct Buffers {
    Shape s;
    bf16 *qkv, *o, *dout, *dqkv;
    float *beta, *g, *dbeta, *dg, *states;
    void *fscratch, *bscratch;
    explicit Buffers(const Shape& sh) : s(sh) {
        const long N = s.N();
        const int w = s.w(), nc = (s.T + 63) / 64;
        const std::vector<float>& z = normals((size_t)N * 4 * w);
        std::vector<bf16> x((size_t)N * 3 * w);
        for (size_t head = 0; head < (size_t)N * 3 * s.h; head++) {  // one head of one part of one row
            const float* r = &z[head * s.hd];
            const bool unit = head / s.h % 3 < 2;  // q and k L2-normalised, v normal with sd 0.5
            double ss = 0;
            for (int i = 0; i < s.hd; i++) ss += (double)r[i] * r[i];
            const float scale = unit ? (float)(1 / std::sqrt(ss)) : 0.5f;
            for (int i = 0; i < s.hd; i++) x[head * s.hd + i] = bf16(r[i] * scale);
        }
        qkv = upload(x);
        std::vector<bf16> d((size_t)N * w);
        for (size_t i = 0; i < d.size(); i++) d[i] = bf16(0.5f * z[(size_t)N * 3 * w + i]);
        dout = upload(d);
        ref::Rng rng(s.hd * 7919u + s.T * 31u + s.B);
        std::vector<float> be((size_t)N * s.h), ge((size_t)N * s.h);
        for (float& y : be) y = (float)(1 / (1 + std::exp(-rng.normal())));
        for (float& y : ge) y = (float)(-0.3 * rng.uniform());
        beta = upload(be), g = upload(ge);
        o = device<bf16>((size_t)N * w), dqkv = device<bf16>((size_t)N * 3 * w);
        dbeta = device<float>((size_t)N * s.h), dg = device<float>((size_t)N * s.h);
        states = device<float>((size_t)s.B * s.h * nc * s.hd * s.hd);
        fscratch = device<char>(gdn_chunk_forward_scratch_bytes(s.B, s.T, s.h, s.hd));
        bscratch = device<char>(gdn_chunk_backward_scratch_bytes(s.B, s.T, s.h, s.hd));
    }
    ~Buffers() {
        for (void* p : {(void*)qkv, (void*)o, (void*)dout, (void*)dqkv, (void*)beta, (void*)g, (void*)dbeta, (void*)dg,
                        (void*)states, fscratch, bscratch})
            cudaFree(p);
    }
    void forward() {
        const int w = s.w();
        gdn_chunk_forward(o, w, states, qkv, qkv + w, qkv + 2 * w, 3L * w, beta, g, s.B, s.T, s.h, s.hd, nullptr,
                          nullptr, fscratch, 0);
    }
    void backward() {
        const int w = s.w();
        gdn_chunk_backward(dqkv, dqkv + w, dqkv + 2 * w, 3L * w, dbeta, dg, dout, w, states, qkv, qkv + w, qkv + 2 * w,
                           3L * w, beta, g, s.B, s.T, s.h, s.hd, bscratch, 0);
    }
};

// Every value finite: a failed launch must not pass for a fast kernel.
template <class T> bool finite(const T* p, size_t n) {
    for (const T& x : download(p, n))
        if (!std::isfinite((float)x)) return false;
    return true;
}

// The chunked-form forward FLOPs of the delta rule (model_config.h's layer_cost without the conv's 24 w).
double gdn_counted_flops(const Shape& s) {
    const double C = std::min(64, s.T), hd = s.hd;
    return (double)s.N() * s.h * (6 * hd * hd + 10 * C * hd + 2.0 / 3.0 * C * C);
}

// One row: gdn forward / backward, attention forward / backward at the same shape, the ratio.
bool bench_row(int T, int hd, long tokens, int width, int reps) {
    const Shape s{(int)std::max(1L, tokens / T), T, std::max(1, width / hd), hd};
    Buffers b(s);
    const double gf = time_ms([&] { b.forward(); }, reps), gb = time_ms([&] { b.backward(); }, reps);
    bool ok = finite(b.o, (size_t)s.N() * s.w()) && finite(b.dqkv, (size_t)s.N() * 3 * s.w()) &&
              finite(b.dg, (size_t)s.N() * s.h);
    // attention at the same B, T, h, hd, on the same qkv and dout (into gdn's o and dqkv, then recomputed)
    const LayerSpec ls{s.w(), s.h};
    float *lse = device<float>((size_t)s.N() * s.h), *scratch = device<float>((size_t)s.N() * s.h);
    const float scale = 1.0f / std::sqrt((float)hd);
    const double af = time_ms([&] { attention_forward(b.o, lse, b.qkv, s.B, s.T, ls, scale, 0); }, reps);
    const double ab =
        time_ms([&] { attention_backward(b.dqkv, scratch, b.dout, b.qkv, b.o, lse, s.B, s.T, ls, scale, 0); }, reps);
    ok = finite(lse, (size_t)s.N() * s.h) && ok;
    cudaCheck(cudaFree(lse));
    cudaCheck(cudaFree(scratch));
    const double fl = gdn_counted_flops(s), att = 4.0 * s.B * s.h * (T * (double)T / 2) * hd;
    printf("%6d %4d %3d %3d %9.3f %9.3f %8.1f %9.3f %9.3f %8.1f %7.2fx%s\n", T, hd, s.B, s.h, gf, gb,
           3 * fl / (gf + gb) / 1e9, af, ab, 3.5 * att / (af + ab) / 1e9, (af + ab) / (gf + gb),
           ok ? "" : "  NON-FINITE output: FAILED");
    fflush(stdout);
    return ok;
}

// The inputs and outputs of one small shape, for gdn_fla.py (the layout in this file's header).
bool dump(const std::string& dir, const Shape& s) {
    Buffers b(s);
    b.forward();
    b.backward();
    cudaCheck(cudaDeviceSynchronize());
    const std::string path = dir + "/gdn_T" + std::to_string(s.T) + "_hd" + std::to_string(s.hd) + ".bin";
    FILE* f = fopen(path.c_str(), "wb");
    if (!f) {
        fprintf(stderr, "bench_gdn: error: cannot write %s (does --dump's folder exist?)\n", path.c_str());
        return false;
    }
    const long N = s.N();
    const int w = s.w(), hdr[4] = {s.B, s.T, s.h, s.hd};
    fwrite("PRISMGDN", 1, 8, f);
    fwrite(hdr, sizeof(int), 4, f);
    // one part of the (N, 3w) buffer, its rows packed to (N, w)
    auto part = [&](const bf16* p, long ld) {
        std::vector<bf16> all = download(p, (size_t)(N - 1) * ld + w), packed((size_t)N * w);
        for (long n = 0; n < N; n++)
            for (int i = 0; i < w; i++) packed[(size_t)n * w + i] = all[(size_t)n * ld + i];
        fwrite(packed.data(), sizeof(bf16), packed.size(), f);
    };
    auto floats = [&](const float* p) {
        const std::vector<float> v = download(p, (size_t)N * s.h);
        fwrite(v.data(), sizeof(float), v.size(), f);
    };
    for (int i = 0; i < 3; i++) part(b.qkv + i * w, 3L * w);
    floats(b.beta), floats(b.g);
    part(b.dout, w), part(b.o, w);
    for (int i = 0; i < 3; i++) part(b.dqkv + i * w, 3L * w);
    floats(b.dbeta), floats(b.dg);
    const bool ok = fclose(f) == 0;
    printf("dump: %s (B %d, T %d, h %d, hd %d)%s\n", path.c_str(), s.B, s.T, s.h, s.hd, ok ? "" : ": WRITE FAILED");
    return ok;
}

}  // namespace

int main(int argc, char** argv) {
#ifdef __CUDACC__
    std::string Ts = "1024,2048,4096,8192,16384", hds = "64,128,256", dir;
    long tokens = 16384;
    int width = 768, reps = 5;
#else  // the executor (make build/bench_gdn_cpu): one tiny shape, T not a multiple of the chunk
    std::string Ts = "130", hds = "64", dir;
    long tokens = 260;
    int width = 128, reps = 1;
#endif
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (i + 1 >= argc) {
            fprintf(stderr,
                    "usage: bench_gdn [--T 1024,2048,4096,8192,16384] [--hd 64,128,256] [--width 768] "
                    "[--tokens 16384] [--reps 5] [--dump DIR]\n");
            return 2;
        }
        const std::string v = argv[++i];
        if (a == "--T") Ts = v;
        else if (a == "--hd") hds = v;
        else if (a == "--tokens") tokens = int_list(v, "bench_gdn")[0];
        else if (a == "--width") width = int_list(v, "bench_gdn")[0];
        else if (a == "--reps") reps = int_list(v, "bench_gdn")[0];
        else if (a == "--dump") dir = v;
        else {
            fprintf(stderr, "bench_gdn: error: unknown flag %s (flags: --T --hd --width --tokens --reps --dump)\n",
                    a.c_str());
            return 2;
        }
    }
    const std::vector<int> T_list = int_list(Ts, "bench_gdn"), hd_list = int_list(hds, "bench_gdn");
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    printf(
        "device: %s; gdn = gdn_chunk_forward + gdn_chunk_backward (the delta rule alone), attention = "
        "attention.cuh's causal forward + backward; h = width %d / hd, B = %ld tokens / T\n",
        prop.name, width, tokens);
    printf("%6s %4s %3s %3s %9s %9s %8s %9s %9s %8s %8s\n", "T", "hd", "B", "h", "gdn fwd", "gdn bwd", "gdn TF/s",
           "att fwd", "att bwd", "att TF/s", "att/gdn");
    const MachineLoad load;
    bool ok = true;
    if (!dir.empty()) {  // first: small and quick, and gdn_fla.py needs them whatever the time limit cuts
        ok = dump(dir, Shape{2, 1000, 4, 64}) && ok;
        ok = dump(dir, Shape{1, 2048, 2, 128}) && ok;
    }
    for (int T : T_list)  // shortest first: a run cut short by its limit loses the longest
        for (int hd : hd_list) ok = bench_row(T, hd, tokens, width, reps) && ok;
    printf("%s\n", load.line().c_str());
    return ok ? 0 : 1;
}
