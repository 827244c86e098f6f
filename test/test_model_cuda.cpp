// test_model_cuda.cpp: the whole GPU model (cuda_engine.cuh's CudaEngine, held through cuda_engine_hooks.cuh) against
// the fp32 reference (RefModel, and CpuEngine for the training loop), under the CUDA-on-CPU executor: the loss and
// every parameter gradient for uniform, Prism and X configurations and every layer column (KV groups, windows,
// layers without attention or an MLP, OpenELM's per-layer heads and hidden sizes, NoPE layers, all at once), the
// logits of those, gradient accumulation over micro-batches (in fp32: 8 micro-batches equal one batch of 8), ten
// AdamW steps tracking the reference's losses, evaluation outputs, the fp32 interface round trips, the host waits
// of a training step (one: read_stats), and the activation sizes memory_plan.h predicts.
//
// Tolerances. Both models start from the same bf16-exact weights, so the differences come from bf16 storage of
// every activation and gradient (relative 2^-8 per rounding at most), compounded through the layers. They are checked
// where they are meaningful: the loss (a mean over positions: rounding errors average out) to 1e-2 absolute on
// ~3.6; each gradient tensor as a whole, ||g - g_ref|| / ||g_ref|| <= 5e-2. An indexing or formula bug moves
// a tensor's relative error to O(1) (overwriting instead of accumulating a weight gradient measured 0.7),
// far above either bound; measured: loss differences <= 4e-4, tensor errors <= 1.1e-2.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <omp.h>

#include "adamw_ranges.h"
#include "run/cost_model.h"
#include "ref/cpu_engine.h"
#include "memory_plan.h"
#include "model/spec.h"
#include "cuda_engine_hooks.cuh"
#include "ref/reference.h"
#include "train_step.h"

namespace {

// These models are tiny and the executor runs kernels on the calling thread, so OpenMP only hurts here: after
// every parallel region (each reference op, each executor matmul) libgomp's workers spin waiting for the next
// one, and on two busy cores they take the core the executor needs (measured: 36 s instead of 4 s). Each test
// runs its OpenMP regions on one thread and restores the thread count for the tests after it.
struct SerialOpenMP {
    int saved = omp_get_max_threads();
    SerialOpenMP() { omp_set_num_threads(1); }
    ~SerialOpenMP() { omp_set_num_threads(saved); }
};

ModelConfig small_config(const std::string& kind) {
    ModelConfig c;
    c.V = 37, c.T = 8, c.mlp_multiple = 32;
    if (kind == "uniform") {
        c.d = 32, c.h_base = 2;
        c.layers = {{32, 2}, {32, 2}};
    } else if (kind == "prism") {  // head_dim 48, 48, 24, 12
        c.d = 48, c.h_base = 4;
        c.layers = {{48, 1}, {48, 1}, {48, 2}, {48, 4}};
    } else if (kind == "x") {  // the Xformer recipe: widths around d, RMSNorm, untied, muP scale; Df = 64 > d
        c.d = 32, c.h_base = 4;
        c.layers = {{64, 4}, {32, 4}, {64, 4}};
        c.norm = NormType::RMSNorm, c.tied = false, c.mup_attn = true, c.init_width_scale = true;
        c.mlp_ratio = 4.0;
    } else if (kind == "lambda") {  // the last layer narrower than d (D = d, the final norm covers d)
        c.d = 32, c.h_base = 2;
        c.layers = {{32, 2}, {16, 2}};
    } else if (kind == "gqa") {  // KV groups: kv = h / 2 (qkv 2 w rows)
        c.d = 32, c.h_base = 4;
        c.layers = {{32, 4, 2}, {32, 4, 2}};
    } else if (kind == "mqa") {  // one K/V head for 4 and for 2 query heads, LayerNorm
        c.d = 32, c.h_base = 4;
        c.layers = {{32, 4, 1}, {32, 2, 1}};
    } else if (kind == "local") {  // a window of 3 in every layer (T 7 in the tests: most queries see 3 keys)
        c.d = 32, c.h_base = 2;
        c.layers = {{32, 2, 0, 0, 3}, {32, 2, 0, 0, 3}};
    } else if (kind == "interleave") {  // local / global / local / global, windows 3 and 2
        c.d = 32, c.h_base = 2;
        c.layers = {{32, 2, 0, 0, 3}, {32, 2}, {32, 2, 0, 0, 2}, {32, 2}};
    } else if (kind == "no_attention") {  // the first and the third layer without attention (ln2 reads the
        c.d = 32, c.h_base = 2;           // embedding's state, and the state the second layer's MLP wrote)
        c.layers = {{32, 2, 0, 0, 0, false}, {32, 2}, {32, 2, 0, 0, 0, false}};
    } else if (kind == "no_mlp") {  // the first and the last layer without an MLP (the last's attention is
        c.d = 32, c.h_base = 2;     // followed by the final norm)
        c.layers = {{32, 2, 0, 0, 0, true, false}, {32, 2}, {32, 2, 0, 0, 0, true, false}};
    } else if (kind == "openelm") {  // OpenELM's layer-wise scaling: -s openelm --mlp openelm (heads 2 2 4 4,
        ModelSpec s;                 // hidden 16 48 96 128)
        s.d = 32, s.L = 4, s.h_base = 4, s.T = 8, s.V = 37, s.mlp_multiple = 16;
        s.heads = "openelm", s.mlp = "openelm";
        std::vector<std::string> warnings;
        c = build_config(s, warnings);
    } else if (kind == "nope") {  // NoPE (no rotary embedding) in the first and third layers, with GQA and windows
        c.d = 32, c.h_base = 4;   // of 3 and 2; rotary GQA layers beside them
        c.layers = {{32, 4, 2, 0, 3}, {32, 4, 2}, {32, 4, 1, 0, 2}, {32, 4}};
        c.layers[0].rope = c.layers[2].rope = false;
    } else if (kind == "combo") {  // X widths, RMSNorm, untied, muP: GQA + window + own hidden, MQA without an MLP,
        c.d = 32, c.h_base = 4;    // a layer without attention, GQA global; Df = 64 > d
        c.layers = {{64, 4, 2, 96, 3}, {32, 4, 1, 0, 0, true, false}, {32, 2, 0, 64, 0, false}, {64, 4, 2, 0, 2}};
        c.norm = NormType::RMSNorm, c.tied = false, c.mup_attn = true, c.init_width_scale = true;
        c.mlp_ratio = 4.0;
    } else if (kind == "mup" || kind == "mup_tied") {  // muP (--param mup) at base width 16 of d 32: logits x 0.5;
        c.d = 32, c.h_base = 4;                        // X widths, untied, RMSNorm; or uniform and tied
        c.layers = {{64, 4}, {32, 4}, {64, 4}};
        c.norm = NormType::RMSNorm, c.tied = false, c.mup_attn = true, c.mup_base_d = 16;
        if (kind == "mup_tied") c.layers = {{32, 2}, {32, 2}}, c.norm = NormType::LayerNorm, c.tied = true;
    } else if (kind == "hybrid") {  // Gated DeltaNet (head_dim 32 and 64, the second without an MLP, last) beside
        c.d = 32, c.h_base = 2;     // attention, on X widths with RMSNorm and an untied head; T 80 (chunks of 64)
        c.T = 80;
        c.layers = {{64, 2}, {32, 2}, {64, 1, 0, 0, 0, true, false}};
        c.layers[0].mixer = c.layers[2].mixer = 1;
        c.norm = NormType::RMSNorm, c.tied = false, c.mlp_ratio = 4.0;
    } else {
        FAIL("no test model " << kind);
    }
    validate_config(c);
    return c;
}

// The layer shapes of issues 28 and 32 (and the hybrid of issues 52 and 53 in its own cases below) (every column besides width and heads).
const std::vector<std::string>& column_kinds() {
    static const std::vector<std::string> k = {"no_attention", "no_mlp",     "openelm", "gqa",  "mqa",
                                               "local",        "interleave", "nope",    "combo"};
    return k;
}

std::vector<float> bf16_round(std::vector<float> v) {
    for (float& x : v) x = float(bf16(x));
    return v;
}

// inputs and targets (B, T); every row masks the same number of targets (positions 2 and 5), so a batch's mean
// loss is the average of its rows' mean losses and micro-batches of single rows add up to the batch.
void make_batch(const ModelConfig& c, int B, int T, uint64_t seed, std::vector<int>& in, std::vector<int>& tg) {
    ref::Rng rng(seed);
    in.resize((size_t)B * T), tg.resize((size_t)B * T);
    for (size_t i = 0; i < in.size(); i++) {
        in[i] = (int)(rng.next() % c.V);
        tg[i] = (i % T == 2 || i % T == 5) ? -1 : (int)(rng.next() % c.V);
    }
}

double rel_err(const float* got, const float* want, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++)
        num += (double)(got[i] - want[i]) * (got[i] - want[i]), den += (double)want[i] * want[i];
    return std::sqrt(num / std::max(den, 1e-30));
}

