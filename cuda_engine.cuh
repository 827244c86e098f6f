// cuda_engine.cuh: CudaEngine, engine.h's Engine on the GPU: the memory (one allocation each for bf16 weights, fp32
// gradients, fp32 master weights and AdamW moments, activations), the streams and uploads, the step's results on
// the device, the data-parallel reductions and ZeRO-1 shards, and the optimizer glue around CudaModel (model.cuh),
// which computes. Only cuda_engine.cu includes it; the tests and dev/bench_model hold the engine through
// cuda_engine_hooks.cuh (CudaEngineHooks, which it implements: the gradients, the activation block's size, a timer).
// Design, short (the long form: docs/engine.md): every block is one allocation with pointers carved out of it,
// sized by memory_plan.h (which --plan runs without a GPU). All compute is queued on one created stream; uploads
// go through pinned staging (StagingRing, below) into two device slots on a second stream, ordered by events, so the
// next micro-batch crosses PCIe while this one computes. The loss sum and the gradient norm stay on the device.
// With several ranks the last micro-step reduces each layer's gradients (a bucket) on a communication stream as
// soon as the backward finishes it; ZeRO-1 reduces each bucket piece to the rank whose shard holds it, updates
// that shard and all-gathers the bf16 weights.
// Does not: compute a layer (model.cuh), or wait on the host in a training step except in read_stats.
#pragma once

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>
#include <cstring>

#include "adamw.cuh"
#include "classifier.cuh"
#include "comm.cuh"
#include "cuda_common.cuh"
#include "cuda_engine_hooks.cuh"
#include "adamw_ranges.h"
#include "engine.h"
#include "gradnorm.cuh"
#include "layer_stats.cuh"
#include "memory_plan.h"
#include "model.cuh"
#include "ref/init.h"

// Pinned host memory for the engine's uploads (tokens, targets, embedding buckets) and small read-
// backs, so that cudaMemcpyAsync really is asynchronous: from pageable memory the driver stages the copy itself
// and may wait for the stream, which would put a host stall into every micro-step.
//   StagingRing  slots of pinned ints; acquire(n) hands out a slot no queued copy still reads, without waiting
// A slot is written by the host, copied by cudaMemcpyAsync, and free again once the host has waited for the
// compute stream past that copy (the engine does once per step, in read_stats, and in every read-back): the
// engine tells the ring with `synced(mark)`, mark being the ring's clock when the waited-for work was queued.
// A step of n micro-batches uses n slots; the ring grows to that on the first step and then reuses them, so a
// steady-state step allocates nothing. Only a caller that queues more than kMaxSlots uploads without ever
// reading anything back makes acquire wait (cudaStreamSynchronize), which the sync-count test would show.
// Does not: allocate device memory (the engine's activation block holds the device side of every upload).

class StagingRing {
  public:
    static constexpr size_t kMaxSlots = 64;

    StagingRing() = default;
    StagingRing(const StagingRing&) = delete;
    StagingRing& operator=(const StagingRing&) = delete;
    ~StagingRing() {
        for (Slot& s : slots_) cudaFreeHost(s.host);
    }

    // A pinned slot of at least n ints that no queued copy reads. `stream`: waited for only when kMaxSlots
    // slots are all in flight.
    int* acquire(size_t n, cudaStream_t stream) {
        for (size_t tries = 0; tries < slots_.size(); tries++) {
            Slot& s = slots_[next_];
            next_ = (next_ + 1) % slots_.size();
            if (s.used_at < done_ && s.capacity >= n) return use(s);
        }
        for (Slot& s : slots_)  // a free slot too small for n: replace it
            if (s.used_at < done_) {
                cudaCheck(cudaFreeHost(s.host));
                s = allocate(n);
                return use(s);
            }
        if (slots_.size() < kMaxSlots) {
            slots_.push_back(allocate(n));
            return use(slots_.back());
        }
        cudaCheck(cudaStreamSynchronize(stream));  // every slot in flight: wait (never in a training step)
        synced(clock_);
        return acquire(n, stream);
    }
    // The clock now: pass it to synced() once the host has waited for work queued after this call.
    uint64_t mark() const { return clock_; }
    // Every slot acquired before `m` (a mark()) is free.
    void synced(uint64_t m) {
        if (m > done_) done_ = m;
    }

