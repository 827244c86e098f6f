// inspect/report_groups.h: report's numbers: formatting, the charts of steps, and the seed groups (runs whose
// records differ only in --seed) with their statistics (mean +- std; the difference against a baseline group,
// paired by seed, and by example where the runs' samples.jsonl allow, with its 95% t interval or why none, the
// smallest detectable effect and the seeds an --effect needs: studies/stats.h), as tables and charts.
// Does not: read run directories (run/run_log.h) or write the page (inspect/report.cpp).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "model/layer_columns.h"
#include "util/errors.h"
#include "inspect/svg.h"
#include "run/plan_views.h"
#include "run/run_log.h"
#include "run/model_flags.h"
#include "run/defaults.h"
#include "studies/stats.h"

namespace report {

using svg::xml_escape;

// A flag's name in labels: "--heads-schedule" -> "heads", "--lr" -> "lr".
inline std::string flag_label(const std::string& f) { return f == "--heads-schedule" ? "heads" : f.substr(2); }

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

// How a run is drawn in every per-run chart: its group's colour, and the dash pattern and marker shape of its group's
// index plus its place among the group's runs: the seeds of a group are told apart, and so are two groups' first
// runs whose lines coincide (the first group's first run is solid with round markers, the second group's dashed
// with squares, the dashes' gaps showing the line beneath).
struct RunStyle {
    std::string colour;
    size_t place = 0;  // the group's index + the run's place in it
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

// What a run's zero-shot result of one metric ("piqa acc") holds beside its value: its sampling error, for the
// differences between groups (studies/stats.h).
struct MetricInfo {
    double se = NAN;              // the result's standard error ("acc_stderr"), NaN where it has none
    long examples = 0;            // the examples it was computed on ("examples"; 0 unknown)
    bool after_training = false;  // eval.json's (the finished model's), to which RUN/samples.jsonl belongs
    std::vector<std::pair<long, double>> samples;  // (example index, 1 or 0) by index, from samples.jsonl; or empty
};

struct Summary {
    double last_train = NAN, last_val = NAN, best_val = NAN, median_tps = NAN;  // at or before final_step
    long final_step = 0;  // the step of the run's weights (model.bin's), else its last logged step
    long val_step = 0;    // the step last_val was measured at (0: none)
    long log_step = 0;    // the log's last step (past final_step: steps whose weights were lost)
    size_t final_at = 0;  // the index in RunLog::steps of the last step at or before final_step
    long skipped = 0;
    std::vector<std::string> missing;  // outputs the run lacks or that are not of its weights ("no samples.jsonl")
    std::string seed;                  // the record's --seed ("" without a record)
    std::vector<std::pair<std::string, double>> metrics;  // "hellaswag acc" -> value: the zero-shot results
    std::map<std::string, MetricInfo> info;               // the same keys: their standard errors and samples
    std::vector<std::string> warnings;                    // a samples.jsonl that could not be used, and why
    size_t group = 0;
    double metric(const std::string& k) const {
        for (const auto& m : metrics)
            if (m.first == k) return m.second;
        return NAN;
    }
};

// The zero-shot metrics of a run: per task, eval.json's result when there is one, else the last logged; `info`
// gets their standard errors and example counts.
inline std::vector<std::pair<std::string, double>> run_metrics(const RunLog& r,
                                                               std::map<std::string, MetricInfo>* info = nullptr) {
    std::vector<std::pair<std::string, double>> out;
    std::vector<std::string> tasks;
    for (const RunEval& e : r.evals)
        if (std::find(tasks.begin(), tasks.end(), e.task) == tasks.end()) tasks.push_back(e.task);
    for (const std::string& t : tasks) {
        const RunEval* pick = nullptr;
        for (const RunEval& e : r.evals)
            if (e.task == t && (!pick || e.after_training || !pick->after_training)) pick = &e;
        for (const char* k : {"acc", "acc_norm", "perplexity", "word_perplexity", "bits_per_byte"})
            if (std::isfinite(pick->get(k))) {
                out.push_back({t + " " + k, pick->get(k)});
                if (!info) continue;
                MetricInfo& mi = (*info)[out.back().first];
                mi.se = pick->get(std::string(k) + "_stderr"), mi.after_training = pick->after_training;
                const double n = pick->get("examples");
                mi.examples = n >= 1 && n < 1e12 ? (long)n : 0;
            }
    }
    return out;
}

// RUN/samples.jsonl (eval_zeroshot --log-samples): one JSON object per scored example, with "task", "index" (the
// example's 0-based index in its task), "acc" (1 or 0) and, where the task has it, "acc_norm" (a line without "acc",
// a rolling task's, is skipped). Its results pair
// two runs' differences per example. They are used for a metric only when they are eval.json's: as many examples
// as eval.json counts, whose mean is its value; otherwise (or for a line that is not such an object, an index
// twice) a warning says why, and the comparison falls back to eval.json's standard errors.
constexpr size_t kSamplesCap = (size_t)256 << 20;
inline void read_samples(const std::string& dir, Summary& m) {
    const std::string path = dir + "/samples.jsonl";
    if (access(path.c_str(), F_OK) != 0) return;
    auto unused = [&](const std::string& why) {
        m.warnings.push_back(path + ": " + why + "; eval.json's standard errors are used instead");
    };
    std::string text;
    try {
        text = read_text(path, (size_t)-1, kSamplesCap);
    } catch (const std::runtime_error& e) {
        return unused(e.what());
    }
    std::map<std::string, std::vector<std::pair<long, double>>> got;
    size_t line_no = 0;
    for (size_t at = 0; at < text.size();) {
        const size_t end = std::min(text.find('\n', at), text.size());
        const std::string_view line(text.data() + at, end - at);
        at = end + 1, line_no++;
        if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
        try {
            const json::Value o = json::parse(line);
            const std::string task = cut_text(json::str_field(o, "task"));  // as run_log.h keeps eval.json's
            const long index = json::int_field(o, "index");
            if (index < 0) throw json::Error("\"index\" is negative");
            if (!o.find("acc")) continue;  // a rolling task's line (wikitext: log-likelihoods, no choices to pair)
            for (const char* k : {"acc", "acc_norm"}) {
                const json::Value* v = o.find(k);
                if (!v && k[3] == '_') continue;  // acc_norm: only where the task has it
                const double x = v && v->kind == json::Value::Number ? std::strtod(v->str.c_str(), nullptr) : NAN;
                if (x != 0 && x != 1) throw json::Error(std::string("\"") + k + "\" is not 1 or 0");
                got[task + " " + k].push_back({index, x});
            }
        } catch (const json::Error& e) {
            return unused("line " + std::to_string(line_no) + " is not a scored example (" + e.what() + ")");
        }
    }
    for (auto& [key, v] : got) {
        std::sort(v.begin(), v.end());
        for (size_t i = 1; i < v.size(); i++)
            if (v[i].first == v[i - 1].first) {
                unused(key + " has example " + std::to_string(v[i].first) + " twice");
                v.clear();
                break;
            }
        if (v.empty()) continue;
        auto it = m.info.find(key);
        double s = 0;
        for (const auto& x : v) s += x.second;
        const double mean = s / v.size(), value = m.metric(key);
        char b[256];
        if (it == m.info.end() || !it->second.after_training) {
            unused(key + " has no result in eval.json to which its " + std::to_string(v.size()) + " examples belong");
        } else if ((long)v.size() != it->second.examples || !(std::fabs(mean - value) <= 1e-8)) {
            snprintf(b, sizeof b, "%s: %zu examples with mean %.6g, but eval.json has %ld with %.6g", key.c_str(),
                     v.size(), mean, it->second.examples, value);
            unused(b);
        } else {
            it->second.samples = std::move(v);
        }
    }
}

// What a run lacks of the files train_prism and study write, or holds of another step than its weights' (a study's
// eval that failed part way leaves eval.json without samples.jsonl; a run resumed after its eval has an older one).
inline void find_missing(const RunLog& r, Summary& m) {
    auto has = [&](const char* f) { return access((r.dir + "/" + f).c_str(), F_OK) == 0; };
    if (!has("model.bin") && r.has_record && r.record.status() == "done") m.missing.push_back("no model.bin");
    if (has("eval.json") && !has("samples.jsonl")) m.missing.push_back("eval.json without samples.jsonl");
    if (has("samples.jsonl") && !has("eval.json")) m.missing.push_back("samples.jsonl without eval.json");
    for (const RunEval& e : r.evals)
        if (e.after_training && e.step != m.final_step) {
            m.missing.push_back("eval.json scores step " + std::to_string(e.step) + ", the weights are at step " +
                                std::to_string(m.final_step));
            break;
        }
}

// A run's final figures are those of its weights: the last step at or before model.bin's (a log that goes on past
// the last checkpoint, after a crash, holds steps whose weights are lost), with the step of its last validation.
inline Summary summarize(const RunLog& r) {
    Summary m;
    m.log_step = r.steps.back().step;
    m.final_step = r.has_model && r.model_step > 0 ? std::min(r.model_step, m.log_step) : m.log_step;
    std::vector<double> tps;
    for (const RunStep& s : r.steps) {
        if (s.step > m.final_step) break;
        m.final_at = (size_t)(&s - r.steps.data());
        if (std::isfinite(s.val_loss))
            m.last_val = s.val_loss, m.val_step = s.step,
            m.best_val = std::isfinite(m.best_val) ? std::min(m.best_val, s.val_loss) : s.val_loss;
        if (std::isfinite(s.train_loss)) m.last_train = s.train_loss;
        tps.push_back(s.tokens_per_s);
        m.skipped += s.skipped;
    }
    m.median_tps = median(tps);
    if (r.has_record) m.seed = cut_text(r.record.arg("--seed"));
    m.metrics = run_metrics(r, &m.info);
    read_samples(r.dir, m);
    find_missing(r, m);
    return m;
}

struct Group {
    std::string label, colour;
    std::vector<size_t> runs;
    size_t same_flags = 0;  // the first group of the same flags (a group split from it by kind_of; else itself)
    std::vector<std::pair<std::string, std::string>> identity;  // the first run's record minus seed and the rest
    std::unordered_map<std::string, std::string> values;        // identity as a map (a flag's first value)
    bool uniform = false;                                       // every layer column uniform
    // A recorded flag's value: "-" when the record does not hold it, "on" for a switch.
    std::string value(const std::string& flag) const {
        auto it = values.find(flag);
        return it == values.end() ? "-" : it->second.empty() ? "on" : it->second;
    }
};

// The model a run is, as built: its model.bin's layer table, else the one its record's model flags build
// (run/model_flags.h's model_of_args); false when it has neither.
inline bool built_model(const RunLog& r, ModelConfig& c) {
    if (r.has_model) return c = r.cfg, true;
    if (!r.has_record) return false;
    try {
        c = model_of_args(r.record.args);
        return true;
    } catch (const std::exception&) {  // a record whose model does not build: no model to compare
        return false;
    }
}

// A group's label at most (each part's value is cut_text's at most): a label of every flag a hostile record differs
// in stays a line.
constexpr size_t kShownLabel = 1024;

// A recorded flag's value in a group's label, saying what the model is: a switch column's layer list as "no
// attention in layer 4" / "no RoPE in layers 2,4", or "attention in every layer" where the record lists none (or
// has no such flag, a record older than the column); any other flag as "NAME VALUE" ("window local:32,2:1"), a
// model flag of choices that the record holds only when it is not its default (--param) as "NAME DEFAULT".
inline std::string label_part(const Group& g, const std::string& flag) {
    for (const LayerColumn& col : layer_columns()) {
        if (!col.is_switch || canonical_flag(col) != flag) continue;
        auto it = g.values.find(flag);
        const std::string v = it == g.values.end() ? "" : it->second;
        if (v.empty()) return std::string(col.heading) + " in every layer";
        const bool one = v.find_first_not_of("0123456789") == std::string::npos;
        return std::string(col.label) + " in layer" + (one ? " " : "s ") + cut_text(v);
    }
    if (g.values.find(flag) == g.values.end()) {  // a model flag of choices whose record omits its default
        ModelSpec spec;                           // (--param sp): named by that default
        std::vector<Flag> flags;
        add_model_flags(flags, spec);
        if (const Flag* f = find_flag(flags, flag); f && f->kind == FlagKind::Choice && f->value && f->is_set)
            return cut_text(flag_label(flag)) + " " + cut_text(f->value());
    }
    return cut_text(flag_label(flag)) + " " + cut_text(g.value(flag));
}

// What makes a run what it is, for grouping: its record without --seed and without what a resume may change.
inline std::vector<std::pair<std::string, std::string>> identity_of(const RunLog& r) {
    std::vector<std::string> drop = may_change_on_resume();
    drop.push_back("--seed");
    return r.record.identity(drop);
}

// The flags the recorded groups differ in (held by some and not by others, or with two values), in the order the
// groups' records first list them. Linear in the records' sizes: each group's values are a hash map.
inline std::vector<std::string> differing_flags(const std::vector<Group>& groups) {
    std::vector<std::string> out;
    std::unordered_set<std::string> seen;
    const Group* first = nullptr;  // the first recorded group: a flag differs when some group's value is not its
    for (const Group& g : groups)
        if (!g.identity.empty() && !first) first = &g;
    for (const Group& g : groups)
        for (const auto& kv : g.identity) {
            if (!seen.insert(kv.first).second) continue;
            const std::string v = first->value(kv.first);
            for (const Group& h : groups)
                if (!h.identity.empty() && h.value(kv.first) != v) {
                    out.push_back(kv.first);
                    break;
                }
        }
    return out;
}

// What a run's figures stand for beyond its flags, which a resume changes without a new set of flags: the step of
// its weights (of the steps planned), how its last invocation ended, its lr schedule's branches (run.json's
// "branches") and its data (the shards' fingerprints). Runs of one set of flags that differ in any of these are
// not seeds of one arm: they join the identity as these pseudo-flags, so make_groups splits them and labels say
// how they differ ("steps 24 of 25, status stopped").
inline const std::vector<std::string>& kind_flags() {
    static const std::vector<std::string> k = {"--steps", "--status", "--lr branches", "--data"};
    return k;
}
inline std::vector<std::pair<std::string, std::string>> kind_of(const RunLog& r, const Summary& m) {
    const std::string planned = r.record.arg("--steps");
    std::string steps = std::to_string(m.final_step), branches, data;
    if (!planned.empty() && planned != steps) steps += " of " + planned;
    auto field = [](const json::Value& o, const char* k) {  // a string or number member, as the record has it
        const json::Value* v = o.find(k);
        return v && (v->kind == json::Value::String || v->kind == json::Value::Number) ? cut_text(v->str) : "-";
    };
    const json::Value* b = r.record.doc.find("branches");
    for (size_t k = 0; b && b->kind == json::Value::Array && k < b->arr.size(); k++)
        branches += (k ? "; " : "") + field(b->arr[k], "flag") + " " + field(b->arr[k], "old") + " to " +
                    field(b->arr[k], "new") + " at step " + field(b->arr[k], "step");
    if (const json::Value* d = r.record.doc.find("data"))
        data = "train " + field(*d, "train") + ", val " + field(*d, "val");
    return {{"--steps", steps},
            {"--status", r.record.status()},
            {"--lr branches", branches.empty() ? "none" : branches},
            {"--data", data.empty() ? "unrecorded" : data}};
}

// The pairs as a hash key.
inline std::string key_of(const std::vector<std::pair<std::string, std::string>>& id) {
    std::string key;
    for (const auto& [f, v] : id) key += json::quote(f) + "=" + json::quote(v) + "\n";
    return key;
}

inline std::vector<Group> make_groups(const std::vector<RunLog>& runs, std::vector<Summary>& sums) {
    std::vector<Group> groups;
    std::unordered_map<std::string, size_t> by_key, by_flags;
    for (size_t i = 0; i < runs.size(); i++) {
        const RunLog& r = runs[i];
        std::string key = "run " + r.dir, flags = key;
        std::vector<std::pair<std::string, std::string>> id;
        if (r.has_record) {
            id = identity_of(r);
            flags = key_of(id);
            for (const auto& kv : kind_of(r, sums[i])) id.push_back(kv);
            key = key_of(id);
        }
        const auto [it, fresh] = by_key.emplace(key, groups.size());
        if (fresh) {
            Group g;
            g.same_flags = by_flags.emplace(flags, groups.size()).first->second;
            g.identity = id;
            for (const auto& [f, v] : id) g.values.emplace(f, v);
            ModelConfig c;
            g.uniform = built_model(r, c) && is_uniform(c);  // model/layer_columns.h's one predicate
            groups.push_back(std::move(g));
        }
        groups[it->second].runs.push_back(i);
        sums[i].group = it->second;
    }
    // Labels: the flags whose values tell the recorded groups apart ("heads prism, widths x"); a group without a
    // record is its run's name; with one group, the runs' common name.
    const std::vector<std::string> differ = differing_flags(groups);
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
        for (const std::string& f : differ) g.label += (g.label.empty() ? "" : ", ") + label_part(g, f);
        g.label = cut_text(g.label, kShownLabel);
    }
    std::unordered_set<std::string> labels;  // labels are names: make them unique
    for (size_t gi = 0; gi < groups.size(); gi++)
        if (!labels.insert(groups[gi].label).second) labels.insert(groups[gi].label += " #" + std::to_string(gi + 1));
    return groups;
}

// One sentence per set of groups of the same flags that make_groups split by kind_of: which runs, and in what they
// differ, so that neither the page nor the terminal compares them as seeds of one arm without a word.
inline std::vector<std::string> split_notes(const std::vector<Group>& groups, const std::vector<RunLog>& runs) {
    std::vector<std::string> notes;
    std::vector<std::vector<size_t>> sets(groups.size());  // by the first group of their flags: linear
    for (size_t gi = 0; gi < groups.size(); gi++) sets[groups[gi].same_flags].push_back(gi);
    for (size_t first = 0; first < groups.size(); first++) {
        const std::vector<size_t>& set = sets[first];
        if (set.size() < 2) continue;
        std::string names, how;
        for (size_t gi : set)
            for (size_t i : groups[gi].runs) names += (names.empty() ? "" : ", ") + runs[i].name;
        for (const std::string& f : kind_flags()) {
            std::string vals;
            for (size_t gi : set) vals += (vals.empty() ? "" : " / ") + groups[gi].value(f);
            if (std::any_of(set.begin(), set.end(),
                            [&](size_t gi) { return groups[gi].value(f) != groups[first].value(f); }))
                how += (how.empty() ? "" : "; ") + flag_label(f) + " " + vals;
        }
        notes.push_back("the runs " + cut_text(names, kShownLabel) +
                        " have the same flags (seeds aside) but differ in " + how + ": shown as " +
                        std::to_string(set.size()) +
                        " groups, not as seeds of one; each run's final figures are its weights' step's");
    }
    return notes;
}

// A group's runs by seed (runs without a seed are keyed by their name, so they never pair).
inline std::map<std::string, size_t> by_seed(const Group& g, const std::vector<RunLog>& runs,
                                             const std::vector<Summary>& sums) {
    std::map<std::string, size_t> m;
    for (size_t i : g.runs) m[sums[i].seed.empty() ? "run " + runs[i].dir : sums[i].seed] = i;
    return m;
}

struct Quantity {
    enum Unit { Nats, Accuracy, Other };
    std::string name;  // "final val loss", "hellaswag acc"
    std::function<double(const Summary&)> get;
    const char* format;
    Unit unit = Other;
    bool eval = false;  // a zero-shot metric (Summary::info has its standard error and samples)
    std::string title() const {
        return name + (unit == Nats ? " (nats)" : unit == Accuracy ? " (fraction of examples)" : "");
    }
};

inline std::vector<Quantity> quantities(const std::vector<Summary>& sums) {
    std::vector<Quantity> q = {{"final val loss", [](const Summary& s) { return s.last_val; }, "%.4f", Quantity::Nats},
                               {"best val loss", [](const Summary& s) { return s.best_val; }, "%.4f", Quantity::Nats}};
    std::vector<std::string> names;
    for (const Summary& s : sums)
        for (const auto& m : s.metrics)
            if (std::find(names.begin(), names.end(), m.first) == names.end()) names.push_back(m.first);
    for (const std::string& n : names) {
        const bool acc = n.size() > 4 && (n.compare(n.size() - 4, 4, " acc") == 0 ||
                                          (n.size() > 9 && n.compare(n.size() - 9, 9, " acc_norm") == 0));
        q.push_back({n, [n](const Summary& s) { return s.metric(n); }, "%.4f",
                     acc ? Quantity::Accuracy : Quantity::Other, true});
    }
    return q;
}

// report --effect and --effect-acc: the effect to find the seeds for, per unit (0: none).
struct Effects {
    double nats = 0, acc = 0;
    double of(const Quantity& q) const {
        return q.unit == Quantity::Nats ? nats : q.unit == Quantity::Accuracy ? acc : 0;
    }
};

struct GroupStat {
    int n = 0;
    double mean = NAN, sd = NAN;
    stats::Comparison diff;  // against the baseline (n 0 for the baseline itself)
};

// The difference g - base of one quantity over the seeds both have, by the first method the runs' data allow:
// paired per example (every paired run's samples.jsonl, the same examples), eval.json's standard errors (every
// paired run has one), seeds only (a validation loss, or a metric without a standard error).
inline stats::Comparison compare(const Group& g, const Group& base, const Quantity& q, const std::vector<RunLog>& runs,
                                 const std::vector<Summary>& sums) {
    std::vector<std::pair<size_t, size_t>> pairs;  // (g's run, base's run) per common seed with both values
    const std::map<std::string, size_t> b = by_seed(base, runs, sums);
    for (const auto& [seed, i] : by_seed(g, runs, sums)) {
        auto it = b.find(seed);
        if (it != b.end() && std::isfinite(q.get(sums[i])) && std::isfinite(q.get(sums[it->second])))
            pairs.push_back({i, it->second});
    }
    std::vector<double> d;
    for (const auto& [i, j] : pairs) d.push_back(q.get(sums[i]) - q.get(sums[j]));
    if (!q.eval || pairs.empty()) return stats::seeds_only(d);
    auto info = [&](size_t run) -> const MetricInfo& { return sums[run].info.at(q.name); };
    // Paired per example: every run's samples, on the same examples as the first's.
    const std::vector<std::pair<long, double>>& first = info(pairs[0].first).samples;
    bool same = first.size() >= 2;
    for (const auto& [i, j] : pairs)
        for (size_t r : {i, j}) {
            const auto& s = info(r).samples;
            same = same && s.size() == first.size() &&
                   std::equal(s.begin(), s.end(), first.begin(),
                              [](const auto& x, const auto& y) { return x.first == y.first; });
        }
    if (same) {
        std::vector<std::vector<double>> x;
        for (const auto& [i, j] : pairs) {
            const auto &a = info(i).samples, &c = info(j).samples;
            x.emplace_back(a.size());
            for (size_t k = 0; k < a.size(); k++) x.back()[k] = a[k].second - c[k].second;
        }
        return stats::paired_by_example(x);
    }
    std::vector<double> v;
    long examples = std::numeric_limits<long>::max();
    for (const auto& [i, j] : pairs) {
        const MetricInfo &a = info(i), &c = info(j);
        if (!(a.se >= 0) || !(c.se >= 0) || a.examples < 2 || c.examples < 2) break;
        v.push_back(a.se * a.se + c.se * c.se);
        examples = std::min({examples, a.examples, c.examples});
    }
    if (v.size() == pairs.size()) return stats::with_std_errors(d, v, examples);
    stats::Comparison s = stats::seeds_only(d);
    s.method += "; the eval's own sampling error is not included (no standard error for every run)";
    return s;
}

inline GroupStat group_stat(const Group& g, const Group& base, bool is_base, const Quantity& q,
                            const std::vector<RunLog>& runs, const std::vector<Summary>& sums) {
    GroupStat st;
    std::vector<double> v;
    for (size_t i : g.runs)
        if (std::isfinite(q.get(sums[i]))) v.push_back(q.get(sums[i]));
    st.n = (int)v.size(), st.mean = stats::mean(v), st.sd = stats::stddev(v);
    if (!is_base) st.diff = compare(g, base, q, runs, sums);
    return st;
}

inline std::string mean_sd(const GroupStat& s, const char* f) {
    if (s.n == 0) return "-";
    return fmt(s.mean, f) + (s.n > 1 ? " ± " + fmt(s.sd, f) : "");
}
inline std::string signed_fmt(double v, const char* f) {
    return std::isfinite(v) ? (v >= 0 ? "+" : "") + fmt(v, f) : "-";
}
// The difference and its n: "-0.0625 (n 2)".
inline std::string diff_text(const stats::Comparison& d, const char* f) {
    if (d.n == 0) return "no common seed";
    return signed_fmt(d.mean, f) + " (n " + std::to_string(d.n) + ")";
}
// The interval, or why there is none.
inline std::string interval_text(const stats::Comparison& d, const char* f) {
    if (!d.why.empty()) return d.why;
    return "[" + signed_fmt(d.lo, f) + ", " + signed_fmt(d.hi, f) + "]";
}
// "±0.0210 nats; seeds for 0.014: 7": the smallest detectable effect, and the seeds an --effect needs. From two
// seeds the spread rests on one degree of freedom: the figure is marked rough ("≈±0.31 nats (rough: 2 seeds)").
inline std::string detectable_text(const stats::Comparison& d, const Quantity& q, double effect) {
    const std::string unit = q.unit == Quantity::Nats ? " nats" : "";
    std::string s;
    if (std::isfinite(d.detectable) && d.n == 2) s = "≈±" + fmt(d.detectable, q.format) + unit + " (rough: 2 seeds)";
    else if (std::isfinite(d.detectable)) s = "±" + fmt(d.detectable, q.format) + unit;
    else if (d.n < 2) s = "not estimable (n " + std::to_string(d.n) + ")";
    else if (d.spread.A == 0) s = "not estimable (zero spread)";
    else s = "not estimable";
    if (!(effect > 0)) return s;
    char e[32];
    snprintf(e, sizeof e, "%g", effect);
    const long n = stats::seeds_needed(d.spread, effect);
    s += std::string("; seeds for ") + e + ": ";
    if (n == stats::kNotEstimable) return s + "not estimable";
    if (n == stats::kUnreachable)
        return s + "none suffice (the " + std::to_string(d.examples) + " eval examples alone hide it)";
    if (n > stats::kMaxSeeds) return s + "over " + std::to_string(stats::kMaxSeeds);
    return s + std::to_string(n);
}

inline bool as_number(const std::string& s, double& x) {
    char* end = nullptr;
    x = std::strtod(s.c_str(), &end);
    return !s.empty() && *end == 0 && std::isfinite(x);
}

// Whether `want` names the group labelled `label`: the same parts ("heads uniform", "lr 0.003") in order, a value
// that reads as a number in both compared as a number, so "heads uniform, lr 3e-3" names "heads uniform, lr 0.003".
inline bool names_label(const std::string& want, const std::string& label) {
    if (want == label) return true;
    auto parts = [](const std::string& s) {
        std::vector<std::string> v;
        for (size_t a = 0; a <= s.size();) {
            size_t b = s.find(',', a);
            if (b == std::string::npos) b = s.size();
            const size_t x = s.find_first_not_of(' ', a), y = s.find_last_not_of(' ', b - 1);
            v.push_back(x < b && y != std::string::npos && y >= x ? s.substr(x, y - x + 1) : "");
            a = b + 1;
        }
        return v;
    };
    const std::vector<std::string> w = parts(want), l = parts(label);
    if (w.size() != l.size()) return false;
    for (size_t i = 0; i < w.size(); i++) {
        const size_t ws = w[i].rfind(' '), ls = l[i].rfind(' ');
        double x, y;
        if (w[i] == l[i]) continue;
        if (ws == std::string::npos || ls == std::string::npos || w[i].substr(0, ws) != l[i].substr(0, ls) ||
            !as_number(w[i].substr(ws + 1), x) || !as_number(l[i].substr(ls + 1), y) || x != y)
            return false;
    }
    return true;
}

// The baseline group, and in `why` how it was chosen. --baseline NAME: the group NAME names (names_label), or the
// group of the run NAME. Default: the group whose model is the uniform one (every layer column at its uniform
// value, on the model as built: is_uniform); where several are (a sweep: the uniform arm at each lr), the one
// with the lowest final validation loss averaged over its runs, so that the differences measure the models, each
// arm's best value against the uniform arm's; else the first group.
inline size_t find_baseline(const std::vector<Group>& groups, const std::vector<RunLog>& runs,
                            const std::vector<Summary>& sums, const std::string& want, std::string& why) {
    if (!want.empty()) {
        for (size_t g = 0; g < groups.size(); g++)
            if (names_label(want, groups[g].label)) return why = "--baseline", g;
        for (size_t g = 0; g < groups.size(); g++)
            for (size_t i : groups[g].runs)
                if (runs[i].name == want || runs[i].dir == want) return why = "--baseline, the group of that run", g;
        std::string labels;
        for (const Group& g : groups) labels += (labels.empty() ? "'" : ", '") + g.label + "'";
        throw ConfigError("--baseline '" + want + "' is neither a group nor a run; the groups are " + labels);
    }
    std::vector<size_t> uniform;
    for (size_t g = 0; g < groups.size(); g++)
        if (groups[g].uniform) uniform.push_back(g);
    if (uniform.empty()) return why = "the first group: none has the uniform model; --baseline chooses another", 0;
    if (uniform.size() == 1) return why = "the group of the uniform model; --baseline chooses another", uniform[0];
    auto mean_val = [&](size_t g) {
        std::vector<double> v;
        for (size_t i : groups[g].runs)
            if (std::isfinite(sums[i].last_val)) v.push_back(sums[i].last_val);
        return v.empty() ? INFINITY : stats::mean(v);
    };
    size_t best = uniform[0];
    for (size_t g : uniform)
        if (mean_val(g) < mean_val(best)) best = g;
    why = "of the " + std::to_string(uniform.size()) +
          " groups of the uniform model, the one with the lowest final validation loss (mean over its runs): the "
          "uniform model at its best value, so that the differences measure the models, not the swept flag; "
          "--baseline chooses another";
    return best;
}

// The characters of a UTF-8 string on screen (continuation bytes aside).
inline size_t display_width(const std::string& s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
}

// Rows of cells as text: each column as wide as its widest cell (no cell is cut), two spaces apart, indented by two.
inline std::string text_table(const std::vector<std::vector<std::string>>& rows) {
    std::vector<size_t> w;
    for (const auto& r : rows)
        for (size_t c = 0; c < r.size(); c++) {
            if (w.size() <= c) w.push_back(0);
            w[c] = std::max(w[c], display_width(r[c]));
        }
    std::string t;
    for (const auto& r : rows) {
        std::string line = " ";
        for (size_t c = 0; c < r.size(); c++)
            line += " " + r[c] + (c + 1 < r.size() ? std::string(w[c] - display_width(r[c]) + 1, ' ') : "");
        while (!line.empty() && line.back() == ' ') line.pop_back();
        t += line + "\n";
    }
    return t;
}

// A comparison's cells, as the groups' and the sweeps' tables show them: the difference (n), its interval (or why
// none), SE and the detectable effect (with the seeds --effect needs).
inline std::vector<std::string> comparison_cells(const stats::Comparison& d, const Quantity& q, double effect) {
    return {diff_text(d, q.format), d.n ? interval_text(d, q.format) : "", fmt(d.se, q.format),
            d.n ? detectable_text(d, q, effect) : ""};
}

// The groups' tables (HTML), one per quantity, each with a footnote stating how its differences' intervals were
// estimated (numbered when the comparisons of one quantity differ in it), and the same as text for stdout.
inline std::string groups_table(const std::vector<Group>& groups, size_t base, const std::vector<Quantity>& qs,
                                const std::vector<RunLog>& runs, const std::vector<Summary>& sums,
                                const Effects& effects, std::string& text) {
    std::string h;
    text.clear();
    for (const Quantity& q : qs) {
        const double effect = effects.of(q);
        std::vector<GroupStat> st;
        std::vector<std::string> methods;
        for (size_t gi = 0; gi < groups.size(); gi++) {
            st.push_back(group_stat(groups[gi], groups[base], gi == base, q, runs, sums));
            const std::string& m = st.back().diff.method;
            if (gi != base && st.back().diff.n > 0 && std::find(methods.begin(), methods.end(), m) == methods.end())
                methods.push_back(m);
        }
        auto mark = [&](const stats::Comparison& d) {
            if (methods.size() < 2) return std::string();
            return " [" + std::to_string(std::find(methods.begin(), methods.end(), d.method) - methods.begin() + 1) +
                   "]";
        };
        h += "<h3>" + xml_escape(q.title()) +
             "</h3>\n<table>\n<tr><th>group</th><th>runs</th><th>seeds</th>"
             "<th>mean ± std</th><th>− baseline (n)</th><th>95% interval</th><th>SE</th>"
             "<th>detectable at 95%/80%</th></tr>\n";
        std::vector<std::vector<std::string>> rows = {
            {"group", "runs", "seeds", "mean ± std", "− baseline (n)", "95% interval", "SE", "detectable at 95%/80%"}};
        for (size_t gi = 0; gi < groups.size(); gi++) {
            const Group& g = groups[gi];
            const stats::Comparison& d = st[gi].diff;
            std::string seeds;
            for (size_t i : g.runs) seeds += (seeds.empty() ? "" : ",") + (sums[i].seed.empty() ? "-" : sums[i].seed);
            seeds = cut_text(seeds);
            const std::string label = g.label + (gi == base ? " (baseline)" : "");
            h += "<tr><td class=\"label\"><span style=\"color: " + g.colour + "\">■</span> " + xml_escape(label) +
                 "</td><td>" + std::to_string(g.runs.size()) + "</td><td>" + xml_escape(seeds) + "</td><td>" +
                 mean_sd(st[gi], q.format) + "</td>";
            rows.push_back({label, std::to_string(g.runs.size()), seeds, mean_sd(st[gi], q.format)});
            if (gi == base) {
                h += "<td colspan=\"4\">baseline</td></tr>\n";
                rows.back().push_back("baseline");
                continue;
            }
            std::vector<std::string> cells = comparison_cells(d, q, effect);
            if (d.n) cells[1] += mark(d);
            for (const std::string& c : cells) h += "<td>" + xml_escape(c) + "</td>", rows.back().push_back(c);
            h += "</tr>\n";
        }
        h += "</table>\n";
        text += q.title() + "\n" + text_table(rows);
        std::string note;
        for (size_t k = 0; k < methods.size(); k++)
            note += (methods.size() > 1 ? (k ? "; [" : "[") + std::to_string(k + 1) + "] " : "") + methods[k];
        if (!note.empty()) {
            h += "<p class=\"note\">− baseline: " + xml_escape(note) + ".</p>\n";
            text += "  − baseline: " + note + ".\n";
        }
        text += "\n";
    }
    return h;
}

// Per group: the mean over its runs at each step all of them logged, with a band of +- one std.
inline svg::Chart group_chart(const std::vector<RunLog>& runs, const std::vector<Group>& groups,
                              const std::string& title, double RunStep::*yf, int smooth) {
    svg::Chart c;
    c.title = title, c.xlabel = "tokens", c.ylabel = "loss";
    for (size_t gi = 0; gi < groups.size(); gi++) {
        const Group& g = groups[gi];
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
        s.color = g.colour, s.dash = svg::dash(gi), s.marker = (int)gi;  // coinciding groups stay told apart
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
