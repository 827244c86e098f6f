// Tests of model_config.h, run/plan_views.h and run/cli.h: the X solver against the released solver's output, the Prism preset
// against the paper's constraints and design rules, one test per validation error (with its message), the
// accounting identities, and the command-line table.
#include <catch2/catch.hpp>

#include <numeric>

#include <map>

#include "run/cli.h"
#include "run/model_flags.h"
#include "run/plan_views.h"
#include "model/spec.h"

static ModelConfig build(ModelSpec s, std::vector<std::string>* warn_out = nullptr) {
    std::vector<std::string> w;
    ModelConfig c = build_config(s, w);
    if (warn_out) *warn_out = w;
    return c;
}

static ModelSpec spec(const std::string& preset, const std::string& heads = "uniform",
                      const std::string& widths = "uniform") {
    ModelSpec s;
    s.preset = preset;
    s.heads = heads;
    s.widths = widths;
    return s;
}

// Asserts that building `s` fails with a message containing `needle`.
static void require_error(const ModelSpec& s, const std::string& needle) {
    try {
        build(s);
        FAIL("expected a ConfigError containing '" << needle << "'");
    } catch (const ConfigError& e) {
        INFO("message: " << e.what());
        REQUIRE(std::string(e.what()).find(needle) != std::string::npos);
        REQUIRE(std::string(e.what()).find('\n') == std::string::npos);  // one line
    }
}

TEST_CASE("x solver reproduces the released solver for d 640, L 16, k 12", "[schedule]") {
    WidthShape sh;
    sh.k = 12;
    std::vector<int> w = solve_widths(sh, 640, 16, 4.0);
    std::vector<int> expect = {1152, 960, 832, 704, 608, 512, 448, 352, 320, 256, 224, 192, 288, 480, 736, 1152};
    REQUIRE(w == expect);
    // The default turning layer is round(0.75 L) = 12, so the -w x flag gives the same widths.
    REQUIRE(layer_widths(build(spec("200M", "uniform", "x"))) == expect);
}

TEST_CASE("every width shape is parameter-matched within 1% as the paper counts", "[schedule]") {
    for (const char* preset : {"124M", "354M", "757M", "200M", "500M", "1B", "2B"})
        for (const char* shape : {"x", "v", "lambda", "3"}) {
            ModelConfig c = build(spec(preset, "uniform", shape));
            Accounting a = account(c), b = account(uniform_baseline(c));
            INFO(preset << " " << shape << " widths " << rle_list(layer_widths(c)));
            // Rounding each width to 32 moves sum w^2 by at most a few percent of one layer; the paper's 1%.
            REQUIRE(std::fabs((double)a.matched_params / b.matched_params - 1.0) < 0.01);
            std::vector<int> w = layer_widths(c);
            int narrowest = *std::min_element(w.begin(), w.end());
            // The narrowest width is 0.3 d before rounding to the quantum, lcm(32, 2 h_base) (h_base heads of
            // even head_dim divide every width): within half of it after rounding, plus the shift from
            // rounding w_1 first (8).
            const int q = std::lcm(32, 2 * c.h_base);
            REQUIRE(std::abs(narrowest - 0.3 * c.d) <= q / 2 + 8);
            for (const LayerSpec& l : c.layers) REQUIRE(l.width % q == 0);
            for (const LayerSpec& l : c.layers) REQUIRE(l.heads == c.h_base);
        }
}

TEST_CASE("x shape has the bottleneck at 0.75 L and equal ends", "[schedule]") {
    ModelConfig c = build(spec("1B", "uniform", "x"));
    std::vector<int> w = layer_widths(c);
    int k = (int)(std::min_element(w.begin(), w.end()) - w.begin()) + 1;
    REQUIRE(k == 24);  // 0.75 * 32
    REQUIRE(w.front() == w.back());
    REQUIRE(w.front() > c.d);
}

TEST_CASE("x schedule saves FLOPs and KV cache at equal parameters", "[schedule]") {
    for (const char* preset : {"124M", "200M", "2B"}) {
        ModelConfig c = build(spec(preset, "uniform", "x"));
        Accounting a = account(c), b = account(uniform_baseline(c));
        INFO(preset);
        REQUIRE(a.flops_per_token < b.flops_per_token);
        REQUIRE(a.kv_bytes_per_token < b.kv_bytes_per_token);
        REQUIRE(a.avg_width < b.avg_width);
    }
    // The paper's 200M: average layer size 640 -> 576.
    REQUIRE(account(build(spec("200M", "uniform", "x"))).avg_width == Approx(576.0));
}

