// report: one static HTML page comparing training runs, readable from disk in any browser (no server, no script).
//
//   ./report runs/uniform runs/prism runs/x -o runs/report.html
//   ./report runs/* --analyze runs/analyze -o report.html --title "tiny: uniform vs Prism vs X"
//
// For each RUN_DIR (a train_prism output directory) it reads log.jsonl, the header of model.bin, the run record
// run.json and eval.json (run/run_log.h), and writes, with inspect/svg.h's charts inline:
//   - seed groups: runs whose records differ only in --seed (and in what a resume may change) form one group,
//     labelled by the flags that tell the groups apart (a dropped sub-block as "no attention in layer 4"). Per
//     group: final and best validation loss, mean +- sample std over its runs; against the baseline group
//     (--baseline NAME: a group's label, numbers compared as numbers, or one of its runs' names; default the group
//     of the uniform model as built, model/layer_columns.h's is_uniform, and of several such (a sweep) the one with the
//     lowest final validation loss: report_groups.h's find_baseline) the paired difference over the seeds both have, with n, its
//     standard error (the seeds' spread, and for a zero-shot metric the eval set's sampling error: per example
//     from RUN/samples.jsonl, else eval.json's standard errors), its 95% t interval where one is estimable (else
//     why not), the smallest effect detectable at 95%/80% and, with --effect/--effect-acc, the seeds needed to
//     detect one (studies/stats.h); the same for every zero-shot metric present (eval.json, else the last
//     in-training eval). Printed on stdout too, and with --json FILE every number as JSON.
//     A run without a record is a group of its own.
//   - a table of the runs: model, schedule, seed, parameters, steps, tokens, final and best losses, median
//     tokens/s, time, status and commit
//   - per group, training and validation loss averaged over its seeds, with a band of +- one std
//   - training and validation loss against tokens and against wall-clock, all runs overlaid; tokens/s per step
//   - each run's schedule, as the Prism paper draws it: heads per layer as a staircase (none where a layer has no
//     attention), and widths per layer (the X); and every per-layer column the runs use (run/plan_views.h),
//     on the page per run and on stdout per group
// Every string a run's files give (task and metric names, record values) is shown cut to a bounded length with its
// size (run/run_log.h's cut_text), and grouping, labels and sweeps are hashed, linear in the records' sizes.
//   - per run that logged them (log.jsonl's "layers"), each layer's gradient norm, update/weight ratio and output
//     RMS over the logged steps as heat maps (inspect/layer_heatmap.h)
//   - the zero-shot evals logged during training ("eval" entries), side by side: the last result of each task
//     per run, and accuracy against tokens when a task ran more than once
//   - when the runs differ in the width --d and logged per-layer signals, the coordinate check
//     (inspect/report_coord.h): each layer's out_rms and update_ratio at an early step against d, per arm (--param);
//     --charts DIR writes its charts and the sweeps' as SVG files
//   - analyze's charts, when present: every *.svg in RUN_DIR/analyze/ and in each --analyze DIR (what
//     `analyze -o DIR` writes), embedded as images (below)
// One colour per group (a run takes its group's colour) and one dash pattern and marker shape per run (its group's
// index plus its place in the group: its seeds told apart, and the first runs of two groups too), the same in every chart, analyze's included (report restyles each chart's
// <g data-series="RUN"> to the run's colour and dash); in the charts of groups (means over seeds) and of sweeps' arms,
// each group or arm has its own colour, dash and marker, so curves that coincide stay told apart. --smooth K draws the training
// loss as the mean of the last K steps. A note says what tokens/s measured on a shared machine mean.
// A log line that is not whole JSON (a torn last line after a crash) is skipped with a warning, on stderr and in
// the page. The page is XHTML-compatible HTML5 (well-formed XML, so it can be checked strictly).
// The paths given may be runs or study directories (a directory whose subdirectories are runs stands for them);
// what is not a run (this report's own earlier page, analyze's output, a stray file, a run named twice) is
// skipped with a note, so `report runs/tiny/* -o runs/tiny/report.html` can be rerun. No output (-o, --json)
// may be one of the files read (the same file by device and inode, under any name).
// No script runs in the page, whoever wrote the run directories (they are shared between people and machines):
// everything report writes itself is escaped text and its own charts; what it did not write, analyze's SVG
// files, goes in as <img src="data:image/svg+xml;base64,...">, and an SVG loaded as an image never runs script
// nor loads anything. A Content-Security-Policy in the page forbids script outright, so a case missed here
// still cannot run. A chart file that is a link, not a regular file, over 16 MiB, not well-formed XML or not an
// <svg> document is named in a warning and not shown.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <new>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "model/layer_columns.h"
#include "run/cli.h"
#include "util/io.h"
#include "run/plan_views.h"
#include "util/fs.h"
#include "run/run_log.h"
#include "model/spec.h"
#include "inspect/report_groups.h"
#include "inspect/report_coord.h"
#include "inspect/report_sweep.h"
#include "inspect/layer_heatmap.h"
#include "inspect/svg.h"
#include "inspect/xml_check.h"
#include "run/run_record.h"
#include "run/step_dirs.h"
#include "studies/stats.h"

