// run/cost_model.h: what a training step of the CUDA engine (model.cuh) costs on a GPU, op by op, computed without
// one: every kernel launch, memset and matmul of a step in the order the engine queues it, with the bytes it
// must move through HBM (each input read once, each output written once: the ideal) and the FLOPs it does, and
// the time that takes at a roofline. dev/bench_model prints it grouped by op (and, on a GPU, the measured time of
// each op next to it: the engine's OpTimer marks use the same names), so kernels are planned without a GPU and
// the one that misses its roofline is found as soon as a GPU is lent. A test checks that the ops listed here are
// exactly the ops the engine marks, in order.
//   step_ops        the ops of one step (zero_grad, n_micro micro-steps, grad_norm, adamw)
//   RooflineGpu     HBM bandwidth and dense bf16 peak (default: H100 SXM, 3.35 TB/s and 989 TFLOP/s)
//   op_time         max(bytes / bandwidth, FLOPs / peak); attention at an assumed 50% of the tensor peak; its
//                   FLOPs are those attention.cuh executes: the tiles its kernels visit under the causal mask and
//                   the layer's window (attention_span.h's att_visits; masked parts of edge tiles included), about
//                   forward 2 B T^2 w and backward 7 B T^2 w for a global layer, about 4 B T (W + tile) w and 14 B T
//                   (W + tile) w with a window W < T (3 launches: D, dK/dV, and a dQ pass that recomputes the scores
//                   and dP for determinism)
// The expected time adds what rooflines leave out, as stated assumptions: matmuls at 75% of the tensor peak
// (cuBLASLt's typical at these shapes), memory-bound kernels at 80% of HBM bandwidth, 2 us per launch that does
// not hide behind the previous one (a floor for the tiny ones). Both are estimates until bench_model measures.
// One more floor: an op whose one block walks a long dependent chain takes at least that walk (chain_s): the
// embedding backward's segments of at most EMB_SEGMENT positions of one token (embedding.cuh), at EMB_POSITION_S
// each, so the most frequent token (3-5% of a micro-batch in real text; 4% assumed, or measured from the
// benchmark's tokens) costs at most one segment's walk.
// A gdn layer is costed as model.cuh runs it (its gdn_forward / gdn_backward, issue 53): the matmuls qkv (3 w rows),
// ba (2 h) and z (w) around gdn.cuh's per-row kernels and the chunked delta rule's, each kernel an op of
// gdn_kernel_costs (the one source of these figures, which dev/gdn_estimate.py prints as docs/gpu.md's table: an
// estimate until the bundle's gdn stage measures them), the chunk kernels' FLOPs at attention_eff of the peak.
// Does not: model L2 hits (the fused classifier's second read of a row, the norms' re-reads are taken as
// L2-served, i.e. free), overlap between kernels, or communication.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "attention_span.h"
#include "memory_plan.h"
#include "model_config.h"

struct OpCost {
    std::string name;  // as model.cuh marks it
    double bytes = 0, flops = 0;
    int launches = 1;
    bool attention = false, matmul = false;
    double chain_s = 0;  // the longest dependent walk of one block (a floor on the expected time)
};

// The token statistics the embedding backward's cost depends on: defaults for real text (estimates), or measured
// from a micro-batch's embedding_plan (dev/bench_model does, from its real-text tokens).
struct CostOptions {
    double most_frequent = 0.04;            // the most frequent token's share of a micro-batch (real text: 3-5%)
    double partials_per_position = 0.0125;  // partial rows per position: ~40% of real text is tokens seen > 32
                                            // times in a micro-batch, one row per 32 of their positions
    double distinct = 0;                    // distinct tokens of a micro-batch (0: the bound min(N, V))
};
constexpr double EMB_POSITION_S = 1e-7;  // one position of a block's walk: a 16-byte load per thread, est. 4 in
                                         // flight (~0.4 us of HBM latency each): an estimate

struct RooflineGpu {
    double bandwidth = 3.35e12, peak = 989e12;  // bytes/s, FLOP/s: H100 SXM
    double attention_eff = 0.5, matmul_eff = 0.75, memory_eff = 0.8, launch_s = 2e-6;
};

