// report: one static HTML page comparing training runs, readable from disk in any browser (no server, no script).
//
//   ./report runs/uniform runs/prism runs/x -o runs/report.html
//   ./report runs/* --analyze runs/analyze -o report.html --title "tiny: uniform vs Prism vs X"
//
// For each RUN_DIR (a train_prism output directory) it reads log.jsonl and the header of model.bin (run_log.h),
// and writes, with svg.h's charts inline:
//   - a table of the runs: model, schedule, parameters, steps, tokens, final and best losses, median tokens/s, time
//   - training and validation loss against tokens and against wall-clock, all runs overlaid; tokens/s per step
//   - each run's schedule, as the Prism paper draws it: heads per layer as a staircase, and widths per layer (the X)
//   - the zero-shot evals logged during training ("eval" entries), side by side: the last result of each task
//     per run, and accuracy against tokens when a task ran more than once
//   - analyze's charts, when present: every *.svg in RUN_DIR/analyze/ and in each --analyze DIR (what
//     `analyze -o DIR` writes), checked well-formed before they are inlined
// A log line that is not whole JSON (a torn last line after a crash) is skipped with a warning, on stderr and in
// the page. The page is XHTML-compatible HTML5 (well-formed XML, so it can be checked strictly).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cli.h"
#include "io.h"
#include "plan.h"
#include "run_dir.h"
#include "run_log.h"
#include "schedule.h"
#include "svg.h"
#include "xml_check.h"

