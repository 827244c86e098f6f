// analyze: what the Prism and Xformer papers measure inside a model, per layer, for one or more checkpoints.
//
//   ./analyze out/tiny/model.bin                                   # a table
//   ./analyze runs/uniform runs/prism runs/x -o runs/analyze       # ... and analyze.json + one SVG chart per
//                                                                  # measurement, the three overlaid
//
// Each checkpoint (model.bin, or RUN_DIR for RUN_DIR/model.bin) runs on the fp32 CPU reference over --sequences
// sequences of T tokens from the start of the first shard --data matches (the validation shard by default), and
// inspect/analysis.h measures: attention distance and entropy per layer and head, the distance against the layer's
// window (reach, span use, near-half and beyond-local mass), the logit lens (loss and top-1 agreement with the
// model's own prediction), the normalised matrix entropy of each layer's output, and the SwiGLU activation density.
// Every layer shape runs (KV groups, windows, layers without attention or MLP: those show "-" where a measurement
// needs the missing sub-block). inspect/analysis.h's header defines each one exactly.
// Output: a table per checkpoint on stdout; --json FILE; -o DIR writes DIR/analyze.json and DIR/<measurement>.svg
// (layers on x, one line per checkpoint; `report` shows the charts it finds in RUN_DIR/analyze/ and --analyze DIR).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "model/layer_columns.h"
#include "inspect/analysis.h"
#include "run/checkpoint.h"
#include "run/cli.h"
#include "dataloader.h"
#include "util/io.h"
#include "util/json.h"
#include "run/plan_views.h"
#include "run/step_dirs.h"
#include "util/fs.h"
#include "inspect/svg.h"
#include "run/run_record.h"

