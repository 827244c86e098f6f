// model.cuh: the GPU model. CudaEngine implements engine.h's Engine with the bf16 kernels of this directory, so
// the training loop and the evaluator drive it exactly like the CPU reference (CpuEngine, cpu_engine.h). From
// the reference it takes only the init (ref_init.h: both engines start from the same weights); engines.h is
// where the two engines meet. The kernels take sizes and pointers; everything that reads the ModelConfig
// (layout, ranges, norm type) is here.
//
// Memory, one allocation each (pointers carved out of them, see the structs below):
//   params   (Pg) bf16    the weights the kernels read, rounded from the fp32 master copy after every update
//   grads    (Pg) bf16    accumulated over micro-batches (+=, matmul beta = 1), zeroed by zero_grad()
//   opt      (3 Pg) fp32  master weights, AdamW m, AdamW v
//   acts     sized for the largest B * T seen: the residual state before every sub-block (2 L + 1, N, D),
//            per-layer norm outputs and statistics, qkv, attention output and lse, SwiGLU input and output,
//            final norm, logits (N, Vp), and the backward's scratch (residual-state gradient, branch and norm
//            scratch)
//   tables   RoPE (cos, sin) per distinct head_dim, (T, head_dim) fp32 each
// Pg counts the device layout (device_layout()): param_layout() of the config with V padded to Vp (a multiple
// of 128), so wte and lm_head get Vp - V extra rows and the head matmul and logits rows are aligned; and every
// tensor starts at a multiple of 128 elements (256 bytes), because cuBLASLt's heuristic assumes 256-byte aligned
// operands unless told otherwise, and a width like 352 (an X schedule) would leave weights at 64-byte offsets.
// Padded rows and gaps start at zero and get zero gradient (the classifier writes 0 into padded dlogits, the
// embedding never indexes them), so they stay zero. Across the Engine interface (get/set_params, optimizer
// state, checkpoints) everything is fp32 in the unpadded param_layout order.
//
// Forward (N = B T rows; w, h, hid of layer l; x0, x1, x2 = resid(2 l), resid(2 l + 1), resid(2 l + 2) the
// residual states around layer l; every residual add fused with the norm that follows it):
//   x0 = embed(tokens); ln1 = norm(x0[:, :w_0])
//   per layer: qkv = ln1 Wqkv^T; rope; atty = attn(qkv); branch = atty Wo^T; x1 = x0 + branch, ln2 = norm(x1)
//              fc = ln2 Wfc^T; sw = swiglu(fc); branch = sw Wproj^T; x2 = x1 + branch, then the next layer's ln1
//              (or the final norm over [0, Df))
//   logits (N, Vp) = head_in Wout^T, head_in = lnf[:, :d] (copy_columns when Df > d); lse and per-position
//   losses; mean loss on the host in double
// Backward mirrors reference.h's RefModel::backward op for op (same buffers, same accumulation conventions).
// Deterministic: no atomics in any kernel, fixed reduction orders, so a run repeats bit for bit on one GPU.
// Recomputation (CudaEngine(cfg, true)): the norm outputs ln1, ln2 and the SwiGLU output sw are not kept per
// layer but written into two shared buffers in the forward and recomputed in the backward just before the
// weight gradient that reads them (one norm or swiglu pass each, ~1/3 less activation memory per layer). The
// recomputing kernels read the same bf16 inputs with the same code, so the gradients are bit-identical to the
// stored path (tested).
// Does not (yet): overlap anything on streams, or use more than one GPU.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "adamw.cuh"
#include "attention.cuh"
#include "classifier.cuh"
#include "cuda_common.cuh"
#include "embedding.cuh"
#include "engine.h"
#include "forward_contract.h"
#include "gradnorm.cuh"
#include "layernorm.cuh"
#include "matmul.cuh"
#include "mfu.h"
#include "ref_init.h"
#include "residual.cuh"
#include "rope.cuh"
#include "schedule.h"
#include "swiglu.cuh"

// The vocabulary padded for the GPU: a multiple of 128.
inline int padded_vocab(int V) { return (V + 127) / 128 * 128; }

