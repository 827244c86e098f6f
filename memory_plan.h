// memory_plan.h: the GPU memory the CUDA engine (cuda_engine.cuh) will allocate for a model at micro-batch B x T,
// computed without a GPU, so `train_prism --plan -b 16` says before launching whether 757M fits, and the trainer
// turns on recomputation when the activations would not fit the GPU:
//   padded_vocab, device_layout   the device's parameter layout (V padded to Vp, tensors 256-byte aligned)
//   carve_activations             the activation block's layout at B x T (the engine carves with it)
//   activation_bytes              its bytes (with or without recomputation)
//   gpu_memory                    parameters (bf16), gradients (fp32), optimizer state (fp32 master, m, v),
//                                 activations, and the fixed extras (cuBLASLt workspace, RoPE tables)
//   choose_recompute              what the trainer does with a GPU's free memory
//   print_gpu_memory              the --plan lines
// The activation block's layout is carve_activations here, which the engine carves its memory with: one layout.
// Does not: include CUDA (train_prism --plan runs on machines without it), or count the CUDA context itself
// (~0.5 GiB, already taken when the free memory is read).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>

#include "adamw_ranges.h"
#include "kernel_sizes.h"
#include "model_config.h"

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
    auto mv = [&](size_t& o) {
        if (o != SIZE_MAX) o = moved.at(o);
    };
    mv(g.wte), mv(g.lnf_w), mv(g.lnf_b), mv(g.lm_head);
    for (LayerOffsets& o : g.layer) o.each(mv);
    return g;
}

// Carves typed arrays, each `align`-byte aligned (256 by default), out of one allocation (the engine's), or with
// base == nullptr only measures (the plan).
struct Carver {
    char* base = nullptr;
    size_t bytes = 0;
    size_t align = 256;
    template <class T> T* take(size_t n) {
        bytes = (bytes + align - 1) / align * align;
        T* p = base ? reinterpret_cast<T*>(base + bytes) : nullptr;
        bytes += n * sizeof(T);
        return p;
    }
};

// The widths the activation block is sized by, over the sub-blocks the layers have (qkv: w + 2 kv_l head_dim rows,
// 3 w without KV groups).
struct ActivationWidths {
    int wmax = 0, hmax = 0, hidmax = 0, big = 0, small = 0;  // big: max(qkv, 2 hid, Df); small: max(w, hid, d)
    int gdn_w = 0, gdn_h = 0;  // the widest gdn layer's width, its most heads (0, 0: no gdn layer)
};
inline ActivationWidths activation_widths(const ModelConfig& c) {
    ActivationWidths a;
    a.big = c.Df(), a.small = c.d;
    for (int l = 0; l < c.L(); l++) {
        const LayerSpec& s = c.layers[l];
        const int w = s.width, hid = c.hidden_of(l), qkv = s.attention ? s.qkv_rows() : 0;
        a.wmax = std::max(a.wmax, w), a.hidmax = std::max(a.hidmax, hid);
        if (s.softmax()) a.hmax = std::max(a.hmax, s.heads);
        if (s.gdn()) a.gdn_w = std::max(a.gdn_w, w), a.gdn_h = std::max(a.gdn_h, s.heads);
        a.big = std::max({a.big, qkv, 2 * hid}), a.small = std::max({a.small, w, hid});
    }
    return a;
}

// The residual states the model keeps: the one before every sub-block a layer has (attention, MLP) and the one
// after the last (2 L + 1 when every layer has both). A missing sub-block is the identity on the stream, so it
// adds no state: the next sub-block (or the final norm) reads the state the previous one wrote.
inline int residual_states(const ModelConfig& c) {
    int n = 1;
    for (const LayerSpec& s : c.layers) n += (int)s.attention + (int)s.mlp;
    return n;
}

