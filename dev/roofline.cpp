// dev/roofline.cpp: the CPU roofline of the fp32 reference (ref/), every figure a fraction of this machine's own
// limits, which the tool measures first:
//   FMA limit   10 independent FMA chains per thread in vector registers (AVX2's 8 floats, and the widest vector
//               the build targets when wider), on 1 and on all threads
//   bandwidth   a STREAM-style triad a = b + s c over arrays far beyond the caches (12 bytes per element)
// then the GFLOP/s of every GEMM of a training step (M = B T tokens; forward y = x W^T, dx = dy W, dW += dy^T x)
// and a table of one training step's ops: FLOPs, bytes moved (each input read once, each output written once),
// best time, and the fraction of the FMA limit and of the bandwidth reached.
// Build and run (the load average is printed beside the figures: a busy machine's figures are not the machine's):
//   make build/roofline CPU_ONLY=1
//   OMP_NUM_THREADS=2 ./build/roofline [B T d L h V]   (default 4 64 768 12 12 50257: 124M at B 4, T 64)
//   OMP_NUM_THREADS=2 ./build/roofline 8 128 128 6 4 50257   (tiny)
//   OMP_NUM_THREADS=1 ./build/roofline gdn [h hd]     the Gated DeltaNet rows alone (default 12 64: 124M's heads)
// On a busy machine the figures per CPU second are the fairer ones, and best at OMP_NUM_THREADS=1: with more
// threads than free cores every OpenMP barrier waits for a time slice (a small op then measures the scheduler),
// and the process CPU clock of a running team is only exact to a scheduler tick.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "ref/gdn.h"
#include "ref/reference.h"
#include "util/machine_load.h"

