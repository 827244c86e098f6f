// dp_engine_check.cpp: the CUDA engine's data parallelism (model.cuh: per-layer reductions during the last
// micro-step's backward, ZeRO-1's sharded AdamW and parameter all-gather) on the CUDA-on-CPU executor, across real
// MPI ranks: comm.cuh's collectives are MPI on the executor's host memory. Run by test/test_dist.cpp under mpirun
// with 2 and 3 ranks (3: shards of a vector that no layer boundary divides evenly).
//
// Three times: on layers of three widths, on every layer column (KV groups, windows, layers without attention or
// without an MLP, own hidden sizes), and on a hybrid (Gated DeltaNet layers beside attention). Every rank trains three engines on the same steps: ZeRO-1 and ZeRO-0 on its
// own rows of each global micro-batch (2 micro-steps each; on even steps the last one reduces during its backward,
// on odd steps clip_grad_norm does, except the last, step 3, which skips clip_grad_norm: adamw_step must then
// reduce and wait by itself), and, as the oracle, a one-rank engine on all of the rows (B x world). It checks:
//   - the first step's summed gradient: ZeRO-0's whole vector and ZeRO-1's shard (what each rank holds of it)
//     against the one-rank engine's, within 1e-5 of the largest gradient;
//   - after every step, every rank holds bit-identical parameters (a hash of them, all-gathered), for ZeRO-1
//     and ZeRO-0, and losses and gradient norms match the one-rank engine's within 1e-4 relative (not after step 3,
//     which reads no norm and whose loss is each rank's own: there the parameter hashes show whether ZeRO-0
//     reduced, and the moments below whether ZeRO-1 did);
//   - after every clipped step, the per-layer signals (Engine::layer_stats) of both within 1e-3 relative of the
//     one-rank engine's (measured: 1.7e-4 for the widths model, whose drift reaches a single layer's norm more than
//     the global one's, and 3.5e-8 for the every-column model; a shard counted twice or not at all is off by 40%);
//   - the optimizer ranges of the ranks tile [0, P); ZeRO-1's moments, read through the interface (the device
//     shard mapped to interface order), equal ZeRO-0's over the same range within 1e-4 of the largest; and
//     get/set_optimizer round-trip a rank's shard.
// Tolerances: the ranks add the rows' gradient contributions in another order than the one-rank engine (each
// rank's B rows, then the sum over ranks), so fp32 gradients differ in their last bits (measured: 1.8e-7 of the
// largest). AdamW's first steps are close to lr x sign(g), so an element whose gradient is nearly zero can move the
// other way, and the models drift apart by rounding: measured over 4 steps at lr 1e-3, the widths model's losses
// within 3.3e-5 and norms within 9.9e-5 relative at 2 and 3 ranks, the every-column model's within 3e-8 and 2e-8
// (the line printed with "ok" shows this run's). An unreduced or doubly counted gradient, a piece reduced to the
// wrong rank, a shard updated twice or not at all, or a wrong all-gather are off by the gradient itself or by whole
// updates: 1e-1 of the largest gradient, 1e-2 of the loss.
// Prints one line per rank ("ok", or what differed, and both models' measured differences) and exits non-zero on
// any failure.
#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "util/io.h"
#include "cuda_engine.cuh"