// The AdamW launch ranges of a layout (adamw.cuh): consecutive tensors of the same kind (decayed matrices, or
// undecayed norm weights and biases) merged into one range, so one launch updates each (about 4 per layer).
// Gaps between tensors (the 128-element alignment of device_layout) are left out: they stay zero.
inline std::vector<AdamWRange> adamw_ranges(const ParamLayout& layout) {
    std::vector<AdamWRange> r;
    for (const ParamTensor& t : layout.tensors) {
        if (!r.empty() && r.back().decay == t.is_matrix && r.back().offset + r.back().n == t.offset)
            r.back().n += t.numel();
        else
            r.push_back({t.offset, t.numel(), t.is_matrix});
    }
    return r;
}

// Carves typed, 256-byte aligned arrays out of one allocation. With base == nullptr it only measures.
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

class CudaEngine : public Engine {
  public:
    explicit CudaEngine(const ModelConfig& c, bool recompute = false)
        : cfg_(c), layout_(param_layout(c)), Vp_(padded_vocab(c.V)), glayout_(device_layout(c)),
          rms_(c.norm == NormType::RMSNorm), recompute_(recompute) {
        validate_config(c);
        Pg_ = glayout_.total;
        cudaCheck(cudaMalloc(&params_, Pg_ * sizeof(bf16)));
        cudaCheck(cudaMalloc(&grads_, Pg_ * sizeof(bf16)));
        cudaCheck(cudaMalloc(&opt_, 3 * Pg_ * sizeof(float)));
        master_ = opt_, m_ = opt_ + Pg_, v_ = opt_ + 2 * Pg_;
        cudaCheck(cudaMemset(opt_, 0, 3 * Pg_ * sizeof(float)));
        cudaCheck(cudaMemset(params_, 0, Pg_ * sizeof(bf16)));
        cudaCheck(cudaMemset(grads_, 0, Pg_ * sizeof(bf16)));
        ranges_ = adamw_ranges(glayout_);
        // RoPE tables, one per distinct head_dim
        std::vector<int> hds;
        for (const LayerSpec& s : cfg_.layers)
            if (std::find(hds.begin(), hds.end(), s.head_dim()) == hds.end()) hds.push_back(s.head_dim());
        size_t total = 0;
        for (int hd : hds) total += (size_t)cfg_.T * hd;
        cudaCheck(cudaMalloc(&tables_, total * sizeof(float)));
        size_t off = 0;
        for (int hd : hds) {
            std::vector<float> t = rope_table(cfg_.T, hd, cfg_.rope_theta);
            cudaCheck(cudaMemcpy(tables_ + off, t.data(), t.size() * sizeof(float), cudaMemcpyHostToDevice));
            table_of_[hd] = tables_ + off;
            off += t.size();
        }
    }
    ~CudaEngine() override {
        cudaFree(params_), cudaFree(grads_), cudaFree(opt_), cudaFree(tables_), cudaFree(acts_mem_);
    }
    CudaEngine(const CudaEngine&) = delete;
    CudaEngine& operator=(const CudaEngine&) = delete;

    std::string describe() const override {
        cudaDeviceProp p;
        cudaCheck(cudaGetDeviceProperties(&p, 0));
        return std::string("CUDA (bf16 weights and activations, fp32 master weights) on ") + p.name;
    }
    double peak_flops() const override {
        cudaDeviceProp p;
        cudaCheck(cudaGetDeviceProperties(&p, 0));
        return peak_bf16_tflops(p.name) * 1e12;
    }
    const ModelConfig& config() const override { return cfg_; }
    size_t num_params() const override { return layout_.total; }

    void init_params(uint64_t seed) override {
        std::vector<float> p(layout_.total);
        ref::init_params(p.data(), cfg_, layout_, seed);  // the reference's init: CPU and GPU runs start alike
        set_params(p.data());
    }
    void get_params(float* out) const override { download_unpadded(master_, out); }
    void set_params(const float* in) override {
        std::vector<float> g = to_padded(in);
        cudaCheck(cudaMemcpy(master_, g.data(), Pg_ * sizeof(float), cudaMemcpyHostToDevice));
        std::vector<bf16> b(g.begin(), g.end());
        cudaCheck(cudaMemcpy(params_, b.data(), Pg_ * sizeof(bf16), cudaMemcpyHostToDevice));
    }