static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
// CPU seconds of this process (all threads) and of the calling thread. On a machine shared with other work, wall
// time counts the others' time slices; CPU time counts only ours (OpenMP threads spinning at a barrier count, so a
// figure per CPU second is a lower bound of the code's own efficiency).
static double cpu_now(clockid_t id = CLOCK_PROCESS_CPUTIME_ID) {
    timespec t;
    clock_gettime(id, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

// Best wall time and best CPU time (all threads) of f over repeats: at least `reps` runs and `min_s` seconds in
// all, after one warm-up.
struct Times {
    double wall = 1e30, cpu = 1e30;
};
static Times best_time(const std::function<void()>& f, int reps = 3, double min_s = 0.3) {
    f();
    Times best;
    double total = 0;
    for (int r = 0; r < reps || total < min_s; r++) {
        const double t0 = now(), c0 = cpu_now();
        f();
        const double t = now() - t0, c = cpu_now() - c0;
        best.wall = std::min(best.wall, t), best.cpu = std::min(best.cpu, c), total += t;
        if (r > 50) break;
    }
    return best;
}

// GFLOP/s of 10 independent FMA chains per thread on vectors V, on `threads` threads: over the wall time, and per
// CPU second of one thread (the rate while it runs, whatever else shares the machine).
typedef float F8 __attribute__((vector_size(32)));
typedef float F16 __attribute__((vector_size(64)));
template <typename V> static Times fma_limit(int threads) {
    constexpr int lanes = sizeof(V) / 4, chains = 10;
    const long iters = 40000000 / (lanes / 8);
    const double flops = 2.0 * iters * chains * lanes;
    Times best;
    for (int rep = 0; rep < 5; rep++) {
        const double t0 = now();
        double thread_cpu = 0;
#pragma omp parallel num_threads(threads) reduction(+ : thread_cpu)
        {
            const double c0 = cpu_now(CLOCK_THREAD_CPUTIME_ID);
            V a[chains], m = V{} + 0.9999999f, c = V{} + 1e-7f;
            for (int i = 0; i < chains; i++) a[i] = V{} + 1.0f + i * 1e-3f;
            asm volatile("" : "+x"(m), "+x"(c));
            for (long it = 0; it < iters; it++)
#pragma GCC unroll 10
                for (int i = 0; i < chains; i++) a[i] = a[i] * m + c;
            for (int i = 0; i < chains; i++) asm volatile("" : : "x"(a[i]));  // every lane of every chain is live
            thread_cpu = cpu_now(CLOCK_THREAD_CPUTIME_ID) - c0;
        }
        best.wall = std::min(best.wall, now() - t0), best.cpu = std::min(best.cpu, thread_cpu / threads);
    }
    return {threads * flops / best.wall / 1e9, flops / best.cpu / 1e9};  // (wall GFLOP/s, GFLOP/s per CPU second)
}

// Triad GB/s (12 bytes per element: two reads and one write) on `threads` threads: wall and per CPU second.
static Times stream_bandwidth(int threads) {
    const long n = 32L << 20;  // 128 MB per array
    std::vector<float> a(n), b(n), c(n);
#pragma omp parallel for num_threads(threads)
    for (long i = 0; i < n; i++) a[i] = 0, b[i] = 1, c[i] = 2;  // first touch by the thread that uses it
    const Times t = best_time(
        [&] {
            float *pa = a.data(), *pb = b.data(), *pc = c.data();
#pragma omp parallel for num_threads(threads) schedule(static)
            for (long i = 0; i < n; i++) pa[i] = pb[i] + 0.5f * pc[i];
        },
        5, 0.5);
    return {12.0 * n / t.wall / 1e9, 12.0 * n * threads / t.cpu / 1e9};
}

// The machine's limits on all threads: over wall time, and per CPU second times the thread count (what the
// threads reach while they run: the fair yardstick for a figure per CPU second on a shared machine).
struct Limits {
    double flops, bw, flops_cpu, bw_cpu;
};

static Limits measure_limits() {
    const int T = omp_get_max_threads();
    const Times f1 = fma_limit<F8>(1), fT = fma_limit<F8>(T);
    printf(
        "FMA limit, 8-float (AVX2) vectors, 10 chains/thread: %.1f GFLOP/s on 1 thread, %.1f on %d"
        " (per CPU second of a thread: %.1f, %.1f)\n",
        f1.wall, fT.wall, T, f1.cpu, fT.cpu);
    Limits lim{fT.wall, 0, fT.cpu * T, 0};
#ifdef __AVX512F__
    const Times w1 = fma_limit<F16>(1), wT = fma_limit<F16>(T);
    printf(
        "FMA limit, 16-float (AVX-512) vectors, 10 chains/thread: %.1f GFLOP/s on 1 thread, %.1f on %d"
        " (per CPU second of a thread: %.1f, %.1f)\n",
        w1.wall, wT.wall, T, w1.cpu, wT.cpu);
    lim.flops = std::max(lim.flops, wT.wall), lim.flops_cpu = std::max(lim.flops_cpu, wT.cpu * T);
#endif
    const Times b1 = stream_bandwidth(1), bT = stream_bandwidth(T);
    printf("stream triad bandwidth: %.1f GB/s on 1 thread, %.1f on %d (per CPU second: %.1f, %.1f)\n", b1.wall, bT.wall,
           T, b1.cpu, bT.cpu);
    lim.bw = bT.wall, lim.bw_cpu = bT.cpu;
    printf(
        "limits used below (%d threads): %.1f GFLOP/s and %.1f GB/s over wall time; %.1f GFLOP/s and %.1f GB/s "
        "while running (per CPU second x threads)\n",
        T, lim.flops, lim.bw, lim.flops_cpu, lim.bw_cpu);
    return lim;
}

// The three GEMMs of a linear layer (N tokens, in -> out), as ref/gemm.h's matmul_forward / matmul_backward make
// them, each timed alone.
static void gemm_rows(const char* name, long N, int in, int out, const Limits& lim) {
    std::vector<float> x(N * in), W((size_t)out * in), y(N * out), dx(N * in), dW((size_t)out * in);
    ref::Rng rng(1);
    for (float& v : x) v = (float)rng.normal();
    for (float& v : W) v = 0.02f * (float)rng.normal();
    for (float& v : y) v = (float)rng.normal();
    struct Row {
        const char* what;
        long M, Nn, K;
        std::function<void()> f;
    } rows[] = {
        {"fwd y=xW^T", N, out, in, [&] { ref::matmul_forward(y.data(), out, x.data(), in, W.data(), N, in, out); }},
        {"bwd dx=dyW", N, in, out,
         [&] { ref::gemm<float>(N, in, out, y.data(), out, 1, W.data(), in, 1, dx.data(), in, false); }},
        {"bwd dW+=dy^Tx", out, in, N,
         [&] { ref::gemm<float>(out, in, N, y.data(), 1, out, x.data(), in, 1, dW.data(), in, true); }},
    };
    const int T = omp_get_max_threads();
    for (const Row& r : rows) {
        const Times t = best_time(r.f);
        const double flops = 2.0 * r.M * r.Nn * r.K, gf = flops / t.wall / 1e9, gc = flops * T / t.cpu / 1e9;
        printf("  %-8s %-13s %6ld %6ld %6ld %9.3f %8.1f %6.1f%% %8.1f %6.1f%%\n", name, r.what, r.M, r.Nn, r.K,
               t.wall * 1e3, gf, 100 * gf / lim.flops, gc, 100 * gc / lim.flops_cpu);
    }
}

// One op of the step: its name, calls per step, the FLOPs and bytes of one call, and the call.
struct Op {
    const char* name;
    int count;
    std::pair<double, double> cost;  // FLOPs, bytes of one call
    std::function<void()> run;
};

// Each op timed (its best of 3), with its FLOPs, bytes and the fractions of the limits; returns the ops' FLOPs.
static double print_ops(const std::vector<Op>& ops, const Limits& lim) {
    const int threads = omp_get_max_threads();
    printf("one training step's ops (%% of the limits per CPU second x threads; bytes: operands once):\n");
    printf("  %-18s %5s %9s %9s %9s %9s %8s %7s %8s %7s\n", "op", "calls", "GFLOP", "MB", "ms", "cpu-ms", "GFLOP/s",
           "%FMA", "GB/s", "%BW");
    double tw = 0, tc = 0, tf = 0;
    for (const Op& op : ops) {
        const Times t = best_time(op.run, 3, 0.05);
        const double fl = op.cost.first * op.count, by = op.cost.second * op.count;
        const double wall = t.wall * op.count, cpu = t.cpu * op.count / threads;  // CPU seconds per thread
        tw += wall, tc += cpu, tf += fl;
        printf("  %-18s %5d %9.3f %9.1f %9.2f %9.2f %8.1f %6.1f%% %8.1f %6.1f%%\n", op.name, op.count, fl / 1e9,
               by / 1e6, wall * 1e3, cpu * 1e3, fl / cpu / 1e9, 100 * fl / cpu / 1e9 / lim.flops_cpu, by / cpu / 1e9,
               100 * by / cpu / 1e9 / lim.bw_cpu);
    }
    printf("  sum of the ops: %.1f ms (%.1f ms per CPU), %.2f GFLOP: %.1f%% of the FMA limit per CPU second\n",
           tw * 1e3, tc * 1e3, tf / 1e9, 100 * tf / tc / 1e9 / lim.flops_cpu);
    return tf;
}

// The real step (RefModel forward + backward, gradient norm, AdamW) timed whole, against the ops' FLOPs tf.
static void whole_step(const ModelConfig& cfg, int B, int T, const std::vector<int>& tokens,
                       const std::vector<int>& targets, double tf, const Limits& lim) {
    const int threads = omp_get_max_threads();
    const long N = (long)B * T;
    const OptimizerHyper hp;
    ref::RefModel<float> model(cfg);
    model.init_params(1337);
    ref::AdamWState<float> mst(model.layout.total);
    const Times s = best_time(
        [&] {
            model.zero_grad();
            model.forward(tokens.data(), targets.data(), B, T);
            model.backward();
            ref::clip_grad_norm(model.grads.data(), model.layout.total, 1.0);
            ref::adamw_step(model.params.data(), model.grads.data(), mst, model.layout, 1e-4, hp);
        },
        3, 1.0);
    printf(
        "the whole step (RefModel forward + backward + clip + AdamW): %.1f ms wall, %.1f ms per CPU; %.1f tok/s; "
        "%.2f GFLOP: %.1f GFLOP/s = %.1f%% of the FMA limit over wall time, %.1f%% per CPU second\n",
        s.wall * 1e3, s.cpu / threads * 1e3, N / s.wall, tf / 1e9, tf / s.wall / 1e9,
        100 * tf / s.wall / 1e9 / lim.flops, 100 * tf / s.cpu / 1e9 / lim.flops_cpu * threads);
}

// One training step's ops at this shape (a uniform model: every layer the same, so one layer's op is timed and
// counted L times), then the real step (RefModel forward + backward, gradient norm, AdamW) timed whole.
// FLOPs: 2 per multiply-add of the GEMMs and of attention's dot products; elementwise ops count their arithmetic
// roughly (an exp as one). Bytes: each operand read once and each result written once (a lower bound of the
// traffic), so % of bandwidth is what the op would reach if that were all it moved.
static void step_table(const ModelConfig& cfg, int B, int T, const Limits& lim) {
    const long N = (long)B * T;
    const int L = cfg.L(), d = cfg.d, D = cfg.D(), V = cfg.V, w = cfg.layers[0].width, hid = cfg.hidden_of(0);
    const ref::AttnShape as = ref::AttnShape::of(cfg.layers[0]);
    const long ld = as.ld();
    const float scale = 1.0f / std::sqrt((float)as.hd);
    ref::Rng rng(3);
    auto buf = [&](size_t n, float sd) {
        std::vector<float> v(n);
        for (float& x : v) x = sd * (float)rng.normal();
        return v;
    };
    std::vector<float> x = buf(N * D, 1), dx = buf(N * D, 1), ln = buf(N * w, 1), dln = buf(N * w, 1), mean(N),
                       rstd(N, 1.0f), g = buf(w, 1), bias = buf(w, 1), dg(w), db(w), qkv = buf(N * ld, 1),
                       dqkv = buf(N * ld, 1), att((size_t)B * as.h * T * T), atty = buf(N * w, 1),
                       datty = buf(N * w, 1), fc = buf(N * 2 * hid, 1), dfc(N * 2 * hid), sw = buf(N * hid, 1),
                       dsw = buf(N * hid, 1), branch = buf(N * w, 1), Wqkv = buf(ld * w, 0.02f), Wo = buf(w * w, 0.02f),
                       Wfc = buf(2 * hid * w, 0.02f), Wproj = buf(w * hid, 0.02f), Wout = buf((size_t)V * d, 0.02f),
                       dWqkv(ld * w), dWo(w * w), dWfc(2 * hid * w), dWproj(w * hid), dWout((size_t)V * d),
                       logits = buf(N * V, 1), probs(N * V), lse(N), losses(N);
    std::vector<int> tokens(N), targets(N);
    for (long i = 0; i < N; i++) tokens[i] = (int)(rng.next() % V), targets[i] = (int)(rng.next() % V);
    ref::attention_forward(atty.data(), att.data(), qkv.data(), B, T, as, scale);
    ref::softmax_crossentropy_forward(probs.data(), lse.data(), losses.data(), logits.data(), targets.data(), N, V);
    const ParamLayout layout = param_layout(cfg);
    const size_t P = layout.total;
    std::vector<float> params = buf(P, 0.02f), grads = buf(P, 1e-3f);
    ref::AdamWState<float> st(P);
    const OptimizerHyper hp;

    const double f = 4, pairs = 0.5 * T * (T + 1);  // bytes per float; query-key pairs per sequence (causal)
    auto gemm_fwd = [&](long in, long out) {
        return std::make_pair(2.0 * N * in * out, f * (N * in + in * out + N * out));
    };
    auto gemm_bwd = [&](long in, long out) {
        return std::make_pair(4.0 * N * in * out, f * (2 * N * out + 2 * N * in + 3 * in * out));
    };
    const NormType nt = cfg.norm;
    const std::vector<Op> ops = {
        {"embedding fwd",
         1,
         {0, f * 2 * N * D},
         [&] { ref::embedding_forward(x.data(), tokens.data(), Wout.data(), N, d, D); }},
        {"norm fwd",
         2 * L + 1,
         {8.0 * N * w, f * 2 * N * w},
         [&] {
             ref::norm_forward(nt, ln.data(), mean.data(), rstd.data(), x.data(), D, g.data(), bias.data(), N, w, 1e-5);
         }},
        {"qkv fwd", L, gemm_fwd(w, ld),
         [&] { ref::matmul_forward(qkv.data(), ld, ln.data(), w, Wqkv.data(), N, w, (int)ld); }},
        {"rope fwd",
         L,
         {3.0 * N * (w + as.kw()), f * 2 * N * (w + as.kw())},
         [&] { ref::rope_forward(qkv.data(), B, T, as, 10000.0); }},
        {"attention fwd",
         L,
         {4.0 * B * as.h * pairs * as.hd, f * (N * ld + N * w + (double)B * as.h * T * T)},
         [&] { ref::attention_forward(atty.data(), att.data(), qkv.data(), B, T, as, scale); }},
        {"attn-out fwd", L, gemm_fwd(w, w),
         [&] { ref::matmul_forward(branch.data(), w, atty.data(), w, Wo.data(), N, w, w); }},
        {"residual fwd",
         2 * L,
         {1.0 * N * w, f * 3 * N * w},
         [&] { ref::residual_forward(x.data(), D, branch.data(), N, w); }},
        {"fc fwd", L, gemm_fwd(w, 2 * hid),
         [&] { ref::matmul_forward(fc.data(), 2 * hid, ln.data(), w, Wfc.data(), N, w, 2 * hid); }},
        {"swiglu fwd", L, {5.0 * N * hid, f * 3 * N * hid}, [&] { ref::swiglu_forward(sw.data(), fc.data(), N, hid); }},
        {"proj fwd", L, gemm_fwd(hid, w),
         [&] { ref::matmul_forward(branch.data(), w, sw.data(), hid, Wproj.data(), N, hid, w); }},
        {"logits fwd", 1, gemm_fwd(d, V),
         [&] { ref::matmul_forward(logits.data(), V, ln.data(), w, Wout.data(), N, d, V); }},
        {"cross-entropy fwd",
         1,
         {4.0 * N * V, f * 2 * N * V},
         [&] {
             ref::softmax_crossentropy_forward(probs.data(), lse.data(), losses.data(), logits.data(), targets.data(),
                                               N, V);
         }},
        {"cross-entropy bwd",
         1,
         {1.0 * N * V, f * 2 * N * V},
         [&] { ref::softmax_crossentropy_backward(logits.data(), probs.data(), targets.data(), N, V, 1e-3f); }},
        {"logits bwd", 1, gemm_bwd(d, V),
         [&] {
             ref::matmul_backward(dln.data(), w, dWout.data(), logits.data(), V, ln.data(), w, Wout.data(), N, d, V);
         }},
        {"norm bwd",
         2 * L + 1,
         {16.0 * N * w, f * 4 * N * w},
         [&] {
             ref::norm_backward(nt, dx.data(), D, dg.data(), db.data(), dln.data(), x.data(), D, mean.data(),
                                rstd.data(), g.data(), N, w);
         }},
        {"residual bwd", 2 * L, {0, f * 2 * N * w}, [&] { ref::residual_backward(branch.data(), dx.data(), D, N, w); }},
        {"proj bwd", L, gemm_bwd(hid, w),
         [&] {
             ref::matmul_backward(dsw.data(), hid, dWproj.data(), branch.data(), w, sw.data(), hid, Wproj.data(), N,
                                  hid, w);
         }},
        {"swiglu bwd",
         L,
         {10.0 * N * hid, f * 5 * N * hid},
         [&] { ref::swiglu_backward(dfc.data(), dsw.data(), fc.data(), N, hid); }},
        {"fc bwd", L, gemm_bwd(w, 2 * hid),
         [&] {
             ref::matmul_backward(dln.data(), w, dWfc.data(), dfc.data(), 2 * hid, ln.data(), w, Wfc.data(), N, w,
                                  2 * hid);
         }},
        {"attn-out bwd", L, gemm_bwd(w, w),
         [&] {
             ref::matmul_backward(datty.data(), w, dWo.data(), branch.data(), w, atty.data(), w, Wo.data(), N, w, w);
         }},
        {"attention bwd",
         L,
         {8.0 * B * as.h * pairs * as.hd, f * (2 * N * ld + N * w + (double)B * as.h * T * T)},
         [&] { ref::attention_backward(dqkv.data(), datty.data(), qkv.data(), att.data(), B, T, as, scale); }},
        {"rope bwd",
         L,
         {3.0 * N * (w + as.kw()), f * 2 * N * (w + as.kw())},
         [&] { ref::rope_backward(dqkv.data(), B, T, as, 10000.0); }},
        {"qkv bwd", L, gemm_bwd(w, ld),
         [&] {
             ref::matmul_backward(dln.data(), w, dWqkv.data(), dqkv.data(), ld, ln.data(), w, Wqkv.data(), N, w,
                                  (int)ld);
         }},
        {"embedding bwd",
         1,
         {1.0 * N * d, f * 2 * N * d},
         [&] { ref::embedding_backward(dWout.data(), dx.data(), D, tokens.data(), N, d); }},
        {"zero grad", 1, {0, f * P}, [&] { std::fill(grads.begin() + 1, grads.end(), grads[0]); }},
        {"grad norm",
         1,
         {2.0 * P, f * P},
         [&] {
             volatile double n = ref::grad_norm(grads.data(), P);
             (void)n;
         }},
        {"adamw",
         1,
         {12.0 * P, f * 7 * P},
         [&] {
             ref::adamw_update(params.data(), grads.data(), st.m.data(), st.v.data(), 1, layout, {}, 0, P, 1e-4, hp);
         }},
    };
    whole_step(cfg, B, T, tokens, targets, print_ops(ops, lim), lim);
}

// The Gated DeltaNet mixer's core (ref/gdn.h's chunked delta rule, forward and backward) beside causal
// attention's (forward and backward), one sequence of T tokens, h heads of hd, at T 128, 256, 1024 and 4096; and
// the recurrent form's forward (the oracle) for scale. q and k unit per head, as the layer makes them.
// FLOPs as executed (2 per multiply-add): the chunked form's are counted as they run (ref::gdn_mm_flops: its
// products and forward substitution, the zero blocks of its triangles skipped; one untimed run before the timing),
// about these per token and head at C = 64 (the full squares, ref/gdn.h's header, in brackets):
//   chunked forward   6 hd^2 + 5.7 C hd + C^2 / 3   [6 hd^2 + 10 C hd + C^2 / 3]
//   chunked backward  16 hd^2 + 15.7 C hd + 2 C^2   [16 hd^2 + 28 C hd + 13 C^2 / 3] (the chunk's forward again
//                                                    from its state, without the state update and the output's
//                                                    tril(..) U, then its backward)
//   recurrent forward 8 hd^2                         attention: 4 (fwd) and 8 (bwd) hd per causal query-key pair
static void gdn_rows(int h, int hd, const Limits& lim) {
    const int threads = omp_get_max_threads(), w = h * hd;
    const ref::GdnShape sh{h, hd};
    printf("Gated DeltaNet core (chunked delta rule) against causal attention, B = 1, h = %d, hd = %d:\n", h, hd);
    printf("  %-22s %6s %9s %9s %9s %8s %7s\n", "op", "T", "GFLOP", "ms", "cpu-ms", "GFLOP/s", "%FMA");
    for (long T : {128L, 256L, 1024L, 4096L}) {
        ref::Rng rng(5);
        auto buf = [&](size_t n, double lo, double hi) {
            std::vector<float> v(n);
            for (float& x : v) x = (float)(lo + (hi - lo) * rng.uniform());
            return v;
        };
        std::vector<float> q = buf(T * w, -1, 1), k = buf(T * w, -1, 1), v = buf(T * w, -1, 1), beta = buf(T * h, 0, 1),
                           g = buf(T * h, -0.5, 0), o(T * w), dq(T * w), dk(T * w), dv(T * w), dbeta(T * h), dg(T * h),
                           dout = buf(T * w, -1, 1), states(h * ref::gdn_chunks(T) * hd * hd), inv(T * h),
                           qkv = buf(T * 3 * w, -1, 1), dqkv(T * 3 * w), att((size_t)h * T * T);
        ref::gdn_l2norm_forward(q.data(), w, inv.data(), q.data(), w, T, h, hd);
        ref::gdn_l2norm_forward(k.data(), w, inv.data(), k.data(), w, T, h, hd);
        const double pairs = 0.5 * T * (T + 1);
        const float scale = 1.0f / std::sqrt((float)hd);
        const ref::AttnShape as = ref::AttnShape::plain(w, h);
        struct Row {
            const char* name;
            double flops;
            std::function<void()> f;
        };
        std::vector<Row> rows = {
            {"gdn chunked fwd", 0,
             [&] {
                 ref::gdn_delta_chunk_forward(o.data(), w, states.data(), q.data(), k.data(), v.data(), w, beta.data(),
                                              g.data(), 1, T, sh);
             }},
            {"gdn chunked bwd", 0,
             [&] {
                 ref::gdn_delta_chunk_backward(dq.data(), dk.data(), dv.data(), w, dbeta.data(), dg.data(), dout.data(),
                                               w, states.data(), q.data(), k.data(), v.data(), w, beta.data(), g.data(),
                                               1, T, sh);
             }},
            {"gdn recurrent fwd", 8.0 * T * h * hd * hd,
             [&] {
                 ref::gdn_delta_recurrent_forward(o.data(), w, q.data(), k.data(), v.data(), w, beta.data(), g.data(),
                                                  1, T, sh);
             }},
        };
        // attention keeps h T^2 floats of probabilities: 0.8 GB at T 4096, h 12
        rows.push_back({"attention fwd", 4.0 * h * pairs * hd,
                        [&] { ref::attention_forward(o.data(), att.data(), qkv.data(), 1, T, as, scale); }});
        rows.push_back({"attention bwd", 8.0 * h * pairs * hd, [&] {
                            ref::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), 1, T, as, scale);
                        }});
        for (Row& r : rows) {
            if (r.flops == 0) {  // counted as it runs
                ref::gdn_mm_flops = 0;
                r.f();
                r.flops = (double)ref::gdn_mm_flops;
            }
            const Times t = best_time(r.f, 3, 0.1);
            const double gc = r.flops * threads / t.cpu / 1e9;
            printf("  %-22s %6ld %9.3f %9.2f %9.2f %8.1f %6.1f%%\n", r.name, T, r.flops / 1e9, t.wall * 1e3,
                   t.cpu / threads * 1e3, gc, 100 * gc / lim.flops_cpu);
        }
    }
}

