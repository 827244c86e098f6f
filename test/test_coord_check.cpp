// test_coord_check.cpp: report's coordinate check (inspect/report_coord.h) and the studies that feed it and the lr
// transfer study (studies/study.cpp's recipes coord, mup-lr, mup-shapes): the check's step is the last one every run
// logged; each cell is the mean over a width's runs of the logs' numbers; the exponent is the fit of log signal on
// log d; a real coord study's table is its runs' log.jsonl; the recipes list the grids docs/studies.md states.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test/test_util.h"
#include "test/train_util.h"
#include "util/fs.h"
#include "util/json.h"

namespace {

double num(const json::Value& v) { return std::strtod(v.str.c_str(), nullptr); }

// The signal `key` at step `step` of DIR/log.jsonl, read here line by line (not by report's reader).
std::vector<double> logged(const std::string& dir, long step, const std::string& key) {
    std::istringstream in(read_text(dir + "/log.jsonl"));
    for (std::string line; std::getline(in, line);) {
        const json::Value v = json::parse(line);
        if (json::int_field(v, "step") != step || !v.find("layers")) continue;
        std::vector<double> out;
        for (const json::Value& x : json::field(*v.find("layers"), key).arr) out.push_back(num(x));
        return out;
    }
    return {};
}

// A recorded run of tiny at width d with a log whose steps 1..steps each hold "layers" (out_rms and update_ratio,
// two layers: base x the step x (layer + 1)) unless listed in `bare`.
void write_coord_run(const std::string& dir, int d, const std::string& param, int seed, double base, long steps,
                     std::set<long> bare = {}) {
    make_dirs(dir);
    std::string log;
    for (long s = 1; s <= steps; s++) {
        char b[512];
        snprintf(b, sizeof b,
                 "{\"step\": %ld, \"tokens\": %ld, \"train_loss\": 9.0, \"lr\": 1e-3, \"grad_norm\": 0.5, "
                 "\"tokens_per_s\": 1000.0, \"elapsed_s\": %.3f",
                 s, s * 128, s * 0.1);
        log += b;
        if (!bare.count(s)) {
            snprintf(b, sizeof b, ", \"layers\": {\"out_rms\": [%.9g, %.9g], \"update_ratio\": [%.9g, %.9g]}", base * s,
                     2 * base * s, base / s, 2 * base / s);
            log += b;
        }
        log += "}\n";
    }
    write_atomically(dir + "/log.jsonl", {{log.data(), log.size()}});
    write_run_record(dir, "uniform", {{"--d", std::to_string(d)}, {"--param", param}, {"--seed", std::to_string(seed)}},
                     steps);
}

const json::Value* arm_of(const json::Value& check, const std::string& label) {
    for (const json::Value& a : json::field(check, "arms").arr)
        if (json::str_field(a, "arm") == label) return &a;
    return nullptr;
}

}  // namespace

