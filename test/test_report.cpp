// test_report.cpp: inspect/xml_check.h held to libxml2 (test/xml_lib.h), inspect/svg.h's escaping and charts,
// run/run_log.h's reading of a run directory (torn lines, resumed clocks), and the report binary end to end: three
// runs of different schedules, their evals and analyze charts in one page that libxml2 parses, bad input as one
// line; hostile analyze charts (script, links, FIFOs, huge, not SVG) neither run nor break the page; no output
// replaces an input; study directories and stray paths; and the page rendered by a real headless browser
// (Debian's chromium): a screenshot that is not blank, and a hostile chart's script that does not run.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "run/checkpoint.h"
#include "run/plan_views.h"
#include "run/run_dir.h"
#include "run/run_log.h"
#include "run/run_record.h"
#include "inspect/svg.h"
#include "test/inspect_util.h"
#include "test/png_check.h"
#include "test/skip.h"
#include "test/test_util.h"
#include "test/train_util.h"
#include "test/xml_lib.h"
#include "inspect/xml_check.h"

namespace {

// A run directory as train_prism leaves it: model.bin of config c, and a log of `steps` lines (validation every
// 10 steps, a lambada eval every 20, the clock restarting at step 21 as after a --resume); `tail` is appended;
// `shift` is added to every loss (seeds of one configuration).
void write_run(const std::string& dir, const ModelConfig& c, int steps, double speed, const std::string& tail = "",
               double shift = 0) {
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
                 s, 128 * s, 5.5 + shift - std::log(s) * 0.3 + 0.05 * std::sin(s), "", speed, elapsed);
        std::string line = b;
        if (s % 10 == 0)
            line.insert(line.find("\"lr\""), "\"val_loss\": " + std::to_string(5.4 + shift - std::log(s) * 0.3) + ", ");
        if (s % 20 == 0)
            line += ", \"eval\": {\"task\": \"lambada\", \"examples\": 150, \"acc\": " + std::to_string(0.01 * s / 20) +
                    ", \"acc_stderr\": 0.005, \"perplexity\": 1234.5, \"seconds\": 2.5}";
        log += line + "}\n";
    }
    write_atomically(dir + "/log.jsonl", {{log.data(), log.size()}, {tail.data(), tail.size()}});
}

// A run of a study: write_run's, 40 steps, and a record (run.json) of heads schedule `heads` and seed `seed`, so
// that report groups the runs whose records differ only in the seed.
void write_study_run(const std::string& dir, const std::string& heads, int seed, double shift) {
    write_run(dir, inspect_config(heads, 256), 40, 1000, "", shift);
    write_run_record(dir, heads, {{"--lr", "0.003"}, {"--seed", std::to_string(seed)}}, 40);
}

// A 2 x 2 study (heads uniform and prism, seeds 1 and 2) and its report, in dir.
std::string study_report(const std::string& dir) {
    write_study_run(dir + "/uniform-s1", "uniform", 1, 0);
    write_study_run(dir + "/uniform-s2", "uniform", 2, 0.04);
    write_study_run(dir + "/prism-s1", "prism", 1, -0.06);
    write_study_run(dir + "/prism-s2", "prism", 2, -0.02);
    make_dirs(dir + "/an");  // an analyze chart of the runs: report restyles it too
    svg::Chart chart;
    chart.title = "Attention distance";
    for (const char* run : {"uniform-s1", "uniform-s2"})
        chart.series.push_back({run, {1, 2}, {3, 4}, false, true, {}, {}, "#123456", {}, {}, "", 0});
    write_file(dir + "/an/attention_distance.svg", svg::document(svg::render(chart)));
    Result r = sh("./report " + dir + " --analyze " + dir + "/an -o " + dir + "/report.html");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    return read_text(dir + "/report.html");
}

// The SVG documents of the page's <img src="data:image/svg+xml;base64,..."> charts, decoded.
std::vector<std::string> image_charts(const std::string& html) {
    const std::string key = "src=\"data:image/svg+xml;base64,";
    std::vector<std::string> out;
    for (size_t at = html.find(key); at != std::string::npos; at = html.find(key, at + 1)) {
        const size_t a = at + key.size(), e = html.find('"', a);
        std::string bin;
        uint32_t v = 0;
        int bits = 0;
        for (size_t i = a; i < e && html[i] != '='; i++) {
            const char c = html[i];
            const int d = c >= 'A' && c <= 'Z'   ? c - 'A'
                          : c >= 'a' && c <= 'z' ? c - 'a' + 26
                          : c >= '0' && c <= '9' ? c - '0' + 52
                          : c == '+'             ? 62
                          : c == '/'             ? 63
                                                 : -1;
            REQUIRE(d >= 0);
            v = v << 6 | d, bits += 6;
            if (bits >= 8) bits -= 8, bin += (char)(v >> bits & 0xFF);
        }
        out.push_back(bin);
    }
    return out;
}

// Debian's chromium (or another Chromium) when installed, else "".
std::string find_browser() {
    for (const char* b : {"chromium", "chromium-browser", "google-chrome"})
        if (sh(std::string("command -v ") + b).rc == 0) return b;
    return "";
}

// The DOM of a page after the browser loaded it (and ran whatever script it would run).
// --no-sandbox: chromium's sandbox refuses to run as root (CI).
std::string rendered_dom(const std::string& browser, const std::string& page) {
    Result r = sh("timeout 120 " + browser + " --headless --no-sandbox --disable-gpu --dump-dom 'file://" + page +
                  "' 2>/dev/null");
    INFO(r.out.substr(0, 2000));
    REQUIRE(r.rc == 0);
    REQUIRE(r.out.find("</html>") != std::string::npos);
    return r.out;
}