// Roofline seconds of one op (attention at attention_eff of the peak).
inline double op_time(const OpCost& o, const RooflineGpu& g) {
    const double peak = o.attention ? g.attention_eff * g.peak : g.peak;
    return std::max(o.bytes / g.bandwidth, o.flops / peak);
}
// Expected seconds: the stated efficiencies and the launch floor.
inline double op_expected(const OpCost& o, const RooflineGpu& g) {
    const double peak = o.attention ? g.attention_eff * g.peak : o.matmul ? g.matmul_eff * g.peak : g.peak;
    return std::max({o.bytes / (g.memory_eff * g.bandwidth), o.flops / peak, o.launches * g.launch_s, o.chain_s});
}

// The FLOPs one sequence of T costs a layer's attention kernels, counted per tile they visit (att_visits): the
// forward's S = Q K^T and O = P V, the dQ kernel's S, dP and dQ, the dK/dV kernel's S^T and dP^T (phase A) and
// dV, dK (phase B), each 2 hd per (query, key) product, over the h query heads.
struct AttentionFlops {
    double forward = 0, backward = 0;
};
inline AttentionFlops attention_flops(const LayerSpec& s, int T) {
    const AttVisits v = att_visits(s.head_dim(), T, s.window);
    const double hd2 = 2.0 * s.head_dim() * s.heads;
    return {hd2 * 2 * v.fwd_pairs, hd2 * (3 * v.dq_pairs + 2 * v.dkv_a_pairs + 2 * v.dkv_b_pairs)};
}

// The kernels of a gdn layer at B x T, h heads of hd (w = h hd), named as model.cuh marks them: FLOPs and the bytes
// each must move through HBM (its inputs read once, its outputs written once; the per-row backwards' partial sums
// left out, hd / 8 bytes a row), and its launches. Kernels not yet measured: an ESTIMATE.
//   gdn_conv_forward    the causal conv + SiLU over 3 w channels and q's and k's L2 norms: reads p (3 w bf16),
//                       writes u (3 w bf16) and the inverse norms (2 h fp32); the conv's 24 w FLOPs a row
//   gdn_gates_forward   reads ba (2 h bf16), writes beta and g (2 h fp32)
//   gdn_chunk_forward   the chunked delta rule: reads q, k, v (bf16) and beta, g, writes o (bf16) and each chunk's
//                       starting state (fp32, hd x hd per head, ceil(T / 64) chunks); FLOPs as model_config.h's
//                       layer_cost counts the chunked form, h (6 hd^2 + 10 C hd + 2/3 C^2) a row, C = min(64, T)
//                       (counted, the square products in full; not the executed count); 3 launches
//   gdn_norm_forward    the gated RMSNorm: reads o and z (w bf16 each), writes y (w bf16) and h inverse rms
//   gdn_norm_backward   reads dy, o, z and the rms, writes d_o and dz; 2 launches (with its weight's reduction)
//   gdn_chunk_backward  reads q, k, v, beta, g, dout and the states, writes dq, dk, dv, dbeta, dg; twice the
//                       forward's FLOPs; 3 launches
//   gdn_gates_backward  reads dbeta, dg, ba, beta and g, writes dba; 2 launches
//   gdn_conv_backward   reads du, u, the norms and p, writes dp; twice the conv's FLOPs; 2 launches
struct GdnKernelCost {
    const char* name;
    double flops, bytes;
    int launches;
    bool chunk;  // the chunked delta rule's (FLOPs on tensor cores)
};
inline std::vector<GdnKernelCost> gdn_kernel_costs(double B, double T, double h, double hd) {
    const double N = B * T, w = h * hd, C = std::min(64.0, T), bf = 2, f4 = 4;
    const double rule = N * h * (6 * hd * hd + 10 * C * hd + 2.0 / 3.0 * C * C);
    const double states = B * h * std::ceil(T / 64) * hd * hd * f4, qkv = 3 * N * w * bf, gates = 2 * N * h * f4;
    return {{"gdn_conv_forward", 24 * N * w, N * (6 * w * bf + 2 * h * f4), 1, false},
            {"gdn_gates_forward", 0, N * 2 * h * bf + gates, 1, false},
            {"gdn_chunk_forward", rule, qkv + gates + N * w * bf + states, 3, true},
            {"gdn_norm_forward", 0, N * (3 * w * bf + h * f4), 1, false},
            {"gdn_norm_backward", 0, N * (5 * w * bf + h * f4), 2, false},
            {"gdn_chunk_backward", 2 * rule, qkv + gates + N * w * bf + states + qkv + gates, 3, true},
            {"gdn_gates_backward", 0, 2 * gates + 2 * N * 2 * h * bf, 2, false},
            {"gdn_conv_backward", 48 * N * w, N * (12 * w * bf + 2 * h * f4), 2, false}};
}