namespace {

struct Options {
    std::vector<std::string> models, labels;
    std::string data = "data/default/*_val_*.bin", json, out;
    int sequences = 8, T = 0;
    double tau = 0.1;
};

std::vector<Flag> make_flags(Options& o) {
    return {
        path_flag("--data", "GLOB", "token shards; sequences are read from the start of the first (default {default})",
                  o.data),
        number_flag("--sequences", "N", "sequences of T tokens to run (default {default})", o.sequences, 1, 1 << 20),
        number_flag("--seq-len", "T", "tokens per sequence (default: each model's context T)", o.T, 2, 1 << 20),
        make_flag("--labels", "LIST",
                  "comma-separated names of the checkpoints, in order (default: their run "
                  "directories)",
                  [&o](const std::string& v) {
                      o.labels.clear();
                      for (size_t a = 0; a <= v.size();) {
                          size_t b = v.find(',', a);
                          if (b == std::string::npos) b = v.size();
                          o.labels.push_back(trim(v.substr(a, b - a)));
                          a = b + 1;
                      }
                  }),
        number_flag("--density-threshold", "TAU", "SwiGLU density counts |u| > TAU x RMS(u) (default {default})", o.tau,
                    0, 100),
        path_flag("--json", "FILE", "also write every number as JSON", o.json),
        path_flag("-o, --out", "DIR", "write DIR/analyze.json and one SVG chart per measurement (report shows them)",
                  o.out),
    };
}

struct Checkpoint {
    std::string label, path;
    long step = 0;
    ModelConfig cfg;
    int T = 0;
    std::string shard;
    std::string run;  // the run record's summary (RUN_DIR/run.json), "" without one
    analysis::ModelStats stats;
};

// "uniform" for runs/uniform/model.bin, "uniform@100" for runs/uniform/step_00000100/model.bin.
std::string default_label(const std::string& path) {
    std::vector<std::string> parts;
    for (size_t a = 0; a < path.size();) {
        size_t b = path.find('/', a);
        if (b == std::string::npos) b = path.size();
        if (b > a && path.substr(a, b - a) != ".") parts.push_back(path.substr(a, b - a));
        a = b + 1;
    }
    if (parts.size() < 2) return parts.empty() ? path : parts.back();
    const std::string parent = parts[parts.size() - 2];
    const long step = step_of_dir_name(parent);
    if (step >= 0 && parts.size() >= 3) return parts[parts.size() - 3] + "@" + std::to_string(step);
    return parent;
}

std::string fmt(double v, const char* f) {
    if (!std::isfinite(v)) return "-";
    char b[64];
    snprintf(b, sizeof b, f, v);
    return b;
}

// A layer's attention in one word: its window, "global", or "none" (no attention sub-block).
std::string window_word(const analysis::LayerStats& l) {
    return !l.attention ? "none" : l.window ? std::to_string(l.window) : "global";
}

void print_table(const Checkpoint& k, const Options& o) {
    const analysis::ModelStats& m = k.stats;
    printf("== %s: %s (step %ld)\n", k.label.c_str(), k.path.c_str(), k.step);
    for (const LayerColumn& col : layer_columns())  // every column the model uses (model/layer_columns.h)
        if (col.always_shown) printf("%s", layer_column_line(col, k.cfg).c_str());
    printf("%s", layer_column_lines(k.cfg).c_str());
    if (!k.run.empty()) printf("   run: %s\n", k.run.c_str());
    printf("   %ld sequences x %d tokens from %s; the model's loss %.4f\n", m.sequences, k.T, k.shard.c_str(), m.loss);
    // The layer's shape (run/plan_views.h's layer_table: the columns it uses, "-" for a sub-block it lacks), then
    // the measurements.
    const std::vector<LayerTableColumn> table = layer_table(k.cfg, shown_columns({&k.cfg}));
    auto wide = [](const LayerTableColumn& col) { return (int)column_width(col); };
    auto shape = [&](int l) {  // l from 1; 0: the embedding's row
        std::string s;
        for (const LayerTableColumn& col : table) {
            char cell[64];
            snprintf(cell, sizeof cell, " %*s", wide(col), l ? col.cells[l - 1].c_str() : "-");
            s += cell;
        }
        return s;
    };
    printf("%5s", "layer");
    for (const LayerTableColumn& col : table) printf(" %*s", wide(col), col.heading.c_str());
    printf(" %10s %10s %10s %10s %10s %6s %8s\n", "attn dist", "attn ent", "lens loss", "lens top1", "matrix H", "rank",
           "density");
    for (const analysis::LayerStats& l : m.layers) {
        if (l.layer == 0) {
            printf("%5s%s %10s %10s %10s %10s %10s %6s %8s\n", "emb", shape(0).c_str(), "-", "-",
                   fmt(l.lens_loss, "%.4f").c_str(), fmt(l.lens_top1, "%.4f").c_str(), "-", "-", "-");
            continue;
        }
        printf("%5d%s %10s %10s %10s %10s %10s %6ld %8s\n", l.layer, shape(l.layer).c_str(),
               fmt(l.distance_mean, "%.3f").c_str(), fmt(l.entropy_mean, "%.4f").c_str(),
               fmt(l.lens_loss, "%.4f").c_str(), fmt(l.lens_top1, "%.4f").c_str(),
               fmt(l.matrix.normalized, "%.4f").c_str(), l.matrix.numerical_rank,
               l.mlp ? fmt(l.density, "%.4f").c_str() : "no MLP");
    }
    // The distance against what each layer can see (analysis.h): a researcher's question about a local/global
    // model is whether local layers fill their window and whether global layers reach past it.
    const std::string wmin = std::to_string(m.local_window), beyond = "beyond " + wmin;
    printf(
        "attention against the window: reach = mean farthest visible distance, use = dist / reach (1/2: uniform "
        "over what the layer sees), near half = mass within half its span%s\n",
        m.local_window ? (", " + beyond + " = mass at distances a window of " + wmin + " cannot see").c_str() : "");
    printf("%5s %7s %10s %10s %6s %9s", "layer", "window", "attn dist", "reach", "use", "near half");
    if (m.local_window) printf(" %11s", beyond.c_str());
    printf("\n");
    for (const analysis::LayerStats& l : m.layers) {
        if (l.layer == 0) continue;
        if (!l.attention) {
            printf("%5d %7s %10s\n", l.layer, "none", "(no attention sub-block)");
            continue;
        }
        printf("%5d %7s %10s %10s %6s %9s", l.layer, window_word(l).c_str(), fmt(l.distance_mean, "%.3f").c_str(),
               fmt(l.reach, "%.2f").c_str(), fmt(l.span_use_mean, "%.3f").c_str(),
               fmt(l.near_mass_mean, "%.4f").c_str());
        if (m.local_window) printf(" %11s", fmt(l.beyond_local_mean, "%.4f").c_str());
        printf("\n");
    }
    printf("attention distance per head (tokens):\n");
    for (const analysis::LayerStats& l : m.layers) {
        if (l.layer == 0) continue;
        printf("%5d:", l.layer);
        for (double x : l.distance) printf(" %.2f", x);
        printf("%s\n", l.attention ? "" : " (no attention)");
    }
    (void)o;
}

std::string json_list(const std::vector<double>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); i++) s += (i ? ", " : "") + json::number(v[i], "%.6g");
    return s + "]";
}
std::string json_ints(const std::vector<int>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); i++) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
}

