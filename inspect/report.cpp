// report: one static HTML page comparing training runs, readable from disk in any browser (no server, no script).
//
//   ./report runs/uniform runs/prism runs/x -o runs/report.html
//   ./report runs/* --analyze runs/analyze -o report.html --title "tiny: uniform vs Prism vs X"
//
// For each RUN_DIR (a train_prism output directory) it reads log.jsonl, the header of model.bin, the run record
// run.json and eval.json (run/run_log.h), and writes, with inspect/svg.h's charts inline:
//   - seed groups: runs whose records differ only in --seed (and in what a resume may change) form one group,
//     labelled by the flags that tell the groups apart. Per group: final and best validation loss, mean +- sample
//     std over its runs; against the baseline group (--baseline NAME: a group's label or one of its runs' names;
//     default the group with uniform heads and widths) the paired difference over the seeds both have, with n and
//     its 95% interval from Student's t (studies/stats.h); the same for every zero-shot metric present (eval.json,
//     else the last in-training eval). Printed on stdout too, and with --json FILE every number as JSON.
//     A run without a record is a group of its own.
//   - a table of the runs: model, schedule, seed, parameters, steps, tokens, final and best losses, median
//     tokens/s, time, status and commit
//   - per group, training and validation loss averaged over its seeds, with a band of +- one std
//   - training and validation loss against tokens and against wall-clock, all runs overlaid; tokens/s per step
//   - each run's schedule, as the Prism paper draws it: heads per layer as a staircase, and widths per layer (the X)
//   - the zero-shot evals logged during training ("eval" entries), side by side: the last result of each task
//     per run, and accuracy against tokens when a task ran more than once
//   - analyze's charts, when present: every *.svg in RUN_DIR/analyze/ and in each --analyze DIR (what
//     `analyze -o DIR` writes), checked well-formed before they are inlined
// One colour per group (a run takes its group's colour), the same in every chart, analyze's included (report
// recolours each inlined chart's <g data-series="RUN"> to the run's colour). --smooth K draws the training
// loss as the mean of the last K steps. A note says what tokens/s measured on a shared machine mean.
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

#include "run/cli.h"
#include "util/io.h"
#include "run/plan_views.h"
#include "util/fs.h"
#include "run/run_log.h"
#include "model_config.h"
#include "inspect/report_groups.h"
#include "inspect/svg.h"
#include "inspect/xml_check.h"
#include "run/run_record.h"
#include "studies/stats.h"

