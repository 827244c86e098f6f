// test_doc_figures.cpp: the figures the documents state, computed from the code and compared: README.md's preset
// table (each preset's d, L, norm, tying and T), docs/training.md's "Flags and defaults" (the defaults that depend
// on the model and the data, and the learning-rate schedule's), and docs/model.md's 124M accounting table (every
// row's parameters, layer matrices, FLOPs and KV bytes, and their ratios to the uniform model). A figure is read at
// its place in the prose (a regex around it), so a figure changed in the document, or in the code, fails here.
// Run from the checkout's root (make test does); reads files, builds nothing.
#include <catch2/catch.hpp>

#include <cmath>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "model/spec.h"
#include "run/defaults.h"
#include "test/test_util.h"

namespace {

// A document with its whitespace runs made one space, so that a figure's phrase may be wrapped anywhere.
std::string flat(const std::string& path) {
    const std::string text = read_file(path);
    REQUIRE(!text.empty());
    return std::regex_replace(text, std::regex("\\s+"), " ");
}

// The first capture of `pattern` in `text`; fails the test naming the pattern when it is not there.
std::string figure(const std::string& text, const std::string& pattern) {
    std::smatch m;
    INFO("pattern: " << pattern);
    REQUIRE(std::regex_search(text, m, std::regex(pattern)));
    return m[1].str();
}
double number(const std::string& text, const std::string& pattern) {
    std::string s = figure(text, pattern);
    s.erase(std::remove(s.begin(), s.end(), ','), s.end());
    return std::stod(s);
}

// The table rows ("| a | b | c |" lines) of a markdown document, each split into its trimmed cells.
std::vector<std::vector<std::string>> table_rows(const std::string& path) {
    std::vector<std::vector<std::string>> rows;
    std::istringstream in(read_file(path));
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("|", 0) != 0) continue;
        std::vector<std::string> cells;
        std::stringstream ss(line.substr(1));
        for (std::string cell; std::getline(ss, cell, '|');)
            cells.push_back(std::regex_replace(cell, std::regex("^\\s+|\\s+$"), ""));
        rows.push_back(cells);
    }
    return rows;
}

ModelConfig preset_model(const std::string& preset, const std::string& flags = "") {
    ModelSpec s;
    s.preset = preset;
    std::istringstream in(flags);
    for (std::string flag, value; in >> flag >> value;) {
        if (flag == "-s") s.heads = value;
        else if (flag == "--mlp") s.mlp = value;
        else if (flag == "--kv-heads") s.kv_heads = value;
        else if (flag == "--window") s.window = value;
        else if (flag == "--match") s.match = value;
        else if (flag == "--mixer") s.mixer = value;
        else if (flag == "--seq-len") s.T = std::stoi(value);
        else FAIL("a flag this test does not know: " << flag);
    }
    std::vector<std::string> warnings;
    return build_config(s, warnings);
}

}  // namespace

TEST_CASE("README's preset table gives each preset's d, L, norm, tying and T as the code builds them", "[docs]") {
    std::vector<std::string> seen;
    for (const std::vector<std::string>& row : table_rows("README.md")) {
        if (row.size() < 3 || row[0].rfind("`", 0) != 0 || !std::regex_search(row[1], std::regex("^\\d+, \\d+")))
            continue;  // not a row of the preset table (`-m`, then "d, L")
        std::vector<std::string> names, dl;
        const std::regex quoted("`([^`]+)`");
        for (std::sregex_iterator it(row[0].begin(), row[0].end(), quoted), end; it != end; ++it)
            names.push_back((*it)[1]);
        std::stringstream ss(row[1]);
        for (std::string pair; std::getline(ss, pair, ';');) dl.push_back(pair);
        INFO("README row: " << row[0] << " | " << row[1] << " | " << row[2]);
        REQUIRE(names.size() == dl.size());
        const std::string& recipe = row[2];
        for (size_t i = 0; i < names.size(); i++) {
            const ModelConfig c = preset_model(names[i]);
            int d = 0, L = 0;
            REQUIRE(sscanf(dl[i].c_str(), " %d, %d", &d, &L) == 2);
            CHECK(c.d == d);
            CHECK(c.L() == L);
            if (has(recipe, "LayerNorm")) CHECK(c.norm == NormType::LayerNorm);
            if (has(recipe, "RMSNorm")) CHECK(c.norm == NormType::RMSNorm);
            if (has(recipe, "untied")) CHECK(!c.tied);
            else if (has(recipe, "tied")) CHECK(c.tied);
            std::smatch t;
            if (std::regex_search(recipe, t, std::regex("T (\\d+)"))) CHECK(c.T == std::stoi(t[1]));
            seen.push_back(names[i]);
        }
    }
    std::vector<std::string> all;
    for (const Preset& p : presets()) all.push_back(p.name);
    std::sort(seen.begin(), seen.end()), std::sort(all.begin(), all.end());
    CHECK(seen == all);  // every preset once, and nothing that is not one
}