namespace {

struct Options {
    std::vector<std::string> runs, analyze;
    std::string out = "report.html", title = "Prism training report", baseline, json, charts;
    int smooth = 0;
    bool overwrite = false;  // replace an -o or --json file that report did not write
    report::Effects effect;  // --effect, --effect-acc
};

std::vector<Flag> make_flags(Options& o) {
    Flag analyze = make_flag(
        "--analyze", "DIR",
        "also show the charts analyze -o DIR wrote (repeatable; RUN_DIR/analyze/ "
        "is always looked in)",
        [&o](const std::string& v) {
            if (v.empty()) throw ConfigError("--analyze needs a path, not an empty string");
            o.analyze.push_back(v);
        },
        FlagKind::Path);
    return {
        path_flag("-o, --out", "FILE", "the HTML file to write (default {default})", o.out),
        analyze,
        text_flag("--title", "TEXT", "the page's title", o.title),
        text_flag("--baseline", "NAME",
                  "the group differences are taken against: a group's label (numbers as numbers: lr 3e-3 is "
                  "lr 0.003) or a run's name (default: the group of the uniform model; of several, the one with "
                  "the lowest final validation loss)",
                  o.baseline),
        path_flag("--json", "FILE", "also write every number the page shows as JSON", o.json),
        path_flag("--charts", "DIR",
                  "also write the coordinate check's and the sweeps' charts as SVG files into DIR (coord_SIGNAL_N.svg, "
                  "sweep_FLAG_N.svg)",
                  o.charts),
        number_flag("--effect", "NATS",
                    "also print, per comparison of validation losses, the seeds needed to detect a difference of "
                    "NATS (0.014: the Prism paper's at 124M; default none)",
                    o.effect.nats, 0, 100),
        number_flag("--effect-acc", "FRACTION",
                    "the same for zero-shot accuracies, in their unit, a fraction of the examples (0.02: 2 points; "
                    "default none)",
                    o.effect.acc, 0, 1),
        number_flag("--smooth", "K", "draw the training loss as the mean of the last K steps (default 1: as logged)",
                    o.smooth, 1, 1000000),
        switch_flag("--overwrite", "replace an -o or --json file that is not an earlier report's (its page or JSON)",
                    o.overwrite),
    };
}

using namespace report;
using svg::xml_escape;

// The runs' table. Its figures are those at the step of each run's weights (Summary::final_step), the validation
// loss with the step it was measured at where that is earlier; the status cell names what the run lacks.
std::string runs_table(const std::vector<RunLog>& runs, const std::vector<Summary>& sums,
                       const std::vector<Group>& groups, const std::vector<RunStyle>& styles, const TimeUnit& time) {
    std::string h =
        "<div class=\"wide\"><table>\n<tr><th>run</th><th>group</th><th>model (its layers: Schedules)</th>"
        "<th>seed</th><th>lr</th><th>step (weights)</th><th>tokens</th><th>train loss</th><th>val loss (last)</th>"
        "<th>val loss (best)</th><th>tokens/s (median)</th><th>time (" +
        std::string(time.name) + ")</th><th>status</th><th>commit</th></tr>\n";
    for (size_t i = 0; i < runs.size(); i++) {
        const RunLog& r = runs[i];
        const Summary& m = sums[i];
        svg::Series look;  // the run's line as the charts draw it
        styles[i].apply(look);
        auto td = [](const std::string& t) { return "<td>" + xml_escape(t) + "</td>"; };
        h += "<tr><td>" + svg::swatch(look) + " " + xml_escape(r.name) + "</td><td class=\"label\">" +
             xml_escape(groups[m.group].label) + "</td>";
        if (r.has_model)
            h += td("d " + std::to_string(r.cfg.d) + ", L " + std::to_string(r.cfg.L()) + ", T " +
                    std::to_string(r.cfg.T) + ", " + norm_name(r.cfg.norm) + ", " +
                    human((double)account(r.cfg).params) + " params");
        else h += "<td>no model.bin</td>";
        const RunStep& last = r.steps[m.final_at];
        std::string step = std::to_string(m.final_step), val = fmt(m.last_val, "%.4f");
        if (m.log_step > m.final_step) step += " (log to " + std::to_string(m.log_step) + ")";
        if (m.val_step && m.val_step != m.final_step) val += " at step " + std::to_string(m.val_step);
        h += td(m.seed.empty() ? "-" : m.seed) + td(r.has_record ? cut_text(r.record.arg("--lr")) : "-") + td(step) +
             td(human((double)last.tokens)) + td(fmt(m.last_train, "%.4f")) +
             (m.val_step != m.final_step ? "<td class=\"warn\">" + xml_escape(val) + "</td>" : td(val)) +
             td(fmt(m.best_val, "%.4f")) + td(fmt(m.median_tps, "%.0f")) + td(duration(last.elapsed_total, time));
        std::string status = r.has_record ? cut_text(r.record.status()) : "no record";
        if (m.skipped) status += ", " + std::to_string(m.skipped) + " steps skipped";
        for (const std::string& x : m.missing) status += "; " + x;
        h += td(status) + td(r.has_record ? cut_text(r.record.latest("commit")).substr(0, 8) : "-") + "</tr>\n";
    }
    return h + "</table></div>\n";
}

// A run's per-layer table as JSON, as the run record and --plan --json have it (null without a model.bin).
std::string layers_json(const RunLog& r) {
    if (!r.has_model) return "null";
    std::string s = "[";
    for (int l = 0; l < r.cfg.L(); l++) s += std::string(l ? ", " : "") + "{" + layer_json_members(r.cfg, l) + "}";
    return s + "]";
}

// Every number of the groups table and the runs table, as JSON.
std::string report_json(const Options& o, const std::vector<RunLog>& runs, const std::vector<Summary>& sums,
                        const std::vector<Group>& groups, size_t base, const std::string& base_why,
                        const std::vector<Quantity>& qs, const std::vector<Sweep>& sweeps, const CoordCheck& coord) {
    auto num = [](double v) { return json::number(v, "%.9g"); };
    std::string s = "{\"title\": " + json::quote(o.title) + ", \"baseline\": " + json::quote(groups[base].label) +
                    ", \"baseline_chosen\": " + json::quote(base_why) + ",\n \"groups\": [";
    for (size_t gi = 0; gi < groups.size(); gi++) {
        const Group& g = groups[gi];
        s += std::string(gi ? ",\n  " : "\n  ") + "{\"label\": " + json::quote(g.label) +
             ", \"colour\": " + json::quote(g.colour) + ", \"runs\": [";
        for (size_t k = 0; k < g.runs.size(); k++) s += (k ? ", " : "") + json::quote(runs[g.runs[k]].name);
        s += "], \"seeds\": [";
        for (size_t k = 0; k < g.runs.size(); k++) s += (k ? ", " : "") + json::quote(sums[g.runs[k]].seed);
        s += "], \"quantities\": {";
        for (size_t qi = 0; qi < qs.size(); qi++) {
            const GroupStat st = group_stat(g, groups[base], gi == base, qs[qi], runs, sums);
            s += std::string(qi ? ", " : "") + json::quote(qs[qi].name) + ": {\"n\": " + std::to_string(st.n) +
                 ", \"mean\": " + num(st.mean) + ", \"std\": " + num(st.sd);
            if (gi != base) {
                const stats::Comparison& d = st.diff;
                s += ", \"vs_baseline\": {\"n\": " + std::to_string(d.n) + ", \"mean\": " + num(d.mean) +
                     ", \"std\": " + num(d.sd) + ", \"se\": " + num(d.se) + ", \"df\": " + num(d.df) +
                     ", \"t975\": " + num(d.t975) + ", \"lo\": " + num(d.lo) + ", \"hi\": " + num(d.hi) +
                     ", \"no_interval\": " + (d.why.empty() ? "null" : json::quote(d.why)) +
                     ", \"method\": " + json::quote(d.method) + ", \"A\": " + num(d.spread.A) +
                     ", \"B\": " + num(d.spread.B) + ", \"examples\": " + std::to_string(d.examples) +
                     ", \"detectable\": " + num(d.detectable) +
                     ", \"detectable_rough\": " + (d.n == 2 ? "true" : "false");
                if (o.effect.of(qs[qi]) > 0) {
                    const long n = stats::seeds_needed(d.spread, o.effect.of(qs[qi]));
                    s += ", \"effect\": " + num(o.effect.of(qs[qi])) + ", \"seeds_needed\": " +
                         (n == stats::kNotEstimable  ? "null"
                          : n == stats::kUnreachable ? "\"none suffice\""
                          : n > stats::kMaxSeeds     ? "\"over " + std::to_string(stats::kMaxSeeds) + "\""
                                                     : std::to_string(n));
                }
                s += "}";
            }
            s += "}";
        }
        s += "}}";
    }
    s += "\n ],\n \"sweeps\": " + sweeps_json(sweeps) + ",\n \"coord_check\": " + coord_json(coord) + ",\n \"runs\": [";
    for (size_t i = 0; i < runs.size(); i++) {
        const RunLog& r = runs[i];
        const Summary& m = sums[i];
        const RunStep& last = r.steps[m.final_at];
        std::string missing;
        for (const std::string& x : m.missing) missing += (missing.empty() ? "" : ", ") + json::quote(x);
        s += std::string(i ? ",\n  " : "\n  ") + "{\"name\": " + json::quote(r.name) +
             ", \"dir\": " + json::quote(r.dir) + ", \"group\": " + json::quote(groups[m.group].label) +
             ", \"seed\": " + json::quote(m.seed) + ", \"steps\": " + std::to_string(m.final_step) +
             ", \"val_step\": " + std::to_string(m.val_step) + ", \"log_steps\": " + std::to_string(m.log_step) +
             ", \"missing\": [" + missing + "]" + ", \"tokens\": " + std::to_string(last.tokens) +
             ", \"params\": " + (r.has_model ? std::to_string(account(r.cfg).params) : std::string("null")) +
             ", \"widths\": " + (r.has_model ? json::quote(rle_list(layer_widths(r.cfg))) : std::string("null")) +
             ", \"heads\": " + (r.has_model ? json::quote(rle_list(layer_heads(r.cfg))) : std::string("null")) +
             ", \"layers\": " + layers_json(r) + ", \"final_train_loss\": " + num(m.last_train) +
             ", \"final_val_loss\": " + num(m.last_val) + ", \"best_val_loss\": " + num(m.best_val) +
             ", \"median_tokens_per_s\": " + num(m.median_tps) + ", \"time_s\": " + num(last.elapsed_total) +
             ", \"skipped_steps\": " + std::to_string(m.skipped) + ", \"metrics\": {";
        for (size_t k = 0; k < m.metrics.size(); k++)
            s += (k ? ", " : "") + json::quote(m.metrics[k].first) + ": " + num(m.metrics[k].second);
        s += "}";
        if (r.has_record)
            s += ", \"record\": {\"status\": " + json::quote(cut_text(r.record.status())) +
                 ", \"commit\": " + json::quote(cut_text(r.record.latest("commit"))) +
                 ", \"host\": " + json::quote(cut_text(r.record.latest("host"))) +
                 ", \"engine\": " + json::quote(cut_text(r.record.latest("engine"))) +
                 ", \"lr\": " + json::quote(cut_text(r.record.arg("--lr"))) +
                 ", \"total_batch\": " + json::quote(cut_text(r.record.arg("--total-batch"))) + "}";
        s += "}";
    }
    return s + "\n ]}\n";
}

// analyze's charts name each series by its run (<g data-series="RUN" color="...">): give it the run's colour.
// Its dash too, where the <g> has none (its lines inherit it), so that seeds are told apart there as well.
std::string recolour(std::string svg_text, const std::vector<RunLog>& runs, const std::vector<RunStyle>& styles) {
    for (size_t i = 0; i < runs.size(); i++) {
        const std::string key = "<g data-series=\"" + xml_escape(runs[i].name) + "\" color=\"";
        const std::string dash = svg::dash(styles[i].place);
        for (size_t at = svg_text.find(key); at != std::string::npos; at = svg_text.find(key, at + 1)) {
            const size_t v = at + key.size(), end = svg_text.find('"', v), close = svg_text.find('>', v);
            if (end == std::string::npos || end - v != 7 || close == std::string::npos) continue;
            svg_text.replace(v, 7, styles[i].colour);
            if (!dash.empty() &&
                svg_text.substr(end + 1, close - end - 1).find("stroke-dasharray") == std::string::npos)
                svg_text.insert(end + 1, " stroke-dasharray=\"" + dash + "\"");
        }
    }
    return svg_text;
}

// The models' per-layer columns that report shows (run/plan_views.h's shown_columns: every column some model uses).
std::vector<const LayerColumn*> runs_columns(const std::vector<RunLog>& runs) {
    std::vector<const ModelConfig*> models;
    for (const RunLog& r : runs)
        if (r.has_model) models.push_back(&r.cfg);
    return shown_columns(models);
}

// A model's per-layer table (run/plan_views.h's layer_table) as rows: "layer" and the layers' numbers, then one row
// per column, its heading first.
std::vector<std::vector<std::string>> layer_rows(const ModelConfig& c, const std::vector<const LayerColumn*>& cols) {
    std::vector<std::vector<std::string>> rows = {{"layer"}};
    for (int l = 0; l < c.L(); l++) rows[0].push_back(std::to_string(l + 1));
    for (const LayerTableColumn& col : layer_table(c, cols)) {
        rows.push_back({col.heading});
        rows.back().insert(rows.back().end(), col.cells.begin(), col.cells.end());
    }
    return rows;
}

// A per-layer table's heading as the page words it ("kv" is "KV heads"); the text tables keep --plan's short ones.
std::string page_heading(const std::string& h) {
    static const std::map<std::string, std::string> words = {{"width", "width w_l"},
                                                             {"heads", "heads h_l"},
                                                             {"kv", "KV heads"},
                                                             {"hidden", "SwiGLU hidden"},
                                                             {"window", "attention window"}};
    auto it = words.find(h);
    return it == words.end() ? h : it->second;
}

// The charts of heads and widths per layer (a layer without attention has no heads: a gap in its staircase), and
// one table per distinct model (the seeds of a group share theirs) of every per-layer column the runs use, with
// each layer's parameters and forward FLOPs per token.
std::string schedules(const std::vector<RunLog>& runs, const std::vector<RunStyle>& styles) {
    svg::Chart heads, widths;
    heads.title = "Heads per layer (staircase)", heads.xlabel = "layer", heads.ylabel = "heads h_l";
    widths.title = "Width per layer", widths.xlabel = "layer", widths.ylabel = "width w_l";
    heads.integer_x = widths.integer_x = true, heads.y_zero = widths.y_zero = true;
    for (size_t i = 0; i < runs.size(); i++) {
        const RunLog& r = runs[i];
        svg::Series hs, ws;
        hs.name = ws.name = r.name, hs.step = true;
        styles[i].apply(hs), styles[i].apply(ws);
        for (int l = 0; r.has_model && l < r.cfg.L(); l++) {
            hs.x.push_back(l + 1), hs.y.push_back(r.cfg.layers[l].attention ? r.cfg.layers[l].heads : NAN);
            ws.x.push_back(l + 1), ws.y.push_back(r.cfg.layers[l].width);
        }
        heads.series.push_back(hs), widths.series.push_back(ws);
    }
    const std::vector<const LayerColumn*> cols = runs_columns(runs);
    std::vector<std::vector<std::vector<std::string>>> tables;  // per distinct model: its rows
    std::vector<std::string> names;                             // per distinct model: its runs
    std::unordered_map<std::string, size_t> index;
    for (const RunLog& r : runs) {
        if (!r.has_model) continue;
        std::vector<std::vector<std::string>> rows = layer_rows(r.cfg, cols);
        const auto [at, fresh] = index.emplace(text_table(rows), tables.size());
        if (!fresh) {
            names[at->second] += ", " + r.name;
            continue;
        }
        rows.push_back({"parameters"}), rows.push_back({"forward FLOPs/token"});
        for (const LayerCost& x : account(r.cfg).layers)
            rows[rows.size() - 2].push_back(human((double)x.params)), rows.back().push_back(human(x.flops_per_token));
        tables.push_back(rows), names.push_back(r.name);
    }
    std::string table;
    for (size_t k = 0; k < tables.size(); k++) {
        const auto& rows = tables[k];
        table += "<h3>" + xml_escape(cut_text(names[k], kShownLabel)) + "</h3>\n<div class=\"wide\"><table>\n";
        for (size_t j = 0; j < rows.size(); j++) {
            table += "<tr>" + std::string(j ? "<td>" : "<th>") + xml_escape(j ? page_heading(rows[j][0]) : "layer") +
                     (j ? "</td>" : "</th>");
            for (size_t l = 1; l < rows[j].size(); l++)
                table += (j ? "<td>" : "<th>") + xml_escape(rows[j][l]) + (j ? "</td>" : "</th>");
            table += "</tr>\n";
        }
        table += "</table></div>\n";
    }
    return "<div class=\"charts\">\n" + svg::render(heads) + svg::render(widths) + "</div>\n" + table +
           "<p class=\"note\">One table per distinct model, headed by the runs that have it: every per-layer column "
           "some run's model uses (model.bin's layer table); \"-\" where the layer has no sub-block for it (no "
           "attention: no heads, KV heads, window or RoPE; no MLP: no SwiGLU hidden size). Forward FLOPs/token: "
           "the layer's forward pass per token at context T, 2 per weight of its matrices (less those a missing "
           "sub-block leaves unused) plus 4 w_l per key a query attends to (T, or its window).</p>\n";
}

// The per-layer tables for stdout: one per model (a group's first run with a model; groups of the same model, as
// in an lr sweep, share one table and say how many), every column the runs use.
std::string layer_tables_text(const std::vector<RunLog>& runs, const std::vector<Group>& groups) {
    const std::vector<const LayerColumn*> cols = runs_columns(runs);
    std::vector<std::string> tables, heads;
    std::vector<size_t> more;                       // per table: the other groups of the same model
    std::unordered_map<std::string, size_t> index;  // table -> its place
    for (const Group& g : groups)
        for (size_t i : g.runs)
            if (runs[i].has_model) {
                const std::string t = text_table(layer_rows(runs[i].cfg, cols));
                const auto [at, fresh] = index.emplace(t, tables.size());
                if (!fresh) {
                    more[at->second]++;
                } else {
                    tables.push_back(t), heads.push_back("layers of " + g.label + " (" + runs[i].name),
                        more.push_back(0);
                }
                break;
            }
    std::string out;
    for (size_t k = 0; k < tables.size(); k++)
        out += heads[k] +
               (more[k] ? "; the same model in " + std::to_string(more[k]) + " other group" + (more[k] > 1 ? "s" : "")
                        : std::string()) +
               "):\n" + tables[k];
    return out.empty() ? out : out + "\n";
}

std::string evals(const std::vector<RunLog>& runs, const std::vector<RunStyle>& styles) {
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
        auto acc = [](const RunEval& e, const char* k, const char* se) {  // fractions, as in the groups' table
            const double v = e.get(k), s = e.get(se);
            return std::isfinite(v) ? accuracy(v) + (std::isfinite(s) ? " ± " + accuracy(s) : "") : "-";
        };
        row("acc ± stderr", [&](const RunEval& e) { return acc(e, "acc", "acc_stderr"); });
        row("acc_norm ± stderr", [&](const RunEval& e) { return acc(e, "acc_norm", "acc_norm_stderr"); });
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
            s.name = r.name;
            styles[i].apply(s);
            for (const RunEval& e : r.evals)
                if (e.task == task && !e.after_training) s.x.push_back((double)e.tokens), s.y.push_back(e.get("acc"));
            most = std::max(most, s.x.size());
            c.series.push_back(s);
        }
        if (most > 1) h += "<div class=\"charts\">\n" + svg::render(c) + "</div>\n";
    }
    return h;
}

