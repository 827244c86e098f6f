// test_decode_cuda.cpp: the GPU KV-cache decoder (inspect/cuda_decoder.cuh) under the CUDA-on-CPU executor:
// its logits against the GPU engine's own full forward at every position and against the CPU decoder, for
// uniform, Prism, X, lambda and NoPE models, and its cache size against --plan's KV-cache bytes; hybrids' Gated
// DeltaNet layers, whose appends of many rows run the chunk form, against token-by-token steps. Issue 28's layer columns
// (inspect_config's "shapes": GQA, MQA, windows whose rings wrap, dropped sub-blocks), which the CUDA engine does not
// run yet, on weights uploaded here: token by token (the rings wrap) against one prefill of the whole sequence (no
// key leaves a ring: every key comes from the chunk itself), and against the CPU decoder. (The trainer's samples
// on the GPU engine run through it too: test_generate.cpp's resume test, on build/train_prism_executor.) The engine
// and the decoder come from cuda_engine_hooks.cuh's makers, so this file compiles no kernel (cuda_engine.cu's
// object holds them).
//
// Tolerances. Against the engine's full forward: the same kernels on the same bf16 rows except attention (the
// decoder splits a query's keys over 8 warps and merges them; the engine's kernel walks them in one warp) and the
// logits, fp32 here, bf16 there (relative 2^-8 = 0.4% at most). A few attention outputs round to the neighbouring bf16
// and the difference compounds through the layers: bounded by 2% of the logits' scale (max |logit|); measured
// <= 1.5% (x; 0.8% uniform). Against the CPU decoder (fp32 throughout, same bf16-exact weights): bf16 storage of
// every activation, compounded through the layers of these deliberately sharp models (weights 20x GPT-2's init);
// the relative RMS difference of all logits is bounded by 10%, measured <= 3% (prism; shapes 2.95%). A cache bug
// (wrong row, position or head) moves logits by O(scale), far above both.
// Gated DeltaNet layers, an append of one row against one of many: the delta rule runs as gdn_state_step for one row
// (fp32, o rounded once) and as gdn_chunk_forward for more, which rounds its tensor-core operands (beta folded into
// T, then W, U, V', S0 and the masked Q K^T) to bf16: every o of the layer moves by a few bf16 units
// (test_gdn_chunk.cpp's bound), where the comparisons with the engine move a few outputs by one. That is the CPU
// comparison's kind of difference (every element of an activation rounded otherwise), so its bound, 10% relative
// RMS, now at every position (the worst row's logits, so that a state carried wrong into a continuation's rows
// cannot hide among the others): measured <= 4.2% (steps against one prefill of 136 rows; the same steps against the
// CPU decoder: 4.1%).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <omp.h>

#include "ref/cpu_decoder.h"
#include "cuda_engine_hooks.cuh"
#include "memory_plan.h"
#include "test/inspect_util.h"

namespace {

struct SerialOpenMP {  // as in test_model_cuda.cpp: libgomp's spinning workers starve the executor
    int saved = omp_get_max_threads();
    SerialOpenMP() { omp_set_num_threads(1); }
    ~SerialOpenMP() { omp_set_num_threads(saved); }
};

std::vector<float> bf16_exact(std::vector<float> v) {
    for (float& x : v) x = float(bf16(x));
    return v;
}

double max_abs(const std::vector<float>& v) {
    double m = 0;
    for (float x : v) m = std::max(m, (double)std::fabs(x));
    return m;
}
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double m = 0;
    for (size_t i = 0; i < a.size(); i++) m = std::max(m, (double)std::fabs(a[i] - b[i]));
    return m;
}
double relative_rms_diff(const float* got, const float* want, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) num += (got[i] - want[i]) * (got[i] - want[i]), den += want[i] * want[i];
    return std::sqrt(num / den);
}
double relative_rms_diff(const std::vector<float>& got, const std::vector<float>& want) {
    return relative_rms_diff(got.data(), want.data(), got.size());
}
// The largest relative_rms_diff of one position's V logits (rows of got and want).
double worst_row_relative_rms_diff(const std::vector<float>& got, const std::vector<float>& want, int V) {
    double m = 0;
    for (size_t r = 0; r < got.size() / V; r++)
        m = std::max(m, relative_rms_diff(got.data() + r * V, want.data() + r * V, V));
    return m;
}

