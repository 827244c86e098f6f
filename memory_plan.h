// memory_plan.h: the GPU memory the CUDA engine (model.cuh) will allocate for a model at micro-batch B x T,
// computed without a GPU, so `train_prism --plan -b 16` says before launching whether 757M fits, and the trainer
// turns on recomputation when the activations would not fit the GPU:
//   padded_vocab, device_layout   the device's parameter layout (V padded to Vp, tensors 256-byte aligned)
//   activation_bytes              the engine's activation block at B x T (with or without recomputation)
//   gpu_memory                    parameters (bf16), gradients (fp32), optimizer state (fp32 master, m, v),
//                                 activations, and the fixed extras (cuBLASLt workspace, RoPE tables)
//   choose_recompute              what the trainer does with a GPU's free memory
//   print_gpu_memory              the --plan lines
// activation_bytes mirrors CudaEngine::carve buffer for buffer, with the same Carver measuring (test_model_cuda.cpp
// checks that they agree for uniform, Prism, X and lambda models, with and without recomputation).
// Does not: include CUDA (train_prism --plan runs on machines without it), or count the CUDA context itself
// (~0.5 GiB, already taken when the free memory is read).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>

#include "schedule.h"

// The vocabulary padded for the GPU: a multiple of 128.
inline int padded_vocab(int V) { return (V + 127) / 128 * 128; }

// The device's parameter order: param_layout() of the config with V padded to Vp, so wte and lm_head get
// Vp - V extra rows and the head matmul and logits rows are aligned; and every tensor starts at a multiple of 128
// elements (256 bytes), because cuBLASLt's heuristic assumes 256-byte aligned operands unless told otherwise,
// and a width like 352 (an X schedule) would leave weights at 64-byte offsets.
inline ParamLayout device_layout(const ModelConfig& c) {
    ModelConfig p = c;
    p.V = padded_vocab(c.V);
    ParamLayout g = param_layout(p);
    std::map<size_t, size_t> moved;  // old offset -> new offset
    size_t total = 0;
    for (ParamTensor& t : g.tensors) {
        const size_t off = (total + 127) / 128 * 128;
        moved[t.offset] = off;
        t.offset = off;
        total = off + t.numel();
    }
    g.total = (total + 127) / 128 * 128;
    auto mv = [&](size_t& o) { if (o != SIZE_MAX) o = moved.at(o); };
    mv(g.wte), mv(g.lnf_w), mv(g.lnf_b), mv(g.lm_head);
    for (LayerOffsets& o : g.layer)
        mv(o.ln1_w), mv(o.ln1_b), mv(o.wqkv), mv(o.wo), mv(o.ln2_w), mv(o.ln2_b), mv(o.wfc), mv(o.wproj);
    return g;
}

// Carves typed, 256-byte aligned arrays out of one allocation (the engine's), or with base == nullptr only
// measures (the plan).
struct Carver {
    char* base = nullptr;
    size_t bytes = 0;
    template <class T> T* take(size_t n) {
        bytes = (bytes + 255) / 256 * 256;
        T* p = base ? reinterpret_cast<T*>(base + bytes) : nullptr;
        bytes += n * sizeof(T);
        return p;
    }
};

// The widths the activation block is sized by.
struct ActivationWidths {
    int wmax = 0, hmax = 0, hidmax = 0, big = 0, small = 0;  // big: max(3 w, 2 hid, Df); small: max(w, hid, d)
};
inline ActivationWidths activation_widths(const ModelConfig& c) {
    ActivationWidths a;
    a.big = c.Df(), a.small = c.d;
    for (int l = 0; l < c.L(); l++) {
        const int w = c.layers[l].width, hid = c.hidden_of(l);
        a.wmax = std::max(a.wmax, w), a.hmax = std::max(a.hmax, c.layers[l].heads), a.hidmax = std::max(a.hidmax, hid);
        a.big = std::max({a.big, 3 * w, 2 * hid}), a.small = std::max({a.small, w, hid});
    }
    return a;
}

// fp32 floats of norm-backward scratch (layernorm.cuh's norm_backward_scratch_floats, 64 rows per chunk).
inline size_t norm_scratch_floats(long N, int w) { return 2 * (size_t)((N + 63) / 64) * w; }

// Positions per block of the embedding backward (embedding.cuh's EMB_SEGMENT, checked where the engine carves):
// its fp32 partial rows, fewer than 2 N / EMBEDDING_SEGMENT of d floats.
constexpr int EMBEDDING_SEGMENT = 32;
inline size_t embedding_partial_floats(long N, int d) {
    return (size_t)((2 * N + EMBEDDING_SEGMENT - 1) / EMBEDDING_SEGMENT) * d;
}