int main(int argc, char** argv) {
    int B = 4, T = 64, d = 768, L = 12, h = 12, V = 50257;
    if (argc >= 2 && std::string(argv[1]) == "gdn") {
        const int gh = argc > 2 ? atoi(argv[2]) : 12, ghd = argc > 3 ? atoi(argv[3]) : 64;
        if (argc > 4 || gh <= 0 || ghd <= 0) {
            fprintf(stderr, "roofline: error: expected 'gdn [h hd]' with positive h and hd\n");
            return 2;
        }
        const MachineLoad load;
        printf("roofline gdn: h=%d hd=%d threads=%d\n", gh, ghd, omp_get_max_threads());
        gdn_rows(gh, ghd, measure_limits());
        printf("%s\n", load.line().c_str());
        return 0;
    }
    if (argc == 7)
        B = atoi(argv[1]), T = atoi(argv[2]), d = atoi(argv[3]), L = atoi(argv[4]), h = atoi(argv[5]),
        V = atoi(argv[6]);
    else if (argc != 1) {
        fprintf(stderr, "roofline: error: expected no arguments or six (B T d L h V), got %d\n", argc - 1);
        return 2;
    }
    if (B <= 0 || T <= 0 || d <= 0 || L <= 0 || h <= 0 || V <= 0 || d % h) {
        fprintf(stderr, "roofline: error: B T d L h V must be positive with h dividing d\n");
        return 2;
    }
    const MachineLoad load;
    printf("roofline: B=%d T=%d d=%d L=%d h=%d V=%d threads=%d\n", B, T, d, L, h, V, omp_get_max_threads());
    const Limits lim = measure_limits();

    ModelConfig cfg;
    cfg.d = d, cfg.V = V, cfg.T = T, cfg.h_base = h;
    cfg.layers.assign(L, LayerSpec{d, h});
    const long N = (long)B * T;
    const int hid = cfg.hidden_of(0), qkv = cfg.layers[0].qkv_rows();
    printf("GEMMs of one step (M = B T = %ld tokens); GFLOP/s over wall time, and per CPU second x threads:\n", N);
    printf("  %-8s %-13s %6s %6s %6s %9s %8s %7s %8s %7s\n", "layer", "product", "M", "N", "K", "ms", "GFLOP/s",
           "%limit", "cpu-rate", "%limit");
    gemm_rows("qkv", N, d, qkv, lim);
    gemm_rows("attn-out", N, d, d, lim);
    gemm_rows("fc", N, d, 2 * hid, lim);
    gemm_rows("proj", N, hid, d, lim);
    gemm_rows("logits", N, d, V, lim);
    step_table(cfg, B, T, lim);
    printf("%s\n", load.line().c_str());
    return 0;
}