// A file by identity (device and inode): the same file under any name, through any link.
struct FileId {
    dev_t dev = 0;
    ino_t ino = 0;
    std::string path;
    bool same(const FileId& o) const { return dev == o.dev && ino == o.ino; }
};
bool file_id(const std::string& path, FileId& id) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return false;
    id = {st.st_dev, st.st_ino, path};
    return true;
}

std::string base64(const std::string& in) {
    static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((in.size() + 2) / 3 * 4);
    for (size_t i = 0; i < in.size(); i += 3) {
        const size_t n = std::min<size_t>(3, in.size() - i);
        uint32_t v = 0;
        for (size_t k = 0; k < 3; k++) v = v << 8 | (k < n ? (unsigned char)in[i + k] : 0);
        for (size_t k = 0; k < 4; k++) out += k <= n ? a[v >> (18 - 6 * k) & 63] : '=';
    }
    return out;
}

const size_t kMaxChart = (size_t)16 << 20;        // analyze's charts are tens of KB
const size_t kMaxChartsTotal = (size_t)64 << 20;  // all of them in one page

// An analyze chart's text, or false and why not. Only a regular file is read, not a link (analyze writes none;
// a link planted in a shared directory would pull any file of the reader's into the page) and not a FIFO or a
// device (never waited on); at most kMaxChart bytes. Its identity joins `inputs`.
bool read_chart(const std::string& path, std::string& text, std::string& why, std::vector<ReadPath>& inputs) {
    const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        why = errno == ELOOP ? std::string("is a symbolic link (analyze writes none)")
                             : std::string("cannot be read: ") + strerror(errno);
        return false;
    }
    struct stat st;
    bool ok = fstat(fd, &st) == 0;
    if (ok) inputs.push_back({path, "the chart"});  // shown or not, no output may replace it
    if (!ok) why = std::string("cannot be read: ") + strerror(errno);
    else if (!S_ISREG(st.st_mode))
        ok = false, why = std::string("is ") + file_kind(st.st_mode) + ", not a regular file";
    else if ((size_t)st.st_size > kMaxChart)
        ok = false, why = "is " + std::to_string((long long)st.st_size) + " bytes, more than the " +
                          std::to_string(kMaxChart >> 20) + " MiB a chart may have";
    if (ok) {
        text.resize((size_t)st.st_size);
        size_t got = 0;
        for (ssize_t k; got < text.size() && (k = read(fd, &text[got], text.size() - got)) > 0;) got += (size_t)k;
        if (got != text.size()) ok = false, why = "changed size while it was read";
    }
    close(fd);
    return ok;
}

