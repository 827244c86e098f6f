// inspect/svg.h: the one place SVG and HTML text is written: escaping, and a line chart (axes, ticks, grid, legend) that
// analyze's and report's charts all are. Plain strings out, no dependencies, no scripts; every chart is one
// <svg> element that stands alone as a file (svg::document adds the XML declaration) or inline in HTML.
//   xml_escape     text or an attribute value: & < > " ' as entities, control characters dropped, invalid
//                  UTF-8 as U+FFFD (XML accepts neither raw)
//   Chart          series of (x, y) points, one colour each in legend order: lines (NaN values break them),
//                  staircases (step: each point a flat step from x - 0.5 to x + 0.5, for per-layer values), and
//                  loose dots (per-head values around a layer's mean), and a band (lo..hi around the line: the
//                  spread over seeds); a series may name its colour (report gives a run the same colour in
//                  every chart), its line's dash pattern and its markers' shape (report tells a group's seeds
//                  apart by them). Each series is one <g data-series="NAME" color="#rrggbb"
//                  [stroke-dasharray="..."]> whose marks are drawn in currentColor and whose lines inherit the
//                  dash, so a page can restyle a chart it inlines by those attributes. The legend shows each
//                  series' line, dash and marker.
//                  A series that coincides with a later one (the same points) is drawn wider beneath it, so
//                  both stay visible (identical schedules, identical runs); a line of more than 60 points has
//                  about 10 markers, placed by the series' order, so coinciding lines show every series' marker.
//   refs           horizontal reference lines with a label (e.g. uniform attention's closed form)
// Does not: draw log axes, bars, or anything interactive.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "util/utf8.h"

namespace svg {

inline std::string xml_escape(std::string_view s) {
    std::string out;
    const unsigned char* p = (const unsigned char*)s.data();
    for (size_t i = 0; i < s.size();) {
        const unsigned char c = p[i];
        if (c < 0x80) {
            if (c == '&') out += "&amp;";
            else if (c == '<') out += "&lt;";
            else if (c == '>') out += "&gt;";
            else if (c == '"') out += "&quot;";
            else if (c == '\'') out += "&#39;";
            else if (c >= 0x20 || c == '\t' || c == '\n' || c == '\r') out += (char)c;
            i++;
            continue;
        }
        const size_t k = utf8_seq_len(p, i, s.size());
        if (k == 0) {
            out += "\xEF\xBF\xBD";
            i++;
        } else {
            out.append(s.substr(i, k));
            i += k;
        }
    }
    return out;
}

// A dash pattern per series of one colour (a group's seeds), in order: solid, dashed, dotted, dash-dot, long dash;
// the patterns repeat after five and the markers (marker_shape) after four, so no two of twenty look alike.
inline const char* dash(size_t i) {
    static const char* patterns[] = {"", "7 4", "2 3", "9 3 2 3", "14 4"};
    return patterns[i % 5];
}

// A colour per series, in order (Tableau 10: distinct, and readable on white).
inline const char* color(size_t i) {
    static const char* palette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
    return palette[i % 10];
}

struct Series {
    std::string name;
    std::vector<double> x, y;              // NaN y: no point (the line breaks)
    bool step = false;                     // a staircase of flat steps [x - 0.5, x + 0.5]
    bool markers = true;                   // a marker on each point (at most 60; else ~10: marker_points)
    std::vector<double> dot_x, dot_y;      // extra loose dots in the series' colour
    std::string color;                     // "#rrggbb"; "": the palette's colour for the series' index
    std::vector<double> band_lo, band_hi;  // per point: a shaded band (NaN: none at that point)
    std::string dash;                      // the line's stroke-dasharray ("": solid)
    int marker = 0;                        // the markers' shape: 0 circle, 1 square, 2 triangle, 3 diamond
};

struct Chart {
    std::string title, xlabel, ylabel;
    std::vector<Series> series;
    bool integer_x = false;         // x ticks on whole numbers only (layers)
    bool y_zero = false;            // the y range includes 0
    double y_lo = NAN, y_hi = NAN;  // a fixed y range (e.g. 0 and 1 for fractions)
    int width = 560, height = 340;
    struct Ref {
        double y;
        std::string label;
    };
    std::vector<Ref> refs;  // dashed grey horizontal lines, labelled at the right
};

// "Nice" tick positions covering [lo, hi]: steps of 1, 2 or 5 x 10^k, about `want` of them.
inline std::vector<double> ticks(double lo, double hi, int want, bool integer, double& step) {
    const double raw = (hi - lo) / std::max(1, want);
    const double mag = std::pow(10.0, std::floor(std::log10(raw)));
    const double r = raw / mag;
    step = (r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10) * mag;
    if (integer) step = std::max(1.0, std::round(step));
    std::vector<double> t;
    for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step)
        t.push_back(std::fabs(v) < step * 1e-9 ? 0 : v);
    return t;
}

