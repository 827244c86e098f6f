// test_layers.cpp: per-layer KV heads (GQA), MLP hidden sizes, attention windows, layers without attention or
// MLP (issue 28) and NoPE layers (no rotary embedding, issue 32): the schedules and their errors (model/schedules.h, model_config.h), the defaults' identity with the
// layer of before, the accounting (--plan), the fp32 reference's ops and whole models against central finite
// differences in double (test/grad_check.h states the tolerance), the cached CPU decoder, the model.bin layer
// table (version 5; version 3 still read) and a CPU training run of a new shape that resumes bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "model/layer_columns.h"
#include "ref/cpu_decoder.h"
#include "ref/reference.h"
#include "run/checkpoint.h"
#include "run/plan_views.h"
#include "run/run.h"
#include "test/grad_check.h"
#include "test/train_util.h"

namespace {

ModelConfig build(const ModelSpec& s, std::vector<std::string>* warn = nullptr) {
    std::vector<std::string> w;
    ModelConfig c = build_config(s, w);
    if (warn) *warn = w;
    return c;
}

ModelSpec spec(const std::string& preset) {
    ModelSpec s;
    s.preset = preset;
    return s;
}

// c with the rotary embedding off (NoPE) in the given layers (from 0).
ModelConfig without_rope(ModelConfig c, std::initializer_list<int> layers) {
    for (int l : layers) c.layers[l].rope = false;
    return c;
}

void require_error(const ModelSpec& s, const std::string& needle) {
    try {
        build(s);
        FAIL("expected a ConfigError containing '" << needle << "'");
    } catch (const ConfigError& e) {
        INFO("message: " << e.what());
        REQUIRE(std::string(e.what()).find(needle) != std::string::npos);
        REQUIRE(std::string(e.what()).find('\n') == std::string::npos);
    }
}

bool same_layout(const ParamLayout& a, const ParamLayout& b) {
    if (a.total != b.total || a.tensors.size() != b.tensors.size()) return false;
    for (size_t i = 0; i < a.tensors.size(); i++)
        if (a.tensors[i].name != b.tensors[i].name || a.tensors[i].offset != b.tensors[i].offset ||
            a.tensors[i].rows != b.tensors[i].rows || a.tensors[i].cols != b.tensors[i].cols)
            return false;
    return true;
}

ModelConfig small_config(int d, std::vector<LayerSpec> layers, NormType norm, bool tied) {
    ModelConfig c;
    c.d = d, c.V = 37, c.T = 8, c.mlp_multiple = 8, c.norm = norm, c.tied = tied;
    c.layers = std::move(layers);
    c.h_base = c.layers.back().heads;
    return c;
}

// Larger than GPT-2's init, so that every gradient sits far above the finite-difference noise.
void randomize(ref::RefModel<double>& m, uint64_t seed) {
    ref::Rng r(seed);
    for (const ParamTensor& t : m.layout.tensors) {
        const bool bias = t.name.back() == 'b';
        for (size_t i = 0; i < t.numel(); i++) {
            double& p = m.params[t.offset + i];
            if (t.is_matrix) p = r.normal() * 0.6 / std::sqrt((double)t.cols);
            else p = bias ? 0.3 * r.normal() : 1.0 + 0.3 * r.normal();
        }
    }
}

struct GradFigures {
    int checked = 0;
    double worst = 0;      // max |analytic - numeric| / (1e-8 + 1e-6 |numeric|): grad_close holds while <= 1
    double max_error = 0;  // max |analytic - numeric|
};

// Every parameter tensor: its first and last entries and 6 random ones against central differences of the loss.
GradFigures check_gradients(const ModelConfig& cfg) {
    const int B = 2, T = 6;
    ref::RefModel<double> m(cfg);
    m.init_params(1);
    randomize(m, 2);
    ref::Rng r(3);
    std::vector<int> in(B * T), tg(B * T);
    for (int i = 0; i < B * T; i++) in[i] = (int)(r.next() % cfg.V), tg[i] = (int)(r.next() % cfg.V);
    tg[1] = -1;  // one masked target
    m.zero_grad();
    m.forward(in.data(), tg.data(), B, T);
    m.backward();
    auto f = [&] { return (double)m.forward(in.data(), tg.data(), B, T); };
    GradFigures g;
    for (const ParamTensor& t : m.layout.tensors) {
        std::vector<size_t> idx = {0, t.numel() - 1};
        for (int k = 0; k < 6; k++) idx.push_back(r.next() % t.numel());
        double maxabs = 0;
        for (size_t i : idx) {
            const double num = central_diff(m.params[t.offset + i], f), ana = m.grads[t.offset + i];
            INFO(t.name << "[" << i << "] analytic " << ana << " numeric " << num);
            CHECK(grad_close(ana, num));
            g.checked++;
            g.worst = std::max(g.worst, std::fabs(ana - num) / (1e-8 + 1e-6 * std::fabs(num)));
            g.max_error = std::max(g.max_error, std::fabs(ana - num));
            maxabs = std::max(maxabs, std::fabs(num));
        }
        INFO(t.name << ": every sampled gradient is ~0, the check would be vacuous");
        CHECK(maxabs > 1e-4);
    }
    return g;
}

}  // namespace