std::string to_json(const std::vector<Checkpoint>& ks, const Options& o) {
    std::string s = "{\"density_threshold\": " + json::number(o.tau, "%g") + ",\n \"definitions\": {" +
                    "\"attention_distance\": \"mean over query positions i of sum_j a_ij (i - j), in tokens; layer: "
                    "mean over heads; null without attention\", \"window\": \"key j visible to query i iff i - window "
                    "< j <= i; 0: global\", \"reach\": \"mean over queries of the farthest visible distance min(i, "
                    "window - 1) (global: i)\", \"attention_span_use\": \"attention_distance / reach\", "
                    "\"near_half_mass\": \"fraction of attention mass at distance < min(window, T) / 2 (global: T / "
                    "2)\", \"beyond_local_mass\": \"fraction of attention mass at distance >= local_window, the "
                    "model's smallest window below T (null without one)\", \"attention_entropy\": \"mean over query "
                    "positions of -sum_j a_ij ln a_ij, "
                    "nats\", \"lens\": \"stream after layer l through the final norm (first Df coordinates) and the "
                    "head (first d); layer 0 = after the embedding; top1 = agreement with the model's argmax\", "
                    "\"matrix_entropy\": \"H(s / sum s) / ln min(N - 1, w) over the singular values s of the "
                    "column-centred (N, w_l) layer output\", \"swiglu_density\": \"fraction of |u| > tau RMS(u), "
                    "RMS per sequence and layer\"},\n \"checkpoints\": [";
    for (size_t i = 0; i < ks.size(); i++) {
        const Checkpoint& k = ks[i];
        const analysis::ModelStats& m = k.stats;
        s += std::string(i ? ",\n  " : "\n  ") + "{\"label\": " + json::quote(k.label) +
             ", \"path\": " + json::quote(k.path) + ", \"step\": " + std::to_string(k.step) +
             ", \"d\": " + std::to_string(k.cfg.d) + ", \"widths\": " + json_ints(layer_widths(k.cfg)) +
             ", \"heads\": " + json_ints(layer_heads(k.cfg)) +
             (k.run.empty() ? "" : ", \"run\": " + json::quote(k.run)) + ", \"data\": " + json::quote(k.shard) +
             ", \"kv_heads\": " + json_ints(layer_kv_heads(k.cfg)) +
             ", \"mlp_hidden\": " + json_ints(layer_hidden(k.cfg)) +
             ", \"windows\": " + json_ints(layer_windows(k.cfg)) +
             ", \"local_window\": " + (m.local_window ? std::to_string(m.local_window) : "null") +
             ", \"sequences\": " + std::to_string(m.sequences) + ", \"T\": " + std::to_string(k.T) +
             ", \"loss\": " + json::number(m.loss, "%.6f") +
             ",\n   \"embedding\": {\"lens_loss\": " + json::number(m.layers[0].lens_loss, "%.6f") +
             ", \"lens_top1\": " + json::number(m.layers[0].lens_top1, "%.6f") + "},\n   \"layers\": [";
        for (size_t l = 1; l < m.layers.size(); l++) {
            const analysis::LayerStats& x = m.layers[l];
            s += std::string(l > 1 ? ",\n    " : "\n    ") + "{" + layer_json_members(k.cfg, x.layer - 1) +
                 ", \"attention_distance\": " + json::number(x.distance_mean, "%.6g") +
                 ", \"attention_distance_per_head\": " + json_list(x.distance) +
                 ", \"reach\": " + json::number(x.reach, "%.6g") +
                 ", \"attention_span_use\": " + json::number(x.span_use_mean, "%.6g") +
                 ", \"attention_span_use_per_head\": " + json_list(x.span_use) +
                 ", \"near_half_mass\": " + json::number(x.near_mass_mean, "%.6g") +
                 ", \"near_half_mass_per_head\": " + json_list(x.near_mass) +
                 ", \"beyond_local_mass\": " + json::number(x.beyond_local_mean, "%.6g") +
                 ", \"beyond_local_mass_per_head\": " + json_list(x.beyond_local) +
                 ", \"attention_entropy\": " + json::number(x.entropy_mean, "%.6g") +
                 ", \"attention_entropy_per_head\": " + json_list(x.entropy) +
                 ", \"lens_loss\": " + json::number(x.lens_loss, "%.6f") +
                 ", \"lens_top1\": " + json::number(x.lens_top1, "%.6f") +
                 ", \"matrix_entropy\": " + json::number(x.matrix.normalized, "%.6f") +
                 ", \"matrix_entropy_nats\": " + json::number(x.matrix.entropy, "%.6f") +
                 ", \"rank_bound\": " + std::to_string(x.matrix.rank_bound) +
                 ", \"numerical_rank\": " + std::to_string(x.matrix.numerical_rank) +
                 ", \"swiglu_density\": " + json::number(x.density, "%.6f") + "}";
        }
        s += "]}";
    }
    return s + "\n]}\n";
}

