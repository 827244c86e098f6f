// inspect/layer_view.h: a model's per-layer columns as report's and analyze's tables show them, from the
// declarations (layer_columns.h): which columns to show (width and heads always, any other some layer uses), a
// layer's value of one ("-" where the layer lacks the sub-block the column belongs to), and a model's rows.
// Does not: format HTML or text (report and analyze do).
#pragma once

#include <string>
#include <vector>

#include "model_config.h"

// The switch column that drops the sub-block col describes (layer_columns.h's no_attention for the attention's
// heads, KV heads, window and RoPE; no_mlp for the MLP's hidden size; nullptr for width): a layer without that
// sub-block shows "-" in col, as --plan does.
inline const LayerColumn* sub_block_of(const LayerColumn& col) {
    const std::string n = col.name;
    if (n == "heads" || n == "kv_heads" || n == "window" || n == "no_rope") return find_layer_column("no_attention");
    if (n == "hidden") return find_layer_column("no_mlp");
    return nullptr;
}

// Layer l's value of col as report and analyze show it: "-" where the layer lacks col's sub-block; a switch
// as "no" where the layer lacks what it names (a NoPE layer's "RoPE": "no"), else "yes".
inline std::string shown_value(const LayerColumn& col, const ModelConfig& c, int l) {
    const LayerColumn* part = sub_block_of(col);
    if (part && !part->value(c, l)) return "-";
    const int v = col.value(c, l);
    return col.is_switch ? (v ? "yes" : "no") : std::to_string(v);
}

// A switch column's name without its "no": "attention", "MLP", "RoPE" (its label is "no attention").
inline std::string switch_noun(const LayerColumn& col) {
    const std::string l = col.label;
    return l.rfind("no ", 0) == 0 ? l.substr(3) : col.key;
}

// The per-layer columns shown for these models: width and heads (and head_dim) always, every other column
// where some layer of some model departs from the uniform model's value.
inline std::vector<const LayerColumn*> shown_columns(const std::vector<const ModelConfig*>& models) {
    std::vector<const LayerColumn*> out;
    for (const LayerColumn& col : layer_columns()) {
        bool used = col.always_shown;
        for (const ModelConfig* m : models)
            for (int l = 0; l < m->L() && !used; l++) used = departs(col, *m, l);
        if (used) out.push_back(&col);
    }
    return out;
}

// The rows of a model's per-layer table: "layer" and the layers' numbers, then one row per shown column (its
// label: "kv", "window", "no attention"...), head_dim after heads.
inline std::vector<std::vector<std::string>> layer_rows(const ModelConfig& c,
                                                        const std::vector<const LayerColumn*>& cols) {
    std::vector<std::vector<std::string>> rows = {{"layer"}};
    for (int l = 0; l < c.L(); l++) rows[0].push_back(std::to_string(l + 1));
    const LayerColumn* attention = find_layer_column("no_attention");
    for (const LayerColumn* col : cols) {
        rows.push_back({col->is_switch ? switch_noun(*col) : std::string(col->label) + col->note});
        for (int l = 0; l < c.L(); l++) rows.back().push_back(shown_value(*col, c, l));
        if (std::string(col->name) != "heads") continue;
        rows.push_back({"head_dim"});
        for (int l = 0; l < c.L(); l++)
            rows.back().push_back(attention->value(c, l) ? std::to_string(c.layers[l].head_dim()) : "-");
    }
    return rows;
}