// ------------------------------------------------------------------------------------------------------
// Schedules, errors, accounting
// ------------------------------------------------------------------------------------------------------

TEST_CASE("the defaults are today's layer: same layout, accounting and reference bits", "[layers]") {
    for (const Preset& p : presets()) {
        ModelSpec s = spec(p.name);
        ModelConfig c = build(s), old = c;
        for (LayerSpec& l : old.layers) l = {l.width, l.heads};  // the two-column layer of before
        INFO(p.name);
        REQUIRE(same_layout(param_layout(c), param_layout(old)));
        for (int l = 0; l < c.L(); l++) {
            REQUIRE(c.layers[l].kv() == c.layers[l].heads);
            REQUIRE(c.layers[l].qkv_rows() == 3 * c.layers[l].width);
            REQUIRE(c.hidden_of(l) == c.hidden(c.layers[l].width));
        }
        REQUIRE(!has_layer_columns(c));
        REQUIRE(rule_hidden(c));
    }
    // Every column given explicitly at its default value builds the same model.
    ModelSpec s = spec("124M");
    s.kv_heads = "12x12", s.mlp = "2048x12", s.window = "0x12";
    ModelConfig c = build(s), u = build(spec("124M"));
    REQUIRE(same_layout(param_layout(c), param_layout(u)));
    REQUIRE(account(c).dense_flops_per_token == account(u).dense_flops_per_token);
    REQUIRE(account(c).kv_cache_bytes == account(u).kv_cache_bytes);
    // The reference runs the same arithmetic: explicit default columns give the same loss bits.
    ModelConfig a = small_config(16, {{16, 2}, {16, 4}}, NormType::LayerNorm, true), b = a;
    b.layers = {{16, 2, 2, a.hidden(16), 0}, {16, 4, 4, a.hidden(16), 0}};
    ref::RefModel<float> ma(a), mb(b);
    ma.init_params(5), mb.init_params(5);
    std::vector<int> in = {1, 2, 3, 4, 5, 6}, tg = {2, 3, 4, 5, 6, 7};
    REQUIRE(ma.forward(in.data(), tg.data(), 1, 6) == mb.forward(in.data(), tg.data(), 1, 6));
}

TEST_CASE("KV-head, MLP and window schedules: lists, run-length lists and named rules", "[layers]") {
    ModelSpec s = spec("124M");
    s.heads = "prism", s.kv_heads = "3x3,6x3,4x6";
    ModelConfig c = build(s);
    REQUIRE(rle_list(layer_kv_heads(c)) == "3x3,6x3,4x6");
    REQUIRE(c.layers[11].qkv_rows() == 768 + 2 * 4 * 64);
    s.heads = "uniform", s.kv_heads = "gqa:4";
    REQUIRE(rle_list(layer_kv_heads(build(s))) == "4x12");
    s.kv_heads = "mqa";
    REQUIRE(rle_list(layer_kv_heads(build(s))) == "1x12");

    // OpenELM's layer-wise scaling: heads from 0.5 to 1.0 x h_base (at divisors of the width), FFN 0.5 to 4.0 x w.
    s = spec("124M");
    s.heads = "openelm", s.mlp = "openelm";
    std::vector<std::string> warn;
    c = build(s, &warn);
    REQUIRE(c.layers.front().heads == 6);
    REQUIRE(c.layers.back().heads == 12);
    for (int l = 1; l < c.L(); l++) REQUIRE(c.layers[l].heads >= c.layers[l - 1].heads);
    REQUIRE(c.hidden_of(0) == 384);    // 0.5 x 768
    REQUIRE(c.hidden_of(11) == 3072);  // 4.0 x 768
    REQUIRE(c.hidden_of(6) == 1856);   // (0.5 + 3.5 x 6 / 11) x 768 = 1850.2 -> the nearest multiple of 32
    for (const std::string& x : warn) REQUIRE(x.find("design rule") == std::string::npos);  // Prism's rules only
    s.mlp = "openelm:1-2";
    c = build(s);
    REQUIRE(c.hidden_of(0) == 768);
    REQUIRE(c.hidden_of(11) == 1536);
    s.mlp = "1000x6,3000x6";
    REQUIRE(rle_list(layer_hidden(build(s))) == "1000x6,3000x6");

    s = spec("124M");
    s.window = "local:256,5:1";
    REQUIRE(rle_list(layer_windows(build(s))) == "256x5,0,256x5,0");
    s.window = "local:64";
    REQUIRE(rle_list(layer_windows(build(s))) == "64x12");
    s.window = "128x6,0x6";
    REQUIRE(rle_list(layer_windows(build(s))) == "128x6,0x6");
    s.window = "2000x12";  // not below T: global in effect, and said so
    build(s, &warn);
    REQUIRE(warn.size() == 1);  // once, naming every layer it concerns
    REQUIRE(warn[0] ==
            "layers 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12: window 2000 is not below T = 1024, so they "
            "attend globally");

    s = spec("tiny");
    s.no_attention = "2,4-5", s.no_mlp = "6";
    c = build(s);
    std::vector<bool> want_attn = {true, false, true, false, false, true};
    for (int l = 0; l < 6; l++) REQUIRE(c.layers[l].attention == want_attn[l]);
    REQUIRE(!c.layers[5].mlp);
    REQUIRE(c.hidden_of(5) == 0);
    const ParamLayout p = param_layout(c);
    REQUIRE(p.layer[1].wqkv == SIZE_MAX);
    REQUIRE(p.layer[5].wfc == SIZE_MAX);
    REQUIRE(p.layer[5].wqkv != SIZE_MAX);
}