// One upload of a micro-batch of N rows (an upload slot, and its pinned staging): tokens (N), targets (N), then
// the embedding backward's plan (embedding_plan.h's embedding_plan): positions (N), seg_start (N + 1), seg_row (N),
// seg_slot (N), fin_row (N), fin_first (N + 1). Packed (4-byte aligned): the plan, positions onwards, is one copy.
struct UploadSlot {
    int *tokens, *targets, *positions, *seg_start, *seg_row, *seg_slot, *fin_row, *fin_first;
};
// Lays a slot out from base (nullptr: only measures) and returns its ints.
inline size_t carve_upload(long N, int* base, UploadSlot& u) {
    Carver k{reinterpret_cast<char*>(base), 0, sizeof(int)};
    u.tokens = k.take<int>(N), u.targets = k.take<int>(N), u.positions = k.take<int>(N);
    u.seg_start = k.take<int>(N + 1), u.seg_row = k.take<int>(N), u.seg_slot = k.take<int>(N);
    u.fin_row = k.take<int>(N), u.fin_first = k.take<int>(N + 1);
    return k.bytes / sizeof(int);
}
inline size_t upload_ints(long N) {
    UploadSlot measured;
    return carve_upload(N, nullptr, measured);
}

// The CUDA engine's activation block at B x T (N = B T rows; w, h, hid of layer l, qkv = w + 2 kv_l head_dim): the
// one layout, carved by the engine (Half = bf16) and measured by the plan (Half = a 2-byte stand-in, base ==
// nullptr). A layer without attention has no ln1, qkv, atty, mean1, rstd1, lse; one without an MLP no ln2, fc, sw,
// mean2, rstd2 (null pointers, no bytes).
// A gdn layer (model.cuh's sub_forward, docs/model.md's steps; hd = w / h, nc = ceil(T / 64) chunks) keeps ln1,
// mean1, rstd1 and, in place of attention's qkv, atty and lse: p = ln1 Wqkv^T (N, 3w); qkv = u, the conv's SiLU
// with q and k L2-normalised (N, 3w), and gr their inverse norms (N, 2h) fp32; ba (N, 2h); beta, g (N, h) fp32;
// o the delta rule's output (N, w) and states its chunks' starting states (B, h, nc, hd, hd) fp32; z (N, w); rn the
// gated norm's inverse rms (N, h) fp32; atty = y, the gated norm's output (N, w). p, qkv and gr have GDN_TAIL_ROWS
// more rows in front of row 0 (the pointers point past them): the decoder puts its conv tail there and convolves
// the tail with the new rows in one pass; training never reads them.
constexpr int GDN_TAIL_ROWS = 3;  // the conv's kernel 4 reads 3 inputs before a row
template <class Half> struct LayerActivations {
    Half *ln1, *qkv, *atty, *ln2, *fc, *sw;  // (N, w) (N, qkv) (N, w) (N, w) (N, 2 hid) (N, hid)
    float *mean1, *rstd1, *mean2, *rstd2;    // (N) each
    float* lse;                              // (B, h, T) attention log-sum-exp
    Half *p, *ba, *o, *z;                    // a gdn layer's (above)
    float *gr, *beta, *g, *rn, *states;      // a gdn layer's (above)
};
template <class Half> struct Activations {
    int* upload[2];  // upload_ints(N) each: the two upload slots
    Half* resid;     // (residual_states, N, D)
    std::vector<LayerActivations<Half>> layer;
    Half *branch, *lnf, *logits;          // (N, wmax) (N, Df) (N, Vp)
    float *meanf, *rstdf, *lse, *losses;  // (N) each
    Half *dresid, *dbig, *dsmall;         // (N, D) (N, max(qkv, 2 hid, Df)) (N, max(w, hid, d))
    float *norm_scratch, *att_scratch;    // norm_backward_scratch_floats(N, max width), (B, h_max, T)
    float* logprobs;                      // (N) target_logprobs' output
    float* emb_partial;                   // (embedding_partial_rows(N), d): the embedding backward's partials
    // The gdn layers' backward (shared by them; none without a gdn layer), wg, hg the widest gdn layer's w and h:
    // gdn_du (N, 3 wg) the delta rule's input gradients, gdn_do (N, wg) its output's, gdn_dba (N, 2 hg), gdn_dbeta
    // and gdn_dg (N, hg) fp32; gdn_scratch: the largest scratch a gdn kernel asks for (gdn_scratch_floats).
    Half *gdn_du, *gdn_do, *gdn_dba;
    float *gdn_dbeta, *gdn_dg, *gdn_scratch;
};

