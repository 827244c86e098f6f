// run/plan_views.cpp: the views of run/plan_views.h.
#include "run/plan_views.h"

#include <algorithm>

#include "model/layer_columns.h"
#include "run/cli.h"  // exact_number
#include "util/json.h"

std::string rle_list(const std::vector<int>& v) {
    std::string s;
    for (size_t a = 0; a < v.size();) {
        size_t b = a;
        while (b < v.size() && v[b] == v[a]) b++;
        if (!s.empty()) s += ",";
        s += std::to_string(v[a]);
        if (b - a > 1) s += "x" + std::to_string(b - a);
        a = b;
    }
    return s;
}

std::vector<int> layer_values(const std::string& name, const ModelConfig& c) {
    return column_values(*find_layer_column(name), c);
}

bool has_layer_columns(const ModelConfig& c) {
    for (const LayerColumn& col : layer_columns())
        for (int l = 0; l < c.L() && !col.always_shown; l++)
            if (departs(col, c, l)) return true;
    return false;
}

std::string layer_json_members(const ModelConfig& c, int l) {
    std::string s = "\"layer\": " + std::to_string(l + 1);
    for (const LayerColumn& col : layer_columns()) {
        const int v = col.value(c, l);
        s += ", " + json::quote(col.key) + ": " +
             (!has_part(col.part, c, l) ? "null"
              : col.is_switch           ? (v ? "true" : "false")
              : col.words               ? json::quote(column_word(col, v))
                                        : std::to_string(v));
    }
    return s + ", \"head_dim\": " + (c.layers[l].attention ? std::to_string(c.layers[l].head_dim()) : "null");
}

bool has_part(SubBlock part, const ModelConfig& c, int l) {
    const LayerSpec& s = c.layers[l];
    return part == SubBlock::attention ? s.attention
           : part == SubBlock::softmax ? s.softmax()
           : part == SubBlock::mlp     ? s.mlp
                                       : true;
}

std::string layer_cell(const LayerColumn& col, const ModelConfig& c, int l) {
    if (!has_part(col.part, c, l)) return "-";
    const int v = col.value(c, l);
    if (col.is_switch) return v ? "yes" : "no";
    return v == 0 && col.zero ? col.zero : column_word(col, v);
}

std::vector<const LayerColumn*> shown_columns(const std::vector<const ModelConfig*>& models, bool every_number) {
    std::vector<const LayerColumn*> out;
    for (const LayerColumn& col : layer_columns()) {
        bool used = col.always_shown || (every_number && !col.is_switch && !col.words);
        for (const ModelConfig* m : models)
            for (int l = 0; l < m->L() && !used; l++) used = departs(col, *m, l);
        if (used) out.push_back(&col);
    }
    return out;
}

size_t column_width(const LayerTableColumn& col) {
    size_t n = std::max<size_t>(col.heading.size(), 4);
    for (const std::string& v : col.cells) n = std::max(n, v.size());
    return n;
}

std::vector<LayerTableColumn> layer_table(const ModelConfig& c, const std::vector<const LayerColumn*>& cols) {
    std::vector<LayerTableColumn> out;
    for (const LayerColumn* col : cols) {
        out.push_back({col->heading, {}});
        for (int l = 0; l < c.L(); l++) out.back().cells.push_back(layer_cell(*col, c, l));
        if (std::string(col->name) != "heads") continue;
        out.push_back({"head_dim", {}});
        for (int l = 0; l < c.L(); l++)
            out.back().cells.push_back(c.layers[l].attention ? std::to_string(c.layers[l].head_dim()) : "-");
    }
    return out;
}

std::string layer_ranges(const std::vector<bool>& m) {
    std::string s;
    for (size_t a = 0; a < m.size();) {
        if (!m[a]) {
            a++;
            continue;
        }
        size_t b = a;
        while (b < m.size() && m[b]) b++;
        s += (s.empty() ? "" : ",") + std::to_string(a + 1) + (b - a > 1 ? "-" + std::to_string(b) : "");
        a = b;
    }
    return s;
}

std::string human(double x) {
    char buf[32];
    const char* unit[] = {"", "K", "M", "G", "T", "P"};
    int u = 0;
    while (std::fabs(x) >= 1000 && u < 5) x /= 1000, u++;
    snprintf(buf, sizeof buf, u ? "%.2f%s" : "%.0f%s", x, unit[u]);
    return buf;
}