// fp32 parameters (param_layout order) as bf16 on the device in memory_plan.h's device_layout, as
// CudaEngine::set_params uploads them: tensor i of one is tensor i of the other, rows past V are zero.
struct DeviceWeights {
    bf16* p = nullptr;
    DeviceWeights(const ModelConfig& c, const std::vector<float>& params) {
        const ParamLayout a = param_layout(c), g = device_layout(c);
        std::vector<bf16> w(g.total, bf16(0.0f));
        for (size_t i = 0; i < a.tensors.size(); i++)
            for (size_t e = 0; e < a.tensors[i].numel(); e++)
                w[g.tensors[i].offset + e] = bf16(params[a.tensors[i].offset + e]);
        cudaCheck(cudaMalloc(&p, w.size() * sizeof(bf16)));
        cudaCheck(cudaMemcpy(p, w.data(), w.size() * sizeof(bf16), cudaMemcpyHostToDevice));
    }
    ~DeviceWeights() { cudaFree(p); }
};

}  // namespace

TEST_CASE(
    "GPU cached decoding gives the GPU engine's full-forward logits at every position (uniform, prism, x, "
    "lambda, NoPE layers)",
    "[kernels][decode]") {
    SerialOpenMP serial;
    for (std::string kind : {"uniform", "prism", "x", "lambda", "nope"}) {
        INFO(kind);
        const ModelConfig c = inspect_config(kind, 37, 12);
        const std::vector<float> params = bf16_exact(inspect_params(c, 3));
        const std::vector<int> seq = inspect_tokens(c, c.T, 4);
        // with inspect/cuda_decoder.cuh's decoder, as cuda_engine.cu builds it
        const std::unique_ptr<CudaEngineHooks> e = make_cuda_engine(c, false, DataParallel(), true);
        e->set_params(params.data());
        e->forward(seq.data(), nullptr, 1, c.T);
        std::vector<float> full((size_t)c.T * c.V);
        for (int t = 0; t < c.T; t++) e->logits_at(0, t, full.data() + (size_t)t * c.V);

        std::unique_ptr<Decoder> made = e->make_decoder(c.T);  // the engine's own decoder is the GPU one
        REQUIRE(made->describe() == "CUDA (bf16 KV cache)");   // CudaDecoder's (the CPU decoder's says fp32)
        Decoder& dec = *made;
        std::vector<float> got((size_t)c.T * c.V);
        dec.append(seq.data(), 4, got.data(), true);  // a prefill of 4, every position's logits
        for (int t = 4; t < c.T; t++) dec.append(&seq[t], 1, got.data() + (size_t)t * c.V);
        const double scale = max_abs(full);
        REQUIRE(scale > 1.0);
        INFO("max |diff| " << max_abs_diff(got, full) << " of scale " << scale);
        CHECK(max_abs_diff(got, full) <= 2e-2 * scale);

        // ... and the CPU decoder's, in fp32 on the same weights
        CpuDecoder cpu(c, params, c.T);
        std::vector<float> want((size_t)c.T * c.V);
        cpu.append(seq.data(), c.T, want.data(), true);
        INFO("relative RMS difference vs CPU " << relative_rms_diff(got, want));
        CHECK(relative_rms_diff(got, want) <= 1e-1);
    }
}