// The fp32 scratch the gdn kernels of a B x T micro-batch ask for, at its largest over the gdn layers: gdn.cuh's
// conv, gates and gated-norm backwards, gdn_chunk.cuh's forward and gdn_chunk_bwd.cuh's backward (one at a time,
// so one buffer).
inline size_t gdn_scratch_floats(const ModelConfig& c, int B, int T) {
    const long N = (long)B * T;
    size_t f = 0;
    for (const LayerSpec& s : c.layers)
        if (s.gdn())
            f = std::max<size_t>({f, (size_t)gdn_conv_scratch_floats(B, T, 3 * s.width),
                                  (size_t)gdn_gates_scratch_floats(N, s.heads),
                                  (size_t)gdn_norm_scratch_floats(N, s.head_dim()),
                                  (gdn_chunk_forward_scratch_bytes(B, T, s.heads, s.head_dim()) + 3) / 4,
                                  (gdn_chunk_backward_scratch_bytes(B, T, s.heads, s.head_dim()) + 3) / 4});
    return f;
}
// Lays the block out from base (nullptr: only measures; the pointers are then null) and returns its bytes. With
// recompute, ln1, ln2 (every layer's) share one (N, wmax) buffer and sw one (N, hidmax) buffer.
template <class Half>
size_t carve_activations(const ModelConfig& c, int B, int T, bool recompute, char* base, Activations<Half>& a) {
    static_assert(sizeof(Half) == 2, "activations are 16-bit");
    const long N = (long)B * T;
    const int L = c.L(), D = c.D(), Df = c.Df(), Vp = padded_vocab(c.V);
    const ActivationWidths wd = activation_widths(c);
    Carver k{base, 0};
    a.upload[0] = k.take<int>(upload_ints(N)), a.upload[1] = k.take<int>(upload_ints(N));
    a.resid = k.take<Half>((size_t)residual_states(c) * N * D);
    a.layer.resize(L);
    Half* shared_ln = recompute ? k.take<Half>(N * wd.wmax) : nullptr;
    Half* shared_sw = recompute ? k.take<Half>(N * wd.hidmax) : nullptr;
    for (int l = 0; l < L; l++) {
        const LayerSpec& s = c.layers[l];
        const int w = s.width, hid = c.hidden_of(l);
        LayerActivations<Half>& la = a.layer[l];
        la = LayerActivations<Half>{};
        if (s.attention) {
            if (s.softmax()) la.qkv = k.take<Half>(N * s.qkv_rows());
            la.atty = k.take<Half>(N * w);
            la.ln1 = recompute ? shared_ln : k.take<Half>(N * w);
            la.mean1 = k.take<float>(N), la.rstd1 = k.take<float>(N);
            if (s.softmax()) la.lse = k.take<float>(N * s.heads);
        }
        if (s.gdn()) {  // qkv is u; atty is y
            const int h = s.heads, hd = s.head_dim(), tail = GDN_TAIL_ROWS;
            const long nc = (T + 63) / 64;
            la.p = k.take<Half>((N + tail) * 3 * w) + (base ? tail * 3 * w : 0);
            la.qkv = k.take<Half>((N + tail) * 3 * w) + (base ? tail * 3 * w : 0);
            la.gr = k.take<float>((N + tail) * 2 * h) + (base ? tail * 2 * h : 0);
            la.ba = k.take<Half>(N * 2 * h), la.beta = k.take<float>(N * h), la.g = k.take<float>(N * h);
            la.o = k.take<Half>(N * w), la.states = k.take<float>((size_t)B * h * nc * hd * hd);
            la.z = k.take<Half>(N * w), la.rn = k.take<float>(N * h);
        }
        if (s.mlp) {
            la.fc = k.take<Half>(N * 2 * hid);
            la.ln2 = recompute ? shared_ln : k.take<Half>(N * w);
            la.sw = recompute ? shared_sw : k.take<Half>(N * hid);
            la.mean2 = k.take<float>(N), la.rstd2 = k.take<float>(N);
        }
    }
    a.branch = k.take<Half>(N * wd.wmax), a.lnf = k.take<Half>(N * Df), a.logits = k.take<Half>(N * Vp);
    a.meanf = k.take<float>(N), a.rstdf = k.take<float>(N), a.lse = k.take<float>(N), a.losses = k.take<float>(N);
    a.dresid = k.take<Half>(N * D), a.dbig = k.take<Half>(N * wd.big), a.dsmall = k.take<Half>(N * wd.small);
    a.norm_scratch = k.take<float>(norm_backward_scratch_floats(N, std::max(wd.wmax, Df)));
    a.att_scratch = k.take<float>(N * wd.hmax);
    a.logprobs = k.take<float>(N);
    a.emb_partial = k.take<float>((size_t)embedding_partial_rows(N) * c.d);
    a.gdn_du = a.gdn_do = a.gdn_dba = nullptr, a.gdn_dbeta = a.gdn_dg = a.gdn_scratch = nullptr;
    if (wd.gdn_w > 0) {
        a.gdn_du = k.take<Half>(N * 3 * wd.gdn_w), a.gdn_do = k.take<Half>(N * wd.gdn_w);
        a.gdn_dba = k.take<Half>(N * 2 * wd.gdn_h);
        a.gdn_dbeta = k.take<float>(N * wd.gdn_h), a.gdn_dg = k.take<float>(N * wd.gdn_h);
        a.gdn_scratch = k.take<float>(gdn_scratch_floats(c, B, T));
    }
    return k.bytes;
}