// One chart per measurement: layers on x, a line per checkpoint.
std::vector<std::pair<std::string, svg::Chart>> charts(const std::vector<Checkpoint>& ks) {
    struct Measure {
        const char* file;
        const char* title;
        const char* ylabel;
        bool lens, unit;  // lens: layer 0 (the embedding) too; unit: y in [0, 1]
        std::function<double(const analysis::LayerStats&)> get;
        std::function<std::vector<double>(const analysis::LayerStats&)> per_head;
    };
    const std::vector<Measure> ms = {
        {"attention_distance", "Attention distance (line: mean over heads; dots: heads)", "tokens", false, false,
         [](const analysis::LayerStats& l) { return l.distance_mean; },
         [](const analysis::LayerStats& l) { return l.distance; }},
        {"attention_span_use", "Attention distance / reach (the mean farthest distance the layer's window lets it see)",
         "fraction of reach", false, true, [](const analysis::LayerStats& l) { return l.span_use_mean; },
         [](const analysis::LayerStats& l) { return l.span_use; }},
        {"attention_entropy", "Attention entropy (line: mean over heads; dots: heads)", "nats", false, false,
         [](const analysis::LayerStats& l) { return l.entropy_mean; },
         [](const analysis::LayerStats& l) { return l.entropy; }},
        {"logit_lens_loss", "Logit lens: loss of the stream read as the output (0: embedding)", "loss (nats)", true,
         false, [](const analysis::LayerStats& l) { return l.lens_loss; }, nullptr},
        {"logit_lens_top1", "Logit lens: top-1 agreement with the model's prediction", "fraction", true, true,
         [](const analysis::LayerStats& l) { return l.lens_top1; }, nullptr},
        {"matrix_entropy", "Normalised matrix entropy of each layer's output", "H / ln min(N-1, w)", false, true,
         [](const analysis::LayerStats& l) { return l.matrix.normalized; }, nullptr},
        {"swiglu_density", "SwiGLU activation density", "fraction with |u| > tau RMS", false, true,
         [](const analysis::LayerStats& l) { return l.density; }, nullptr},
    };
    std::vector<std::pair<std::string, svg::Chart>> out;
    for (const Measure& m : ms) {
        svg::Chart c;
        c.title = m.title, c.xlabel = "layer", c.ylabel = m.ylabel, c.integer_x = true;
        if (m.unit) c.y_lo = 0, c.y_hi = 1;
        else c.y_zero = true;
        for (const Checkpoint& k : ks) {
            svg::Series s;
            s.name = k.label;
            for (const analysis::LayerStats& l : k.stats.layers) {
                if (l.layer == 0 && !m.lens) continue;
                s.x.push_back(l.layer), s.y.push_back(m.get(l));
                if (m.per_head)
                    for (double v : m.per_head(l)) s.dot_x.push_back(l.layer), s.dot_y.push_back(v);
            }
            c.series.push_back(s);
        }
        // Where a closed form exists, the value of uniform causal attention over a window of T tokens
        // (analysis.h): a layer on this line attends to nothing in particular.
        std::vector<int> Ts;
        for (const Checkpoint& k : ks)
            if (std::find(Ts.begin(), Ts.end(), k.T) == Ts.end()) Ts.push_back(k.T);
        for (int T : Ts) {
            const std::string at = Ts.size() > 1 ? ", T " + std::to_string(T) : "";
            if (std::string(m.file) == "attention_distance")
                c.refs.push_back(
                    {(T - 1) / 4.0, "uniform attention: (T - 1) / 4 = " + fmt((T - 1) / 4.0, "%.2f") + at});
            if (std::string(m.file) == "attention_span_use" && T == Ts[0])
                c.refs.push_back({0.5, "uniform attention over what the layer sees: 1/2"});
            if (std::string(m.file) == "attention_entropy")
                c.refs.push_back({std::lgamma(T + 1.0) / T,
                                  "uniform attention: ln(T!) / T = " + fmt(std::lgamma(T + 1.0) / T, "%.3f") + at});
        }
        out.push_back({m.file, c});
    }
    return out;
}