// A tick label: K / M / G for large values, else as many decimals as the step needs.
inline std::string tick_label(double v, double step) {
    char b[32];
    const double a = std::fabs(v);
    if (a >= 1e9 && step >= 1e8) snprintf(b, sizeof b, "%gG", v / 1e9);
    else if (a >= 1e6 && step >= 1e5) snprintf(b, sizeof b, "%gM", v / 1e6);
    else if (a >= 1e4 && step >= 1e3) snprintf(b, sizeof b, "%gK", v / 1e3);
    else {
        const int dec = std::max(0, std::min(6, (int)std::ceil(-std::log10(step) - 1e-9)));
        snprintf(b, sizeof b, "%.*f", dec, v);
    }
    return b;
}

inline std::string num(double v) {
    char b[32];
    snprintf(b, sizeof b, "%.1f", v);
    return b;
}

// A marker of shape `shape` (Series::marker) of radius about r at (x, y), filled with currentColor.
inline std::string marker_shape(int shape, double x, double y, double r) {
    auto pt = [](double a, double b) { return num(a) + "," + num(b); };
    switch (shape % 4) {
        case 1:
            return "<rect x=\"" + num(x - r * 0.85) + "\" y=\"" + num(y - r * 0.85) + "\" width=\"" + num(1.7 * r) +
                   "\" height=\"" + num(1.7 * r) + "\" fill=\"currentColor\"/>";
        case 2:
            return "<polygon points=\"" + pt(x, y - 1.2 * r) + " " + pt(x + 1.1 * r, y + 0.8 * r) + " " +
                   pt(x - 1.1 * r, y + 0.8 * r) + "\" fill=\"currentColor\"/>";
        case 3:
            return "<polygon points=\"" + pt(x, y - 1.25 * r) + " " + pt(x + 1.05 * r, y) + " " + pt(x, y + 1.25 * r) +
                   " " + pt(x - 1.05 * r, y) + "\" fill=\"currentColor\"/>";
        default:
            return "<circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"" + num(r) + "\" fill=\"currentColor\"/>";
    }
}

// The points of a series that carry a marker: every point of a line (not a staircase) of at most 60 finite points;
// of a longer line about 10 evenly spaced ones, shifted along the line by the series' place among n series, so that
// lines that coincide still show each series' marker, each at its own places.
inline std::vector<size_t> marker_points(const Series& s, size_t place, size_t n) {
    std::vector<size_t> finite, out;
    if (!s.markers || s.step) return out;
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); i++)
        if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) finite.push_back(i);
    if (finite.size() <= 60) return finite;
    const double every = finite.size() / 10.0;
    for (double at = every * (place % std::max<size_t>(n, 1) + 0.5) / std::max<size_t>(n, 1); at < finite.size();
         at += every)
        out.push_back(finite[(size_t)at]);
    return out;
}
inline bool has_markers(const Series& s) { return !marker_points(s, 0, 1).empty(); }

// The <g> attribute that gives a series' lines its dash pattern ("" for a solid line).
inline std::string dash_attr(const Series& s) {
    return s.dash.empty() ? "" : " stroke-dasharray=\"" + xml_escape(s.dash) + "\"";
}

// A series' <g> open tag: its name, its colour (its own, or the palette's for its index i) and its dash.
inline std::string series_g(const Series& s, size_t i) {
    return "<g data-series=\"" + xml_escape(s.name) + "\" color=\"" + (s.color.empty() ? color(i) : s.color) + "\"" +
           dash_attr(s) + ">";
}

// <line x1 y1 x2 y2 ATTRS/> and <text x y ATTRS>TEXT</text>.
inline std::string line(double x1, double y1, double x2, double y2, const std::string& attrs) {
    return "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" + num(y2) + "\" " +
           attrs + "/>";
}
inline std::string text(double x, double y, const std::string& attrs, std::string_view s) {
    return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\"" + attrs + ">" + xml_escape(s) + "</text>";
}

// The title's lines and the legend's entries, placed above and below the plot.
struct Layout {
    struct Entry {
        double x, y;
        size_t i;
        std::string name;  // cut to the chart's width ("…": the series' <g> keeps the whole)
    };
    std::vector<std::string> title;
    std::vector<Entry> legend;
    double title_h = 0, legend_h = 0;
};