namespace {

ModelConfig uneven_config() {  // widths 64, 32, 64 (Df = 64 > d), heads 4: layers of three sizes
    ModelConfig c;
    c.V = 37, c.T = 8, c.mlp_multiple = 32, c.d = 32, c.h_base = 4;
    c.layers = {{64, 4}, {32, 4}, {64, 4}};
    c.norm = NormType::RMSNorm, c.tied = false, c.mup_attn = true, c.init_width_scale = true, c.mlp_ratio = 4.0;
    validate_config(c);
    return c;
}

// Every layer column on the same widths: the first layer without attention (its bucket starts at ln2_w), GQA with
// a window of 3 and its own hidden size, MQA without an MLP, GQA with a window of 2.
ModelConfig columns_config() {
    ModelConfig c = uneven_config();
    c.layers = {{32, 2, 0, 64, 0, false}, {64, 4, 2, 96, 3}, {32, 4, 1, 0, 0, true, false}, {64, 4, 2, 0, 2}};
    validate_config(c);
    return c;
}

// Gated DeltaNet layers (head_dim 16 and 32; their conv_w, wz, wba, a_log, dt_bias and onorm_w sharded, reduced
// and updated like every tensor) beside attention, on the same widths.
ModelConfig hybrid_config() {
    ModelConfig c = uneven_config();
    c.layers[0].mixer = 1, c.layers[2].heads = 2, c.layers[2].mixer = 1;
    validate_config(c);
    return c;
}

// What one model's check measured: failures (the first one's words) and the worst differences from one rank.
struct Outcome {
    int bad = 0;
    std::string why;
    double worst_grad = 0, worst_loss = 0, worst_norm = 0, worst_layer = 0;
};

// The rows of micro-batch k of step s: (rows, T) inputs and targets, the same on every rank.
void global_batch(const ModelConfig& c, int rows, int T, int s, int k, std::vector<int>& in, std::vector<int>& tg) {
    uint64_t x = 1000003ull * (s + 1) + 7919ull * (k + 1);
    in.resize((size_t)rows * T), tg.resize((size_t)rows * T);
    for (size_t i = 0; i < in.size(); i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        in[i] = (int)((x >> 33) % c.V);
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        tg[i] = (int)((x >> 33) % c.V);
    }
}

// The checks above for one model, on every rank (each call is collective).
Outcome check(Dist& dist, const ModelConfig& c) {
    const int R = dist.rank, W = dist.world, B = 2, T = 8, n_micro = 2;
    CudaEngine z1(c, false, DataParallel{&dist, 1}), z0(c, false, DataParallel{&dist, 0}), one(c);
    Engine* engines[3] = {&z1, &z0, &one};
    for (Engine* e : engines) e->init_params(11);
    OptimizerHyper hp;
    Outcome out;
    auto fail = [&](const std::string& what) {
        if (out.why.empty()) out.why = what;
        out.bad++;
    };
    const size_t P = z1.num_params();
    std::vector<float> p[3];
    std::vector<float> g[3];
    double &worst_grad = out.worst_grad, &worst_loss = out.worst_loss, &worst_norm = out.worst_norm;
    for (int s = 0; s < 4; s++) {
        const bool clip = s != 3;
        double loss[3], norm[3];
        LayerStats ls[3];
        std::vector<int> in, tg;
        for (int e = 0; e < 3; e++) {
            engines[e]->zero_grad();
            for (int k = 0; k < n_micro; k++) {
                global_batch(c, B * W, T, s, k, in, tg);
                const bool all = e == 2;  // the one-rank engine takes every row, the others their own B
                const size_t at = all ? 0 : (size_t)R * B * T;
                // Even steps say which micro-step is the last (the reduction runs during its backward), odd steps
                // do not (clip_grad_norm reduces everything): both paths every run.
                engines[e]->forward_backward(in.data() + at, tg.data() + at, all ? B * W : B, T,
                                             1.0f / (float)(n_micro * (all ? 1 : W)), k + 1 == n_micro && s % 2 == 0);
            }
            if (clip) engines[e]->clip_grad_norm(1.0);
            if (s == 0) {  // the summed gradient, before the update (the clip factor is applied inside AdamW)
                g[e].resize(P);
                static_cast<CudaEngine*>(engines[e])->get_grads(g[e].data());
            }
            engines[e]->adamw_step(1e-3, hp);
            const StepStats st = engines[e]->read_stats();
            loss[e] = st.loss, norm[e] = st.grad_norm;  // the data-parallel engines' are summed over the ranks
            ls[e] = engines[e]->layer_stats();          // before get_params: ZeRO-1 gathers through the gradient buffer
            p[e].resize(P);
            engines[e]->get_params(p[e].data());  // a collective for ZeRO-1: every rank calls it
        }
        for (int e = 0; e < 2; e++) {  // bit-identical parameters on every rank
            const uint64_t h = checksum64(p[e].data(), P * sizeof(float));
            std::vector<double> lo(W), hi(W);
            dist.all_gather((double)(h & 0xffffffffu), lo.data(), "the parameter hashes");
            dist.all_gather((double)(h >> 32), hi.data(), "the parameter hashes");
            for (int r = 0; r < W; r++)
                if (lo[r] != lo[0] || hi[r] != hi[0])
                    fail("step " + std::to_string(s) + ": ZeRO-" + std::to_string(1 - e) +
                         " parameters differ between ranks 0 and " + std::to_string(r));
        }
        for (int e = 0; e < 2; e++) {
            const std::string name = e == 0 ? "ZeRO-1" : "ZeRO-0";
            if (s == 0) {  // ZeRO-1 holds the sum in its own range only
                const auto r = e == 0 ? z1.optimizer_range() : std::make_pair((size_t)0, P);
                double d = 0, top = 0;
                for (size_t i = r.first; i < r.second; i++)
                    d = std::max(d, (double)std::fabs(g[e][i] - g[2][i])),
                    top = std::max(top, (double)std::fabs(g[2][i]));
                worst_grad = std::max(worst_grad, d / top);
                if (d > 1e-5 * top)
                    fail(name + "'s summed gradient differs from one rank's by " + std::to_string(d / top) +
                         " of the largest");
            }
            if (!clip) continue;
            // The per-layer signals are the global ones: of the summed gradient (each element counted once, ZeRO-0's
            // too), of the one update, and the residual RMS over every rank's rows (one rank: all of them).
            // A sub-block a layer lacks (grad_rms_attn, grad_rms_mlp) is NaN on every engine.
            for (int l = 0; l < c.L(); l++)
                for (int k = 0; k < LayerStats::kCount; k++) {
                    const char* what = LayerStats::kNames[k];
                    const double x = ls[e].signal(k)[l], y = ls[2].signal(k)[l];
                    if (std::isnan(x) && std::isnan(y)) continue;
                    out.worst_layer = std::max(out.worst_layer, std::fabs(x - y) / y);
                    if (!(std::fabs(x - y) <= 1e-3 * y))
                        fail("step " + std::to_string(s) + ": " + name + " layer " + std::to_string(l) + " " + what +
                             " " + std::to_string(x) + " vs one rank's " + std::to_string(y));
                }
            worst_loss = std::max(worst_loss, std::fabs(loss[e] - loss[2]) / std::fabs(loss[2]));
            worst_norm = std::max(worst_norm, std::fabs(norm[e] - norm[2]) / norm[2]);
            if (std::fabs(loss[e] - loss[2]) > 1e-4 * std::fabs(loss[2]) ||
                std::fabs(norm[e] - norm[2]) > 1e-4 * norm[2])
                fail("step " + std::to_string(s) + ": " + name + " loss " + std::to_string(loss[e]) + " norm " +
                     std::to_string(norm[e]) + " vs one rank's " + std::to_string(loss[2]) + " " +
                     std::to_string(norm[2]));
        }
    }
    // The ranks' optimizer ranges tile [0, P), and a shard's moments round-trip.
    const auto range = z1.optimizer_range();
    std::vector<double> begins(W), ends(W);
    dist.all_gather((double)range.first, begins.data(), "the optimizer ranges");
    dist.all_gather((double)range.second, ends.data(), "the optimizer ranges");
    for (int r = 0; r < W; r++)
        if (begins[r] != (r == 0 ? 0.0 : ends[r - 1]) || (r == W - 1 && ends[r] != (double)P))
            fail("the optimizer ranges do not tile [0, P)");
    std::vector<float> m, v, m2, v2, m0, v0;
    long t = 0, t2 = 0;
    z1.get_optimizer(m, v, t);
    z0.get_optimizer(m0, v0, t2);
    if (m.size() != range.second - range.first || t != 4 || m0.size() != P)
        fail("get_optimizer: wrong size or step count");
    double dm = 0, top = 0;
    for (size_t i = 0; i < m.size() && m0.size() == P; i++)
        dm = std::max(dm, (double)std::fabs(m[i] - m0[range.first + i])),
        top = std::max(top, (double)std::fabs(m0[range.first + i]));
    if (dm > 1e-4 * top)
        fail("ZeRO-1's moments in interface order differ from ZeRO-0's by " + std::to_string(dm / top));
    for (float& x : m) x *= 2;
    z1.set_optimizer(m, v, t);
    z1.get_optimizer(m2, v2, t2);
    if (m2 != m || v2 != v || t2 != t) fail("set_optimizer then get_optimizer does not round-trip");
    return out;
}

}  // namespace

