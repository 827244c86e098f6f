// inspect/report_groups.h: report's numbers: formatting, the charts of steps, and the seed groups (runs whose
// records differ only in --seed) with their statistics (mean +- std, the paired difference against a baseline
// group with a 95% t interval: studies/stats.h), as tables and charts.
// Does not: read run directories (run/run_log.h) or write the page (inspect/report.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "errors.h"
#include "inspect/svg.h"
#include "run/run_log.h"
#include "run/train_flags.h"
#include "studies/stats.h"

namespace report {

using svg::xml_escape;

inline std::string fmt(double v, const char* f) {
    if (!std::isfinite(v)) return "-";
    char b[64];
    snprintf(b, sizeof b, f, v);
    return b;
}

// One unit per quantity on the whole page: accuracies are fractions (0 to 1) everywhere, as lm-evaluation-harness
// and the group statistics have them, and durations are in one unit, the one the longest of them reads best in
// (seconds below 2 minutes, minutes below 2 hours, else hours), in every table and axis, never "4.7 min" beside
// "104 s".
struct TimeUnit {
    double seconds = 1;            // the unit's length
    const char* name = "s";        // after a value or in a column's header
    const char* axis = "seconds";  // an axis label
};
inline TimeUnit time_unit(double longest) {
    if (!(longest >= 120)) return {1, "s", "seconds"};
    if (longest < 7200) return {60, "min", "minutes"};
    return {3600, "h", "hours"};
}
inline std::string duration(double s, const TimeUnit& u) { return fmt(s / u.seconds, "%.1f"); }
inline std::string accuracy(double v) { return fmt(v, "%.4f"); }

// At most `max` points: consecutive points averaged in equal buckets (a 100K-step log stays a small chart).
inline void downsample(std::vector<double>& x, std::vector<double>& y, size_t max) {
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

// The mean of the last k values at each point (NaNs skipped): --smooth.
inline std::vector<double> smoothed(const std::vector<double>& y, int k) {
    if (k <= 1) return y;
    std::vector<double> out(y.size(), NAN);
    for (size_t i = 0; i < y.size(); i++) {
        double s = 0;
        int n = 0;
        for (size_t j = i + 1 > (size_t)k ? i + 1 - k : 0; j <= i; j++)
            if (std::isfinite(y[j])) s += y[j], n++;
        if (n) out[i] = s / n;
    }
    return out;
}

// How a run is drawn in every per-run chart: its group's colour, and the dash pattern and marker shape of its place
// among its group's runs (so the seeds of a group are told apart; the first run, and a run alone, is solid with round
// markers).
struct RunStyle {
    std::string colour;
    size_t place = 0;
    void apply(svg::Series& s) const { s.color = colour, s.dash = svg::dash(place), s.marker = (int)place; }
};

// A chart of one field of every run's steps against another (xf's values divided by x_unit); styles[i] is run i's.
inline svg::Chart steps_chart(const std::vector<RunLog>& runs, const std::vector<RunStyle>& styles,
                              const std::string& title, const std::string& xlabel, const std::string& ylabel,
                              double RunStep::*xf, double RunStep::*yf, bool tokens_x, int smooth = 1,
                              double x_unit = 1) {
    svg::Chart c;
    c.title = title, c.xlabel = xlabel, c.ylabel = ylabel;
    for (size_t i = 0; i < runs.size(); i++) {
        const RunLog& r = runs[i];
        svg::Series s;
        s.name = r.name;
        styles[i].apply(s);
        std::vector<double> y;
        for (const RunStep& st : r.steps) y.push_back(st.*yf);
        y = smoothed(y, smooth);
        for (size_t k = 0; k < r.steps.size(); k++) {
            const RunStep& st = r.steps[k];
            if (!std::isfinite(y[k])) continue;  // a step without this value (no validation at this step)
            s.x.push_back(tokens_x ? (double)st.tokens : xf ? st.*xf / x_unit : (double)st.step), s.y.push_back(y[k]);
        }
        downsample(s.x, s.y, 1500);
        c.series.push_back(s);
    }
    return c;
}

inline double median(std::vector<double> v) {
    v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
    if (v.empty()) return NAN;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
}

// ---- the runs' numbers and the seed groups --------------------------------------------------------------

struct Summary {
    double last_train = NAN, last_val = NAN, best_val = NAN, median_tps = NAN;
    long skipped = 0;
    std::string seed;                                     // the record's --seed ("" without a record)
    std::vector<std::pair<std::string, double>> metrics;  // "hellaswag acc" -> value: the zero-shot results
    size_t group = 0;
    double metric(const std::string& k) const {
        for (const auto& m : metrics)
            if (m.first == k) return m.second;
        return NAN;
    }
};

// The zero-shot metrics of a run: per task, eval.json's result when there is one, else the last logged.
inline std::vector<std::pair<std::string, double>> run_metrics(const RunLog& r) {
    std::vector<std::pair<std::string, double>> out;
    std::vector<std::string> tasks;
    for (const RunEval& e : r.evals)
        if (std::find(tasks.begin(), tasks.end(), e.task) == tasks.end()) tasks.push_back(e.task);
    for (const std::string& t : tasks) {
        const RunEval* pick = nullptr;
        for (const RunEval& e : r.evals)
            if (e.task == t && (!pick || e.after_training || !pick->after_training)) pick = &e;
        for (const char* k : {"acc", "acc_norm", "perplexity", "word_perplexity", "bits_per_byte"})
            if (std::isfinite(pick->get(k))) out.push_back({t + " " + k, pick->get(k)});
    }
    return out;
}

inline Summary summarize(const RunLog& r) {
    Summary m;
    std::vector<double> tps;
    for (const RunStep& s : r.steps) {
        if (std::isfinite(s.val_loss))
            m.last_val = s.val_loss,
            m.best_val = std::isfinite(m.best_val) ? std::min(m.best_val, s.val_loss) : s.val_loss;
        if (std::isfinite(s.train_loss)) m.last_train = s.train_loss;
        tps.push_back(s.tokens_per_s);
        m.skipped += s.skipped;
    }
    m.median_tps = median(tps);
    if (r.has_record) m.seed = r.record.arg("--seed");
    m.metrics = run_metrics(r);
    return m;
}

struct Group {
    std::string key, label, colour;
    std::vector<size_t> runs;
    std::vector<std::pair<std::string, std::string>> identity;  // the first run's record minus seed and the rest
    bool uniform = false;                                       // uniform heads and widths
};

// What makes a run what it is, for grouping: its record without --seed and without what a resume may change.
inline std::vector<std::pair<std::string, std::string>> identity_of(const RunLog& r) {
    std::vector<std::string> drop = may_change_on_resume();
    drop.push_back("--seed");
    return r.record.identity(drop);
}

inline std::vector<Group> make_groups(const std::vector<RunLog>& runs, std::vector<Summary>& sums) {
    std::vector<Group> groups;
    for (size_t i = 0; i < runs.size(); i++) {
        const RunLog& r = runs[i];
        std::string key = "run " + r.dir;
        std::vector<std::pair<std::string, std::string>> id;
        if (r.has_record) {
            id = identity_of(r);
            key.clear();
            for (const auto& [f, v] : id) key += f + "=" + v + "\n";
        }
        auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return g.key == key; });
        if (it == groups.end()) {
            Group g;
            g.key = key, g.identity = id;
            g.uniform =
                r.has_record && r.record.arg("--heads-schedule") == "uniform" && r.record.arg("--widths") == "uniform";
            groups.push_back(g);
            it = groups.end() - 1;
        }
        it->runs.push_back(i);
        sums[i].group = (size_t)(it - groups.begin());
    }
    // Labels: the flags whose values tell the recorded groups apart ("heads prism, widths x"); a group without a
    // record is its run's name; with one group, the runs' common name.
    std::vector<std::string> differ;
    for (const Group& g : groups)
        for (const auto& [f, v] : g.identity)
            for (const Group& h : groups) {
                bool same = false, has = false;
                for (const auto& [f2, v2] : h.identity)
                    if (f2 == f) has = true, same = v2 == v;
                if (!h.identity.empty() && (!has || !same) &&
                    std::find(differ.begin(), differ.end(), f) == differ.end())
                    differ.push_back(f);
            }
    for (size_t gi = 0; gi < groups.size(); gi++) {
        Group& g = groups[gi];
        g.colour = svg::color(gi);
        if (g.identity.empty() || differ.empty()) {
            std::string n = runs[g.runs[0]].name;
            const size_t dash = n.rfind("-s");
            if (g.runs.size() > 1 && dash != std::string::npos && dash + 2 < n.size() &&
                n.find_first_not_of("0123456789", dash + 2) == std::string::npos)
                n = n.substr(0, dash);
            g.label = n;
            continue;
        }
        for (const std::string& f : differ) {
            std::string v = "-";
            for (const auto& [f2, v2] : g.identity)
                if (f2 == f) v = v2.empty() ? "on" : v2;
            const std::string name = f == "--heads-schedule" ? "heads" : f.substr(2);
            g.label += (g.label.empty() ? "" : ", ") + name + " " + v;
        }
    }
    for (size_t a = 0; a < groups.size(); a++)  // labels are names: make them unique
        for (size_t b = a + 1; b < groups.size(); b++)
            if (groups[b].label == groups[a].label) groups[b].label += " #" + std::to_string(b + 1);
    return groups;
}