// Every gradient tensor within 5e-2 relative of the reference's; the worst tensor's error and name, for printing.
std::pair<double, std::string> check_grads(const ModelConfig& c, const std::vector<float>& got,
                                           const std::vector<float>& want) {
    std::pair<double, std::string> worst{0.0, ""};
    for (const ParamTensor& t : param_layout(c).tensors) {
        const double e = rel_err(got.data() + t.offset, want.data() + t.offset, t.numel());
        INFO(t.name << ": relative error " << e);
        CHECK(e <= 5e-2);
        if (e > worst.first) worst = {e, t.name};
    }
    return worst;
}

// One batch's loss (within 1e-2) and every gradient (check_grads) of the engine against the reference's; the loss
// difference and the worst gradient tensor.
struct LossGrads {
    double loss_err;
    std::pair<double, std::string> worst;
};
LossGrads check_loss_and_grads(const ModelConfig& c, ref::RefModel<float>& rm, CudaEngineHooks& e,
                               const std::vector<int>& in, const std::vector<int>& tg, int B, int T) {
    const float want = rm.forward(in.data(), tg.data(), B, T);
    e.zero_grad();
    e.forward_backward(in.data(), tg.data(), B, T, 1.0f);
    const double loss_err = std::fabs(e.read_stats().loss - want);
    CHECK(loss_err <= 1e-2);
    rm.zero_grad();
    rm.backward(1.0f);
    std::vector<float> g(e.num_params());
    e.get_grads(g.data());
    return {loss_err, check_grads(c, g, rm.grads)};
}

// Inference on both: the worst relative error of the engine's logits at every position against the reference's.
double logits_error(const ModelConfig& c, ref::RefModel<float>& rm, CudaEngineHooks& e, const std::vector<int>& in,
                    int B, int T) {
    rm.forward(in.data(), nullptr, B, T);
    e.forward(in.data(), nullptr, B, T);
    double err = 0;
    std::vector<float> row(c.V);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            e.logits_at(b, t, row.data());
            err = std::max(err, rel_err(row.data(), rm.logits() + ((size_t)b * T + t) * c.V, c.V));
        }
    return err;
}

}  // namespace

TEST_CASE("GPU model loss and every parameter gradient match the reference (uniform, prism, x, lambda)",
          "[kernels][model]") {
    SerialOpenMP serial;
    for (std::string kind : {"uniform", "prism", "x", "lambda"}) {
        INFO(kind);
        const ModelConfig c = small_config(kind);
        ref::RefModel<float> rm(c);
        rm.init_params(1);
        rm.params = bf16_round(rm.params);
        const std::unique_ptr<CudaEngineHooks> e = make_cuda_engine(c);
        e->set_params(rm.params.data());
        std::vector<int> in, tg;
        const int B = 2, T = 7;  // odd T, below the context length
        make_batch(c, B, T, 2, in, tg);
        check_loss_and_grads(c, rm, *e, in, tg, B, T);
    }
}

