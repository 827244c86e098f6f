// layer_stats.cuh: the per-layer training signals (layer_stats.h) on the device, after a step's update. Matches the
// CPU engine's layer_stats (ref/cpu_engine.h), each tensor's update at its own rate (optimizer_rates.h). The
// segment table uploaded again with the update's coefficients, three launches and one read-back of 5 L doubles:
//   layer_param_sums_kernel  one pass over the layers' parameters: grads, master, m, v (fp32, 16 bytes each)
//                            -> per block {sum g^2, sum p_before^2, sum delta^2} (matrices only for the last two)
//   layer_out_sums_kernel    one pass over each layer's residual slice after it (bf16 (N, w_l), row stride D)
//                            -> per block sum x^2, LSTATS_OUT_BLOCKS blocks per layer
//   layer_stats_final_kernel one thread per layer adds its blocks' partials in order, in double -> (5, L): the
//                            gradient's over its attention blocks and over its MLP blocks apart (the table's mid)
// Deterministic, no atomics: each block covers a fixed share of one segment (a layer's tensor, cut to the
// rank's part of the flat vector), and the partials of layer l are the contiguous blocks the table gives it.
// Does not: reduce across ranks (the engine all-reduces the 5 L sums), or read anything back itself.
#pragma once

#include <algorithm>

#include "cuda_common.cuh"
#include "layer_stats.h"  // the table the host builds (LayerStatsPlan), AdamWDelta
#include "vec.cuh"

constexpr int LSTATS_BLOCK = 256;
constexpr int LSTATS_PER_BLOCK = LSTATS_BLOCK * 16;  // elements a block covers (grid-stride beyond the cap)
constexpr int LSTATS_MAX_BLOCKS = 64;                // per segment: at most 64 partials each, ~8 segments a layer
constexpr int LSTATS_OUT_BLOCKS = 16;                // per layer, over its N rows

// ---------------------------------------------------------------------------------------------------------
// kernels
// ---------------------------------------------------------------------------------------------------------

// partial[3 b + k]: block b's sums of squares of the gradient (k = 0), the weight before the update (1) and the
// update (2); delta = cw p' - cu m' / (sqrt(v' rbc2) + eps) with its segment's coefficients (its tensor's rate:
// layer_stats.h's LayerStatsPlan::set_update).
static __global__ void layer_param_sums_kernel(float* partial, const LayerStatsSegment* segs, int nsegs,
                                               const float* grads, const float* master, const float* m,
                                               const float* v) {
    SHARED(float[32], s0);
    SHARED(float[32], s1);
    SHARED(float[32], s2);
    int lo = 0, hi = nsegs - 1;  // the segment whose blocks hold blockIdx.x
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (segs[mid].first_block <= (int)blockIdx.x) lo = mid;
        else hi = mid - 1;
    }
    const LayerStatsSegment sg = segs[lo];
    const float cw = sg.cw, cu = sg.cu, rbc2 = sg.rbc2, eps = sg.eps;
    float g2 = 0.0f, w2 = 0.0f, d2 = 0.0f;
    const size_t stride = (size_t)sg.blocks * blockDim.x;
    for (size_t i = (size_t)(blockIdx.x - sg.first_block) * blockDim.x + threadIdx.x; i < sg.n; i += stride) {
        const float g = grads[sg.offset + i];
        g2 += g * g;
        if (!sg.matrix) continue;
        const float p = master[sg.state + i];
        const float d = cu == 0.0f ? 0.0f : cw * p - cu * m[sg.state + i] / (sqrtf(v[sg.state + i] * rbc2) + eps);
        w2 += (p - d) * (p - d), d2 += d * d;
    }
    g2 = block_sum(g2, s0), w2 = block_sum(w2, s1), d2 = block_sum(d2, s2);
    if (threadIdx.x == 0)
        partial[3 * blockIdx.x] = g2, partial[3 * blockIdx.x + 1] = w2, partial[3 * blockIdx.x + 2] = d2;
}