namespace {

struct Options {
    std::vector<std::string> runs, analyze;
    std::string out = "report.html", title = "Prism training report", baseline, json;
    int smooth = 0;
};

std::vector<Flag> make_flags(Options& o) {
    Flag analyze = make_flag("--analyze", "DIR", "also show the charts analyze -o DIR wrote (repeatable; RUN_DIR/analyze/ "
                             "is always looked in)", [&o](const std::string& v) {
                                 if (v.empty()) throw ConfigError("--analyze needs a path, not an empty string");
                                 o.analyze.push_back(v);
                             }, FlagKind::Path);
    return {
        path_flag("-o, --out", "FILE", "the HTML file to write (default {default})", o.out),
        analyze,
        text_flag("--title", "TEXT", "the page's title", o.title),
        text_flag("--baseline", "NAME", "the group differences are taken against: a group's label or a run's name "
                  "(default: the group with uniform heads and widths)", o.baseline),
        path_flag("--json", "FILE", "also write every number the page shows as JSON", o.json),
        number_flag("--smooth", "K", "draw the training loss as the mean of the last K steps (default 1: as logged)",
                    o.smooth, 1, 1000000),
    };
}

using namespace report;
using svg::xml_escape;

std::string runs_table(const std::vector<RunLog>& runs, const std::vector<Summary>& sums, const std::vector<Group>& groups) {
    std::string h = "<table>\n<tr><th>run</th><th>group</th><th>model</th><th>widths</th><th>heads</th><th>seed</th>"
                    "<th>parameters</th><th>steps</th><th>tokens</th><th>lr</th><th>train loss (last)</th>"
                    "<th>val loss (last)</th><th>val loss (best)</th><th>tokens/s (median)</th><th>time</th>"
                    "<th>skipped steps</th><th>status</th><th>commit</th></tr>\n";
    for (size_t i = 0; i < runs.size(); i++) {
        const RunLog& r = runs[i];
        const Summary& m = sums[i];
        const Group& g = groups[m.group];
        const RunStep& last = r.steps.back();
        h += "<tr><td><span style=\"color: " + g.colour + "\">■</span> " + xml_escape(r.name) + "</td><td>" +
             xml_escape(g.label) + "</td>";
        if (r.has_model)
            h += "<td>d " + std::to_string(r.cfg.d) + ", L " + std::to_string(r.cfg.L()) + ", T " + std::to_string(r.cfg.T) +
                 ", " + norm_name(r.cfg.norm) + "</td><td>" + xml_escape(rle_list(layer_widths(r.cfg))) + "</td><td>" +
                 xml_escape(rle_list(layer_heads(r.cfg))) + "</td>";
        else
            h += "<td colspan=\"3\">no model.bin</td>";
        h += "<td>" + xml_escape(m.seed.empty() ? "-" : m.seed) + "</td><td>" +
             (r.has_model ? xml_escape(human((double)account(r.cfg).params)) : "-") + "</td>";
        h += "<td>" + std::to_string(last.step) + "</td><td>" + xml_escape(human((double)last.tokens)) + "</td><td>" +
             xml_escape(r.has_record ? r.record.arg("--lr") : "-") + "</td><td>" + fmt(m.last_train, "%.4f") +
             "</td><td>" + fmt(m.last_val, "%.4f") + "</td><td>" + fmt(m.best_val, "%.4f") + "</td><td>" +
             fmt(m.median_tps, "%.0f") + "</td><td>" + duration(last.elapsed_total) + "</td><td>" +
             std::to_string(m.skipped) + "</td><td>" + xml_escape(r.has_record ? r.record.status() : "no record") +
             "</td><td>" + xml_escape(r.has_record ? r.record.latest("commit") : "-") + "</td></tr>\n";
    }
    return h + "</table>\n";
}

// Every number of the groups table and the runs table, as JSON.
std::string report_json(const Options& o, const std::vector<RunLog>& runs, const std::vector<Summary>& sums,
                        const std::vector<Group>& groups, size_t base, const std::vector<Quantity>& qs) {
    auto num = [](double v) { return json::number(v, "%.9g"); };
    std::string s = "{\"title\": " + json::quote(o.title) + ", \"baseline\": " + json::quote(groups[base].label) +
                    ",\n \"groups\": [";
    for (size_t gi = 0; gi < groups.size(); gi++) {
        const Group& g = groups[gi];
        s += std::string(gi ? ",\n  " : "\n  ") + "{\"label\": " + json::quote(g.label) + ", \"colour\": " +
             json::quote(g.colour) + ", \"runs\": [";
        for (size_t k = 0; k < g.runs.size(); k++) s += (k ? ", " : "") + json::quote(runs[g.runs[k]].name);
        s += "], \"seeds\": [";
        for (size_t k = 0; k < g.runs.size(); k++) s += (k ? ", " : "") + json::quote(sums[g.runs[k]].seed);
        s += "], \"quantities\": {";
        for (size_t qi = 0; qi < qs.size(); qi++) {
            const GroupStat st = group_stat(g, groups[base], gi == base, qs[qi], runs, sums);
            s += std::string(qi ? ", " : "") + json::quote(qs[qi].name) + ": {\"n\": " + std::to_string(st.n) +
                 ", \"mean\": " + num(st.mean) + ", \"std\": " + num(st.sd);
            if (gi != base)
                s += ", \"vs_baseline\": {\"n\": " + std::to_string(st.diff.n) + ", \"mean\": " + num(st.diff.mean) +
                     ", \"std\": " + num(st.diff.sd) + ", \"t975\": " + num(st.diff.t975) + ", \"lo\": " +
                     num(st.diff.lo) + ", \"hi\": " + num(st.diff.hi) + "}";
            s += "}";
        }
        s += "}}";
    }
    s += "\n ],\n \"runs\": [";
    for (size_t i = 0; i < runs.size(); i++) {
        const RunLog& r = runs[i];
        const Summary& m = sums[i];
        const RunStep& last = r.steps.back();
        s += std::string(i ? ",\n  " : "\n  ") + "{\"name\": " + json::quote(r.name) + ", \"dir\": " + json::quote(r.dir) +
             ", \"group\": " + json::quote(groups[m.group].label) + ", \"seed\": " + json::quote(m.seed) +
             ", \"steps\": " + std::to_string(last.step) + ", \"tokens\": " + std::to_string(last.tokens) +
             ", \"params\": " + (r.has_model ? std::to_string(account(r.cfg).params) : std::string("null")) +
             ", \"widths\": " + (r.has_model ? json::quote(rle_list(layer_widths(r.cfg))) : std::string("null")) +
             ", \"heads\": " + (r.has_model ? json::quote(rle_list(layer_heads(r.cfg))) : std::string("null")) +
             ", \"final_train_loss\": " + num(m.last_train) + ", \"final_val_loss\": " + num(m.last_val) +
             ", \"best_val_loss\": " + num(m.best_val) + ", \"median_tokens_per_s\": " + num(m.median_tps) +
             ", \"time_s\": " + num(last.elapsed_total) + ", \"skipped_steps\": " + std::to_string(m.skipped) +
             ", \"metrics\": {";
        for (size_t k = 0; k < m.metrics.size(); k++)
            s += (k ? ", " : "") + json::quote(m.metrics[k].first) + ": " + num(m.metrics[k].second);
        s += "}";
        if (r.has_record)
            s += ", \"record\": {\"status\": " + json::quote(r.record.status()) + ", \"commit\": " +
                 json::quote(r.record.latest("commit")) + ", \"host\": " + json::quote(r.record.latest("host")) +
                 ", \"engine\": " + json::quote(r.record.latest("engine")) + ", \"lr\": " +
                 json::quote(r.record.arg("--lr")) + ", \"total_batch\": " + json::quote(r.record.arg("--total-batch")) + "}";
        s += "}";
    }
    return s + "\n ]}\n";
}

// analyze's charts name each series by its run (<g data-series="RUN" color="...">): give it the run's colour.
std::string recolour(std::string svg_text, const std::vector<RunLog>& runs, const std::vector<std::string>& colours) {
    for (size_t i = 0; i < runs.size(); i++) {
        const std::string key = "<g data-series=\"" + xml_escape(runs[i].name) + "\" color=\"";
        for (size_t at = svg_text.find(key); at != std::string::npos; at = svg_text.find(key, at + 1)) {
            const size_t v = at + key.size(), end = svg_text.find('"', v);
            if (end != std::string::npos && end - v == 7) svg_text.replace(v, 7, colours[i]);
        }
    }
    return svg_text;
}

std::string schedules(const std::vector<RunLog>& runs, const std::vector<std::string>& colours) {
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
    for (size_t i = 0; i < runs.size(); i++) {
        const RunLog& r = runs[i];
        svg::Series hs, ws;
        hs.name = ws.name = r.name, hs.step = true;
        hs.color = ws.color = colours[i];
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

std::string evals(const std::vector<RunLog>& runs, const std::vector<std::string>& colours) {
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
            const RunEval* l = nullptr;  // eval.json's result when there is one, else the last logged
            for (const RunEval& e : r.evals)
                if (e.task == task && (!l || e.after_training || !l->after_training)) l = &e;
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
        for (size_t i = 0; i < runs.size(); i++) {
            const RunLog& r = runs[i];
            svg::Series s;
            s.name = r.name, s.color = colours[i];
            for (const RunEval& e : r.evals)
                if (e.task == task && !e.after_training) s.x.push_back((double)e.tokens), s.y.push_back(e.get("acc"));
            most = std::max(most, s.x.size());
            c.series.push_back(s);
        }
        if (most > 1) h += "<div class=\"charts\">\n" + svg::render(c) + "</div>\n";
    }
    return h;
}

// The charts analyze wrote into dir (*.svg, in name order), checked and without their XML declaration.
std::string analyze_charts(const std::string& dir, std::vector<std::string>& warnings, const std::vector<RunLog>& runs,
                           const std::vector<std::string>& colours) {
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
        h += recolour(text.substr(at), runs, colours) + "\n";
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
    std::vector<Summary> sums;
    for (const RunLog& r : runs) sums.push_back(summarize(r));
    const std::vector<Group> groups = make_groups(runs, sums);
    const size_t base = find_baseline(groups, runs, o.baseline);
    std::vector<std::string> colours;  // a run's colour is its group's
    for (const Summary& m : sums) colours.push_back(groups[m.group].colour);
    const std::vector<Quantity> qs = quantities(sums);

    std::string h = "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n"
                    "<meta charset=\"utf-8\"/>\n<title>" + xml_escape(o.title) + "</title>\n<style>\n" + kStyle +
                    "</style>\n</head>\n<body>\n<h1>" + xml_escape(o.title) + "</h1>\n";
    char date[64];
    const time_t now = time(nullptr);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    h += "<p class=\"note\">" + std::to_string(runs.size()) + " run" + (runs.size() == 1 ? "" : "s") + ": ";
    for (size_t i = 0; i < runs.size(); i++) h += (i ? ", " : "") + xml_escape(runs[i].dir);
    h += ". Written by <code>report</code> on " + std::string(date) + ".</p>\n";

    std::string text;
    h += "<h2>Groups</h2>\n" + groups_table(groups, base, qs, runs, sums, text);
    h += "<p class=\"note\">Runs whose records (run.json) differ only in <code>--seed</code> form a group, labelled by "
         "the flags that tell the groups apart. Mean ± sample standard deviation over the group's runs; the difference "
         "to the baseline (" + xml_escape(groups[base].label) + ", <code>--baseline</code>) is paired by seed over the "
         "seeds both groups have: its mean, the 95% interval mean ± t<sub>0.975, n−1</sub> sd / √n of Student's t, and "
         "n. An interval that contains 0 does not tell the two apart at that level. A run without a record is a group "
         "of its own.</p>\n";
    h += "<h2>Runs</h2>\n" + runs_table(runs, sums, groups);
    h += "<h2>Loss</h2>\n<div class=\"charts\">\n";
    bool seeds = false;
    for (const Group& g : groups) seeds |= g.runs.size() > 1;
    if (seeds) {
        h += svg::render(group_chart(runs, groups, "Validation loss, mean over seeds (band: ± 1 std)", &RunStep::val_loss, 1));
        h += svg::render(group_chart(runs, groups, std::string("Training loss, mean over seeds (band: ± 1 std") +
                                                       (o.smooth > 1 ? ", smoothed)" : ")"), &RunStep::train_loss, o.smooth));
    }
    const std::string sm = o.smooth > 1 ? " (mean of the last " + std::to_string(o.smooth) + " steps)" : "";
    h += svg::render(steps_chart(runs, colours, "Training loss" + sm, "tokens", "loss", nullptr, &RunStep::train_loss, true, o.smooth));
    h += svg::render(steps_chart(runs, colours, "Validation loss", "tokens", "loss", nullptr, &RunStep::val_loss, true));
    h += svg::render(steps_chart(runs, colours, "Training loss against wall-clock" + sm, "seconds", "loss",
                                 &RunStep::elapsed_total, &RunStep::train_loss, false, o.smooth));
    h += svg::render(steps_chart(runs, colours, "Validation loss against wall-clock", "seconds", "loss", &RunStep::elapsed_total,
                                 &RunStep::val_loss, false));
    h += "</div>\n<p class=\"note\">One colour per group, the same in every chart (a group's runs share it). Wall-clock "
         "is each log's elapsed_s, added up across resumed invocations. Logs of more than 1,500 steps are drawn as means "
         "of equal buckets of steps. A line that coincides with a later one is drawn wider beneath it.</p>\n";
    h += "<h2>Throughput</h2>\n<div class=\"charts\">\n";
    svg::Chart tps = steps_chart(runs, colours, "Tokens per second", "step", "tokens/s", nullptr, &RunStep::tokens_per_s, false);
    tps.y_zero = true;
    h += svg::render(tps) + "</div>\n";
    std::vector<std::string> hosts;
    for (const RunLog& r : runs)
        if (r.has_record) {
            const std::string host = r.record.latest("host") + " (" + r.record.latest("cores") + " cores, " +
                                     r.record.latest("engine") + ")";
            if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
        }
    std::string host_list;
    for (const std::string& x : hosts) host_list += (host_list.empty() ? "" : "; ") + x;
    h += "<p class=\"note\">Tokens/s and time are what each run measured" +
         (host_list.empty() ? std::string("") : " on " + xml_escape(host_list)) +
         ". On a machine shared with other work (other jobs, builds, a CPU run beside them) they follow that load, not "
         "the model: spikes and dips here are the machine's. Compare throughput only between runs measured alone on the "
         "same hardware; the losses do not depend on it.</p>\n";
    h += "<h2>Schedules</h2>\n" + schedules(runs, colours);
    h += "<h2>Zero-shot evaluations</h2>\n" + evals(runs, colours);

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
        const std::string charts = analyze_charts(d, warnings, runs, colours);
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
    if (!o.json.empty()) {
        const std::string js = report_json(o, runs, sums, groups, base, qs);
        try {
            write_atomically(o.json, {{js.data(), js.size()}});
        } catch (const IoError& e) {
            throw ConfigError(std::string("--json: ") + e.what());
        }
    }
    printf("%s", text.c_str());
    printf("report: wrote %s (%zu runs in %zu groups, baseline %s, %.0f KB)%s\n", o.out.c_str(), runs.size(),
           groups.size(), groups[base].label.c_str(), h.size() / 1024.0, o.json.empty() ? "" : (" and " + o.json).c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    Command cmd{"report", "RUN_DIR... [flags]", "One static HTML page (inline SVG, no script) comparing training runs: "
                "losses, throughput, schedules, zero-shot evals and analyze's charts.", make_flags(o)};
    cmd.missing = "run directory", cmd.min_positional = 1, cmd.max_positional = (size_t)-1;
    return command_main(cmd, argc, argv, "", [&](const Parsed& p) {
        o.runs = p.positional;  // the run directories
        check_output_file(o.out, "-o");
        return run(o);
    });
}