TEST_CASE("GPU model loss, logits and every gradient match the reference for every layer column",
          "[kernels][model][layers]") {
    // KV groups (GQA, MQA), windows (local, a local/global interleave), layers without attention or without an MLP
    // (the next norm reads the state the previous sub-block wrote), OpenELM's per-layer heads and hidden sizes, and
    // all of them at once on X widths; the same tolerances as above. Prints each case's errors.
    SerialOpenMP serial;
    for (const std::string& kind : column_kinds()) {
        INFO(kind);
        const ModelConfig c = small_config(kind);
        ref::RefModel<float> rm(c);
        rm.init_params(31);
        rm.params = bf16_round(rm.params);
        const std::unique_ptr<CudaEngineHooks> e = make_cuda_engine(c);
        e->set_params(rm.params.data());
        std::vector<int> in, tg;
        const int B = 2, T = 7;
        make_batch(c, B, T, 32, in, tg);
        // Inference: the logits of every position.
        const double logits_err = logits_error(c, rm, *e, in, B, T);
        CHECK(logits_err <= 5e-2);
        // Training: the loss and every gradient.
        const LossGrads r = check_loss_and_grads(c, rm, *e, in, tg, B, T);
        printf("layer columns, %-12s: loss %.2e, logits %.2e, worst gradient %.2e (%s)\n", kind.c_str(), r.loss_err,
               logits_err, r.worst.first, r.worst.second.c_str());
    }
}

TEST_CASE("GPU model with Gated DeltaNet layers: logits, loss and every gradient match the reference over two chunks",
          "[kernels][model][gdn]") {
    // The hybrid (gdn layers of head_dim 32 and 64 beside attention) at B 2 x T 70: every gdn layer's sequence
    // spans a whole chunk of 64 and a partial one, so the chunked delta rule carries its state across a chunk
    // boundary forward and backward; the same bounds as the other models (bf16 activations against fp32). Then
    // recomputation (ln1 recomputed before the gdn layer's three weight gradients) gives the same bits.
    SerialOpenMP serial;
    const ModelConfig c = small_config("hybrid");
    ref::RefModel<float> rm(c);
    rm.init_params(61);
    rm.params = bf16_round(rm.params);
    const std::unique_ptr<CudaEngineHooks> e = make_cuda_engine(c), r = make_cuda_engine(c, true);
    e->set_params(rm.params.data());
    r->set_params(rm.params.data());
    std::vector<int> in, tg;
    const int B = 2, T = 70;
    make_batch(c, B, T, 62, in, tg);
    const double logits_err = logits_error(c, rm, *e, in, B, T);
    CHECK(logits_err <= 5e-2);
    const LossGrads lg = check_loss_and_grads(c, rm, *e, in, tg, B, T);
    printf("hybrid (gdn hd 32, 64) B 2 T 70: loss %.2e, logits %.2e, worst gradient %.2e (%s)\n", lg.loss_err,
           logits_err, lg.worst.first, lg.worst.second.c_str());
    std::vector<float> g1(e->num_params()), g2(e->num_params());
    e->get_grads(g1.data());
    r->zero_grad();
    r->forward_backward(in.data(), tg.data(), B, T, 1.0f);
    r->get_grads(g2.data());
    CHECK(std::memcmp(g1.data(), g2.data(), g1.size() * sizeof(float)) == 0);
    CHECK(r->activation_bytes() < e->activation_bytes());
}

TEST_CASE("GPU gradient accumulation over micro-batches equals the whole batch", "[kernels][model]") {
    SerialOpenMP serial;
    // Two micro-batches of one row with grad_scale 1/2 must add up to the B = 2 batch: a kernel that overwrote
    // (=) instead of accumulating (+=) would leave only the second half, a relative error of ~0.7.
    for (std::string kind : {"uniform", "x"}) {
        INFO(kind);
        const ModelConfig c = small_config(kind);
        ref::RefModel<float> rm(c);
        rm.init_params(3);
        rm.params = bf16_round(rm.params);
        std::vector<int> in, tg;
        const int T = 8;
        make_batch(c, 2, T, 4, in, tg);
        rm.forward(in.data(), tg.data(), 2, T);
        rm.zero_grad();
        rm.backward(1.0f);
        const std::unique_ptr<CudaEngineHooks> e = make_cuda_engine(c);
        e->set_params(rm.params.data());
        e->zero_grad();
        for (int micro = 0; micro < 2; micro++)
            e->forward_backward(in.data() + micro * T, tg.data() + micro * T, 1, T, 0.5f);
        std::vector<float> g(e->num_params());
        e->get_grads(g.data());
        check_grads(c, g, rm.grads);
    }
}

TEST_CASE("recomputing norm and SwiGLU outputs in the backward gives bit-identical gradients with less memory",
          "[kernels][model]") {
    SerialOpenMP serial;
    for (std::string kind : {"uniform", "x", "combo"}) {
        INFO(kind);
        const ModelConfig c = small_config(kind);
        ref::RefModel<float> rm(c);
        rm.init_params(13);
        const std::unique_ptr<CudaEngineHooks> stored = make_cuda_engine(c), recomputed = make_cuda_engine(c, true);
        stored->set_params(rm.params.data());
        recomputed->set_params(rm.params.data());
        std::vector<int> in, tg;
        make_batch(c, 2, 7, 14, in, tg);
        std::vector<float> g1(stored->num_params()), g2(stored->num_params());
        for (int micro = 0; micro < 2; micro++) {  // two micro-batches: the recomputed buffers are reused
            stored->forward_backward(in.data(), tg.data(), 2, 7, 0.5f);
            recomputed->forward_backward(in.data(), tg.data(), 2, 7, 0.5f);
        }
        const double l1 = stored->read_stats().loss, l2 = recomputed->read_stats().loss;
        stored->get_grads(g1.data());
        recomputed->get_grads(g2.data());
        CHECK(std::memcmp(&l1, &l2, sizeof(double)) == 0);
        CHECK(std::memcmp(g1.data(), g2.data(), g1.size() * sizeof(float)) == 0);
        CHECK(recomputed->activation_bytes() < stored->activation_bytes());
        recomputed->forward(in.data(), tg.data(), 2, 7);
        CHECK(recomputed->read_stats().loss == l2);  // measuring left the buffers alone
    }
}

