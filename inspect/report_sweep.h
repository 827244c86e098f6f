// inspect/report_sweep.h: report's sweeps. A flag is swept when the seed groups' records differ in it besides the
// arms' own flags (a study's --grid lr=...: runs that differ in --lr and in --heads-schedule / --widths); an arm is
// the groups that agree on every flag but the swept one. Per swept flag: each arm at its best value, chosen on the
// final validation loss averaged over the arm's seeds at that value (said so in the table), every value's mean
// beside it, each arm at its best against the baseline group's arm at its best (paired by seed, as the groups'
// table pairs), and the sweep's curves: validation loss against the value, one line per arm, each seed a dot (one
// chart per parameterisation when the arms differ in --param).
// As HTML, as text for stdout, and as JSON for report --json.
// Does not: read run directories (run/run_log.h) or form the seed groups (inspect/report_groups.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "inspect/report_groups.h"
#include "inspect/svg.h"
#include "studies/stats.h"
#include "util/json.h"

namespace report {

struct SweepCell {
    size_t group = (size_t)-1;   // the seed group at this arm and value (-1: none)
    std::vector<double> losses;  // the final validation loss of each of its runs that has one
    double mean = NAN, sd = NAN;
};

struct Sweep {
    std::string flag;                 // "--lr"
    std::vector<std::string> values;  // in order: numerically when every value is a number
    bool numeric = false;
    std::vector<std::string> arms;              // labels
    std::vector<std::vector<SweepCell>> cells;  // [arm][value]; a cell without runs has no losses
    std::vector<int> best;                      // per arm: the value with the lowest mean (-1: none)
    std::vector<bool> edge;  // per arm: a numeric best at the lowest or highest value the arm ran (beyond: unknown)
    size_t base = 0;         // the arm the others are compared with: the baseline group's
    std::vector<std::string> facet;  // per arm: its --param (kFacetFlag: "param mup") when the arms differ in it
};

// The flag whose values each get a chart of their own in a sweep: the parameterisation (sp, mup), so that each
// chart shows how the best value moves across the other arms (widths, shapes) under one of them.
constexpr const char* kFacetFlag = "--param";

// The sweeps of the groups: one per flag (besides the schedule flags, which make the arms) in which some arm
// has two values or more. An arm is the groups that agree on every other differing flag; they are found by a hash
// of a group's values of all the differing flags less that of the swept one (checked value by value when two
// hashes meet), so the search is linear in the number of groups times the number of differing flags.
inline std::vector<Sweep> find_sweeps(const std::vector<Group>& groups, size_t base_group,
                                      const std::vector<Summary>& sums) {
    std::vector<Sweep> out;
    const std::vector<std::string> differ = differing_flags(groups);
    auto term = [](size_t k, const std::string& v) {  // flag k's share of a group's hash
        uint64_t h = std::hash<std::string>()(v) ^ (0x9e3779b97f4a7c15ull * (k + 1));
        h ^= h >> 31, h *= 0xbf58476d1ce4e5b9ull, h ^= h >> 29;
        return h;
    };
    std::vector<std::vector<std::string>> vals(groups.size());  // [group][k]: its value of differ[k]
    std::vector<uint64_t> whole(groups.size(), 0);
    for (size_t gi = 0; gi < groups.size(); gi++)
        for (size_t k = 0; k < differ.size(); k++) {
            vals[gi].push_back(groups[gi].value(differ[k]));
            whole[gi] += term(k, vals[gi][k]);
        }
    for (size_t k = 0; k < differ.size(); k++) {
        const std::string& flag = differ[k];
        const std::vector<std::string>& kind = kind_flags();  // what groups of one arm differ in, never a sweep
        if (flag == "--heads-schedule" || flag == "--widths" || std::count(kind.begin(), kind.end(), flag)) continue;
        std::vector<size_t> arm_rep;  // per arm: its first group
        std::vector<size_t> arm_of(groups.size(), (size_t)-1);
        std::unordered_multimap<uint64_t, size_t> arm_by_hash;
        std::unordered_map<std::string, size_t> value_index;
        std::vector<std::string> values;
        for (size_t gi = 0; gi < groups.size(); gi++) {
            if (groups[gi].identity.empty()) continue;  // a run without a record: in no sweep
            const uint64_t h = whole[gi] - term(k, vals[gi][k]);
            auto range = arm_by_hash.equal_range(h);
            for (auto it = range.first; it != range.second && arm_of[gi] == (size_t)-1; ++it) {
                const std::vector<std::string>& r = vals[arm_rep[it->second]];
                bool same = true;
                for (size_t j = 0; j < differ.size() && same; j++) same = j == k || r[j] == vals[gi][j];
                if (same) arm_of[gi] = it->second;
            }
            if (arm_of[gi] == (size_t)-1) {
                arm_of[gi] = arm_rep.size();
                arm_by_hash.emplace(h, arm_rep.size());
                arm_rep.push_back(gi);
            }
            if (value_index.emplace(vals[gi][k], values.size()).second) values.push_back(vals[gi][k]);
        }
        Sweep s;
        s.flag = flag;
        s.values = values;
        s.numeric = !s.values.empty() && std::all_of(s.values.begin(), s.values.end(), [](const std::string& v) {
            double x;
            return as_number(v, x);
        });
        if (s.numeric)
            std::sort(s.values.begin(), s.values.end(), [](const std::string& a, const std::string& b) {
                return std::strtod(a.c_str(), nullptr) < std::strtod(b.c_str(), nullptr);
            });
        for (size_t vi = 0; vi < s.values.size(); vi++) value_index[s.values[vi]] = vi;
        s.cells.assign(arm_rep.size(), std::vector<SweepCell>(s.values.size()));
        for (size_t gi = 0; gi < groups.size(); gi++) {
            if (arm_of[gi] == (size_t)-1) continue;
            SweepCell& c = s.cells[arm_of[gi]][value_index.at(vals[gi][k])];
            c.group = gi;
            for (size_t i : groups[gi].runs)
                if (std::isfinite(sums[i].last_val)) c.losses.push_back(sums[i].last_val);
        }
        if (arm_of[base_group] != (size_t)-1) s.base = arm_of[base_group];
        bool swept = false;
        for (std::vector<SweepCell>& arm : s.cells) {
            int with_runs = 0, best = -1, lo = -1, hi = -1;
            for (size_t vi = 0; vi < arm.size(); vi++) {
                SweepCell& c = arm[vi];
                if (c.losses.empty()) continue;
                with_runs++, hi = (int)vi, lo = lo < 0 ? (int)vi : lo;
                c.mean = stats::mean(c.losses), c.sd = stats::stddev(c.losses);
                if (best < 0 || c.mean < arm[best].mean) best = (int)vi;
            }
            s.best.push_back(best);
            s.edge.push_back(s.numeric && best >= 0 && with_runs >= 2 && (best == lo || best == hi));
            swept |= with_runs >= 2;
        }
        if (!swept) continue;
        // An arm's label: its values of the other flags the groups differ in ("heads prism, widths x").
        const bool faceted = flag != kFacetFlag && std::count(differ.begin(), differ.end(), kFacetFlag);
        for (size_t rep : arm_rep) {
            if (faceted) s.facet.push_back(label_part(groups[rep], kFacetFlag));  // "param sp"
            std::string label;
            for (size_t j = 0; j < differ.size(); j++)
                if (j != k) label += (label.empty() ? "" : ", ") + label_part(groups[rep], differ[j]);
            s.arms.push_back(label.empty() ? "all runs" : cut_text(label, kShownLabel));
        }
        out.push_back(s);
    }
    return out;
}

// "mean over 3 seeds", or "mean over each value's seeds (n 1 to 3)" when the cells' counts differ.
inline std::string seeds_phrase(const Sweep& s) {
    size_t lo = (size_t)-1, hi = 0;
    for (const auto& arm : s.cells)
        for (const SweepCell& c : arm)
            if (!c.losses.empty()) lo = std::min(lo, c.losses.size()), hi = std::max(hi, c.losses.size());
    if (lo == hi) return "mean over " + std::to_string(lo) + (lo == 1 ? " seed" : " seeds");
    return "mean over each value's seeds, n " + std::to_string(lo) + " to " + std::to_string(hi);
}

inline std::string cell_text(const SweepCell& c) {
    if (c.losses.empty()) return "-";
    return fmt(c.mean, "%.4f") + (c.losses.size() > 1 ? " ± " + fmt(c.sd, "%.4f") : "") + " (n " +
           std::to_string(c.losses.size()) + ")";
}

// Validation loss against the swept value, one line per arm (band: ± 1 std over seeds; dots: each seed), of the
// arms whose facet is `facet` (all of them when the sweep has no facets). A numeric sweep over a factor of 3 or more
// is drawn against log10 of the value (an lr sweep's spacing).
inline svg::Chart sweep_chart(const Sweep& s, const std::string& facet = "") {
    const std::string name = flag_label(s.flag);
    bool log_x = s.numeric;
    double lo = INFINITY, hi = 0;
    for (const std::string& v : s.values) {
        const double x = std::strtod(v.c_str(), nullptr);
        log_x &= x > 0, lo = std::min(lo, x), hi = std::max(hi, x);
    }
    log_x &= hi >= 3 * lo;
    svg::Chart c;
    c.title = "Final validation loss against " + name + " (mean over seeds)" + (s.facet.empty() ? "" : ": " + facet);
    c.xlabel = log_x ? "log10 " + name : s.numeric ? name : name + " (its values in order)";
    c.ylabel = "val loss";
    for (size_t a = 0; a < s.arms.size(); a++) {
        if (!s.facet.empty() && s.facet[a] != facet) continue;
        svg::Series ser;
        ser.name = s.arms[a], ser.color = svg::color(a), ser.dash = svg::dash(a), ser.marker = (int)a;
        for (size_t vi = 0; vi < s.values.size(); vi++) {
            const SweepCell& cell = s.cells[a][vi];
            if (cell.losses.empty()) continue;
            const double v = std::strtod(s.values[vi].c_str(), nullptr);
            const double x = log_x ? std::log10(v) : s.numeric ? v : (double)(vi + 1);
            ser.x.push_back(x), ser.y.push_back(cell.mean);
            ser.band_lo.push_back(cell.losses.size() > 1 ? cell.mean - cell.sd : NAN);
            ser.band_hi.push_back(cell.losses.size() > 1 ? cell.mean + cell.sd : NAN);
            for (double l : cell.losses) ser.dot_x.push_back(x), ser.dot_y.push_back(l);
        }
        c.series.push_back(ser);
    }
    return c;
}

// The sweeps as report --json's "sweeps": per swept flag, how the best was chosen, the values in order, and per
// arm its best value and every value's mean, std and n (null where a value has no run with a validation loss).
inline std::string sweeps_json(const std::vector<Sweep>& sweeps) {
    auto num = [](double v) { return json::number(v, "%.9g"); };
    std::string j = "[";
    bool first = true;
    for (const Sweep& s : sweeps) {
        j += std::string(first ? "\n  " : ",\n  ") + "{\"flag\": " + json::quote(s.flag) +
             ", \"chosen_on\": " + json::quote("final validation loss (" + seeds_phrase(s) + ")") +
             ", \"baseline_arm\": " + json::quote(s.arms[s.base]) + ", \"values\": [";
        first = false;
        for (size_t v = 0; v < s.values.size(); v++) j += (v ? ", " : "") + json::quote(s.values[v]);
        j += "], \"arms\": [";
        for (size_t a = 0; a < s.arms.size(); a++) {
            const int b = s.best[a];
            j += std::string(a ? ", " : "") + "{\"arm\": " + json::quote(s.arms[a]) +
                 ", \"best\": " + (b < 0 ? std::string("null") : json::quote(s.values[b])) +
                 ", \"best_at_edge\": " + (s.edge[a] ? "true" : "false") + ", \"cells\": [";
            for (size_t v = 0; v < s.values.size(); v++) {
                const SweepCell& c = s.cells[a][v];
                j += (v ? ", " : "") + (c.losses.empty()
                                            ? std::string("null")
                                            : "{\"n\": " + std::to_string(c.losses.size()) +
                                                  ", \"mean\": " + num(c.mean) + ", \"std\": " + num(c.sd) + "}");
            }
            j += "]}";
        }
        j += "]}";
    }
    return j + (first ? "]" : "\n ]");
}

// The sweeps' sections of the page ("" when nothing was swept), and their tables as text for stdout. Each arm at
// its best is compared with the baseline's arm at its best as the groups' table compares groups (report_groups.h's
// compare: paired by seed, its interval, SE and detectable effect), on q, the final validation loss.
inline std::string sweep_sections(const std::vector<Sweep>& sweeps, const std::vector<Group>& groups,
                                  const std::vector<RunLog>& runs, const std::vector<Summary>& sums, const Quantity& q,
                                  const Effects& effects, std::string& text) {
    std::string h;
    for (const Sweep& s : sweeps) {
        const int bb = s.best[s.base];
        const std::string name = flag_label(s.flag), how = "chosen on final validation loss (" + seeds_phrase(s) + ")";
        const std::string vs = "− the baseline's arm at its best (n)";
        h += "<h2>Each arm at its best " + xml_escape(name) + "</h2>\n<p>Best " + xml_escape(name) + " " +
             xml_escape(how) + "; the runs differ in <code>" + xml_escape(s.flag) +
             "</code> within each arm. Mean ± sample std over seeds (n). Against the baseline's arm at its best: "
             "the difference paired by seed, with its 95% interval, SE and detectable effect, as in the groups' "
             "table. The same seeds chose each best value, which favours every arm alike; fresh seeds at the chosen "
             "values measure it unbiased.</p>\n<table>\n<tr><th>arm</th><th>best " +
             xml_escape(name) + "</th><th>val loss at best</th><th>" + xml_escape(vs) +
             "</th><th>95% interval</th><th>SE</th><th>detectable at 95%/80%</th>";
        for (const std::string& v : s.values) h += "<th>" + xml_escape(name + " " + v) + "</th>";
        h += "</tr>\n";
        std::vector<std::vector<std::string>> rows;  // the text table, padded below
        rows.push_back({"arm", "best " + name, "val loss at best", "- the baseline's arm at its best (n)",
                        "95% interval", "SE", "detectable at 95%/80%"});
        for (const std::string& v : s.values) rows[0].push_back(name + " " + v);
        std::string methods;
        bool edges = false;
        for (size_t a = 0; a < s.arms.size(); a++) {
            const int b = s.best[a];
            const std::string at = b < 0 ? "-" : cell_text(s.cells[a][b]);
            const std::string best = b < 0 ? "-" : s.values[b] + (s.edge[a] ? " (edge of the grid)" : "");
            edges |= s.edge[a];
            std::vector<std::string> cells = {"baseline", "", "", ""};
            if (a != s.base) cells = {"-", "", "", ""};
            if (a != s.base && b >= 0 && bb >= 0) {
                const stats::Comparison d =
                    compare(groups[s.cells[a][b].group], groups[s.cells[s.base][bb].group], q, runs, sums);
                cells = comparison_cells(d, q, effects.of(q));
                if (d.n > 0 && methods.find(d.method) == std::string::npos)
                    methods += (methods.empty() ? "" : "; ") + d.method;
            }
            h += "<tr><td class=\"label\">" + xml_escape(s.arms[a]) + (a == s.base ? " (baseline)" : "") + "</td><td>" +
                 xml_escape(best) + "</td><td>" + xml_escape(at) + "</td>";
            rows.push_back({s.arms[a] + (a == s.base ? " (baseline)" : ""), best, at});
            for (const std::string& c : cells) h += "<td>" + xml_escape(c) + "</td>", rows.back().push_back(c);
            for (size_t vi = 0; vi < s.values.size(); vi++) {
                const std::string t = cell_text(s.cells[a][vi]);
                h += (int)vi == b ? "<td><b>" + xml_escape(t) + "</b></td>" : "<td>" + xml_escape(t) + "</td>";
                rows.back().push_back(t);
            }
            h += "</tr>\n";
        }
        h += "</table>\n";
        const std::string edge_note = "a best " + name + " at the edge of the grid (the lowest or highest value run) " +
                                      "may not be the best: the loss may fall further beyond it; extend the grid there";
        if (edges) h += "<p class=\"warn\">" + xml_escape(edge_note) + ".</p>\n";
        if (!methods.empty()) h += "<p class=\"note\">− baseline: " + xml_escape(methods) + ".</p>\n";
        text += "\neach arm at its best " + name + ", " + how + ":\n" + text_table(rows);
        if (edges) text += "  note: " + edge_note + ".\n";
        if (!methods.empty()) text += "  − baseline: " + methods + ".\n";
        std::vector<std::string> facets;  // in the arms' order, each once
        for (const std::string& f : s.facet)
            if (std::find(facets.begin(), facets.end(), f) == facets.end()) facets.push_back(f);
        if (facets.empty()) facets.push_back("");
        h += "<div class=\"charts\">\n";
        for (const std::string& f : facets) h += svg::render(sweep_chart(s, f));
        h += "</div>\n";
    }
    return h;
}

}  // namespace report