void write_file(const std::string& path, const std::string& text) {
    try {
        write_atomically(path, {{text.data(), text.size()}});
    } catch (const IoError& e) {
        throw ConfigError(std::string(e.what()));
    }
}

int run(const Options& o) {
    if (!o.labels.empty() && o.labels.size() != o.models.size())
        throw ConfigError("--labels names " + std::to_string(o.labels.size()) + " checkpoints but " +
                          std::to_string(o.models.size()) + " are given; name each once, in order");
    // The one output rule (util/fs.h): no output replaces a model, its run's files or the shard read.
    std::vector<ReadPath> inputs;
    for (const std::string& m : o.models)
        for (const ReadPath& r : run_files(m)) inputs.push_back(r);
    const std::vector<std::string> shards = glob_shards(o.data);
    inputs.push_back({shards[0], "the shard"});
    check_output_path(o.json, "--json", inputs);
    check_output_path(o.out, "-o", inputs, true);  // a directory: none of them may lie in it
    std::vector<Checkpoint> ks;
    for (size_t i = 0; i < o.models.size(); i++) {
        Checkpoint k;
        k.path = is_dir(o.models[i]) ? o.models[i] + "/model.bin" : o.models[i];
        k.label = o.labels.empty() ? default_label(k.path) : o.labels[i];
        for (const Checkpoint& prev : ks)
            if (prev.label == k.label) k.label += "#" + std::to_string(i + 1);
        RunRecord rec;
        if (is_dir(o.models[i]) && read_run_record(o.models[i], rec))
            k.run = "seed " + rec.arg("--seed") + ", " + rec.arg("--steps") + " steps, lr " + rec.arg("--lr") + ", " +
                    rec.status() + " (" + rec.path + ")";
        LoadedModel m = load_model(k.path);
        k.step = m.step, k.cfg = m.cfg;
        k.T = o.T ? o.T : m.cfg.T;
        if (k.T > m.cfg.T)
            throw ConfigError("--seq-len " + std::to_string(k.T) + " exceeds " + k.path +
                              "'s context T = " + std::to_string(m.cfg.T));
        k.shard = shards[0];
        std::unique_ptr<DataLoader> data;
        try {
            data.reset(new DataLoader(k.shard, 1, k.T, 0, 1, false, 0, m.cfg.V));
        } catch (const std::runtime_error& e) {
            const std::string what = e.what();
            if (what.find("outside the vocabulary") != std::string::npos)
                throw ConfigError(k.path + " has a vocabulary of V = " + std::to_string(m.cfg.V) +
                                  " tokens, which the data does not fit (" + what.substr(0, what.find(';')) +
                                  "); analyze it on shards tokenised for this model (--data)");
            throw;
        }
        if ((long)data->batches_per_epoch() < o.sequences)
            throw ConfigError(k.shard + " holds " + std::to_string(data->batches_per_epoch()) + " sequences of " +
                              std::to_string(k.T) + " tokens, fewer than --sequences " + std::to_string(o.sequences));
        fprintf(stderr, "analyze: %s: %d sequences of %d tokens on the CPU reference...\n", k.path.c_str(), o.sequences,
                k.T);
        k.stats = analysis::analyze_model(m.cfg, m.params, o.sequences, k.T, o.tau,
                                          [&](int* in, int* tg) { data->next_batch(in, tg); });
        print_table(k, o);
        printf("\n");
        fflush(stdout);
        ks.push_back(std::move(k));
    }
    const std::string js = to_json(ks, o);
    if (!o.json.empty()) write_file(o.json, js);
    if (!o.out.empty()) {
        make_dirs(o.out);
        write_file(o.out + "/analyze.json", js);
        const auto cs = charts(ks);
        for (const auto& [name, chart] : cs) write_file(o.out + "/" + name + ".svg", svg::document(svg::render(chart)));
        printf("wrote %s/analyze.json and %zu charts (%s/*.svg)\n", o.out.c_str(), cs.size(), o.out.c_str());
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    Command cmd{"analyze", "MODEL.bin|RUN_DIR... [flags]",
                "Per-layer attention distance (against each layer's window) and entropy, logit lens, "
                "matrix entropy and SwiGLU density of one or more checkpoints (definitions: inspect/analysis.h, "
                "docs/inspect.md).",
                make_flags(o)};
    cmd.missing = "checkpoint", cmd.min_positional = 1, cmd.max_positional = (size_t)-1;
    return command_main(cmd, argc, argv, "use fewer --sequences or a shorter --seq-len", [&](const Parsed& p) {
        o.models = p.positional;  // the checkpoints
        return run(o);
    });
}