// A group's values of one quantity, by seed (runs without a seed are keyed by their name, so they never pair).
inline std::map<std::string, double> by_seed(const Group& g, const std::vector<RunLog>& runs,
                                             const std::vector<Summary>& sums,
                                             const std::function<double(const Summary&)>& get) {
    std::map<std::string, double> m;
    for (size_t i : g.runs) m[sums[i].seed.empty() ? "run " + runs[i].dir : sums[i].seed] = get(sums[i]);
    return m;
}

struct Quantity {
    std::string name;  // "final val loss", "hellaswag acc"
    std::function<double(const Summary&)> get;
    const char* format;
};

inline std::vector<Quantity> quantities(const std::vector<Summary>& sums) {
    std::vector<Quantity> q = {{"final val loss", [](const Summary& s) { return s.last_val; }, "%.4f"},
                               {"best val loss", [](const Summary& s) { return s.best_val; }, "%.4f"}};
    std::vector<std::string> names;
    for (const Summary& s : sums)
        for (const auto& m : s.metrics)
            if (std::find(names.begin(), names.end(), m.first) == names.end()) names.push_back(m.first);
    for (const std::string& n : names) q.push_back({n, [n](const Summary& s) { return s.metric(n); }, "%.4f"});
    return q;
}

struct GroupStat {
    int n = 0;
    double mean = NAN, sd = NAN;
    stats::Paired diff;  // against the baseline (n 0 for the baseline itself)
};