TEST_CASE("bad layer columns are one-line errors naming the layer and the rule", "[layers][errors]") {
    ModelSpec s = spec("124M");
    s.heads = "prism", s.kv_heads = "gqa:4";  // layer 1 has 3 heads
    require_error(s, "layer 1: 3 query heads are not a multiple of 4 KV heads");
    s.heads = "uniform", s.kv_heads = "12x11,5";
    require_error(s, "layer 12: 12 query heads are not a multiple of 5 KV heads");
    s.kv_heads = "12x11";
    require_error(s, "--kv-heads has 11 entries but the model has 12 layers");
    s.kv_heads = "gqa:x";
    require_error(s, "--kv-heads gqa:G: 'x' is not a positive integer");
    s.kv_heads = "some";
    require_error(s, "unknown KV-head schedule 'some'");
    s = spec("124M");
    s.window = "local:0,5:1";
    require_error(s, "--window local:W: '0' must be positive");
    s.window = "local:256,5";
    require_error(s, "give the interleave as local:W,N:M");
    s.window = "-3x12";
    require_error(s, "unknown window schedule '-3x12'");
    s.window = "local";
    require_error(s, "unknown window schedule");
    s = spec("124M");
    s.mlp = "openelm:4-1";
    require_error(s, "give the range as openelm:LO-HI");
    s.mlp = "0x12";
    require_error(s, "--mlp: '0' must be positive");
    s = spec("tiny");
    s.no_attention = "2", s.no_mlp = "2";
    require_error(s, "layer 2: has neither attention nor an MLP");
    s.no_mlp = "", s.no_attention = "7";
    require_error(s, "--no-attention: '7' is not a layer range within 1..6");
    // validate_config, which also checks a model.bin's table: a negative window, kv above the heads
    ModelConfig c = small_config(16, {{16, 2}, {16, 2, 0, 0, -1}}, NormType::LayerNorm, true);
    REQUIRE_THROWS_WITH(validate_config(c), Catch::Contains("layer 2: window -1 is out of range [0, 1048576]"));
    c.layers[1] = {16, 2, 4};
    REQUIRE_THROWS_WITH(validate_config(c), Catch::Contains("layer 2: 2 query heads are not a multiple of 4 KV heads"));
    c.layers[1] = {16, 8, 2};  // 8 query heads over 2 KV heads, head_dim 2: valid
    validate_config(c);
    c.layers[1] = {12, 4, 2};  // an odd head_dim
    REQUIRE_THROWS_WITH(validate_config(c), Catch::Contains("layer 2: head_dim 3 (= 12 / 4) is odd"));
}