// Ten AdamW steps of both engines (two CUDA engines) from the same bf16 weights, every engine at the rates of mult.
// Losses differ by the bf16 rounding of the forward (<= 1e-2, see the top) plus the drift of bf16 activation
// gradients through the updates; 2e-2 over ten steps with clipping active on some of them.
static void check_ten_steps(const std::string& kind, const OptimizerMultipliers& mult = {}) {
    {
        INFO(kind);
        const ModelConfig c = small_config(kind);
        CpuEngine cpu(c);
        cpu.init_params(5);
        std::vector<float> p(cpu.num_params());
        cpu.get_params(p.data());
        p = bf16_round(p);
        cpu.set_params(p.data());
        const std::unique_ptr<CudaEngineHooks> gpu = make_cuda_engine(c), gpu2 = make_cuda_engine(c);
        gpu->set_params(p.data());
        gpu2->set_params(p.data());
        for (Engine* e : {(Engine*)&cpu, (Engine*)gpu.get(), (Engine*)gpu2.get()}) e->set_optimizer_multipliers(mult);
        OptimizerHyper hp;
        std::vector<int> in, tg;
        const int B = 2, T = 8;
        for (int step = 0; step < 10; step++) {
            make_batch(c, B, T, 100 + step % 3, in, tg);
            double losses[3], norms[3];
            Engine* engines[3] = {&cpu, gpu.get(), gpu2.get()};
            for (int k = 0; k < 3; k++) {
                engines[k]->zero_grad();
                engines[k]->forward_backward(in.data(), tg.data(), B, T, 1.0f);
                engines[k]->clip_grad_norm(1.0);
                engines[k]->adamw_step(3e-3, hp);
                const StepStats st = engines[k]->read_stats();
                losses[k] = st.loss, norms[k] = st.grad_norm;
            }
            INFO("step " << step << " cpu " << losses[0] << " gpu " << losses[1] << " norms " << norms[0] << " "
                         << norms[1]);
            CHECK(std::fabs(losses[1] - losses[0]) <= 2e-2);
            CHECK(std::fabs(norms[1] - norms[0]) <= 5e-2 * norms[0]);
            CHECK(std::memcmp(&losses[1], &losses[2], sizeof(double)) == 0);  // same inputs: same bits
        }
        std::vector<float> a(gpu->num_params()), b(gpu->num_params());
        gpu->get_params(a.data());
        gpu2->get_params(b.data());
        CHECK(a == b);
    }
}

TEST_CASE("ten AdamW steps on the GPU track the reference's losses, deterministically", "[kernels][model]") {
    SerialOpenMP serial;
    for (std::string kind : {"uniform", "prism", "x", "hybrid"}) check_ten_steps(kind);
}

// muP (--param mup): the logits' multiplier base_d / d in both engines' head, forward and backward, and the layer
// matrices' Adam rates x base_fan_in / fan_in = base_d / w_l (optimizer_rates.h: 1/4, 1/2, 1/4 on the X widths) in
// the CUDA AdamW ranges as in the CPU engine's.
TEST_CASE("muP on the GPU engine: logits, loss and gradients match the reference, and ten steps at its rates track it",
          "[kernels][model][mup]") {
    SerialOpenMP serial;
    for (std::string kind : {"mup", "mup_tied"}) {
        INFO(kind);
        const ModelConfig c = small_config(kind);
        REQUIRE(c.logit_scale() == 0.5);
        ref::RefModel<float> rm(c);
        rm.init_params(41);
        rm.params = bf16_round(rm.params);
        const std::unique_ptr<CudaEngineHooks> e = make_cuda_engine(c);
        e->set_params(rm.params.data());
        std::vector<int> in, tg;
        const int B = 2, T = 7;
        make_batch(c, B, T, 42, in, tg);
        CHECK(logits_error(c, rm, *e, in, B, T) <= 5e-2);
        check_loss_and_grads(c, rm, *e, in, tg, B, T);
        OptimizerMultipliers mult;
        mult.layer_fan_in = mup_layer_ratios(c);
        check_ten_steps(kind, mult);
    }
}

TEST_CASE("one training step of a small X model on the GPU engine (the bundle's compute-sanitizer run)",
          "[kernels][model][sanitize]") {
    // Every kernel of a step once, with widths of three sizes: small enough for compute-sanitizer's racecheck
    // (the bundle's stage 3); its loss and gradient norm are the reference's within the ten-step test's bounds.
    SerialOpenMP serial;
    const ModelConfig c = small_config("x");
    CpuEngine cpu(c);
    cpu.init_params(9);
    std::vector<float> p(cpu.num_params());
    cpu.get_params(p.data());
    p = bf16_round(p);
    cpu.set_params(p.data());
    const std::unique_ptr<CudaEngineHooks> gpu = make_cuda_engine(c);
    gpu->set_params(p.data());
    std::vector<int> in, tg;
    make_batch(c, 2, 8, 77, in, tg);
    OptimizerHyper hp;
    StepStats st[2];
    Engine* engines[2] = {&cpu, gpu.get()};
    for (int k = 0; k < 2; k++) {
        engines[k]->zero_grad();
        engines[k]->forward_backward(in.data(), tg.data(), 2, 8, 1.0f);
        engines[k]->clip_grad_norm(1.0);
        engines[k]->adamw_step(3e-3, hp);
        st[k] = engines[k]->read_stats();
    }
    CHECK(std::fabs(st[1].loss - st[0].loss) <= 2e-2);
    CHECK(std::fabs(st[1].grad_norm - st[0].grad_norm) <= 5e-2 * st[0].grad_norm);
}

TEST_CASE("a step with a non-finite loss changes nothing on either engine, and does not count", "[kernels][model]") {
    SerialOpenMP serial;
    const ModelConfig c = small_config("uniform");
    std::vector<float> p(param_layout(c).total);
    ref::init_params(p.data(), c, param_layout(c), 5);
    p[param_layout(c).lnf_w] = 3e38f;  // one final-norm weight: its logits overflow, so the loss is not finite
    CpuEngine cpu(c);
    const std::unique_ptr<CudaEngineHooks> gpu = make_cuda_engine(c);
    OptimizerHyper hp;
    std::vector<int> in, tg;
    make_batch(c, 2, 8, 3, in, tg);
    for (Engine* e : {(Engine*)&cpu, (Engine*)gpu.get()}) {
        e->set_params(p.data());
        std::vector<float> m0(p.size(), 0.25f), v0(p.size(), 0.5f);
        e->set_optimizer(m0, v0, 7);
        const StepStats st = train_step(
            *e, [&](int* i, int* t) { std::copy(in.begin(), in.end(), i), std::copy(tg.begin(), tg.end(), t); }, 2, 8,
            1, 1.0, 1e-3, hp, in, tg);
        INFO(e->describe() << ": loss " << st.loss << ", norm " << st.grad_norm);
        CHECK(!(std::isfinite(st.loss) && std::isfinite(st.grad_norm)));
        std::vector<float> after(p.size()), m, v;
        long t = 0;
        e->get_params(after.data());
        e->get_optimizer(m, v, t);
        CHECK(after == p);
        CHECK(m == m0);
        CHECK(v == v0);
        CHECK(t == 7);
    }
}

