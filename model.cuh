// model.cuh: the GPU model. CudaEngine implements engine.h's Engine with the bf16 kernels of this directory, so
// the training loop and the evaluator drive it exactly like the CPU reference (CpuEngine, cpu_engine.h). From
// the reference it takes only the init (ref_init.h: both engines start from the same weights); engines.h is
// where the two engines meet. The kernels take sizes and pointers; everything that reads the ModelConfig
// (layout, ranges, norm type) is here.
//
// Memory, one allocation each (pointers carved out of them, see the structs below; memory_plan.h computes the
// sizes without a GPU, for --plan):
//   params   (Pg) bf16    the weights the kernels read, rounded from the fp32 master copy after every update
//   grads    (Pg) fp32    accumulated over micro-batches (+=, weight-gradient matmuls with fp32 C/D and
//                         beta = 1), zeroed by zero_grad(); one flat buffer in the device layout, so it can be
//                         reduced per layer and sharded as a whole
//   opt      (3 Pg) fp32  master weights, AdamW m, AdamW v
//   acts     sized for the largest B * T seen: two upload slots (tokens, targets, embedding buckets), the
//            residual state before every sub-block (2 L + 1, N, D), per-layer norm outputs and statistics, qkv,
//            attention output and lse, SwiGLU input and output, final norm, logits (N, Vp), and the
//            backward's scratch (residual-state gradient, branch and norm scratch)
//   small    the step's results on the device (loss sum, squared gradient norm), norm partials, AdamW ranges
//   tables   RoPE (cos, sin) per distinct head_dim, (T, head_dim) fp32 each
// Pg counts the device layout (memory_plan.h's device_layout): V padded to Vp, every tensor 256-byte aligned.
// Padded rows and gaps start at zero and get zero gradient (the classifier writes 0 into padded dlogits, the
// embedding never indexes them), so they stay zero. Across the Engine interface (get/set_params, optimizer
// state, checkpoints) everything is fp32 in the unpadded param_layout order.
//
// Streams: all compute is queued on one created stream; uploads go on a second, so the next micro-batch's tokens
// cross PCIe while this one computes. An upload is staged in pinned host memory (staging.cuh) and lands in one
// of two device slots, used by alternate micro-steps; events order the two streams (the copy waits until the
// micro-step before last is done with its slot, the compute waits for the copy). Nothing in a training step
// waits on the host except read_stats: the per-position losses are summed on the device, the gradient norm
// and the clip factor stay there, and the embedding's buckets are built on the host after the micro-batch's
// forward is queued (the GPU is busy meanwhile) and uploaded before its backward needs them.
//
// Forward (N = B T rows; w, h, hid of layer l; x0, x1, x2 = resid(2 l), resid(2 l + 1), resid(2 l + 2) the
// residual states around layer l; every residual add fused with the norm that follows it):
//   x0 = embed(tokens); ln1 = norm(x0[:, :w_0])
//   per layer: qkv = ln1 Wqkv^T; rope; atty = attn(qkv); branch = atty Wo^T; x1 = x0 + branch, ln2 = norm(x1)
//              fc = ln2 Wfc^T; sw = swiglu(fc); branch = sw Wproj^T; x2 = x1 + branch, then the next layer's ln1
//              (or the final norm over [0, Df))
//   logits (N, Vp) = lnf[:, :d] Wout^T (the matmul reads the leading d columns in place); then either the
//   fused classifier (training: losses, and dlogits written over the logits) or the plain one (inference:
//   losses and lse, logits kept); the losses summed into the device's loss sum.
// Backward mirrors reference.h's RefModel::backward op for op (same buffers, same accumulation conventions);
// each branch's gradient is the residual-state gradient's leading w columns, read in place by the matmuls.
// Deterministic: no atomics in any kernel, fixed reduction orders, so a run repeats bit for bit on one GPU.
// Recomputation (CudaEngine(cfg, true), train_prism --recompute): the norm outputs ln1, ln2 and the SwiGLU output
// sw are not kept per layer but written into two shared buffers in the forward and recomputed in the backward
// just before the weight gradient that reads them (one norm or swiglu pass each, ~1/3 less activation memory
// per layer). The recomputing kernels read the same bf16 inputs with the same code, so the gradients are
// bit-identical to the stored path (tested).
// Profiling (dev/bench_model): an OpTimer, when set, is called after every op of a step with the op's name, the
// names cost_model.h uses, so measured times line up with the roofline model.
// Data parallelism (CudaEngine(cfg, recompute, dp) with several ranks, engine.h): the gradients are summed over
// the ranks in fp32 over NCCL (comm.cuh). The step's last micro-step reduces them layer by layer as its backward
// completes each bucket (the head, then layer L-1 down to layer 0, then the embedding; each a contiguous range of
// the device vector), on a communication stream that waits for the compute stream with an event: bucket l's
// reduction runs while the compute stream computes the layers below it. clip_grad_norm (without it, adamw_step)
// makes the compute stream wait for the last of them. ZeRO-0 all-reduces each bucket and every rank updates
// everything. ZeRO-1 cuts the device vector into equal contiguous shards (shard.h: padded to world x S, S a multiple of 128), reduces each
// piece of a bucket to the rank whose shard holds it, computes the norm of its own shard (the squared norms
// all-reduced), runs AdamW on its shard only, with master weights, m and v kept for that shard alone (1 / world
// of the optimizer memory; the AdamW ranges carry the shard offset), and all-gathers the bf16 parameters in
// place. The shard seen through the interface (optimizer_range, get/set_optimizer) is the interface-order image
// of the device shard, so checkpoints do not depend on the device layout; get_params gathers the master shards
// through the gradient buffer (dead between steps) and is a collective.
// Does not: overlap the all-gather of the parameters with the next forward, or reduce in bf16.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "adamw.cuh"
#include "attention.cuh"
#include "classifier.cuh"
#include "comm.cuh"
#include "cuda_common.cuh"
#include "embedding.cuh"
#include "engine.h"
#include "forward_contract.h"
#include "gradnorm.cuh"
#include "layernorm.cuh"
#include "matmul.cuh"
#include "memory_plan.h"
#include "mfu.h"
#include "ref_init.h"
#include "rope.cuh"
#include "schedule.h"
#include "shard.h"
#include "staging.cuh"
#include "swiglu.cuh"