TEST_CASE("accounting: GQA shrinks wqkv and the KV cache, a window its FLOPs and cache, a dropped block all of it",
          "[layers]") {
    ModelSpec s = spec("124M");
    const Accounting u = account(build(s));
    const long long w = 768, hid = 2048, T = 1024, L = 12;
    s.kv_heads = "gqa:4";
    Accounting a = account(build(s));
    // wqkv (w + 2 * 4 * 64, w) instead of (3 w, w) in every layer
    REQUIRE(a.params == u.params - L * (2 * w - 2 * 4 * 64) * w);
    REQUIRE(a.kv_bytes_per_token * 3 == u.kv_bytes_per_token);  // 4 of 12 heads' K and V
    REQUIRE(a.dense_flops_per_token == u.dense_flops_per_token - 2.0 * L * (2 * w - 2 * 4 * 64) * w);

    s = spec("124M");
    s.window = "local:256,5:1";
    a = account(build(s));
    REQUIRE(a.params == u.params);
    REQUIRE(a.dense_flops_per_token == u.dense_flops_per_token - 10 * 4.0 * (T - 256) * w);
    REQUIRE(a.kv_bytes_per_token == u.kv_bytes_per_token);    // per token cached: unchanged
    REQUIRE(a.kv_cache_bytes == 4 * w * (10 * 256 + 2 * T));  // at T: a window caches 256
    REQUIRE(u.kv_cache_bytes == u.kv_bytes_per_token * T);

    s = spec("124M");
    s.no_attention = "12", s.no_mlp = "1";
    a = account(build(s));
    const long long norms = 2 * 2 * w;  // LayerNorm weight and bias of one sub-block
    REQUIRE(a.params == u.params - (4 * w * w + norms / 2) - (3 * w * hid + norms / 2));
    REQUIRE(a.kv_bytes_per_token == u.kv_bytes_per_token * 11 / 12);
    REQUIRE(a.layers[11].kv_bytes_per_token == 0);
    REQUIRE(a.layers[0].hidden == 0);

    // The JSON plan carries every column.
    char* buf = nullptr;
    size_t len = 0;
    FILE* f = open_memstream(&buf, &len);
    s = spec("124M");
    s.kv_heads = "gqa:4", s.window = "local:256,5:1";
    print_plan_json(f, "t", build(s), {});
    fclose(f);
    const std::string json(buf, len);
    free(buf);
    REQUIRE(json.find("\"kv_heads\": 4, \"hidden\": 2048, \"window\": 256") != std::string::npos);
    REQUIRE(json.find("\"head_dim\": 64") != std::string::npos);
    REQUIRE(json.find("\"kv_cache_bytes\"") != std::string::npos);
}

// ------------------------------------------------------------------------------------------------------
// The reference: ops and whole models
// ------------------------------------------------------------------------------------------------------

TEST_CASE("GQA attention equals multi-head attention over K/V heads repeated per group, bit for bit", "[layers]") {
    const int B = 2, T = 7, hd = 4, h = 6, kv = 2;
    const ref::AttnShape g = {h, kv, hd, 0}, full = {h, h, hd, 0};
    std::vector<double> qkv = randn((size_t)B * T * g.ld(), 11), rep((size_t)B * T * full.ld());
    for (int n = 0; n < B * T; n++)  // q as is; K/V head j / 3 for query head j
        for (int j = 0; j < h; j++)
            for (int c = 0; c < hd; c++) {
                rep[n * full.ld() + j * hd + c] = qkv[n * g.ld() + j * hd + c];
                rep[n * full.ld() + h * hd + j * hd + c] = qkv[n * g.ld() + h * hd + g.kv_of(j) * hd + c];
                rep[n * full.ld() + 2 * h * hd + j * hd + c] = qkv[n * g.ld() + h * hd + kv * hd + g.kv_of(j) * hd + c];
            }
    std::vector<double> o1((size_t)B * T * h * hd), o2(o1.size()), a1((size_t)B * h * T * T), a2(a1.size());
    ref::attention_forward(o1.data(), a1.data(), qkv.data(), B, T, g, 0.5);
    ref::attention_forward(o2.data(), a2.data(), rep.data(), B, T, full, 0.5);
    REQUIRE(o1 == o2);
    REQUIRE(a1 == a2);
    // Backward: a group's dK/dV is the sum of its heads' dK/dV in the repeated model.
    std::vector<double> dout = randn(o1.size(), 12), d1(qkv.size()), d2(rep.size());
    ref::attention_backward(d1.data(), dout.data(), qkv.data(), a1.data(), B, T, g, 0.5);
    ref::attention_backward(d2.data(), dout.data(), rep.data(), a2.data(), B, T, full, 0.5);
    for (int n = 0; n < B * T; n++)
        for (int k = 0; k < kv; k++)
            for (int c = 0; c < hd; c++) {
                double dk = 0, dv = 0;
                for (int j = k * 3; j < k * 3 + 3; j++)
                    dk += d2[n * full.ld() + h * hd + j * hd + c], dv += d2[n * full.ld() + 2 * h * hd + j * hd + c];
                REQUIRE(d1[n * g.ld() + h * hd + k * hd + c] == Approx(dk).epsilon(1e-12));
                REQUIRE(d1[n * g.ld() + h * hd + kv * hd + k * hd + c] == Approx(dv).epsilon(1e-12));
            }
}