TEST_CASE("the GPU engine refuses a step's calls out of order and counts only the updates it applied",
          "[kernels][model]") {
    SerialOpenMP serial;
    const ModelConfig c = small_config("uniform");
    const std::unique_ptr<CudaEngineHooks> e = make_cuda_engine(c);
    e->init_params(5);
    OptimizerHyper hp;
    std::vector<int> in, tg;
    make_batch(c, 2, 8, 3, in, tg);
    std::vector<float> m, v, logits(c.V);
    long t = -1;
    CHECK_THROWS_AS(e->clip_grad_norm(1.0), std::logic_error);  // no gradients since the last step
    CHECK_THROWS_AS(e->adamw_step(1e-3, hp), std::logic_error);
    e->zero_grad();
    e->forward_backward(in.data(), tg.data(), 2, 8, 1.0f, true);
    e->clip_grad_norm(1.0);
    CHECK_THROWS_AS(e->clip_grad_norm(1.0), std::logic_error);  // the norm would be read back twice
    CHECK_THROWS_AS(e->forward_backward(in.data(), tg.data(), 2, 8, 1.0f), std::logic_error);  // after its norm
    CHECK_THROWS_AS(e->zero_grad(), std::logic_error);
    CHECK_THROWS_AS(e->read_stats(), std::logic_error);  // the clipped update is not queued yet
    e->adamw_step(1e-3, hp);
    CHECK_THROWS_AS(e->adamw_step(1e-3, hp), std::logic_error);
    CHECK_THROWS_AS(e->forward(in.data(), tg.data(), 2, 8), std::logic_error);
    CHECK_THROWS_AS(e->get_optimizer(m, v, t), std::logic_error);  // whether the update applied is not known yet
    CHECK_THROWS_AS(e->set_optimizer(m, v, 0), std::logic_error);
    const StepStats st = e->read_stats();
    CHECK(std::isfinite(st.loss));
    CHECK(st.grad_norm > 0);
    e->get_optimizer(m, v, t);
    CHECK(t == 1);
    // A step without clip_grad_norm: no norm, and the update counts.
    e->zero_grad();
    e->forward_backward(in.data(), tg.data(), 2, 8, 1.0f);
    e->adamw_step(1e-3, hp);
    const StepStats unclipped = e->read_stats();
    CHECK(std::isfinite(unclipped.loss));
    CHECK(std::isnan(unclipped.grad_norm));
    e->get_optimizer(m, v, t);
    CHECK(t == 2);
    // After a step, the logits of a forward are readable until the next step begins.
    CHECK_THROWS_AS(e->logits_at(0, 0, logits.data()), std::logic_error);
    e->forward(in.data(), nullptr, 2, 8);
    e->logits_at(0, 0, logits.data());
    e->zero_grad();
    CHECK_THROWS_AS(e->logits_at(0, 0, logits.data()), std::logic_error);
}

TEST_CASE("device parameter layout pads the vocabulary and aligns every tensor for cuBLASLt", "[kernels][model]") {
    ModelConfig c = small_config("x");
    c.layers = {{352, 16}, {96, 4}, {352, 16}};  // widths whose tensors end at 64-byte offsets in param_layout
    const ParamLayout host = param_layout(c), dev = device_layout(c);
    REQUIRE(dev.tensors.size() == host.tensors.size());
    for (size_t i = 0; i < dev.tensors.size(); i++) {
        INFO(dev.tensors[i].name);
        CHECK(dev.tensors[i].offset % 128 == 0);
        const bool vocab = dev.tensors[i].name == "wte" || dev.tensors[i].name == "lm_head";
        CHECK(dev.tensors[i].rows == (vocab ? (size_t)padded_vocab(c.V) : host.tensors[i].rows));
        if (i + 1 < dev.tensors.size())
            CHECK(dev.tensors[i].offset + dev.tensors[i].numel() <= dev.tensors[i + 1].offset);
    }
    for (const ParamTensor& t : dev.tensors)  // named offsets follow their tensors
        if (t.name == "h1.wfc") CHECK(dev.layer[1].wfc == t.offset);
    CHECK(dev.lm_head == dev.tensors.back().offset);
}

TEST_CASE("AdamW ranges cover every tensor once, decay exactly the matrices and merge all they can",
          "[kernels][model]") {
    // On the interface layout (tensors back to back) and on the device layout (gaps for 256-byte alignment).
    ModelConfig c = small_config("x");
    for (const ParamLayout& layout : {param_layout(c), device_layout(c)}) {
        const std::vector<AdamWRange> r = adamw_ranges(layout);
        size_t covered = 0;
        for (const AdamWRange& x : r) covered += x.n;
        size_t total = 0;
        for (const ParamTensor& t : layout.tensors) {
            total += t.numel();
            int owners = 0;  // ranges holding the whole tensor, with its decay
            for (const AdamWRange& x : r)
                owners += x.offset <= t.offset && t.offset + t.numel() <= x.offset + x.n && x.decay == t.is_matrix;
            INFO(t.name);
            CHECK(owners == 1);
        }
        CHECK(covered == total);               // with the line above: no range overlaps another or reaches into a gap
        for (size_t i = 1; i < r.size(); i++)  // neighbours are left apart only for a different kind or a gap
            CHECK((r[i].decay != r[i - 1].decay || r[i].offset != r[i - 1].offset + r[i - 1].n));
        CHECK(r.size() < layout.tensors.size());
    }
}