// The activation block's bytes at B x T.
inline size_t activation_bytes(const ModelConfig& c, int B, int T, bool recompute) {
    Activations<uint16_t> measured;
    return carve_activations(c, B, T, recompute, nullptr, measured);
}

struct GpuMemory {
    size_t params = 0, grads = 0, optimizer = 0, activations = 0, fixed = 0;
    size_t total() const { return params + grads + optimizer + activations + fixed; }
};

// shards: the ranks ZeRO-1 splits the optimizer state over (the engine keeps master, m and v of one shard,
// adamw_ranges.h's zero_shard; parameters and gradients stay whole, padded to shards x its size).
inline GpuMemory gpu_memory(const ModelConfig& c, int B, int T, bool recompute, int shards = 1) {
    const size_t Pg = device_layout(c).total, S = zero_shard(Pg, shards, 0).size;
    const size_t Palloc = shards == 1 ? Pg : S * shards;
    GpuMemory m;
    m.params = Palloc * 2, m.grads = Palloc * 4, m.optimizer = 3 * (shards == 1 ? Pg : S) * 4;
    m.activations = activation_bytes(c, B, T, recompute);
    m.fixed = (size_t)32 << 20;          // cuBLASLt workspace
    for (const LayerSpec& s : c.layers)  // RoPE tables (an upper bound: one per distinct head_dim)
        if (s.attention) m.fixed += (size_t)c.T * s.head_dim() * 4;
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
    fprintf(f,
            "\nGPU memory at B %d x T %d (CUDA engine): parameters %.2f GiB (bf16) + gradients %.2f GiB (fp32) + "
            "optimizer %.2f GiB (fp32 master, m, v) + activations %.2f GiB + workspace %.2f GiB = %.2f GiB\n",
            B, T, gib(m.params), gib(m.grads), gib(m.optimizer), gib(m.activations), gib(m.fixed), gib(m.total()));
    fprintf(f, "  with --recompute: activations %.2f GiB, total %.2f GiB\n", gib(r.activations), gib(r.total()));
    for (auto [name, gibs] :
         {std::pair<const char*, double>{"80 GiB (H100, A100 80GB)", 80.0}, {"141 GiB (H200)", 141.0}}) {
        const double cap = gibs * (1u << 30) * 0.97;  // the margin choose_recompute keeps
        const char* verdict = (double)m.total() <= cap   ? "fits"
                              : (double)r.total() <= cap ? "fits with --recompute (chosen automatically)"
                                                         : "does not fit: lower -b";
        fprintf(f, "  %s: %s\n", name, verdict);
    }
}