TEST_CASE("a window W lets query i see keys i - W < j <= i, and only those", "[layers]") {
    const int B = 1, T = 9, hd = 4, h = 2, W = 3;
    const ref::AttnShape a = {h, h, hd, W};
    std::vector<double> qkv = randn((size_t)B * T * a.ld(), 13), out((size_t)T * h * hd), att((size_t)h * T * T);
    ref::attention_forward(out.data(), att.data(), qkv.data(), B, T, a, 0.5);
    for (int hh = 0; hh < h; hh++)
        for (int i = 0; i < T; i++) {
            double sum = 0;
            for (int j = 0; j < T; j++) {
                const double p = att[((size_t)hh * T + i) * T + j];
                INFO("head " << hh << " query " << i << " key " << j);
                REQUIRE((p > 0) == (j <= i && j > i - W));
                sum += p;
            }
            REQUIRE(sum == Approx(1.0).epsilon(1e-12));
        }
    // W >= T is global attention, exactly.
    std::vector<double> out2(out.size()), att2(att.size());
    ref::attention_forward(out2.data(), att2.data(), qkv.data(), B, T, ref::AttnShape{h, h, hd, T}, 0.5);
    ref::attention_forward(out.data(), att.data(), qkv.data(), B, T, ref::AttnShape{h, h, hd, 0}, 0.5);
    REQUIRE(out == out2);
}

TEST_CASE("whole-model gradients of every new column match finite differences", "[layers][reference]") {
    struct Case {
        const char* name;
        ModelConfig cfg;
    };
    const NormType LN = NormType::LayerNorm, RMS = NormType::RMSNorm;
    std::vector<Case> cases = {
        {"GQA (4 heads over 2 and 1 KV heads)", small_config(16, {{16, 4, 2}, {16, 4, 1}}, LN, true)},
        {"sliding window (2 and 4) and global",
         small_config(16, {{16, 2, 0, 0, 2}, {16, 2, 0, 0, 4}, {16, 2}}, RMS, false)},
        {"per-layer MLP hidden (8, 40)", small_config(16, {{16, 2, 0, 8}, {16, 2, 0, 40}}, LN, true)},
        {"no attention in layer 1, no MLP in layer 2",
         small_config(16, {{16, 2, 0, 0, 0, false, true}, {16, 2, 0, 0, 0, true, false}, {16, 2}}, LN, false)},
        {"NoPE in layers 1 and 3, with GQA and a window of 3",
         without_rope(small_config(16, {{16, 4, 2, 0, 3}, {16, 4, 1}, {16, 2, 0, 0, 2}}, LN, true), {0, 2})},
        {"all at once over X widths (32 16 8 24, d 16)", small_config(16,
                                                                      {{32, 4, 2, 24, 3, true, true},
                                                                       {16, 2, 1, 0, 0, false, true},
                                                                       {8, 2, 1, 16, 2, true, false},
                                                                       {24, 4, 4, 56, 0}},
                                                                      RMS, false)},
    };
    for (Case& k : cases) {
        INFO(k.name);
        const GradFigures g = check_gradients(k.cfg);
        char line[200];
        snprintf(line, sizeof line, "%s: %d gradients, max |analytic - numeric| %.2e, worst %.3f of the tolerance",
                 k.name, g.checked, g.max_error, g.worst);
        SUCCEED(line);  // shown with -s: the figures of the report
        REQUIRE(g.worst <= 1.0);
    }
}

TEST_CASE("the cached CPU decoder agrees with a full forward on GQA, windows and dropped blocks", "[layers]") {
    ModelConfig c =
        small_config(16, {{16, 4, 2, 0, 3}, {16, 2, 0, 24, 0, false, true}, {16, 4, 1, 0, 0, true, false}, {16, 2}},
                     NormType::LayerNorm, true);
    c.T = 12;
    ref::RefModel<float> m(c);
    m.init_params(9);
    std::vector<int> in = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
    m.forward(in.data(), nullptr, 1, (int)in.size());
    CpuDecoder dec(c, m.params, c.T);
    REQUIRE(dec.cache_bytes() == (size_t)account(c).kv_cache_bytes * 2);  // fp32: twice bf16's bytes
    std::vector<float> logits(c.V), chunk(4 * c.V);
    dec.append(in.data(), 4, chunk.data(), true);  // a chunk, then one token at a time
    for (int t = 0; t < 4; t++)
        for (int v = 0; v < c.V; v++) REQUIRE(chunk[t * c.V + v] == Approx(m.logits()[t * c.V + v]).margin(1e-5));
    for (size_t t = 4; t < in.size(); t++) {
        dec.append(&in[t], 1, logits.data());
        for (int v = 0; v < c.V; v++) REQUIRE(logits[v] == Approx(m.logits()[t * c.V + v]).margin(1e-5));
    }
}

