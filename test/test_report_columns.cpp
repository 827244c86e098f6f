// test_report_columns.cpp: report and study read the per-layer columns from their declarations (model/layer_columns.h).
// report's per-layer table, on the page and in the terminal, shows every column the runs use (KV heads, MLP hidden,
// window, dropped sub-blocks, NoPE), a dropped attention shows no heads, the labels say what a model is ("no
// attention in layer 4"), and the uniform model is the one the built table says is uniform (a window of 0 in every
// layer is the global model); study takes every column's flag as a '/'-list axis. The per-layer signals' heat maps:
// one colour scale per signal over every run, rows labelled with the layer's shape, a sub-block a layer lacks as
// such, every logged key drawn, and a legend that calls a dark row starving only for a size-normalised signal.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "model/spec.h"
#include "run/plan_views.h"
#include "run/checkpoint.h"
#include "inspect/layer_heatmap.h"
#include "inspect/xml_check.h"
#include "test/inspect_util.h"
#include "test/test_util.h"
#include "test/train_util.h"
#include "util/fs.h"
#include "util/json.h"

namespace {

// tiny (6 layers, d 128, 4 heads) with a small vocabulary, built from `spec` as train_prism builds it.
ModelConfig tiny_model(ModelSpec spec) {
    spec.preset = "tiny", spec.V = 64;
    std::vector<std::string> warnings;
    return build_config(spec, warnings);
}

// A run of model `c` whose record gives the layer flags `args` (and --lr, --seed 1).
void write_model_run(const std::string& dir, const ModelConfig& c,
                     std::vector<std::pair<std::string, std::string>> args, double val) {
    args.insert(args.end(), {{"--lr", "0.003"}, {"--seed", "1"}});
    write_recorded_run(dir, "uniform", args, {val + 0.3, val});
    const std::vector<float> p = inspect_params(c, 1);
    save_model(dir + "/model.bin", c, p.data(), p.size(), 10);
}

ModelSpec every_column() {
    ModelSpec s;
    s.kv_heads = "gqa:2", s.window = "local:32,2:1", s.mlp = "openelm", s.no_attention = "4", s.no_rope = "2,6";
    return s;
}

const std::vector<std::pair<std::string, std::string>> kEveryColumnArgs = {
    {"--kv-heads", "gqa:2"}, {"--mlp", "openelm"}, {"--window", "local:32,2:1"},
    {"--no-attention", "4"}, {"--no-mlp", ""},     {"--no-rope", "2,6"}};
const std::vector<std::pair<std::string, std::string>> kUniformArgs = {
    {"--kv-heads", "uniform"}, {"--mlp", "uniform"}, {"--window", "global"}, {"--no-attention", ""}, {"--no-mlp", ""}};

// The line of a text table that starts with `label` (after the indent), split at runs of two spaces or more.
std::vector<std::string> row(const std::string& text, const std::string& label) {
    std::vector<std::string> out;
    const size_t at = text.find("\n  " + label + "  ");
    if (at == std::string::npos) return out;
    const std::string line = text.substr(at + 3, text.find('\n', at + 1) - at - 3);
    std::regex cell("\\S+( \\S+)*");
    for (std::sregex_iterator it(line.begin(), line.end(), cell), end; it != end; ++it) out.push_back(it->str());
    return out;
}

}  // namespace