TEST_CASE("docs/training.md's defaults are the code's", "[docs]") {
    const std::string doc = flat("docs/training.md");
    const TrainOptions o;
    CHECK(number(doc, "`--val-tokens` \\(default (\\d+)\\)") == o.val_tokens);
    TrainOptions gpu, cpu;
    default_model(gpu, true), default_model(cpu, false);
    CHECK(figure(doc, "without `-m`, `(\\w+)` on a GPU") == gpu.model.preset);
    CHECK(figure(doc, "on a GPU and `(\\w+)` on the CPU") == cpu.model.preset);
    CHECK(number(doc, "a model of (\\d+)M parameters or more gets the papers' recipe") * 1e6 == kLargeModel);
    CHECK(number(doc, "a global batch of ([\\d,]+) tokens") == kPaperBatchTokens);
    CHECK(number(doc, "(\\d+) tokens per parameter\\)") == kPaperTokensPerParam);
    CHECK(number(doc, "and (\\d+) passes of one micro-batch") == kDemoPasses);
    // The lr by size: each value below its bound, the next one from it on.
    const std::string lr = figure(doc, "`--lr` defaults by size as in GPT-3's table \\(([^)]*)\\)");
    std::vector<std::pair<double, double>> steps;  // (lr, upper bound in parameters)
    const std::regex step("([\\d.e-]+) (?:below|to) ([\\d.]+)([MB])");
    for (std::sregex_iterator it(lr.begin(), lr.end(), step), end; it != end; ++it)
        steps.push_back({std::stod((*it)[1]), std::stod((*it)[2]) * ((*it)[3] == "M" ? 1e6 : 1e9)});
    REQUIRE(steps.size() == 4);
    double from = 1e6;
    for (const auto& [value, bound] : steps) {
        INFO("lr " << value << " from " << from << " to " << bound);
        CHECK(default_lr(from) == value);
        CHECK(default_lr(bound * 0.999) == value);
        CHECK(default_lr(bound) != value);
        from = bound;
    }
    // The schedule's defaults.
    CHECK(number(doc, "default `--warmup-frac` ([\\d.]+) of the steps") == o.warmup_frac);
    CHECK(number(doc, "`--final-lr-frac` \\(default ([\\d.]+)\\)") == o.final_lr_frac);
    CHECK(figure(doc, "\\| `(\\w+)` \\(default\\) \\|") == o.lr_schedule);
    CHECK(number(doc, "the last `--decay-frac` of the steps \\(default ([\\d.]+)\\)") == kWsdDecayFrac);
    TrainOptions wsd;
    wsd.lr_schedule = "wsd";
    std::vector<std::string> notes;
    default_run(wsd, preset_model("tiny"), 1, notes);
    CHECK(figure(doc, "`--decay-shape` `(\\w+)` \\(1 - sqrt of the decay's progress, the default\\)") ==
          wsd.decay_shape);
    CHECK(number(doc, "a cooldown over (\\d+)% of the steps matches cosine") == kWsdDecayFrac * 100);
}

