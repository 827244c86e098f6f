// Per-layer training signals (layer_stats.h): the CPU engine's against the same quantities computed here from the
// reference model, parameters before and after a step and the saved residual states. The GPU engine's against the
// CPU engine's: test_model_cuda.cpp. The log line and the report's picture: test_train.cpp, test_report.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <regex>
#include <sstream>
#include <vector>

#include "ref/cpu_engine.h"
#include "ref/reference.h"
#include "test/train_util.h"
#include "inspect/layer_heatmap.h"
#include "inspect/xml_check.h"
#include "model/spec.h"
#include "util/json.h"

namespace {

// --no-attention 5 --kv-heads 1x2,2x4 -w x in small: X widths around d, RMSNorm, untied; a layer without
// attention (the third), K/V groups of 2 and 4 query heads.
ModelConfig layer_stats_config() {
    ModelConfig c;
    c.V = 41, c.T = 8, c.d = 32, c.h_base = 4, c.mlp_multiple = 16, c.mlp_ratio = 4.0;
    c.layers = {{64, 4, 2}, {32, 4, 1}, {32, 4, 0, 0, 0, false}, {64, 4, 2}};
    c.norm = NormType::RMSNorm, c.tied = false, c.mup_attn = true, c.init_width_scale = true;
    validate_config(c);
    return c;
}

void batch(const ModelConfig& c, int B, int T, uint64_t seed, std::vector<int>& in, std::vector<int>& tg) {
    ref::Rng rng(seed);
    in.resize((size_t)B * T), tg.resize((size_t)B * T);
    for (size_t i = 0; i < in.size(); i++) in[i] = (int)(rng.next() % c.V), tg[i] = (int)(rng.next() % c.V);
}

double rel(double got, double want) { return std::fabs(got - want) / std::fabs(want); }

}  // namespace