namespace {

struct Options {
    std::vector<std::string> runs, analyze;
    std::string out = "report.html", title = "Prism training report";
    bool help = false;
};

std::vector<Flag> make_flags(Options& o) {
    return {
        {"-o, --out", "FILE", "the HTML file to write (default report.html)", [&o](const std::string& v) { o.out = v; }},
        {"--analyze", "DIR", "also show the charts analyze -o DIR wrote (repeatable; RUN_DIR/analyze/ is always looked in)",
         [&o](const std::string& v) { o.analyze.push_back(v); }},
        {"--title", "TEXT", "the page's title", [&o](const std::string& v) { o.title = v; }},
        {"-h, --help", "", "this text", [&o](const std::string&) { o.help = true; }},
    };
}

using svg::xml_escape;

std::string fmt(double v, const char* f) {
    if (!std::isfinite(v)) return "-";
    char b[64];
    snprintf(b, sizeof b, f, v);
    return b;
}

std::string duration(double s) {
    if (!std::isfinite(s)) return "-";
    char b[64];
    if (s < 120) snprintf(b, sizeof b, "%.0f s", s);
    else if (s < 7200) snprintf(b, sizeof b, "%.1f min", s / 60);
    else snprintf(b, sizeof b, "%.1f h", s / 3600);
    return b;
}

// At most `max` points: consecutive points averaged in equal buckets (a 100K-step log stays a small chart).
void downsample(std::vector<double>& x, std::vector<double>& y, size_t max) {
    if (x.size() <= max) return;
    const size_t k = (x.size() + max - 1) / max;
    std::vector<double> nx, ny;
    for (size_t a = 0; a < x.size(); a += k) {
        double sx = 0, sy = 0;
        size_t n = 0, ny_n = 0;
        for (size_t i = a; i < std::min(x.size(), a + k); i++) {
            sx += x[i], n++;
            if (std::isfinite(y[i])) sy += y[i], ny_n++;
        }
        nx.push_back(sx / n), ny.push_back(ny_n ? sy / ny_n : NAN);
    }
    x.swap(nx), y.swap(ny);
}

// A chart of one field of every run's steps against another.
svg::Chart steps_chart(const std::vector<RunLog>& runs, const std::string& title, const std::string& xlabel,
                       const std::string& ylabel, double RunStep::*xf, double RunStep::*yf, bool tokens_x) {
    svg::Chart c;
    c.title = title, c.xlabel = xlabel, c.ylabel = ylabel;
    for (const RunLog& r : runs) {
        svg::Series s;
        s.name = r.name;
        for (const RunStep& st : r.steps) {
            const double y = st.*yf;
            if (!std::isfinite(y)) continue;  // a step without this value (no validation at this step)
            s.x.push_back(tokens_x ? (double)st.tokens : xf ? st.*xf : (double)st.step), s.y.push_back(y);
        }
        downsample(s.x, s.y, 1500);
        c.series.push_back(s);
    }
    return c;
}

double median(std::vector<double> v) {
    v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
    if (v.empty()) return NAN;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
}

std::string runs_table(const std::vector<RunLog>& runs) {
    std::string h = "<table>\n<tr><th>run</th><th>model</th><th>widths</th><th>heads</th><th>parameters</th>"
                    "<th>steps</th><th>tokens</th><th>train loss (last)</th><th>val loss (last)</th>"
                    "<th>val loss (best)</th><th>tokens/s (median)</th><th>time</th><th>skipped steps</th></tr>\n";
    for (const RunLog& r : runs) {
        double last_val = NAN, best_val = NAN, last_train = NAN;
        long skipped = 0;
        std::vector<double> tps;
        for (const RunStep& s : r.steps) {
            if (std::isfinite(s.val_loss)) last_val = s.val_loss, best_val = std::isfinite(best_val) ? std::min(best_val, s.val_loss) : s.val_loss;
            if (std::isfinite(s.train_loss)) last_train = s.train_loss;
            tps.push_back(s.tokens_per_s);
            skipped += s.skipped;
        }
        const RunStep& last = r.steps.back();
        h += "<tr><td>" + xml_escape(r.name) + "</td>";
        if (r.has_model)
            h += "<td>d " + std::to_string(r.cfg.d) + ", L " + std::to_string(r.cfg.L()) + ", T " + std::to_string(r.cfg.T) +
                 ", " + norm_name(r.cfg.norm) + "</td><td>" + xml_escape(rle_list(layer_widths(r.cfg))) + "</td><td>" +
                 xml_escape(rle_list(layer_heads(r.cfg))) + "</td><td>" + xml_escape(human((double)account(r.cfg).params)) + "</td>";
        else
            h += "<td colspan=\"4\">no model.bin</td>";
        h += "<td>" + std::to_string(last.step) + "</td><td>" + xml_escape(human((double)last.tokens)) + "</td><td>" +
             fmt(last_train, "%.4f") + "</td><td>" + fmt(last_val, "%.4f") + "</td><td>" + fmt(best_val, "%.4f") +
             "</td><td>" + fmt(median(tps), "%.0f") + "</td><td>" + duration(last.elapsed_total) + "</td><td>" +
             std::to_string(skipped) + "</td></tr>\n";
    }
    return h + "</table>\n";
}

std::string schedules(const std::vector<RunLog>& runs) {
    svg::Chart heads, widths;
    heads.title = "Heads per layer (staircase)", heads.xlabel = "layer", heads.ylabel = "heads h_l";
    widths.title = "Width per layer", widths.xlabel = "layer", widths.ylabel = "width w_l";
    heads.integer_x = widths.integer_x = true, heads.y_zero = widths.y_zero = true;
    std::string table = "<table>\n<tr><th>run</th><th>layer</th>";
    int Lmax = 0;
    for (const RunLog& r : runs)
        if (r.has_model) Lmax = std::max(Lmax, r.cfg.L());
    for (int l = 1; l <= Lmax; l++) table += "<th>" + std::to_string(l) + "</th>";
    table += "</tr>\n";
    for (const RunLog& r : runs) {
        svg::Series hs, ws;
        hs.name = ws.name = r.name, hs.step = true;
        if (r.has_model) {
            for (int l = 0; l < r.cfg.L(); l++) {
                hs.x.push_back(l + 1), hs.y.push_back(r.cfg.layers[l].heads);
                ws.x.push_back(l + 1), ws.y.push_back(r.cfg.layers[l].width);
            }
            for (const char* what : {"heads", "head_dim", "width"}) {
                table += "<tr><td>" + xml_escape(r.name) + "</td><td>" + what + "</td>";
                for (int l = 0; l < Lmax; l++) {
                    table += "<td>";
                    if (l < r.cfg.L()) {
                        const LayerSpec& s = r.cfg.layers[l];
                        table += std::to_string(what[0] == 'h' && what[4] == 's' ? s.heads : what[0] == 'h' ? s.head_dim() : s.width);
                    }
                    table += "</td>";
                }
                table += "</tr>\n";
            }
        }
        heads.series.push_back(hs), widths.series.push_back(ws);
    }
    table += "</table>\n";
    return "<div class=\"charts\">\n" + svg::render(heads) + svg::render(widths) + "</div>\n" + table;
}

std::string evals(const std::vector<RunLog>& runs) {
    std::vector<std::string> tasks;
    for (const RunLog& r : runs)
        for (const RunEval& e : r.evals)
            if (std::find(tasks.begin(), tasks.end(), e.task) == tasks.end()) tasks.push_back(e.task);
    if (tasks.empty())
        return "<p>No run logged a zero-shot eval (train with <code>--eval-every N --eval-task TASK</code>; "
               "<code>eval_zeroshot</code> scores a checkpoint afterwards).</p>\n";
    std::string h;
    for (const std::string& task : tasks) {
        h += "<h3>" + xml_escape(task) + "</h3>\n<table>\n<tr><th>metric</th>";
        std::vector<const RunEval*> last;
        for (const RunLog& r : runs) {
            h += "<th>" + xml_escape(r.name) + "</th>";
            const RunEval* l = nullptr;
            for (const RunEval& e : r.evals)
                if (e.task == task) l = &e;
            last.push_back(l);
        }
        h += "</tr>\n";
        auto row = [&](const std::string& label, const std::function<std::string(const RunEval&)>& cell) {
            bool any = false;
            std::string tr = "<tr><td>" + xml_escape(label) + "</td>";
            for (const RunEval* e : last) {
                const std::string v = e ? cell(*e) : "-";
                any |= v != "-";
                tr += "<td>" + xml_escape(v) + "</td>";
            }
            if (any) h += tr + "</tr>\n";
        };
        row("at step", [](const RunEval& e) { return std::to_string(e.step); });
        row("examples", [](const RunEval& e) { return fmt(e.get("examples"), "%.0f"); });
        auto pct = [](const RunEval& e, const char* k, const char* se) {
            const double v = e.get(k), s = e.get(se);
            return std::isfinite(v) ? fmt(100 * v, "%.2f") + (std::isfinite(s) ? " ± " + fmt(100 * s, "%.2f") : "") : "-";
        };
        row("acc %", [&](const RunEval& e) { return pct(e, "acc", "acc_stderr"); });
        row("acc_norm %", [&](const RunEval& e) { return pct(e, "acc_norm", "acc_norm_stderr"); });
        row("perplexity", [](const RunEval& e) { return fmt(e.get("perplexity"), "%.3f"); });
        row("word perplexity", [](const RunEval& e) { return fmt(e.get("word_perplexity"), "%.3f"); });
        row("bits per byte", [](const RunEval& e) { return fmt(e.get("bits_per_byte"), "%.4f"); });
        h += "</table>\n";
        svg::Chart c;
        c.title = task + ": accuracy during training", c.xlabel = "tokens", c.ylabel = "acc";
        c.y_zero = true;
        size_t most = 0;
        for (const RunLog& r : runs) {
            svg::Series s;
            s.name = r.name;
            for (const RunEval& e : r.evals)
                if (e.task == task) s.x.push_back((double)e.tokens), s.y.push_back(e.get("acc"));
            most = std::max(most, s.x.size());
            c.series.push_back(s);
        }
        if (most > 1) h += "<div class=\"charts\">\n" + svg::render(c) + "</div>\n";
    }
    return h;
}

// The charts analyze wrote into dir (*.svg, in name order), checked and without their XML declaration.
std::string analyze_charts(const std::string& dir, std::vector<std::string>& warnings) {
    std::vector<std::string> names;
    for (const std::string& n : list_dir(dir))
        if (n.size() > 4 && n.compare(n.size() - 4, 4, ".svg") == 0) names.push_back(n);
    std::sort(names.begin(), names.end());
    std::string h;
    for (const std::string& n : names) {
        std::string text = read_text(dir + "/" + n);
        const std::string err = xml_error(text);
        size_t at = text.find("<svg");
        if (!err.empty() || at == std::string::npos) {
            warnings.push_back(dir + "/" + n + " is not a well-formed SVG (" + (err.empty() ? "no <svg> element" : err) +
                               "): not shown");
            fprintf(stderr, "report: warning: %s\n", warnings.back().c_str());
            continue;
        }
        h += text.substr(at) + "\n";
    }
    return h.empty() ? "" : "<div class=\"charts\">\n" + h + "</div>\n";
}

const char* kStyle =
    "body { font-family: DejaVu Sans, Helvetica, Arial, sans-serif; margin: 24px; color: #222222; }\n"
    "h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #cccccc; }\n"
    "h3 { font-size: 15px; }\n"
    "table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }\n"
    "th, td { border: 1px solid #dddddd; padding: 3px 8px; text-align: right; }\n"
    "th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }\n"
    ".charts svg { margin: 0 12px 12px 0; vertical-align: top; }\n"
    ".note { color: #666666; font-size: 13px; } .warn { color: #a33; }\n";

int run(const Options& o) {
    std::vector<RunLog> runs;
    std::vector<std::string> warnings;
    for (const std::string& d : o.runs) {
        runs.push_back(read_run(d, [](const std::string& w) { fprintf(stderr, "report: warning: %s\n", w.c_str()); }));
        for (const std::string& w : runs.back().warnings) warnings.push_back(w);
    }
    std::string h = "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n"
                    "<meta charset=\"utf-8\"/>\n<title>" + xml_escape(o.title) + "</title>\n<style>\n" + kStyle +
                    "</style>\n</head>\n<body>\n<h1>" + xml_escape(o.title) + "</h1>\n";
    char date[64];
    const time_t now = time(nullptr);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    h += "<p class=\"note\">" + std::to_string(runs.size()) + " run" + (runs.size() == 1 ? "" : "s") + ": ";
    for (size_t i = 0; i < runs.size(); i++) h += (i ? ", " : "") + xml_escape(runs[i].dir);
    h += ". Written by <code>report</code> on " + std::string(date) + ".</p>\n";

    h += "<h2>Runs</h2>\n" + runs_table(runs);
    h += "<h2>Loss</h2>\n<div class=\"charts\">\n";
    h += svg::render(steps_chart(runs, "Training loss", "tokens", "loss", nullptr, &RunStep::train_loss, true));
    h += svg::render(steps_chart(runs, "Validation loss", "tokens", "loss", nullptr, &RunStep::val_loss, true));
    h += svg::render(steps_chart(runs, "Training loss against wall-clock", "seconds", "loss", &RunStep::elapsed_total,
                                 &RunStep::train_loss, false));
    h += svg::render(steps_chart(runs, "Validation loss against wall-clock", "seconds", "loss", &RunStep::elapsed_total,
                                 &RunStep::val_loss, false));
    h += "</div>\n<p class=\"note\">Wall-clock is each log's elapsed_s, added up across resumed invocations. Logs of "
         "more than 1,500 steps are drawn as means of equal buckets of steps.</p>\n";
    h += "<h2>Throughput</h2>\n<div class=\"charts\">\n";
    svg::Chart tps = steps_chart(runs, "Tokens per second", "step", "tokens/s", nullptr, &RunStep::tokens_per_s, false);
    tps.y_zero = true;
    h += svg::render(tps) + "</div>\n";
    h += "<h2>Schedules</h2>\n" + schedules(runs);
    h += "<h2>Zero-shot evaluations</h2>\n" + evals(runs);

    std::vector<std::string> dirs;
    for (const RunLog& r : runs)
        if (is_dir(r.dir + "/analyze")) dirs.push_back(r.dir + "/analyze");
    for (const std::string& d : o.analyze) {
        if (!is_dir(d)) throw ConfigError("--analyze " + d + " is not a directory; pass what analyze -o DIR wrote");
        dirs.push_back(d);
    }
    h += "<h2>Inside the models (analyze)</h2>\n";
    if (dirs.empty())
        h += "<p>No analyze charts: run <code>analyze RUN_DIR... -o RUN_DIR/analyze</code> (or <code>-o DIR</code> and "
             "pass <code>--analyze DIR</code> here).</p>\n";
    for (const std::string& d : dirs) {
        const std::string charts = analyze_charts(d, warnings);
        h += "<h3>" + xml_escape(d) + "</h3>\n" + (charts.empty() ? "<p>No charts in it.</p>\n" : charts);
    }
    if (!warnings.empty()) {
        h += "<h2>Warnings</h2>\n<ul>\n";
        for (const std::string& w : warnings) h += "<li class=\"warn\">" + xml_escape(w) + "</li>\n";
        h += "</ul>\n";
    }
    h += "</body>\n</html>\n";
    const std::string err = xml_error(h);
    if (!err.empty()) throw std::logic_error("the report is not well-formed XML: " + err);
    try {
        write_atomically(o.out, {{h.data(), h.size()}});
    } catch (const IoError& e) {
        throw ConfigError(e.what());
    }
    printf("report: wrote %s (%zu runs, %.0f KB)\n", o.out.c_str(), runs.size(), h.size() / 1024.0);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    std::vector<Flag> flags = make_flags(o);
    return run_tool("report", "", [&] {
        std::vector<char*> rest = take_positional(argc, argv, flags, o.runs);  // the run directories
        parse_flags((int)rest.size(), rest.data(), flags, "report");
        if (o.help) {
            printf("usage: report RUN_DIR... [flags]\n\nOne static HTML page (inline SVG, no script) comparing training "
                   "runs: losses, throughput, schedules, zero-shot evals and analyze's charts.\n\n");
            print_flags(stdout, flags);
            return 0;
        }
        if (o.runs.empty()) throw ConfigError("no run directory given; usage: report RUN_DIR... [flags] (--help)");
        check_output_file(o.out, "-o");
        return run(o);
    });
}