// The title in lines that fit the width (about 7.5 px per character in bold 13), broken at spaces; each line past
// the first moves the plot down. The legend: entries left to right, wrapped; about 7 px per character at font size 12.
inline Layout layout(const Chart& c) {
    Layout l;
    const double W = c.width;
    const size_t per_line = (size_t)std::max(20.0, (W - 16) / 7.5);
    for (size_t a = 0; a < c.title.size();) {
        size_t b = c.title.size();
        if (b - a > per_line) {
            const size_t space = c.title.rfind(' ', a + per_line);
            b = space != std::string::npos && space > a ? space : a + per_line;
            while (b > a + 1 && ((unsigned char)c.title[b] & 0xC0) == 0x80) b--;  // at a character's start
        }
        l.title.push_back(c.title.substr(a, b - a));
        a = b + (b < c.title.size() && c.title[b] == ' ');
    }
    l.title_h = 16.0 * std::max<size_t>(1, l.title.size()) - 16;
    const size_t fits = (size_t)std::max(8.0, (W - 64 - 44) / 7.0);
    double lx = 64, ly = 0;
    for (size_t i = 0; i < c.series.size(); i++) {
        const std::string& name = c.series[i].name;
        size_t n = name.size();
        if (n > fits) {
            n = fits - 1;
            while (n > 0 && ((unsigned char)name[n] & 0xC0) == 0x80) n--;
        }
        const std::string cut = n < name.size() ? name.substr(0, n) + "…" : name;
        const double w = 36 + 7.0 * std::count_if(cut.begin(), cut.end(), [](char ch) {
                                  return ((unsigned char)ch & 0xC0) != 0x80;  // characters, not bytes
                              });
        if (lx + w > W - 8 && lx > 64) lx = 64, ly += 18;
        l.legend.push_back({lx, ly, i, cut});
        lx += w + 12;
    }
    l.legend_h = c.series.empty() ? 0 : ly + 18;
    return l;
}

// The plot's frame in pixels (px0..px1, py0..py1) and the data range it shows (xlo..xhi, ylo..yhi).
struct Frame {
    double px0, px1, py0, py1;
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    bool empty = false;  // no finite point: the range is [0, 1] x [0, 1] and the plot says "no data"
    double X(double x) const { return px0 + (x - xlo) / (xhi - xlo) * (px1 - px0); }
    double Y(double y) const { return py1 - (y - ylo) / (yhi - ylo) * (py1 - py0); }
};

// The range of every finite point, dot and band bound (and the refs), widened for staircases, whole-number x,
// 0, a fixed range, a single value and a little air.
inline void fit_range(const Chart& c, Frame& f) {
    auto extend = [&](double x, double y) {
        if (!std::isfinite(x) || !std::isfinite(y)) return;
        f.xlo = std::min(f.xlo, x), f.xhi = std::max(f.xhi, x), f.ylo = std::min(f.ylo, y), f.yhi = std::max(f.yhi, y);
    };
    for (const Series& s : c.series) {
        for (size_t i = 0; i < s.x.size() && i < s.y.size(); i++) extend(s.x[i], s.y[i]);
        for (size_t i = 0; i < s.dot_x.size() && i < s.dot_y.size(); i++) extend(s.dot_x[i], s.dot_y[i]);
        for (size_t i = 0; i < s.x.size() && i < s.band_lo.size() && i < s.band_hi.size(); i++)
            extend(s.x[i], s.band_lo[i]), extend(s.x[i], s.band_hi[i]);
    }
    for (const Chart::Ref& r : c.refs)
        if (std::isfinite(r.y) && f.xlo <= f.xhi) f.ylo = std::min(f.ylo, r.y), f.yhi = std::max(f.yhi, r.y);
    f.empty = !(f.xlo <= f.xhi);
    if (f.empty) f.xlo = 0, f.xhi = 1, f.ylo = 0, f.yhi = 1;
    bool any_step = false;
    for (const Series& s : c.series) any_step |= s.step;
    if (any_step) f.xlo -= 0.5, f.xhi += 0.5;
    else if (c.integer_x) f.xlo -= 0.3, f.xhi += 0.3;  // points off the frame
    if (c.y_zero) f.ylo = std::min(f.ylo, 0.0), f.yhi = std::max(f.yhi, 0.0);
    if (std::isfinite(c.y_lo)) f.ylo = c.y_lo;
    if (std::isfinite(c.y_hi)) f.yhi = c.y_hi;
    if (f.xhi - f.xlo < 1e-12) f.xlo -= 0.5, f.xhi += 0.5;
    if (f.yhi - f.ylo < 1e-12) {
        const double pad = std::max(1e-6, std::fabs(f.ylo) * 0.05);
        f.ylo -= pad, f.yhi += pad;
    }
    if (!std::isfinite(c.y_lo) && !std::isfinite(c.y_hi)) {  // a little air above and below the data
        const double pad = (f.yhi - f.ylo) * 0.04;
        if (!(c.y_zero && f.ylo == 0)) f.ylo -= pad;
        f.yhi += pad;
    }
}