TEST_CASE(
    "report's coordinate check: the last step every run logged, each cell the mean of a width's runs, the "
    "exponent the fit on log d",
    "[report][coord]") {
    char tmpl[] = "/tmp/prism_coord_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    // sp: out_rms grows as d (base = d / 64 at seed 1, and 3 d / 64 at seed 2: mean 2 d / 64); mup: flat (base 0.5).
    // Step 3 of one run has no layers, so the check is at step 2.
    for (int d : {64, 128, 256}) {
        write_coord_run(dir + "/sp-d" + std::to_string(d) + "-s1", d, "sp", 1, d / 64.0, 3);
        write_coord_run(dir + "/sp-d" + std::to_string(d) + "-s2", d, "sp", 2, 3 * d / 64.0, 3,
                        d == 128 ? std::set<long>{3} : std::set<long>{});
        write_coord_run(dir + "/mup-d" + std::to_string(d) + "-s1", d, "mup", 1, 0.5, 3);
    }
    Result r = sh("./report " + dir + " -o " + dir + "/r.html --json " + dir + "/r.json");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    const json::Value check = json::field(json::parse(read_text(dir + "/r.json")), "coord_check");
    CHECK(json::int_field(check, "step") == 2);
    const std::vector<json::Value>& widths = json::field(check, "widths").arr;
    REQUIRE(widths.size() == 3);
    CHECK(num(widths[0]) == 64);
    CHECK(num(widths[2]) == 256);
    const json::Value* sp = arm_of(check, "param sp");
    const json::Value* mup = arm_of(check, "param mup");
    REQUIRE(sp);
    REQUIRE(mup);
    for (size_t wi = 0; wi < 3; wi++) {
        const double d = 64 << wi;
        CHECK(num(json::field(*sp, "runs").arr[wi]) == 2);
        // Layer 2 at step 2: 2 x base x 2, the mean of the seeds' bases (d / 64 and 3 d / 64).
        CHECK(num(json::field(json::field(*sp, "out_rms"), "layers").arr[1].arr[wi]) ==
              Approx(2 * 2 * (2 * d / 64)).epsilon(1e-8));
        CHECK(num(json::field(json::field(*mup, "out_rms"), "layers").arr[0].arr[wi]) == Approx(0.5 * 2).epsilon(1e-8));
        CHECK(num(json::field(json::field(*sp, "update_ratio"), "layers").arr[0].arr[wi]) ==
              Approx((2 * d / 64) / 2).epsilon(1e-8));
    }
    CHECK(num(json::field(json::field(*sp, "out_rms"), "exponent").arr[0]) == Approx(1).epsilon(1e-8));
    CHECK(std::fabs(num(json::field(json::field(*mup, "out_rms"), "exponent").arr[1])) < 1e-8);
    CHECK(r.out.find("coordinate check: each layer's signal at step 2") != std::string::npos);
    CHECK(read_text(dir + "/r.html").find("<h2>Coordinate check</h2>") != std::string::npos);
    // --charts: one file per signal and arm, each a standalone SVG document.
    Result ch = sh("./report " + dir + " -o " + dir + "/r.html --charts " + dir + "/charts");
    REQUIRE(ch.rc == 0);
    CHECK(ch.out.find("report: wrote 4 charts into " + dir + "/charts") != std::string::npos);
    for (const char* f : {"coord_out_rms_1.svg", "coord_out_rms_2.svg", "coord_update_ratio_2.svg"}) {
        const std::string t = read_text(dir + "/charts/" + f);
        CHECK(t.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0);
        CHECK(t.find("at step 2 against width: param ") != std::string::npos);
    }
    sh("rm -rf '" + dir + "/charts'");
    // Runs of one width only: no check.
    sh("rm -rf '" + dir + "'/*-d128-* '" + dir + "'/*-d256-*");
    Result one = sh("./report " + dir + " -o " + dir + "/r.html --json " + dir + "/r.json");
    REQUIRE(one.rc == 0);
    CHECK(json::field(json::parse(read_text(dir + "/r.json")), "coord_check").kind == json::Value::Null);
    CHECK(one.out.find("coordinate check") == std::string::npos);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("study --recipe coord trains the widths under sp and mup, and report's check is their log.jsonl",
          "[study][report][coord]") {
    char tmpl[] = "/tmp/prism_coord_study_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    Result st = sh("./study " + dir + " --recipe coord --seeds 1 --grid d=32,64 --eval-data " + dir +
                   "/no-evals -- --steps 2 2>&1");
    INFO(st.out);
    REQUIRE(st.rc == 0);
    Result r = sh("./report " + dir + " -o " + dir + "/r.html --json " + dir + "/r.json");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    const json::Value check = json::field(json::parse(read_text(dir + "/r.json")), "coord_check");
    REQUIRE(check.kind == json::Value::Object);
    CHECK(json::int_field(check, "step") == 2);
    // A record holds --param only when it is mup (the standard parameterisation's records are as before it); the
    // label names the default.
    for (const std::string param : {"sp", "mup"}) {
        const json::Value* arm = arm_of(check, "param " + param);
        REQUIRE(arm);
        for (const std::string key : {"out_rms", "update_ratio"}) {
            const json::Value& sig = json::field(*arm, key);
            std::vector<std::vector<double>> by_width;
            for (int d : {32, 64}) {
                // The recipe's axis param first, then the command line's d.
                by_width.push_back(
                    logged(dir + "/uniform-uniform-param" + param + "-d" + std::to_string(d) + "-s1", 2, key));
                REQUIRE(by_width.back().size() == 6);
            }
            for (size_t l = 0; l < 6; l++) {
                INFO(param << " " << key << " layer " << l + 1);
                CHECK(num(json::field(sig, "layers").arr[l].arr[0]) == Approx(by_width[0][l]).epsilon(1e-8));
                CHECK(num(json::field(sig, "layers").arr[l].arr[1]) == Approx(by_width[1][l]).epsilon(1e-8));
                CHECK(num(json::field(sig, "exponent").arr[l]) ==
                      Approx(std::log(by_width[1][l] / by_width[0][l]) / std::log(2.0)).epsilon(1e-6));
            }
        }
    }
    sh("rm -rf '" + dir + "'");
}

