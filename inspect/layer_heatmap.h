// inspect/layer_heatmap.h: report's picture of how each layer trains: a heat map per run and per signal of
// log.jsonl's "layers" (layer_stats.h: gradient norm and RMS, per sub-block too, update/weight ratio, output RMS; a
// key this file does not know is drawn as well, under its own name), layers down (layer 1 on top, each row labelled
// with its number, width, heads and what it has: layer_label), the steps that logged them across, colour on a log10
// scale (a colour bar of its decades beside it). The scale is the caller's: report gives every run's map of one
// signal the same one (heat_scale over all of them), so two arms' rows compare by colour. What a dark row means
// depends on the signal (signal_info: a raw norm grows with a layer's size, an RMS does not), and the page says it.
// In svg.h's manner: one standalone <svg class="layer-heatmap" data-signal=... data-layers=L data-steps=n
// data-lo=... data-hi=...> (the scale's log10 ends), each cell a <rect> with data-layer (1-based), data-step and
// data-value and a <title> tooltip, no scripts.
// More than kHeatMaxColumns logged steps are thinned to that many, evenly, the last kept (the caption says so).
// A value that is 0, negative or missing (null) is a grey cell: no colour on a log scale; a row whose layer lacks
// the sub-block a signal measures (grad_rms_attn in a layer without attention) is white and says so.
// Does not: read files (run/run_log.h does).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "inspect/svg.h"
#include "model/layer_columns.h"
#include "model_config.h"
#include "run/plan_views.h"