// The AdamW launch ranges of a layout (adamw.cuh): consecutive tensors of the same kind (decayed matrices, or
// undecayed norm weights and biases) merged into one range (about 4 per layer, one launch for all).
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

// Called after each op of a step (see the top). `op` is one of cost_model.h's names.
struct OpTimer {
    virtual ~OpTimer() = default;
    virtual void mark(const char* op, cudaStream_t stream) = 0;
};

// The ranges' parts inside [begin, end), for a ZeRO-1 shard: master, m and v hold that interval from index 0.
inline std::vector<AdamWRange> shard_ranges(const std::vector<AdamWRange>& all, size_t begin, size_t end) {
    std::vector<AdamWRange> r;
    for (const AdamWRange& x : all) {
        const size_t a = std::max(begin, x.offset), b = std::min(end, x.offset + x.n);
        if (a < b) r.push_back({a, b - a, x.decay, a - begin});
    }
    return r;
}

class CudaEngine : public Engine {
  public:
    explicit CudaEngine(const ModelConfig& c, bool recompute = false, const DataParallel& dp = DataParallel());
    ~CudaEngine() override;
    CudaEngine(const CudaEngine&) = delete;
    CudaEngine& operator=(const CudaEngine&) = delete;

    std::string describe() const override {
        return std::string("CUDA (bf16 weights and activations, fp32 gradients and master weights") +
               (recompute_ ? ", recomputing norm and SwiGLU outputs" : "") + ") on " + device_name();
    }
    double peak_flops() const override { return peak_bf16_tflops(device_name()) * 1e12; }
    const ModelConfig& config() const override { return cfg_; }
    size_t num_params() const override { return layout_.total; }

