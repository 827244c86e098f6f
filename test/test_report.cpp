// test_report.cpp: the strict XML check itself, svg.h's escaping and charts, run_log.h's reading of a run
// directory (torn lines, resumed clocks), and the report binary end to end: three runs of different schedules,
// their evals and analyze charts in one page that parses as XML, bad input as one line, and the page rendered by
// a real headless browser (Debian's chromium) into a screenshot that is not blank.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "plan.h"
#include "run_dir.h"
#include "run_log.h"
#include "svg.h"
#include "test/inspect_util.h"
#include "test/png_check.h"
#include "test/test_util.h"
#include "test/train_util.h"
#include "xml_check.h"

namespace {

// A run directory as train_prism leaves it: model.bin of config c, and a log of `steps` lines (validation every
// 10 steps, a lambada eval every 20, the clock restarting at step 21 as after a --resume); `tail` is appended.
void write_run(const std::string& dir, const ModelConfig& c, int steps, double speed, const std::string& tail = "") {
    make_dirs(dir);
    const std::vector<float> p = inspect_params(c, 1);
    save_model(dir + "/model.bin", c, p.data(), p.size(), steps);
    std::string log;
    for (int s = 1; s <= steps; s++) {
        char b[512];
        const double elapsed = (s <= 20 ? s : s - 20) * 128 / speed;
        snprintf(b, sizeof b,
                 "{\"step\": %d, \"tokens\": %d, \"train_loss\": %.6f, %s\"lr\": 1e-3, \"grad_norm\": 0.5, "
                 "\"tokens_per_s\": %.1f, \"elapsed_s\": %.3f",
                 s, 128 * s, 5.5 - std::log(s) * 0.3 + 0.05 * std::sin(s), "", speed, elapsed);
        std::string line = b;
        if (s % 10 == 0) line.insert(line.find("\"lr\""), "\"val_loss\": " + std::to_string(5.4 - std::log(s) * 0.3) + ", ");
        if (s % 20 == 0)
            line += ", \"eval\": {\"task\": \"lambada\", \"examples\": 150, \"acc\": " + std::to_string(0.01 * s / 20) +
                    ", \"acc_stderr\": 0.005, \"perplexity\": 1234.5, \"seconds\": 2.5}";
        log += line + "}\n";
    }
    write_atomically(dir + "/log.jsonl", {{log.data(), log.size()}, {tail.data(), tail.size()}});
}

}  // namespace

TEST_CASE("the strict XML check accepts well-formed documents and names the first problem of others", "[report][xml]") {
    CHECK(xml_error("<?xml version=\"1.0\"?>\n<svg a=\"1\" b='2'><g/><text>a &amp; b &#x3C; &#60;</text></svg>\n") == "");
    CHECK(xml_error("<!DOCTYPE html>\n<html><body><!-- note --><p>x</p><![CDATA[<&>]]></body></html>") == "");
    struct Bad {
        const char* text;
        const char* says;
    };
    for (const Bad& b : std::vector<Bad>{{"<a>&</a>", "'&'"},
                                         {"<a>x < y</a>", "expected a name"},
                                         {"<a><b></a></b>", "</a> closes <b>"},
                                         {"<a x=1/>", "not quoted"},
                                         {"<a x='1' x='2'/>", "repeated"},
                                         {"<a>&nbsp;</a>", "unknown entity"},
                                         {"<a/><b/>", "after the root"},
                                         {"<a>\x01</a>", "control character"},
                                         {"<a>\xC3</a>", "invalid UTF-8"},
                                         {"<a>]]></a>", "']]>'"},
                                         {"<a><!-- a -- b --></a>", "'--'"},
                                         {"<a>&#0;</a>", "character reference"},
                                         {"<a>", "never closed"},
                                         {"", "root element"}}) {
        INFO(b.text);
        const std::string e = xml_error(b.text);
        CHECK(e.find(b.says) != std::string::npos);
        CHECK(e.rfind("line 1, column ", 0) == 0);
    }
}