inline GroupStat group_stat(const Group& g, const Group& base, bool is_base, const Quantity& q,
                            const std::vector<RunLog>& runs, const std::vector<Summary>& sums) {
    GroupStat st;
    std::vector<double> v;
    for (size_t i : g.runs)
        if (std::isfinite(q.get(sums[i]))) v.push_back(q.get(sums[i]));
    st.n = (int)v.size(), st.mean = stats::mean(v), st.sd = stats::stddev(v);
    if (!is_base) st.diff = stats::paired_difference(by_seed(g, runs, sums, q.get), by_seed(base, runs, sums, q.get));
    return st;
}

inline std::string mean_sd(const GroupStat& s, const char* f) {
    if (s.n == 0) return "-";
    return fmt(s.mean, f) + (s.n > 1 ? " ± " + fmt(s.sd, f) : "");
}
inline std::string signed_fmt(double v, const char* f) {
    return std::isfinite(v) ? (v >= 0 ? "+" : "") + fmt(v, f) : "-";
}
inline std::string diff_text(const stats::Paired& d, const char* f) {
    if (d.n == 0) return "no common seed";
    std::string s = signed_fmt(d.mean, f);
    if (d.n >= 2) s += " [" + signed_fmt(d.lo, f) + ", " + signed_fmt(d.hi, f) + "]";
    return s + " (n " + std::to_string(d.n) + ")";
}

inline size_t find_baseline(const std::vector<Group>& groups, const std::vector<RunLog>& runs,
                            const std::string& want) {
    if (!want.empty()) {
        for (size_t g = 0; g < groups.size(); g++) {
            if (groups[g].label == want) return g;
            for (size_t i : groups[g].runs)
                if (runs[i].name == want || runs[i].dir == want) return g;
        }
        std::string labels;
        for (const Group& g : groups) labels += (labels.empty() ? "'" : ", '") + g.label + "'";
        throw ConfigError("--baseline '" + want + "' is neither a group nor a run; the groups are " + labels);
    }
    for (size_t g = 0; g < groups.size(); g++)
        if (groups[g].uniform) return g;
    return 0;
}