// CudaEngine::carve at B x T, measured: the same arrays in the same order.
inline size_t activation_bytes(const ModelConfig& c, int B, int T, bool recompute) {
    const long N = (long)B * T;
    const int L = c.L(), D = c.D(), Df = c.Df(), Vp = padded_vocab(c.V);
    const ActivationWidths a = activation_widths(c);
    using bf16_bytes = uint16_t;
    Carver b;
    for (int s = 0; s < 2; s++) b.take<int>(8 * N + 2);  // the two upload slots (tokens, targets, embedding plan)
    b.take<bf16_bytes>((size_t)(2 * L + 1) * N * D);      // residual states
    if (recompute) b.take<bf16_bytes>(N * a.wmax), b.take<bf16_bytes>(N * a.hidmax);
    for (int l = 0; l < L; l++) {
        const int w = c.layers[l].width, h = c.layers[l].heads, hid = c.hidden_of(l);
        b.take<bf16_bytes>(N * 3 * w), b.take<bf16_bytes>(N * w), b.take<bf16_bytes>(N * 2 * hid);  // qkv, atty, fc
        if (!recompute)  // ln1, ln2, sw
            b.take<bf16_bytes>(N * w), b.take<bf16_bytes>(N * w), b.take<bf16_bytes>(N * hid);
        for (int k = 0; k < 4; k++) b.take<float>(N);  // mean1, rstd1, mean2, rstd2
        b.take<float>(N * h);                          // attention lse
    }
    b.take<bf16_bytes>(N * a.wmax), b.take<bf16_bytes>(N * Df), b.take<bf16_bytes>(N * Vp);  // branch, lnf, logits
    for (int k = 0; k < 4; k++) b.take<float>(N);                                          // meanf, rstdf, lse, losses
    b.take<bf16_bytes>(N * D), b.take<bf16_bytes>(N * a.big), b.take<bf16_bytes>(N * a.small);  // dresid, dbig, dsmall
    b.take<float>(norm_scratch_floats(N, std::max(a.wmax, Df)));
    b.take<float>(N * a.hmax);  // attention backward scratch
    b.take<float>(N);           // target_logprobs output
    b.take<float>(embedding_partial_floats(N, c.d));  // embedding backward's partial rows
    return b.bytes;
}

struct GpuMemory {
    size_t params = 0, grads = 0, optimizer = 0, activations = 0, fixed = 0;
    size_t total() const { return params + grads + optimizer + activations + fixed; }
};

// shards: the ranks ZeRO-1 splits the optimizer state over (model.cuh keeps master, m and v of one shard, of
// ceil(Pg / shards) elements rounded up to 128; parameters and gradients stay whole, padded to shards x that).
inline GpuMemory gpu_memory(const ModelConfig& c, int B, int T, bool recompute, int shards = 1) {
    const size_t Pg = device_layout(c).total, S = ((Pg + shards - 1) / shards + 127) / 128 * 128;
    const size_t Palloc = shards == 1 ? Pg : S * shards;
    GpuMemory m;
    m.params = Palloc * 2, m.grads = Palloc * 4, m.optimizer = 3 * (shards == 1 ? Pg : S) * 4;
    m.activations = activation_bytes(c, B, T, recompute);
    m.fixed = (size_t)32 << 20;  // cuBLASLt workspace
    for (const LayerSpec& s : c.layers) m.fixed += (size_t)c.T * s.head_dim() * 4;  // RoPE tables (an upper bound)
    return m;
}

// With `free` bytes of GPU memory: keep every activation (0), recompute norm and SwiGLU outputs (1), or neither
// fits (-1). A 3% margin covers the allocator's rounding and fragmentation.
inline int choose_recompute(const ModelConfig& c, int B, int T, size_t free, int shards = 1) {
    const double usable = 0.97 * (double)free;
    if ((double)gpu_memory(c, B, T, false, shards).total() <= usable) return 0;
    if ((double)gpu_memory(c, B, T, true, shards).total() <= usable) return 1;
    return -1;
}

inline double gib(size_t bytes) { return (double)bytes / (1u << 30); }

// The --plan lines: what a GPU run at B x T needs, with and without --recompute, against 80 and 141 GiB.
inline void print_gpu_memory(FILE* f, const ModelConfig& c, int B, int T) {
    const GpuMemory m = gpu_memory(c, B, T, false), r = gpu_memory(c, B, T, true);
    fprintf(f, "\nGPU memory at B %d x T %d (CUDA engine): parameters %.2f GiB (bf16) + gradients %.2f GiB (fp32) + "
               "optimizer %.2f GiB (fp32 master, m, v) + activations %.2f GiB + workspace %.2f GiB = %.2f GiB\n",
            B, T, gib(m.params), gib(m.grads), gib(m.optimizer), gib(m.activations), gib(m.fixed), gib(m.total()));
    fprintf(f, "  with --recompute: activations %.2f GiB, total %.2f GiB\n", gib(r.activations), gib(r.total()));
    for (auto [name, gibs] : {std::pair<const char*, double>{"80 GiB (H100, A100 80GB)", 80.0},
                              {"141 GiB (H200)", 141.0}}) {
        const double cap = gibs * (1u << 30) * 0.97;  // the margin choose_recompute keeps
        const char* verdict = (double)m.total() <= cap   ? "fits"
                              : (double)r.total() <= cap ? "fits with --recompute (chosen automatically)"
                                                         : "does not fit: lower -b";
        fprintf(f, "  %s: %s\n", name, verdict);
    }
}