// The ops of one training step at micro-batch B x T, n_micro micro-steps, in the engine's order.
inline std::vector<OpCost> step_ops(const ModelConfig& c, int B, int T, long n_micro, bool recompute,
                                    const CostOptions& opt = CostOptions()) {
    const double N = (double)B * T, bf = 2, f4 = 4;
    const int L = c.L(), D = c.D(), Df = c.Df(), d = c.d, Vp = padded_vocab(c.V);
    const double Pg = (double)device_layout(c).total;
    std::vector<OpCost> ops;
    auto op = [&](const char* name, double bytes, double flops = 0, int launches = 1) {
        ops.push_back({name, bytes, flops, launches, false, false});
    };
    // out (M, n) = A (M, k) B (k, n); weight gradients accumulate into fp32 (read and write C).
    auto mm = [&](const char* name, double M, double n, double k, bool dW) {
        const double bytes = dW ? (M * k + n * k) * bf + 2 * M * n * f4 : (M * k + k * n + M * n) * bf;
        ops.push_back({name, bytes, 2 * M * n * k, 1, false, true});
    };
    auto norm_fwd = [&](double w) { op("norm_forward", 2 * N * w * bf + 2 * N * f4); };
    auto resid_norm = [&](double wy, double wn) {
        op("residual_norm_forward", (2 * N * D + N * wy + N * wn) * bf + 2 * N * f4);
    };
    auto norm_bwd = [&](double w, bool ln) {
        const double partial_bytes = std::ceil(N / 64) * w * (ln ? 2 : 1) * f4;  // written, then read by the finish
        op("norm_backward", 4 * N * w * bf + 2 * N * f4 + 2 * partial_bytes + 2 * w * f4 * (ln ? 2 : 1), 0, 2);
    };
    const bool ln = c.norm == NormType::LayerNorm;
    std::vector<AttentionFlops> att(L);  // per layer, once: its tiles do not change between micro-steps
    for (int l = 0; l < L; l++) att[l] = attention_flops(c.layers[l], T);
    // One of a gdn layer's kernels (gdn_kernel_costs, by name) as an op.
    auto gdn_op = [&](int l, const std::string& name) {
        for (const GdnKernelCost& k : gdn_kernel_costs(B, T, c.layers[l].heads, c.layers[l].head_dim()))
            if (name == k.name) ops.push_back({k.name, k.bytes, k.flops, k.launches, k.chunk, false});
    };
    const double U = opt.distinct > 0 ? std::min(opt.distinct, N) : std::min(N, (double)c.V);  // distinct tokens

    op("zero_grad", Pg * f4);
    for (long k = 0; k < n_micro; k++) {
        op("embedding_forward", N * 4 + N * d * bf + N * D * bf);
        norm_fwd(c.layers[0].width);
        for (int l = 0; l < L; l++) {  // the sub-blocks a layer has (model.cuh); the next norm's width after each
            const double w = c.layers[l].width, hid = c.hidden_of(l), h = c.layers[l].heads;
            const double qkv = c.layers[l].qkv_rows(), next = l + 1 < L ? c.layers[l + 1].width : Df;
            if (c.layers[l].gdn()) {
                mm("matmul qkv", N, 3 * w, w, false);
                gdn_op(l, "gdn_conv_forward");
                mm("matmul ba", N, 2 * h, w, false);
                gdn_op(l, "gdn_gates_forward");
                gdn_op(l, "gdn_chunk_forward");
                mm("matmul z", N, w, w, false);
                gdn_op(l, "gdn_norm_forward");
                mm("matmul o", N, w, w, false);
                resid_norm(w, c.layers[l].mlp ? w : next);
            } else if (c.layers[l].attention) {
                mm("matmul qkv", N, qkv, w, false);
                if (c.layers[l].rope)
                    op("rope_forward", 2 * N * (w + (qkv - w) / 2) * bf);  // q and k, read and written
                ops.push_back(
                    {"attention_forward", (N * qkv + N * w) * bf + N * h * f4, B * att[l].forward, 1, true, false});
                mm("matmul o", N, w, w, false);
                resid_norm(w, c.layers[l].mlp ? w : next);
            }
            if (!c.layers[l].mlp) continue;
            mm("matmul fc", N, 2 * hid, w, false);
            op("swiglu_forward", (N * 2 * hid + N * hid) * bf);
            mm("matmul proj", N, w, hid, false);
            resid_norm(w, next);
        }
        mm("matmul logits", N, Vp, d, false);
        op("classifier", 2 * N * Vp * bf + N * (4 + f4));
        op("loss_sum", N * f4);
        if (Df != d) op("memset", N * (Df - d) * bf);
        mm("matmul logits dx", N, d, Vp, false);
        mm("matmul logits dW", Vp, d, N, true);
        op("memset", N * D * bf);
        norm_bwd(Df, ln);
        for (int l = L - 1; l >= 0; l--) {
            const double w = c.layers[l].width, hid = c.hidden_of(l), h = c.layers[l].heads;
            const double qkv = c.layers[l].qkv_rows();
            if (c.layers[l].mlp) {
                mm("matmul proj dx", N, hid, w, false);
                if (recompute) op("swiglu_forward", (N * 2 * hid + N * hid) * bf);
                mm("matmul proj dW", w, hid, N, true);
                op("swiglu_backward", (N * 2 * hid + N * hid + N * 2 * hid) * bf);
                mm("matmul fc dx", N, w, 2 * hid, false);
                if (recompute) norm_fwd(w);
                mm("matmul fc dW", 2 * hid, w, N, true);
                norm_bwd(w, ln);
            }
            if (c.layers[l].gdn()) {
                mm("matmul o dx", N, w, w, false);
                mm("matmul o dW", w, w, N, true);
                gdn_op(l, "gdn_norm_backward");
                mm("matmul z dx", N, w, w, false);
                if (recompute) norm_fwd(w);
                mm("matmul z dW", w, w, N, true);
                gdn_op(l, "gdn_chunk_backward");
                gdn_op(l, "gdn_gates_backward");
                mm("matmul ba dx", N, w, 2 * h, false);
                mm("matmul ba dW", 2 * h, w, N, true);
                gdn_op(l, "gdn_conv_backward");
                mm("matmul qkv dx", N, w, 3 * w, false);
                mm("matmul qkv dW", 3 * w, w, N, true);
                norm_bwd(w, ln);
                continue;
            }
            if (!c.layers[l].attention) continue;
            mm("matmul o dx", N, w, w, false);
            mm("matmul o dW", w, w, N, true);
            ops.push_back({"attention_backward", (N * qkv + 2 * N * w + N * qkv) * bf + 3 * N * h * f4,
                           B * att[l].backward, 3, true, false});
            if (c.layers[l].rope) op("rope_backward", 2 * N * (w + (qkv - w) / 2) * bf);
            mm("matmul qkv dx", N, w, qkv, false);
            if (recompute) norm_fwd(w);
            mm("matmul qkv dW", qkv, w, N, true);
            norm_bwd(w, ln);
        }
        // dx rows once, the plan, dwte's touched rows read and written; with segments also the frequent tokens'
        // partial rows, written and read back by the second launch.
        const double most = std::max(1.0, std::round(opt.most_frequent * N));
        const double partials = std::round(opt.partials_per_position * N);
        op("embedding_backward", N * d * bf + 6 * N * 4 + 2 * U * d * f4 + 2 * partials * d * f4, 0, 2);
        ops.back().chain_s = std::min(most, (double)EMB_SEGMENT) * EMB_POSITION_S;
    }
    op("grad_norm", Pg * f4, 0, 2);
    op("adamw", Pg * (4 * f4 + 3 * f4 + bf));
    return ops;
}

// The ops grouped by name, in order of first appearance: count, bytes, FLOPs, roofline and expected seconds.
struct OpGroup {
    std::string name;
    int count = 0, launches = 0;
    double bytes = 0, flops = 0, roofline_s = 0, expected_s = 0;
};
inline std::vector<OpGroup> group_ops(const std::vector<OpCost>& ops, const RooflineGpu& g) {
    std::vector<OpGroup> out;
    for (const OpCost& o : ops) {
        auto it = std::find_if(out.begin(), out.end(), [&](const OpGroup& x) { return x.name == o.name; });
        if (it == out.end()) out.push_back({o.name}), it = out.end() - 1;
        it->count++, it->launches += o.launches, it->bytes += o.bytes, it->flops += o.flops;
        it->roofline_s += op_time(o, g), it->expected_s += op_expected(o, g);
    }
    return out;
}