TEST_CASE("GPU engine evaluation outputs and fp32 state round trips match the CPU engine", "[kernels][model]") {
    SerialOpenMP serial;
    const ModelConfig c = small_config("x");
    CpuEngine cpu(c);
    cpu.init_params(9);
    std::vector<float> p(cpu.num_params());
    cpu.get_params(p.data());
    p = bf16_round(p);
    cpu.set_params(p.data());
    const std::unique_ptr<CudaEngineHooks> gpu = make_cuda_engine(c);
    gpu->set_params(p.data());
    std::vector<float> back(gpu->num_params());
    gpu->get_params(back.data());
    CHECK(back == p);  // fp32 master weights: exact round trip, padding rows invisible

    std::vector<int> in, tg;
    make_batch(c, 2, 5, 11, in, tg);
    cpu.forward(in.data(), nullptr, 2, 5);  // inference: no targets, no loss
    gpu->forward(in.data(), nullptr, 2, 5);
    CHECK(gpu->read_stats().loss == 0.0);
    std::vector<float> lp_cpu(10), lp_gpu(10), l_cpu(c.V), l_gpu(c.V);
    cpu.target_logprobs(tg.data(), lp_cpu.data());
    gpu->target_logprobs(tg.data(), lp_gpu.data());
    for (int i = 0; i < 10; i++) CHECK(lp_gpu[i] == Approx(lp_cpu[i]).margin(2e-2));  // bf16 logits, as the loss
    cpu.logits_at(1, 3, l_cpu.data());
    gpu->logits_at(1, 3, l_gpu.data());
    CHECK(rel_err(l_gpu.data(), l_cpu.data(), c.V) <= 5e-2);
    // A training micro-step consumes the logits (their memory holds dlogits): both engines refuse to read them.
    cpu.forward_backward(in.data(), tg.data(), 2, 5, 1.0f);
    gpu->forward_backward(in.data(), tg.data(), 2, 5, 1.0f);
    CHECK_THROWS_AS(cpu.logits_at(0, 0, l_cpu.data()), std::logic_error);
    CHECK_THROWS_AS(gpu->logits_at(0, 0, l_gpu.data()), std::logic_error);
    CHECK_THROWS_AS(gpu->target_logprobs(tg.data(), lp_gpu.data()), std::logic_error);

    std::vector<float> m(gpu->num_params()), v(gpu->num_params()), m2, v2;
    for (size_t i = 0; i < m.size(); i++) m[i] = 0.001f * (float)i, v[i] = 1e-6f * (float)i;
    gpu->set_optimizer(m, v, 17);
    long t = 0;
    gpu->get_optimizer(m2, v2, t);
    CHECK(m2 == m);
    CHECK(v2 == v);
    CHECK(t == 17);
}

TEST_CASE("fp32 gradient accumulation: 8 micro-batches of B equal one batch of 8 B, where bf16 accumulation does not",
          "[kernels][model]") {
    SerialOpenMP serial;
    // The same rows as one batch of 8 B and as 8 micro-batches of B with grad_scale 1/8 (every row masks the same
    // number of targets, so the objectives are equal). Two references for the accumulated gradient: the exact sum
    // (in double, on the host) of the 8 micro-batches' own gradients, each computed alone; and, on the executor,
    // the gradient of the one batch of 8 B (activations there are per row, so the batch differs only in how the
    // weight gradients are summed; cuBLASLt may pick another summation order for another M, so a GPU compares
    // with the first reference only). Errors are per tensor, relative to the reference gradient's norm.
    // Measured: fp32 accumulation ~1e-7 against both; the same 8 micro-gradients added as the engine did before
    // (into a bf16 buffer, one rounding per micro-step: acc = bf16(acc + g_k)) ~4e-3. The bound 1e-5 separates
    // them; the test prints both numbers.
    for (std::string kind : {"uniform", "x"}) {
        INFO(kind);
        const ModelConfig c = small_config(kind);
        ref::RefModel<float> rm(c);
        rm.init_params(21);
        rm.params = bf16_round(rm.params);
        const int B = 1, T = 8, K = 8;
        std::vector<int> in, tg;
        make_batch(c, K * B, T, 22, in, tg);
        rm.forward(in.data(), tg.data(), K * B, T);
        rm.zero_grad();
        rm.backward(1.0f);
        const std::unique_ptr<CudaEngineHooks> e = make_cuda_engine(c);
        e->set_params(rm.params.data());
        const size_t P = e->num_params();
        std::vector<float> whole(P), micro(P), part(P), bf16_acc(P, 0.0f);
        std::vector<double> exact(P, 0.0);
        for (int k = 0; k < K; k++) {  // each micro-batch's own gradient: summed exactly, and in bf16
            e->zero_grad();
            e->forward_backward(in.data() + k * B * T, tg.data() + k * B * T, B, T, 1.0f / K);
            e->get_grads(part.data());
            for (size_t i = 0; i < P; i++) exact[i] += part[i], bf16_acc[i] = float(bf16(bf16_acc[i] + part[i]));
        }
        e->zero_grad();
        for (int k = 0; k < K; k++) e->forward_backward(in.data() + k * B * T, tg.data() + k * B * T, B, T, 1.0f / K);
        e->get_grads(micro.data());
        e->zero_grad();
        e->forward_backward(in.data(), tg.data(), K * B, T, 1.0f);
        e->get_grads(whole.data());
        double fp32_vs_sum = 0, bf16_vs_sum = 0, fp32_vs_whole = 0, bf16_vs_whole = 0;
        for (const ParamTensor& t : param_layout(c).tensors) {
            auto diff = [&](const std::vector<float>& g, auto&& want) {
                double num = 0, den = 0;
                for (size_t i = t.offset; i < t.offset + t.numel(); i++)
                    num += ((double)g[i] - want(i)) * ((double)g[i] - want(i)),
                        den += (double)rm.grads[i] * rm.grads[i];
                return std::sqrt(num / std::max(den, 1e-30));
            };
            auto sum = [&](size_t i) { return exact[i]; };
            auto one = [&](size_t i) { return (double)whole[i]; };
            fp32_vs_sum = std::max(fp32_vs_sum, diff(micro, sum)),
            bf16_vs_sum = std::max(bf16_vs_sum, diff(bf16_acc, sum));
            fp32_vs_whole = std::max(fp32_vs_whole, diff(micro, one));
            bf16_vs_whole = std::max(bf16_vs_whole, diff(bf16_acc, one));
        }
        printf(
            "gradient accumulation over 8 micro-batches (%s), worst tensor relative to the reference gradient: "
            "fp32 %.2e (vs the exact sum), %.2e (vs one batch of 8); bf16 %.2e, %.2e\n",
            kind.c_str(), fp32_vs_sum, fp32_vs_whole, bf16_vs_sum, bf16_vs_whole);
        CHECK(fp32_vs_sum <= 1e-5);
        CHECK(bf16_vs_sum > 1e-5);  // the bound separates the two
#ifdef CUDA_CPU_EXECUTOR
        CHECK(fp32_vs_whole <= 1e-5);
        CHECK(bf16_vs_whole > 1e-5);
#endif
    }
}