std::string describe_config(const ModelConfig& c) {
    int lo = 0, hi = 0;  // over the layers that have an MLP
    for (int l = 0; l < c.L(); l++)
        if (c.layers[l].mlp) lo = lo ? std::min(lo, c.hidden_of(l)) : c.hidden_of(l), hi = std::max(hi, c.hidden_of(l));
    char hidden[160];
    if (lo == hi) snprintf(hidden, sizeof hidden, "%d", lo);
    else snprintf(hidden, sizeof hidden, "%d..%d", lo, hi);
    char rule[96];  // the rule, or that --mlp set the sizes
    if (rule_hidden(c)) snprintf(rule, sizeof rule, "%.4g w to a multiple of %d", c.mlp_ratio, c.mlp_multiple);
    else snprintf(rule, sizeof rule, "per layer");
    char buf[720];
    snprintf(buf, sizeof buf,
             "d %d, L %d, heads %s (h_base %d), T %d, V %d, SwiGLU hidden %s (%s), %s, %s "
             "embeddings, stream D %d, attention scale %s",
             c.d, c.L(), rle_list(layer_heads(c)).c_str(), c.h_base, c.T, c.V, hidden, rule, norm_name(c.norm),
             c.tied ? "tied" : "untied", c.D(), c.mup_attn ? "1/head_dim" : "1/sqrt(head_dim)");
    std::string line = buf;
    if (c.mup_base_d)  // docs/model.md's parameterisation table
        line += ", muP at base width " + std::to_string(c.mup_base_d) + " (logits x " +
                exact_number(c.mup_width_ratio()) + ", layer l's matrices' lr x base_d / w_l)";
    return line;
}

std::string rle_words(const LayerColumn& col, const std::vector<int>& v) {
    std::string s;
    for (size_t a = 0; a < v.size();) {
        size_t b = a;
        while (b < v.size() && v[b] == v[a]) b++;
        s += (s.empty() ? "" : ",") + column_word(col, v[a]) + (b - a > 1 ? "x" + std::to_string(b - a) : "");
        a = b;
    }
    return s;
}

std::string layer_column_line(const LayerColumn& col, const ModelConfig& c) {
    if (!col.is_switch)
        return "  " + pad_right(col.label, 6) + " " +
               (col.words ? rle_words(col, column_values(col, c)) : rle_list(column_values(col, c))) + col.note + "\n";
    std::vector<bool> set;
    for (int v : column_values(col, c)) set.push_back(!v);
    const std::string layers = layer_ranges(set);
    return layers.empty() ? "" : "  " + std::string(col.label) + ": layers " + layers + "\n";
}

std::string layer_column_lines(const ModelConfig& c) {
    if (!has_layer_columns(c)) return "";
    std::string out;
    for (const LayerColumn& col : layer_columns()) {
        bool used = !col.words;  // a column of words (the mixer) only where a layer departs
        for (int l = 0; l < c.L() && !used; l++) used = departs(col, c, l);
        if (!col.always_shown && used) out += layer_column_line(col, c);
    }
    return out;
}

void print_plan(FILE* f, const std::string& title, const ModelConfig& c, const std::vector<RunLayerColumn>& run) {
    Accounting a = account(c), b = account(uniform_baseline(c));
    fprintf(f, "%s: %s\n", title.c_str(), describe_config(c).c_str());
    for (const LayerColumn& col : layer_columns())
        if (col.always_shown) fputs(layer_column_line(col, c).c_str(), f);
    fputs(layer_column_lines(c).c_str(), f);
    // The per-layer table: every number column and any switch a layer sets (layer_table), then the costs.
    std::vector<LayerTableColumn> table = layer_table(c, shown_columns({&c}, true));
    for (const RunLayerColumn& r : run) {
        table.push_back({r.heading, {}});
        for (double v : r.values) table.back().cells.push_back(exact_number(v));
    }
    std::vector<std::string> params, flops, kv_bytes, state;
    for (const LayerCost& x : a.layers) {
        params.push_back(human((double)x.params)), flops.push_back(human(x.flops_per_token));
        kv_bytes.push_back(std::to_string(x.kv_bytes_per_token)), state.push_back(human((double)x.state_bytes));
    }
    const bool gdn = has_gdn(c);
    table.push_back({"params", params}), table.push_back({"FLOPs/token", flops});
    table.push_back({"KV B/tok", kv_bytes});
    if (gdn) table.push_back({"state B", state});
    auto cell = [](const std::string& s, size_t n) { return std::string(n > s.size() ? n - s.size() : 0, ' ') + s; };
    std::vector<size_t> wide;
    for (const LayerTableColumn& col : table) wide.push_back(column_width(col));
    fprintf(f, "\nlayer");
    for (size_t k = 0; k < table.size(); k++) fprintf(f, " %s", cell(table[k].heading, wide[k]).c_str());
    fprintf(f, "\n");
    for (int l = 0; l < c.L(); l++) {
        fprintf(f, "%5d", l + 1);
        for (size_t k = 0; k < table.size(); k++) fprintf(f, " %s", cell(table[k].cells[l], wide[k]).c_str());
        fprintf(f, "\n");
    }
    auto row = [&](const char* name, double m, double u) {
        fprintf(f, "%-32s %14s %14s %9.4f\n", name, human(m).c_str(), human(u).c_str(), u ? m / u : 0.0);
    };
    fprintf(f, "\n%-32s %14s %14s %9s\n", "totals", "model", "uniform", "ratio");
    row("parameters (all)", (double)a.params, (double)b.params);
    row("layer matrices (paper count)", (double)a.matched_params, (double)b.matched_params);
    row("forward FLOPs/token (paper)", a.flops_per_token, b.flops_per_token);
    row("forward FLOPs/token (dense)", a.dense_flops_per_token, b.dense_flops_per_token);
    row("KV-cache bytes/token (bf16)", (double)a.kv_bytes_per_token, (double)b.kv_bytes_per_token);
    row("KV-cache bytes at T (bf16)", (double)a.kv_cache_bytes, (double)b.kv_cache_bytes);
    if (gdn) {
        row("GDN state bytes/sequence", (double)a.state_bytes, (double)b.state_bytes);
        row("KV + state bytes at T", (double)(a.kv_cache_bytes + a.state_bytes),
            (double)(b.kv_cache_bytes + b.state_bytes));
    }
    row("average layer width", a.avg_width, b.avg_width);
    fprintf(f,
            "(FLOPs at context T = %d, attention over the full square of the keys a query attends to: T, or a\n"
            " window's W; 'paper' discounts the dead weights the Xformer paper excludes from its parameter match,\n"
            " 'dense' is what a dense implementation runs. KV bytes/token: per token cached; at T: one sequence of T\n"
            " tokens, a window layer caching only its last W)\n",
            c.T);
    if (gdn)
        fprintf(f,
                "(a gdn layer: no KV cache; FLOPs/token its matmuls, conv and chunked delta rule at chunk min(64, T);\n"
                " state B: one sequence's fp32 recurrent state and bf16 conv tail, constant in T; docs/model.md)\n");
}