// The charts analyze wrote into dir (*.svg, in name order), each an <img> of its file (recoloured): a browser
// runs no script in an image. `budget`: the bytes of charts the page may still take.
std::string analyze_charts(const std::string& dir, std::vector<std::string>& warnings, const std::vector<RunLog>& runs,
                           const std::vector<RunStyle>& styles, std::vector<ReadPath>& inputs, size_t& budget) {
    std::vector<std::string> names;
    for (const std::string& n : list_dir(dir))
        if (n.size() > 4 && n.compare(n.size() - 4, 4, ".svg") == 0) names.push_back(n);
    std::sort(names.begin(), names.end());
    std::string h;
    size_t unshown = 0;
    const size_t kNamed = 10;  // warnings per directory; a directory of a million bad files is one more line
    for (const std::string& n : names) {
        const std::string path = dir + "/" + n;
        std::string text, why;
        XmlRoot root;
        if (read_chart(path, text, why, inputs)) {
            const std::string err = xml_error(text, &root);
            const std::string* ns = root.attr("xmlns");
            if (!err.empty()) why = "is not well-formed XML (" + err + ")";
            else if (root.name != "svg") why = "is not an SVG (its root element is <" + root.name + ">, not <svg>)";
            else if (!ns || *ns != "http://www.w3.org/2000/svg")
                why = "is not an SVG (its <svg> has no xmlns=\"http://www.w3.org/2000/svg\")";
            else if (text.size() > budget)
                why = "would take the page past " + std::to_string(kMaxChartsTotal >> 20) + " MiB of charts";
        }
        if (!why.empty()) {
            if (++unshown <= kNamed) {
                warnings.push_back(path + " " + why + ": not shown; rewrite it with analyze -o " + dir +
                                   ", or remove it");
                fprintf(stderr, "report: warning: %s\n", printable(warnings.back()).c_str());
            }
            continue;
        }
        budget -= text.size();
        h += "<img alt=\"" + xml_escape(n) + "\" src=\"data:image/svg+xml;base64," +
             base64(recolour(text, runs, styles)) + "\"/>\n";
    }
    if (unshown > kNamed) {
        warnings.push_back(dir + ": " + std::to_string(unshown - kNamed) + " more files not shown, as above");
        fprintf(stderr, "report: warning: %s\n", printable(warnings.back()).c_str());
    }
    return h.empty() ? "" : "<div class=\"charts\">\n" + h + "</div>\n";
}