TEST_CASE("prism preset obeys the three constraints and both design rules at every size", "[schedule]") {
    for (const auto& p : presets()) {
        std::vector<std::string> warnings;
        ModelConfig c = build(spec(p.name, "prism"), &warnings);
        INFO(p.name << " heads " << rle_list(layer_heads(c)));
        REQUIRE(warnings.empty());
        for (int l = 0; l < c.L(); l++) {
            REQUIRE(c.d % c.layers[l].heads == 0);                       // divisibility
            if (l) REQUIRE(c.layers[l].heads >= c.layers[l - 1].heads);  // monotonicity
        }
        REQUIRE(c.layers.back().heads == (p.xformer_recipe ? 16 : c.h_base));  // boundary convergence
        Accounting a = account(c), b = account(uniform_baseline(c));
        REQUIRE(a.params == b.params);  // exactly: W_Q, W_K, W_V, W_O keep their shapes
        REQUIRE(a.flops_per_token == b.flops_per_token);
        REQUIRE(a.dense_flops_per_token == b.dense_flops_per_token);
    }
    REQUIRE(rle_list(layer_heads(build(spec("124M", "prism")))) == "3x3,6x3,12x6");
    REQUIRE(rle_list(layer_heads(build(spec("354M", "prism")))) == "4x4,8x4,16x16");
    REQUIRE(rle_list(layer_heads(build(spec("757M", "prism")))) == "6x4,12x4,24x16");
    // Early head_dim 256 then 128 at 124M.
    ModelConfig c = build(spec("124M", "prism"));
    REQUIRE(c.layers[0].head_dim() == 256);
    REQUIRE(c.layers[3].head_dim() == 128);
    REQUIRE(c.layers[11].head_dim() == 64);
}

TEST_CASE("head lists: run-length and plain forms give the same schedule", "[schedule]") {
    REQUIRE(parse_layer_list("3x3,6x3,12x6", "h") == parse_layer_list("3,3,3,6,6,6,12,12,12,12,12,12", "h"));
    REQUIRE(parse_layer_list(" 4 x2 , 8", "h") == std::vector<int>{4, 4, 8});
    REQUIRE(rle_list({3, 3, 3, 6, 12, 12}) == "3x3,6,12x2");
}

TEST_CASE("a width schedule keeps the model's head rule: h_base heads per layer; narrow heads warn", "[schedule]") {
    std::vector<std::string> w;
    ModelConfig c = build(spec("tiny", "uniform", "x"), &w);
    CHECK(rle_list(layer_widths(c)) == "192,128,96,64,32,192");
    CHECK(rle_list(layer_heads(c)) == "4x6");  // not the Xformer presets' 16: head_dim 2 would learn nothing
    REQUIRE(w.size() == 1);
    CHECK(w[0] ==
          "layer 5: head_dim below 16 (down to 8); such narrow heads learn little: use fewer heads "
          "(--heads, -s) or --head-dim");
    CHECK(describe_config(c).find("heads 4x6 (h_base 4)") != std::string::npos);
    ModelConfig p = build(spec("tiny", "prism", "x"));
    CHECK(rle_list(layer_heads(p)) == "2x2,4x4");
    // 124M keeps 12 heads: widths are multiples of lcm(32, 24) = 96, and Prism + X divides them.
    ModelConfig b = build(spec("124M", "prism", "x"));
    for (int l = 0; l < b.L(); l++) CHECK(b.layers[l].width % 96 == 0);
    CHECK(rle_list(layer_heads(b)) == "3x3,6x3,12x6");
    // The Xformer presets' h_base is the paper's 16: their widths are the released solver's (test above).
    CHECK(rle_list(layer_heads(build(spec("200M", "uniform", "x")))) == "16x16");
    // Layers are numbered from 1 in every message.
    w.clear();
    build(spec("tiny", "uniform", "32x6"), &w);
    REQUIRE(w.size() == 1);
    CHECK(w[0].rfind("layers 1, 2, 3, 4, 5, 6: head_dim below 16 (down to 8)", 0) == 0);
}