void print_totals_json(FILE* f, const Accounting& a) {
    fprintf(f,
            "{\"params\": %lld, \"matched_params\": %lld, \"flops_per_token\": %.0f, \"dense_flops_per_token\": "
            "%.0f, \"kv_bytes_per_token\": %lld, \"kv_cache_bytes\": %lld, \"state_bytes\": %lld, \"avg_width\": "
            "%.4f}",
            a.params, a.matched_params, a.flops_per_token, a.dense_flops_per_token, a.kv_bytes_per_token,
            a.kv_cache_bytes, a.state_bytes, a.avg_width);
}

void print_plan_json(FILE* f, const std::string& title, const ModelConfig& c, const std::vector<std::string>& warnings,
                     const std::vector<RunLayerColumn>& run) {
    Accounting a = account(c), b = account(uniform_baseline(c));
    fprintf(f, "{\"model\": %s, \"config\": {\"d\": %d, \"L\": %d, \"h_base\": %d, \"T\": %d, \"V\": %d, ",
            json::quote(title).c_str(), c.d, c.L(), c.h_base, c.T, c.V);
    fprintf(f,
            "\"mlp_ratio\": %.17g, \"mlp_multiple\": %d, \"norm\": \"%s\", \"tied\": %s, \"D\": %d, \"mup_attn\": %s, "
            "\"mup_base_d\": %d},\n",
            c.mlp_ratio, c.mlp_multiple, norm_name(c.norm), c.tied ? "true" : "false", c.D(),
            c.mup_attn ? "true" : "false", c.mup_base_d);
    fprintf(f, " \"layers\": [\n");
    for (int l = 0; l < c.L(); l++) {
        const LayerCost& x = a.layers[l];
        std::string members = layer_json_members(c, l);
        for (const RunLayerColumn& r : run) members += ", " + json::quote(r.key) + ": " + exact_number(r.values[l]);
        fprintf(f,
                "  {%s, \"params\": %lld, \"flops_per_token\": %.0f, \"dense_flops_per_token\": %.0f, "
                "\"kv_bytes_per_token\": %lld, \"kv_cache_bytes\": %lld, \"state_bytes\": %lld}%s\n",
                members.c_str(), x.params, x.flops_per_token, x.dense_flops_per_token, x.kv_bytes_per_token,
                x.kv_cache_bytes, x.state_bytes, l + 1 < c.L() ? "," : "");
    }
    fprintf(f, " ],\n \"totals\": ");
    print_totals_json(f, a);
    fprintf(f, ",\n \"baseline\": ");
    print_totals_json(f, b);
    fprintf(f,
            ",\n \"ratios\": {\"params\": %.6f, \"matched_params\": %.6f, \"flops_per_token\": %.6f, "
            "\"dense_flops_per_token\": %.6f, \"kv_bytes_per_token\": %.6f, \"kv_cache_bytes\": %.6f, "
            "\"avg_width\": %.6f},\n",
            (double)a.params / b.params, (double)a.matched_params / b.matched_params,
            a.flops_per_token / b.flops_per_token, a.dense_flops_per_token / b.dense_flops_per_token,
            (double)a.kv_bytes_per_token / b.kv_bytes_per_token, (double)a.kv_cache_bytes / b.kv_cache_bytes,
            a.avg_width / b.avg_width);
    fprintf(f, " \"warnings\": [");
    for (size_t i = 0; i < warnings.size(); i++) fprintf(f, "%s%s", i ? ", " : "", json::quote(warnings[i]).c_str());
    fprintf(f, "]}\n");
}
