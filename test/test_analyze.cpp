// test_analyze.cpp: inspect/analysis.h's measurements on cases with known answers (hand-built attention patterns,
// matrices of known spectra, the logit lens at the last layer, windowed attention's closed forms), windows, KV
// groups and layers without attention or MLP through a model, and the analyze binary end to end: three
// checkpoints overlaid, every SVG and the JSON parsed strictly, bad input as one line, a local/global model.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "inspect/analysis.h"
#include "run/checkpoint.h"
#include "util/json.h"
#include "run/run_dir.h"
#include "test/inspect_util.h"
#include "test/test_util.h"
#include "test/train_util.h"
#include "test/xml_lib.h"

namespace {

// Q (n, k) with orthonormal columns (Gram-Schmidt of random vectors); with `centred`, each also orthogonal to the
// all-ones vector, so Q's columns have mean 0.
std::vector<double> orthonormal(int n, int k, uint64_t seed, bool centred) {
    ref::Rng rng(seed);
    std::vector<std::vector<double>> basis = {std::vector<double>(n, 1.0 / std::sqrt((double)n))};
    if (!centred) basis.clear();
    const size_t skip = basis.size();
    while (basis.size() < k + skip) {
        std::vector<double> v(n);
        for (double& x : v) x = rng.uniform() - 0.5;
        for (const auto& b : basis) {
            double dot = 0;
            for (int i = 0; i < n; i++) dot += v[i] * b[i];
            for (int i = 0; i < n; i++) v[i] -= dot * b[i];
        }
        double norm = 0;
        for (double x : v) norm += x * x;
        for (double& x : v) x /= std::sqrt(norm);
        basis.push_back(v);
    }
    std::vector<double> q((size_t)n * k);
    for (int j = 0; j < k; j++)
        for (int i = 0; i < n; i++) q[(size_t)i * k + j] = basis[j + skip][i];
    return q;
}

// Z (N, w) = U diag(s) V^T + offset: column-centred singular values exactly s (plus zeros), any column offset.
std::vector<float> matrix_with_spectrum(int N, int w, const std::vector<double>& s, double offset, uint64_t seed) {
    const int k = (int)s.size();
    std::vector<double> U = orthonormal(N, k, seed, true), V = orthonormal(w, k, seed + 1, false);
    std::vector<float> Z((size_t)N * w);
    for (int i = 0; i < N; i++)
        for (int c = 0; c < w; c++) {
            double x = offset * (1 + c % 3);
            for (int j = 0; j < k; j++) x += U[(size_t)i * k + j] * s[j] * V[(size_t)c * k + j];
            Z[(size_t)i * w + c] = (float)x;
        }
    return Z;
}

double entropy_of(const std::vector<double>& s) {
    double t = 0, H = 0;
    for (double x : s) t += x;
    for (double x : s) H -= x / t * std::log(x / t);
    return H;
}

}  // namespace

TEST_CASE("attention distance: all on the token itself is 0, uniform causal attention the closed form", "[analyze]") {
    const int T = 9;
    std::vector<double> diag((size_t)T * T, 0.0), uni((size_t)T * T, 0.0), prev((size_t)T * T, 0.0);
    for (int i = 0; i < T; i++) {
        diag[(size_t)i * T + i] = 1;
        for (int j = 0; j <= i; j++) uni[(size_t)i * T + j] = 1.0 / (i + 1);
        prev[(size_t)i * T + std::max(0, i - 1)] = 1;  // the previous token (the first query: itself)
    }
    analysis::AttentionSums a, b, c;
    analysis::add_attention(a, diag.data(), T);
    analysis::add_attention(b, uni.data(), T);
    analysis::add_attention(c, prev.data(), T);
    CHECK(a.mean_distance() == 0);
    CHECK(a.mean_entropy() == 0);
    CHECK(b.mean_distance() == Approx((T - 1) / 4.0).epsilon(1e-12));            // mean over i of i / 2
    CHECK(b.mean_entropy() == Approx(std::lgamma(T + 1.0) / T).epsilon(1e-12));  // mean of ln(i + 1) = ln(T!) / T
    CHECK(c.mean_distance() == Approx((T - 1.0) / T).epsilon(1e-12));
    CHECK(c.mean_entropy() == 0);
    analysis::add_attention(b, diag.data(), T);  // sums over two sequences: the mean of the two
    CHECK(b.mean_distance() == Approx((T - 1) / 8.0).epsilon(1e-12));
}