// Out of memory while reading a run: name its files and their sizes (the log is read whole), not only "out of
// memory".
std::string oom_reading(const std::string& dir) {
    std::string sizes;
    for (const char* f : {"log.jsonl", "run.json", "eval.json"}) {
        struct stat st;
        if (stat((dir + "/" + f).c_str(), &st) == 0)
            sizes +=
                (sizes.empty() ? "" : ", ") + std::string(f) + " " + std::to_string((long long)st.st_size) + " bytes";
    }
    return "out of memory reading the run " + printable(dir) + " (" + sizes +
           ": each is read whole); leave it out "
           "of the report, or check that its files are the ones train_prism wrote";
}

struct Skipped {
    std::string path, why;  // "P: why" is a sentence
    bool advised = false;   // why says what to do already
};

void print_skipped(const std::vector<Skipped>& skipped) {
    const size_t kNotes = 20;  // a study of ten thousand stray folders is not ten thousand lines
    for (size_t i = 0; i < std::min(kNotes, skipped.size()); i++)
        fprintf(stderr, "report: note: %s: %s; skipped\n", printable(skipped[i].path).c_str(),
                printable(skipped[i].why).c_str());
    if (skipped.size() > kNotes)
        fprintf(stderr, "report: note: %zu more paths that are not runs skipped\n", skipped.size() - kNotes);
}

// The runs among the paths given (RUN_DIR...), in order. A directory holding log.jsonl is a run; a directory
// without one whose subdirectories include runs is a study and stands for them (in name order). Skipped, each
// with a note: this report's own outputs, what is not a directory (a stray file, an earlier report.html), a
// directory that is not a run (analyze's output), a run whose log cannot be read or holds no step, and a run
// already named. Errors: a path that does not exist, and no run at all. Each run's files join `inputs`.
std::vector<RunLog> read_runs(const Options& o, std::vector<std::string>& warnings, std::vector<Skipped>& skipped,
                              std::vector<ReadPath>& inputs) {
    std::vector<FileId> outputs, seen;
    for (const std::string& f : {o.out, o.json}) {
        FileId id;
        if (!f.empty() && file_id(f, id)) outputs.push_back(id);
    }
    auto skip = [&](const std::string& path, const std::string& why, bool advised = false) {
        skipped.push_back({path, why, advised});
    };
    auto has_log = [](const std::string& d) {
        struct stat st;
        return lstat((d + "/log.jsonl").c_str(), &st) == 0;
    };
    std::vector<RunLog> runs;
    auto add_run = [&](const std::string& d) {
        FileId id;
        if (!file_id(d, id)) return skip(d, std::string("cannot be read: ") + strerror(errno));
        for (const FileId& s : seen)
            if (s.same(id)) return skip(d, "it is the run " + s.path + " again");
        seen.push_back(id);
        try {
            runs.push_back(read_run(
                d, [](const std::string& w) { fprintf(stderr, "report: warning: %s\n", printable(w).c_str()); }));
        } catch (const std::bad_alloc&) {
            throw ConfigError(oom_reading(d));
        } catch (const std::runtime_error& e) {  // RunLogError, or an IoError from a file beside the log
            return skip(d, e.what(), true);
        }
        for (const std::string& w : runs.back().warnings) warnings.push_back(w);
        for (const ReadPath& r : run_files(d)) inputs.push_back(r);  // its model, log, record, checkpoints...
        for (const char* f : {"eval.json", "samples.jsonl"})
            inputs.push_back({d + "/" + f, std::string("the run's ") + f});
    };
    for (const std::string& p : o.runs) {
        struct stat st;
        if (p.empty()) throw ConfigError("an empty run directory path; pass train_prism output directories (-o OUT)");
        if (lstat(p.c_str(), &st) != 0)
            throw ConfigError(printable(p) +
                              " does not exist; pass train_prism output directories (-o OUT) or a study "
                              "directory");
        FileId id;
        if (!file_id(p, id)) {
            skip(p, std::string("it is a link that leads nowhere (") + strerror(errno) + ")");
            continue;
        }
        if (std::any_of(outputs.begin(), outputs.end(), [&](const FileId& x) { return x.same(id); })) {
            skip(p, "it is this report's own output (-o or --json)");
            continue;
        }
        if (!is_dir(p)) {
            stat(p.c_str(), &st);
            skip(p, std::string("it is ") + file_kind(st.st_mode) + ", not a run directory");
            continue;
        }
        if (has_log(p)) {
            add_run(p);
            continue;
        }
        std::vector<std::string> subs, charts;
        for (const std::string& n : list_dir(p)) {
            if (is_dir(p + "/" + n)) subs.push_back(n);
            else if (n.size() > 4 && n.compare(n.size() - 4, 4, ".svg") == 0) charts.push_back(n);
        }
        std::sort(subs.begin(), subs.end());
        if (std::none_of(subs.begin(), subs.end(), [&](const std::string& n) { return has_log(p + "/" + n); })) {
            if (charts.empty()) skip(p, "it holds no log.jsonl, so it is not a run");
            else skip(p, "it holds charts, not a run (pass --analyze " + p + " to show them)", true);
            continue;
        }
        for (const std::string& n : subs) {  // a study: its runs
            const std::string d = (p.back() == '/' ? p : p + "/") + n;
            if (has_log(d)) add_run(d);
            else skip(d, "it is not a run of the study " + p + " (no log.jsonl)");
        }
    }
    if (runs.empty()) {
        const std::string hint = "; pass train_prism output directories (-o OUT) or a study directory";
        const Skipped& s = skipped.at(0);
        if (skipped.size() == 1) throw ConfigError(printable(s.path + ": " + s.why) + (s.advised ? "" : hint));
        throw ConfigError("no run to report among " + std::to_string(skipped.size()) + " paths (the first, " +
                          printable(s.path + ": " + s.why) + ")" + hint);
    }
    return runs;
}

// The page's Content-Security-Policy: no script, no plugin, no frame, nothing fetched; only its own <style>
// and style attributes, and images from data: URLs (analyze's charts). It must come first in <head>.
const char* kPolicy =
    "default-src 'none'; script-src 'none'; object-src 'none'; img-src data:; "
    "style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'";

const char* kStyle =
    "body { font-family: DejaVu Sans, Helvetica, Arial, sans-serif; margin: 24px; color: #222222; }\n"
    "h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #cccccc; }\n"
    "h3 { font-size: 15px; }\n"
    "table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }\n"
    "th, td { border: 1px solid #dddddd; padding: 3px 6px; text-align: right; }\n"
    "th { background: #f3f3f3; } td:first-child, th:first-child, td.label { text-align: left; }\n"
    "td.label { min-width: 12em; max-width: 22em; }\n"
    "td:first-child { white-space: nowrap; } td svg { vertical-align: middle; }\n"
    ".charts svg, .charts img { margin: 0 12px 12px 0; vertical-align: top; }\n"
    ".note { color: #666666; font-size: 13px; max-width: 1100px; } .warn { color: #a33; }\n"
    ".wide { max-width: 100%; overflow-x: auto; }\n";