TEST_CASE(
    "report shows every per-layer column a run uses, in the terminal and on the page; no heads where "
    "attention is dropped",
    "[report][columns]") {
    char tmpl[] = "/tmp/prism_report_columns_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    const ModelConfig every = tiny_model(every_column());
    REQUIRE(!every.layers[3].attention);
    write_model_run(dir + "/every", every, kEveryColumnArgs, 5.1);
    write_model_run(dir + "/uniform", tiny_model(ModelSpec()), kUniformArgs, 5.2);
    Result r = sh("./report " + dir + "/every " + dir + "/uniform -o " + dir + "/r.html --json " + dir + "/r.json");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    // The terminal: one table per group, every column the runs use, from the model as built.
    const size_t at = r.out.find("layers of ");
    REQUIRE(at != std::string::npos);
    const std::string t = r.out.substr(at, r.out.find("layers of ", at + 1) - at);
    auto expect = [&](const std::string& label, std::vector<std::string> cells) {
        cells.insert(cells.begin(), label);
        CHECK(row(t, label) == cells);
    };
    std::vector<std::string> hidden, kv, window;
    for (int l = 0; l < 6; l++) {
        hidden.push_back(std::to_string(every.hidden_of(l)));
        kv.push_back(l == 3 ? "-" : "2");
        const int w = every.layers[l].window;
        window.push_back(l == 3 ? "-" : w ? std::to_string(w) : "global");
    }
    expect("layer", {"1", "2", "3", "4", "5", "6"});
    expect("width", {"128", "128", "128", "128", "128", "128"});
    expect("heads", {"4", "4", "4", "-", "4", "4"});  // layer 4 has no attention: no heads
    expect("head_dim", {"32", "32", "32", "-", "32", "32"});
    expect("kv", kv);
    expect("hidden", hidden);
    expect("window", window);
    expect("attention", {"yes", "yes", "yes", "no", "yes", "yes"});
    expect("RoPE", {"yes", "no", "yes", "-", "yes", "no"});
    CHECK(row(t, "MLP").empty());  // no run drops an MLP: not shown
    CHECK(window[0] == "32");
    CHECK(window[2] == "global");
    // The page: the same rows, one table per model headed by its runs, the headings in words.
    const std::string html = read_text(dir + "/r.html");
    auto table_of = [&](const std::string& runs) {
        const size_t a = html.find("<h3>" + runs + "</h3>");
        return a == std::string::npos ? std::string() : html.substr(a, html.find("</table>", a) - a);
    };
    const std::string te = table_of("every"), tu = table_of("uniform");
    CHECK(has(te, "<tr><td>heads h_l</td><td>4</td><td>4</td><td>4</td><td>-</td><td>4</td><td>4</td></tr>"));
    CHECK(has(te, "<tr><td>RoPE</td><td>yes</td><td>no</td><td>yes</td><td>-</td><td>yes</td><td>no</td></tr>"));
    CHECK(has(te, "<tr><td>SwiGLU hidden</td><td>" + hidden[0] + "</td>"));
    CHECK(has(tu, "<tr><td>KV heads</td><td>4</td>"));
    // Each layer's parameters and forward FLOPs per token, model_config.h's accounting.
    CHECK(has(te, "<tr><td>forward FLOPs/token</td><td>" + human(account(every).layers[0].flops_per_token) + "</td>"));
    // The heads staircase has no step at layer 4: two polylines (layers 1-3 and 5-6) for that run.
    const size_t hc = html.find("<title>Heads per layer");
    REQUIRE(hc != std::string::npos);
    const std::string chart = html.substr(hc, html.find("</svg>", hc) - hc);
    const size_t g = chart.find("<g data-series=\"every\"");
    REQUIRE(g != std::string::npos);
    const std::string series = chart.substr(g, chart.find("</g>", g) - g);
    size_t lines = 0;
    for (size_t p = series.find("<polyline"); p != std::string::npos; p = series.find("<polyline", p + 1)) lines++;
    CHECK(lines == 2);
    // --json: every run's per-layer table, as the run record has it.
    const json::Value js = json::parse(read_text(dir + "/r.json"));
    const json::Value& layers = json::field(json::field(js, "runs").arr.at(0), "layers");
    REQUIRE(layers.arr.size() == 6);
    CHECK(!json::field(layers.arr[3], "attention").b);
    CHECK(!json::field(layers.arr[1], "rope").b);
    CHECK(json::int_field(layers.arr[0], "kv_heads") == 2);
    for (const char* key : {"heads", "kv_heads", "head_dim", "window", "rope"}) {  // as the tables' "-"
        INFO(key);
        CHECK(json::field(layers.arr[3], key).kind == json::Value::Null);
    }
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("report's labels say what a model is, and the uniform baseline is the model the built table calls uniform",
          "[report][columns]") {
    char tmpl[] = "/tmp/prism_report_labels_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    write_model_run(dir + "/a-every", tiny_model(every_column()), kEveryColumnArgs, 5.1);
    write_model_run(dir + "/b-uniform", tiny_model(ModelSpec()), kUniformArgs, 5.2);
    Result r = sh("./report " + dir + "/a-every " + dir + "/b-uniform -o " + dir + "/r.html");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    CHECK(r.out.find("  kv-heads gqa:2, mlp openelm, window local:32,2:1, no attention in layer 4, no RoPE in layers "
                     "2,6  ") != std::string::npos);
    CHECK(r.out.find("  kv-heads uniform, mlp uniform, window global, attention in every layer, RoPE in every layer "
                     "(baseline)  ") != std::string::npos);
    CHECK(r.out.find(" on,") == std::string::npos);  // never "no-attention on" for a model with every attention
    CHECK(r.out.find(" on ") == std::string::npos);

    // A window of 0 in every layer is the global model: the uniform baseline, though its flag's text is not
    // "global" (and though it is listed after a model that is not uniform).
    ModelSpec zero;
    zero.window = "0x6";
    ModelSpec kv;
    kv.kv_heads = "gqa:2";
    write_model_run(dir + "/c-kv", tiny_model(kv), {{"--kv-heads", "gqa:2"}, {"--window", "global"}}, 5.0);
    write_model_run(dir + "/d-zero", tiny_model(zero), {{"--kv-heads", "uniform"}, {"--window", "0x6"}}, 5.3);
    Result z = sh("./report " + dir + "/c-kv " + dir + "/d-zero -o " + dir + "/z.html");
    INFO(z.out);
    REQUIRE(z.rc == 0);
    CHECK(z.out.find("baseline: kv-heads uniform, window 0x6 (the group of the uniform model") != std::string::npos);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("study takes every layer column's flag as an axis, '/' for its commas, and sees one model spelled two ways",
          "[study][columns]") {
    char tmpl[] = "/tmp/prism_study_columns_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    // --no-rope, the newest column, is an axis like the others: its values' '/' become commas.
    Result l = sh("./study " + dir + "/s -m tiny --seeds 1 --grid no-rope=2/4,1/3/5 --list 2>&1");
    INFO(l.out);
    REQUIRE(l.rc == 0);
    CHECK(l.out.find("--no-rope 2,4") != std::string::npos);
    CHECK(l.out.find("--no-rope 1,3,5") != std::string::npos);
    // One model two ways: --no-rope with the same layers in another order.
    Result d = sh("./study " + dir + "/s -m tiny --seeds 1 --grid no-rope=2/4,4/2 --list 2>&1");
    CHECK(d.rc != 0);
    CHECK(d.out.find("resolve to the same run here") != std::string::npos);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("report prints one per-layer table per model: groups of one model (an lr sweep) share it",
          "[report][columns]") {
    char tmpl[] = "/tmp/prism_report_tables_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    const ModelConfig kv = tiny_model([] {
        ModelSpec s;
        s.kv_heads = "gqa:2";
        return s;
    }());
    write_model_run(dir + "/a", kv, {{"--kv-heads", "gqa:2"}, {"--lr", "0.001"}}, 5.1);
    write_model_run(dir + "/b", kv, {{"--kv-heads", "gqa:2"}, {"--lr", "0.002"}}, 5.0);
    write_model_run(dir + "/c", tiny_model(ModelSpec()), {{"--kv-heads", "uniform"}, {"--lr", "0.001"}}, 5.2);
    Result r = sh("./report " + dir + "/a " + dir + "/b " + dir + "/c -o " + dir + "/r.html");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    CHECK(r.out.find("layers of kv-heads gqa:2, lr 0.001 (a; the same model in 1 other group):\n") !=
          std::string::npos);
    CHECK(r.out.find("layers of kv-heads uniform, lr 0.001 (c):\n") != std::string::npos);
    size_t tables = 0;
    for (size_t at = r.out.find("layers of "); at != std::string::npos; at = r.out.find("layers of ", at + 1)) tables++;
    CHECK(tables == 2);
    sh("rm -rf '" + dir + "'");
}

namespace {

// Adds "layers": {KEY: [...], ...} to the log line of each step in `signals` (step -> the object's inside).
void add_layer_signals(const std::string& dir, const std::map<long, std::string>& signals) {
    std::string log, out;
    log = read_text(dir + "/log.jsonl");
    for (size_t a = 0; a < log.size();) {
        const size_t e = std::min(log.find('\n', a), log.size());  // read_text drops the last newline
        std::string line = log.substr(a, e - a);
        const long step = std::stol(line.substr(line.find("\"step\": ") + 8));
        if (signals.count(step)) line.insert(line.rfind('}'), ", \"layers\": {" + signals.at(step) + "}");
        out += line + "\n", a = e + 1;
    }
    write_atomically(dir + "/log.jsonl", {{out.data(), out.size()}});
}

// The page's heat map of `signal` for run `run` (its title), or "".
std::string heat_map_of(const std::string& html, const std::string& signal, const std::string& run) {
    const std::string key = "class=\"layer-heatmap\" data-signal=\"" + signal + "\"";
    for (size_t at = html.find(key); at != std::string::npos; at = html.find(key, at + 1)) {
        const std::string svg = html.substr(at, html.find("</svg>", at) - at);
        if (svg.find("font-weight=\"bold\">" + run + "</text>") != std::string::npos) return svg;
    }
    return "";
}

// A cell's fill: layer l (from 1) at step s.
std::string cell_fill(const std::string& svg, int l, long s) {
    const size_t at = svg.find("data-layer=\"" + std::to_string(l) + "\" data-step=\"" + std::to_string(s) + "\"");
    if (at == std::string::npos) return "";
    const size_t fill = svg.rfind("fill=\"", at);
    return svg.substr(fill + 6, 7);
}

}  // namespace

TEST_CASE(
    "report's per-layer heat maps: one colour scale per signal over every run, rows labelled with the layer's "
    "shape, a missing sub-block said, every logged signal drawn, and 'starving' only where the signal is normalised",
    "[report][columns][layerstats]") {
    char tmpl[] = "/tmp/prism_report_heat_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    ModelSpec x;
    x.widths = "x", x.no_attention = "5";
    const ModelConfig xc = tiny_model(x), uc = tiny_model(ModelSpec());
    REQUIRE(!xc.layers[4].attention);
    write_model_run(dir + "/uniform", uc, kUniformArgs, 5.2);
    write_model_run(dir + "/x", xc, {{"--widths", "x"}, {"--no-attention", "5"}}, 5.1);
    // uniform: every value 100; x: 1 .. 6 at step 5 (layer l: l), twice that at step 10; layer 5 has no attention.
    add_layer_signals(dir + "/uniform",
                      {{5,
                        "\"grad_norm\": [100, 100, 100, 100, 100, 100], \"grad_rms\": [1, 1, 1, 1, 1, 1], "
                        "\"grad_rms_attn\": [1, 1, 1, 1, 1, 1], \"new_signal\": [3, 3, 3, 3, 3, 3]"},
                       {10,
                        "\"grad_norm\": [100, 100, 100, 100, 100, 100], \"grad_rms\": [1, 1, 1, 1, 1, 1], "
                        "\"grad_rms_attn\": [1, 1, 1, 1, 1, 1], \"new_signal\": [3, 3, 3, 3, 3, 3]"}});
    add_layer_signals(dir + "/x", {{5,
                                    "\"grad_norm\": [1, 2, 3, 4, 5, 6], \"grad_rms\": [1, 1, 1, 1, 0.1, 1], "
                                    "\"grad_rms_attn\": [1, 1, 1, 1, null, 1]"},
                                   {10,
                                    "\"grad_norm\": [2, 4, 6, 8, 10, 12], \"grad_rms\": [1, 1, 1, 1, 0.1, 1], "
                                    "\"grad_rms_attn\": [1, 1, 1, 1, null, 1]"}});
    Result r = sh("./report " + dir + "/uniform " + dir + "/x -o " + dir + "/r.html");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    const std::string html = read_text(dir + "/r.html");
    REQUIRE(xml_error(html) == "");
    // One scale per signal: both runs' grad_norm maps span 10^0 (x's 1) to 10^2 (uniform's 100), so x's layer 1 at
    // step 5 is viridis' first stop and every uniform cell its last.
    const std::string gu = heat_map_of(html, "grad_norm", "uniform"), gx = heat_map_of(html, "grad_norm", "x");
    REQUIRE(!gu.empty());
    REQUIRE(!gx.empty());
    for (const std::string& m : {gu, gx}) {
        CHECK(has(m, "data-lo=\"0.000000\" data-hi=\"2.000000\""));
        CHECK(has(m, "data-layers=\"6\" data-steps=\"2\""));
    }
    CHECK(cell_fill(gx, 1, 5) == "#440154");
    CHECK(cell_fill(gu, 3, 10) == "#fde725");
    CHECK(cell_fill(gx, 6, 10) == svg::heat_colour(std::log10(12.0) / 2));
    // Rows: the layer's number, width, heads and what it has, as the per-layer table says; its row of the table as
    // the label's tooltip.
    const std::string w1 = std::to_string(xc.layers[0].width), w5 = std::to_string(xc.layers[4].width);
    CHECK(has(gx, "font-weight=\"bold\"><title>layer 1: width " + w1 + ", heads 4, head_dim "));
    CHECK(has(gx, "</title>w" + w1 + ", 4 heads, attn+MLP</text>"));
    CHECK(has(gx, "<title>layer 5: width " + w5 + ", heads -, head_dim -, kv -, attention no</title>w" + w5 +
                      ", MLP only</text>"));
    CHECK(has(gu, "</title>w128, 4 heads, attn+MLP</text>"));
    // A sub-block the layer lacks: white cells that say so, not a grey "no value".
    const std::string ax = heat_map_of(html, "grad_rms_attn", "x");
    REQUIRE(!ax.empty());
    CHECK(cell_fill(ax, 5, 5) == "#ffffff");
    CHECK(cell_fill(ax, 4, 5) != "#ffffff");
    CHECK(has(ax, "data-layer=\"5\" data-step=\"10\" data-value=\"null\"><title>layer 5 (w" + w5 +
                      ", MLP only), step 10: no attention</title>"));
    CHECK(has(ax, ">no attention</text>"));
    // A key report does not describe is drawn too, for the run that logged it.
    CHECK(!heat_map_of(html, "new_signal", "uniform").empty());
    CHECK(heat_map_of(html, "new_signal", "x").empty());
    // The legends: the size-normalised gradient first, and "starving" said of it, never of the raw norm.
    auto section = [&](const std::string& key) {
        const size_t at = html.find("<code>" + key + "</code></h3>");
        return at == std::string::npos ? std::string() : html.substr(at, html.find("<div", at) - at);
    };
    REQUIRE(!section("grad_rms").empty());
    REQUIRE(!section("grad_norm").empty());
    CHECK(html.find("<code>grad_rms</code></h3>") < html.find("<code>grad_norm</code></h3>"));
    CHECK(has(section("grad_rms"), "starving"));
    CHECK(!has(section("grad_norm"), "starv"));
    CHECK(has(section("grad_norm"), "not because it learns less"));
    sh("rm -rf '" + dir + "'");
}