TEST_CASE(
    "recipes mup-lr and mup-shapes: widths x parameterisation x lr, then shapes under muP sharing mup-lr's "
    "uniform runs",
    "[study][mup]") {
    char tmpl[] = "/tmp/prism_mup_recipes_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    auto listed = [&](const std::string& recipe) {
        std::map<std::string, std::string> runs;  // name -> command
        std::istringstream lines(sh("(./study " + dir + " --recipe " + recipe + " --list 2>/dev/null)").out);
        for (std::string line; std::getline(lines, line);) {
            const std::string cmd = line.substr(line.rfind('\t') + 1);
            const size_t o = cmd.find(" -o ") + 4;
            const std::string out = cmd.substr(o, cmd.find(' ', o) - o);
            runs[out.substr(out.rfind('/') + 1)] = cmd;
        }
        return runs;
    };
    const auto lr = listed("mup-lr"), shapes = listed("mup-shapes"), coord = listed("coord");
    CHECK(lr.size() == 3 * 2 * 5);
    CHECK(shapes.size() == 4 * 5);
    CHECK(coord.size() == 4 * 2 * 2);
    for (const auto& [name, cmd] : lr) {
        INFO(cmd);
        CHECK(cmd.find(" --param ") != std::string::npos);
        CHECK(cmd.find(" --steps 40 ") != std::string::npos);
    }
    size_t shared = 0;
    for (const auto& [name, cmd] : shapes) {
        INFO(cmd);
        CHECK(cmd.find(" --param mup ") != std::string::npos);
        CHECK(cmd.find(" --d 128 ") != std::string::npos);
        if (name.rfind("uniform-uniform-", 0) == 0) {
            REQUIRE(lr.count(name));
            CHECK(lr.at(name) == cmd);  // the same run: done once for both studies
            shared++;
        }
    }
    CHECK(shared == 5);
    for (const auto& [name, cmd] : coord) CHECK(cmd.find(" --layer-stats-every 1") != std::string::npos);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("report: an lr sweep under sp and mup draws one chart per parameterisation; a record without --param is sp",
          "[report][sweep][coord]") {
    char tmpl[] = "/tmp/prism_param_sweep_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    // sp's records hold no --param (as train_prism writes them); mup's best lr is 0.003, sp's 0.001.
    for (const char* lr : {"0.001", "0.003"}) {
        const bool low = std::string(lr) == "0.001";
        write_recorded_run(dir + "/sp-lr" + lr, "uniform", {{"--lr", lr}, {"--seed", "1"}}, {low ? 5.0 : 5.2});
        write_recorded_run(dir + "/mup-lr" + lr, "uniform", {{"--param", "mup"}, {"--lr", lr}, {"--seed", "1"}},
                           {low ? 5.3 : 5.1});
    }
    Result r = sh("./report " + dir + " -o " + dir + "/r.html --charts " + dir + "/charts");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    // The arms' best lr (the rows of "each arm at its best lr"), and one chart per parameterisation.
    const std::string lr_table = r.out.substr(r.out.find("each arm at its best lr"));
    CHECK(std::regex_search(lr_table, std::regex("\\n +param sp \\(baseline\\) +0\\.001 ")));
    CHECK(std::regex_search(lr_table, std::regex("\\n +param mup +0\\.003 ")));
    std::set<std::string> titles;
    for (const char* f : {"sweep_lr_1.svg", "sweep_lr_2.svg"}) {
        const std::string t = read_text(dir + "/charts/" + f);
        const size_t at = t.find("Final validation loss against lr (mean over seeds): ");
        REQUIRE(at != std::string::npos);
        titles.insert(t.substr(at + 52, t.find('<', at) - at - 52));
    }
    CHECK(titles == std::set<std::string>{"param sp", "param mup"});
    sh("rm -rf '" + dir + "'");
}