#ifdef CUDA_CPU_EXECUTOR  // the counts are the executor's (runtime.h); on a GPU, bench_model's timings show stalls
TEST_CASE("a training step waits for the GPU once, and queues nothing on the default stream", "[kernels][model]") {
    SerialOpenMP serial;
    // The executor counts host-synchronising calls (cuda_cpu/runtime.h): blocking copies, copies from
    // pageable memory, stream / event / device synchronisation, allocation. A steady-state step of train_step.h
    // (the trainer's own code) makes exactly one, the read-back of the loss and the gradient norm, for any number
    // of micro-steps; before this engine it made 6 per micro-step plus 1 (7 at one micro-step, 25 at four).
    // The first step allocates (activations, pinned staging) and is not counted. A validation pass of several
    // batches also waits once.
    for (std::string kind : {"uniform", "x"}) {
        const ModelConfig c = small_config(kind);
        const std::unique_ptr<CudaEngineHooks> e = make_cuda_engine(c);
        e->init_params(7);
        const int B = 2, T = 8;
        std::vector<int> in(B * T), tg(B * T);
        uint64_t seed = 30;
        auto next = [&](int* i, int* t) {
            std::vector<int> a, b;
            make_batch(c, B, T, seed++, a, b);
            std::copy(a.begin(), a.end(), i), std::copy(b.begin(), b.end(), t);
        };
        OptimizerHyper hp;
        for (long n_micro : {1L, 4L}) {
            INFO(kind << ", " << n_micro << " micro-steps");
            train_step(*e, next, B, T, n_micro, 1.0, 1e-3, hp, in, tg);  // warm-up: allocations
            for (int step = 0; step < 2; step++) {
                const long s0 = cuda_cpu::sync_count(), d0 = cuda_cpu::default_stream_count();
                const StepStats st = train_step(*e, next, B, T, n_micro, 1.0, 1e-3, hp, in, tg);
                INFO("synchronising calls so far: " << cuda_cpu::sync_calls());
                CHECK(cuda_cpu::sync_count() - s0 == 1);
                CHECK(cuda_cpu::default_stream_count() - d0 == 0);
                CHECK(std::isfinite(st.loss));
                CHECK(st.grad_norm > 0);
            }
        }
        const long s0 = cuda_cpu::sync_count();
        for (int i = 0; i < 3; i++) next(in.data(), tg.data()), e->forward(in.data(), tg.data(), B, T);
        CHECK(e->read_stats().loss > 0);
        CHECK(cuda_cpu::sync_count() - s0 == 1);
    }
}
#endif

TEST_CASE("memory_plan.h predicts the engine's activation block for every shape of model", "[kernels][model]") {
    std::vector<std::string> kinds = {"uniform", "prism", "x", "lambda", "hybrid"};
    kinds.insert(kinds.end(), column_kinds().begin(), column_kinds().end());
    for (const std::string& kind : kinds)
        for (bool recompute : {false, true})
            for (auto [B, T] : {std::pair<int, int>{2, 7}, {1, 1}}) {
                INFO(kind << " recompute " << recompute << " B " << B << " T " << T);
                const ModelConfig c = small_config(kind);
                const std::unique_ptr<CudaEngineHooks> e = make_cuda_engine(c, recompute);
                std::vector<int> in, tg;
                make_batch(c, B, T, 5, in, tg);
                e->forward(in.data(), nullptr, B, T);
                CHECK(e->activation_bytes() == activation_bytes(c, B, T, recompute));
            }
    // qkv holds w + 2 kv hd columns, so KV groups shrink the block; a missing sub-block keeps no activations and
    // no residual state.
    ModelConfig plain = small_config("gqa");
    for (LayerSpec& l : plain.layers) l.kv_heads = 0;
    CHECK(activation_bytes(small_config("gqa"), 2, 7, false) < activation_bytes(plain, 2, 7, false));
    ModelConfig dropped = small_config("uniform");
    dropped.layers[1].attention = false;
    CHECK(residual_states(dropped) == 4);
    CHECK(activation_bytes(dropped, 2, 7, false) < activation_bytes(small_config("uniform"), 2, 7, false));
    // A gdn layer's activations are its own (p, u, the gates, o, the per-chunk states, z, y: memory_plan.h), not an
    // attention layer's: --plan's figure is the block the engine carves (above, at T 7), and at T 70 (two chunks)
    // the hybrid's block exceeds the same model with attention in place of gdn by the chunks' fp32 states.
    const ModelConfig hybrid = small_config("hybrid");
    ModelConfig attention = hybrid;
    for (LayerSpec& l : attention.layers) l.mixer = 0;
    CHECK(gpu_memory(hybrid, 2, 70, false).activations == activation_bytes(hybrid, 2, 70, false));
    CHECK(activation_bytes(hybrid, 2, 70, false) != activation_bytes(attention, 2, 70, false));
}