TEST_CASE(
    "GPU cached decoding with GQA, MQA, windows and dropped sub-blocks: a wrapped ring gives the logits of one "
    "prefill, and the CPU decoder's",
    "[kernels][decode]") {
    // Token by token against one prefill of all T rows: the same kernels on the same rows (under the executor the
    // matmul's sums do not depend on the other rows), the keys read from the cache's ring instead of the chunk; 2%
    // of the logits' scale as against the engine above (measured: equal). A key read from the wrong slot, head or
    // position moves the logits by O(scale). Against the CPU decoder (fp32): the relative RMS bound above.
    SerialOpenMP serial;
    const ModelConfig c = inspect_config("shapes", 37, 16);
    const std::vector<float> params = bf16_exact(inspect_params(c, 3));
    const std::vector<int> seq = inspect_tokens(c, c.T, 4);
    DeviceWeights weights(c, params);
    const std::unique_ptr<Decoder> dec = make_cuda_decoder_on(c, weights.p, nullptr, c.T);
    std::vector<float> prefill((size_t)c.T * c.V), got((size_t)c.T * c.V);
    dec->append(seq.data(), c.T, prefill.data(), true);
    dec->reset();
    dec->append(seq.data(), 5, got.data(), true);                 // a chunk past the window of 3
    dec->append(&seq[5], 6, got.data() + (size_t)5 * c.V, true);  // a chunk longer than both rings
    for (int t = 11; t < c.T; t++) dec->append(&seq[t], 1, got.data() + (size_t)t * c.V);
    const double scale = max_abs(prefill);
    REQUIRE(scale > 1.0);
    INFO("max |diff| " << max_abs_diff(got, prefill) << " of scale " << scale);
    CHECK(max_abs_diff(got, prefill) <= 2e-2 * scale);

    CpuDecoder cpu(c, params, c.T);
    std::vector<float> want((size_t)c.T * c.V);
    cpu.append(seq.data(), c.T, want.data(), true);
    INFO("relative RMS difference vs CPU " << relative_rms_diff(got, want) << " (prefill "
                                           << relative_rms_diff(prefill, want) << ")");
    CHECK(relative_rms_diff(got, want) <= 1e-1);
    CHECK(relative_rms_diff(prefill, want) <= 1e-1);
}

TEST_CASE(
    "GPU cached decoding of a hybrid (Gated DeltaNet and attention layers): token by token gives one prefill's "
    "logits, and the CPU decoder's; its cache is --plan's KV and state bytes",
    "[kernels][decode][gdn]") {
    // inspect_config's hybrid: gdn layers of head_dim 16 and 8 (one without an MLP) beside attention; head_dim 8 is
    // below the chunk kernels' 16, so that layer steps row by row in every append. A gdn layer's state S and conv
    // tail carry between appends (model.cuh's LayerCache): a prefill of 5 (past the conv's 3-row tail), then 2 rows
    // (the tail mixes the previous append's rows and these), then one at a time, against one prefill of all T rows
    // (the gdn bound above) and the CPU decoder (fp32, ref/gdn.h's gdn_decode): a state or tail carried wrong (a row
    // lost, shifted, or S restarted) moves the logits by O(scale). reset() starts a new sequence: the same prefill
    // again gives the same bits.
    SerialOpenMP serial;
    const ModelConfig c = inspect_config("hybrid", 37, 16);
    const std::vector<float> params = bf16_exact(inspect_params(c, 3));
    const std::vector<int> seq = inspect_tokens(c, c.T, 4);
    DeviceWeights weights(c, params);
    const std::unique_ptr<Decoder> dec = make_cuda_decoder_on(c, weights.p, nullptr, c.T);
    std::vector<float> prefill((size_t)c.T * c.V), again((size_t)c.T * c.V), got((size_t)c.T * c.V);
    dec->append(seq.data(), c.T, prefill.data(), true);
    dec->reset();
    dec->append(seq.data(), c.T, again.data(), true);
    CHECK(again == prefill);
    dec->reset();
    dec->append(seq.data(), 5, got.data(), true);
    dec->append(&seq[5], 2, got.data() + (size_t)5 * c.V, true);
    for (int t = 7; t < c.T; t++) dec->append(&seq[t], 1, got.data() + (size_t)t * c.V);
    const double scale = max_abs(prefill), rows = worst_row_relative_rms_diff(got, prefill, c.V);
    REQUIRE(scale > 1.0);
    CHECK(rows <= 1e-1);

    CpuDecoder cpu(c, params, c.T);
    std::vector<float> want((size_t)c.T * c.V);
    cpu.append(seq.data(), c.T, want.data(), true);
    const double rel = relative_rms_diff(got, want);
    printf(
        "hybrid decoding: token by token vs one prefill: worst row's relative RMS %.3g (max |diff| %.3g of scale "
        "%.3g); vs CPU relative RMS %.3g\n",
        rows, max_abs_diff(got, prefill), scale, rel);
    CHECK(rel <= 1e-1);
    CHECK(relative_rms_diff(prefill, want) <= 1e-1);
    // Greedy choices: at every position the GPU's argmax is the CPU decoder's, or a token the CPU rates within
    // 2% of the logits' scale of its own best (a near tie that bf16 rounding may flip; measured: 15 of 16 equal).
    int agree = 0;
    for (int t = 0; t < c.T; t++) {
        const float *g = got.data() + (size_t)t * c.V, *w = want.data() + (size_t)t * c.V;
        const long pick = std::max_element(g, g + c.V) - g, best = std::max_element(w, w + c.V) - w;
        agree += pick == best;
        CHECK(w[pick] >= w[best] - 2e-2 * scale);
    }
    printf("hybrid decoding: greedy choices equal to the CPU decoder's at %d of %d positions\n", agree, c.T);

    // The cache: the attention layers' K/V (--plan's kv_cache_bytes at capacity T) and every gdn layer's state
    // bytes (constant in the capacity).
    const Accounting acc = account(c);
    CHECK(dec->cache_bytes() == (size_t)(acc.kv_cache_bytes + acc.state_bytes));
    CHECK(make_cuda_decoder_on(c, weights.p, nullptr, 4)->cache_bytes() ==
          (size_t)(4 * acc.kv_bytes_per_token + acc.state_bytes));
}

