// test_study_report.cpp: report's pages of a study, on run directories written here (train_util.h's
// write_recorded_run): the seed groups' statistics recomputed from the runs' logs by an independent computation, each
// arm at its best value of a swept flag, and the default baseline (every layer column uniform). The statistics'
// formulas are test_stats.cpp's; the study tool that makes such directories is test_study.cpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "run/run_record.h"
#include "studies/stats.h"
#include "util/json.h"
#include "test/train_util.h"

namespace {

// The validation losses of a log.jsonl, read with sscanf alone (not json.h, not run_log.h).
std::vector<double> val_losses(const std::string& path) {
    std::ifstream f(path);
    std::vector<double> v;
    std::string line;
    while (std::getline(f, line)) {
        const size_t at = line.find("\"val_loss\": ");
        double x;
        if (at != std::string::npos && sscanf(line.c_str() + at + 12, "%lf", &x) == 1) v.push_back(x);
    }
    return v;
}

}  // namespace

TEST_CASE("report's seed groups: the statistics recomputed from the runs' logs", "[study][report]") {
    char tmpl[] = "/tmp/prism_groups_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    // Two configurations x three seeds, and an unrecorded run of a fourth seed that must stay a group of its own.
    const double u[3][3] = {{6.9, 6.5, 6.31}, {6.8, 6.45, 6.28}, {7.0, 6.6, 6.40}};
    const double p[3][3] = {{6.85, 6.4, 6.25}, {6.8, 6.44, 6.29}, {6.9, 6.5, 6.33}};
    std::vector<std::string> dirs;
    for (int s = 0; s < 3; s++) {
        dirs.push_back(dir + "/uniform-s" + std::to_string(s + 1));
        write_recorded_run(dirs.back(), "uniform", {{"--lr", "0.003"}, {"--seed", std::to_string(s + 1)}},
                           {u[s][0], u[s][1], u[s][2]});
        dirs.push_back(dir + "/prism-s" + std::to_string(s + 1));
        write_recorded_run(dirs.back(), "prism", {{"--lr", "0.003"}, {"--seed", std::to_string(s + 1)}},
                           {p[s][0], p[s][1], p[s][2]});
    }
    Result r = sh("./report " + dir + "/prism-s1 " + dir + "/uniform-s1 " + dir + "/prism-s2 " + dir + "/uniform-s2 " +
                  dir + "/prism-s3 " + dir + "/uniform-s3 -o " + dir + "/r.html --json " + dir + "/r.json");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    CHECK(r.out.find("heads uniform (baseline)") != std::string::npos);  // the default baseline, though listed second

    // Independently: final and best validation loss per run from the logs, the groups' means and sample stds, and
    // the paired difference prism - uniform by seed with the tabled t_{0.975, 2} = 4.30265.
    auto mean = [](const std::vector<double>& v) {
        double s = 0;
        for (double x : v) s += x;
        return s / v.size();
    };
    auto sd = [&](const std::vector<double>& v) {
        const double m = mean(v);
        double s = 0;
        for (double x : v) s += (x - m) * (x - m);
        return std::sqrt(s / (v.size() - 1));
    };
    std::vector<double> uf, pf, ub, pb, df, db;
    for (int s = 1; s <= 3; s++) {
        const std::vector<double> a = val_losses(dir + "/uniform-s" + std::to_string(s) + "/log.jsonl");
        const std::vector<double> b = val_losses(dir + "/prism-s" + std::to_string(s) + "/log.jsonl");
        uf.push_back(a.back()), pf.push_back(b.back());
        ub.push_back(*std::min_element(a.begin(), a.end())), pb.push_back(*std::min_element(b.begin(), b.end()));
        df.push_back(pf.back() - uf.back()), db.push_back(pb.back() - ub.back());
    }
    const json::Value js = json::parse(read_text(dir + "/r.json"));
    CHECK(json::str_field(js, "baseline") == "heads uniform");
    const json::Value& groups = json::field(js, "groups");
    REQUIRE(groups.arr.size() == 2);
    auto num = [](const json::Value& o, const char* k) { return std::strtod(json::field(o, k).str.c_str(), nullptr); };
    for (const json::Value& g : groups.arr) {
        const bool prism = json::str_field(g, "label") == "heads prism";
        INFO(json::str_field(g, "label"));
        CHECK(json::field(g, "runs").arr.size() == 3);
        const json::Value& q = json::field(g, "quantities");
        const json::Value& fin = json::field(q, "final val loss");
        const json::Value& best = json::field(q, "best val loss");
        CHECK(num(fin, "mean") == Approx(mean(prism ? pf : uf)).epsilon(1e-7));
        CHECK(num(fin, "std") == Approx(sd(prism ? pf : uf)).epsilon(1e-6));
        CHECK(num(best, "mean") == Approx(mean(prism ? pb : ub)).epsilon(1e-7));
        if (!prism) {
            CHECK(fin.find("vs_baseline") == nullptr);
            continue;
        }
        for (const auto& [v, d] : {std::make_pair(&fin, &df), std::make_pair(&best, &db)}) {
            const json::Value& vs = json::field(*v, "vs_baseline");
            CHECK(json::int_field(vs, "n") == 3);
            CHECK(num(vs, "mean") == Approx(mean(*d)).epsilon(1e-6));
            const double half = 4.30265 * sd(*d) / std::sqrt(3.0);
            CHECK(num(vs, "lo") == Approx(mean(*d) - half).margin(1e-5));
            CHECK(num(vs, "hi") == Approx(mean(*d) + half).margin(1e-5));
        }
    }
    // The page shows the same numbers, and a band per group.
    const std::string html = read_text(dir + "/r.html");
    char want[64];
    snprintf(want, sizeof want, "%.4f ± %.4f", mean(pf), sd(pf));
    CHECK(html.find(want) != std::string::npos);
    CHECK(html.find("Validation loss, mean over seeds") != std::string::npos);
    CHECK(html.find("<polygon fill=\"currentColor\" fill-opacity=\"0.16\"") != std::string::npos);

    // --baseline by a run's name; an unknown one is one line naming the groups.
    Result b = sh("./report " + dirs[0] + " " + dirs[1] + " -o " + dir + "/b.html --baseline prism-s1");
    CHECK(b.rc == 0);
    CHECK(b.out.find("heads prism (baseline)") != std::string::npos);
    Result e = sh("./report " + dirs[0] + " " + dirs[1] + " -o " + dir + "/b.html --baseline nope");
    CHECK(one_line_error(e));
    CHECK(e.out.find("--baseline 'nope' is neither a group nor a run; the groups are 'heads uniform', 'heads prism'") !=
          std::string::npos);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("report: each arm at its best value of a swept flag, on validation loss averaged over seeds",
          "[study][report][sweep]") {
    char tmpl[] = "/tmp/prism_sweep_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    // Two arms x three rates x two seeds (the last cell of prism has one seed): uniform is best at 0.001 on
    // average though seed 2 alone prefers 0.003; prism is best at 0.003.
    const std::vector<std::string> lrs = {"0.003", "0.001", "0.01"};  // not in order: the table sorts them
    const std::map<std::string, std::vector<std::vector<double>>> val = {
        {"uniform", {{5.30, 5.10}, {5.00, 5.25}, {5.60, 5.70}}},  // [lr][seed], lrs' order
        {"prism", {{4.90, 4.96}, {5.20, 5.22}, {5.50}}}};
    for (const auto& [heads, v] : val)
        for (size_t i = 0; i < lrs.size(); i++)
            for (size_t s = 0; s < v[i].size(); s++)
                write_recorded_run(dir + "/" + heads + "-lr" + lrs[i] + "-s" + std::to_string(s + 1), heads,
                                   {{"--lr", lrs[i]}, {"--seed", std::to_string(s + 1)}}, {v[i][s] + 0.5, v[i][s]});
    Result r = sh("./report " + dir + " -o " + dir + "/r.html --json " + dir + "/r.json");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    {  // --json has the sweep: the values in order, each arm's best and every cell's n and mean
        const json::Value doc = json::parse(read_text(dir + "/r.json"));
        const json::Value* sw = doc.find("sweeps");
        REQUIRE((sw && sw->kind == json::Value::Array && sw->arr.size() == 1));
        const json::Value& s0 = sw->arr[0];
        CHECK(json::str_field(s0, "flag") == "--lr");
        const json::Value* values = s0.find("values");
        REQUIRE((values && values->arr.size() == 3));
        CHECK(values->arr[0].str == "0.001");
        CHECK(values->arr[2].str == "0.01");
        const json::Value* arms = s0.find("arms");
        REQUIRE((arms && arms->arr.size() == 2));
        for (const json::Value& a : arms->arr) {
            const std::string arm = json::str_field(a, "arm"), best = json::str_field(a, "best");
            CHECK(best == (arm == "heads prism" ? "0.003" : "0.001"));
            const json::Value* cells = a.find("cells");
            REQUIRE((cells && cells->arr.size() == 3));
            const std::vector<double>& at_best =
                val.at(arm == "heads prism" ? "prism" : "uniform")[best == "0.001" ? 1 : 0];
            double m = 0;
            for (double x : at_best) m += x / at_best.size();
            const json::Value& c = cells->arr[best == "0.001" ? 0 : 1];
            CHECK(json::int_field(c, "n") == (long)at_best.size());
            CHECK(std::fabs(std::strtod(c.find("mean")->str.c_str(), nullptr) - m) < 1e-9);
        }
    }
    // The expected rows, computed here: mean and sample std of each cell, the best the lowest mean.
    auto cell = [](const std::vector<double>& x) {
        double m = 0;
        for (double v : x) m += v;
        m /= x.size();
        char b[64];
        if (x.size() == 1) {
            snprintf(b, sizeof b, "%.4f (n 1)", m);
            return std::string(b);
        }
        double s = 0;
        for (double v : x) s += (v - m) * (v - m);
        snprintf(b, sizeof b, "%.4f ± %.4f (n %zu)", m, std::sqrt(s / (x.size() - 1)), x.size());
        return std::string(b);
    };
    const std::string head =
        "each arm at its best lr, chosen on final validation loss (mean over each value's "
        "seeds, n 1 to 2):\n";
    const size_t at = r.out.find(head);
    REQUIRE(at != std::string::npos);
    const std::string table = r.out.substr(at + head.size());
    // A row: the arm, its best lr and the loss there, the difference to the baseline arm at its best (its interval,
    // SE and detectable effect as in the groups' table), then every value's cell in lr order (0.001, 0.003, 0.01 =
    // lrs' indices 1, 0, 2); the columns are two spaces or more apart, and no cell is cut.
    auto cells_of = [](const std::string& row) {
        std::vector<std::string> out;
        std::regex gap("\\S+( \\S+)*");
        for (std::sregex_iterator it(row.begin(), row.end(), gap), end; it != end; ++it) out.push_back(it->str());
        return out;
    };
    auto check_row = [&](const std::string& arm, const std::string& best, const std::vector<std::vector<double>>& v,
                         const std::string& vs_base) {
        const std::vector<std::string> rows = lines_starting(table, "  " + arm + "  ");
        REQUIRE(rows.size() == 1);
        INFO(rows[0]);
        const std::vector<std::string> c = cells_of(rows[0]);
        REQUIRE(c.size() >= 7);
        CHECK(c[1] == best);
        CHECK(c[2] == cell(v[best.rfind("0.001", 0) == 0 ? 1 : 0]));
        CHECK(c[3].rfind(vs_base, 0) == 0);
        CHECK(c[c.size() - 3] == cell(v[1]));
        CHECK(c[c.size() - 2] == cell(v[0]));
        CHECK(c[c.size() - 1] == cell(v[2]));
    };
    // uniform's best, 0.001, is the grid's lowest value: flagged, since a lower lr may be better still.
    check_row("heads uniform (baseline)", "0.001 (edge of the grid)", val.at("uniform"), "baseline");
    CHECK(
        has(table, "  note: a best lr at the edge of the grid (the lowest or highest value run) may not be the best"));
    // prism at 0.003 against uniform at 0.001, by seed: 4.90 - 5.00 and 4.96 - 5.25; two seeds: no interval, and
    // the detectable effect from the seeds' spread, as the groups' table has them.
    check_row("heads prism", "0.003", val.at("prism"), "-0.1950 (n 2)");
    {
        const std::vector<std::string> c = cells_of(lines_starting(table, "  heads prism  ").at(0));
        CHECK(c[4] == "n 2: too few seeds for an interval");
        CHECK(c[5] == "0.0950");          // the SE of the two differences -0.10 and -0.29: their std 0.1344 / sqrt 2
        CHECK(c[6].rfind("≈±", 0) == 0);  // from two seeds: marked rough
        CHECK(has(c[6], "(rough: 2 seeds)"));
    }
    CHECK(table.find("lr 0.001  ") != std::string::npos);
    CHECK(table.find("lr 0.003  ") != std::string::npos);
    // The page: the table with the method stated, the best cell marked, the sweep's chart with a line per arm.
    const std::string html = read_text(dir + "/r.html");
    CHECK(html.find("<h2>Each arm at its best lr</h2>") != std::string::npos);
    CHECK(html.find("Best lr chosen on final validation loss (mean over each value&#39;s seeds, n 1 to 2)") !=
          std::string::npos);
    CHECK(html.find("<td><b>" + cell(val.at("prism")[0]) + "</b></td>") != std::string::npos);
    CHECK(html.find("<title>Final validation loss against lr (mean over seeds)</title>") != std::string::npos);
    CHECK(html.find("log10 lr") != std::string::npos);
    CHECK(html.find("<g data-series=\"heads prism\"") != std::string::npos);

    // Runs that differ in their schedules alone: no sweep section.
    Result none = sh("./report " + dir + "/uniform-lr0.001-s1 " + dir + "/prism-lr0.001-s1 -o " + dir + "/n.html");
    CHECK(none.rc == 0);
    CHECK(none.out.find("each arm at its best") == std::string::npos);
    CHECK(read_text(dir + "/n.html").find("Each arm at its best") == std::string::npos);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("report's default baseline has every layer column uniform, not only heads and widths", "[study][report]") {
    char tmpl[] = "/tmp/prism_baseline_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    // Listed first: uniform heads and widths, but OpenELM's MLP scaling; the all-uniform group comes second.
    write_recorded_run(dir + "/u-openelm", "uniform", {{"--mlp", "openelm"}}, {6.9, 6.5});
    write_recorded_run(dir + "/u-uniform", "uniform", {{"--mlp", "uniform"}}, {6.8, 6.4});
    write_recorded_run(dir + "/u-window", "uniform", {{"--mlp", "uniform"}, {"--window", "local:8"}}, {6.7, 6.3});
    Result r = sh("./report " + dir + "/u-openelm " + dir + "/u-window " + dir + "/u-uniform -o " + dir + "/r.html");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    CHECK(r.out.find("mlp uniform, window - (baseline)") != std::string::npos);
    CHECK(r.out.find("mlp openelm, window - (baseline)") == std::string::npos);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("report never takes unlike runs for seeds: 20 steps, stopped at 24 of 25 and 25 steps are three groups",
          "[study][report]") {
    // The case, trained: three seeds of one set of flags; then seed 2 resumed toward 25 steps and stopped
    // after step 24 (--stop-after: status "stopped", no validation after step 20), seed 3 resumed to 25 (done).
    const std::string data = make_data_dir(), dir = data + "/study";
    const std::string m = " --cpu --sample-every 0 ";
    for (int s = 1; s <= 3; s++)
        REQUIRE(sh(micro(data, dir + "/r-s" + std::to_string(s)) + m + "--steps 20 --seed " + std::to_string(s)).rc ==
                0);
    REQUIRE(sh(micro(data, dir + "/r-s2") + m + "--resume --steps 25 --stop-after 4").rc == 0);
    REQUIRE(sh(micro(data, dir + "/r-s3") + m + "--resume --steps 25").rc == 0);
    // A crash's log that goes on past the weights: r-s1's log gets a step 21 its model.bin never saw.
    const std::string extra =
        "{\"step\": 21, \"tokens\": 2688, \"train_loss\": 1.0, \"val_loss\": 0.5, \"lr\": 1e-3, \"grad_norm\": 0.5, "
        "\"tokens_per_s\": 1000.0, \"elapsed_s\": 1.0}\n";
    REQUIRE(sh("printf '%s' '" + extra + "' >> " + dir + "/r-s1/log.jsonl").rc == 0);

    Result r = sh("./report " + dir + " -o " + dir + "/r.html --json " + dir + "/r.json");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    // The terminal: three groups, labelled by how they differ, one line saying why, and the step of r-s2's loss.
    CHECK(has(r.out, "(3 runs in 3 groups"));
    CHECK(has(r.out,
              "note: the runs r-s1, r-s2, r-s3 have the same flags (seeds aside) but differ in steps 20 / 24 of "
              "25 / 25; status done / stopped / done; lr branches none / --steps 20 to 25 at step 20 / --steps 20 "
              "to 25 at step 20: shown as 3 groups, not as seeds of one"));
    CHECK(has(r.out, "note: r-s2: its last validation loss is from step 20, its weights are at step 24"));
    CHECK(has(r.out, "its log goes on to step 21 past its weights' step 20"));
    // Resumed to another length, r-s2 and r-s3 are recorded branches of their cosine schedule (run/run.h).
    for (const char* g : {"steps 20, status done, lr branches none ",
                          "steps 24 of 25, status stopped, lr branches --steps 20 to 25 at step 20 ",
                          "steps 25, status done, lr branches --steps 20 to 25 at step 20 "})
        CHECK(lines_starting(r.out, std::string("  ") + g).size() == 2);  // final and best val loss: one row each

    // The page: the same sentence, and the runs' table names the step of the weights and of an earlier val loss.
    const std::string page = read_file(dir + "/r.html");
    CHECK(has(page, "Not seeds of one group: the runs r-s1, r-s2, r-s3 have the same flags"));
    const std::vector<double> v2 = val_losses(dir + "/r-s2/log.jsonl"), v1 = val_losses(dir + "/r-s1/log.jsonl");
    REQUIRE(v2.size() == 2);  // steps 10 and 20: none after the resume
    char cell[128];
    snprintf(cell, sizeof cell, "<td class=\"warn\">%.4f at step 20</td>", v2[1]);
    CHECK(has(page, cell));
    CHECK(has(page, "<td>20 (log to 21)</td>"));

    // The JSON: each run's figures at its weights' step (r-s1's step 21 left out), with the steps named.
    const json::Value j = json::parse(read_file(dir + "/r.json"));
    REQUIRE(j.find("groups")->arr.size() == 3);
    std::map<std::string, const json::Value*> runs;
    for (const json::Value& x : j.find("runs")->arr) runs[x.find("name")->str] = &x;
    auto num = [](const json::Value* o, const char* k) { return std::strtod(o->find(k)->str.c_str(), nullptr); };
    CHECK(num(runs.at("r-s1"), "steps") == 20);
    CHECK(num(runs.at("r-s1"), "log_steps") == 21);
    CHECK(num(runs.at("r-s1"), "final_val_loss") == Approx(v1[1]).epsilon(1e-8));  // step 20's, not 21's 0.5
    CHECK(num(runs.at("r-s2"), "steps") == 24);
    CHECK(num(runs.at("r-s2"), "val_step") == 20);
    CHECK(num(runs.at("r-s2"), "final_val_loss") == Approx(v2[1]).epsilon(1e-8));
    CHECK(num(runs.at("r-s3"), "steps") == 25);
    CHECK(num(runs.at("r-s3"), "val_step") == 25);
    sh("rm -rf '" + data + "'");
}