TEST_CASE("svg.h escapes names and draws every series, staircases and breaks at missing values", "[report][svg]") {
    CHECK(svg::xml_escape("a<b>&\"c'\x01\xC3") == "a&lt;b&gt;&amp;&quot;c&#39;\xEF\xBF\xBD");
    svg::Chart c;
    c.title = "Loss <of> \"R&D\"", c.xlabel = "tokens", c.ylabel = "loss";
    svg::Series a, b, empty;
    a.name = "a&b<c>", b.name = "heads", b.step = true, empty.name = "nothing";
    a.x = {1, 2, 3, 4}, a.y = {3, NAN, 2, 1};
    b.x = {1, 2, 3}, b.y = {1, 2, 4};
    b.dot_x = {1, 2}, b.dot_y = {0.5, 3};
    c.series = {a, b, empty};
    const std::string s = svg::render(c);
    CHECK(xml_error(svg::document(s)) == "");
    CHECK(s.find("a&amp;b&lt;c&gt;") != std::string::npos);
    CHECK(std::count(s.begin(), s.end(), '\n') > 20);
    size_t lines = 0;
    for (size_t at = s.find("<polyline"); at != std::string::npos; at = s.find("<polyline", at + 1)) lines++;
    CHECK(lines == 3);  // a's line broken by the NaN into two, b's staircase one, nothing's none
    svg::Chart none;
    none.title = "empty";
    CHECK(svg::render(none).find("no data") != std::string::npos);
    CHECK(xml_error(svg::render(none)) == "");
    double step;
    CHECK(svg::ticks(0, 10, 5, false, step) == std::vector<double>{0, 2, 4, 6, 8, 10});
    CHECK(svg::tick_label(250000, 50000) == "250K");
}