TEST_CASE(
    "GPU cached decoding of Gated DeltaNet layers (head_dim 32 and 64): a prefill past a chunk and its continuation "
    "through the chunk form give the logits of token-by-token steps, and the CPU decoder's",
    "[kernels][decode][gdn]") {
    // An append of n > 1 rows runs a gdn layer's delta rule as one gdn_chunk_forward from the cache's state into it
    // (model.cuh), one row as gdn_state_step. T = 136 rows four ways: token by token (the steps); one prefill (chunks
    // of 64, 64, 8); 64 rows then 72 (the continuation starts from a non-zero state at the full prefill's chunk
    // boundary, so under the executor it gives the full prefill's bits: the same chunks, the state handed over in
    // fp32); 70 rows (past a chunk) then 66 (its chunks counted from row 70: other roundings). The chunked runs
    // against the steps, and every run against the CPU decoder, by the worst row's relative RMS difference (the
    // bound above); a state lost or restarted at the continuation measured 87%.
    SerialOpenMP serial;
    ModelConfig c = inspect_config("hybrid", 37, 136);
    c.d = 64, c.h_base = 2;
    c.layers = {{64, 2}, {64, 1}, {64, 2}};  // gdn head_dim 32, gdn head_dim 64, attention
    c.layers[0].mixer = c.layers[1].mixer = 1;
    validate_config(c);
    const std::vector<float> params = bf16_exact(inspect_params(c, 5));
    const std::vector<int> seq = inspect_tokens(c, c.T, 6);
    DeviceWeights weights(c, params);
    const std::unique_ptr<Decoder> dec = make_cuda_decoder_on(c, weights.p, nullptr, c.T);
    const size_t TV = (size_t)c.T * c.V;
    std::vector<float> steps(TV), full(TV), split(TV), chunked(TV);
    for (int t = 0; t < c.T; t++) dec->append(&seq[t], 1, steps.data() + (size_t)t * c.V);
    auto two = [&](std::vector<float>& out, int n) {
        dec->reset();
        dec->append(seq.data(), n, out.data(), true);
        if (n < c.T) dec->append(&seq[n], c.T - n, out.data() + (size_t)n * c.V, true);
    };
    two(full, c.T), two(split, 64), two(chunked, 70);
#ifdef CUDA_CPU_EXECUTOR
    CHECK(split == full);
#else  // cuBLASLt may sum a matmul of 64 rows otherwise than one of 136
    CHECK(worst_row_relative_rms_diff(split, full, c.V) <= 1e-1);
#endif
    const double chunk_steps = worst_row_relative_rms_diff(chunked, steps, c.V);
    const double full_steps = worst_row_relative_rms_diff(full, steps, c.V);
    CpuDecoder cpu(c, params, c.T);
    std::vector<float> want(TV);
    cpu.append(seq.data(), c.T, want.data(), true);
    const double cpu_steps = worst_row_relative_rms_diff(steps, want, c.V);
    const double cpu_chunked = worst_row_relative_rms_diff(chunked, want, c.V);
    printf(
        "gdn prefill (head_dim 32, 64; T %d): worst row's relative RMS difference: chunked 70 + 66 vs steps %.3g, "
        "one prefill vs steps %.3g; vs the CPU decoder: steps %.3g, chunked %.3g (max |diff| chunked vs steps "
        "%.3g of scale %.3g)\n",
        c.T, chunk_steps, full_steps, cpu_steps, cpu_chunked, max_abs_diff(chunked, steps), max_abs(steps));
    CHECK(chunked != steps);  // the chunk form ran (the head_dims are the chunk kernels'): other roundings
    CHECK(chunk_steps <= 1e-1);
    CHECK(full_steps <= 1e-1);
    CHECK(cpu_steps <= 1e-1);
    CHECK(cpu_chunked <= 1e-1);
    CHECK(worst_row_relative_rms_diff(full, want, c.V) <= 1e-1);
    // the cache is the state (and the attention layer's K/V), whatever the appends' sizes
    const Accounting acc = account(c);
    CHECK(dec->cache_bytes() == (size_t)(acc.kv_cache_bytes + acc.state_bytes));
}