// One line per rank: "ok" when both models pass, with each one's measured differences.
int main(int argc, char** argv) {
    Dist dist;
    dist.start(&argc, &argv, "dp_engine_check");
    const Outcome uneven = check(dist, uneven_config()), columns = check(dist, columns_config()),
                  hybrid = check(dist, hybrid_config());
    std::string line;
    for (const auto& [name, o] : {std::make_pair("widths", &uneven), std::make_pair("GQA, windows, no-op", &columns),
                                  std::make_pair("gdn hybrid", &hybrid)}) {
        char measured[200];
        snprintf(measured, sizeof measured,
                 "%s%s: gradient %.1e of the largest, loss %.1e, norm %.1e, per-layer signals %.1e relative",
                 line.empty() ? "" : "; ", name, o->worst_grad, o->worst_loss, o->worst_norm, o->worst_layer);
        line += measured;
    }
    const int bad = uneven.bad + columns.bad + hybrid.bad;
    const std::string why = uneven.bad    ? "widths: " + uneven.why
                            : columns.bad ? "GQA, windows, no-op: " + columns.why
                                          : "gdn hybrid: " + hybrid.why;
    printf("dp_engine_check: rank %d of %d: %s (vs one rank: %s)\n", dist.rank, dist.world,
           bad ? ("FAILED: " + why).c_str() : "ok", line.c_str());
    dist.finish();
    return bad ? 1 : 0;
}