TEST_CASE("docs/model.md's 124M accounting table is account() of each schedule against the uniform model", "[docs]") {
    const std::string doc = flat("docs/model.md");
    const Accounting u = account(preset_model("124M"));
    // The uniform model's figures, stated before the table.
    const std::string head = figure(doc, "against the uniform model: ([^)]*)\\)");
    INFO("uniform: " << head);
    CHECK(std::fabs(number(head, "^([\\d.]+)M parameters") - u.params / 1e6) <= 0.005);
    CHECK(std::fabs(number(head, "([\\d.]+)M layer matrices") - u.matched_params / 1e6) <= 0.005);
    CHECK(std::fabs(number(head, "([\\d.]+)M forward FLOPs per token") - u.flops_per_token / 1e6) <= 0.005);
    CHECK(std::fabs(number(head, "([\\d.]+) KB KV cache per token") - u.kv_bytes_per_token / 1e3) <= 0.005);
    CHECK(std::fabs(number(head, "([\\d.]+) MB at T 1024") - u.kv_cache_bytes / 1e6) <= 0.005);
    // Each row: its flags (the same ... : the row before's and these), five "figure (ratio)" cells.
    std::string before;
    int rows = 0;
    for (const std::vector<std::string>& row : table_rows("docs/model.md")) {
        if (row.size() != 6 || row[1].find("M (") == std::string::npos) continue;
        std::string flags = figure(row[0], "`([^`]*)`");
        if (row[0].rfind("the same", 0) == 0) flags = before + " " + flags;
        before = flags;
        const Accounting a = account(preset_model("124M", flags));
        const double mine[5] = {(double)a.params, (double)a.matched_params, a.flops_per_token,
                                (double)a.kv_bytes_per_token, (double)a.kv_cache_bytes};
        const double base[5] = {(double)u.params, (double)u.matched_params, u.flops_per_token,
                                (double)u.kv_bytes_per_token, (double)u.kv_cache_bytes};
        const double unit[5] = {1e6, 1e6, 1e6, 1e3, 1e6};
        for (int k = 0; k < 5; k++) {
            INFO("row `" << flags << "` column " << k + 1 << ": " << row[k + 1]);
            double shown = 0, ratio = 0;
            char suffix = 0;
            REQUIRE(sscanf(row[k + 1].c_str(), "%lf%c (%lf)", &shown, &suffix, &ratio) == 3);
            CHECK(std::fabs(shown - mine[k] / unit[k]) <= 0.005);   // printed to 2 decimals
            CHECK(std::fabs(ratio - mine[k] / base[k]) <= 0.0005);  // printed to 3 decimals (or 1 when equal)
        }
        rows++;
    }
    CHECK(rows == 7);
}

TEST_CASE("docs/model.md's hybrid figures: state bytes per sequence, and the matched hybrid at T 4096", "[docs]") {
    const std::string doc = flat("docs/model.md");
    const Accounting h = account(preset_model("124M", "--mixer gdn:3:1"));
    CHECK(std::fabs(number(doc, "nine gdn layers add ([\\d.]+) MB of recurrent state") - h.state_bytes / 1e6) <= 0.005);
    CHECK(number(doc, "state per sequence \\(([\\d,]+) bytes each\\)") == h.layers[0].state_bytes);
    const Accounting m = account(preset_model("124M", "--mixer gdn:3:1 --match mlp --seq-len 4096"));
    const Accounting u = account(preset_model("124M", "--seq-len 4096"));
    CHECK(m.state_bytes == h.state_bytes);  // constant in T
    CHECK(std::fabs(number(doc, "hybrid runs ([\\d.]+)M FLOPs per token") - m.flops_per_token / 1e6) <= 0.005);
    CHECK(std::fabs(number(doc, "against the uniform model's ([\\d.]+)M") - u.flops_per_token / 1e6) <= 0.005);
    CHECK(std::fabs(number(doc, "holds ([\\d.]+) MB of KV cache") - m.kv_cache_bytes / 1e6) <= 0.005);
    CHECK(std::fabs(number(doc, "MB of KV cache against ([\\d.]+) MB") - u.kv_cache_bytes / 1e6) <= 0.005);
}
