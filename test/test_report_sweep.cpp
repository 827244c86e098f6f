// test_report_sweep.cpp: report on a study with a swept flag (an lr axis): the default baseline is the uniform model
// at its best value, not the first group; --baseline takes a group's label as typed (numbers as numbers); the
// "each arm at its best" table compares with the same columns as the groups' table; the charts tell coinciding
// groups apart by dash and marker as well as colour; labels are never cut in the terminal.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "test/test_util.h"
#include "test/train_util.h"
#include "util/fs.h"
#include "util/json.h"

namespace {

// Two arms (heads uniform, prism) x lr 0.001, 0.003, 0.01 x seeds 1, 2; the uniform arm is best at 0.003 and the
// prism arm's losses equal the uniform arm's at every lr (coinciding curves).
struct SweepStudy {
    std::string dir;
    SweepStudy() {
        char tmpl[] = "/tmp/prism_report_sweep_XXXXXX";
        dir = mkdtemp(tmpl);
        const std::map<std::string, std::vector<double>> val = {
            {"0.001", {5.30, 5.34}}, {"0.003", {5.00, 5.08}}, {"0.01", {5.60, 5.66}}};
        for (const char* heads : {"uniform", "prism"})
            for (const auto& [lr, v] : val)
                for (size_t s = 0; s < v.size(); s++)
                    write_recorded_run(dir + "/" + heads + "-lr" + lr + "-s" + std::to_string(s + 1), heads,
                                       {{"--lr", lr}, {"--seed", std::to_string(s + 1)}}, {v[s] + 0.5, v[s]});
    }
    ~SweepStudy() { sh("rm -rf '" + dir + "'"); }
};

// The text of stdout from `line` on, up to the next empty line.
std::string block(const std::string& out, const std::string& line) {
    const size_t at = out.find(line);
    if (at == std::string::npos) return "";
    return out.substr(at, out.find("\n\n", at) - at);
}

}  // namespace

TEST_CASE("report: in a sweep the default baseline is the uniform model at its best value, and says so",
          "[report][sweep]") {
    SweepStudy st;
    Result r = sh("./report " + st.dir + " -o " + st.dir + "/r.html --json " + st.dir + "/r.json");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    // Not the lowest lr's group (the first in order), but the uniform group whose mean final loss is the lowest.
    CHECK(r.out.find("baseline: heads uniform, lr 0.003 (of the 3 groups of the uniform model, the one with the "
                     "lowest final validation loss") != std::string::npos);
    CHECK(json::str_field(json::parse(read_text(st.dir + "/r.json")), "baseline") == "heads uniform, lr 0.003");
    // The group at the baseline's lr differs from it by the schedule alone: here 0 at every seed.
    const std::string fin = block(r.out, "final val loss (nats)");
    CHECK(std::regex_search(
        fin, std::regex("\n  heads prism, lr 0\\.003 +2 +1,2 +5\\.0400 ± 0\\.0566 +\\+0\\.0000 \\(n 2\\)")));
    const std::string html = read_text(st.dir + "/r.html");
    CHECK(html.find("the uniform model at its best value, so that the differences measure the models") !=
          std::string::npos);
}

TEST_CASE("report --baseline takes a group's label as the user types it: numbers compare as numbers",
          "[report][sweep]") {
    SweepStudy st;
    for (const char* typed : {"heads uniform, lr 1e-3", "heads uniform,lr 0.0010", "heads uniform, lr 1E-03"}) {
        Result r = sh(std::string("./report ") + st.dir + " -o " + st.dir + "/r.html --baseline '" + typed + "'");
        INFO(typed << "\n" << r.out);
        CHECK(r.rc == 0);
        CHECK(r.out.find("baseline: heads uniform, lr 0.001 (--baseline)") != std::string::npos);
    }
    Result p = sh("./report " + st.dir + " -o " + st.dir + "/r.html --baseline 'heads prism, lr 1e-2'");
    CHECK(p.rc == 0);
    CHECK(p.out.find("baseline: heads prism, lr 0.01 (--baseline)") != std::string::npos);
    // A value that is not the group's, as a number or as text, names no group: one line with the groups.
    for (const char* typed : {"heads uniform, lr 2e-3", "heads uniform", "heads Uniform, lr 0.001", "lr 0.001"}) {
        Result e = sh(std::string("./report ") + st.dir + " -o " + st.dir + "/r.html --baseline '" + typed + "'");
        INFO(typed);
        CHECK(one_line_error(e));
        CHECK(e.out.find("is neither a group nor a run; the groups are 'heads prism, lr 0.001'") != std::string::npos);
    }
}