// A chart with script in every place SVG runs it: a <script> element and an onload handler. Each sets a marker
// in the page's DOM when it runs; the markers' text is built at run time, so the source alone never matches.
const char* kHostileSvg =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"120\" height=\"60\" "
    "onload=\"document.body.setAttribute('data-xss-onload', 'r' + 'an')\">"
    "<script>var d = document.createElement('div'); d.id = 'xss' + '-marker'; document.body.appendChild(d);</script>"
    "<rect width=\"50\" height=\"50\" fill=\"#000000\"/></svg>\n";
bool marker_set(const std::string& dom) {
    return dom.find("id=\"xss-marker\"") != std::string::npos ||
           dom.find("data-xss-onload=\"ran\"") != std::string::npos;
}

}  // namespace

TEST_CASE("inspect/xml_check.h agrees with libxml2: both accept well-formed documents, both refuse the rest",
          "[report][xml]") {
    for (const char* good :
         {"<?xml version=\"1.0\"?>\n<svg a=\"1\" b='2'><g/><text>a &amp; b &#x3C; &#60;</text></svg>\n",
          "<!DOCTYPE html>\n<html><body><!-- note --><p>x</p><![CDATA[<&>]]></body></html>"}) {
        INFO(good);
        CHECK(xml_error(good) == "");
        CHECK(libxml_error(good) == "");
    }
    struct Bad {
        std::string text;
        const char* says;
    };
    std::string deep;
    for (int k = 0; k < 300; k++) deep += "<g>";
    for (int k = 0; k < 300; k++) deep += "</g>";
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
                                         {"", "root element"},
                                         {deep, "nested deeper than 256"}}) {
        INFO(b.text.substr(0, 40));
        const std::string e = xml_error(b.text);
        CHECK(e.find(b.says) != std::string::npos);
        CHECK(e.rfind("line 1, column ", 0) == 0);
        CHECK(libxml_error(b.text) != "");  // the reference parser refuses it too
    }
    // Stricter than XML, on purpose (nothing Prism writes has them): an internal DTD subset (entity expansion: the
    // "billion laughs") and processing instructions (an external stylesheet).
    for (const char* strict :
         {"<!DOCTYPE a [<!ENTITY x \"y\">]><a>&x;</a>", "<?xml-stylesheet href=\"x.css\"?><a/>", "<a><?pi x?></a>"}) {
        INFO(strict);
        CHECK(xml_error(strict) != "");
        CHECK(libxml_error(strict) == "");
    }
    // What xml_check accepts beyond the cases above (the root's name and attributes are what report reads).
    XmlRoot root;
    CHECK(xml_error("<?xml version='1.0'?><!-- c --><svg xmlns='http://www.w3.org/2000/svg' w='&amp;'><a/></svg>",
                    &root) == "");
    CHECK(root.name == "svg");
    REQUIRE(root.attr("xmlns"));
    CHECK(*root.attr("xmlns") == "http://www.w3.org/2000/svg");
    CHECK(*root.attr("w") == "&amp;");
    // A tag of 200,000 attributes: checked in n log n (the repeat check was quadratic: minutes). libxml2 agrees on
    // 2,000 of them (it keeps a tag's attributes in a list: quadratic itself).
    auto wide = [](int n) {
        std::string t = "<svg";
        for (int k = 0; k < n; k++) t += " a" + std::to_string(k) + "='1'";
        return t + "/>";
    };
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(xml_error(wide(200000)) == "");
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 10);
    CHECK(xml_error(wide(2000)) == "");
    CHECK(libxml_error(wide(2000)) == "");
}

TEST_CASE("inspect/svg.h escapes names and draws every series, staircases and breaks at missing values",
          "[report][svg]") {
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
    CHECK(libxml_error(svg::document(s)) == "");
    CHECK(s.find("a&amp;b&lt;c&gt;") != std::string::npos);
    CHECK(std::count(s.begin(), s.end(), '\n') > 20);
    size_t lines = 0;
    for (size_t at = s.find("<polyline"); at != std::string::npos; at = s.find("<polyline", at + 1)) lines++;
    CHECK(lines == 3);  // a's line broken by the NaN into two, b's staircase one, nothing's none
    svg::Chart none;
    none.title = "empty";
    CHECK(svg::render(none).find("no data") != std::string::npos);
    CHECK(libxml_error(svg::render(none)) == "");
    double step;
    CHECK(svg::ticks(0, 10, 5, false, step) == std::vector<double>{0, 2, 4, 6, 8, 10});
    CHECK(svg::tick_label(250000, 50000) == "250K");
}