TEST_CASE("a run directory reads back: steps, evals, the schedule, resumed clocks, a torn last line skipped",
          "[report]") {
    char tmpl[] = "/tmp/prism_runlog_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    write_run(dir + "/r", inspect_config("prism", 256), 30, 1000, "{\"step\": 31, \"tokens\": 39");
    std::vector<std::string> warned;
    RunLog r = read_run(dir + "/r", [&](const std::string& w) { warned.push_back(w); });
    CHECK(r.steps.size() == 30);
    REQUIRE(warned.size() == 1);
    CHECK(warned[0].find("log.jsonl line 31 is torn") != std::string::npos);
    CHECK(r.evals.size() == 1);
    CHECK(r.evals[0].get("acc") == Approx(0.01));
    CHECK(r.has_model);
    CHECK(rle_list(layer_heads(r.cfg)) == rle_list(layer_heads(inspect_config("prism", 256))));
    CHECK(r.steps[19].elapsed_total == Approx(20 * 0.128));
    CHECK(r.steps[20].elapsed_total == Approx(21 * 0.128));  // the clock restarted at step 21; the total did not
    CHECK(std::isnan(r.steps[0].val_loss));
    CHECK(r.steps[9].val_loss == Approx(5.4 - std::log(10) * 0.3));
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("report: three runs in one well-formed page; an empty run directory is one line", "[report][cli]") {
    char tmpl[] = "/tmp/prism_report_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    write_run(dir + "/uniform", inspect_config("uniform", 256), 40, 900);
    write_run(dir + "/prism", inspect_config("prism", 256), 40, 1000);
    write_run(dir + "/x&y", inspect_config("x", 256), 35, 1100, "{\"step\": 36, \"tok");  // torn by a crash
    make_dirs(dir + "/an");
    svg::Chart chart;
    chart.title = "Attention distance", chart.series.push_back({"uniform", {1, 2}, {3, 4}, false, true, {}, {}, "", {}, {}});
    const std::string doc = svg::document(svg::render(chart));
    write_atomically(dir + "/an/attention_distance.svg", {{doc.data(), doc.size()}});
    write_atomically(dir + "/an/broken.svg", {{"<svg><g></svg>", 14}});
    Result r = sh("./report " + dir + "/uniform " + dir + "/prism '" + dir + "/x&y' --analyze " + dir + "/an -o " + dir +
                  "/report.html --title 'tiny <runs>'");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    CHECK(r.out.find("warning: " + dir + "/x&y/log.jsonl line 36 is torn") != std::string::npos);
    CHECK(r.out.find("broken.svg is not a well-formed SVG") != std::string::npos);
    const std::string html = read_text(dir + "/report.html");
    CHECK(xml_error(html) == "");
    if (sh("command -v xmllint").rc == 0) CHECK(sh("xmllint --noout " + dir + "/report.html").rc == 0);
    for (const char* s : {"tiny &lt;runs&gt;", "x&amp;y", "Heads per layer", "Width per layer", "Training loss",
                          "Validation loss against wall-clock", "Tokens per second", "lambada", "acc %",
                          "Attention distance", "line 36 is torn"})
        CHECK(html.find(s) != std::string::npos);
    CHECK(html.find("<script") == std::string::npos);

    make_dirs(dir + "/empty");
    make_dirs(dir + "/blank");
    write_atomically(dir + "/blank/log.jsonl", {{"", 0}});
    for (std::string bad : {dir + "/empty", dir + "/missing", dir + "/blank", dir + "/uniform --analyze " + dir + "/nope",
                            std::string("")}) {
        Result e = sh("./report " + bad + " -o " + dir + "/bad.html");
        INFO(bad << ": " << e.out);
        CHECK(one_line_error(e));
    }
    CHECK(sh("./report " + dir + "/empty").out.find("holds no log.jsonl") != std::string::npos);
    CHECK(sh("./report " + dir + "/blank").out.find("holds no step (it is empty)") != std::string::npos);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("the report renders in a headless browser (chromium): the screenshot shows the charts", "[report][browser]") {
    std::string browser;
    for (const char* b : {"chromium", "chromium-browser", "google-chrome"})
        if (browser.empty() && sh(std::string("command -v ") + b).rc == 0) browser = b;
    if (browser.empty()) {
        WARN("skipped: no chromium on this machine (.ci/run installs Debian's: apt-get install chromium)");
        return;
    }
    char tmpl[] = "/tmp/prism_browser_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    write_run(dir + "/uniform", inspect_config("uniform", 256), 40, 900);
    write_run(dir + "/prism", inspect_config("prism", 256), 40, 1000);
    write_run(dir + "/x", inspect_config("x", 256), 40, 1100);
    REQUIRE(sh("./report " + dir + "/uniform " + dir + "/prism " + dir + "/x -o " + dir + "/report.html").rc == 0);
    // --no-sandbox: chromium's sandbox refuses to run as root (CI); the page is our own local file.
    Result r = sh("cd '" + dir + "' && timeout 120 " + browser + " --headless --no-sandbox --disable-gpu " +
                  "--hide-scrollbars --window-size=1280,2400 --screenshot=" + dir + "/shot.png file://" + dir +
                  "/report.html");
    INFO(r.out);
    const Image im = read_png(dir + "/shot.png");
    REQUIRE(im.error == "");
    CHECK(im.width == 1280);
    CHECK(im.height == 2400);
    // Not blank: a fair share of the pixels is not white, and each run's colour (svg::color 0, 1, 2: the lines and
    // legend swatches of all three runs) is on the page. A page that failed to render, or rendered without its
    // inline SVG, fails one or the other.
    long ink = 0;
    std::vector<long> seen(3, 0);
    const int want[3][3] = {{0x4e, 0x79, 0xa7}, {0xf2, 0x8e, 0x2b}, {0xe1, 0x57, 0x59}};
    for (size_t p = 0; p < im.rgb.size(); p += 3) {
        const uint8_t* px = &im.rgb[p];
        ink += px[0] < 235 || px[1] < 235 || px[2] < 235;
        for (int k = 0; k < 3; k++)
            seen[k] += std::abs(px[0] - want[k][0]) <= 3 && std::abs(px[1] - want[k][1]) <= 3 &&
                       std::abs(px[2] - want[k][2]) <= 3;
    }
    INFO("non-white pixels " << ink << ", run colours " << seen[0] << " " << seen[1] << " " << seen[2]);
    CHECK(ink > (long)im.width * im.height / 50);
    for (int k = 0; k < 3; k++) CHECK(seen[k] > 50);
    sh("rm -rf '" + dir + "'");
}
