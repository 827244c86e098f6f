// inspect/report_sweep.h: report's sweeps. A flag is swept when the seed groups' records differ in it besides the
// arms' own flags (a study's --grid lr=...: runs that differ in --lr and in --heads-schedule / --widths); an arm is
// the groups that agree on every flag but the swept one. Per swept flag: each arm at its best value, chosen on the
// final validation loss averaged over the arm's seeds at that value (said so in the table), every value's mean
// beside it, each arm at its best against the baseline group's arm at its best (paired by seed, as the groups'
// table pairs), and the sweep's curves: validation loss against the value, one line per arm, each seed a dot.
// As HTML, as text for stdout, and as JSON for report --json.
// Does not: read run directories (run/run_log.h) or form the seed groups (inspect/report_groups.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "inspect/report_groups.h"
#include "inspect/svg.h"
#include "studies/stats.h"
#include "util/json.h"

namespace report {

// A flag's name in labels: "--heads-schedule" -> "heads", "--lr" -> "lr" (as the groups' labels have it).
inline std::string flag_label(const std::string& f) { return f == "--heads-schedule" ? "heads" : f.substr(2); }

// A recorded flag's value in a group's identity ("-" when the record does not hold it, "on" for a switch).
inline std::string identity_value(const Group& g, const std::string& flag) {
    for (const auto& [f, v] : g.identity)
        if (f == flag) return v.empty() ? "on" : v;
    return "-";
}

struct SweepCell {
    std::vector<double> losses;             // the final validation loss of each of its runs that has one
    std::map<std::string, double> by_seed;  // the same by seed (a run without one by its directory)
    double mean = NAN, sd = NAN;
};

struct Sweep {
    std::string flag;                 // "--lr"
    std::vector<std::string> values;  // in order: numerically when every value is a number
    bool numeric = false;
    std::vector<std::string> arms;              // labels
    std::vector<std::vector<SweepCell>> cells;  // [arm][value]; a cell without runs has no losses
    std::vector<int> best;                      // per arm: the value with the lowest mean (-1: none)
    size_t base = 0;                            // the arm the others are compared with: the baseline group's
};

// The flags the recorded groups differ in, in the order their records list them.
inline std::vector<std::string> differing_flags(const std::vector<Group>& groups) {
    std::vector<std::string> out;
    for (const Group& g : groups)
        for (const auto& kv : g.identity) {
            const std::string& f = kv.first;
            if (std::find(out.begin(), out.end(), f) != out.end()) continue;
            for (const Group& h : groups)
                if (!h.identity.empty() && identity_value(h, f) != identity_value(g, f)) {
                    out.push_back(f);
                    break;
                }
        }
    return out;
}

inline bool as_number(const std::string& s, double& x) {
    char* end = nullptr;
    x = std::strtod(s.c_str(), &end);
    return !s.empty() && *end == 0 && std::isfinite(x);
}

// The sweeps of the groups: one per flag (besides the schedule flags, which make the arms) in which some arm
// has two values or more.
inline std::vector<Sweep> find_sweeps(const std::vector<Group>& groups, size_t base_group,
                                      const std::vector<RunLog>& runs, const std::vector<Summary>& sums) {
    std::vector<Sweep> out;
    const std::vector<std::string> differ = differing_flags(groups);
    for (const std::string& flag : differ) {
        if (flag == "--heads-schedule" || flag == "--widths") continue;
        Sweep s;
        s.flag = flag;
        std::vector<std::string> arm_keys;
        std::vector<size_t> arm_of(groups.size(), (size_t)-1);
        for (size_t gi = 0; gi < groups.size(); gi++) {
            const Group& g = groups[gi];
            if (g.identity.empty()) continue;  // a run without a record: in no sweep
            std::string key;
            for (const std::string& f : differ)
                if (f != flag) key += f + "=" + identity_value(g, f) + "\n";
            auto it = std::find(arm_keys.begin(), arm_keys.end(), key);
            arm_of[gi] = (size_t)(it - arm_keys.begin());
            if (it == arm_keys.end()) arm_keys.push_back(key);
            const std::string v = identity_value(g, flag);
            if (std::find(s.values.begin(), s.values.end(), v) == s.values.end()) s.values.push_back(v);
        }
        s.numeric = !s.values.empty() && std::all_of(s.values.begin(), s.values.end(), [](const std::string& v) {
            double x;
            return as_number(v, x);
        });
        if (s.numeric)
            std::sort(s.values.begin(), s.values.end(), [](const std::string& a, const std::string& b) {
                return std::strtod(a.c_str(), nullptr) < std::strtod(b.c_str(), nullptr);
            });
        s.cells.assign(arm_keys.size(), std::vector<SweepCell>(s.values.size()));
        std::vector<std::string> seeds;  // a group's runs are its seeds
        for (size_t gi = 0; gi < groups.size(); gi++) {
            if (arm_of[gi] == (size_t)-1) continue;
            const size_t vi =
                std::find(s.values.begin(), s.values.end(), identity_value(groups[gi], flag)) - s.values.begin();
            for (size_t i : groups[gi].runs)
                if (std::isfinite(sums[i].last_val)) {
                    SweepCell& c = s.cells[arm_of[gi]][vi];
                    c.losses.push_back(sums[i].last_val);
                    c.by_seed[sums[i].seed.empty() ? "run " + runs[i].dir : sums[i].seed] = sums[i].last_val;
                }
        }
        if (arm_of[base_group] != (size_t)-1) s.base = arm_of[base_group];
        bool swept = false;
        for (std::vector<SweepCell>& arm : s.cells) {
            int with_runs = 0, best = -1;
            for (size_t vi = 0; vi < arm.size(); vi++) {
                SweepCell& c = arm[vi];
                if (c.losses.empty()) continue;
                with_runs++;
                c.mean = stats::mean(c.losses), c.sd = stats::stddev(c.losses);
                if (best < 0 || c.mean < arm[best].mean) best = (int)vi;
            }
            s.best.push_back(best);
            swept |= with_runs >= 2;
        }
        if (!swept) continue;
        // An arm's label: the other flags the arms differ in ("heads prism, widths x").
        for (size_t a = 0; a < arm_keys.size(); a++) {
            std::string label;
            for (const std::string& f : differ) {
                if (f == flag) continue;
                bool varies = false;
                for (size_t gi = 0; gi < groups.size(); gi++)
                    for (size_t gj = 0; gj < groups.size(); gj++)
                        varies |= arm_of[gi] != (size_t)-1 && arm_of[gj] != (size_t)-1 &&
                                  identity_value(groups[gi], f) != identity_value(groups[gj], f);
                if (!varies) continue;
                for (size_t gi = 0; gi < groups.size(); gi++)
                    if (arm_of[gi] == a) {
                        label += (label.empty() ? "" : ", ") + flag_label(f) + " " + identity_value(groups[gi], f);
                        break;
                    }
            }
            s.arms.push_back(label.empty() ? "all runs" : label);
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

// Validation loss against the swept value, one line per arm (band: ± 1 std over seeds; dots: each seed). A
// numeric sweep over a factor of 3 or more is drawn against log10 of the value (an lr sweep's spacing).
inline svg::Chart sweep_chart(const Sweep& s) {
    const std::string name = flag_label(s.flag);
    bool log_x = s.numeric;
    double lo = INFINITY, hi = 0;
    for (const std::string& v : s.values) {
        const double x = std::strtod(v.c_str(), nullptr);
        log_x &= x > 0, lo = std::min(lo, x), hi = std::max(hi, x);
    }
    log_x &= hi >= 3 * lo;
    svg::Chart c;
    c.title = "Final validation loss against " + name + " (mean over seeds)";
    c.xlabel = log_x ? "log10 " + name : s.numeric ? name : name + " (its values in order)";
    c.ylabel = "val loss";
    for (size_t a = 0; a < s.arms.size(); a++) {
        svg::Series ser;
        ser.name = s.arms[a], ser.color = svg::color(a);
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
                 ", \"best\": " + (b < 0 ? std::string("null") : json::quote(s.values[b])) + ", \"cells\": [";
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

// The sweeps' sections of the page ("" when nothing was swept), and their tables as text for stdout.
inline std::string sweep_sections(const std::vector<Sweep>& sweeps, std::string& text) {
    std::string h;
    for (const Sweep& s : sweeps) {
        // Each arm at its best against the baseline's arm at its best, paired by seed.
        const int bb = s.best[s.base];
        auto vs_base = [&](size_t a) {
            if (a == s.base) return std::string("baseline");
            if (s.best[a] < 0 || bb < 0) return std::string("-");
            return diff_text(stats::paired_difference(s.cells[a][s.best[a]].by_seed, s.cells[s.base][bb].by_seed),
                             "%.4f");
        };
        const std::string vs = "− " + s.arms[s.base] + " at its best";
        const std::string name = flag_label(s.flag), how = "chosen on final validation loss (" + seeds_phrase(s) + ")";
        h += "<h2>Each arm at its best " + xml_escape(name) + "</h2>\n<p>Best " + xml_escape(name) + " " +
             xml_escape(how) + "; the runs differ in <code>" + xml_escape(s.flag) +
             "</code> within each arm. Mean ± sample std over seeds (n). Against the baseline's arm at its best: "
             "the difference paired by seed, with its 95% t interval, as in the groups' table. The same seeds chose "
             "each best value, which favours every arm alike; fresh seeds at the chosen values measure it "
             "unbiased.</p>\n<table>\n<tr><th>arm</th><th>best " +
             xml_escape(name) + "</th><th>val loss at best</th><th>" + xml_escape(vs) + "<br/>(n)</th>";
        for (const std::string& v : s.values) h += "<th>" + xml_escape(name + " " + v) + "</th>";
        h += "</tr>\n";
        text += "\neach arm at its best " + name + ", " + how + ":\n";
        char line[256];
        snprintf(line, sizeof line, "%-28s %-12s %-24s %-36s", "arm", ("best " + name).substr(0, 12).c_str(),
                 "val loss at best", ("- " + s.arms[s.base] + " at best").substr(0, 36).c_str());
        text += line;
        for (const std::string& v : s.values) {
            snprintf(line, sizeof line, " | %-24s", (name + " " + v).c_str());
            text += line;
        }
        text += "\n";
        for (size_t a = 0; a < s.arms.size(); a++) {
            const int b = s.best[a];
            const std::string best = b < 0 ? "-" : s.values[b], at = b < 0 ? "-" : cell_text(s.cells[a][b]);
            const std::string d = vs_base(a);
            h += "<tr><td>" + xml_escape(s.arms[a]) + (a == s.base ? " (baseline)" : "") + "</td><td>" +
                 xml_escape(best) + "</td><td>" + xml_escape(at) + "</td><td>" + xml_escape(d) + "</td>";
            snprintf(line, sizeof line, "%-28s %-12s %-24s %-36s", s.arms[a].substr(0, 28).c_str(), best.c_str(),
                     at.c_str(), d.c_str());
            text += line;
            for (size_t vi = 0; vi < s.values.size(); vi++) {
                const std::string t = cell_text(s.cells[a][vi]);
                h += (int)vi == b ? "<td><b>" + xml_escape(t) + "</b></td>" : "<td>" + xml_escape(t) + "</td>";
                snprintf(line, sizeof line, " | %-24s", t.c_str());
                text += line;
            }
            h += "</tr>\n";
            text += "\n";
        }
        h += "</table>\n<div class=\"charts\">\n" + svg::render(sweep_chart(s)) + "</div>\n";
    }
    return h;
}

}  // namespace report