TEST_CASE("matrix entropy on matrices of known spectra (flat, rank one, 3-2-1), whatever their offset", "[analyze]") {
    const int N = 40, w = 6;  // rank bound min(N - 1, w) = 6
    struct Case {
        std::vector<double> s;
        double want;
    };
    const std::vector<Case> cases = {
        {{2, 2, 2, 2, 2, 2}, 1.0},                           // flat over all 6 directions
        {{5}, 0.0},                                          // one direction
        {{3, 2, 1}, entropy_of({3, 2, 1}) / std::log(6.0)},  // H(1/2, 1/3, 1/6) / ln 6
        {{1, 1, 1}, std::log(3.0) / std::log(6.0)},          // flat over half of them
    };
    for (double offset : {0.0, 1000.0}) {  // a large common offset must not cancel digits (the Gram's shift)
        for (const Case& k : cases) {
            INFO("spectrum size " << k.s.size() << ", offset " << offset);
            const std::vector<float> Z = matrix_with_spectrum(N, w, k.s, offset, 3);
            analysis::Gram g(w);
            g.add(Z.data(), 25, w);  // in two blocks, as sequences arrive
            g.add(Z.data() + 25 * w, N - 25, w);
            const analysis::SpectrumEntropy e = analysis::matrix_entropy(g);
            CHECK(e.rank_bound == 6);
            if (offset == 0)
                CHECK(e.numerical_rank == (long)k.s.size());  // (the offset's fp32 rounding is noise
                                                              // above numpy's threshold)
            // fp32 storage of Z (relative 6e-8, times the offset's 1000 over s ~ 1: 1e-4 absolute on s) bounds it
            CHECK(e.normalized == Approx(k.want).margin(offset ? 2e-3 : 1e-5));
        }
    }
    // The rank bound is N - 1 when there are fewer tokens than width: 4 rows of width 6 have rank <= 3.
    const std::vector<float> Z = matrix_with_spectrum(4, 6, {1, 1, 1}, 0, 5);
    analysis::Gram g(6);
    g.add(Z.data(), 4, 6);
    CHECK(analysis::matrix_entropy(g).rank_bound == 3);
    CHECK(analysis::matrix_entropy(g).normalized == Approx(1.0).margin(1e-5));
}

TEST_CASE("the symmetric eigenvalue solver finds a conjugated diagonal's eigenvalues", "[analyze]") {
    const int n = 24;
    const std::vector<double> M = orthonormal(n, n, 9, false);  // A = M diag(want) M^T
    std::vector<double> want(n), A((size_t)n * n, 0.0);
    for (int i = 0; i < n; i++) want[i] = i < 3 ? 0.0 : (i - 3) * 0.75 - 2;  // a triple zero, negatives
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            for (int k = 0; k < n; k++) A[i * n + j] += M[i * n + k] * want[k] * M[j * n + k];
    const std::vector<double> got = analysis::symmetric_eigenvalues(A, n);
    std::sort(want.begin(), want.end());
    for (int i = 0; i < n; i++) CHECK(got[i] == Approx(want[i]).margin(1e-12));
}