  private:
    struct Slot {
        int* host = nullptr;
        size_t capacity = 0;
        uint64_t used_at = 0;  // clock at the last acquire
    };
    std::vector<Slot> slots_;
    size_t next_ = 0;
    uint64_t clock_ = 1, done_ = 1;  // used_at < done_: free (a new slot has used_at 0)

    static Slot allocate(size_t n) {
        Slot s;
        s.capacity = n < 1024 ? 1024 : n;
        cudaCheck(cudaMallocHost(&s.host, s.capacity * sizeof(int)));
        memset(s.host, 0, s.capacity * sizeof(int));  // copied whole even where a micro-batch leaves it unused
        return s;
    }
    int* use(Slot& s) {
        s.used_at = clock_++;
        return s.host;
    }
};

// Makes the GPU's KV-cache decoder on a model's bf16 weights, queuing on `stream`: inspect/cuda_decoder.cuh's
// make_cuda_decoder, handed to the engine by whoever builds it (cuda_engine.cu), so that the engine does not
// depend on inspect/. An engine built without one refuses make_decoder.
using CudaDecoderMaker = std::unique_ptr<Decoder> (*)(const CudaModel& model, cudaStream_t stream, int capacity);

class CudaEngine : public CudaEngineHooks {
  public:
    explicit CudaEngine(const ModelConfig& c, bool recompute = false, const DataParallel& dp = DataParallel(),
                        CudaDecoderMaker decoder = nullptr);
    ~CudaEngine() override;
    CudaEngine(const CudaEngine&) = delete;
    CudaEngine& operator=(const CudaEngine&) = delete;

    std::string describe() const override {
        return std::string("CUDA (bf16 weights and activations, fp32 gradients and master weights") +
               (model_.recompute ? ", recomputing norm and SwiGLU outputs" : "") + ") on " + device_name();
    }
    double peak_flops() const override { return peak_bf16_tflops(device_name()) * 1e12; }
    const ModelConfig& config() const override { return model_.cfg; }
    size_t num_params() const override { return layout_.total; }

    void init_params(uint64_t seed) override {
        std::vector<float> p(layout_.total);
        ref::init_params(p.data(), model_.cfg, layout_, seed);  // the reference's init: CPU and GPU runs start alike
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
        g.resize(palloc(), 0.0f);
        const size_t from = sharded() ? shard_.offset : 0;
        cudaCheck(cudaMemcpy(master_, g.data() + from, state_size() * sizeof(float), cudaMemcpyHostToDevice));
        std::vector<bf16> b(g.begin(), g.end());
        cudaCheck(cudaMemcpy(params_, b.data(), palloc() * sizeof(bf16), cudaMemcpyHostToDevice));
    }

