// inspect/layer_heatmap.h: report's picture of how each layer trains: one heat map per signal of log.jsonl's
// "layers" (layer_stats.h: gradient norm, update/weight ratio, output RMS), layers down (layer 1 on top), the steps
// that logged them across, colour on a log10 scale shared by the map's cells (a colour bar of its decades beside
// it). A starving layer is a dark row, an exploding one a bright row or a bright column end. In svg.h's manner:
// one standalone <svg class="layer-heatmap" data-signal=... data-layers=L data-steps=n>, each cell a <rect>
// with data-layer (1-based), data-step and data-value and a <title> tooltip, no scripts.
// More than kHeatMaxColumns logged steps are thinned to that many, evenly, the last kept (the caption says so).
// A value that is 0, negative or missing (null) is a grey cell: no colour on a log scale.
// Does not: read files (run/run_log.h does), or compare runs (each run has its own scale).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "inspect/svg.h"

namespace svg {

constexpr size_t kHeatMaxColumns = 200;

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

// values[k][l]: layer l's value at steps[k] (a shorter row: the missing layers are grey).
inline std::string heat_map(const std::string& title, const std::string& signal, const std::vector<long>& steps,
                            const std::vector<std::vector<double>>& values, int L) {
    std::vector<size_t> cols;  // the columns drawn: every step, or kHeatMaxColumns of them evenly
    const size_t n = steps.size();
    for (size_t k = 0; k < std::min(n, kHeatMaxColumns); k++)
        cols.push_back(n <= kHeatMaxColumns ? k : (size_t)std::llround((double)k * (n - 1) / (kHeatMaxColumns - 1)));
    auto value = [&](size_t k, int l) { return l < (int)values[k].size() ? values[k][l] : NAN; };
    double lo = INFINITY, hi = -INFINITY;
    for (size_t k : cols)
        for (int l = 0; l < L; l++)
            if (value(k, l) > 0 && std::isfinite(value(k, l)))
                lo = std::min(lo, std::log10(value(k, l))), hi = std::max(hi, std::log10(value(k, l)));
    if (!(lo <= hi)) lo = 0, hi = 1;  // no positive value: every cell grey
    if (hi - lo < 1e-3) lo -= 0.5, hi += 0.5;
    const double cw = std::max(2.0, std::min(24.0, 400.0 / std::max<size_t>(1, cols.size())));
    const double ch = std::max(6.0, std::min(20.0, 260.0 / std::max(1, L)));
    const double x0 = 64, y0 = 30, mw = cw * cols.size(), mh = ch * L;
    // wide enough for the title too (bold 12 px DejaVu Sans: under 7.5 px a character), however few the steps
    const double W = std::max(x0 + mw + 96, x0 + 7.5 * title.size() + 8), H = y0 + mh + 52;
    std::string o = "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"layer-heatmap\" data-signal=\"" +
                    xml_escape(signal) + "\" data-layers=\"" + std::to_string(L) + "\" data-steps=\"" +
                    std::to_string(cols.size()) + "\" width=\"" + num(W) + "\" height=\"" + num(H) +
                    "\" viewBox=\"0 0 " + num(W) + " " + num(H) +
                    "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" " + "font-size=\"12\">\n";
    o += "<text x=\"" + num(x0) + "\" y=\"18\" font-weight=\"bold\">" + xml_escape(title) + "</text>\n";
    for (size_t c = 0; c < cols.size(); c++) {
        const size_t k = cols[c];
        for (int l = 0; l < L; l++) {
            const double v = value(k, l);
            const bool shown = v > 0 && std::isfinite(v);
            char val[32];
            snprintf(val, sizeof val, "%.4g", v);
            o += "<rect x=\"" + num(x0 + c * cw) + "\" y=\"" + num(y0 + l * ch) + "\" width=\"" + num(cw) +
                 "\" height=\"" + num(ch) + "\" fill=\"" +
                 (shown ? heat_colour((std::log10(v) - lo) / (hi - lo)) : std::string("#cccccc")) + "\" data-layer=\"" +
                 std::to_string(l + 1) + "\" data-step=\"" + std::to_string(steps[k]) + "\" data-value=\"" +
                 (std::isnan(v) ? std::string("null") : std::string(val)) + "\"><title>layer " + std::to_string(l + 1) +
                 ", step " + std::to_string(steps[k]) + ": " +
                 (std::isnan(v) ? std::string("none") : std::string(val)) + "</title></rect>\n";
        }
    }
    // Layer labels at the left (every one when they fit, else about 12), steps below (first, middle, last).
    const int every = std::max(1, (int)std::ceil(L / std::max(1.0, mh / 14.0)));
    for (int l = 0; l < L; l += every)
        o += "<text x=\"" + num(x0 - 6) + "\" y=\"" + num(y0 + (l + 0.5) * ch + 4) + "\" text-anchor=\"end\">" +
             std::to_string(l + 1) + "</text>\n";
    o += "<text transform=\"translate(16 " + num(y0 + mh / 2) + ") rotate(-90)\" text-anchor=\"middle\">layer</text>\n";
    if (!cols.empty()) {
        const size_t marks[3] = {0, cols.size() / 2, cols.size() - 1};
        for (int m = 0; m < 3; m++) {
            if (m == 1 && (marks[1] == 0 || marks[1] == marks[2])) continue;
            const char* anchor = m == 0 ? "start" : m == 2 ? "end" : "middle";
            const double x = x0 + (m == 0 ? marks[m] * cw : m == 2 ? (marks[m] + 1) * cw : (marks[m] + 0.5) * cw);
            o += "<text x=\"" + num(x) + "\" y=\"" + num(y0 + mh + 16) + "\" text-anchor=\"" + anchor + "\">" +
                 std::to_string(steps[cols[marks[m]]]) + "</text>\n";
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

}  // namespace svg