    float forward(const int* inputs, const int* targets, int B, int T) override;
    void backward(float grad_scale) override;
    void zero_grad() override {
        cudaCheck(cudaMemset(grads_, 0, Pg_ * sizeof(bf16)));
        clip_scale_ = 1.0f;
    }
    // The clip factor is not applied here but folded into the next adamw_step (one pass fewer over grads).
    double clip_grad_norm(double max_norm) override {
        grad_norm_squared(a_.norm_out, grads_, Pg_, a_.norm_partial, 0);
        double sq = 0;
        cudaCheck(cudaMemcpy(&sq, a_.norm_out, sizeof(double), cudaMemcpyDeviceToHost));
        const double norm = std::sqrt(sq);
        clip_scale_ = max_norm > 0 && norm > max_norm ? (float)(max_norm / norm) : 1.0f;
        return norm;
    }
    void adamw_step(double lr, const OptimizerHyper& hp) override {
        t_++;
        ::adamw_step(params_, master_, m_, v_, grads_, ranges_, t_, lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay,
                     clip_scale_, 0);
        clip_scale_ = 1.0f;
    }
    void get_optimizer(std::vector<float>& m, std::vector<float>& v, long& t) const override {
        m.resize(layout_.total), v.resize(layout_.total);
        download_unpadded(m_, m.data());
        download_unpadded(v_, v.data());
        t = t_;
    }
    void set_optimizer(const std::vector<float>& m, const std::vector<float>& v, long t) override {
        std::vector<float> gm = to_padded(m.data()), gv = to_padded(v.data());
        cudaCheck(cudaMemcpy(m_, gm.data(), Pg_ * sizeof(float), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(v_, gv.data(), Pg_ * sizeof(float), cudaMemcpyHostToDevice));
        t_ = t;
    }
    void target_logprobs(const int* targets, float* out) const override {
        const long N = (long)B_ * T_;
        cudaCheck(cudaMemcpy(a_.scratch_targets, targets, N * sizeof(int), cudaMemcpyHostToDevice));
        ::target_logprobs(a_.scratch_f, a_.logits, a_.lse, a_.scratch_targets, N, Vp_, 0);
        cudaCheck(cudaMemcpy(out, a_.scratch_f, N * sizeof(float), cudaMemcpyDeviceToHost));
    }
    void logits_at(int b, int t, float* out) const override {
        std::vector<bf16> row(cfg_.V);
        cudaCheck(cudaMemcpy(row.data(), a_.logits + ((size_t)b * T_ + t) * Vp_, cfg_.V * sizeof(bf16),
                             cudaMemcpyDeviceToHost));
        for (int v = 0; v < cfg_.V; v++) out[v] = row[v];
    }

    // The device's parameter order (see the top): V padded to Vp, every tensor 256-byte aligned.
    static ParamLayout device_layout(const ModelConfig& c) {
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
    // Bytes of the activation block for the last forward's B x T.
    size_t activation_bytes() const {
        Acts scratch;
        return carve(nullptr, B_, T_, scratch);
    }
    // For tests: the gradients (fp32, unpadded param_layout order) after backward.
    void get_grads(float* out) const {
        std::vector<bf16> g(Pg_);
        cudaCheck(cudaMemcpy(g.data(), grads_, Pg_ * sizeof(bf16), cudaMemcpyDeviceToHost));
        std::vector<float> f(g.begin(), g.end());
        from_padded(f.data(), out);
    }

  private:
    struct LayerActs {
        bf16 *ln1, *qkv, *atty, *ln2, *fc, *sw;  // (N, w) (N, 3 w) (N, w) (N, w) (N, 2 hid) (N, hid)
        float *mean1, *rstd1, *mean2, *rstd2;    // (N) each
        float* lse;                              // (B, h, T) attention log-sum-exp
    };
    struct Acts {
        int *tokens, *targets, *scratch_targets;  // (N)
        int *rows, *starts, *positions;           // embedding buckets: (N) (N + 1) (N)
        bf16* resid;                              // (2 L + 1, N, D) the residual states, see resid(k)
        std::vector<LayerActs> layer;
        bf16 *branch, *lnf, *head_in, *logits;    // (N, wmax) (N, Df) (N, d) or lnf itself, (N, Vp)
        float *meanf, *rstdf, *lse, *losses;      // (N) each
        bf16 *dresid, *dbranch, *dbig, *dsmall;   // (N, D) (N, wmax) (N, max(3 w, 2 hid, Df)) (N, max(w, hid, d))
        float *norm_scratch, *att_scratch;        // norm_backward_scratch_floats(N, max width), (B, h_max, T)
        float *norm_partial, *scratch_f;          // GRADNORM_BLOCKS, (N)
        double* norm_out;                         // (1)
    };

    ModelConfig cfg_;
    ParamLayout layout_;  // the interface's (unpadded) order
    int Vp_;
    ParamLayout glayout_;  // the device's order: the same tensors with V padded to Vp
    size_t Pg_ = 0;
    bool rms_ = false;  // RMSNorm (else LayerNorm), as the norm kernels take it
    bool recompute_ = false;
    bf16 *params_ = nullptr, *grads_ = nullptr;
    float *opt_ = nullptr, *master_ = nullptr, *m_ = nullptr, *v_ = nullptr, *tables_ = nullptr;
    std::map<int, float*> table_of_;
    std::vector<AdamWRange> ranges_;
    char* acts_mem_ = nullptr;
    long acts_N_ = 0;  // rows the activation block holds (B T of the largest forward so far)
    int acts_B_ = 0, acts_T_ = 0;
    Acts a_{};
    int B_ = 0, T_ = 0, U_ = 0;
    long n_targets_ = 0;
    BackwardGate gate_;  // backward() once per forward() with targets
    long t_ = 0;
    float clip_scale_ = 1.0f;

    // Interface (unpadded) <-> device (padded) order: tensor i of one is tensor i of the other, the first
    // rows * cols elements of each device tensor are the interface tensor (rows past V are the padding).
    std::vector<float> to_padded(const float* in) const {
        std::vector<float> g(Pg_, 0.0f);
        for (size_t i = 0; i < layout_.tensors.size(); i++)
            std::copy_n(in + layout_.tensors[i].offset, layout_.tensors[i].numel(),
                        g.begin() + glayout_.tensors[i].offset);
        return g;
    }
    void from_padded(const float* g, float* out) const {
        for (size_t i = 0; i < layout_.tensors.size(); i++)
            std::copy_n(g + glayout_.tensors[i].offset, layout_.tensors[i].numel(), out + layout_.tensors[i].offset);
    }
    void download_unpadded(const float* dev, float* out) const {
        std::vector<float> g(Pg_);
        cudaCheck(cudaMemcpy(g.data(), dev, Pg_ * sizeof(float), cudaMemcpyDeviceToHost));
        from_padded(g.data(), out);
    }
    bf16* P(size_t off) const { return off == SIZE_MAX ? nullptr : params_ + off; }
    bf16* G(size_t off) const { return off == SIZE_MAX ? nullptr : grads_ + off; }
    size_t Wout() const { return cfg_.tied ? glayout_.wte : glayout_.lm_head; }
    float attn_scale(int l) const {
        const double hd = cfg_.layers[l].head_dim();
        return (float)(cfg_.mup_attn ? 1.0 / hd : 1.0 / std::sqrt(hd));
    }
    // Residual state k (N, D): 2 l before layer l's attention, 2 l + 1 before its MLP, 2 L after the last layer.
    bf16* resid(int k) const { return a_.resid + (size_t)k * B_ * T_ * cfg_.D(); }

    // Lays out the activations for B x T into a (base == nullptr: only measures, a gets null pointers).
    size_t carve(char* base, int B, int T, Acts& a) const {
        const long N = (long)B * T;
        const int L = cfg_.L(), D = cfg_.D(), Df = cfg_.Df(), d = cfg_.d;
        int wmax = 0, hmax = 0, big = Df, small = d;
        for (int l = 0; l < L; l++) {
            const int w = cfg_.layers[l].width, hid = cfg_.hidden_of(l);
            wmax = std::max(wmax, w), hmax = std::max(hmax, cfg_.layers[l].heads);
            big = std::max({big, 3 * w, 2 * hid}), small = std::max({small, w, hid});
        }
        Carver c{base, 0};
        a.tokens = c.take<int>(N), a.targets = c.take<int>(N), a.scratch_targets = c.take<int>(N);
        a.rows = c.take<int>(N), a.starts = c.take<int>(N + 1), a.positions = c.take<int>(N);
        a.resid = c.take<bf16>((size_t)(2 * L + 1) * N * D);
        a.layer.resize(L);
        int hidmax = 0;
        for (int l = 0; l < L; l++) hidmax = std::max(hidmax, cfg_.hidden_of(l));
        bf16* shared_ln = recompute_ ? c.take<bf16>(N * wmax) : nullptr;    // (N, wmax): ln1 and ln2 of every layer
        bf16* shared_sw = recompute_ ? c.take<bf16>(N * hidmax) : nullptr;  // (N, hidmax)
        for (int l = 0; l < L; l++) {
            const int w = cfg_.layers[l].width, h = cfg_.layers[l].heads, hid = cfg_.hidden_of(l);
            LayerActs& la = a.layer[l];
            la.qkv = c.take<bf16>(N * 3 * w), la.atty = c.take<bf16>(N * w), la.fc = c.take<bf16>(N * 2 * hid);
            la.ln1 = recompute_ ? shared_ln : c.take<bf16>(N * w);
            la.ln2 = recompute_ ? shared_ln : c.take<bf16>(N * w);
            la.sw = recompute_ ? shared_sw : c.take<bf16>(N * hid);
            la.mean1 = c.take<float>(N), la.rstd1 = c.take<float>(N), la.mean2 = c.take<float>(N);
            la.rstd2 = c.take<float>(N), la.lse = c.take<float>(N * h);
        }
        a.branch = c.take<bf16>(N * wmax), a.lnf = c.take<bf16>(N * Df);
        a.head_in = Df == d ? a.lnf : c.take<bf16>(N * d);
        a.logits = c.take<bf16>(N * Vp_);
        a.meanf = c.take<float>(N), a.rstdf = c.take<float>(N), a.lse = c.take<float>(N), a.losses = c.take<float>(N);
        a.dresid = c.take<bf16>(N * D), a.dbranch = c.take<bf16>(N * wmax), a.dbig = c.take<bf16>(N * big);
        a.dsmall = c.take<bf16>(N * small);
        a.norm_scratch = c.take<float>(norm_backward_scratch_floats(N, std::max(wmax, Df)));
        a.att_scratch = c.take<float>(N * hmax);
        a.norm_partial = c.take<float>(GRADNORM_BLOCKS), a.scratch_f = c.take<float>(N);
        a.norm_out = c.take<double>(1);
        return c.bytes;
    }
    void ensure_acts(int B, int T) {
        if (B == acts_B_ && T == acts_T_) return;
        // Rows are carved per (B, T) (the residual states are indexed with N = B T), so re-carve on any change;
        // the allocation only grows.
        const long N = (long)B * T;
        Acts measured;
        const size_t bytes = carve(nullptr, B, T, measured);
        if (N > acts_N_ || !acts_mem_) {
            cudaFree(acts_mem_);
            cudaCheck(cudaMalloc(&acts_mem_, bytes));
            acts_N_ = N;
        }
        carve(acts_mem_, B, T, a_);
        acts_B_ = B, acts_T_ = T;
    }
};

inline float CudaEngine::forward(const int* inputs, const int* targets, int B, int T) {
    validate_forward_inputs(cfg_, inputs, targets, B, T);
    const long N = (long)B * T;
    const int L = cfg_.L(), D = cfg_.D(), Df = cfg_.Df(), d = cfg_.d, V = cfg_.V;
    ensure_acts(B, T);
    B_ = B, T_ = T;
    gate_.forward_ran(targets != nullptr);
    const float eps = (float)cfg_.norm_eps;
    cudaCheck(cudaMemcpy(a_.tokens, inputs, N * sizeof(int), cudaMemcpyHostToDevice));
    n_targets_ = 0;
    if (targets) {
        cudaCheck(cudaMemcpy(a_.targets, targets, N * sizeof(int), cudaMemcpyHostToDevice));
        for (long n = 0; n < N; n++) n_targets_ += targets[n] >= 0;
        EmbeddingBuckets e = embedding_buckets(inputs, N);  // for the backward, built while the GPU works
        U_ = (int)e.rows.size();
        cudaCheck(cudaMemcpy(a_.rows, e.rows.data(), U_ * sizeof(int), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(a_.starts, e.starts.data(), (U_ + 1) * sizeof(int), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(a_.positions, e.positions.data(), N * sizeof(int), cudaMemcpyHostToDevice));
    }

    embedding_forward(resid(0), a_.tokens, P(glayout_.wte), N, d, D, 0);
    {
        const LayerOffsets& o = glayout_.layer[0];
        norm_forward(rms_, a_.layer[0].ln1, a_.layer[0].mean1, a_.layer[0].rstd1, resid(0), D, P(o.ln1_w),
                     P(o.ln1_b), N, cfg_.layers[0].width, eps, 0);
    }
    for (int l = 0; l < L; l++) {
        const int w = cfg_.layers[l].width, h = cfg_.layers[l].heads, hid = cfg_.hidden_of(l);
        const LayerOffsets& o = glayout_.layer[l];
        LayerActs& a = a_.layer[l];
        const bf16* none = nullptr;
        matmul(a.qkv, a.ln1, P(o.wqkv), none, (int)N, 3 * w, w, false, true, 0.0f, 0);
        rope_forward(a.qkv, table_of_.at(w / h), B, T, w, h, 0);
        attention_forward(a.atty, a.lse, a.qkv, B, T, w, h, attn_scale(l), 0);
        matmul(a_.branch, a.atty, P(o.wo), none, (int)N, w, w, false, true, 0.0f, 0);
        residual_norm_forward(rms_, resid(2 * l + 1), resid(2 * l), a_.branch, D, w, a.ln2, a.mean2, a.rstd2,
                              P(o.ln2_w), P(o.ln2_b), N, w, eps, 0);
        matmul(a.fc, a.ln2, P(o.wfc), none, (int)N, 2 * hid, w, false, true, 0.0f, 0);
        swiglu_forward(a.sw, a.fc, N, hid, 0);
        matmul(a_.branch, a.sw, P(o.wproj), none, (int)N, w, hid, false, true, 0.0f, 0);
        if (l + 1 < L) {
            const LayerOffsets& on = glayout_.layer[l + 1];
            LayerActs& an = a_.layer[l + 1];
            residual_norm_forward(rms_, resid(2 * l + 2), resid(2 * l + 1), a_.branch, D, w, an.ln1, an.mean1,
                                  an.rstd1, P(on.ln1_w), P(on.ln1_b), N, cfg_.layers[l + 1].width, eps, 0);
        } else {
            residual_norm_forward(rms_, resid(2 * l + 2), resid(2 * l + 1), a_.branch, D, w, a_.lnf, a_.meanf,
                                  a_.rstdf, P(glayout_.lnf_w), P(glayout_.lnf_b), N, Df, eps, 0);
        }
    }
    // The head reads [0, d) of the final norm: a compact copy when the final norm is wider (Df > d).
    if (Df != d) copy_columns(a_.head_in, d, a_.lnf, Df, N, d, 0);
    const bf16* none = nullptr;
    matmul(a_.logits, a_.head_in, P(Wout()), none, (int)N, Vp_, d, false, true, 0.0f, 0);
    softmax_crossentropy_forward(a_.losses, a_.lse, a_.logits, targets ? a_.targets : nullptr, N, V, Vp_, 0);
    if (!targets) return 0.0f;
    std::vector<float> losses(N);
    cudaCheck(cudaMemcpy(losses.data(), a_.losses, N * sizeof(float), cudaMemcpyDeviceToHost));
    double sum = 0;  // as ref::mean_loss: serial, in double
    for (long n = 0; n < N; n++)
        if (targets[n] >= 0) sum += losses[n];
    return n_targets_ ? (float)(sum / n_targets_) : 0.0f;
}

inline void CudaEngine::backward(float grad_scale) {
    gate_.backward_starts();
    if (n_targets_ == 0) return;  // every target masked: the loss is the constant 0
    const long N = (long)B_ * T_;
    const int L = cfg_.L(), D = cfg_.D(), Df = cfg_.Df(), d = cfg_.d, V = cfg_.V;
    const bf16* none = nullptr;
    const float dloss = grad_scale / (float)n_targets_, eps = (float)cfg_.norm_eps;

    // head: dlogits in place; dlnf (N, Df) with columns [d, Df) zero (the head never reads them)
    softmax_crossentropy_backward(a_.logits, a_.lse, a_.targets, N, V, Vp_, dloss, 0);
    bf16* dlnf = a_.dbig;
    bf16* dhead = Df == d ? dlnf : a_.dsmall;  // (N, d)
    matmul(dhead, a_.logits, P(Wout()), none, (int)N, d, Vp_, false, false, 0.0f, 0);
    matmul(G(Wout()), a_.logits, a_.head_in, none, Vp_, d, (int)N, true, false, 1.0f, 0);
    if (Df != d) {  // dlnf = [dhead | 0]: zero it, then copy dhead into the leading d columns
        cudaCheck(cudaMemset(dlnf, 0, (size_t)N * Df * sizeof(bf16)));
        copy_columns(dlnf, Df, dhead, d, N, d, 0);
    }
    // The residual-state gradient accumulates from both consumers of every residual state, so it starts at zero.
    cudaCheck(cudaMemset(a_.dresid, 0, (size_t)N * D * sizeof(bf16)));
    norm_backward(rms_, a_.dresid, D, G(glayout_.lnf_w), G(glayout_.lnf_b), dlnf, resid(2 * L), D, a_.meanf,
                  a_.rstdf, P(glayout_.lnf_w), N, Df, a_.norm_scratch, 0);

    for (int l = L - 1; l >= 0; l--) {
        const int w = cfg_.layers[l].width, h = cfg_.layers[l].heads, hid = cfg_.hidden_of(l);
        const LayerOffsets& o = glayout_.layer[l];
        LayerActs& a = a_.layer[l];
        // MLP sub-block, mirrored
        residual_backward(a_.dbranch, a_.dresid, D, N, w, 0);
        bf16* dsw = a_.dsmall;  // (N, hid)
        matmul(dsw, a_.dbranch, P(o.wproj), none, (int)N, hid, w, false, false, 0.0f, 0);
        if (recompute_) swiglu_forward(a.sw, a.fc, N, hid, 0);
        matmul(G(o.wproj), a_.dbranch, a.sw, none, w, hid, (int)N, true, false, 1.0f, 0);
        bf16* dfc = a_.dbig;  // (N, 2 hid)
        swiglu_backward(dfc, dsw, a.fc, N, hid, 0);
        bf16* dln = a_.dsmall;  // (N, w); dsw is dead
        matmul(dln, dfc, P(o.wfc), none, (int)N, w, 2 * hid, false, false, 0.0f, 0);
        if (recompute_)
            norm_forward(rms_, a.ln2, a.mean2, a.rstd2, resid(2 * l + 1), D, P(o.ln2_w), P(o.ln2_b), N, w, eps, 0);
        matmul(G(o.wfc), dfc, a.ln2, none, 2 * hid, w, (int)N, true, false, 1.0f, 0);
        norm_backward(rms_, a_.dresid, D, G(o.ln2_w), G(o.ln2_b), dln, resid(2 * l + 1), D, a.mean2, a.rstd2,
                      P(o.ln2_w), N, w, a_.norm_scratch, 0);
        // attention sub-block, mirrored
        residual_backward(a_.dbranch, a_.dresid, D, N, w, 0);
        bf16* datty = a_.dsmall;  // (N, w)
        matmul(datty, a_.dbranch, P(o.wo), none, (int)N, w, w, false, false, 0.0f, 0);
        matmul(G(o.wo), a_.dbranch, a.atty, none, w, w, (int)N, true, false, 1.0f, 0);
        bf16* dqkv = a_.dbig;  // (N, 3 w)
        attention_backward(dqkv, a_.att_scratch, datty, a.qkv, a.atty, a.lse, B_, T_, w, h, attn_scale(l), 0);
        rope_backward(dqkv, table_of_.at(w / h), B_, T_, w, h, 0);
        dln = a_.dsmall;  // datty is dead
        matmul(dln, dqkv, P(o.wqkv), none, (int)N, w, 3 * w, false, false, 0.0f, 0);
        if (recompute_)
            norm_forward(rms_, a.ln1, a.mean1, a.rstd1, resid(2 * l), D, P(o.ln1_w), P(o.ln1_b), N, w, eps, 0);
        matmul(G(o.wqkv), dqkv, a.ln1, none, 3 * w, w, (int)N, true, false, 1.0f, 0);
        norm_backward(rms_, a_.dresid, D, G(o.ln1_w), G(o.ln1_b), dln, resid(2 * l), D, a.mean1, a.rstd1,
                      P(o.ln1_w), N, w, a_.norm_scratch, 0);
    }
    embedding_backward(G(glayout_.wte), a_.dresid, D, a_.rows, a_.starts, a_.positions, U_, d, 0);
}