// An existing output file report may replace without --overwrite: an empty one, or its own earlier page or JSON
// (recognised by how they begin), never another tool's file (analyze -o DIR's DIR/analyze.json).
void check_replaceable(const std::string& path, const std::string& flag, const std::string& begins, bool overwrite) {
    struct stat st;
    if (overwrite || stat(path.c_str(), &st) != 0 || st.st_size == 0) return;
    std::string head;
    try {
        head = read_text(path, begins.size() + 1, begins.size() + 1);  // + 1: read_text drops trailing spaces
    } catch (const std::runtime_error&) {
    }
    if (head.compare(0, begins.size(), begins) != 0)
        throw ConfigError(flag + " " + printable(path) +
                          " exists and is not a report's; write to another file, or pass --overwrite to replace it");
}

const char* kPageStart = "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n";

// Before any run is read: -o and --json are two files.
void check_outputs(const Options& o) {
    if (o.json.empty()) return;
    check_output_file(o.json, "--json");
    if (same_file(o.out, o.json))
        throw ConfigError("--json " + printable(o.json) + " is the page's own file (-o)" +
                          (o.json == o.out ? "" : ", " + printable(o.out) + " by another name") +
                          "; write the JSON to another file");
}

// Each run's summary (report_groups.h's summarize); its warnings, and what each run lacks, to stderr and the page.
std::vector<Summary> summaries(const std::vector<RunLog>& runs, std::vector<std::string>& warnings) {
    std::vector<Summary> sums;
    for (const RunLog& r : runs) {
        sums.push_back(summarize(r));
        std::vector<std::string> ws = sums.back().warnings;
        for (const std::string& x : sums.back().missing) ws.push_back(r.dir + ": " + x);
        if (sums.back().log_step > sums.back().final_step)
            ws.push_back(r.dir + ": its log goes on to step " + std::to_string(sums.back().log_step) +
                         " past its weights' step " + std::to_string(sums.back().final_step) +
                         " (a checkpoint lost); its figures are the weights' step's");
        for (const std::string& w : ws) {
            fprintf(stderr, "report: warning: %s\n", printable(w).c_str());
            warnings.push_back(w);
        }
    }
    return sums;
}

// A run's colour is its group's; its dash and marker its group's index + its place in the group.
std::vector<RunStyle> run_styles(const std::vector<RunLog>& runs, const std::vector<Group>& groups,
                                 const std::vector<Summary>& sums) {
    std::vector<RunStyle> styles;
    for (size_t i = 0; i < runs.size(); i++) {
        const Group& g = groups[sums[i].group];
        styles.push_back(
            {g.colour, sums[i].group + (size_t)(std::find(g.runs.begin(), g.runs.end(), i) - g.runs.begin())});
    }
    return styles;
}

// The page's head, title and the line naming its runs and what was skipped.
std::string page_start(const Options& o, const std::vector<RunLog>& runs, const std::vector<Skipped>& skipped) {
    std::string h = kPageStart +
                    std::string(
                        "<meta charset=\"utf-8\"/>\n<meta http-equiv=\"Content-Security-Policy\" "
                        "content=\"") +
                    kPolicy + "\"/>\n<title>" + xml_escape(o.title) + "</title>\n<style>\n" + kStyle +
                    "</style>\n</head>\n<body>\n<h1>" + xml_escape(o.title) + "</h1>\n";
    char date[64];
    const time_t now = time(nullptr);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    h += "<p class=\"note\">" + std::to_string(runs.size()) + " run" + (runs.size() == 1 ? "" : "s") + ": ";
    for (size_t i = 0; i < runs.size(); i++) h += (i ? ", " : "") + xml_escape(runs[i].dir);
    if (!skipped.empty()) {
        h += ". Skipped (not runs, or named twice): ";
        for (size_t i = 0; i < skipped.size(); i++) h += (i ? ", " : "") + xml_escape(skipped[i].path);
    }
    return h + ". Written by <code>report</code> on " + date + ".</p>\n";
}

// The groups' section: the runs split by kind (report_groups.h's split_notes), on the page and in `text`, then the
// groups' tables; `text` gets what stdout prints of them.
std::string groups_section(const std::vector<RunLog>& runs, const std::vector<Summary>& sums,
                           const std::vector<Group>& groups, size_t base, const std::string& base_why,
                           const std::vector<Quantity>& qs, const Effects& effect, std::string& text) {
    std::string h = "<h2>Groups</h2>\n", notes;
    for (const std::string& n : split_notes(groups, runs)) {
        h += "<p class=\"warn\">Not seeds of one group: " + xml_escape(n) + ".</p>\n";
        notes += "note: " + n + "\n";
    }
    for (size_t i = 0; i < runs.size(); i++)
        if (sums[i].val_step != sums[i].final_step)
            notes += "note: " + runs[i].name + ": its last validation loss is from step " +
                     std::to_string(sums[i].val_step) + ", its weights are at step " +
                     std::to_string(sums[i].final_step) + "\n";
    h += groups_table(groups, base, qs, runs, sums, effect, text);
    text = "baseline: " + groups[base].label + " (" + base_why + ")\n" + notes + "\n" + text;
    return h +
           "<p class=\"note\">Runs whose records (run.json) differ only in <code>--seed</code> form a group, "
           "labelled by the flags that tell the groups apart; runs that also differ in the step of their weights, "
           "their status, a branch of their lr schedule or their data are groups apart, labelled by it. A run "
           "without a record is a group of its own. A run's final figures are those of its weights' step. Mean ± "
           "sample standard deviation over the group's runs. − baseline: the difference to the baseline (" +
           xml_escape(groups[base].label) + ": " + xml_escape(base_why) +
           "), paired by seed over the seeds both groups have (n), and for a zero-shot metric by example too where "
           "both runs of every seed have <code>samples.jsonl</code>; its variance is V(n) = A/n + B, A what more "
           "seeds average out, B what they share (the eval examples' sampling error), each table's note says how "
           "they were estimated. SE = √V(n); the 95% interval is mean ± t<sub>0.975, df</sub> SE of Student's t, "
           "shown only from 3 seeds and a spread over seeds that is not zero (else the cell says why). An interval "
           "that contains 0 does not tell the two apart at that level. Detectable at 95%/80%: the smallest true "
           "difference a two-sided 95% test on these seeds detects with 80% power, (t<sub>0.975, df</sub> + "
           "t<sub>0.80, df</sub>) SE, from the observed spread; from 2 seeds (df 1) it rests on one difference's "
           "spread and is rough (marked ≈). With <code>--effect NATS</code> (validation losses) or <code>--effect-acc "
           "FRACTION</code> (accuracies), the seeds (runs per group) whose V(n) brings it down to that effect.</p>\n";
}