TEST_CASE("prism and x combine: per-layer widths and per-layer heads", "[schedule]") {
    ModelConfig c = build(spec("200M", "prism", "x"));
    REQUIRE(c.layers[0].heads == 4);
    REQUIRE(c.layers[0].head_dim() == 1152 / 4);
    REQUIRE(c.layers.back().heads == 16);
    // A fixed head_dim instead of a fixed head count.
    ModelSpec s = spec("200M", "uniform", "x");
    s.head_dim = 32;
    c = build(s);
    for (auto& l : c.layers) REQUIRE(l.head_dim() == 32);
    REQUIRE(c.layers[0].heads == 1152 / 32);
}

TEST_CASE("uniform model is the ordinary transformer", "[schedule]") {
    ModelConfig c = build(spec("124M"));
    REQUIRE(c.D() == 768);
    REQUIRE(c.hidden_of(0) == 2048);
    // GPT-2 124M with RoPE and a tied vocabulary: 12 layers of 4 d^2 + 3 * d * 8/3 d plus norms, V d, final norm.
    long long d = 768, expect = 50257 * d + 12 * (4 * d * d + 3 * d * 2048 + 4 * d) + 2 * d;
    REQUIRE(account(c).params == expect);
    REQUIRE((long long)param_layout(c).total == expect);
    // FLOPs: 2 x matrices + 4 T d per layer + 2 d V.
    REQUIRE(account(c).flops_per_token ==
            Approx(2.0 * (expect - 50257 * d - 12 * 4 * d - 2 * d) + 12 * 4.0 * 1024 * d + 2.0 * d * 50257));
    REQUIRE(account(c).kv_bytes_per_token == 12 * 4 * d);
}

TEST_CASE("layout of an untied rmsnorm x model", "[schedule]") {
    ModelConfig c = build(spec("200M", "uniform", "x"));
    ParamLayout p = param_layout(c);
    REQUIRE(c.D() == 1152);
    REQUIRE(c.Df() == 1152);
    REQUIRE(p.lnf_b == SIZE_MAX);
    REQUIRE(p.lm_head != SIZE_MAX);
    REQUIRE(p.layer[0].ln1_b == SIZE_MAX);
    size_t sum = 0;
    for (auto& t : p.tensors) {
        REQUIRE(t.offset == sum);  // contiguous, in order
        sum += t.numel();
    }
    REQUIRE(sum == p.total);
}

// ---- one test per error, each with its message ----------------------------------------------------------