    void init_params(uint64_t seed) override {
        std::vector<float> p(layout_.total);
        ref::init_params(p.data(), cfg_, layout_, seed);  // the reference's init: CPU and GPU runs start alike
        set_params(p.data());
    }
    void get_params(float* out) const override {
        if (!sharded()) return download_unpadded(master_, out);
        // ZeRO-1: every rank's master shard into its place in the gradient buffer (dead between steps), gathered.
        cudaCheck(cudaMemcpyAsync(grads_ + shard_.offset, master_, shard_.size * sizeof(float),
                                  cudaMemcpyDeviceToDevice, compute_));
        comm_all_gather(comm_, grads_, shard_.size, compute_);
        Watchdog::Wait w("the all-gather of the master weights");
        download_unpadded(grads_, out);
    }
    void set_params(const float* in) override {
        std::vector<float> g = to_padded(in);
        g.resize(Palloc_, 0.0f);
        const size_t from = sharded() ? shard_.offset : 0;
        cudaCheck(cudaMemcpy(master_, g.data() + from, state_size() * sizeof(float), cudaMemcpyHostToDevice));
        std::vector<bf16> b(g.begin(), g.end());
        cudaCheck(cudaMemcpy(params_, b.data(), Palloc_ * sizeof(bf16), cudaMemcpyHostToDevice));
    }

    void forward(const int* inputs, const int* targets, int B, int T) override;
    void forward_backward(const int* inputs, const int* targets, int B, int T, float grad_scale,
                          bool last_micro_step = false) override;
    void zero_grad() override {
        cudaCheck(cudaMemsetAsync(grads_, 0, Palloc_ * sizeof(float), compute_));
        mark("zero_grad");
        grads_reduced_ = false, reduction_awaited_ = false;
    }
    // The norm is left on the device: AdamW computes the clip factor from it, read_stats reads it back. With
    // several ranks, of the summed gradient (ZeRO-1: of this rank's shard, all-reduced in queue_stats_readback).
    void clip_grad_norm(double max_norm) override {
        if (dp_.world() > 1) finish_reduction();
        const size_t from = sharded() ? shard_.offset : 0, n = sharded() ? shard_.size : Pg_;
        grad_norm_squared(norm_sq_, grads_ + from, n, norm_partial_, compute_);
        mark("grad_norm");
        max_norm_ = max_norm, clip_pending_ = true;
        queue_stats_readback();
    }
    // The update kernel reads the step's loss and squared norm on the device (step_stats_) and leaves every
    // buffer as it was when either is not finite; read_stats then takes the step back off the count t_.
    // With several ranks it first has the compute stream wait for the gradients' reduction (queuing what the
    // backward did not): clip_grad_norm has done so when it ran, but a caller that skips it must get summed
    // gradients too.
    void adamw_step(double lr, const OptimizerHyper& hp) override {
        if (dp_.world() > 1) finish_reduction();
        if (!clip_pending_) {  // no clip since the last read: snapshot the loss now, and a norm of 0 (no clipping)
            cudaCheck(cudaMemcpyAsync(step_stats_, loss_acc_, sizeof(double), cudaMemcpyDeviceToDevice, compute_));
            cudaCheck(cudaMemsetAsync(norm_sq_, 0, sizeof(double), compute_));
        }
        t_++;
        ::adamw_step(params_, master_, m_, v_, grads_, ranges_dev_, n_ranges_, adamw_blocks_, t_, lr, hp.beta1,
                     hp.beta2, hp.eps, hp.weight_decay, step_stats_, clip_pending_ ? max_norm_ : 0.0, compute_);
        if (sharded()) comm_all_gather(comm_, params_, shard_.size, compute_);  // every rank's updated shard
        mark("adamw");
        clip_pending_ = false, update_unread_ = true;
    }
    StepStats read_stats() override {
        if (!stats_queued_) queue_stats_readback();
        Watchdog::Wait w("the GPU's step (its NCCL collectives)");
        cudaCheck(cudaEventSynchronize(stats_ready_));  // the step's one wait
        ring_.synced(stats_mark_);
        stats_queued_ = false;
        StepStats s{stats_host_[0], norm_read_ ? std::sqrt(stats_host_[1]) : NAN};
        // An update queued after these stats skipped itself on the device if they were not finite.
        if (update_unread_ && !(std::isfinite(stats_host_[0]) && std::isfinite(stats_host_[1]))) t_--;
        norm_read_ = false, update_unread_ = false;
        return s;
    }
    std::pair<size_t, size_t> optimizer_range() const override {
        if (!sharded()) return {0, layout_.total};
        return {interface_index(shard_.begin), interface_index(shard_.end)};
    }
    void get_optimizer(std::vector<float>& m, std::vector<float>& v, long& t) const override {
        if (!sharded()) {
            m.resize(layout_.total), v.resize(layout_.total);
            download_unpadded(m_, m.data());
            download_unpadded(v_, v.data());
        } else {
            m = shard_to_interface(m_), v = shard_to_interface(v_);
        }
        t = t_;
    }
    void set_optimizer(const std::vector<float>& m, const std::vector<float>& v, long t) override {
        const std::pair<size_t, size_t> r = optimizer_range();
        if (m.size() != r.second - r.first || v.size() != m.size())
            throw std::runtime_error("set_optimizer: " + std::to_string(m.size()) + " moments for a range of " +
                                     std::to_string(r.second - r.first) + " parameters");
        for (auto [dev, host] : {std::make_pair(m_, &m), std::make_pair(v_, &v)}) {
            std::vector<float> g = sharded() ? interface_to_shard(*host) : to_padded(host->data());
            cudaCheck(cudaMemcpy(dev, g.data(), state_size() * sizeof(float), cudaMemcpyHostToDevice));
        }
        t_ = t;
    }
    void target_logprobs(const int* targets, float* out) const override;
    void logits_at(int b, int t, float* out) const override;