TEST_CASE("the cached CPU decoder agrees with a full forward with NoPE layers beside rotary ones", "[layers]") {
    // NoPE with GQA and a window whose ring wraps, rotary beside it: the decoder skips the rotation where the
    // forward does, at every position.
    const ModelConfig c = without_rope(
        small_config(16, {{16, 4, 2, 0, 3}, {16, 4, 1}, {16, 2, 0, 0, 2}, {16, 4}}, NormType::RMSNorm, false), {0, 2});
    ref::RefModel<float> m(c);
    m.init_params(9);
    std::vector<int> in = {3, 1, 4, 1, 5, 9, 2, 6};
    m.forward(in.data(), nullptr, 1, (int)in.size());
    CpuDecoder dec(c, m.params, c.T);
    std::vector<float> logits(c.V), chunk(3 * c.V);
    dec.append(in.data(), 3, chunk.data(), true);
    for (int t = 0; t < 3; t++)
        for (int v = 0; v < c.V; v++) REQUIRE(chunk[t * c.V + v] == Approx(m.logits()[t * c.V + v]).margin(1e-5));
    for (size_t t = 3; t < in.size(); t++) {
        dec.append(&in[t], 1, logits.data());
        for (int v = 0; v < c.V; v++) REQUIRE(logits[v] == Approx(m.logits()[t * c.V + v]).margin(1e-5));
    }
}

TEST_CASE("a NoPE layer sees its keys as a set: one layer's last logits ignore the order of the earlier tokens",
          "[layers]") {
    // Without a rotation nothing in one causal attention layer knows a key's position, so permuting the tokens
    // before the last leaves the last position's logits unchanged up to the order of the sums (double: 1e-12);
    // with RoPE the same permutation moves them by O(1). A NoPE flag the reference ignored would fail here.
    for (bool rope : {false, true}) {
        ModelConfig c = small_config(16, {{16, 4, 2}}, NormType::LayerNorm, true);
        c.layers[0].rope = rope;
        ref::RefModel<double> m(c);
        m.init_params(5);
        randomize(m, 6);
        const std::vector<int> a = {3, 1, 4, 1, 5, 9}, b = {1, 5, 3, 4, 1, 9};  // b: a's first five permuted
        const int T = (int)a.size();
        m.forward(a.data(), nullptr, 1, T);
        const std::vector<double> la(m.logits() + (T - 1) * c.V, m.logits() + T * c.V);
        m.forward(b.data(), nullptr, 1, T);
        double diff = 0;
        for (int v = 0; v < c.V; v++) diff = std::max(diff, std::fabs(la[v] - m.logits()[(T - 1) * c.V + v]));
        INFO((rope ? "RoPE" : "NoPE") << ": max |logit difference| " << diff);
        if (rope) CHECK(diff > 1e-2);
        else CHECK(diff < 1e-12);
    }
}

// ------------------------------------------------------------------------------------------------------
// Checkpoints and a CPU run
// ------------------------------------------------------------------------------------------------------