TEST_CASE("error: heads that do not divide the width", "[schedule][errors]") {
    require_error(spec("124M", "5,5,5,5,5,5,5,5,5,5,5,5"), "5 heads do not divide width 768");
}
TEST_CASE("error: odd head_dim", "[schedule][errors]") {
    ModelSpec s = spec("tiny", "uniform");
    s.d = 96;
    s.h_base = 32;  // head_dim 3
    require_error(s, "head_dim 3 (= 96 / 32) is odd");
}
TEST_CASE("error: decreasing prism schedule", "[schedule][errors]") {
    require_error(spec("124M", "12x6,6x3,3x3"), "head schedule decreases at layer 7 (12 -> 6)");
}
TEST_CASE("error: prism schedule not ending at h_base", "[schedule][errors]") {
    require_error(spec("124M", "3x6,6x6"), "ends at 6 heads but h_base is 12");
}
TEST_CASE("ablation flag allows breaking the hard prism constraints, with warnings", "[schedule][errors]") {
    ModelSpec s = spec("124M", "12x6,6x3,3x3");
    s.allow_ablation = true;
    std::vector<std::string> w;
    ModelConfig c = build(s, &w);
    REQUIRE(c.layers[11].heads == 3);
    REQUIRE(!w.empty());
}
TEST_CASE("error: head list of the wrong length", "[schedule][errors]") {
    require_error(spec("124M", "3x3,12x3"), "head schedule has 6 entries but the model has 12 layers");
}
TEST_CASE("error: width list of the wrong length", "[schedule][errors]") {
    require_error(spec("tiny", "uniform", "128,128"), "width schedule has 2 entries but the model has 6 layers");
}
TEST_CASE("error: width off its quantum", "[schedule][errors]") {
    require_error(spec("tiny", "uniform", "128,100,128,128,128,128"),
                  "width 100 is not a multiple of the width quantum 32");
}
TEST_CASE("error: unknown preset", "[schedule][errors]") {
    require_error(spec("125M"), "unknown preset '125M'; choose one of tiny, 124M");
}
TEST_CASE("error: unknown head and width schedules", "[schedule][errors]") {
    require_error(spec("tiny", "prsim"), "unknown head schedule 'prsim'");
    require_error(spec("tiny", "uniform", "y"), "unknown width schedule 'y'");
}
// A word no schedule knows (-w X: a capital) is named as given, with the words the flag takes; a list's item
// that is no number is named too. Never "'' is not a positive integer".
TEST_CASE("error: an unknown schedule word is named with the flag's choices", "[schedule][errors]") {
    require_error(spec("tiny", "uniform", "X"), "unknown width schedule 'X'; use uniform, x, v, lambda, 3 or a list");
    require_error(spec("tiny", "X"), "unknown head schedule 'X'; use uniform, prism, openelm, openelm:LO-HI or a list");
    require_error(spec("tiny", "uniform", "x5"), "unknown width schedule 'x5'");
    require_error(spec("tiny", "uniform", "128,X,128,128,128,128"),
                  "width schedule: 'X' is neither a number nor a run VALUExCOUNT (12x6)");
    require_error(spec("tiny", "3x"), "head schedule: '3x' is neither a number nor a run VALUExCOUNT");
    ModelSpec k = spec("tiny");
    k.kv_heads = "X";
    require_error(k, "unknown KV-head schedule 'X'; use uniform, mqa, gqa:G or a list");
    k.kv_heads = "gqa:";
    require_error(k, "--kv-heads gqa:G: a number is missing");
    ModelSpec m = spec("tiny");
    m.mlp = "X";
    require_error(m, "unknown MLP schedule 'X'; use uniform, openelm, openelm:LO-HI or a list");
    ModelSpec w = spec("tiny");
    w.window = "X";
    require_error(w, "unknown window schedule 'X'; use global, local:W, local:W,N:M or a list");
    // The same words through the flags, as the parser checks them (before the model is known).
    ModelSpec f;
    std::vector<Flag> flags;
    add_model_flags(flags, f);
    for (const char* flag : {"-w", "-s", "--kv-heads", "--mlp", "--window"}) {
        const Flag* hit = find_flag(flags, flag);
        REQUIRE(hit);
        try {
            hit->apply("X");
            FAIL(flag << " X was taken");
        } catch (const ConfigError& e) {
            INFO(flag << ": " << e.what());
            CHECK(std::string(e.what()).find("schedule 'X'; use ") != std::string::npos);
            CHECK(std::string(e.what()).find("''") == std::string::npos);
        }
    }
}
// Every layer list (--no-attention, --no-mlp, --no-rope: the switch columns) out of range says the model's own
// range, and the flag parser, which does not know the model yet, holds no other bound.
TEST_CASE("error: a layer list beyond the model says the model's layers", "[schedule][errors]") {
    ModelSpec f;
    std::vector<Flag> flags;
    add_model_flags(flags, f);
    for (const LayerColumn& col : layer_columns()) {
        if (!col.is_switch) continue;
        const std::string flag = canonical_flag(col);
        INFO(flag);
        for (const char* list : {"9", "2,5-9", "20000"}) {
            CHECK_NOTHROW(find_flag(flags, flag)->apply(list));  // its form is right; the model decides its range
            ModelSpec s = spec("tiny");                          // 6 layers
            s.*col.spec = list;
            const std::string item = std::string(list) == "2,5-9" ? "5-9" : list;
            require_error(s,
                          flag + ": '" + item + "' is not a layer range within 1..6, the layers of this model (L = 6)");
        }
        ModelSpec s = spec("tiny");
        s.L = 12;
        s.*col.spec = "13";
        require_error(s, "within 1..12, the layers of this model (L = 12)");
    }
}
// An odd head_dim is refused for the reason that holds in the layer: RoPE's pairs; without RoPE the CUDA kernels'
// pairs (attention.cuh, decode.cuh read a head as bf16 pairs); without attention, the exported config.json's rule.
TEST_CASE("error: an odd head_dim says why for that layer: RoPE, NoPE, no attention", "[schedule][errors]") {
    ModelSpec s = spec("tiny", "uniform");
    s.d = 96, s.h_base = 32;  // head_dim 3 in every layer
    require_error(s, "layer 1: head_dim 3 (= 96 / 32) is odd; RoPE rotates pairs of a head's values");
    s.no_rope = "1-6";
    require_error(s,
                  "layer 1: head_dim 3 (= 96 / 32) is odd; the layer uses no RoPE, but the CUDA attention kernels "
                  "read a head's values in pairs, so they need an even head_dim: choose a head count that gives "
                  "one");
    s.no_rope = "", s.no_attention = "1";
    require_error(s,
                  "layer 1: head_dim 3 (= 96 / 32) is odd; the layer has no attention, but its head count is still "
                  "exported");
    s.no_attention = "", s.no_rope = "2";  // layer 1 has RoPE: its reason is RoPE's
    require_error(s, "layer 1: head_dim 3 (= 96 / 32) is odd; RoPE rotates pairs");
}
TEST_CASE("error: non-positive sizes", "[schedule][errors]") {
    require_error(spec("tiny", "3,0,3,3,3,3"), "head schedule: '0' must be positive");
    require_error(spec("tiny", "uniform", "128,-32,128,128,128,128"), "unknown width schedule");
    ModelSpec s = spec("tiny");
    s.L = -1;
    require_error(s, "sizes must be positive");
}
TEST_CASE("error: turning layer out of range", "[schedule][errors]") {
    ModelSpec s = spec("200M", "uniform", "x");
    s.shape.k = 16;
    require_error(s, "turning layer k = 16 must lie in [2, L-1]");
}
TEST_CASE("warning: design rules broken but runnable", "[schedule]") {
    std::vector<std::string> w;
    build(spec("124M", "3,6x5,12x6"), &w);  // a single-layer step
    REQUIRE(w.size() >= 1);
    REQUIRE(w[0].find("hold 3 heads for 1 layers") != std::string::npos);
    build(spec("124M", "3x4,6x4,12x4"), &w);  // only 4 of 12 at h_base
    REQUIRE(w[0].find("only 4 of 12 layers use h_base") != std::string::npos);
}