    // Bytes of the activation block for the last forward's B x T.
    size_t activation_bytes() const {
        Acts scratch;
        return carve(nullptr, B_, T_, scratch);
    }
    // For tests: the gradients (fp32, unpadded param_layout order) after backward (with several ranks, before
    // clip_grad_norm: the reduction may have begun).
    void get_grads(float* out) const {
        std::vector<float> g(Pg_);
        cudaCheck(cudaMemcpy(g.data(), grads_, Pg_ * sizeof(float), cudaMemcpyDeviceToHost));
        from_padded(g.data(), out);
    }
    // For dev/bench_model: time every op of the following steps (null: stop), on the stream the ops run on.
    void set_timer(OpTimer* t) { timer_ = t; }
    cudaStream_t stream() const { return compute_; }
    // For the KV-cache decoder (cuda_decoder.cuh): the bf16 weights in the device layout (V padded to Vp).
    const bf16* device_params() const { return params_; }
    const ParamLayout& device_param_layout() const { return glayout_; }
    int padded_vocab_size() const { return Vp_; }

  private:
    struct LayerActs {
        bf16 *ln1, *qkv, *atty, *ln2, *fc, *sw;  // (N, w) (N, 3 w) (N, w) (N, w) (N, 2 hid) (N, hid)
        float *mean1, *rstd1, *mean2, *rstd2;    // (N) each
        float* lse;                              // (B, h, T) attention log-sum-exp
    };
    // An upload slot: tokens (N), targets (N), then the embedding backward's plan (embedding.cuh's embedding_plan):
    // positions (N), seg_start (N + 1), seg_row (N), seg_slot (N), fin_row (N), fin_first (N + 1), of which the
    // plan's sizes are meaningful. Host staging has the same layout: UPLOAD_INTS(N) ints.
    struct Upload {
        int *tokens, *targets, *positions, *seg_start, *seg_row, *seg_slot, *fin_row, *fin_first;
    };
    static long upload_ints(long N) { return 8 * N + 2; }
    struct Acts {
        int* upload[2];                           // upload_ints(N) each, see Upload
        bf16* resid;                              // (2 L + 1, N, D) the residual states, see resid(k)
        std::vector<LayerActs> layer;
        bf16 *branch, *lnf, *logits;              // (N, wmax) (N, Df) (N, Vp)
        float *meanf, *rstdf, *lse, *losses;      // (N) each
        bf16 *dresid, *dbig, *dsmall;             // (N, D) (N, max(3 w, 2 hid, Df)) (N, max(w, hid, d))
        float *norm_scratch, *att_scratch;        // norm_backward_scratch_floats(N, max width), (B, h_max, T)
        float* emb_partial;                       // (embedding_partial_rows(N), d): embedding_backward's partial rows
        float* logprobs;                          // (N) target_logprobs' output
    };