// The grid and tick labels, the frame, the axis labels, "no data" on an empty plot, and the reference lines.
inline std::string axes(const Chart& c, const Frame& f) {
    std::string o;
    double xstep, ystep;
    for (double t : ticks(f.ylo, f.yhi, 5, false, ystep)) {
        if (t < f.ylo - 1e-12 || t > f.yhi + 1e-12) continue;
        o += line(f.px0, f.Y(t), f.px1, f.Y(t), "stroke=\"#e4e4e4\"") + "\n";
        o += text(f.px0 - 6, f.Y(t) + 4, " text-anchor=\"end\"", tick_label(t, ystep)) + "\n";
    }
    for (double t : ticks(f.xlo, f.xhi, 6, c.integer_x, xstep)) {
        if (t < f.xlo - 1e-12 || t > f.xhi + 1e-12) continue;
        o += line(f.X(t), f.py0, f.X(t), f.py1, "stroke=\"#e4e4e4\"") + "\n";
        // A label that would run past the right edge (about 7 px per character) ends at its tick instead.
        const std::string label = tick_label(t, xstep);
        const bool past = f.X(t) + 3.5 * label.size() > c.width - 2;
        o += text(f.X(t), f.py1 + 16, past ? " text-anchor=\"end\"" : " text-anchor=\"middle\"", label) + "\n";
    }
    o += "<rect x=\"" + num(f.px0) + "\" y=\"" + num(f.py0) + "\" width=\"" + num(f.px1 - f.px0) + "\" height=\"" +
         num(f.py1 - f.py0) + "\" fill=\"none\" stroke=\"#888888\"/>\n";
    o += text((f.px0 + f.px1) / 2, f.py1 + 34, " text-anchor=\"middle\"", c.xlabel) + "\n";
    o += "<text transform=\"translate(16 " + num((f.py0 + f.py1) / 2) + ") rotate(-90)\" text-anchor=\"middle\">" +
         xml_escape(c.ylabel) + "</text>\n";
    if (f.empty)
        o += text((f.px0 + f.px1) / 2, (f.py0 + f.py1) / 2, " text-anchor=\"middle\" fill=\"#888888\"", "no data") +
             "\n";
    for (const Chart::Ref& r : c.refs) {
        if (!std::isfinite(r.y) || r.y < f.ylo || r.y > f.yhi) continue;
        o +=
            line(f.px0, f.Y(r.y), f.px1, f.Y(r.y), "stroke=\"#777777\" stroke-width=\"1.2\" stroke-dasharray=\"5 4\"") +
            "\n";
        o += text(f.px1 - 4, f.Y(r.y) - 4, " text-anchor=\"end\" fill=\"#555555\" font-size=\"11\"", r.label) + "\n";
    }
    return o;
}

// How many series after c.series[si] have exactly its points: each is drawn on top of it, so it is drawn wider.
inline int coinciding_after(const Chart& c, size_t si) {
    auto same = [](const Series& a, const Series& b) {
        return a.x == b.x && a.y.size() == b.y.size() && a.step == b.step &&
               std::equal(a.y.begin(), a.y.end(), b.y.begin(),
                          [](double p, double q) { return p == q || (p != p && q != q); });
    };
    int under = 0;
    for (size_t sj = si + 1; sj < c.series.size(); sj++)
        under += !c.series[si].x.empty() && same(c.series[si], c.series[sj]);
    return under;
}