TEST_CASE("report tells a group's seeds apart: one colour per group, one dash and marker per run, legends included",
          "[report][svg]") {
    char tmpl[] = "/tmp/prism_seeds_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    const std::string html = study_report(dir);
    CHECK(libxml_error(html) == "");
    const std::vector<std::string> names = {"uniform-s1", "uniform-s2", "prism-s1", "prism-s2"};
    // Every per-run chart: each run's <g> (its line, then its legend entry) with its colour and dash.
    const std::regex g_re("<g data-series=\"([^\"]*)\" color=\"(#[0-9a-f]{6})\"( stroke-dasharray=\"([^\"]*)\")?>");
    int charts = 0;
    for (size_t at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1)) {
        const std::string chart = html.substr(at, html.find("</svg>", at) - at);
        std::map<std::string, std::vector<std::pair<std::string, std::string>>> styles;  // run -> its <g>s' styles
        for (std::sregex_iterator m(chart.begin(), chart.end(), g_re), end; m != end; ++m)
            if (std::find(names.begin(), names.end(), (*m)[1].str()) != names.end())
                styles[(*m)[1].str()].push_back({(*m)[2].str(), (*m)[4].str()});
        if (styles.empty()) continue;  // a chart of groups, not runs
        charts++;
        INFO(chart.substr(0, chart.find("</title>")));
        REQUIRE(styles.size() == 4);
        std::set<std::pair<std::string, std::string>> pairs;
        std::set<std::string> colours;
        for (const auto& [run, gs] : styles) {
            INFO(run);
            REQUIRE(gs.size() == 2);  // the series and its legend entry, drawn alike
            CHECK(gs[0] == gs[1]);
            pairs.insert(gs[0]), colours.insert(gs[0].first);
        }
        CHECK(pairs.size() == 4);    // four runs, four looks
        CHECK(colours.size() == 2);  // one colour per group
        CHECK(styles["uniform-s1"][0].first == styles["uniform-s2"][0].first);
        // The first group's (prism's: the runs sort prism-s1 first) first seed solid, its second dashed; the second
        // group starts at the next dash, so its first run and the first group's are told apart where they coincide.
        CHECK(styles["prism-s1"][0].second == "");
        CHECK(styles["prism-s2"][0].second == svg::dash(1));
        CHECK(styles["uniform-s1"][0].second == svg::dash(1));
        CHECK(styles["uniform-s2"][0].second == svg::dash(2));
    }
    // Training and validation loss (against tokens and wall-clock), tokens/s, heads, widths, lambada's accuracy.
    CHECK(charts == 8);
    // The runs table shows each run's look: four swatches, two of them dashed.
    const std::regex swatch_re(
        "<svg [^>]*width=\"28\"[^>]*><g color=\"(#[0-9a-f]{6})\"( stroke-dasharray=\"([^\"]*)\")?>");
    std::set<std::pair<std::string, std::string>> swatches;
    for (std::sregex_iterator m(html.begin(), html.end(), swatch_re), end; m != end; ++m)
        swatches.insert({(*m)[1].str(), (*m)[3].str()});
    CHECK(swatches.size() == 4);
    // The second group's first seed has squares (marker 1), in the chart and in its legend entry.
    const size_t legend = html.rfind("<g data-series=\"uniform-s1\"", html.find("Validation loss</title>"));
    CHECK(html.substr(legend, html.find("</g>", legend) - legend).find("<rect") != std::string::npos);
    const std::vector<std::string> images = image_charts(html);
    REQUIRE(images.size() == 1);
    const std::string orange = svg::color(1);  // the second group's: uniform (the runs sort prism-s1 first)
    CHECK(images[0].find("<g data-series=\"uniform-s1\" color=\"" + orange + "\" stroke-dasharray=\"" + svg::dash(1) +
                         "\">") != std::string::npos);
    CHECK(images[0].find("<g data-series=\"uniform-s2\" color=\"" + orange + "\" stroke-dasharray=\"" + svg::dash(2) +
                         "\">") != std::string::npos);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("report: one unit per quantity: times in the longest run's unit, accuracies as fractions in every table",
          "[report]") {
    char tmpl[] = "/tmp/prism_units_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    // 40 steps of 128 tokens: 104 s and 282 s (4.7 min) in all; a lambada eval with acc 0.01 and 0.02.
    write_run(dir + "/fast", inspect_config("uniform", 256), 40, 5120 / 104.0);
    write_run(dir + "/slow", inspect_config("prism", 256), 40, 5120 / 282.0);
    Result r = sh("./report " + dir + "/fast " + dir + "/slow -o " + dir + "/report.html");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    const std::string html = read_text(dir + "/report.html");
    CHECK(html.find("<th>time (min)</th>") != std::string::npos);
    CHECK(html.find("<td>1.7</td>") != std::string::npos);  // 104 s, in minutes beside 4.7
    CHECK(html.find("<td>4.7</td>") != std::string::npos);
    CHECK(html.find(" s</td>") == std::string::npos);
    CHECK(html.find(" min</td>") == std::string::npos);
    CHECK(html.find(">minutes</text>") != std::string::npos);  // the wall-clock charts' axis
    CHECK(html.find(">seconds</text>") == std::string::npos);
    // The groups' table and the evals' table both in fractions: lambada's last acc 0.02 (stderr 0.005).
    CHECK(html.find("<td>0.0200</td>") != std::string::npos);
    CHECK(html.find("<td>0.0200 ± 0.0050</td>") != std::string::npos);
    CHECK(html.find("2.00") == std::string::npos);
    // Short runs: seconds.
    write_run(dir + "/short", inspect_config("uniform", 256), 40, 5120 / 90.0);
    REQUIRE(sh("./report " + dir + "/short -o " + dir + "/s.html").rc == 0);
    const std::string short_html = read_text(dir + "/s.html");
    CHECK(short_html.find("<th>time (s)</th>") != std::string::npos);
    CHECK(short_html.find("<td>90.0</td>") != std::string::npos);
    CHECK(short_html.find(">seconds</text>") != std::string::npos);
    sh("rm -rf '" + dir + "'");
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
    chart.title = "Attention distance";
    chart.series.push_back(
        {"uniform", {1, 2}, {3, 4}, false, true, {}, {}, "#123456", {}, {}, "", 0});  // report recolours it
    const std::string doc = svg::document(svg::render(chart));
    write_atomically(dir + "/an/attention_distance.svg", {{doc.data(), doc.size()}});
    write_atomically(dir + "/an/broken.svg", {{"<svg><g></svg>", 14}});
    Result r = sh("./report " + dir + "/uniform " + dir + "/prism '" + dir + "/x&y' --analyze " + dir + "/an -o " +
                  dir + "/report.html --title 'tiny <runs>'");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    CHECK(r.out.find("warning: " + dir + "/x&y/log.jsonl line 36 is torn") != std::string::npos);
    CHECK(r.out.find("broken.svg is not well-formed XML (line 1, column 14: </svg> closes <g>): not shown") !=
          std::string::npos);
    const std::string html = read_text(dir + "/report.html");
    CHECK(libxml_error(html) == "");
    if (sh("command -v xmllint").rc == 0) CHECK(sh("xmllint --noout " + dir + "/report.html").rc == 0);
    for (const char* s :
         {"tiny &lt;runs&gt;", "x&amp;y", "Heads per layer", "Width per layer", "Training loss",
          "Validation loss against wall-clock", "Tokens per second", "lambada", "acc ± stderr", "line 36 is torn"})
        CHECK(html.find(s) != std::string::npos);
    CHECK(html.find("<script") == std::string::npos);
    const std::vector<std::string> charts = image_charts(html);  // analyze's chart, as an image of its file
    REQUIRE(charts.size() == 1);
    CHECK(charts[0].find("Attention distance") != std::string::npos);
    CHECK(charts[0].find("<g data-series=\"uniform\" color=\"" + std::string(svg::color(0)) + "\">") !=
          std::string::npos);  // recoloured to the run's colour

    make_dirs(dir + "/empty");
    make_dirs(dir + "/blank");
    write_atomically(dir + "/blank/log.jsonl", {{"", 0}});
    for (std::string bad : {dir + "/empty", dir + "/missing", dir + "/blank",
                            dir + "/uniform --analyze " + dir + "/nope", std::string("")}) {
        Result e = sh("./report " + bad + " -o " + dir + "/bad.html");
        INFO(bad << ": " << e.out);
        CHECK(one_line_error(e));
    }
    CHECK(sh("./report " + dir + "/empty").out.find("holds no log.jsonl") != std::string::npos);
    CHECK(sh("./report " + dir + "/blank").out.find("holds no step (it is empty)") != std::string::npos);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("the report renders in a headless browser (chromium): the screenshot shows the charts", "[report][browser]") {
    const std::string browser = find_browser();
    if (browser.empty()) {
        PRISM_SKIP("chromium", "no chromium on this machine (.ci/run installs Debian's: apt-get install chromium)");
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

TEST_CASE("report: no script from a run directory reaches the page; hostile chart files are images or one warning each",
          "[report][xss]") {
    char tmpl[] = "/tmp/prism_xss_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    const std::string run = dir + "/r", an = run + "/analyze";
    write_run(run, inspect_config("uniform", 256), 12, 900);
    make_dirs(an);
    write_file(an + "/a_hostile.svg", kHostileSvg);
    // Script in the other places SVG and HTML run it: an HTML island, an animation setting an href, a link.
    write_file(an + "/b_island.svg",
               "<svg xmlns=\"http://www.w3.org/2000/svg\"><foreignObject width=\"9\" height=\"9\">"
               "<body xmlns=\"http://www.w3.org/1999/xhtml\"><script>top.x=1</script></body>"
               "</foreignObject><a href=\"javascript:alert(1)\"><set attributeName=\"href\" "
               "to=\"javascript:alert(2)\"/><rect width=\"5\" height=\"5\"/></a>"
               "<image href=\"file:///etc/passwd\"/></svg>");
    struct Refused {
        std::string name, says;
    };
    std::vector<Refused> refused = {
        {"c_nested.svg", "is not an SVG (its root element is <a>, not <svg>): not shown; rewrite it with analyze -o"},
        {"d_nons.svg", "is not an SVG (its <svg> has no xmlns=\"http://www.w3.org/2000/svg\")"},
        {"e_link.svg", "is a symbolic link (analyze writes none): not shown"},
        {"f_fifo.svg", "is a FIFO, not a regular file: not shown"},
        {"g_huge.svg", "is 17825792 bytes, more than the 16 MiB a chart may have: not shown"},
        {"h_deep.svg", "nested deeper than 256 levels"},
        {"i_laughs.svg", "a DOCTYPE internal subset"},
        {"j_binary.svg", "invalid UTF-8"},
        {"k_dir.svg", "is a directory, not a regular file"},
        {"\"><img src=x onerror=alert(3)>.svg", "is not well-formed XML"},
    };
    write_file(an + "/c_nested.svg", "<a><svg/></a>");  // was "internal error: not well-formed XML"
    write_file(an + "/d_nons.svg", "<svg><rect width=\"5\" height=\"5\"/></svg>");
    REQUIRE(symlink("/etc/passwd", (an + "/e_link.svg").c_str()) == 0);
    REQUIRE(mkfifo((an + "/f_fifo.svg").c_str(), 0644) == 0);
    REQUIRE(sh("truncate -s 17M " + an + "/g_huge.svg").rc == 0);
    std::string deep = "<svg xmlns=\"http://www.w3.org/2000/svg\">";
    for (int k = 0; k < 100000; k++) deep += "<g>";
    write_file(an + "/h_deep.svg", deep);
    write_file(an + "/i_laughs.svg",
               "<?xml version=\"1.0\"?><!DOCTYPE svg [<!ENTITY a \"aaaaaaaaaa\"><!ENTITY b "
               "\"&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;\">]><svg xmlns=\"http://www.w3.org/2000/svg\">"
               "<text>&b;&b;&b;</text></svg>");
    write_file(an + "/j_binary.svg", std::string("<svg xmlns=\"http://www.w3.org/2000/svg\">\xff\xfe</svg>"));
    make_dirs(an + "/k_dir.svg");
    write_file(an + "/\"><img src=x onerror=alert(3)>.svg", "<svg xmlns=\"http://www.w3.org/2000/svg\"><g></svg>");

    Result r = sh("timeout 60 ./report " + run + " -o " + dir + "/page.html");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    for (const Refused& x : refused) {
        INFO(x.name);
        const size_t at = r.out.find("report: warning: " + an + "/" + x.name + " ");
        REQUIRE(at != std::string::npos);
        const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
        CHECK(line.find(x.says) != std::string::npos);
    }
    const std::string html = read_text(dir + "/page.html");
    CHECK(libxml_error(html) == "");
    // The policy comes first in <head> and forbids script; nothing anywhere in the page is script or a handler.
    const size_t csp = html.find(
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "script-src 'none'; object-src 'none'; img-src data:; ");
    REQUIRE(csp != std::string::npos);
    CHECK(csp < html.find("<title>"));
    for (const char* bad :
         {"<script", "javascript:", "<foreignObject", "<iframe", "<object", "<embed", "root:x:", "<img src=x"})
        CHECK(html.find(bad) == std::string::npos);
    const std::regex handler("\\son[a-z]*\\s*=", std::regex::icase);
    for (size_t at = html.find('<'); at != std::string::npos; at = html.find('<', at + 1)) {  // no handler in a tag
        const std::string tag = html.substr(at, html.find('>', at) - at);
        INFO(tag.substr(0, 80));
        CHECK(!std::regex_search(tag, handler));
    }
    // The two well-formed SVGs, script and all, are there as images (a browser runs no script in an image), byte
    // for byte; the rest are not there at all.
    const std::vector<std::string> charts = image_charts(html);
    REQUIRE(charts.size() == 2);
    CHECK(charts[0] == kHostileSvg);
    CHECK(charts[1].find("<foreignObject") != std::string::npos);
    // Every <img> is report's own tag: a data: URL and an escaped alt, nothing else.
    size_t imgs = 0;
    for (size_t at = html.find("<img"); at != std::string::npos; at = html.find("<img", at + 1), imgs++) {
        const std::string tag = html.substr(at, html.find('>', at) + 1 - at);
        const bool own = tag.rfind("<img alt=\"a_hostile.svg\" src=\"data:image/svg+xml;base64,", 0) == 0 ||
                         tag.rfind("<img alt=\"b_island.svg\" src=\"data:image/svg+xml;base64,", 0) == 0;
        INFO(tag.substr(0, 80));
        CHECK(own);
        CHECK(tag.find('"', tag.find("base64,")) == tag.size() - 3);  // the URL's quote closes the tag: "/>
    }
    CHECK(imgs == 2);
    CHECK(html.find("&quot;&gt;&lt;img src=x onerror=alert(3)&gt;.svg") != std::string::npos);  // named, escaped

    // RUN/analyze named again with --analyze (or through a link) is shown once.
    REQUIRE(symlink(an.c_str(), (dir + "/an_link").c_str()) == 0);
    REQUIRE(
        sh("./report " + run + " --analyze " + an + " --analyze " + dir + "/an_link -o " + dir + "/again.html").rc ==
        0);
    CHECK(image_charts(read_text(dir + "/again.html")).size() == 2);

    // Thirty broken charts: ten named, then one line for the rest.
    const std::string many = dir + "/many";
    make_dirs(many);
    for (int k = 0; k < 30; k++) write_file(many + "/" + std::to_string(100 + k) + ".svg", "<svg>");
    Result m = sh("./report " + run + " --analyze " + many + " -o " + dir + "/page2.html");
    INFO(m.out);
    CHECK(m.rc == 0);
    size_t named = 0;
    for (size_t at = m.out.find(many + "/1"); at != std::string::npos; at = m.out.find(many + "/1", at + 1)) named++;
    CHECK(named == 10);
    CHECK(m.out.find(many + ": 20 more files not shown, as above") != std::string::npos);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("report writes over none of its inputs: -o or --json naming a file it reads is one line, the file kept",
          "[report][cli]") {
    char tmpl[] = "/tmp/prism_rep_out_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    const std::string run = dir + "/r";
    write_run(run, inspect_config("uniform", 256), 12, 900);
    write_file(run + "/eval.json", "{\"step\": 12, \"results\": []}");
    make_dirs(run + "/analyze");
    const std::string chart = svg::document(svg::render(svg::Chart()));
    write_file(run + "/analyze/c.svg", chart);
    REQUIRE(symlink("r/log.jsonl", (dir + "/link").c_str()) == 0);
    REQUIRE(link((run + "/log.jsonl").c_str(), (dir + "/hard").c_str()) == 0);
    REQUIRE(symlink("r", (dir + "/rlink").c_str()) == 0);
    std::vector<std::pair<std::string, std::string>> before;
    for (const char* f : {"r/log.jsonl", "r/eval.json", "r/model.bin", "r/analyze/c.svg"})
        before.push_back({f, read_text(dir + "/" + f)});
    for (const std::string& args :
         {"-o " + run + "/log.jsonl", "-o " + run + "/model.bin", "-o " + run + "/eval.json",
          "-o " + run + "/analyze/c.svg", "-o " + dir + "/link", "-o " + dir + "/hard",
          "-o " + dir + "/rlink/log.jsonl", "-o " + dir + "/r/../r/log.jsonl",
          "-o " + dir + "/p.html --json " + run + "/log.jsonl", "-o " + dir + "/p.html --json " + dir + "/p.html"}) {
        Result e = sh("./report " + run + " " + args);
        INFO(args << ": " << e.out);
        CHECK(one_line_error(e));
        CHECK((e.out.find(", which this command reads; write to another path") != std::string::npos ||
               e.out.find("is the page's own file (-o)") != std::string::npos));
    }
    CHECK(sh("./report " + run + " -o " + dir + "/link")
              .out.find("is the run's log.jsonl " + run + "/log.jsonl, which") != std::string::npos);
    // Nor anything that is not a regular file: the page is renamed over its path, which would replace a FIFO (or,
    // as root, a device: -o /dev/null made /dev/null a regular file).
    REQUIRE(mkfifo((dir + "/fifo").c_str(), 0644) == 0);
    for (const std::string& args : {"-o " + dir + "/fifo", "-o " + dir + "/p.html --json " + dir + "/fifo"}) {
        Result e = sh("./report " + run + " " + args);
        INFO(args << ": " << e.out);
        CHECK(one_line_error(e));
        CHECK(e.out.find(dir + "/fifo is a FIFO, not a regular file; pass the name of the file to write") !=
              std::string::npos);
    }
    struct stat st;
    CHECK((lstat((dir + "/fifo").c_str(), &st) == 0 && S_ISFIFO(st.st_mode)));
    if (mknod((dir + "/null").c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) {  // root only
        CHECK(one_line_error(sh("./report " + run + " -o " + dir + "/null")));
        CHECK((lstat((dir + "/null").c_str(), &st) == 0 && S_ISCHR(st.st_mode)));
    }
    for (const auto& [f, text] : before) CHECK(read_text(dir + "/" + f) == text);
    CHECK(sh("ls " + run).out == "analyze\neval.json\nlog.jsonl\nmodel.bin\n");  // no .tmp left either
    CHECK(sh("./report " + run + " -o " + run + "/report.html --json " + run + "/report.json").rc == 0);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("report takes a study directory or any list of paths: what is not a run is skipped with a note, reruns work",
          "[report][cli]") {
    char tmpl[] = "/tmp/prism_rep_study_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    const std::string st = dir + "/tiny";
    write_run(st + "/uniform-s1", inspect_config("uniform", 256), 12, 900);
    write_run(st + "/prism-s1", inspect_config("prism", 256), 12, 900);
    make_dirs(st + "/analyze");  // analyze -o tiny/analyze
    write_file(st + "/analyze/attention_distance.svg", svg::document(svg::render(svg::Chart())));
    make_dirs(st + "/starting");  // a run that has not logged a step yet
    write_file(st + "/starting/log.jsonl", "");
    write_file(st + "/notes.txt", "x");
    // The README's command, twice: the second time its own report.html (and --json's) are among the paths.
    const std::string cmd = "./report " + st + "/* -o " + st + "/report.html --json " + st + "/report.json";
    for (int k = 0; k < 2; k++) {
        Result r = sh(cmd);
        INFO(k << ": " << r.out);
        REQUIRE(r.rc == 0);
        CHECK(r.out.find("(2 runs in 2 groups") != std::string::npos);
        CHECK(r.out.find("report: note: " + st + "/analyze: it holds charts, not a run (pass --analyze " + st +
                         "/analyze to show them); skipped") != std::string::npos);
        CHECK(r.out.find("report: note: " + st + "/notes.txt: it is a regular file, not a run directory; skipped") !=
              std::string::npos);
        CHECK(r.out.find("report: note: " + st + "/starting: " + st +
                         "/starting/log.jsonl holds no step (it is empty)") != std::string::npos);
        CHECK((r.out.find("report: note: " + st +
                          "/report.html: it is this report's own output (-o or --json); "
                          "skipped") != std::string::npos) == (k == 1));
        CHECK((r.out.find(st + "/report.json: it is this report's own output") != std::string::npos) == (k == 1));
        CHECK(libxml_error(read_text(st + "/report.html")) == "");
    }
    // The study directory alone stands for its runs; given twice, or beside one of its runs, each run is read once.
    Result a = sh("./report " + st + " " + st + "/ " + st + "/prism-s1 -o " + dir + "/a.html");
    INFO(a.out);
    REQUIRE(a.rc == 0);
    CHECK(a.out.find("(2 runs in 2 groups") != std::string::npos);
    CHECK(a.out.find(st + "/analyze: it is not a run of the study " + st + " (no log.jsonl); skipped") !=
          std::string::npos);
    CHECK(a.out.find(st + "/prism-s1: it is the run " + st + "/prism-s1 again; skipped") != std::string::npos);
    const std::string html = read_text(dir + "/a.html");
    CHECK(html.find("Skipped (not runs, or named twice): ") != std::string::npos);
    // Nothing that is a run, or a path that does not exist: one line.
    for (const std::string& bad : {st + "/analyze", st + "/notes.txt", st + "/analyze " + st + "/notes.txt",
                                   st + "/nope", st + "/uniform-s1 " + st + "/nope", std::string("''")}) {
        Result e = sh("./report " + bad + " -o " + dir + "/b.html");
        INFO(bad << ": " << e.out);
        CHECK(one_line_error(e));
        CHECK(e.out.find("note:") == std::string::npos);
    }
    CHECK(sh("./report " + st + "/analyze " + st + "/notes.txt").out.find("no run to report among 2 paths") !=
          std::string::npos);
    CHECK(sh("./report " + st + "/nope").out.find(st + "/nope does not exist") != std::string::npos);
    Result o = sh("./report " + st + " -o " + st + "/prism-s1/log.jsonl");  // a run's log, the study given whole
    INFO(o.out);
    CHECK(one_line_error(o));
    CHECK(o.out.find("note:") == std::string::npos);
    CHECK(o.out.find("-o " + st + "/prism-s1/log.jsonl is the run's log.jsonl, which this command reads") !=
          std::string::npos);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("report: a huge log is streamed in bounded memory; a huge run record is refused by its size",
          "[report][faults]") {
    char tmpl[] = "/tmp/prism_rep_big_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    write_run(dir + "/log", inspect_config("uniform", 256), 12, 900);
    write_run(dir + "/record", inspect_config("uniform", 256), 12, 900);
    REQUIRE(sh("truncate -s 3G " + dir + "/log/log.jsonl").rc == 0);  // sparse: no disk taken
    REQUIRE(sh("truncate -s 3G " + dir + "/record/run.json").rc == 0);
    // ulimit -v: less memory than the file. The log is read line by line (run/run_log.h): the 3 GB of zero bytes
    // after its 12 steps are one overlong line, skipped with a warning, and the page is written.
    Result e = sh("bash -c 'ulimit -v 1500000; ./report " + dir + "/log -o " + dir + "/p.html'");
    INFO(e.out);
    CHECK(e.rc == 0);
    CHECK(e.out.find(dir + "/log/log.jsonl line 13 is longer than 1 MiB") != std::string::npos);
    CHECK(access((dir + "/p.html").c_str(), F_OK) == 0);
    // A run record is never read past its cap (64 MiB: a record is a few KB), so a huge one is refused before any
    // allocation, named with its size, and the run is shown without its flags.
    Result r = sh("bash -c 'ulimit -v 1500000; ./report " + dir + "/record -o " + dir + "/p.html'");
    INFO(r.out);
    CHECK(r.rc == 0);
    CHECK(r.out.find(dir + "/record/run.json is 3221225472 bytes, more than the 64 MiB") != std::string::npos);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE(
    "report in a headless browser (chromium): a hostile chart's script does not run, and the page's policy "
    "stops script that got in",
    "[report][browser]") {
    const std::string browser = find_browser();
    if (browser.empty()) {
        PRISM_SKIP("chromium", "no chromium on this machine (.ci/run installs Debian's: apt-get install chromium)");
        return;
    }
    char tmpl[] = "/tmp/prism_browser_xss_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    const std::string run = dir + "/r";
    write_run(run, inspect_config("uniform", 256), 12, 900);
    make_dirs(run + "/analyze");
    write_file(run + "/analyze/a.svg", kHostileSvg);
    // A chart of one colour no chart of report's has (springgreen): where it shows, images render under the policy.
    write_file(run + "/analyze/b.svg",
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"200\" height=\"100\">"
               "<rect width=\"200\" height=\"100\" fill=\"#00ff7f\"/></svg>");
    REQUIRE(sh("./report " + run + " -o " + dir + "/report.html").rc == 0);
    const std::string page = read_text(dir + "/report.html");
    CHECK(!marker_set(rendered_dom(browser, dir + "/report.html")));
    // A case report might miss: the same SVG pasted into the page's body, as report did before. The policy
    // stops it; without the policy the very same page runs it (so the markers do tell).
    std::string pasted = page;
    pasted.insert(pasted.rfind("</body>"), std::string(kHostileSvg).substr(std::string(kHostileSvg).find("<svg")));
    write_file(dir + "/pasted.html", pasted);
    CHECK(!marker_set(rendered_dom(browser, dir + "/pasted.html")));
    const size_t a = pasted.find("<meta http-equiv=\"Content-Security-Policy\"");
    REQUIRE(a != std::string::npos);
    write_file(dir + "/no_policy.html", pasted.erase(a, pasted.find("/>", a) + 2 - a));
    CHECK(marker_set(rendered_dom(browser, dir + "/no_policy.html")));
    // The charts are shown: springgreen on the screenshot.
    sh("cd '" + dir + "' && timeout 120 " + browser +
       " --headless --no-sandbox --disable-gpu --hide-scrollbars "
       "--window-size=1280,6000 --screenshot=" +
       dir + "/shot.png file://" + dir + "/report.html");
    const Image im = read_png(dir + "/shot.png");
    REQUIRE(im.error == "");
    long green = 0;
    for (size_t p = 0; p < im.rgb.size(); p += 3)
        green += im.rgb[p] == 0 && im.rgb[p + 1] == 0xff && im.rgb[p + 2] == 0x7f;
    INFO("springgreen pixels " << green);
    CHECK(green > 15000);  // most of the 200 x 100 chart
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("report warns about negative, duplicated and string-valued steps; a directory as output is refused first",
          "[report][faults]") {
    char tmpl[] = "/tmp/prism_rep_XXXXXX";
    std::string dir = mkdtemp(tmpl);
    std::ofstream(dir + "/log.jsonl") << "{\"step\": 1, \"train_loss\": 5.0}\n{\"step\": -3, \"train_loss\": 4.0}\n"
                                         "{\"step\": 1, \"train_loss\": 4.5}\n{\"step\": 2, \"train_loss\": \"low\"}\n"
                                         "{\"step\": 3, \"train_loss\": 4.2}\n";
    std::vector<std::string> warned;
    RunLog r = read_run(dir, [&](const std::string& w) { warned.push_back(w); });
    REQUIRE(r.steps.size() == 2);
    REQUIRE(warned.size() == 3);
    CHECK(has(warned[0], "line 2 is not a step's JSON (step -3 is not a whole number >= 1)"));
    CHECK(
        has(warned[1], "line 3 is not a step's JSON (step 1 does not follow step 1: a duplicated or reordered line)"));
    CHECK(has(warned[2], "line 4 is not a step's JSON (\"train_loss\" is not a number)"));
    Result o = sh("./report " + dir + " -o " + dir);
    CHECK(one_line_error(o));
    CHECK(has(o.out, "-o " + dir + " is a directory; pass a file name"));
    CHECK(sh("ls " + dir).out == "log.jsonl\n");  // no .tmp litter
    sh("rm -rf '" + dir + "'");
}

TEST_CASE(
    "report: a string a run's files claim is shown cut, with its size: the page grows with the runs, not the "
    "strings",
    "[report][cli]") {
    char tmpl[] = "/tmp/prism_report_cut_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    const std::string plain = dir + "/plain", big = dir + "/big";
    for (const std::string& run : {plain, big}) {
        write_run(run, inspect_config("uniform", 256), 12, 900);
        write_run_record(run, "uniform", {{"--lr", "0.003"}, {"--seed", "1"}}, 12);
    }
    // A task name of 1 MiB (é, two bytes each: cut at a character's start) in eval.json and in samples.jsonl.
    std::string name;
    while (name.size() < ((size_t)1 << 20)) name += "é";
    for (const auto& [run, task] : {std::make_pair(plain, std::string("piqa")), std::make_pair(big, name)}) {
        write_file(run + "/eval.json", "{\"step\": 12, \"results\": [{\"task\": \"" + task +
                                           "\", \"examples\": 2, \"acc\": 0.5, \"acc_stderr\": 0.5}]}");
        write_file(run + "/samples.jsonl", "{\"task\": \"" + task + "\", \"index\": 0, \"acc\": 1}\n{\"task\": \"" +
                                               task + "\", \"index\": 1, \"acc\": 0}\n");
    }
    Result a = sh("./report " + plain + " -o " + dir + "/plain.html");
    Result b = sh("./report " + big + " -o " + dir + "/big.html");
    INFO(b.out.substr(0, 2000));
    REQUIRE(a.rc == 0);
    REQUIRE(b.rc == 0);
    const std::string page = read_text(dir + "/big.html");
    CHECK(libxml_error(page) == "");
    const std::string cut = name.substr(0, 120) + "… (cut from " + std::to_string(name.size()) + " bytes)";
    CHECK(page.find(cut) != std::string::npos);
    CHECK(page.find(name.substr(0, 122)) == std::string::npos);  // never more of it
    // The page's size: the short name's page plus a few copies of the cut name, not of the megabyte.
    CHECK(page.size() < read_text(dir + "/plain.html").size() + 20 * cut.size());
    CHECK(b.out.size() < a.out.size() + 20 * cut.size());
    sh("rm -rf '" + dir + "'");
}

TEST_CASE(
    "the report's layout in a headless browser at 1280 and 1600 px: no table wider than the page, no chart "
    "text clipped",
    "[report][browser]") {
    const std::string browser = find_browser();
    if (browser.empty()) {
        PRISM_SKIP("chromium", "no chromium on this machine (.ci/run installs Debian's: apt-get install chromium)");
        return;
    }
    char tmpl[] = "/tmp/prism_layout_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    // Two arms of long labels x three lrs x two seeds (a sweep whose best is at the grid's edge), and analyze's
    // span-use chart, whose title is longer than a chart is wide.
    for (const char* heads : {"uniform", "prism"})
        for (const char* lr : {"0.001", "0.003", "0.01"})
            for (int seed = 1; seed <= 2; seed++) {
                const std::string run = dir + "/" + heads + "-lr" + lr + "-s" + std::to_string(seed);
                write_run(run, inspect_config(heads, 256), 40, 1000, "", std::atof(lr) * 10 + seed * 0.01);
                write_run_record(run, heads,
                                 {{"--kv-heads", heads[0] == 'p' ? "1x2,2x4" : "4x6"},
                                  {"--window", heads[0] == 'p' ? "local:32,2:1" : "0"},
                                  {"--lr", lr},
                                  {"--seed", std::to_string(seed)}},
                                 40);
            }
    make_dirs(dir + "/an");
    svg::Chart span;
    span.title = "Attention distance / reach (the mean farthest distance the layer's window lets it see)";
    span.xlabel = "layer", span.ylabel = "fraction of reach", span.integer_x = true;
    span.series.push_back({"uniform-lr0.001-s1", {1, 2, 3}, {0.4, 0.5, 0.6}, false, true, {}, {}, "", {}, {}, "", 0});
    write_file(dir + "/an/attention_span_use.svg", svg::document(svg::render(span)));
    Result r = sh("./report " + dir + " --analyze " + dir + "/an -o " + dir + "/report.html");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    // A page of our own beside it frames the report and measures it (chromium reads a sibling file:// page with
    // --allow-file-access-from-files): the page's width and each table's against the frame, and every chart
    // text's box against its chart (rotated axis labels aside). The report itself runs no script.
    for (int width : {1280, 1600}) {
        write_file(
            dir + "/measure.html",
            "<!DOCTYPE html><html><body style=\"margin:0\"><iframe id=\"f\" src=\"report.html\" "
            "style=\"border:0;width:" +
                std::to_string(width) +
                "px;height:900px\"></iframe><script>\n"
                "document.getElementById('f').onload = function () {\n"
                "  var d = this.contentDocument, out = [];\n"
                "  if (d.documentElement.scrollWidth > d.documentElement.clientWidth) out.push('page');\n"
                "  d.querySelectorAll('table').forEach(function (t) {\n"
                "    var p = t.parentElement; if (t.getBoundingClientRect().right > d.documentElement.clientWidth "
                "|| p.scrollWidth > p.clientWidth) out.push('table ' + t.rows[0].cells[0].textContent); });\n"
                "  d.querySelectorAll('img, svg').forEach(function (s) { if (s.getBoundingClientRect().right > "
                "d.documentElement.clientWidth) out.push('chart'); });\n"
                "  d.querySelectorAll('svg text').forEach(function (t) {\n"
                "    if (t.getAttribute('transform')) return;\n"
                "    var b = t.getBBox(), W = t.ownerSVGElement.width.baseVal.value;\n"
                "    if (b.x < -0.5 || b.x + b.width > W + 0.5) out.push('clipped: ' + t.textContent); });\n"
                "  document.body.setAttribute('data-measure', 'done ' + out.join('; '));\n"
                "};\n</script></body></html>\n");
        Result m = sh("timeout 120 " + browser +
                      " --headless --no-sandbox --disable-gpu --allow-file-access-from-files "
                      "--virtual-time-budget=5000 --dump-dom 'file://" +
                      dir + "/measure.html' 2>/dev/null");
        const size_t at = m.out.find("data-measure=\"");
        REQUIRE(at != std::string::npos);
        const std::string found = m.out.substr(at + 14, m.out.find('"', at + 14) - at - 14);
        INFO("at " << width << " px: " << found);
        CHECK(found == "done ");
    }
    // analyze's charts are images: the span-use chart's title in two lines, inside its width.
    const std::string page = read_text(dir + "/report.html");
    const std::string chart = svg::render(span);
    size_t title_lines = 0;
    for (size_t p = chart.find("font-weight=\"bold\""); p != std::string::npos;
         p = chart.find("font-weight=\"bold\"", p + 1))
        title_lines++;
    CHECK(title_lines == 2);
    CHECK(has(page, "0.001 (edge of the grid)"));  // the lowest lr is each arm's best: flagged
    sh("rm -rf '" + dir + "'");
}