    ModelConfig cfg_;
    ParamLayout layout_;  // the interface's (unpadded) order
    int Vp_;
    ParamLayout glayout_;  // the device's order: the same tensors with V padded to Vp
    size_t Pg_ = 0;
    bool rms_ = false;  // RMSNorm (else LayerNorm), as the norm kernels take it
    bool recompute_ = false;
    bf16* params_ = nullptr;
    float *grads_ = nullptr, *opt_ = nullptr, *master_ = nullptr, *m_ = nullptr, *v_ = nullptr, *tables_ = nullptr;
    std::map<int, float*> table_of_;
    // small: the step's results (loss sum, squared norm), norm partials, the AdamW launch table
    char* small_mem_ = nullptr;
    // step_stats_ (2): the step's loss (a snapshot of loss_acc_ taken when the step's stats are read back) and
    // squared gradient norm, which AdamW checks; loss_acc_ (1): the loss summed over the forwards since.
    double *step_stats_ = nullptr, *norm_sq_ = nullptr, *loss_acc_ = nullptr;
    float* norm_partial_ = nullptr;
    AdamWLaunchRange* ranges_dev_ = nullptr;
    int n_ranges_ = 0, adamw_blocks_ = 0;
    char* acts_mem_ = nullptr;
    long acts_N_ = 0;  // rows the activation block holds (B T of the largest forward so far)
    int acts_B_ = 0, acts_T_ = 0;
    Acts a_{};
    int B_ = 0, T_ = 0;
    EmbeddingPlanSize emb_;  // the current micro-batch's embedding plan
    long t_ = 0;
    // streams, events, staging
    cudaStream_t compute_ = nullptr, copy_ = nullptr;
    cudaEvent_t uploaded_[2], buckets_uploaded_[2], slot_free_[2], carved_, stats_ready_;
    int slot_ = 0;  // the upload slot of the current micro-batch
    mutable StagingRing ring_;
    int* last_host_ = nullptr;       // the current micro-batch's staging slot (same layout as Upload)
    std::vector<int> bucket_count_;  // embedding_plan's histogram
    double* stats_host_ = nullptr;   // pinned (2): loss sum, squared norm
    bool stats_queued_ = false, norm_read_ = false, clip_pending_ = false, logits_valid_ = false;
    bool update_unread_ = false;  // an adamw_step queued since the last read_stats
    uint64_t stats_mark_ = 0;
    double max_norm_ = 0;
    OpTimer* timer_ = nullptr;
    // data parallelism (see the top)
    DataParallel dp_;
    Comm comm_;
    Shard shard_;         // this rank's part [begin, end) of the device vector [0, Pg), S = shard_.size
    size_t Palloc_ = 0;   // elements of params_ and grads_: Pg padded to world x S (the collectives' extent)
    cudaStream_t comm_stream_ = nullptr;
    cudaEvent_t grads_ready_ = nullptr, reduced_ = nullptr;
    std::vector<std::pair<size_t, size_t>> buckets_;  // [begin, end): wte, layers 0 .. L-1, the head (lnf, lm_head)
    bool reduce_in_backward_ = false, grads_reduced_ = false;
    bool reduction_awaited_ = false;  // the compute stream waits for every reduction of the current gradients