// The groups' table (HTML), and the same as text for stdout.
inline std::string groups_table(const std::vector<Group>& groups, size_t base, const std::vector<Quantity>& qs,
                                const std::vector<RunLog>& runs, const std::vector<Summary>& sums, std::string& text) {
    std::string h = "<table>\n<tr><th>group</th><th>runs</th><th>seeds</th>";
    for (const Quantity& q : qs)
        h += "<th>" + xml_escape(q.name) + "<br/>mean ± std</th><th>" + xml_escape(q.name) +
             " − baseline<br/>"
             "mean [95% t interval] (n)</th>";
    h += "</tr>\n";
    char line[512];
    snprintf(line, sizeof line, "%-34s %4s %-10s", "group", "runs", "seeds");
    text = line;
    for (const Quantity& q : qs) {
        snprintf(line, sizeof line, " | %-17s %-36s", (q.name + " ± std").c_str(), "- baseline [95% t interval] (n)");
        text += line;
    }
    text += "\n";
    for (size_t gi = 0; gi < groups.size(); gi++) {
        const Group& g = groups[gi];
        std::string seeds;
        for (size_t i : g.runs) seeds += (seeds.empty() ? "" : ",") + (sums[i].seed.empty() ? "-" : sums[i].seed);
        h += "<tr><td><span style=\"color: " + g.colour + "\">■</span> " + xml_escape(g.label) +
             (gi == base ? " (baseline)" : "") + "</td><td>" + std::to_string(g.runs.size()) + "</td><td>" +
             xml_escape(seeds) + "</td>";
        snprintf(line, sizeof line, "%-34s %4zu %-10s",
                 (g.label + (gi == base ? " (baseline)" : "")).substr(0, 34).c_str(), g.runs.size(),
                 seeds.substr(0, 10).c_str());
        text += line;
        for (const Quantity& q : qs) {
            const GroupStat st = group_stat(g, groups[base], gi == base, q, runs, sums);
            const std::string d = gi == base ? "baseline" : diff_text(st.diff, q.format);
            h += "<td>" + mean_sd(st, q.format) + "</td><td>" + xml_escape(d) + "</td>";
            snprintf(line, sizeof line, " | %-17s %-36s", mean_sd(st, q.format).c_str(), d.c_str());
            text += line;
        }
        h += "</tr>\n";
        text += "\n";
    }
    return h + "</table>\n";
}

// Per group: the mean over its runs at each step all of them logged, with a band of +- one std.
inline svg::Chart group_chart(const std::vector<RunLog>& runs, const std::vector<Group>& groups,
                              const std::string& title, double RunStep::*yf, int smooth) {
    svg::Chart c;
    c.title = title, c.xlabel = "tokens", c.ylabel = "loss";
    for (const Group& g : groups) {
        std::map<long, std::vector<double>> at;
        std::map<long, long> tokens;
        for (size_t i : g.runs) {
            std::vector<double> y;
            for (const RunStep& st : runs[i].steps) y.push_back(st.*yf);
            y = smoothed(y, smooth);
            for (size_t k = 0; k < y.size(); k++)
                if (std::isfinite(y[k]))
                    at[runs[i].steps[k].step].push_back(y[k]), tokens[runs[i].steps[k].step] = runs[i].steps[k].tokens;
        }
        svg::Series s;
        s.name = g.label + " (" + std::to_string(g.runs.size()) + (g.runs.size() == 1 ? " run)" : " runs)");
        s.color = g.colour, s.markers = false;
        for (const auto& [step, v] : at) {
            if (v.size() != g.runs.size()) continue;
            const double m = stats::mean(v), sd = stats::stddev(v);
            s.x.push_back((double)tokens[step]), s.y.push_back(m);
            s.band_lo.push_back(std::isfinite(sd) ? m - sd : NAN),
                s.band_hi.push_back(std::isfinite(sd) ? m + sd : NAN);
        }
        c.series.push_back(s);
    }
    return c;
}

}  // namespace report