// One series' <g>: its band (lo along the points, hi back, closed), its loose dots, its line or staircase and its
// markers. A band or line is broken where a value is missing.
inline std::string series_marks(const Chart& c, const Frame& f, size_t si) {
    const Series& s = c.series[si];
    const int under = coinciding_after(c, si);
    std::string o = series_g(s, si) + "\n";
    auto xy = [&](double x, double y) { return num(f.X(x)) + "," + num(f.Y(y)); };
    std::string band_lo, band_hi;
    auto flush_band = [&] {
        if (!band_lo.empty())
            o += "<polygon fill=\"currentColor\" fill-opacity=\"0.16\" stroke=\"none\" points=\"" + band_lo + band_hi +
                 "\"/>\n";
        band_lo.clear(), band_hi.clear();
    };
    for (size_t i = 0; i < s.x.size() && i < s.band_lo.size() && i < s.band_hi.size(); i++) {
        if (!std::isfinite(s.x[i]) || !std::isfinite(s.band_lo[i]) || !std::isfinite(s.band_hi[i])) {
            flush_band();
            continue;
        }
        band_lo += (band_lo.empty() ? "" : " ") + xy(s.x[i], s.band_lo[i]);
        band_hi = " " + xy(s.x[i], s.band_hi[i]) + band_hi;
    }
    flush_band();
    for (size_t i = 0; i < s.dot_x.size() && i < s.dot_y.size(); i++)
        if (std::isfinite(s.dot_x[i]) && std::isfinite(s.dot_y[i]))
            o += "<circle cx=\"" + num(f.X(s.dot_x[i])) + "\" cy=\"" + num(f.Y(s.dot_y[i])) +
                 "\" r=\"2.5\" fill=\"currentColor\" fill-opacity=\"0.45\"/>\n";
    std::string pts;
    auto flush = [&] {
        if (!pts.empty())
            o += "<polyline fill=\"none\" stroke=\"currentColor\" stroke-width=\"" + num(1.8 + 2.6 * under) + "\"" +
                 (under ? " stroke-opacity=\"0.55\"" : "") + " points=\"" + pts + "\"/>\n";
        pts.clear();
    };
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); i++) {
        if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) {
            flush();
            continue;
        }
        if (s.step) pts += (pts.empty() ? "" : " ") + xy(s.x[i] - 0.5, s.y[i]) + " " + xy(s.x[i] + 0.5, s.y[i]);
        else pts += (pts.empty() ? "" : " ") + xy(s.x[i], s.y[i]);
    }
    flush();
    for (size_t i : marker_points(s, si, c.series.size()))
        o += marker_shape(s.marker, f.X(s.x[i]), f.Y(s.y[i]), 3 + 1.5 * under) + "\n";
    return o + "</g>\n";
}

// The legend's entries: each series' line (its dash inherited from the <g>), a marker in its middle when its points
// have markers, and its name.
inline std::string legend(const Chart& c, const Layout& l) {
    std::string o;
    for (const Layout::Entry& e : l.legend) {
        const double y = c.height + l.title_h + 10 + e.y;  // the text's baseline
        const Series& s = c.series[e.i];
        o += series_g(s, e.i) + line(e.x, y - 4, e.x + 26, y - 4, "stroke=\"currentColor\" stroke-width=\"2.5\"");
        if (has_markers(s)) o += marker_shape(s.marker, e.x + 13, y - 4, 3);
        o += text(e.x + 32, y, "", e.name) + "</g>\n";
    }
    return o;
}

inline std::string render(const Chart& c) {
    const Layout l = layout(c);
    const double W = c.width, H = c.height + l.legend_h + l.title_h;
    Frame f{64, W - 16, 30 + l.title_h, c.height - 46 + l.title_h};
    fit_range(c, f);
    std::string o = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(W) + "\" height=\"" + num(H) +
                    "\" viewBox=\"0 0 " + num(W) + " " + num(H) +
                    "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n";
    o += "<title>" + xml_escape(c.title) + "</title>\n";
    o += "<rect x=\"0\" y=\"0\" width=\"" + num(W) + "\" height=\"" + num(H) + "\" fill=\"#ffffff\"/>\n";
    for (size_t k = 0; k < l.title.size(); k++)
        o += text(W / 2, 18 + 16.0 * k, " text-anchor=\"middle\" font-weight=\"bold\" font-size=\"13\"", l.title[k]) +
             "\n";
    o += axes(c, f);
    for (size_t si = 0; si < c.series.size(); si++) o += series_marks(c, f, si);
    return o + legend(c, l) + "</svg>\n";
}

// A legend's sample of a series' look (its line, dash and marker) as a small inline <svg>, for a table's row.
inline std::string swatch(const Series& s) {
    std::string o = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"28\" height=\"10\" viewBox=\"0 0 28 10\">";
    o += "<g color=\"" + xml_escape(s.color) + "\"" + dash_attr(s) + "><line x1=\"1\" y1=\"5\" x2=\"27\" y2=\"5\" " +
         "stroke=\"currentColor\" stroke-width=\"2.5\"/>";
    return o + marker_shape(s.marker, 14, 5, 3) + "</g></svg>";
}

// A standalone .svg file's content.
inline std::string document(const std::string& svg_element) {
    return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" + svg_element;
}

}  // namespace svg
