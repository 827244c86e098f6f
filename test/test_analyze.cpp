// test_analyze.cpp: inspect/analysis.h's measurements on cases with known answers (hand-built attention patterns,
// matrices of known spectra, the logit lens at the last layer), and the analyze binary end to end: three
// checkpoints overlaid, every SVG and the JSON parsed strictly, bad input as one line.
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

TEST_CASE("the logit lens at the last layer is the model itself: its loss, agreement 1 (uniform, prism, x, lambda)",
          "[analyze]") {
    for (std::string kind : {"uniform", "prism", "x", "lambda"}) {
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
            CHECK(x.distance.size() == (size_t)c.layers[l - 1].heads);
            for (double d : x.distance) CHECK((d >= 0 && d <= (c.T - 1) / 2.0));  // between self and farthest
            for (double e : x.entropy) CHECK((e >= 0 && e <= std::log((double)c.T)));
            CHECK((x.matrix.normalized > 0 && x.matrix.normalized <= 1));
            CHECK(x.matrix.rank_bound == std::min(3L * c.T - 1, (long)c.layers[l - 1].width));
            CHECK((x.density > 0 && x.density <= 1));
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
    for (const char* name : {"attention_distance", "attention_entropy", "logit_lens_loss", "logit_lens_top1",
                             "matrix_entropy", "swiglu_density"}) {
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