// partial[l LSTATS_OUT_BLOCKS + b] = sum of x^2 over rows b, b + LSTATS_OUT_BLOCKS, ... of layer l's slice:
// residual state at[l] (N, D), columns [0, width[l]).
static __global__ void layer_out_sums_kernel(float* partial, const bf16* resid, const int* at, const int* width, long N,
                                             int D) {
    SHARED(float[32], scratch);
    const int l = blockIdx.x / LSTATS_OUT_BLOCKS, b = blockIdx.x % LSTATS_OUT_BLOCKS, w = width[l];
    const bf16* x = resid + (size_t)at[l] * N * D;
    float s = 0.0f;
    for (long n = b; n < N; n += LSTATS_OUT_BLOCKS)
        for (int j = threadIdx.x; j < w; j += blockDim.x) {
            const float y = __bfloat162float(x[n * D + j]);
            s += y * y;
        }
    s = block_sum(s, scratch);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// out (5, L), LayerSums' order: grad_sq_attn, grad_sq_mlp, weight_sq, delta_sq, out_sq; layer l's parameter
// partials are blocks [first[l], first[l+1]), its attention tensors' [first[l], mid[l]).
static __global__ void layer_stats_final_kernel(double* out, const float* param_partial, const float* out_partial,
                                                const int* first, const int* mid, int L) {
    const int l = blockIdx.x * blockDim.x + threadIdx.x;
    if (l >= L) return;
    double g[2] = {0.0, 0.0}, s[2] = {0.0, 0.0}, o = 0.0;
    for (int b = first[l]; b < first[l + 1]; b++) {
        g[b < mid[l] ? 0 : 1] += (double)param_partial[3 * b];
        for (int k = 0; k < 2; k++) s[k] += (double)param_partial[3 * b + 1 + k];
    }
    for (int b = 0; b < LSTATS_OUT_BLOCKS; b++) o += (double)out_partial[l * LSTATS_OUT_BLOCKS + b];
    out[l] = g[0], out[L + l] = g[1], out[2 * L + l] = s[0], out[3 * L + l] = s[1], out[4 * L + l] = o;
}

// ---------------------------------------------------------------------------------------------------------
// launchers
// ---------------------------------------------------------------------------------------------------------

// The tables (layer_stats_plan's, uploaded) and scratch of one model's per-layer statistics, allocated once; the
// segments again with each call's update coefficients.
class LayerStatsDevice {
  public:
    explicit LayerStatsDevice(const LayerStatsPlan& plan) : L_((int)plan.at.size()), plan_(plan) {
        std::vector<LayerStatsSegment> segs = plan.segs;
        const std::vector<int>& first = plan.first;
        const int blocks = plan.blocks;
        nsegs_ = (int)segs.size(), blocks_ = blocks;
        if (segs.empty()) segs.push_back({0, 0, 0, 0, 0, 0, 0});  // a rank whose part holds no layer
        const size_t seg_bytes = segs.size() * sizeof(LayerStatsSegment), ints = 4 * (size_t)L_ + 1;
        const size_t partials = 3 * (size_t)std::max(blocks, 1) + (size_t)L_ * LSTATS_OUT_BLOCKS;
        cudaCheck(cudaMalloc(
            &mem_, seg_bytes + ints * sizeof(int) + partials * sizeof(float) + kSums * L_ * sizeof(double) + 64));
        char* p = mem_;
        out_ = (double*)p, p += kSums * L_ * sizeof(double);
        segs_ = (LayerStatsSegment*)p, p += seg_bytes;
        first_ = (int*)p, mid_ = first_ + L_ + 1, at_ = mid_ + L_, width_ = at_ + L_, p += ints * sizeof(int);
        p = mem_ + ((p - mem_ + 15) / 16) * 16;
        param_partial_ = (float*)p, out_partial_ = param_partial_ + 3 * std::max(blocks, 1);
        cudaCheck(cudaMemcpy(segs_, segs.data(), seg_bytes, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(first_, first.data(), (L_ + 1) * sizeof(int), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(mid_, plan.mid.data(), L_ * sizeof(int), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(at_, plan.at.data(), L_ * sizeof(int), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(width_, plan.width.data(), L_ * sizeof(int), cudaMemcpyHostToDevice));
    }
    ~LayerStatsDevice() { cudaFree(mem_); }
    LayerStatsDevice(const LayerStatsDevice&) = delete;
    LayerStatsDevice& operator=(const LayerStatsDevice&) = delete;

    // Queues the sums (5, L) doubles into sums(): grads, master, m, v as the engine holds them (master, m, v
    // from `state`), the residual states (N rows of D) of the last micro-batch; the update AdamW step t applied
    // at lr and hp, each tensor at its rate (or none: applied false).
    void queue(const float* grads, const float* master, const float* m, const float* v, bool applied, double lr,
               const OptimizerHyper& hp, long t, const bf16* resid, long N, int D, cudaStream_t stream) {
        if (blocks_ > 0) {  // else every layer's range of partials is empty: the final kernel adds none
            plan_.set_update(applied, lr, hp, t);  // copied to staging before the call returns (pageable memory)
            cudaCheck(cudaMemcpyAsync(segs_, plan_.segs.data(), nsegs_ * sizeof(LayerStatsSegment),
                                      cudaMemcpyHostToDevice, stream));
            LAUNCH(blocks_, LSTATS_BLOCK, 0, stream, layer_param_sums_kernel)
            (param_partial_, segs_, nsegs_, grads, master, m, v);
            cudaCheck(cudaGetLastError());
        }
        LAUNCH(L_ * LSTATS_OUT_BLOCKS, LSTATS_BLOCK, 0, stream, layer_out_sums_kernel)
        (out_partial_, resid, at_, width_, N, D);
        cudaCheck(cudaGetLastError());
        LAUNCH((L_ + 31) / 32, 32, 0, stream, layer_stats_final_kernel)
        (out_, param_partial_, out_partial_, first_, mid_, L_);
        cudaCheck(cudaGetLastError());
    }
    static constexpr int kSums = LayerSums::kCount;
    double* sums() const { return out_; }  // (kSums, L) on the device, LayerSums' order

  private:
    int L_, nsegs_ = 0, blocks_ = 0;
    LayerStatsPlan plan_;  // the host's table: its segments' coefficients set per call
    char* mem_ = nullptr;
    double* out_ = nullptr;
    LayerStatsSegment* segs_ = nullptr;
    int *first_ = nullptr, *mid_ = nullptr, *at_ = nullptr, *width_ = nullptr;
    float *param_partial_ = nullptr, *out_partial_ = nullptr;
};