namespace svg {

constexpr size_t kHeatMaxColumns = 200;

// Characters of UTF-8 text (its bytes that do not continue a character), for widths.
inline size_t utf8_chars(const std::string& s) {
    return (size_t)std::count_if(s.begin(), s.end(), [](char ch) { return ((unsigned char)ch & 0xC0) != 0x80; });
}

// Viridis at five stops, interpolated: dark blue (low) to yellow (high), readable in grey and by most colour-blind.
inline std::string heat_colour(double f) {
    static const double stops[5][3] = {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
    f = std::min(1.0, std::max(0.0, f)) * 4;
    const int i = std::min(3, (int)f);
    const double t = f - i;
    char b[8];
    snprintf(b, sizeof b, "#%02x%02x%02x", (int)std::lround(stops[i][0] + t * (stops[i + 1][0] - stops[i][0])),
             (int)std::lround(stops[i][1] + t * (stops[i + 1][1] - stops[i][1])),
             (int)std::lround(stops[i][2] + t * (stops[i + 1][2] - stops[i][2])));
    return b;
}

// What report says of a per-layer signal: its heading, and what a dark (low) row means for it. A signal that is
// not size-normalised (the raw gradient norm) never calls a dark row starving.
struct SignalInfo {
    std::string key, title, legend;
    SubBlock part = SubBlock::layer;  // the sub-block it measures: a layer without it has no value
    int order = 1000;                 // the page's order: the size-normalised gradient first, unknown keys last
};

inline SignalInfo signal_info(const std::string& key) {
    static const SignalInfo known[] = {
        {"grad_rms", "Gradient RMS per parameter (size-normalised)",
         "The layer's gradient norm (all its parameters, before clipping) over the square root of its parameter "
         "count. It does not grow with a layer's size, so rows compare across widths: a row darker than the others "
         "is a layer whose parameters each get less gradient (a starving layer); a bright row, one that may blow up.",
         SubBlock::layer, 0},
        {"grad_rms_attn", "Gradient RMS per parameter, attention sub-block",
         "The gradient RMS over the attention sub-block's tensors alone (its norm, wqkv, wo; a gdn layer's mixer "
         "tensors too): a dark row is a layer "
         "whose attention gets little gradient per parameter. White: the layer has no attention.",
         SubBlock::attention, 1},
        {"grad_rms_mlp", "Gradient RMS per parameter, MLP sub-block",
         "The gradient RMS over the MLP sub-block's tensors alone (its norm, wfc, wproj): a dark row is a layer whose "
         "MLP gets little gradient per parameter. White: the layer has no MLP.",
         SubBlock::mlp, 2},
        {"grad_norm", "Gradient norm per layer (raw, not size-normalised)",
         "The L2 norm of the layer's gradient over all its parameters, before clipping. It grows with the square "
         "root of the layer's parameter count, so a narrow layer's row is dark because the layer is small, not "
         "because it learns less: compare layers of unlike widths by the gradient RMS, not by this.",
         SubBlock::layer, 3},
        {"update_ratio", "Update / weight ratio per layer",
         "||ΔW|| / ||W|| over the layer's matrices for the step's AdamW update: how far the weights move relative "
         "to their size (a ratio, so size-normalised). A dark row is a layer whose weights barely change, a bright "
         "one a layer that moves fast; AdamW moves every element by about the learning rate, so the ratio mostly "
         "follows the scale of the layer's weights.",
         SubBlock::layer, 4},
        {"out_rms", "Output RMS per layer",
         "The RMS per element of the residual stream's slice [0, w_l) after the layer (what it writes plus what it "
         "passed on; per element, so size-normalised). A dark row is a layer whose stream is small; a bright row, "
         "or a column brightening towards the end, growing activations.",
         SubBlock::layer, 5},
    };
    for (const SignalInfo& s : known)
        if (s.key == key) return s;
    SignalInfo s{key, key + " per layer",
                 "log.jsonl's per-layer \"" + key +
                     "\", as logged (a signal this report "
                     "does not describe).",
                 SubBlock::layer, 1000};
    const auto ends = [&](const char* tail) {
        const std::string t = tail;
        return key.size() > t.size() && key.compare(key.size() - t.size(), t.size(), t) == 0;
    };
    if (ends("_attn")) s.part = SubBlock::attention;
    if (ends("_mlp")) s.part = SubBlock::mlp;
    return s;
}

// Layer l's row label after its number, from the per-layer table (model/layer_columns.h): its width, its heads
// (none without attention) and what it has: "attn+MLP", "MLP only", "attn only", with what departs from the uniform
// layer in brackets after the sub-block it belongs to: "w128, 4 heads, attn (window 64, no RoPE)+MLP",
// "w32, MLP only".
inline std::string layer_label(const ModelConfig& c, int l) {
    std::string attn, mlp, s;
    const LayerSpec& x = c.layers[l];
    for (const LayerColumn& col : layer_columns()) {
        if (col.part == SubBlock::layer || col.always_shown || !has_part(col.part, c, l) || !departs(col, c, l))
            continue;
        const std::string v =
            col.is_switch ? std::string(col.label) : std::string(col.heading) + " " + layer_cell(col, c, l);
        std::string& to = col.part == SubBlock::mlp ? mlp : attn;
        to += (to.empty() ? "" : ", ") + v;
    }
    s += "w" + std::to_string(x.width);
    if (x.attention) s += ", " + std::to_string(x.heads) + (x.heads == 1 ? " head" : " heads");
    auto part = [](const char* name, const std::string& what, const char* only) {
        return name + std::string(only) + (what.empty() ? "" : " (" + what + ")");
    };
    s += ", " + (x.attention && x.mlp ? part("attn", attn, "") + "+" + part("MLP", mlp, "")
                 : x.attention        ? part("attn", attn, " only")
                                      : part("MLP", mlp, " only"));
    return s;
}

// Layer l's row in the per-layer table, for a tooltip: "layer 5: width 32, heads -, ..., MLP yes".
inline std::string layer_row_text(const ModelConfig& c, int l) {
    std::string s = "layer " + std::to_string(l + 1) + ":";
    const std::vector<const ModelConfig*> one = {&c};
    const std::vector<LayerTableColumn> t = layer_table(c, shown_columns(one));
    for (size_t k = 0; k < t.size(); k++) s += std::string(k ? ", " : " ") + t[k].heading + " " + t[k].cells[l];
    return s;
}

// The steps of n logged ones that a map draws: every one, or kHeatMaxColumns of them evenly (the first and last).
inline std::vector<size_t> heat_columns(size_t n) {
    std::vector<size_t> cols;
    for (size_t k = 0; k < std::min(n, kHeatMaxColumns); k++)
        cols.push_back(n <= kHeatMaxColumns ? k : (size_t)std::llround((double)k * (n - 1) / (kHeatMaxColumns - 1)));
    return cols;
}

// One run's map of one signal.
struct HeatMap {
    std::string title, signal;
    std::vector<long> steps;
    std::vector<std::vector<double>> values;  // values[k][l]: layer l's at steps[k] (a shorter row: missing layers)
    int L = 0;
    std::vector<std::string> labels;  // a row's label after its number (layer_label), or none
    std::vector<std::string> rows;    // a row's tooltip (layer_row_text), or empty
    std::vector<std::string> absent;  // per row: "" or why it has no value ("no attention")
};

// A colour scale: log10 of the values at its ends.
struct HeatScale {
    double lo = INFINITY, hi = -INFINITY;
    void add(const HeatMap& m) {
        for (size_t k : heat_columns(m.steps.size()))
            for (int l = 0; l < m.L && l < (int)m.values[k].size(); l++) {
                const double v = m.values[k][l];
                if (v > 0 && std::isfinite(v)) lo = std::min(lo, std::log10(v)), hi = std::max(hi, std::log10(v));
            }
    }
    HeatScale finished() const {  // no positive value: [0, 1] (every cell grey); one value: a decade around it
        HeatScale s = *this;
        if (!(s.lo <= s.hi)) s.lo = 0, s.hi = 1;
        if (s.hi - s.lo < 1e-3) s.lo -= 0.5, s.hi += 0.5;
        return s;
    }
};

inline std::string heat_map(const HeatMap& m, HeatScale scale) {
    scale = scale.finished();
    const double lo = scale.lo, hi = scale.hi;
    const int L = m.L;
    const std::vector<size_t> cols = heat_columns(m.steps.size());
    const size_t n = m.steps.size();
    auto value = [&](size_t k, int l) { return l < (int)m.values[k].size() ? m.values[k][l] : NAN; };
    auto label = [&](int l) { return l < (int)m.labels.size() ? m.labels[l] : std::string(); };
    auto row_name = [&](int l) {  // in tooltips
        return "layer " + std::to_string(l + 1) + (label(l).empty() ? "" : " (" + label(l) + ")");
    };
    auto absent = [&](int l) { return l < (int)m.absent.size() ? m.absent[l] : std::string(); };
    // The rows' labels: the number right-aligned at nx, the label from lx (11 px: about 6.2 px a character).
    size_t longest = 0;
    for (int l = 0; l < L; l++) longest = std::max(longest, utf8_chars(label(l)));
    const double nx = 8 + 7.0 * std::to_string(std::max(1, L)).size(), lx = nx + 6;
    const double cw = std::max(1.6, std::min(24.0, 320.0 / std::max<size_t>(1, cols.size())));  // two maps a row
    const double ch = std::max(6.0, std::min(20.0, 260.0 / std::max(1, L)));
    const double x0 = std::max(64.0, lx + 6.2 * longest + 10), y0 = 30, mw = cw * cols.size(), mh = ch * L;
    // wide enough for the title too (bold 12 px DejaVu Sans: under 7.5 px a character), however few the steps
    const double W = std::max(x0 + mw + 80, x0 + 7.5 * utf8_chars(m.title) + 8), H = y0 + mh + 52;
    std::string o = "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"layer-heatmap\" data-signal=\"" +
                    xml_escape(m.signal) + "\" data-layers=\"" + std::to_string(L) + "\" data-steps=\"" +
                    std::to_string(cols.size()) + "\" data-lo=\"" + std::to_string(lo) + "\" data-hi=\"" +
                    std::to_string(hi) + "\" width=\"" + num(W) + "\" height=\"" + num(H) + "\" viewBox=\"0 0 " +
                    num(W) + " " + num(H) + "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" " +
                    "font-size=\"12\">\n";
    o += "<text x=\"" + num(x0) + "\" y=\"18\" font-weight=\"bold\">" + xml_escape(m.title) + "</text>\n";
    for (size_t c = 0; c < cols.size(); c++) {
        const size_t k = cols[c];
        for (int l = 0; l < L; l++) {
            const double v = value(k, l);
            const bool shown = v > 0 && std::isfinite(v), none = std::isnan(v) && !absent(l).empty();
            char val[32];
            snprintf(val, sizeof val, "%.4g", v);
            const std::string what = none ? absent(l) : std::isnan(v) ? std::string("none") : std::string(val);
            o += "<rect x=\"" + num(x0 + c * cw) + "\" y=\"" + num(y0 + l * ch) + "\" width=\"" + num(cw) +
                 "\" height=\"" + num(ch) + "\" fill=\"" +
                 (shown  ? heat_colour((std::log10(v) - lo) / (hi - lo))
                  : none ? std::string("#ffffff")
                         : std::string("#cccccc")) +
                 "\" data-layer=\"" + std::to_string(l + 1) + "\" data-step=\"" + std::to_string(m.steps[k]) +
                 "\" data-value=\"" + (std::isnan(v) ? std::string("null") : std::string(val)) + "\"><title>" +
                 xml_escape(row_name(l)) + ", step " + std::to_string(m.steps[k]) + ": " + xml_escape(what) +
                 "</title></rect>\n";
        }
    }
    // A row whose layer lacks the signal's sub-block: framed and named across the map.
    for (int l = 0; l < L; l++)
        if (!absent(l).empty() && !cols.empty()) {
            o += "<rect x=\"" + num(x0) + "\" y=\"" + num(y0 + l * ch) + "\" width=\"" + num(mw) + "\" height=\"" +
                 num(ch) + "\" fill=\"none\" stroke=\"#bbbbbb\"/>\n";
            if (ch >= 10)
                o += "<text x=\"" + num(x0 + mw / 2) + "\" y=\"" + num(y0 + (l + 0.5) * ch + 4) +
                     "\" text-anchor=\"middle\" font-size=\"11\" fill=\"#777777\">" + xml_escape(absent(l)) +
                     "</text>\n";
        }
    // Row labels at the left (every one when they fit, else about one per 14 px), each with the layer's row of the
    // per-layer table as its tooltip; steps below (first, middle, last).
    const int every = std::max(1, (int)std::ceil(L / std::max(1.0, mh / 14.0)));
    for (int l = 0; l < L; l += every) {
        const std::string y = num(y0 + (l + 0.5) * ch + 4);
        const std::string tip = l < (int)m.rows.size() ? "<title>" + xml_escape(m.rows[l]) + "</title>" : "";
        o += "<text class=\"row\" x=\"" + num(nx) + "\" y=\"" + y + "\" text-anchor=\"end\" font-weight=\"bold\">" +
             tip + std::to_string(l + 1) + "</text>\n";
        if (!label(l).empty())
            o += "<text class=\"row\" x=\"" + num(lx) + "\" y=\"" + y + "\" font-size=\"11\">" + tip +
                 xml_escape(label(l)) + "</text>\n";
    }
    o += "<text x=\"2\" y=\"" + num(y0 - 6) + "\" font-size=\"11\" fill=\"#777777\">layer</text>\n";
    if (!cols.empty()) {
        const size_t marks[3] = {0, cols.size() / 2, cols.size() - 1};
        for (int mk = 0; mk < 3; mk++) {
            if (mk == 1 && (marks[1] == 0 || marks[1] == marks[2])) continue;
            const char* anchor = mk == 0 ? "start" : mk == 2 ? "end" : "middle";
            const double x = x0 + (mk == 0 ? marks[mk] * cw : mk == 2 ? (marks[mk] + 1) * cw : (marks[mk] + 0.5) * cw);
            o += "<text x=\"" + num(x) + "\" y=\"" + num(y0 + mh + 16) + "\" text-anchor=\"" + anchor + "\">" +
                 std::to_string(m.steps[cols[marks[mk]]]) + "</text>\n";
        }
    }
    o += "<text x=\"" + num(x0 + mw / 2) + "\" y=\"" + num(y0 + mh + 34) + "\" text-anchor=\"middle\">step" +
         (cols.size() < n ? " (" + std::to_string(cols.size()) + " of " + std::to_string(n) + " logged)" : "") +
         "</text>\n";
    // The colour bar: bottom lo, top hi, a tick at each whole decade (or at both ends when none falls inside).
    const double bx = x0 + mw + 14, bw = 12;
    const int strips = 32;
    for (int s = 0; s < strips; s++)
        o += "<rect x=\"" + num(bx) + "\" y=\"" + num(y0 + mh * (strips - 1 - s) / strips) + "\" width=\"" + num(bw) +
             "\" height=\"" + num(mh / strips + 0.5) + "\" fill=\"" + heat_colour((s + 0.5) / strips) + "\"/>\n";
    std::vector<double> decades;
    for (double d = std::ceil(lo); d <= hi; d += std::max(1.0, std::ceil((hi - lo) / 6))) decades.push_back(d);
    if (decades.empty()) decades = {lo, hi};
    for (double d : decades) {
        char b[32];
        snprintf(b, sizeof b, "%.2g", std::pow(10.0, d));
        o += "<text class=\"tick\" x=\"" + num(bx + bw + 4) + "\" y=\"" + num(y0 + mh * (hi - d) / (hi - lo) + 4) +
             "\">" + b + "</text>\n";
    }
    return o + "</svg>";
}

// A map on its own scale (its cells' range), rows numbered: values[k][l] is layer l's at steps[k].
inline std::string heat_map(const std::string& title, const std::string& signal, const std::vector<long>& steps,
                            const std::vector<std::vector<double>>& values, int L) {
    HeatMap m;
    m.title = title, m.signal = signal, m.steps = steps, m.values = values, m.L = L;
    HeatScale s;
    s.add(m);
    return heat_map(m, s);
}

}  // namespace svg