TEST_CASE(
    "the CPU engine's per-layer gradient norms and RMS, update ratios and output RMS equal the reference's by "
    "hand",
    "[layerstats]") {
    const ModelConfig c = layer_stats_config();
    const ParamLayout lay = param_layout(c);
    const int B = 2, T = 8, L = c.L();
    CpuEngine e(c);
    e.init_params(3);
    OptimizerHyper hp;
    std::vector<int> in1, tg1, in2, tg2;
    // Two steps, so that the moments and the bias correction of the second are not the first's; a clip of 0.5
    // that bites (the engine scales its gradients in place: the norms must still be the ones before clipping).
    for (int step = 0; step < 2; step++) {
        batch(c, B, T, 10 + 2 * step, in1, tg1), batch(c, B, T, 11 + 2 * step, in2, tg2);
        std::vector<float> before(e.num_params()), after(e.num_params());
        e.get_params(before.data());
        // The reference from the same weights, its gradients of the same two micro-batches.
        ref::RefModel<float> rm(c);
        rm.params = before;
        rm.zero_grad();
        rm.forward(in1.data(), tg1.data(), B, T), rm.backward(0.5f);
        rm.forward(in2.data(), tg2.data(), B, T), rm.backward(0.5f);

        e.zero_grad();
        e.forward_backward(in1.data(), tg1.data(), B, T, 0.5f);
        e.forward_backward(in2.data(), tg2.data(), B, T, 0.5f, true);
        e.clip_grad_norm(0.5);
        e.adamw_step(1e-2, hp);
        const StepStats st = e.read_stats();
        REQUIRE(st.grad_norm > 0.5);  // the clip applied
        const LayerStats s = e.layer_stats();
        e.get_params(after.data());
        REQUIRE(s.grad_norm.size() == (size_t)L);
        REQUIRE(s.update_ratio.size() == (size_t)L);
        REQUIRE(s.out_rms.size() == (size_t)L);
        for (const std::vector<double>* v : {&s.grad_rms, &s.grad_rms_attn, &s.grad_rms_mlp})
            REQUIRE(v->size() == (size_t)L);

        // The sub-blocks by the tensors' names (h3.ln1_w, h3.wqkv, ...): attention's pre-norm, wqkv and wo; the
        // MLP's pre-norm, wfc and wproj. Sums of squares and parameter counts per layer and sub-block.
        auto attention = [](const std::string& name) {
            const std::string t = name.substr(name.find('.') + 1);
            return t == "ln1_w" || t == "ln1_b" || t == "wqkv" || t == "wo";
        };
        std::vector<double> g2(L, 0.0), w2(L, 0.0), d2(L, 0.0), o2(L, 0.0);
        std::vector<double> ga(L, 0.0), gm(L, 0.0), na(L, 0.0), nm(L, 0.0);
        for (const ParamTensor& t : lay.tensors) {
            if (t.layer < 0) continue;
            (attention(t.name) ? na : nm)[t.layer] += (double)t.numel();
            for (size_t i = t.offset; i < t.offset + t.numel(); i++) {
                g2[t.layer] += (double)rm.grads[i] * rm.grads[i];
                (attention(t.name) ? ga : gm)[t.layer] += (double)rm.grads[i] * rm.grads[i];
                if (!t.is_matrix) continue;
                const double d = (double)after[i] - before[i];
                w2[t.layer] += (double)before[i] * before[i], d2[t.layer] += d * d;
            }
        }
        double all = 0;  // the layers' squares and the rest's make up the global norm
        for (double x : rm.grads) all += (double)x * x;
        double layers = 0;
        for (int l = 0; l < L; l++) {
            const float* x = rm.residual_state(2 * l + 2);  // after layer l, the second micro-batch's
            for (int n = 0; n < B * T; n++)
                for (int j = 0; j < c.layers[l].width; j++) o2[l] += (double)x[n * c.D() + j] * x[n * c.D() + j];
            layers += g2[l];
        }
        CHECK(layers < all);
        CHECK(std::sqrt(all) == Approx(st.grad_norm).epsilon(1e-6));
        for (int l = 0; l < L; l++) {
            INFO("step " << step + 1 << " layer " << l << ": grad_norm " << s.grad_norm[l] << " vs " << std::sqrt(g2[l])
                         << ", update_ratio " << s.update_ratio[l] << " vs " << std::sqrt(d2[l] / w2[l]) << ", out_rms "
                         << s.out_rms[l] << " vs " << std::sqrt(o2[l] / ((double)B * T * c.layers[l].width)));
            // The gradients were summed in the same order in fp32 by both: only the unclipping's rounding (1e-7)
            // differs. The update is recovered from the new weights and moments: fp32 rounding of the new weight
            // (6e-8 of |w|, against an update of ~1e-2 of |w|) bounds its error near 1e-5.
            CHECK(rel(s.grad_norm[l], std::sqrt(g2[l])) <= 1e-6);
            CHECK(rel(s.update_ratio[l], std::sqrt(d2[l] / w2[l])) <= 1e-4);
            CHECK(rel(s.out_rms[l], std::sqrt(o2[l] / ((double)B * T * c.layers[l].width))) <= 1e-12);
            CHECK(s.grad_norm[l] > 0);
            CHECK(s.update_ratio[l] > 0);
            // The RMS per parameter: of the layer, of its attention and of its MLP (none in layer 3: NaN).
            INFO("grad_rms " << s.grad_rms[l] << ", attn " << s.grad_rms_attn[l] << ", mlp " << s.grad_rms_mlp[l]);
            CHECK(rel(s.grad_rms[l], std::sqrt(g2[l] / (na[l] + nm[l]))) <= 1e-6);
            CHECK(rel(s.grad_rms_mlp[l], std::sqrt(gm[l] / nm[l])) <= 1e-6);
            if (l == 2) {
                CHECK(na[l] == 0);
                CHECK(std::isnan(s.grad_rms_attn[l]));
            } else {
                CHECK(na[l] > 0);
                CHECK(rel(s.grad_rms_attn[l], std::sqrt(ga[l] / na[l])) <= 1e-6);
            }
        }
    }
}

TEST_CASE("a step the engine skips reports no update in its per-layer statistics", "[layerstats]") {
    const ModelConfig c = layer_stats_config();
    CpuEngine e(c);
    e.init_params(3);
    std::vector<int> in, tg;
    batch(c, 2, 8, 5, in, tg);
    e.zero_grad();
    e.forward_backward(in.data(), tg.data(), 2, 8, NAN);  // a NaN objective: non-finite loss, no update
    e.clip_grad_norm(1.0);
    e.adamw_step(1e-2, OptimizerHyper());
    REQUIRE_FALSE(std::isfinite(e.read_stats().loss));
    const LayerStats s = e.layer_stats();
    for (double r : s.update_ratio) CHECK(r == 0.0);
    for (double r : s.out_rms) CHECK(r > 0.0);
}