TEST_CASE(
    "the logit lens at the last layer is the model itself: its loss, agreement 1 (uniform, prism, x, lambda, hybrid)",
    "[analyze]") {
    // hybrid: its gdn layers form no attention probabilities (no distance or entropy), the rest applies
    for (std::string kind : {"uniform", "prism", "x", "lambda", "hybrid"}) {
        INFO(kind);
        const ModelConfig c = inspect_config(kind, 37, 12);
        const std::vector<float> params = inspect_params(c, 2);
        ref::Rng rng(6);
        const analysis::ModelStats m = analysis::analyze_model(c, params, 3, c.T, 0.1, [&](int* in, int* tg) {
            for (int t = 0; t < c.T; t++) in[t] = (int)(rng.next() % c.V), tg[t] = (int)(rng.next() % c.V);
        });
        REQUIRE(m.layers.size() == (size_t)c.L() + 1);
        const analysis::LayerStats& last = m.layers.back();
        CHECK(last.lens_loss == Approx(m.loss).epsilon(1e-6));  // the same ops on the same state
        CHECK(last.lens_top1 == 1.0);
        CHECK(m.layers[0].lens_top1 < 1.0);  // the embedding alone does not predict like the model
        for (size_t l = 1; l < m.layers.size(); l++) {
            const analysis::LayerStats& x = m.layers[l];
            CHECK(x.distance.size() == (c.layers[l - 1].gdn() ? 0 : (size_t)c.layers[l - 1].heads));
            if (c.layers[l - 1].gdn()) CHECK(std::isnan(x.distance_mean));
            for (double d : x.distance) CHECK((d >= 0 && d <= (c.T - 1) / 2.0));  // between self and farthest
            for (double e : x.entropy) CHECK((e >= 0 && e <= std::log((double)c.T)));
            CHECK((x.matrix.normalized > 0 && x.matrix.normalized <= 1));
            CHECK(x.matrix.rank_bound == std::min(3L * c.T - 1, (long)c.layers[l - 1].width));
            if (c.layers[l - 1].mlp) CHECK((x.density > 0 && x.density <= 1));
        }
    }
}