TEST_CASE("model.bin version 5 carries the layer table; version 3 files still load", "[layers][checkpoint]") {
    ModelConfig c = small_config(16, {{16, 4, 2, 0, 3}, {16, 2, 0, 24, 0, false, true}, {16, 4, 1, 0, 0, true, false}},
                                 NormType::RMSNorm, false);
    const size_t P = param_layout(c).total;
    std::vector<float> p(P);
    for (size_t i = 0; i < P; i++) p[i] = (float)i * 1e-3f - 0.5f;
    char tmpl[] = "/tmp/prism_layers_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    save_model(dir + "/m.bin", c, p.data(), P, 7);
    LoadedModel m = load_model(dir + "/m.bin");
    REQUIRE(m.params == p);
    for (int l = 0; l < 3; l++) {
        const LayerSpec &a = m.cfg.layers[l], &b = c.layers[l];
        REQUIRE((a.width == b.width && a.heads == b.heads && a.kv_heads == b.kv_heads && a.hidden == b.hidden &&
                 a.window == b.window && a.attention == b.attention && a.mlp == b.mlp));
    }
    // A no_attention word beyond 0 and 1 is refused by its range check, before the checksum.
    {
        FILE* f = fopen((dir + "/m.bin").c_str(), "r+b");
        REQUIRE(f);
        const int32_t bad = 4;
        fseek(f, 1024 + 5 * 4, SEEK_SET);
        fwrite(&bad, 4, 1, f);
        fclose(f);
        REQUIRE_THROWS_WITH(load_model(dir + "/m.bin"), Catch::Contains("layer 1 no_attention = 4"));
    }
    // A version 3 file (8-byte table rows, as the previous writer made them) loads with every column at its default.
    ModelConfig old = small_config(16, {{16, 2}, {16, 4}}, NormType::LayerNorm, true);
    const size_t Po = param_layout(old).total;
    std::vector<float> po(Po, 0.25f);
    save_model(dir + "/v4.bin", old, po.data(), Po, 3, 77);
    std::vector<char> bytes;
    {
        FILE* f = fopen((dir + "/v4.bin").c_str(), "rb");
        REQUIRE(f);
        bytes.resize(1024 + 24 * 2 + 4 * Po);
        REQUIRE(fread(bytes.data(), 1, bytes.size(), f) == bytes.size());
        fclose(f);
    }
    std::vector<int32_t> h(256), table = {16, 2, 16, 4};
    memcpy(h.data(), bytes.data(), 1024);
    for (int i = 28; i < 256; i++) h[i] = 0;  // version 5's column count and names
    h[1] = 3;
    put64(h.data(), 24, 0);
    Checksum64 sum;
    sum.update(h.data(), 1024);
    sum.update(table.data(), 16);
    sum.update(po.data(), 4 * Po);
    put64(h.data(), 24, (int64_t)sum.value());
    write_atomically(dir + "/v3.bin", {{h.data(), 1024}, {table.data(), 16}, {po.data(), 4 * Po}});
    LoadedModel m3 = load_model(dir + "/v3.bin");
    REQUIRE(m3.params == po);
    REQUIRE(m3.cfg.layers[1].heads == 4);
    REQUIRE(m3.cfg.layers[1].kv() == 4);
    REQUIRE(m3.cfg.layers[1].window == 0);
    REQUIRE(m3.cfg.hidden_of(1) == old.hidden(16));
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("a CPU run of GQA, windows and a dropped block trains and resumes bit for bit", "[layers][train]") {
    const std::string dir = make_data_dir();
    auto cmd = [&](const std::string& out) {
        std::string c = micro(dir, out);
        const std::string from = "--layers 2 --heads 2";
        REQUIRE(c.find(from) != std::string::npos);
        return c.replace(c.find(from), from.size(),
                         "--layers 3 --heads 4 --kv-heads 2,1,4 --window 8,0,4 --mlp 64,96,96 --no-mlp 2 --cpu");
    };
    // train_util.h's resume check, on this shape.
    const Train train = [&](const std::string& out, const std::string& extra) { return sh(cmd(out) + extra); };
    auto la = check_resume(dir, train, 30, 15).straight_log;
    double first, last;
    sscanf(la[1].c_str(), "{\"step\": 1, \"tokens\": %*d, \"train_loss\": %lf", &first);
    sscanf(la[30].c_str(), "{\"step\": 30, \"tokens\": %*d, \"train_loss\": %lf", &last);
    REQUIRE(last < first - 1.0);
    LoadedModel ma = load_model(dir + "/straight/model.bin");
    REQUIRE(ma.cfg.layers[1].kv() == 1);
    REQUIRE(ma.cfg.layers[2].window == 4);
    REQUIRE(!ma.cfg.layers[1].mlp);
    // Resuming with another window is refused (the run record names the flag; the checkpoint's table would too).
    std::string other = cmd(dir + "/resumed");
    other.replace(other.find("--window 8,0,4"), 14, "--window 8,0,2");
    Result r = sh(other + " --steps 40 --resume");
    REQUIRE(r.rc != 0);
    REQUIRE(r.out.find("--window 8,0,2 differs from the recorded --window 8,0,4") != std::string::npos);
    ModelConfig want = ma.cfg;
    want.layers[2].window = 2;
    REQUIRE(model_difference(ma.cfg, want) == "layer 3 window 4 vs 2 asked for");
    want = ma.cfg, want.layers[0].kv_heads = 4;
    REQUIRE(model_difference(ma.cfg, want) == "layer 1 kv_heads 2 vs 4 asked for");
    sh("rm -rf '" + dir + "'");
}

// --match mlp as it was first written: the whole model recounted (account) after every trial move, O(L^2). The
// solver now updates the count by the moved layer's own (layer_cost), O(L); it must reach the very same sizes.
std::vector<int> match_by_recount(ModelConfig c) {
    const long long target = account(uniform_baseline(c)).matched_params;
    std::vector<int> h0(c.L(), 0);
    for (int l = 0; l < c.L(); l++) h0[l] = c.hidden_of(l);
    const long q = std::max(1, c.mlp_multiple);
    auto apply = [&](double f) {
        for (int l = 0; l < c.L(); l++)
            if (h0[l])
                c.layers[l].hidden = (int)std::min<long>(1 << 20, std::max<long>(q, std::lround(f * h0[l] / q) * q));
        return account(c).matched_params;
    };
    double lo = 1e-3, hi = 1e3;
    for (int i = 0; i < 100; i++) {
        const double mid = std::sqrt(lo * hi);
        (apply(mid) >= target ? hi : lo) = mid;
    }
    const long long below = apply(lo), above = apply(hi);
    long long now = apply(target - below <= above - target ? lo : hi);
    for (int l = c.L() - 1; l >= 0; l--) {
        if (!h0[l]) continue;
        for (int step : {(int)q, -(int)q}) {
            const int was = c.layers[l].hidden;
            if (was + step < q || was + step > 1 << 20) continue;
            c.layers[l].hidden = was + step;
            const long long next = account(c).matched_params;
            if (std::llabs(next - target) < std::llabs(now - target)) {
                now = next;
                break;
            }
            c.layers[l].hidden = was;
        }
    }
    std::vector<int> h(c.L());
    for (int l = 0; l < c.L(); l++) h[l] = c.hidden_of(l);
    return h;
}

TEST_CASE("--match mlp reaches the sizes a whole recount after every move reaches, in linear time", "[layers]") {
    struct Case {
        const char *preset, *heads, *widths, *kv, *mlp, *no_attn;
        int L;
    };
    // Widths above d (the X shape) give the first and last layers dead weights, the count's non-local part.
    for (const Case& k : {Case{"124M", "uniform", "uniform", "gqa:4", "uniform", "", 0},
                          Case{"124M", "openelm", "uniform", "uniform", "openelm", "", 0},
                          Case{"124M", "uniform", "x", "uniform", "openelm", "1", 0},
                          Case{"tiny", "prism", "uniform", "uniform", "openelm", "", 40},
                          Case{"tiny", "uniform", "uniform", "mqa", "openelm", "2,7-9", 300}}) {
        ModelSpec s = spec(k.preset);
        s.heads = k.heads, s.widths = k.widths, s.kv_heads = k.kv, s.mlp = k.mlp, s.no_attention = k.no_attn, s.L = k.L;
        const ModelConfig before = build(s);
        s.match = "mlp";
        const ModelConfig c = build(s);
        INFO(k.preset << " " << k.heads << " " << k.widths << " " << k.kv << " " << k.mlp << " L " << c.L());
        REQUIRE(layer_hidden(c) == match_by_recount(before));
    }
}

TEST_CASE("--match mlp scales every MLP by one factor until the layers match the uniform model", "[layers]") {
    struct Case {
        const char *heads, *kv, *mlp, *no_attn;
    };
    for (const Case& k : {Case{"uniform", "gqa:4", "uniform", ""}, Case{"openelm", "uniform", "openelm", ""},
                          Case{"prism", "3x3,6x3,4x6", "uniform", ""}, Case{"uniform", "uniform", "uniform", "1,12"}}) {
        ModelSpec s = spec("124M");
        s.heads = k.heads, s.kv_heads = k.kv, s.mlp = k.mlp, s.no_attention = k.no_attn;
        const ModelConfig before = build(s);
        s.match = "mlp";
        const ModelConfig c = build(s);
        const double ratio = (double)account(c).matched_params / account(uniform_baseline(c)).matched_params;
        INFO(k.heads << " " << k.kv << " " << k.mlp << " " << k.no_attn << ": hidden " << rle_list(layer_hidden(c))
                     << ", ratio " << ratio);
        REQUIRE(std::fabs(ratio - 1) < 0.0009);  // within one layer's rounding step (3 x 768 x 32 / 85M)
        REQUIRE(std::fabs((double)account(before).matched_params / account(uniform_baseline(c)).matched_params - 1) >
                0.02);  // and it had something to match
        // one factor: every layer's hidden over its unmatched hidden agrees to within one multiple (32) each
        for (int l = 1; l < c.L(); l++)
            if (c.layers[l].mlp)
                REQUIRE(std::fabs((double)c.hidden_of(l) / before.hidden_of(l) -
                                  (double)c.hidden_of(0) / before.hidden_of(0)) <=
                        32.0 / before.hidden_of(l) + 32.0 / before.hidden_of(0));
    }
    ModelSpec s = spec("124M");
    s.match = "heads";
    require_error(s, "unknown --match column 'heads'");
    s = spec("tiny");
    s.match = "mlp", s.mlp = "uniform", s.d = 128, s.L = 2, s.no_mlp = "1-2";
    require_error(s, "--match mlp: no layer has an MLP to scale");
}