    bool sharded() const { return dp_.zero >= 1 && dp_.world() > 1; }
    size_t state_size() const { return sharded() ? shard_.size : Pg_; }  // elements of master, m, v
    std::string device_name() const {
        int dev = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaDeviceProp p;
        cudaCheck(cudaGetDeviceProperties(&p, dev));
        return p.name;
    }
    // Queues the reduction of grads [a, b) across the ranks on the communication stream, once the compute stream
    // has queued everything that writes them: ZeRO-0 all-reduces the range, ZeRO-1 reduces each piece of it to
    // the rank whose shard holds that piece.
    void reduce_bucket(size_t a, size_t b) {
        cudaCheck(cudaEventRecord(grads_ready_, compute_));
        cudaCheck(cudaStreamWaitEvent(comm_stream_, grads_ready_, 0));
        if (!sharded()) return comm_all_reduce_sum(comm_, grads_ + a, b - a, comm_stream_);
        comm_group_start(comm_);
        for (size_t x = a; x < b;) {
            const int owner = (int)(x / shard_.size);
            const size_t y = std::min(b, (size_t)(owner + 1) * shard_.size);
            comm_reduce_sum(comm_, grads_ + x, y - x, owner, comm_stream_);
            x = y;
        }
        comm_group_end(comm_);
    }
    // Bucket k reduced during the last micro-step's backward, as soon as it is complete.
    void bucket_complete(size_t k) {
        if (reduce_in_backward_) reduce_bucket(buckets_[k].first, buckets_[k].second);
    }
    // Everything reduced (what the backward did not do, now), and the compute stream waiting for it; once per
    // step's gradients (clip_grad_norm and adamw_step both call it).
    void finish_reduction() {
        if (reduction_awaited_) return;
        if (!grads_reduced_)
            for (const auto& b : buckets_) reduce_bucket(b.first, b.second);
        grads_reduced_ = true, reduction_awaited_ = true;
        cudaCheck(cudaEventRecord(reduced_, comm_stream_));
        cudaCheck(cudaStreamWaitEvent(compute_, reduced_, 0));
    }
    // Interface elements whose device position is below dev (the device order keeps the interface order).
    size_t interface_index(size_t dev) const {
        size_t n = 0;
        for (size_t i = 0; i < layout_.tensors.size(); i++) {
            const size_t g = glayout_.tensors[i].offset, k = layout_.tensors[i].numel();
            n += dev <= g ? 0 : std::min(k, dev - g);
        }
        return n;
    }
    // ZeRO-1's device shard array (S elements of a vector in the device layout) <-> its interface range.
    std::vector<float> shard_to_interface(const float* dev) const {
        std::vector<float> s(shard_.size), out;
        cudaCheck(cudaMemcpy(s.data(), dev, shard_.size * sizeof(float), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < layout_.tensors.size(); i++) {
            const size_t g = glayout_.tensors[i].offset, k = layout_.tensors[i].numel();
            for (size_t x = std::max(g, shard_.begin); x < std::min(g + k, shard_.end); x++)
                out.push_back(s[x - shard_.offset]);
        }
        return out;
    }
    std::vector<float> interface_to_shard(const std::vector<float>& in) const {
        std::vector<float> s(shard_.size, 0.0f);
        size_t at = 0;
        for (size_t i = 0; i < layout_.tensors.size(); i++) {
            const size_t g = glayout_.tensors[i].offset, k = layout_.tensors[i].numel();
            for (size_t x = std::max(g, shard_.begin); x < std::min(g + k, shard_.end); x++)
                s[x - shard_.offset] = in[at++];
        }
        return s;
    }
    void mark(const char* op) {
        if (timer_) timer_->mark(op, compute_);
    }
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
    float* G(size_t off) const { return off == SIZE_MAX ? nullptr : grads_ + off; }
    size_t Wout() const { return cfg_.tied ? glayout_.wte : glayout_.lm_head; }
    float attn_scale(int l) const {
        const double hd = cfg_.layers[l].head_dim();
        return (float)(cfg_.mup_attn ? 1.0 / hd : 1.0 / std::sqrt(hd));
    }
    // Residual state k (N, D): 2 l before layer l's attention, 2 l + 1 before its MLP, 2 L after the last layer.
    bf16* resid(int k) const { return a_.resid + (size_t)k * B_ * T_ * cfg_.D(); }
    Upload upload_of(int* base, long N) const {
        int* p = base + 2 * N;  // positions
        return {base, base + N, p, p + N, p + 2 * N + 1, p + 3 * N + 1, p + 4 * N + 1, p + 5 * N + 1};
    }

    size_t carve(char* base, int B, int T, Acts& a) const;
    void ensure_acts(int B, int T);
    long upload_batch(const int* inputs, const int* targets, long N);
    void upload_buckets(const int* inputs, long N);
    void forward_to_logits(int B, int T);
    void backward();
    void queue_stats_readback() {
        cudaCheck(cudaMemcpyAsync(step_stats_, loss_acc_, sizeof(double), cudaMemcpyDeviceToDevice, compute_));
        cudaCheck(cudaMemsetAsync(loss_acc_, 0, sizeof(double), compute_));  // after the snapshot, in stream order
        // With several ranks, a training step's loss (and ZeRO-1's squared norms of the shards) summed over the
        // ranks: every rank's AdamW then skips or clips alike, and read_stats returns the job's loss.
        if (clip_pending_ && dp_.world() > 1) comm_all_reduce_sum(comm_, step_stats_, sharded() ? 2 : 1, compute_);
        cudaCheck(cudaMemcpyAsync(stats_host_, step_stats_, 2 * sizeof(double), cudaMemcpyDeviceToHost, compute_));
        cudaCheck(cudaEventRecord(stats_ready_, compute_));
        stats_mark_ = ring_.mark();
        stats_queued_ = true;
        norm_read_ = clip_pending_;
    }
    // Waits for everything queued (the read-backs of evaluation); every staging slot is free afterwards.
    void sync_all() const {
        const uint64_t m = ring_.mark();
        cudaCheck(cudaStreamSynchronize(compute_));
        ring_.synced(m);
    }
};

inline CudaEngine::CudaEngine(const ModelConfig& c, bool recompute, const DataParallel& dp)
    : cfg_(c), layout_(param_layout(c)), Vp_(padded_vocab(c.V)), glayout_(device_layout(c)),
      rms_(c.norm == NormType::RMSNorm), recompute_(recompute), dp_(dp) {
    validate_config(c);
    Pg_ = glayout_.total;
    // The shards: 128-element multiples keep every shard 256-byte aligned (128-bit loads, NCCL's fast paths).
    shard_ = shard_of(Pg_, dp_.world(), dp_.rank(), 128);
    Palloc_ = shard_.size * dp_.world();
    if (dp_.world() > 1) comm_ = comm_init(*dp_.dist);
    // The buckets, in the order the backward completes them: the head, layers L-1 .. 0, the embedding.
    const size_t layers_end = glayout_.lnf_w;
    buckets_.push_back({0, glayout_.layer[0].ln1_w});
    for (int l = 0; l < cfg_.L(); l++)
        buckets_.push_back({glayout_.layer[l].ln1_w, l + 1 < cfg_.L() ? glayout_.layer[l + 1].ln1_w : layers_end});
    buckets_.push_back({layers_end, Pg_});
    cudaCheck(cudaStreamCreate(&compute_));  // blocking: stray legacy-stream calls (cudaMemcpy) still order after it
    cudaCheck(cudaStreamCreate(&copy_));
    for (int s = 0; s < 2; s++) {
        cudaCheck(cudaEventCreateWithFlags(&uploaded_[s], cudaEventDisableTiming));
        cudaCheck(cudaEventCreateWithFlags(&buckets_uploaded_[s], cudaEventDisableTiming));
        cudaCheck(cudaEventCreateWithFlags(&slot_free_[s], cudaEventDisableTiming));
        cudaCheck(cudaEventRecord(slot_free_[s], compute_));
    }
    cudaCheck(cudaEventCreateWithFlags(&carved_, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&stats_ready_, cudaEventDisableTiming));
    cudaCheck(cudaStreamCreate(&comm_stream_));
    cudaCheck(cudaEventCreateWithFlags(&grads_ready_, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&reduced_, cudaEventDisableTiming));
    cudaCheck(cudaMallocHost(&stats_host_, 2 * sizeof(double)));
    cudaCheck(cudaMalloc(&params_, Palloc_ * sizeof(bf16)));
    cudaCheck(cudaMalloc(&grads_, Palloc_ * sizeof(float)));
    const size_t S = state_size();  // ZeRO-1: master, m and v of this rank's shard only
    cudaCheck(cudaMalloc(&opt_, 3 * S * sizeof(float)));
    master_ = opt_, m_ = opt_ + S, v_ = opt_ + 2 * S;
    cudaCheck(cudaMemset(opt_, 0, 3 * S * sizeof(float)));
    cudaCheck(cudaMemset(params_, 0, Palloc_ * sizeof(bf16)));
    cudaCheck(cudaMemset(grads_, 0, Palloc_ * sizeof(float)));
    const std::vector<AdamWRange> all = adamw_ranges(glayout_);
    const std::vector<AdamWLaunchRange> ranges =
        adamw_launch_ranges(sharded() ? shard_ranges(all, shard_.offset, shard_.offset + shard_.size) : all);
    n_ranges_ = (int)ranges.size(), adamw_blocks_ = ranges.back().first_block;
    Carver small{nullptr, 0};
    for (int pass = 0; pass < 2; pass++) {  // measure, then carve
        small.bytes = 0;
        step_stats_ = small.take<double>(3), norm_partial_ = small.take<float>(GRADNORM_BLOCKS);
        ranges_dev_ = small.take<AdamWLaunchRange>(ranges.size());
        if (pass == 0) cudaCheck(cudaMalloc(&small_mem_, small.bytes)), small.base = small_mem_;
    }
    norm_sq_ = step_stats_ + 1, loss_acc_ = step_stats_ + 2;
    cudaCheck(cudaMemset(step_stats_, 0, 3 * sizeof(double)));
    cudaCheck(cudaMemcpy(ranges_dev_, ranges.data(), ranges.size() * sizeof(AdamWLaunchRange), cudaMemcpyHostToDevice));
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

inline CudaEngine::~CudaEngine() {
    cudaStreamSynchronize(compute_), cudaStreamSynchronize(copy_), cudaStreamSynchronize(comm_stream_);
    comm_free(comm_);
    cudaEventDestroy(grads_ready_), cudaEventDestroy(reduced_), cudaStreamDestroy(comm_stream_);
    cudaFree(params_), cudaFree(grads_), cudaFree(opt_), cudaFree(tables_), cudaFree(acts_mem_), cudaFree(small_mem_);
    cudaFreeHost(stats_host_);
    for (int s = 0; s < 2; s++)
        cudaEventDestroy(uploaded_[s]), cudaEventDestroy(buckets_uploaded_[s]), cudaEventDestroy(slot_free_[s]);
    cudaEventDestroy(carved_), cudaEventDestroy(stats_ready_);
    cudaStreamDestroy(compute_), cudaStreamDestroy(copy_);
}

// The per-step members: model_passes.cuh (activation memory, uploads, forward, backward, read-outs).
#include "model_passes.cuh"