TEST_CASE(
    "analyze overlays three checkpoints: table, JSON and one well-formed SVG per measurement; bad input is "
    "one line",
    "[analyze][cli]") {
    const std::string dir = make_data_dir();  // shards of tokens below 256
    std::vector<std::string> paths;
    for (std::string kind : {"uniform", "prism", "x"}) {
        const ModelConfig c = inspect_config(kind, 256, 16);
        const std::vector<float> p = inspect_params(c, 1);
        make_dirs(dir + "/" + kind);
        save_model(dir + "/" + kind + "/model.bin", c, p.data(), p.size(), 10);
        paths.push_back(dir + "/" + kind);
    }
    const std::string data = " --data '" + dir + "/syn_val_*.bin'";
    Result r = sh("./analyze " + paths[0] + " " + paths[1] + " " + paths[2] + "/model.bin --sequences 3 -o " + dir +
                  "/an --json " + dir + "/an.json" + data);
    INFO(r.out);
    REQUIRE(r.rc == 0);
    for (const char* col : {"attn dist", "attn ent", "lens loss", "lens top1", "matrix H", "density", "== uniform",
                            "== prism", "== x", "attention distance per head"})
        CHECK(r.out.find(col) != std::string::npos);
    for (const char* name : {"attention_distance", "attention_span_use", "attention_entropy", "logit_lens_loss",
                             "logit_lens_top1", "matrix_entropy", "swiglu_density"}) {
        const std::string svg = read_text(dir + "/an/" + name + ".svg");
        INFO(name);
        CHECK(libxml_error(svg) == "");
        for (const char* label : {">uniform<", ">prism<", ">x<"}) CHECK(svg.find(label) != std::string::npos);
    }
    if (sh("command -v xmllint").rc == 0)  // a second, independent parser where Debian's is installed
        CHECK(sh("xmllint --noout " + dir + "/an/*.svg").rc == 0);
    const json::Value j = json::parse(read_text(dir + "/an.json"));
    CHECK(json::field(j, "checkpoints").arr.size() == 3);
    CHECK(read_text(dir + "/an.json") == read_text(dir + "/an/analyze.json"));

    // Bad input: one line each.
    const ModelConfig small = inspect_config("uniform", 37, 16);
    const std::vector<float> ps = inspect_params(small, 1);
    save_model(dir + "/v37.bin", small, ps.data(), ps.size(), 1);
    Result vocab = sh("./analyze " + dir + "/v37.bin" + data);
    INFO(vocab.out);
    CHECK(one_line_error(vocab));
    CHECK(vocab.out.find("vocabulary of V = 37") != std::string::npos);
    for (std::string bad : {paths[0] + " --sequences 100000" + data, dir + "/missing.bin" + data,
                            paths[0] + " " + paths[1] + " --labels a" + data, std::string("")}) {
        Result e = sh("./analyze " + bad);
        INFO(bad << ": " << e.out);
        CHECK(one_line_error(e));
    }
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("attention against a window: reach, span use, near-half and beyond-local mass in closed form", "[analyze]") {
    const int T = 9, W = 4;
    std::vector<double> local((size_t)T * T, 0.0), global((size_t)T * T, 0.0);
    for (int i = 0; i < T; i++) {
        for (int j = std::max(0, i - W + 1); j <= i; j++) local[(size_t)i * T + j] = 1.0 / (std::min(i, W - 1) + 1);
        for (int j = 0; j <= i; j++) global[(size_t)i * T + j] = 1.0 / (i + 1);
    }
    analysis::AttentionSums a, b;
    analysis::add_attention(a, local.data(), T, W, W);  // uniform over the window, which is also W_min
    analysis::add_attention(b, global.data(), T, 0, W);
    // reach: min(i, 3) for i = 0..8 = 0 + 1 + 2 + 3 * 6 = 21; global: 0 + ... + 8 = 36.
    CHECK(a.mean_reach() == Approx(21.0 / T).epsilon(1e-12));
    CHECK(b.mean_reach() == Approx(36.0 / T).epsilon(1e-12));
    CHECK(a.mean_distance() == Approx(21.0 / 2 / T).epsilon(1e-12));  // r_i / 2 per query
    CHECK(a.span_use() == Approx(0.5).epsilon(1e-12));                // uniform over what it sees: 1/2
    CHECK(b.span_use() == Approx(0.5).epsilon(1e-12));
    // near half of a window of 4: distances 0 and 1: 1, 1, 2/3, then 1/2 for the six queries i >= 3.
    CHECK(a.near_mass() == Approx((1 + 1 + 2.0 / 3 + 6 * 0.5) / T).epsilon(1e-12));
    // near half of T = 9: distances 0..4 (2 k < 9): all of queries 0..4, then 5/6, 5/7, 5/8, 5/9.
    CHECK(b.near_mass() == Approx((5 + 5.0 / 6 + 5.0 / 7 + 5.0 / 8 + 5.0 / 9) / T).epsilon(1e-12));
    CHECK(a.beyond == 0);  // a window of W_min sees nothing at distance >= W_min
    // global: distances >= 4 hold (i - 3) / (i + 1) of query i's mass, i = 4..8
    CHECK(b.beyond / b.queries == Approx((1.0 / 5 + 2.0 / 6 + 3.0 / 7 + 4.0 / 8 + 5.0 / 9) / T).epsilon(1e-12));
}

namespace {
// A local/global model with KV groups and both kinds of dropped sub-block: layer 1 window 4 with 1 KV head,
// layer 2 global, layer 3 no attention, layer 4 window 4 and no MLP, layer 5 global. T 24.
ModelConfig local_global_config(int V, bool windows) {
    ModelConfig c;
    c.V = V, c.T = 24, c.d = 32, c.h_base = 4, c.mlp_multiple = 32;
    c.layers = {{32, 4, 1, 0, 4}, {32, 4}, {32, 4}, {32, 4, 0, 0, 4}, {32, 4}};
    c.layers[2].attention = false, c.layers[3].mlp = false;
    if (!windows)
        for (LayerSpec& s : c.layers) s.window = 0;
    validate_config(c);
    return c;
}
}  // namespace

TEST_CASE("analyze on a local/global model: a windowed layer's distance stays inside its window, no-op layers shown",
          "[analyze]") {
    const ModelConfig c = local_global_config(37, true), g = local_global_config(37, false);
    const std::vector<float> params = inspect_params(c, 4);  // windows change no parameter: g reads the same
    REQUIRE(param_layout(g).total == params.size());
    auto run = [&](const ModelConfig& m) {
        ref::Rng rng(8);
        return analysis::analyze_model(m, params, 3, m.T, 0.1, [&](int* in, int* tg) {
            for (int t = 0; t < m.T; t++) in[t] = (int)(rng.next() % m.V), tg[t] = (int)(rng.next() % m.V);
        });
    };
    const analysis::ModelStats m = run(c), u = run(g);
    CHECK(m.local_window == 4);
    CHECK(u.local_window == 0);
    // reach of a window of 4 over 24 tokens: (0 + 1 + 2 + 3 * 21) / 24; global: 23 / 2
    const double reach4 = (0 + 1 + 2 + 3.0 * 21) / 24;
    for (int l : {1, 4}) {
        const analysis::LayerStats& x = m.layers[l];
        INFO("layer " << l);
        CHECK(x.window == 4);
        CHECK(x.reach == Approx(reach4).epsilon(1e-12));
        REQUIRE(x.distance.size() == 4);
        for (double d : x.distance) CHECK((d > 0 && d <= x.reach));  // a window of 4: never past distance 3
        for (double b : x.beyond_local) CHECK(b == 0);
        CHECK(x.distance_mean < u.layers[l].distance_mean);  // the same queries and keys, seen globally, reach farther
        CHECK((x.span_use_mean > 0 && x.span_use_mean <= 1));
    }
    CHECK(m.layers[1].kv_heads == 1);
    for (int l : {2, 5}) {
        INFO("layer " << l);
        CHECK(m.layers[l].window == 0);
        CHECK(m.layers[l].reach == Approx(11.5).epsilon(1e-12));
        CHECK(m.layers[l].beyond_local_mean > 0);  // a global layer reads past what the local ones can
        CHECK(m.layers[l].distance_mean > m.layers[1].reach);
    }
    // Without its window, layer 1 (the same embedding in, the same weights) can see all of it.
    CHECK(u.layers[1].reach == Approx(11.5).epsilon(1e-12));
    const analysis::LayerStats& none = m.layers[3];
    CHECK(!none.attention);
    CHECK(none.distance.empty());
    CHECK(std::isnan(none.distance_mean));
    CHECK(std::isnan(none.span_use_mean));
    CHECK((none.density > 0 && none.density <= 1));  // its MLP is measured
    const analysis::LayerStats& nomlp = m.layers[4];
    CHECK(!nomlp.mlp);
    CHECK(std::isnan(nomlp.density));
    CHECK((nomlp.matrix.normalized > 0 && nomlp.matrix.normalized <= 1));  // its output is still a stream
    CHECK(m.layers.back().lens_top1 == 1.0);
}

TEST_CASE("the analyze binary on a local/global model with no-op layers: the window table and JSON", "[analyze][cli]") {
    const std::string dir = make_data_dir();
    const ModelConfig c = local_global_config(256, true);
    const std::vector<float> p = inspect_params(c, 1);
    make_dirs(dir + "/lg");
    save_model(dir + "/lg/model.bin", c, p.data(), p.size(), 10);
    Result r =
        sh("./analyze " + dir + "/lg --sequences 2 --json " + dir + "/lg.json --data '" + dir + "/syn_val_*.bin'");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    for (const char* want : {"window 4,0x2,4,0 (0 = global)", "attention against the window", "beyond 4", "no MLP",
                             "(no attention sub-block)", "global", "near half"})
        CHECK(r.out.find(want) != std::string::npos);
    const json::Value j = json::parse(read_text(dir + "/lg.json"));
    const json::Value& k = json::field(j, "checkpoints").arr.at(0);
    auto num = [](const json::Value& o, const char* key) { return std::stod(json::field(o, key).str); };
    auto null = [](const json::Value& o, const char* key) { return json::field(o, key).kind == json::Value::Null; };
    CHECK(json::int_field(k, "local_window") == 4);
    const auto& layers = json::field(k, "layers").arr;
    REQUIRE(layers.size() == 5);
    CHECK(json::int_field(layers[0], "window") == 4);
    CHECK(json::int_field(layers[0], "kv_heads") == 1);
    CHECK(num(layers[0], "beyond_local_mass") == 0);
    CHECK(num(layers[0], "attention_distance") <= num(layers[0], "reach"));
    CHECK(json::field(layers[2], "attention").kind == json::Value::Bool);
    CHECK(!json::field(layers[2], "attention").b);
    CHECK(null(layers[2], "attention_distance"));
    CHECK(!json::field(layers[3], "mlp").b);
    CHECK(null(layers[3], "swiglu_density"));
    CHECK(num(layers[4], "beyond_local_mass") > 0);
    sh("rm -rf '" + dir + "'");
}