TEST_CASE("the GPU decoder's cache is --plan's bf16 KV-cache bytes (a window's: its last W positions)",
          "[kernels][decode]") {
    SerialOpenMP serial;
    for (std::string kind : {"uniform", "prism", "x", "lambda"}) {
        const ModelConfig c = inspect_config(kind, 37, 12);
        const std::unique_ptr<CudaEngineHooks> e = make_cuda_engine(c, false, DataParallel(), true);
        std::unique_ptr<Decoder> dec = e->make_decoder(10);
        CHECK(dec->cache_bytes() == 10 * (size_t)account(c).kv_bytes_per_token);
    }
    // GQA, windows of 3 and 5 and a layer without attention: at capacity T, --plan's kv_cache_bytes (min(W, T)
    // positions per window layer), and at capacity 10 a T of 10's
    const ModelConfig s = inspect_config("shapes", 37, 16), s10 = inspect_config("shapes", 37, 10);
    const std::vector<float> params = inspect_params(s, 1);
    DeviceWeights weights(s, params);
    CHECK(make_cuda_decoder_on(s, weights.p, nullptr, 16)->cache_bytes() == (size_t)account(s).kv_cache_bytes);
    CHECK(make_cuda_decoder_on(s, weights.p, nullptr, 10)->cache_bytes() == (size_t)account(s10).kv_cache_bytes);
    CHECK(make_cuda_decoder_on(s, weights.p, nullptr, 10)->cache_bytes() * 2 ==
          CpuDecoder(s, params, 10).cache_bytes());
}

TEST_CASE("a CUDA engine built without a decoder maker refuses make_decoder", "[kernels][decode]") {
    // The engine does not include inspect/: its decoder comes from whoever builds it (cuda_engine.cu).
    const std::unique_ptr<CudaEngineHooks> e = make_cuda_engine(inspect_config("uniform", 37, 12));
    CHECK_THROWS_AS(e->make_decoder(4), std::logic_error);
}