TEST_CASE(
    "report: each arm at its best value is compared with the groups' columns: difference, interval, SE, "
    "detectable effect",
    "[report][sweep]") {
    SweepStudy st;
    Result r = sh("./report " + st.dir + " -o " + st.dir + "/r.html --effect 0.01");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    const std::string t = block(r.out, "each arm at its best lr");
    REQUIRE(!t.empty());
    CHECK(t.find("95% interval") != std::string::npos);
    CHECK(t.find("SE") != std::string::npos);
    CHECK(t.find("detectable at 95%/80%") != std::string::npos);
    // prism at its best (0.003) against uniform at its best (0.003): the same losses, so +0 over 2 seeds, zero spread.
    CHECK(std::regex_search(t,
                            std::regex("\n  heads prism +0\\.003 +5\\.0400 ± 0\\.0566 \\(n 2\\) +\\+0\\.0000 \\(n 2\\) "
                                       "+n 2: too few seeds for an interval; zero spread over seeds: interval not "
                                       "estimable +- +not estimable \\(zero spread\\); seeds for 0\\.01: ")));
    const std::string html = read_text(st.dir + "/r.html");
    const size_t at = html.find("<h2>Each arm at its best lr</h2>");
    REQUIRE(at != std::string::npos);
    CHECK(html.find("<th>95% interval</th><th>SE</th><th>detectable at 95%/80%</th>", at) != std::string::npos);
}

TEST_CASE("report's charts tell coinciding groups apart: a dash pattern and a marker shape per group, not only colour",
          "[report][sweep][svg]") {
    SweepStudy st;
    Result r = sh("./report " + st.dir + " -o " + st.dir + "/r.html");
    REQUIRE(r.rc == 0);
    const std::string html = read_text(st.dir + "/r.html");
    // The mean-over-seeds chart: every group's <g> has its own dash (or none for the first) and its own markers.
    const size_t at = html.find("<title>Validation loss, mean over seeds");
    REQUIRE(at != std::string::npos);
    const std::string chart = html.substr(at, html.find("</svg>", at) - at);
    std::map<std::string, int> dashes;  // dash pattern -> groups
    std::regex g("<g data-series=\"([^\"]+) \\(2 runs\\)\" color=\"(#[0-9a-f]{6})\"( stroke-dasharray=\"([^\"]+)\")?>");
    int groups = 0;
    for (std::sregex_iterator it(chart.begin(), chart.end(), g), end; it != end; ++it) {
        groups++;
        dashes[(*it)[4].str()]++;
    }
    CHECK(groups == 2 * 6);     // each group's lines, then its legend entry
    CHECK(dashes.size() == 5);  // six groups: five patterns (solid first), the sixth repeats with another marker
    // The sweep chart: the two arms coincide (prism's runs come first, by name); the second is dashed, and its
    // markers are squares.
    const size_t sw = html.find("<title>Final validation loss against lr");
    REQUIRE(sw != std::string::npos);
    const std::string s = html.substr(sw, html.find("</svg>", sw) - sw);
    CHECK(s.find("<g data-series=\"heads prism\" color=\"#4e79a7\">") != std::string::npos);
    CHECK(s.find("<g data-series=\"heads uniform\" color=\"#f28e2b\" stroke-dasharray=\"7 4\">") != std::string::npos);
    CHECK(std::regex_search(s, std::regex("<rect [^>]*fill=\"currentColor\"")));  // the uniform arm's squares
}

TEST_CASE("report never cuts a group's label in the terminal: the column is as wide as the longest",
          "[report][sweep]") {
    char tmpl[] = "/tmp/prism_report_labels_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    const std::string sched = "3x1,6x1,9x1,12x1,12x1,12x1,12x1,12x1,12x1,12x1,12x1,12x1";
    write_recorded_run(dir + "/a", "uniform", {{"--lr", "0.003"}, {"--seed", "1"}}, {5.5, 5.2});
    write_recorded_run(dir + "/b", sched, {{"--lr", "0.003"}, {"--seed", "1"}}, {5.4, 5.1});
    Result r = sh("./report " + dir + " -o " + dir + "/r.html");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    CHECK(r.out.find("  heads " + sched + "  ") != std::string::npos);
    sh("rm -rf '" + dir + "'");
}