// The loss and throughput charts, with their notes.
std::string loss_sections(const Options& o, const std::vector<RunLog>& runs, const std::vector<Group>& groups,
                          const std::vector<RunStyle>& styles, const TimeUnit& time) {
    std::string h = "<h2>Loss</h2>\n<div class=\"charts\">\n";
    if (std::any_of(groups.begin(), groups.end(), [](const Group& g) { return g.runs.size() > 1; })) {
        h += svg::render(
            group_chart(runs, groups, "Validation loss, mean over seeds (band: ± 1 std)", &RunStep::val_loss, 1));
        h += svg::render(group_chart(
            runs, groups,
            std::string("Training loss, mean over seeds (band: ± 1 std") + (o.smooth > 1 ? ", smoothed)" : ")"),
            &RunStep::train_loss, o.smooth));
    }
    const std::string sm = o.smooth > 1 ? " (mean of the last " + std::to_string(o.smooth) + " steps)" : "";
    h += svg::render(steps_chart(runs, styles, "Training loss" + sm, "tokens", "loss", nullptr, &RunStep::train_loss,
                                 true, o.smooth));
    h += svg::render(steps_chart(runs, styles, "Validation loss", "tokens", "loss", nullptr, &RunStep::val_loss, true));
    h += svg::render(steps_chart(runs, styles, "Training loss against wall-clock" + sm, time.axis, "loss",
                                 &RunStep::elapsed_total, &RunStep::train_loss, false, o.smooth, time.seconds));
    h += svg::render(steps_chart(runs, styles, "Validation loss against wall-clock", time.axis, "loss",
                                 &RunStep::elapsed_total, &RunStep::val_loss, false, 1, time.seconds));
    h += "</div>\n<p class=\"note\">One colour per group, the same in every chart; a group's runs (its seeds) share "
         "it and are told apart by their dash pattern and marker shape, as the legends show; each group starts at "
         "its own dash and marker, so groups whose lines coincide stay visible too. Wall-clock is each log's "
         "elapsed_s, added up across resumed invocations. Logs of more than 1,500 steps are drawn as means of equal "
         "buckets of steps. A line that coincides with a later one is drawn wider beneath it. One unit per quantity "
         "on the page: times in " +
         std::string(time.axis) + ", accuracies as fractions (0 to 1).</p>\n";
    h += "<h2>Throughput</h2>\n<div class=\"charts\">\n";
    svg::Chart tps =
        steps_chart(runs, styles, "Tokens per second", "step", "tokens/s", nullptr, &RunStep::tokens_per_s, false);
    tps.y_zero = true;
    h += svg::render(tps) + "</div>\n";
    std::string hosts;
    for (const RunLog& r : runs)
        if (r.has_record) {
            const std::string host = cut_text(r.record.latest("host")) + " (" + cut_text(r.record.latest("cores")) +
                                     " cores, " + cut_text(r.record.latest("engine")) + ")";
            if (("; " + hosts + "; ").find("; " + host + "; ") == std::string::npos)
                hosts += (hosts.empty() ? "" : "; ") + host;
        }
    return h + "<p class=\"note\">Tokens/s and time are what each run measured" +
           (hosts.empty() ? std::string("") : " on " + xml_escape(hosts)) +
           ". On a machine shared with other work (other jobs, builds, a CPU run beside them) they follow that load, "
           "not the model: spikes and dips here are the machine's. Compare throughput only between runs measured "
           "alone on the same hardware; the losses do not depend on it.</p>\n";
}

// The per-layer signals (train_prism --layer-stats-every): per signal of log.jsonl's "layers" (every key any run
// logged, layer_heatmap.h's signal_info order: the size-normalised gradient first; at most kMaxSignals), a heading,
// what a dark row means for it, and one heat map per run that logged it, side by side, all on one colour scale (the
// range of every run's drawn cells): rows labelled with the layer's number, width, heads and what it has.
std::string layer_sections(const std::vector<RunLog>& runs, std::vector<std::string>& warnings) {
    constexpr size_t kMaxSignals = 16;
    std::vector<std::string> keys;  // every signal, in first-logged order, then sorted by signal_info
    std::unordered_set<std::string> seen;
    for (const RunLog& r : runs)
        for (const RunStep& st : r.steps)
            for (const auto& sig : st.layers)
                if (seen.insert(sig.first).second) keys.push_back(sig.first);
    std::stable_sort(keys.begin(), keys.end(), [](const std::string& a, const std::string& b) {
        return svg::signal_info(a).order < svg::signal_info(b).order;
    });
    if (keys.size() > kMaxSignals) {
        warnings.push_back("the logs hold " + std::to_string(keys.size()) + " per-layer signals; the first " +
                           std::to_string(kMaxSignals) + " are drawn");
        fprintf(stderr, "report: warning: %s\n", warnings.back().c_str());
        keys.resize(kMaxSignals);
    }
    std::string h;
    for (const std::string& key : keys) {
        const svg::SignalInfo info = svg::signal_info(key);
        std::vector<svg::HeatMap> maps;
        svg::HeatScale scale;
        for (const RunLog& r : runs) {
            svg::HeatMap m;
            m.title = cut_text(r.name, kShownLabel), m.signal = key;
            size_t L = r.has_model ? (size_t)r.cfg.L() : 0;
            for (const RunStep& st : r.steps)
                for (const auto& sig : st.layers)
                    if (sig.first == key) {
                        m.steps.push_back(st.step), m.values.push_back(sig.second);
                        if (!r.has_model) L = std::max(L, sig.second.size());
                    }
            if (m.steps.empty()) continue;
            m.L = (int)L;
            if (r.has_model)
                for (int l = 0; l < r.cfg.L(); l++) {
                    m.labels.push_back(svg::layer_label(r.cfg, l)), m.rows.push_back(svg::layer_row_text(r.cfg, l));
                    m.absent.push_back(has_part(info.part, r.cfg, l)      ? ""
                                       : info.part == SubBlock::attention ? "no attention"
                                                                          : "no MLP");
                }
            scale.add(m);
            maps.push_back(std::move(m));
        }
        if (maps.empty()) continue;
        std::string legend = info.legend;
        if (key == "grad_norm" && !seen.count("grad_rms"))
            legend += " These logs have no grad_rms: a train_prism from before it wrote them.";
        h += "<h3>" + xml_escape(cut_text(info.title)) + " <code>" + xml_escape(cut_text(key)) +
             "</code></h3>\n<p class=\"note\">" + xml_escape(legend) + "</p>\n<div class=\"charts\">\n";
        for (const svg::HeatMap& m : maps) h += svg::heat_map(m, scale) + "\n";
        h += "</div>\n";
    }
    if (h.empty()) return "";
    return "<h2>Per-layer training signals</h2>\n<p class=\"note\">Per signal, one heat map per run: layers down "
           "(each row: the layer's number from 1, its width w, its heads and what it has, attention and MLP, with "
           "what departs from the uniform layer; hover a row's label for its row of the per-layer table), the steps "
           "that logged them across (train_prism --layer-stats-every), hover a cell for its value. Colour: the "
           "value on a log scale, one scale for every run's map of a signal, so rows and runs compare by colour "
           "(dark blue: low, yellow: high); grey: zero or not finite; white: the layer has no such sub-block. What "
           "a dark row means differs by signal, as each says: a raw norm is dark for a small layer, a "
           "size-normalised one (an RMS or a ratio) only for a layer that gets or does less.</p>\n" +
           h;
}