TEST_CASE("the cost model lists exactly the ops a training step runs, in order", "[kernels][model]") {
    SerialOpenMP serial;
    // dev/bench_model puts each op's measured time (the engine's OpTimer marks) next to run/cost_model.h's roofline
    // time by name; this keeps the two lists the same: every kernel, memset and matmul of a step, for a model
    // with Df > d (X: the dlnf tail memset), one with every layer column (combo: layers without attention or
    // without an MLP) and a hybrid (gdn layers beside attention, one without an MLP: gdn_kernel_costs' names and
    // the matmuls around them against gdn_forward / gdn_backward's), with and without recomputation, over two
    // micro-steps.
    struct Names : OpTimer {
        std::vector<std::string> seen;
        void mark(const char* op, cudaStream_t) override { seen.push_back(op); }
    };
    for (std::string kind : {"uniform", "x", "combo", "hybrid"})
        for (bool recompute : {false, true}) {
            INFO(kind << " recompute " << recompute);
            const ModelConfig c = small_config(kind);
            const std::unique_ptr<CudaEngineHooks> e = make_cuda_engine(c, recompute);
            e->init_params(3);
            const int B = 2, T = 8;
            std::vector<int> in(B * T), tg(B * T);
            auto next = [&](int* i, int* t) {
                std::vector<int> a, b;
                make_batch(c, B, T, 40, a, b);
                std::copy(a.begin(), a.end(), i), std::copy(b.begin(), b.end(), t);
            };
            Names names;
            e->set_timer(&names);
            OptimizerHyper hp;
            train_step(*e, next, B, T, 2, 1.0, 1e-3, hp, in, tg);
            std::vector<std::string> want;
            for (const OpCost& o : step_ops(c, B, T, 2, recompute)) want.push_back(o.name);
            CHECK(names.seen == want);
        }
}

TEST_CASE("the cost model's embedding backward floor is its longest segment's walk", "[kernels][model]") {
    // embedding.cuh splits a token's positions into segments of at most EMB_SEGMENT: a frequent token costs one
    // segment's walk, a token seen a few times its own positions.
    const ModelConfig c = small_config("prism");
    const int B = 16, T = 1024;
    for (double share : {0.05, 2.0 / (B * T)}) {
        CostOptions opt;
        opt.most_frequent = share;
        int found = 0;
        for (const OpCost& o : step_ops(c, B, T, 1, false, opt))
            if (o.name == "embedding_backward") {
                found++;
                CHECK(o.chain_s == Approx(std::min(std::round(share * B * T), (double)EMB_SEGMENT) * EMB_POSITION_S));
            }
        CHECK(found == 1);
    }
}

TEST_CASE("the memory plan turns recomputation on only when the activations would not fit", "[kernels][model]") {
    // The branch a small test machine never takes on its own: free memory between the two totals.
    const ModelConfig c = small_config("prism");
    const size_t keep = gpu_memory(c, 4, 8, false).total(), rec = gpu_memory(c, 4, 8, true).total();
    REQUIRE(rec < keep);
    CHECK(choose_recompute(c, 4, 8, (size_t)(keep / 0.97) + 1) == 0);
    CHECK(choose_recompute(c, 4, 8, (size_t)((keep + rec) / 2 / 0.97)) == 1);
    CHECK(choose_recompute(c, 4, 8, rec / 2) == -1);
}

// Three steps of both engines from the same bf16 weights; from step `from` on (-1: never) both at the rates of
// `mult`. Each step's per-layer statistics compared.
static void check_layer_stats_match(const std::string& kind, const OptimizerMultipliers& mult = {}, int from = -1) {
    INFO(kind);
    const ModelConfig c = small_config(kind);
    CpuEngine cpu(c);
    cpu.init_params(5);
    std::vector<float> p(cpu.num_params());
    cpu.get_params(p.data());
    p = bf16_round(p);
    cpu.set_params(p.data());
    const std::unique_ptr<CudaEngineHooks> gpu = make_cuda_engine(c);
    gpu->set_params(p.data());
    CHECK_THROWS_AS(gpu->layer_stats(), std::logic_error);  // no step yet: no gradients or states to read
    OptimizerHyper hp;
    std::vector<int> in, tg;
    const int B = 2, T = 8;
    for (int step = 0; step < 3; step++) {
        make_batch(c, B, T, 200 + step, in, tg);
        LayerStats s[2];
        Engine* engines[2] = {&cpu, gpu.get()};
        for (int k = 0; k < 2; k++) {
            if (step == from) engines[k]->set_optimizer_multipliers(mult);  // after a layer_stats: a new table
            engines[k]->zero_grad();
            engines[k]->forward_backward(in.data(), tg.data(), B, T, 1.0f);
            engines[k]->clip_grad_norm(1.0);
            engines[k]->adamw_step(3e-3, hp);
            engines[k]->read_stats();
            s[k] = engines[k]->layer_stats();
        }
        // Gradients (their norms and RMS, whole and per sub-block) within check_grads' 5e-2 of the reference's;
        // the update of Adam's normalised moments within the same; the residual states bf16 (2^-8) plus the
        // forward's drift, as the loss's. A sub-block the layer lacks is NaN on both.
        for (int k = 0; k < LayerStats::kCount; k++) {
            const std::string kind = LayerStats::kNames[k];
            const std::vector<double>&x = s[1].signal(k), &y = s[0].signal(k);
            REQUIRE(x.size() == (size_t)c.L());
            for (int l = 0; l < c.L(); l++) {
                INFO("step " << step + 1 << " layer " << l << ": " << kind << " " << x[l] << " vs " << y[l]);
                if (std::isnan(y[l])) {
                    CHECK(kind.rfind("grad_rms_", 0) == 0);
                    CHECK(std::isnan(x[l]));
                } else {
                    CHECK(y[l] > 0);
                    CHECK(std::fabs(x[l] - y[l]) <= (kind == "out_rms" ? 1e-2 : 5e-2) * y[l]);
                }
            }
        }
    }
}

TEST_CASE("the GPU engine's per-layer statistics match the CPU engine's, computed on the device",
          "[kernels][model][layerstats]") {
    SerialOpenMP serial;
    for (std::string kind : {"combo", "no_attention", "openelm"}) check_layer_stats_match(kind);
}

// update_ratio at each tensor's own rate on both engines: the first layer at lr x 0.5 (half the update), the last
// at weight decay x 1000 (decay 1 - 0.3 a step: its share of delta W above Adam's), set after a first
// step at rates 1, which built the device's table.
TEST_CASE("the GPU engine's per-layer statistics match the CPU engine's with per-layer lr and wd multipliers",
          "[kernels][model][layerstats]") {
    SerialOpenMP serial;
    for (std::string kind : {"combo", "openelm"}) {
        const int L = small_config(kind).L();
        REQUIRE(L >= 2);
        OptimizerMultipliers mult;
        mult.layer_lr.assign(L, 1.0), mult.layer_wd.assign(L, 1.0);
        mult.layer_lr[0] = 0.5, mult.layer_wd[L - 1] = 1000;
        check_layer_stats_match(kind, mult, 1);
    }
}