TEST_CASE("the layer furthest from the others: the largest |log(value / median)| over the positive finite values",
          "[layerstats]") {
    // Positive: 0.1, 1, 2, 4; the median of the logs between 1 and 2: sqrt(2). |ln(0.1 / 1.414)| = 2.65 beats
    // |ln(4 / 1.414)| = 1.04; NaN (no attention) and 0 (no logarithm) are nobody's.
    LayerOutlier o = furthest_layer({1, 2, NAN, 0.1, 4, 0});
    CHECK(o.layer == 3);
    CHECK(o.median == Approx(std::sqrt(2.0)).epsilon(1e-12));
    CHECK(o.factor == Approx(0.1 / std::sqrt(2.0)).epsilon(1e-12));
    // An odd count: the middle value; a ratio of 8 above beats 1/4 below (the log's measure, not the difference).
    o = furthest_layer({0.25, 1, 8});
    CHECK(o.layer == 2);
    CHECK(o.median == Approx(1.0));
    CHECK(o.factor == Approx(8.0));
    // A tie goes to the first layer; one value has no others to be far from.
    CHECK(furthest_layer({0.5, 1, 2}).layer == 0);
    CHECK(furthest_layer({3, NAN}).layer == -1);
    CHECK(furthest_layer({}).layer == -1);
}

TEST_CASE("docs/training.md's example of a norm's size bias: the parameter counts of tiny -w x --no-attention 5",
          "[layerstats][docs]") {
    const std::string doc = read_file("docs/training.md");
    static const std::regex stated(
        R"(`tiny -w x --no-attention 5` layer 5 \(32 wide, no attention\) holds 1/([0-9]+) of layer 1's parameters )"
        R"(\(192 wide\), so its\s+`grad_norm` is about ([0-9]+) times smaller)");
    std::smatch m;
    REQUIRE(std::regex_search(doc, m, stated));
    ModelSpec spec;
    spec.preset = "tiny", spec.widths = "x", spec.no_attention = "5";
    std::vector<std::string> warnings;
    const ModelConfig c = build_config(spec, warnings);
    REQUIRE(c.layers[0].width == 192);
    REQUIRE(c.layers[4].width == 32);
    const std::vector<std::array<double, 2>> n = layer_block_params(c);
    CHECK(n[4][kAttnBlock] == 0);
    const double ratio = (n[0][kAttnBlock] + n[0][kMlpBlock]) / (n[4][kAttnBlock] + n[4][kMlpBlock]);
    CHECK(std::lround(ratio) == std::stol(m[1].str()));
    CHECK(std::lround(std::sqrt(ratio)) == std::stol(m[2].str()));
}

namespace {

std::vector<double> numbers(const json::Value& a) {
    std::vector<double> v;
    for (const json::Value& x : a.arr) v.push_back(x.kind == json::Value::Number ? std::stod(x.str) : NAN);
    return v;
}

// The layer (from 0) whose value is furthest from the median in log terms, as docs/training.md defines it.
int furthest_by_hand(const std::vector<double>& v) {
    std::vector<double> logs;
    for (double x : v) logs.push_back(std::log(x));
    std::vector<double> sorted = logs;
    std::sort(sorted.begin(), sorted.end());
    const size_t n = sorted.size();
    const double median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    int best = 0;
    for (size_t l = 1; l < n; l++)
        if (std::fabs(logs[l] - median) > std::fabs(logs[best] - median)) best = (int)l;
    return best;
}

}  // namespace