// analyze's charts: RUN_DIR/analyze/ of every run and each --analyze DIR, each directory once however named.
std::string analyze_section(const Options& o, const std::vector<RunLog>& runs, const std::vector<RunStyle>& styles,
                            std::vector<ReadPath>& inputs, std::vector<std::string>& warnings) {
    std::vector<std::string> dirs;
    std::vector<FileId> dir_ids;
    auto add_dir = [&](const std::string& d) {
        FileId id;
        if (!file_id(d, id) || std::any_of(dir_ids.begin(), dir_ids.end(), [&](const FileId& x) { return x.same(id); }))
            return;
        dir_ids.push_back(id), dirs.push_back(d);
    };
    for (const RunLog& r : runs)
        if (is_dir(r.dir + "/analyze")) add_dir(r.dir + "/analyze");
    for (const std::string& d : o.analyze) {
        if (!is_dir(d))
            throw ConfigError("--analyze " + printable(d) + " is not a directory; pass what analyze -o DIR wrote");
        add_dir(d);
    }
    std::string h = "<h2>Inside the models (analyze)</h2>\n";
    if (dirs.empty())
        h += "<p>No analyze charts: run <code>analyze RUN_DIR... -o RUN_DIR/analyze</code> (or <code>-o DIR</code> and "
             "pass <code>--analyze DIR</code> here).</p>\n";
    size_t budget = kMaxChartsTotal;
    for (const std::string& d : dirs) {
        const std::string charts = analyze_charts(d, warnings, runs, styles, inputs, budget);
        h += "<h3>" + xml_escape(d) + "</h3>\n" + (charts.empty() ? "<p>No charts in it.</p>\n" : charts);
    }
    return h;
}

// --charts DIR: the coordinate check's charts (per signal, per arm) and the sweeps' (per flag, per --param), each a
// file of its own, numbered in the page's order; none may be a file report read.
void write_charts(const Options& o, const CoordCheck& coord, const std::vector<Sweep>& sweeps,
                  const std::vector<ReadPath>& inputs) {
    if (o.charts.empty()) return;
    std::vector<std::pair<std::string, std::string>> files;  // name, SVG element
    for (size_t k = 0; coord.step && k < coord_signals().size(); k++)
        for (size_t a = 0; a < coord.arms.size(); a++)
            files.push_back({"coord_" + coord_signals()[k] + "_" + std::to_string(a + 1) + ".svg",
                             svg::render(coord_chart(coord, coord.arms[a], k))});
    for (const Sweep& s : sweeps) {
        std::vector<std::string> facets;
        for (const std::string& f : s.facet)
            if (std::find(facets.begin(), facets.end(), f) == facets.end()) facets.push_back(f);
        if (facets.empty()) facets.push_back("");
        for (size_t i = 0; i < facets.size(); i++)
            files.push_back({"sweep_" + flag_label(s.flag) + "_" + std::to_string(i + 1) + ".svg",
                             svg::render(sweep_chart(s, facets[i]))});
    }
    try {
        make_dirs(o.charts);
        for (const auto& [name, element] : files) {
            const std::string path = o.charts + "/" + name, doc = svg::document(element);
            check_output_path(path, "--charts", inputs);
            write_atomically(path, {{doc.data(), doc.size()}});
        }
    } catch (const IoError& e) {
        throw ConfigError(std::string("--charts: ") + e.what());
    }
    printf("report: wrote %zu charts into %s\n", files.size(), o.charts.c_str());
}

// The page (checked well-formed: everything in it is report's own or escaped, so a page that is not is report's
// bug) and the JSON, each written atomically once no input can be among the outputs.
void write_outputs(const Options& o, const std::string& page, const std::string& js,
                   const std::vector<ReadPath>& inputs) {
    const std::string err = xml_error(page);
    if (!err.empty()) throw std::logic_error("the report is not well-formed XML: " + err);
    check_output_path(o.out, "-o", inputs);
    check_output_path(o.json, "--json", inputs);
    check_replaceable(o.out, "-o", kPageStart, o.overwrite);  // neither is another tool's file
    if (!o.json.empty()) check_replaceable(o.json, "--json", "{\"title\": ", o.overwrite);
    try {
        write_atomically(o.out, {{page.data(), page.size()}});
    } catch (const IoError& e) {
        throw ConfigError(e.what());
    }
    if (o.json.empty()) return;
    try {
        write_atomically(o.json, {{js.data(), js.size()}});
    } catch (const IoError& e) {
        throw ConfigError(std::string("--json: ") + e.what());
    }
}

int run(const Options& o) {
    // (-o was checked by main before any work: util/io.h's check_output_file refuses a FIFO or a device there.)
    check_outputs(o);
    std::vector<std::string> warnings;
    std::vector<Skipped> skipped;
    std::vector<ReadPath> inputs;
    const std::vector<RunLog> runs = read_runs(o, warnings, skipped, inputs);
    check_output_path(o.out, "-o", inputs);  // the runs' files now (util/fs.h), analyze's charts once read
    check_output_path(o.json, "--json", inputs);
    print_skipped(skipped);
    std::vector<Summary> sums = summaries(runs, warnings);
    const std::vector<Group> groups = make_groups(runs, sums);
    std::string base_why, text;  // how the baseline was chosen; what stdout prints
    const size_t base = find_baseline(groups, runs, sums, o.baseline, base_why);
    const std::vector<RunStyle> styles = run_styles(runs, groups, sums);
    const std::vector<Quantity> qs = quantities(sums);
    std::string h =
        page_start(o, runs, skipped) + groups_section(runs, sums, groups, base, base_why, qs, o.effect, text);
    const std::vector<Sweep> sweeps = find_sweeps(groups, base, sums);  // "each arm at its best FLAG"
    h += sweep_sections(sweeps, groups, runs, sums, qs[0], o.effect, text);
    const CoordCheck coord = find_coord_check(runs, groups);  // each layer's signals against the width d
    h += coord_section(coord, text);
    double longest = 0;  // the page's one unit of time (report_groups.h's time_unit): the longest run's
    for (const RunLog& r : runs)
        for (const RunStep& st : r.steps)
            if (std::isfinite(st.elapsed_total)) longest = std::max(longest, st.elapsed_total);
    const TimeUnit time = time_unit(longest);
    h +=
        "<h2>Runs</h2>\n" + runs_table(runs, sums, groups, styles, time) + loss_sections(o, runs, groups, styles, time);
    h += "<h2>Schedules</h2>\n" + schedules(runs, styles) + layer_sections(runs, warnings);
    text += layer_tables_text(runs, groups);
    h += "<h2>Zero-shot evaluations</h2>\n" + evals(runs, styles) + analyze_section(o, runs, styles, inputs, warnings);
    if (!warnings.empty()) {
        h += "<h2>Warnings</h2>\n<ul>\n";
        for (const std::string& w : warnings) h += "<li class=\"warn\">" + xml_escape(w) + "</li>\n";
        h += "</ul>\n";
    }
    h += "</body>\n</html>\n";
    write_outputs(o, h, o.json.empty() ? "" : report_json(o, runs, sums, groups, base, base_why, qs, sweeps, coord),
                  inputs);
    printf("%s", text.c_str());
    write_charts(o, coord, sweeps, inputs);
    printf("report: wrote %s (%zu runs in %zu groups, baseline %s, %.0f KB)%s\n", o.out.c_str(), runs.size(),
           groups.size(), groups[base].label.c_str(), h.size() / 1024.0,
           o.json.empty() ? "" : (" and " + o.json).c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    Command cmd{"report", "RUN_DIR... [flags]",
                "One static HTML page (inline SVG, no script) comparing training runs: "
                "losses, throughput, schedules, zero-shot evals and analyze's charts.",
                make_flags(o)};
    cmd.missing = "run directory", cmd.min_positional = 1, cmd.max_positional = (size_t)-1;
    return command_main(cmd, argc, argv, "", [&](const Parsed& p) {
        o.runs = p.positional;  // the run directories
        check_output_file(o.out, "-o");
        return run(o);
    });
}
