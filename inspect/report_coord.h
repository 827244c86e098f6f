// inspect/report_coord.h: report's coordinate check (docs/studies.md#the-coordinate-check). When the runs differ in
// the model's width d and logged the per-layer signals (train_prism --layer-stats-every), each signal of every
// layer at one early step against d: under a parameterisation that transfers across widths (muP) the curves are
// flat, under one that does not they drift. An arm is the seed groups that agree on every recorded flag but --d
// (e.g. --param sp and --param mup); a cell is the mean over an arm's runs at one width of the signal at the check's
// step: the last step up to kCoordMaxStep that every run of the check logged. Per arm and signal, the table gives
// each layer's value at every width and the exponent b of a least-squares fit signal ~ d^b over the widths (0:
// flat), and a chart draws log10 of the signal against log2 d, one line per layer. As HTML, text and JSON.
// Does not: read run directories (run/run_log.h) or form the seed groups (inspect/report_groups.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "inspect/report_groups.h"
#include "inspect/svg.h"
#include "util/json.h"

namespace report {

constexpr long kCoordMaxStep = 10;   // a coordinate check looks at the first steps
constexpr size_t kCoordMaxArms = 4;  // drawn; more arms (an lr sweep's) are a study of another question

// The signals the check shows, in this order: the residual stream's RMS after each layer, and the update's size
// relative to the weights (layer_stats.h's out_rms and update_ratio).
inline const std::vector<std::string>& coord_signals() {
    static const std::vector<std::string> s = {"out_rms", "update_ratio"};
    return s;
}

struct CoordArm {
    std::string label;                                   // "param mup" ("all runs" when nothing else differs)
    std::vector<std::vector<size_t>> runs;               // [width]: the arm's runs at that width
    std::vector<std::vector<std::vector<double>>> cell;  // [signal][layer][width]: mean over the runs (NaN: none)
    std::vector<std::vector<double>> slope;              // [signal][layer]: the fitted exponent b (NaN: < 2 widths)
};

struct CoordCheck {
    long step = 0;               // the step whose signals are compared (0: no check)
    std::vector<int> widths;     // every d of the check, ascending
    size_t layers = 0;           // the most layers any run has
    std::vector<CoordArm> arms;  // in the groups' order
    size_t arms_found = 0;       // arms with two widths or more (only the first kCoordMaxArms are kept)
};

// A run's width d: its model's (model.bin, else the model its record builds); 0 when it has neither.
inline int run_width(const RunLog& r) {
    ModelConfig c;
    return built_model(r, c) ? c.d : 0;
}

// The signal `key` of the step `step` of a run, or nullptr when that step did not log it.
inline const std::vector<double>* step_signal(const RunLog& r, long step, const std::string& key) {
    for (const RunStep& st : r.steps)
        if (st.step == step)
            for (const auto& sig : st.layers)
                if (sig.first == key) return &sig.second;
    return nullptr;
}

// The exponent b of the least-squares line log(y) = a + b log(x) over the points with y > 0 (NaN: fewer than 2).
inline double power_fit(const std::vector<int>& x, const std::vector<double>& y) {
    double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (size_t i = 0; i < x.size(); i++) {
        if (!(y[i] > 0) || !std::isfinite(y[i])) continue;
        const double lx = std::log((double)x[i]), ly = std::log(y[i]);
        n++, sx += lx, sy += ly, sxx += lx * lx, sxy += lx * ly;
    }
    const double den = n * sxx - sx * sx;
    return n >= 2 && den > 0 ? (n * sxy - sx * sy) / den : NAN;
}

inline CoordCheck find_coord_check(const std::vector<RunLog>& runs, const std::vector<Group>& groups) {
    CoordCheck c;
    const std::vector<std::string> differ = differing_flags(groups);
    if (std::find(differ.begin(), differ.end(), "--d") == differ.end()) return c;
    // The arms: groups keyed by their values of every differing flag but --d (linear: a map of keys).
    std::map<std::string, size_t> arm_of_key;
    std::vector<std::vector<size_t>> arm_groups;
    std::vector<std::string> labels;
    for (size_t gi = 0; gi < groups.size(); gi++) {
        const Group& g = groups[gi];
        if (g.identity.empty()) continue;
        std::string key, label;
        for (const std::string& f : differ) {
            if (f == "--d") continue;
            key += json::quote(f) + "=" + json::quote(g.value(f)) + "\n";
            label += (label.empty() ? "" : ", ") + label_part(g, f);
        }
        const auto [it, fresh] = arm_of_key.emplace(key, arm_groups.size());
        if (fresh)
            arm_groups.emplace_back(), labels.push_back(label.empty() ? "all runs" : cut_text(label, kShownLabel));
        arm_groups[it->second].push_back(gi);
    }
    // The step: the last one up to kCoordMaxStep that every run of the arms with two widths logged both signals at.
    std::vector<size_t> members;
    std::vector<std::vector<std::pair<int, size_t>>> arm_runs;  // [arm]: (width, run)
    for (size_t a = 0; a < arm_groups.size(); a++) {
        std::vector<std::pair<int, size_t>> wr;
        std::vector<int> ws;
        for (size_t gi : arm_groups[a])
            for (size_t i : groups[gi].runs)
                if (const int w = run_width(runs[i]); w > 0) wr.push_back({w, i}), ws.push_back(w);
        std::sort(ws.begin(), ws.end());
        if (std::unique(ws.begin(), ws.end()) - ws.begin() < 2) continue;
        c.arms_found++;
        if (arm_runs.size() == kCoordMaxArms) continue;
        arm_runs.push_back(wr);
        c.arms.push_back(CoordArm{labels[a], {}, {}, {}});
    }
    for (long s = kCoordMaxStep; s >= 1 && c.step == 0; s--) {
        bool all = !arm_runs.empty();
        for (const auto& wr : arm_runs)
            for (const auto& [w, i] : wr)
                for (const std::string& key : coord_signals()) all = all && step_signal(runs[i], s, key);
        if (all) c.step = s;
    }
    if (c.step == 0) return c;
    for (const auto& wr : arm_runs)
        for (const auto& [w, i] : wr) {
            if (std::find(c.widths.begin(), c.widths.end(), w) == c.widths.end()) c.widths.push_back(w);
            c.layers = std::max(c.layers, step_signal(runs[i], c.step, coord_signals()[0])->size());
        }
    std::sort(c.widths.begin(), c.widths.end());
    for (size_t a = 0; a < c.arms.size(); a++) {
        CoordArm& arm = c.arms[a];
        arm.runs.assign(c.widths.size(), {});
        for (const auto& [w, i] : arm_runs[a])
            arm.runs[std::lower_bound(c.widths.begin(), c.widths.end(), w) - c.widths.begin()].push_back(i);
        for (const std::string& key : coord_signals()) {
            std::vector<std::vector<double>> per_layer(c.layers, std::vector<double>(c.widths.size(), NAN));
            std::vector<double> slopes(c.layers, NAN);
            for (size_t l = 0; l < c.layers; l++) {
                for (size_t wi = 0; wi < c.widths.size(); wi++) {
                    double sum = 0;
                    size_t n = 0;
                    for (size_t i : arm.runs[wi]) {
                        const std::vector<double>& v = *step_signal(runs[i], c.step, key);
                        if (l < v.size() && std::isfinite(v[l])) sum += v[l], n++;
                    }
                    if (n) per_layer[l][wi] = sum / (double)n;
                }
                slopes[l] = power_fit(c.widths, per_layer[l]);
            }
            arm.cell.push_back(per_layer), arm.slope.push_back(slopes);
        }
    }
    return c;
}

// log10 of the signal against log2 d, one line per layer, on one y range for every arm's chart of the signal (so
// that a flat arm looks flat beside a drifting one).
inline svg::Chart coord_chart(const CoordCheck& c, const CoordArm& arm, size_t k) {
    svg::Chart ch;
    double lo = INFINITY, hi = -INFINITY;
    for (const CoordArm& a : c.arms)
        for (const std::vector<double>& layer : a.cell[k])
            for (double v : layer)
                if (v > 0 && std::isfinite(v)) lo = std::min(lo, std::log10(v)), hi = std::max(hi, std::log10(v));
    if (lo < hi) ch.y_lo = lo - 0.05 * (hi - lo), ch.y_hi = hi + 0.05 * (hi - lo);
    ch.title = coord_signals()[k] + " at step " + std::to_string(c.step) + " against width: " + arm.label;
    ch.xlabel = "log2 d", ch.ylabel = "log10 " + coord_signals()[k];
    ch.integer_x = true;
    for (size_t l = 0; l < c.layers; l++) {
        svg::Series s;
        s.name = "layer " + std::to_string(l + 1);
        s.color = svg::color(l), s.dash = svg::dash(l), s.marker = (int)(l % 4);
        for (size_t wi = 0; wi < c.widths.size(); wi++) {
            const double v = arm.cell[k][l][wi];
            s.x.push_back(std::log2((double)c.widths[wi]));
            s.y.push_back(v > 0 ? std::log10(v) : NAN);
        }
        ch.series.push_back(s);
    }
    return ch;
}

inline std::string coord_value(double v) { return std::isfinite(v) ? fmt(v, "%.3e") : "-"; }
inline std::string coord_slope(double b) { return std::isfinite(b) ? fmt(b, "%+.2f") : "-"; }

// The check as report --json's "coord_check" (null when there is none).
inline std::string coord_json(const CoordCheck& c) {
    if (c.step == 0) return "null";
    auto num = [](double v) { return json::number(v, "%.9g"); };
    std::string j = "{\"step\": " + std::to_string(c.step) + ", \"widths\": [";
    for (size_t wi = 0; wi < c.widths.size(); wi++) j += (wi ? ", " : "") + std::to_string(c.widths[wi]);
    j += "], \"arms\": [";
    for (size_t a = 0; a < c.arms.size(); a++) {
        const CoordArm& arm = c.arms[a];
        j += std::string(a ? ", " : "") + "{\"arm\": " + json::quote(arm.label) + ", \"runs\": [";
        for (size_t wi = 0; wi < c.widths.size(); wi++) j += (wi ? ", " : "") + std::to_string(arm.runs[wi].size());
        j += "]";
        for (size_t k = 0; k < coord_signals().size(); k++) {
            j += ", " + json::quote(coord_signals()[k]) + ": {\"layers\": [";
            for (size_t l = 0; l < c.layers; l++) {
                j += std::string(l ? ", " : "") + "[";
                for (size_t wi = 0; wi < c.widths.size(); wi++) j += (wi ? ", " : "") + num(arm.cell[k][l][wi]);
                j += "]";
            }
            j += "], \"exponent\": [";
            for (size_t l = 0; l < c.layers; l++) j += (l ? ", " : "") + num(arm.slope[k][l]);
            j += "]}";
        }
        j += "}";
    }
    return j + "]}";
}

// The check's section of the page ("" when there is none), and its tables as text for stdout.
inline std::string coord_section(const CoordCheck& c, std::string& text) {
    if (c.step == 0) return "";
    const std::string what =
        "each layer's signal at step " + std::to_string(c.step) +
        " against the model's width d, mean over each width's runs (n); exponent: b of a least-squares fit signal ~ "
        "d^b over the widths (0: flat across widths)";
    std::string h =
        "<h2>Coordinate check</h2>\n<p>The runs differ in the width <code>--d</code>: " + xml_escape(what) +
        ". Under a parameterisation whose hyperparameters transfer across widths (muP) the activations' RMS "
        "<code>out_rms</code> stays flat as d grows; under the standard one it grows. "
        "<code>update_ratio</code> is ||ΔW||/||W|| in the Frobenius norm: with Adam it is flat under the "
        "standard parameterisation (init and step size fixed per entry) and falls as d^-1/2 under muP "
        "(step size ∝ 1/fan-in, init ∝ 1/√fan-in).</p>\n";
    if (c.arms_found > c.arms.size())
        h += "<p class=\"warn\">" +
             xml_escape("the runs form " + std::to_string(c.arms_found) + " arms of several widths; the first " +
                        std::to_string(c.arms.size()) + " are shown") +
             ".</p>\n";
    text += "\ncoordinate check: " + what + ":\n";
    for (size_t k = 0; k < coord_signals().size(); k++) {
        const std::string& key = coord_signals()[k];
        h += "<h3><code>" + xml_escape(key) + "</code> at step " + std::to_string(c.step) +
             "</h3>\n<table>\n<tr><th>arm" + "</th><th>layer</th>";
        std::vector<std::vector<std::string>> rows{{"arm", "layer"}};
        for (size_t wi = 0; wi < c.widths.size(); wi++) {
            const std::string t = "d " + std::to_string(c.widths[wi]);
            h += "<th>" + t + "</th>", rows[0].push_back(t);
        }
        h += "<th>exponent</th></tr>\n", rows[0].push_back("exponent");
        for (const CoordArm& arm : c.arms)
            for (size_t l = 0; l < c.layers; l++) {
                std::vector<std::string> row = {arm.label, std::to_string(l + 1)};
                for (size_t wi = 0; wi < c.widths.size(); wi++)
                    row.push_back(coord_value(arm.cell[k][l][wi]) + " (n " + std::to_string(arm.runs[wi].size()) + ")");
                row.push_back(coord_slope(arm.slope[k][l]));
                h += "<tr>";
                for (size_t i = 0; i < row.size(); i++)
                    h += std::string(i == 0 ? "<td class=\"label\">" : "<td>") + xml_escape(row[i]) + "</td>";
                h += "</tr>\n";
                rows.push_back(row);
            }
        h += "</table>\n<div class=\"charts\">\n";
        for (const CoordArm& arm : c.arms) h += svg::render(coord_chart(c, arm, k));
        h += "</div>\n";
        text += key + ":\n" + text_table(rows);
    }
    return h;
}

}  // namespace report