    void forward(const int* inputs, const int* targets, int B, int T) override;
    void forward_backward(const int* inputs, const int* targets, int B, int T, float grad_scale,
                          bool last_micro_step = false) override;
    void zero_grad() override {
        expect({Phase::Open, Phase::Forwarded, Phase::Accumulating}, "zero_grad");
        cudaCheck(cudaMemsetAsync(grads_, 0, palloc() * sizeof(float), compute_));
        model_.mark("zero_grad", compute_);
        phase_ = Phase::Accumulating;
    }
    // The norm is left on the device: AdamW computes the clip factor from it, read_stats reads it back. With
    // several ranks, of the summed gradient (ZeRO-1: of this rank's shard, all-reduced in queue_stats_readback).
    void clip_grad_norm(double max_norm) override {
        expect({Phase::Accumulating, Phase::Reducing}, "clip_grad_norm");
        if (dp_.world() > 1) finish_reduction();
        const size_t from = sharded() ? shard_.offset : 0, n = sharded() ? shard_.size : model_.glayout.total;
        grad_norm_squared(norm_sq_, grads_ + from, n, norm_partial_, compute_);
        model_.mark("grad_norm", compute_);
        max_norm_ = max_norm;
        queue_stats_readback(true);
        phase_ = Phase::Clipped;
    }
    // The update kernel reads the step's loss and squared norm on the device (step_stats_) and leaves every
    // buffer as it was when either is not finite. The same two numbers are read back to the host (queued before
    // the update), so read_stats knows whether the update applied and counts it in t_ only then.
    // With several ranks it first has the compute stream wait for the gradients' reduction (queuing what the
    // backward did not): clip_grad_norm has done so when it ran, but a caller that skips it must get summed
    // gradients too.
    void adamw_step(double lr, const OptimizerHyper& hp) override {
        expect({Phase::Accumulating, Phase::Reducing, Phase::Clipped}, "adamw_step");
        const bool clipped = phase_ == Phase::Clipped;
        if (dp_.world() > 1) finish_reduction();
        if (!clipped) {  // no clip: the loss read back now, with a norm of 0 (no clipping)
            cudaCheck(cudaMemsetAsync(norm_sq_, 0, sizeof(double), compute_));
            queue_stats_readback(false);
        }
        lr_ = lr, hp_ = hp;  // for layer_stats
        ::adamw_step(params_, master_, m_, v_, grads_, ranges_dev_, n_ranges_, adamw_blocks_, t_ + 1, lr, hp.beta1,
                     hp.beta2, hp.eps, hp.weight_decay, step_stats_, clipped ? max_norm_ : 0.0, compute_);
        if (sharded()) comm_all_gather(comm_, params_, shard_.size, compute_);  // every rank's updated shard
        model_.mark("adamw", compute_);
        phase_ = clipped ? Phase::Updated : Phase::UpdatedUnclipped;
    }
    void set_optimizer_multipliers(const OptimizerMultipliers& m) override;
    StepStats read_stats() override {
        expect({Phase::Open, Phase::Forwarded, Phase::Accumulating, Phase::Reducing, Phase::Updated,
                Phase::UpdatedUnclipped},
               "read_stats");
        const bool update = phase_ == Phase::Updated || phase_ == Phase::UpdatedUnclipped;
        if (!update) queue_stats_readback(false);
        Watchdog::Wait w("the GPU's step (its NCCL collectives)");
        cudaCheck(cudaEventSynchronize(stats_ready_));  // the step's one wait
        ring_.synced(stats_mark_);
        StepStats s{stats_host_[0], phase_ == Phase::Updated ? std::sqrt(stats_host_[1]) : NAN};
        if (update) {  // the update skipped itself on the device if these stats are not finite
            applied_ = std::isfinite(stats_host_[0]) && std::isfinite(stats_host_[1]);
            if (applied_) t_++;
            phase_ = Phase::Open;
        }
        return s;
    }
    // layer_stats.cuh's three launches over this rank's part of the vector (ZeRO-0 with several ranks too, so that
    // the all-reduced sums count each element once), then the 5 L sums read back: the call's one wait.
    LayerStats layer_stats() override {
        expect({Phase::Open}, "layer_stats");
        const ModelConfig& c = model_.cfg;
        if (model_.batch() == 0) throw std::logic_error("CudaEngine: layer_stats before any training step");
        if (!lstats_) {
            const bool dp = dp_.world() > 1;
            const size_t from = dp ? shard_.begin : 0, to = dp ? shard_.end : model_.glayout.total;
            lstats_.reset(new LayerStatsDevice(layer_stats_plan(c, model_.glayout, from, to,
                                                                sharded() ? from - shard_.offset : from,
                                                                LSTATS_PER_BLOCK, LSTATS_MAX_BLOCKS, rates_)));
        }
        const long N = (long)model_.batch() * model_.seq();
        lstats_->queue(grads_, master_, m_, v_, applied_, lr_, hp_, t_, model_.acts().resid, N, c.D(), compute_);
        const size_t n = LayerSums::kCount * (size_t)c.L();
        if (dp_.world() > 1) comm_all_reduce_sum(comm_, lstats_->sums(), n, compute_);
        std::vector<double> h(n);
        cudaCheck(
            cudaMemcpyAsync(h.data(), lstats_->sums(), h.size() * sizeof(double), cudaMemcpyDeviceToHost, compute_));
        sync_all();
        LayerSums s(c.L());
        for (int k = 0; k < LayerSums::kCount; k++) std::copy_n(h.data() + k * c.L(), c.L(), s.all(k)->data());
        return finish_layer_stats(s, c, N, dp_.world());
    }
    std::pair<size_t, size_t> optimizer_range() const override {
        if (!sharded()) return {0, layout_.total};
        return {interface_index(shard_.begin), interface_index(shard_.end)};
    }
    void get_optimizer(std::vector<float>& m, std::vector<float>& v, long& t) const override {
        expect_no_update("get_optimizer");
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
        expect_no_update("set_optimizer");
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

    // cuda_engine_hooks.cuh's, for the tests and dev/bench_model.
    size_t activation_bytes() const override { return model_.activation_bytes(model_.batch(), model_.seq()); }
    void get_grads(float* out) const override { download_unpadded(grads_, out); }
    void set_timer(OpTimer* t) override { model_.set_timer(t); }
    cudaStream_t stream() const override { return compute_; }
    // The KV-cache decoder reads the bf16 weights in place and queues on the compute stream.
    std::unique_ptr<Decoder> make_decoder(int capacity) const override {
        if (!decoder_)
            throw std::logic_error(
                "this CudaEngine was built without a decoder maker (cuda_engine.cu's make_gpu_engine "
                "hands it inspect/cuda_decoder.cuh's make_cuda_decoder)");
        return decoder_(model_, compute_, capacity);
    }

  private:
    // The step's phase, in engine.h's order (zero_grad, micro-steps, clip_grad_norm, adamw_step, read_stats); a
    // call out of that order is a logic_error rather than a step computed from the wrong state.
    enum class Phase {
        Open,              // a fresh engine, or a step read: no logits to read, nothing queued for read_stats
        Forwarded,         // forward() ran last: its logits are readable (target_logprobs, logits_at)
        Accumulating,      // zero_grad or micro-steps: gradients being summed, not yet reduced across the ranks
        Reducing,          // the last micro-step queued the reduction across the ranks during its backward
        Clipped,           // clip_grad_norm: the reduction awaited, the norm and the stats' read-back queued
        Updated,           // adamw_step after the clip: the update queued after the stats' read-back
        UpdatedUnclipped,  // adamw_step without a clip (no norm): the same
    };
    ParamLayout layout_;  // the interface's (unpadded) order
    CudaModel model_;     // the layers; its glayout is the device's order (the same tensors, V padded to Vp)
    CudaDecoderMaker decoder_ = nullptr;
    bf16* params_ = nullptr;  // palloc() elements, as grads_
    float *grads_ = nullptr, *opt_ = nullptr, *master_ = nullptr, *m_ = nullptr, *v_ = nullptr;
    // small: the step's results (loss sum, squared norm), norm partials
    char* small_mem_ = nullptr;
    // step_stats_ (2): the step's loss (a snapshot of loss_acc_ taken when the step's stats are read back) and
    // squared gradient norm, which AdamW checks; loss_acc_ (1): the loss summed over the forwards since.
    double *step_stats_ = nullptr, *norm_sq_ = nullptr, *loss_acc_ = nullptr;
    float* norm_partial_ = nullptr;
    AdamWLaunchRange* ranges_dev_ = nullptr;  // the AdamW launch table (set_optimizer_multipliers)
    int n_ranges_ = 0, adamw_blocks_ = 0;
    char* acts_mem_ = nullptr;
    long acts_N_ = 0;        // rows the activation block holds (B T of the largest forward so far)
    EmbeddingPlanSize emb_;  // the current micro-batch's embedding plan
    long t_ = 0;             // AdamW updates applied (a skipped one is never counted)
    Phase phase_ = Phase::Open;
    double max_norm_ = 0;  // the clip's, for the update
    // layer_stats: the last update's learning rate and hyperparameters, whether it applied, the device tables
    double lr_ = 0;
    OptimizerHyper hp_;
    bool applied_ = false;
    std::vector<TensorRate> rates_;             // one per tensor of glayout (set_optimizer_multipliers)
    std::unique_ptr<LayerStatsDevice> lstats_;  // built at the first call, again after new multipliers
    // streams, events, staging
    cudaStream_t compute_ = nullptr, copy_ = nullptr;
    cudaEvent_t uploaded_[2], buckets_uploaded_[2], slot_free_[2], carved_, stats_ready_;
    int slot_ = 0;  // the upload slot of the current micro-batch
    mutable StagingRing ring_;
    int* last_host_ = nullptr;       // the current micro-batch's staging slot (memory_plan.h's UploadSlot layout)
    std::vector<int> bucket_count_;  // embedding_plan's histogram
    double* stats_host_ = nullptr;   // pinned (2): loss sum, squared norm
    uint64_t stats_mark_ = 0;
    // data parallelism (see the top)
    DataParallel dp_;
    Comm comm_;
    Shard shard_;  // this rank's part [begin, end) of the device vector [0, Pg), S = shard_.size
    cudaStream_t comm_stream_ = nullptr;
    cudaEvent_t grads_ready_ = nullptr, reduced_ = nullptr;
    std::vector<std::pair<size_t, size_t>> buckets_;  // [begin, end): wte, layers 0 .. L-1, the head (lnf, lm_head)

    bool sharded() const { return dp_.zero >= 1 && dp_.world() > 1; }
    size_t state_size() const { return sharded() ? shard_.size : model_.glayout.total; }  // of master, m, v
    // Elements of params_ and grads_: Pg padded to world x S (the collectives' extent).
    size_t palloc() const { return shard_.size * dp_.world(); }
    void expect(std::initializer_list<Phase> legal, const char* call) const {
        static const char* const after[] = {"a finished step (or none)",
                                            "forward",
                                            "zero_grad or forward_backward",
                                            "the last micro-step",
                                            "clip_grad_norm",
                                            "adamw_step",
                                            "adamw_step"};
        if (std::find(legal.begin(), legal.end(), phase_) == legal.end())
            throw std::logic_error(std::string("CudaEngine: ") + call + " after " + after[(int)phase_] +
                                   " (a step is zero_grad, forward_backward..., clip_grad_norm, adamw_step, "
                                   "read_stats; the logits are read after forward)");
    }
    void expect_no_update(const char* call) const {
        expect({Phase::Open, Phase::Forwarded, Phase::Accumulating, Phase::Reducing, Phase::Clipped}, call);
    }
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
    // Once per step's gradients (clip_grad_norm, or adamw_step without a clip).
    void finish_reduction() {
        if (phase_ == Phase::Clipped) return;
        if (phase_ != Phase::Reducing)
            for (const auto& b : buckets_) reduce_bucket(b.first, b.second);
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
    // Interface (unpadded) <-> device (padded) order: tensor i of one is tensor i of the other, the first
    // rows * cols elements of each device tensor are the interface tensor (rows past V are the padding).
    std::vector<float> to_padded(const float* in) const {
        std::vector<float> g(model_.glayout.total, 0.0f);
        for (size_t i = 0; i < layout_.tensors.size(); i++)
            std::copy_n(in + layout_.tensors[i].offset, layout_.tensors[i].numel(),
                        g.begin() + model_.glayout.tensors[i].offset);
        return g;
    }
    void from_padded(const float* g, float* out) const {
        for (size_t i = 0; i < layout_.tensors.size(); i++)
            std::copy_n(g + model_.glayout.tensors[i].offset, layout_.tensors[i].numel(),
                        out + layout_.tensors[i].offset);
    }
    void download_unpadded(const float* dev, float* out) const {
        std::vector<float> g(model_.glayout.total);
        cudaCheck(cudaMemcpy(g.data(), dev, g.size() * sizeof(float), cudaMemcpyDeviceToHost));
        from_padded(g.data(), out);
    }
    static UploadSlot upload_at(int* base, long N) {
        UploadSlot u;
        carve_upload(N, base, u);
        return u;
    }

    void ensure_acts(int B, int T);
    long upload_batch(const int* inputs, const int* targets, long N);
    void upload_buckets(const int* inputs, long N);
    // clipped: a training step's stats after clip_grad_norm, which with several ranks are summed over them.
    void queue_stats_readback(bool clipped) {
        cudaCheck(cudaMemcpyAsync(step_stats_, loss_acc_, sizeof(double), cudaMemcpyDeviceToDevice, compute_));
        cudaCheck(cudaMemsetAsync(loss_acc_, 0, sizeof(double), compute_));  // after the snapshot, in stream order
        // With several ranks, a training step's loss (and ZeRO-1's squared norms of the shards) summed over the
        // ranks: every rank's AdamW then skips or clips alike, and read_stats returns the job's loss.
        if (clipped && dp_.world() > 1) comm_all_reduce_sum(comm_, step_stats_, sharded() ? 2 : 1, compute_);
        cudaCheck(cudaMemcpyAsync(stats_host_, step_stats_, 2 * sizeof(double), cudaMemcpyDeviceToHost, compute_));
        cudaCheck(cudaEventRecord(stats_ready_, compute_));
        stats_mark_ = ring_.mark();
    }
    // Waits for everything queued (the read-backs of evaluation); every staging slot is free afterwards.
    void sync_all() const {
        const uint64_t m = ring_.mark();
        cudaCheck(cudaStreamSynchronize(compute_));
        ring_.synced(m);
    }
};

inline CudaEngine::CudaEngine(const ModelConfig& c, bool recompute, const DataParallel& dp, CudaDecoderMaker decoder)
    : layout_(param_layout((validate_config(c), check_gdn_on_cuda(c), c))), model_(c, recompute), decoder_(decoder),
      dp_(dp) {
    const ParamLayout& g = model_.glayout;
    shard_ = zero_shard(g.total, dp_.world(), dp_.rank());
    if (dp_.world() > 1) comm_ = comm_init(*dp_.dist);
    // The buckets, in the order the backward completes them: the head, layers L-1 .. 0, the embedding.
    const int L = model_.cfg.L();
    // A layer's first tensor is ln1_w, or ln2_w in a layer without attention.
    auto first = [&](int l) { return g.layer[l].ln1_w != SIZE_MAX ? g.layer[l].ln1_w : g.layer[l].ln2_w; };
    buckets_.push_back({0, first(0)});
    for (int l = 0; l < L; l++) buckets_.push_back({first(l), l + 1 < L ? first(l + 1) : g.lnf_w});
    buckets_.push_back({g.lnf_w, g.total});
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
    cudaCheck(cudaMalloc(&params_, palloc() * sizeof(bf16)));
    cudaCheck(cudaMalloc(&grads_, palloc() * sizeof(float)));
    const size_t S = state_size();  // ZeRO-1: master, m and v of this rank's shard only
    cudaCheck(cudaMalloc(&opt_, 3 * S * sizeof(float)));
    master_ = opt_, m_ = opt_ + S, v_ = opt_ + 2 * S;
    cudaCheck(cudaMemset(opt_, 0, 3 * S * sizeof(float)));
    cudaCheck(cudaMemset(params_, 0, palloc() * sizeof(bf16)));
    cudaCheck(cudaMemset(grads_, 0, palloc() * sizeof(float)));
    Carver small{nullptr, 0};
    for (int pass = 0; pass < 2; pass++) {  // measure, then carve
        small.bytes = 0;
        step_stats_ = small.take<double>(3), norm_partial_ = small.take<float>(GRADNORM_BLOCKS);
        if (pass == 0) cudaCheck(cudaMalloc(&small_mem_, small.bytes)), small.base = small_mem_;
    }
    norm_sq_ = step_stats_ + 1, loss_acc_ = step_stats_ + 2;
    cudaCheck(cudaMemset(step_stats_, 0, 3 * sizeof(double)));
    set_optimizer_multipliers(OptimizerMultipliers());
    model_.attach(params_, grads_);
}

// The AdamW launch table for these multipliers: the device layout's ranges at their rates (optimizer_rates.h), this
// rank's shard of them under ZeRO-1, uploaded once (after the queued work, which may still read the old table);
// layer_stats' table is built again, at these rates, at its next call.
inline void CudaEngine::set_optimizer_multipliers(const OptimizerMultipliers& mult) {
    const ParamLayout& g = model_.glayout;
    rates_ = tensor_rates(g, mult);
    const std::vector<AdamWRange> all = adamw_ranges(g, rates_);
    const std::vector<AdamWLaunchRange> ranges =
        adamw_launch_ranges(sharded() ? shard_ranges(all, shard_.offset, shard_.offset + shard_.size) : all);
    cudaCheck(cudaStreamSynchronize(compute_));
    lstats_.reset();  // its segments' rates are the old ones
    cudaCheck(cudaFree(ranges_dev_));
    cudaCheck(cudaMalloc(&ranges_dev_, ranges.size() * sizeof(AdamWLaunchRange)));
    cudaCheck(cudaMemcpy(ranges_dev_, ranges.data(), ranges.size() * sizeof(AdamWLaunchRange), cudaMemcpyHostToDevice));
    n_ranges_ = (int)ranges.size(), adamw_blocks_ = ranges.back().first_block;
}

inline CudaEngine::~CudaEngine() {
    cudaStreamSynchronize(compute_), cudaStreamSynchronize(copy_), cudaStreamSynchronize(comm_stream_);
    comm_free(comm_);
    cudaEventDestroy(grads_ready_), cudaEventDestroy(reduced_), cudaStreamDestroy(comm_stream_);
    cudaFree(params_), cudaFree(grads_), cudaFree(opt_), cudaFree(acts_mem_), cudaFree(small_mem_);
    cudaFree(ranges_dev_), cudaFreeHost(stats_host_);
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
    if (B == model_.batch() && T == model_.seq()) return;
    const long N = (long)B * T;
    if (N > acts_N_ || !acts_mem_) {
        cudaCheck(cudaFree(acts_mem_));
        cudaCheck(cudaMalloc(&acts_mem_, model_.activation_bytes(B, T)));
        acts_N_ = N;
    }
    model_.carve(B, T, acts_mem_);
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
    cudaCheck(cudaMemcpyAsync(model_.acts().upload[slot_], host, (targets ? 2 : 1) * N * sizeof(int),
                              cudaMemcpyHostToDevice, copy_));
    cudaCheck(cudaEventRecord(uploaded_[slot_], copy_));
    cudaCheck(cudaStreamWaitEvent(compute_, uploaded_[slot_], 0));
    last_host_ = host;
    return count;
}

// The embedding backward's buckets, built from the host's tokens into the slot's staging and uploaded; called
// once the forward is queued, so the sort overlaps the GPU's work.
inline void CudaEngine::upload_buckets(const int* inputs, long N) {
    const UploadSlot h = upload_at(last_host_, N);
    emb_ = embedding_plan(inputs, N, h.positions, h.seg_start, h.seg_row, h.seg_slot, h.fin_row, h.fin_first,
                          bucket_count_);
    cudaCheck(cudaMemcpyAsync(upload_at(model_.acts().upload[slot_], N).positions, h.positions,
                              (upload_ints(N) - (h.positions - h.tokens)) * sizeof(int), cudaMemcpyHostToDevice,
                              copy_));
    cudaCheck(cudaEventRecord(buckets_uploaded_[slot_], copy_));
}

inline void CudaEngine::forward(const int* inputs, const int* targets, int B, int T) {
    expect({Phase::Open, Phase::Forwarded, Phase::Accumulating}, "forward");
    const ModelConfig& c = model_.cfg;
    validate_forward_inputs(c, inputs, targets, B, T);
    const long N = (long)B * T;
    ensure_acts(B, T);
    const long count = upload_batch(inputs, targets, N);
    const Activations<bf16>& a = model_.acts();
    const UploadSlot up = upload_at(a.upload[slot_], N);
    model_.forward(up.tokens, compute_);
    softmax_crossentropy_forward(a.losses, a.lse, a.logits, targets ? up.targets : nullptr, N, c.V, model_.Vp,
                                 compute_);
    model_.mark("classifier", compute_);
    if (count) {
        loss_sum(loss_acc_, a.losses, N, 1.0 / count, compute_);
        model_.mark("loss_sum", compute_);
    }
    cudaCheck(cudaEventRecord(slot_free_[slot_], compute_));
    phase_ = Phase::Forwarded;
}

inline void CudaEngine::forward_backward(const int* inputs, const int* targets, int B, int T, float grad_scale,
                                         bool last_micro_step) {
    if (!targets) throw std::logic_error("forward_backward needs targets");
    expect({Phase::Open, Phase::Forwarded, Phase::Accumulating}, "forward_backward");
    const ModelConfig& c = model_.cfg;
    validate_forward_inputs(c, inputs, targets, B, T);
    const long N = (long)B * T;
    ensure_acts(B, T);
    phase_ = Phase::Accumulating;  // new gradients (and no logits): the step's reduction is still to come
    const long count = upload_batch(inputs, targets, N);
    if (count == 0) {  // every target masked: the loss is the constant 0, no gradient
        cudaCheck(cudaEventRecord(slot_free_[slot_], compute_));
        return;
    }
    const Activations<bf16>& a = model_.acts();
    const UploadSlot up = upload_at(a.upload[slot_], N);
    model_.forward(up.tokens, compute_);
    upload_buckets(inputs, N);  // while the GPU runs the forward
    const float dloss = grad_scale / (float)count;
    softmax_crossentropy_fused(a.losses, a.logits, up.targets, N, c.V, model_.Vp, dloss, compute_);
    model_.mark("classifier", compute_);
    loss_sum(loss_acc_, a.losses, N, (double)grad_scale / count, compute_);
    model_.mark("loss_sum", compute_);
    // The last micro-step of a data-parallel step reduces each bucket as soon as the backward completes it.
    const bool reduce_now = last_micro_step && dp_.world() > 1;
    model_.backward(
        {up.positions, up.seg_start, up.seg_row, up.seg_slot, up.fin_row, up.fin_first, emb_.segments, emb_.multi},
        buckets_uploaded_[slot_],
        [&](size_t k) {
            if (reduce_now) reduce_bucket(buckets_[k].first, buckets_[k].second);
        },
        compute_);
    if (reduce_now) phase_ = Phase::Reducing;
    cudaCheck(cudaEventRecord(slot_free_[slot_], compute_));
}

inline void CudaEngine::target_logprobs(const int* targets, float* out) const {
    if (phase_ != Phase::Forwarded) throw std::logic_error("target_logprobs needs a forward() (not forward_backward)");
    const Activations<bf16>& a = model_.acts();
    const long N = (long)model_.batch() * model_.seq();
    int* host = ring_.acquire(std::max(N, (long)1), compute_);
    std::copy_n(targets, N, host);
    int* dev = upload_at(a.upload[slot_], N).targets;  // this forward's slot; the compute stream orders it
    cudaCheck(cudaMemcpyAsync(dev, host, N * sizeof(int), cudaMemcpyHostToDevice, compute_));
    ::target_logprobs(a.logprobs, a.logits, a.lse, dev, N, model_.Vp, compute_);
    float* back = reinterpret_cast<float*>(ring_.acquire(std::max(N, (long)1), compute_));
    cudaCheck(cudaMemcpyAsync(back, a.logprobs, N * sizeof(float), cudaMemcpyDeviceToHost, compute_));
    sync_all();
    std::copy_n(back, N, out);
}

inline void CudaEngine::logits_at(int b, int t, float* out) const {
    if (phase_ != Phase::Forwarded) throw std::logic_error("logits_at needs a forward() (not forward_backward)");
    const int V = model_.cfg.V;
    bf16* back = reinterpret_cast<bf16*>(ring_.acquire((V + 1) / 2, compute_));
    cudaCheck(cudaMemcpyAsync(back, model_.acts().logits + ((size_t)b * model_.seq() + t) * model_.Vp, V * sizeof(bf16),
                              cudaMemcpyDeviceToHost, compute_));
    sync_all();
    for (int v = 0; v < V; v++) out[v] = back[v];
}