TEST_CASE("log.jsonl carries each layer's signals every --layer-stats-every steps, and report draws them",
          "[layerstats][train][report]") {
    const std::string dir = make_data_dir(), out = dir + "/run";
    std::string c = micro(dir, out);
    const std::string from = "--layers 2 --heads 2";
    REQUIRE(c.find(from) != std::string::npos);
    c.replace(c.find(from), from.size(),
              "--layers 6 --heads 4 --no-attention 5 --kv-heads 1x2,2x4 -w x --cpu --steps 5 --layer-stats-every 2");
    Result r = sh(c);
    INFO(r.out);
    REQUIRE(r.rc == 0);
    // Each layer's parameters in its attention (norm, wqkv, wo) and MLP (norm, wfc, wproj), from run.json's table.
    const json::Value model = *json::parse(read_file(out + "/run.json")).find("model");
    const double norm_params = model.find("norm")->str == "layernorm" ? 2 : 1;  // LayerNorm's bias
    std::vector<double> n_attn, n_mlp;
    std::vector<std::string> what;  // "w 32, 4 heads", "w 16, no attention": how the terminal names a layer
    for (const json::Value& ly : model.find("layers")->arr) {
        auto num = [&](const char* k) {  // null: a column of a sub-block the layer lacks (its attention's here)
            return ly.find(k)->kind == json::Value::Null ? 0.0 : std::stod(ly.find(k)->str);
        };
        const double w = num("width"), hid = num("hidden"), kv = num("kv_heads") * num("head_dim");
        const bool attn = ly.find("attention")->b;
        n_attn.push_back(attn ? norm_params * w + (w + 2 * kv) * w + w * w : 0);
        n_mlp.push_back(norm_params * w + 3 * hid * w);
        what.push_back("w " + ly.find("width")->str +
                       (attn ? ", " + ly.find("heads")->str + " heads" : std::string(", no attention")));
    }
    REQUIRE(n_attn.size() == 6);
    CHECK(n_attn[4] == 0);  // --no-attention 5
    const std::map<long, std::string> log = read_log(out + "/log.jsonl");
    REQUIRE(log.size() == 5);
    std::map<long, json::Value> layers;  // the steps that measured them: every 2nd, and the last
    for (const auto& [step, line] : log) {
        const json::Value o = json::parse(line);
        const json::Value* ly = o.find("layers");
        INFO(line);
        CHECK((ly != nullptr) == (step % 2 == 0 || step == 5));
        if (!ly) continue;
        layers[step] = *ly;
        const std::vector<double> g = numbers(*ly->find("grad_norm")), u = numbers(*ly->find("update_ratio")),
                                  o2 = numbers(*ly->find("out_rms"));
        REQUIRE(g.size() == 6);
        REQUIRE(u.size() == 6);
        REQUIRE(o2.size() == 6);
        double sq = 0;
        for (int l = 0; l < 6; l++) {
            CHECK(g[l] > 0);
            CHECK(u[l] > 0);
            CHECK(u[l] < 1);  // lr 1e-2 moves a weight by ~1e-2 of its scale, never by all of it
            CHECK(o2[l] > 0);
            sq += g[l] * g[l];
        }
        // The layers' gradients are part of the whole: the embedding, the head and the final norm hold the rest.
        CHECK(std::sqrt(sq) < std::stod(o.find("grad_norm")->str));
        // The RMS per parameter: grad_norm / sqrt(n), and the sub-blocks' make up the layer's (null: no attention).
        const std::vector<double> rms = numbers(*ly->find("grad_rms")), ra = numbers(*ly->find("grad_rms_attn")),
                                  rm = numbers(*ly->find("grad_rms_mlp"));
        REQUIRE(rms.size() == 6);
        REQUIRE(ra.size() == 6);
        REQUIRE(rm.size() == 6);
        CHECK(ly->find("grad_rms_attn")->arr[4].kind == json::Value::Null);
        for (int l = 0; l < 6; l++) {
            INFO("layer " << l + 1);
            const double n = n_attn[l] + n_mlp[l];
            CHECK(rms[l] * std::sqrt(n) == Approx(g[l]).epsilon(2e-4));  // 5 significant digits each
            const double split = (l == 4 ? 0 : ra[l] * ra[l] * n_attn[l]) + rm[l] * rm[l] * n_mlp[l];
            CHECK(std::sqrt(split) == Approx(g[l]).epsilon(2e-4));
            CHECK(rm[l] > 0);
            if (l != 4) CHECK(ra[l] > 0);
        }
        // The terminal: after the step's line, one line naming the layer furthest from the others by grad_rms; at
        // the last step a row per layer instead, then the same.
        const int far = furthest_by_hand(rms);
        char head[32];
        snprintf(head, sizeof head, "step %5ld/5 |", step);
        const size_t at = r.out.find(head);
        REQUIRE(at != std::string::npos);
        const size_t next = r.out.find('\n', at) + 1;
        const std::string named = "layer " + std::to_string(far + 1) + " (" + what[far] + "), ";
        if (step < 5) {
            const std::string line = r.out.substr(next, r.out.find('\n', next) - next);
            INFO(line);
            CHECK(line.rfind("layers: grad_rms furthest from the others: " + named, 0) == 0);
            continue;
        }
        CHECK(r.out.compare(next, 27, "per-layer signals at step 5") == 0);
        for (int l = 0; l < 6; l++) {  // the row: the layer, what it is, the log's values to 4 digits
            char lead[64];
            snprintf(lead, sizeof lead, "  %5d  %-28s ", l + 1, what[l].c_str());
            const size_t row = r.out.find(lead, next);
            INFO(lead);
            REQUIRE(row != std::string::npos);
            std::istringstream cells(r.out.substr(row + strlen(lead), r.out.find('\n', row) - row - strlen(lead)));
            const std::vector<double> want = {g[l], rms[l], ra[l], rm[l], u[l], o2[l]};
            for (double x : want) {
                std::string cell;
                cells >> cell;
                INFO(cell << " vs " << x);
                if (std::isnan(x)) CHECK(cell == "-");
                else CHECK(std::stod(cell) == Approx(x).epsilon(6e-4));
            }
        }
        CHECK(r.out.find("furthest from the others by grad_rms (largest |log(grad_rms / median)|): " + named, next) !=
              std::string::npos);
    }
    REQUIRE(layers.size() == 3);

    // report: one heat map per signal, a cell per layer and logged step, holding the log's value.
    REQUIRE(sh("./report " + out + " -o " + dir + "/report.html").rc == 0);
    const std::string page = read_file(dir + "/report.html");
    REQUIRE(xml_error(page) == "");  // well-formed (inspect/xml_check.h, held to libxml2 by test_report.cpp)
    for (const char* signal : {"grad_norm", "update_ratio", "out_rms"}) {
        INFO(signal);
        const size_t at = page.find(std::string("class=\"layer-heatmap\" data-signal=\"") + signal + "\"");
        REQUIRE(at != std::string::npos);
        const std::string svg = page.substr(at, page.find("</svg>", at) - at);
        CHECK(svg.find("data-layers=\"6\" data-steps=\"3\"") != std::string::npos);
        size_t cells = 0;
        for (size_t p = svg.find("data-layer=\""); p != std::string::npos; p = svg.find("data-layer=\"", p + 1))
            cells++;
        CHECK(cells == 18);
        for (const auto& [step, ly] : layers) {
            const std::vector<double> v = numbers(*ly.find(signal));
            for (int l = 0; l < 6; l++) {
                char want[96], value[32];
                snprintf(value, sizeof value, "%.4g", v[l]);
                snprintf(want, sizeof want, "data-layer=\"%d\" data-step=\"%ld\" data-value=\"%s\"", l + 1, step,
                         value);
                INFO(want);
                CHECK(svg.find(want) != std::string::npos);
            }
        }
    }
    // --layer-stats-every 0: no "layers" in any line.
    std::string none = c;
    none.replace(none.find("--layer-stats-every 2"), 21, "--layer-stats-every 0");
    none.replace(none.find("-o " + out), 3 + out.size(), "-o " + dir + "/none");
    REQUIRE(sh(none).rc == 0);
    for (const auto& [step, line] : read_log(dir + "/none/log.jsonl"))
        CHECK(line.find("\"layers\"") == std::string::npos);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("the heat map colours on a log scale, greys what has no log, and thins long logs to 200 columns",
          "[layerstats][report]") {
    std::vector<long> steps;
    std::vector<std::vector<double>> v;
    for (long s = 1; s <= 500; s++) {
        steps.push_back(10 * s);
        v.push_back({1e-3, 1e-2, s == 500 ? 1e1 : 1.0});  // layer 3 explodes at the last step
    }
    v[0][1] = NAN, v[0][0] = 0.0;  // no value, and one that has no logarithm
    const std::string svg = svg::heat_map("t", "grad_norm", steps, v, 3);
    REQUIRE(xml_error(svg) == "");
    CHECK(svg.find("data-layers=\"3\" data-steps=\"200\"") != std::string::npos);
    size_t cells = 0;
    for (size_t p = svg.find("data-layer=\""); p != std::string::npos; p = svg.find("data-layer=\"", p + 1)) cells++;
    CHECK(cells == 600);
    CHECK(svg.find("(200 of 500 logged)") != std::string::npos);
    auto cell = [&](int layer, long step) {
        const std::string key =
            "data-layer=\"" + std::to_string(layer) + "\" data-step=\"" + std::to_string(step) + "\"";
        const size_t at = svg.find(key);
        REQUIRE(at != std::string::npos);
        const size_t fill = svg.rfind("fill=\"", at);
        return svg.substr(fill + 6, 7);
    };
    // The range is 1e-3 .. 1e1, four decades: the lowest cell is viridis' first stop, the highest its last, and 1e-2
    // (one decade up, a quarter of the way) its second; the first and last logged steps are both drawn.
    CHECK(cell(1, 5000) == "#440154");
    CHECK(cell(3, 5000) == "#fde725");
    CHECK(cell(2, 5000) == "#3b528b");
    CHECK(cell(1, 10) == "#cccccc");
    CHECK(cell(2, 10) == "#cccccc");
    CHECK(svg.find("data-layer=\"2\" data-step=\"10\" data-value=\"null\"") != std::string::npos);
    // Two logged steps draw a narrow map: the svg is still as wide as its title (7.5 px a bold character, from x 64)
    const std::string title = "Gradient norm per layer";
    const std::string two = svg::heat_map(title, "grad_norm", {10, 20}, {{1, 2}, {1, 2}}, 2);
    const size_t w = two.find(" width=\"");
    REQUIRE(w != std::string::npos);
    CHECK(std::stod(two.substr(w + 8)) >= 64 + 7.5 * title.size());
}