// ---- the command line ----------------------------------------------------------------------------------

TEST_CASE("cli: unknown flags and bad values are one-line errors", "[cli]") {
    ModelSpec m;
    std::vector<Flag> flags;
    add_model_flags(flags, m);
    auto run = [&](std::vector<std::string> args) {
        args.insert(args.begin(), "prog");
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(&a[0]);
        parse_flags((int)argv.size(), argv.data(), flags, "prog");
    };
    REQUIRE_THROWS_WITH(run({"--frobnicate"}), Catch::Contains("unknown flag '--frobnicate'"));
    REQUIRE_THROWS_WITH(run({"--d"}), Catch::Contains("needs a value"));
    REQUIRE_THROWS_WITH(run({"--d", "12x"}), Catch::Contains("is not an integer"));
    REQUIRE_THROWS_WITH(run({"--d", "0"}), Catch::Contains("must be positive"));
    REQUIRE_THROWS_WITH(run({"--norm", "batchnorm"}), Catch::Contains("unknown norm"));
    run({"--d=256", "--layers", "8"});
    REQUIRE(m.d == 256);
    REQUIRE(m.L == 8);
}

// A layer list's mistakes said as what they are: a negative or empty number is no layer, a range runs forwards.
TEST_CASE("layer lists name a bad item as a layer number or range, a backwards range as backwards", "[schedule]") {
    for (const char* bad : {"-1", "3,", "1-", "x"}) {
        INFO(bad);
        CHECK_THROWS_WITH(layer_set(bad, 4, "--no-rope"), Catch::Contains("is not a layer number or range (3 or 5-7"));
    }
    CHECK_THROWS_WITH(layer_set("2-1", 4, "--no-attention"), "--no-attention: '2-1' runs backwards; write 1-2");
    CHECK_THROWS_WITH(layer_set("5", 4, "--no-mlp"),
                      "--no-mlp: '5' is not a layer range within 1..4, the layers of this model (L = 4)");
    CHECK(layer_set("1,3-4", 4, "--no-mlp") == std::vector<bool>{true, false, true, true});
}

// Warnings said once and only where they hold: a narrow head in a layer without attention is no head at all; a
// model without attention anywhere is said to be one.
TEST_CASE("model warnings: none for a layer without attention, one for a model without any", "[schedule]") {
    std::vector<std::string> w;
    ModelSpec s = spec("tiny", "uniform", "x");  // layer 5: width 32, 4 heads of head_dim 8
    s.no_attention = "5";
    build(s, &w);
    CHECK(w.empty());
    s.no_attention = "1-6";
    w.clear();
    build(s, &w);
    REQUIRE(w.size() == 1);
    CHECK(w[0].rfind("no layer has attention (--no-attention covers every layer)", 0) == 0);
}
