// cuda_engine.cuh: CudaEngine, engine.h's Engine on the GPU: the memory (one allocation each for bf16 weights, fp32
// gradients, fp32 master weights and AdamW moments, activations), the streams and uploads, the step's results on
// the device, the data-parallel reductions and ZeRO-1 shards, and the optimizer glue around CudaModel (model.cuh),
// which computes.
// Design, short (the long form: docs/engine.md): every block is one allocation with pointers carved out of it,
// sized by memory_plan.h (which --plan runs without a GPU). All compute is queued on one created stream; uploads
// go through pinned staging (staging.cuh) into two device slots on a second stream, ordered by events, so the
// next micro-batch crosses PCIe while this one computes. The loss sum and the gradient norm stay on the device.
// With several ranks the last micro-step reduces each layer's gradients (a bucket) on a communication stream as
// soon as the backward finishes it; ZeRO-1 reduces each bucket piece to the rank whose shard holds it, updates
// that shard and all-gathers the bf16 weights.
// Does not: compute a layer (model.cuh), or wait on the host in a training step except in read_stats.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "adamw.cuh"
#include "classifier.cuh"
#include "comm.cuh"
#include "cuda_common.cuh"
#include "dist/shard.h"
#include "engine.h"
#include "forward_contract.h"
#include "gradnorm.cuh"
#include "inspect/cuda_decoder.cuh"
#include "memory_plan.h"
#include "model.cuh"
#include "model_config.h"
#include "ref/init.h"
#include "staging.cuh"
#include "util/mfu.h"

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
               (model_.recompute ? ", recomputing norm and SwiGLU outputs" : "") + ") on " + device_name();
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
        Activations<bf16> measured;
        return carve_activations(cfg_, model_.B, model_.T, model_.recompute, nullptr, measured);
    }
    // For tests: the gradients (fp32, unpadded param_layout order) after backward (with several ranks, before
    // clip_grad_norm: the reduction may have begun).
    void get_grads(float* out) const {
        std::vector<float> g(Pg_);
        cudaCheck(cudaMemcpy(g.data(), grads_, Pg_ * sizeof(float), cudaMemcpyDeviceToHost));
        from_padded(g.data(), out);
    }
    // For dev/bench_model: time every op of the following steps (null: stop), on the stream the ops run on.
    void set_timer(OpTimer* t) { model_.timer = t; }
    cudaStream_t stream() const { return compute_; }
    // The KV-cache decoder reads the bf16 weights in place and queues on the compute stream.
    std::unique_ptr<Decoder> make_decoder(int capacity) const override {
        return std::unique_ptr<Decoder>(new CudaDecoder({&cfg_, params_, &model_.glayout, model_.Vp, compute_}, capacity));
    }

  private:
    // An upload slot (memory_plan.h's upload_ints): tokens (N), targets (N), then the embedding backward's plan
    // (embedding.cuh's embedding_plan), of which the plan's sizes are meaningful. Host staging has the same layout.
    struct Upload {
        int *tokens, *targets, *positions, *seg_start, *seg_row, *seg_slot, *fin_row, *fin_first;
    };
    ModelConfig cfg_;
    ParamLayout layout_;  // the interface's (unpadded) order
    CudaModel model_;     // the layers; its glayout is the device's order (the same tensors, V padded to Vp)
    size_t Pg_ = 0;
    bf16* params_ = nullptr;
    float *grads_ = nullptr, *opt_ = nullptr, *master_ = nullptr, *m_ = nullptr, *v_ = nullptr;
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
    // data parallelism (see the top)
    DataParallel dp_;
    Comm comm_;
    Shard shard_;         // this rank's part [begin, end) of the device vector [0, Pg), S = shard_.size
    size_t Palloc_ = 0;   // elements of params_ and grads_: Pg padded to world x S (the collectives' extent)
    cudaStream_t comm_stream_ = nullptr;
    cudaEvent_t grads_ready_ = nullptr, reduced_ = nullptr;
    std::vector<std::pair<size_t, size_t>> buckets_;  // [begin, end): wte, layers 0 .. L-1, the head (lnf, lm_head)
    bool grads_reduced_ = false;
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
    // Everything reduced (what the backward did not do, now), and the compute stream waiting for it.
    // Once per step's gradients (clip_grad_norm and adamw_step both call it).
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
            const size_t g = model_.glayout.tensors[i].offset, k = layout_.tensors[i].numel();
            n += dev <= g ? 0 : std::min(k, dev - g);
        }
        return n;
    }
    // ZeRO-1's device shard array (S elements of a vector in the device layout) <-> its interface range.
    std::vector<float> shard_to_interface(const float* dev) const {
        std::vector<float> s(shard_.size), out;
        cudaCheck(cudaMemcpy(s.data(), dev, shard_.size * sizeof(float), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < layout_.tensors.size(); i++) {
            const size_t g = model_.glayout.tensors[i].offset, k = layout_.tensors[i].numel();
            for (size_t x = std::max(g, shard_.begin); x < std::min(g + k, shard_.end); x++)
                out.push_back(s[x - shard_.offset]);
        }
        return out;
    }
    std::vector<float> interface_to_shard(const std::vector<float>& in) const {
        std::vector<float> s(shard_.size, 0.0f);
        size_t at = 0;
        for (size_t i = 0; i < layout_.tensors.size(); i++) {
            const size_t g = model_.glayout.tensors[i].offset, k = layout_.tensors[i].numel();
            for (size_t x = std::max(g, shard_.begin); x < std::min(g + k, shard_.end); x++)
                s[x - shard_.offset] = in[at++];
        }
        return s;
    }
    void mark(const char* op) {
        if (model_.timer) model_.timer->mark(op, compute_);
    }
    // Interface (unpadded) <-> device (padded) order: tensor i of one is tensor i of the other, the first
    // rows * cols elements of each device tensor are the interface tensor (rows past V are the padding).
    std::vector<float> to_padded(const float* in) const {
        std::vector<float> g(Pg_, 0.0f);
        for (size_t i = 0; i < layout_.tensors.size(); i++)
            std::copy_n(in + layout_.tensors[i].offset, layout_.tensors[i].numel(),
                        g.begin() + model_.glayout.tensors[i].offset);
        return g;
    }
    void from_padded(const float* g, float* out) const {
        for (size_t i = 0; i < layout_.tensors.size(); i++)
            std::copy_n(g + model_.glayout.tensors[i].offset, layout_.tensors[i].numel(), out + layout_.tensors[i].offset);
    }
    void download_unpadded(const float* dev, float* out) const {
        std::vector<float> g(Pg_);
        cudaCheck(cudaMemcpy(g.data(), dev, Pg_ * sizeof(float), cudaMemcpyDeviceToHost));
        from_padded(g.data(), out);
    }
    Upload upload_of(int* base, long N) const {
        int* p = base + 2 * N;  // positions
        return {base, base + N, p, p + N, p + 2 * N + 1, p + 3 * N + 1, p + 4 * N + 1, p + 5 * N + 1};
    }

    void ensure_acts(int B, int T);
    long upload_batch(const int* inputs, const int* targets, long N);
    void upload_buckets(const int* inputs, long N);
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
    : cfg_((validate_config(c), c)), layout_(param_layout(c)), model_(c, recompute), dp_(dp) {
    Pg_ = model_.glayout.total;
    shard_ = zero_shard(Pg_, dp_.world(), dp_.rank());
    Palloc_ = shard_.size * dp_.world();
    if (dp_.world() > 1) comm_ = comm_init(*dp_.dist);
    // The buckets, in the order the backward completes them: the head, layers L-1 .. 0, the embedding.
    const size_t layers_end = model_.glayout.lnf_w;
    buckets_.push_back({0, model_.glayout.layer[0].ln1_w});
    for (int l = 0; l < cfg_.L(); l++)
        buckets_.push_back({model_.glayout.layer[l].ln1_w, l + 1 < cfg_.L() ? model_.glayout.layer[l + 1].ln1_w : layers_end});
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
    const std::vector<AdamWRange> all = adamw_ranges(model_.glayout);
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
    model_.params = params_, model_.grads = grads_;
}

inline CudaEngine::~CudaEngine() {
    cudaStreamSynchronize(compute_), cudaStreamSynchronize(copy_), cudaStreamSynchronize(comm_stream_);
    comm_free(comm_);
    cudaEventDestroy(grads_ready_), cudaEventDestroy(reduced_), cudaStreamDestroy(comm_stream_);
    cudaFree(params_), cudaFree(grads_), cudaFree(opt_), cudaFree(acts_mem_), cudaFree(small_mem_);
    cudaFreeHost(stats_host_);
    for (int s = 0; s < 2; s++)
        cudaEventDestroy(uploaded_[s]), cudaEventDestroy(buckets_uploaded_[s]), cudaEventDestroy(slot_free_[s]);
    cudaEventDestroy(carved_), cudaEventDestroy(stats_ready_);
    cudaStreamDestroy(compute_), cudaStreamDestroy(copy_);
}

// Carves the activations for B x T (memory_plan.h's layout). Rows are carved per (B, T) (the residual states are
// indexed with N = B T), so re-carve on any change; the allocation only grows (cudaFree waits for the device). The
// new layout overlaps memory queued work may still use, so the upload stream first waits for everything queued on
// the compute stream.
inline void CudaEngine::ensure_acts(int B, int T) {
    if (B == acts_B_ && T == acts_T_) return;
    const long N = (long)B * T;
    Activations<bf16> measured;
    const size_t bytes = carve_activations(cfg_, B, T, model_.recompute, nullptr, measured);
    if (N > acts_N_ || !acts_mem_) {
        cudaCheck(cudaFree(acts_mem_));
        cudaCheck(cudaMalloc(&acts_mem_, bytes));
        acts_N_ = N;
    }
    carve_activations(cfg_, B, T, model_.recompute, acts_mem_, model_.a);
    acts_B_ = B, acts_T_ = T;
    cudaCheck(cudaEventRecord(carved_, compute_));
    cudaCheck(cudaStreamWaitEvent(copy_, carved_, 0));
}

// Stages inputs (and targets) in pinned memory and queues their copy into this micro-batch's device slot on the
// upload stream; the compute stream waits for it. Returns the number of unmasked targets.
inline long CudaEngine::upload_batch(const int* inputs, const int* targets, long N) {
    slot_ = 1 - slot_;
    int* host = ring_.acquire(upload_ints(N), compute_);
    std::copy_n(inputs, N, host);
    long count = 0;
    if (targets)
        for (long n = 0; n < N; n++) host[N + n] = targets[n], count += targets[n] >= 0;
    cudaCheck(cudaStreamWaitEvent(copy_, slot_free_[slot_], 0));  // the micro-step before last is done with it
    cudaCheck(cudaMemcpyAsync(model_.a.upload[slot_], host, (targets ? 2 : 1) * N * sizeof(int),
                              cudaMemcpyHostToDevice, copy_));
    cudaCheck(cudaEventRecord(uploaded_[slot_], copy_));
    cudaCheck(cudaStreamWaitEvent(compute_, uploaded_[slot_], 0));
    last_host_ = host;
    return count;
}

// The embedding backward's buckets, built from the host's tokens into the slot's staging and uploaded; called
// once the forward is queued, so the sort overlaps the GPU's work.
inline void CudaEngine::upload_buckets(const int* inputs, long N) {
    int* host = last_host_;
    const Upload h = upload_of(host, N);
    emb_ = embedding_plan(inputs, N, h.positions, h.seg_start, h.seg_row, h.seg_slot, h.fin_row, h.fin_first,
                          bucket_count_);
    cudaCheck(cudaMemcpyAsync(upload_of(model_.a.upload[slot_], N).positions, h.positions,
                              (upload_ints(N) - 2 * N) * sizeof(int),
                              cudaMemcpyHostToDevice, copy_));
    cudaCheck(cudaEventRecord(buckets_uploaded_[slot_], copy_));
}

inline void CudaEngine::forward(const int* inputs, const int* targets, int B, int T) {
    validate_forward_inputs(cfg_, inputs, targets, B, T);
    const long N = (long)B * T;
    ensure_acts(B, T);
    model_.B = B, model_.T = T;
    const long count = upload_batch(inputs, targets, N);
    const Upload up = upload_of(model_.a.upload[slot_], N);
    model_.forward(up.tokens, compute_);
    softmax_crossentropy_forward(model_.a.losses, model_.a.lse, model_.a.logits, targets ? up.targets : nullptr, N,
                                 cfg_.V, model_.Vp, compute_);
    mark("classifier");
    if (count) {
        loss_sum(loss_acc_, model_.a.losses, N, 1.0 / count, compute_);
        mark("loss_sum");
    }
    cudaCheck(cudaEventRecord(slot_free_[slot_], compute_));
    logits_valid_ = true;
}

inline void CudaEngine::forward_backward(const int* inputs, const int* targets, int B, int T, float grad_scale,
                                         bool last_micro_step) {
    if (!targets) throw std::logic_error("forward_backward needs targets");
    validate_forward_inputs(cfg_, inputs, targets, B, T);
    const long N = (long)B * T;
    ensure_acts(B, T);
    model_.B = B, model_.T = T;
    logits_valid_ = false, reduction_awaited_ = false;  // new gradients: the step's reduction is still to come
    const long count = upload_batch(inputs, targets, N);
    if (count == 0) {  // every target masked: the loss is the constant 0, no gradient
        cudaCheck(cudaEventRecord(slot_free_[slot_], compute_));
        return;
    }
    const Upload up = upload_of(model_.a.upload[slot_], N);
    model_.forward(up.tokens, compute_);
    upload_buckets(inputs, N);  // while the GPU runs the forward
    const float dloss = grad_scale / (float)count;
    softmax_crossentropy_fused(model_.a.losses, model_.a.logits, up.targets, N, cfg_.V, model_.Vp, dloss, compute_);
    mark("classifier");
    loss_sum(loss_acc_, model_.a.losses, N, (double)grad_scale / count, compute_);
    mark("loss_sum");
    // The last micro-step of a data-parallel step reduces each bucket as soon as the backward completes it.
    const bool reduce_now = last_micro_step && dp_.world() > 1;
    model_.backward({up.positions, up.seg_start, up.seg_row, up.seg_slot, up.fin_row, up.fin_first, emb_.segments,
                     emb_.multi}, buckets_uploaded_[slot_], [&](size_t k) {
        if (reduce_now) reduce_bucket(buckets_[k].first, buckets_[k].second);
    }, compute_);
    grads_reduced_ = grads_reduced_ || reduce_now;
    cudaCheck(cudaEventRecord(slot_free_[slot_], compute_));
}

inline void CudaEngine::target_logprobs(const int* targets, float* out) const {
    if (!logits_valid_) throw std::logic_error("target_logprobs needs a forward() (not forward_backward)");
    const long N = (long)model_.B * model_.T;
    int* host = ring_.acquire(std::max(N, (long)1), compute_);
    std::copy_n(targets, N, host);
    int* dev = upload_of(model_.a.upload[slot_], N).targets;  // this forward's slot; the compute stream orders it
    cudaCheck(cudaMemcpyAsync(dev, host, N * sizeof(int), cudaMemcpyHostToDevice, compute_));
    ::target_logprobs(model_.a.logprobs, model_.a.logits, model_.a.lse, dev, N, model_.Vp, compute_);
    float* back = reinterpret_cast<float*>(ring_.acquire(std::max(N, (long)1), compute_));
    cudaCheck(cudaMemcpyAsync(back, model_.a.logprobs, N * sizeof(float), cudaMemcpyDeviceToHost, compute_));
    sync_all();
    std::copy_n(back, N, out);
}

inline void CudaEngine::logits_at(int b, int t, float* out) const {
    if (!logits_valid_) throw std::logic_error("logits_at needs a forward() (not forward_backward)");
    bf16* back = reinterpret_cast<bf16*>(ring_.acquire((cfg_.V + 1) / 2, compute_));
    cudaCheck(cudaMemcpyAsync(back, model_.a.logits + ((size_t)b * model_.T + t) * model_.Vp, cfg_.V * sizeof(bf16),
                              cudaMemcpyDeviceToHost, compute_));
    sync_all();
    for (int v = 0; v < cfg_.V; v++) out[v] = back[v];
}
