// model/layer_columns.h: every per-layer column of a model (LayerSpec's width, heads, kv_heads, hidden, window,
// attention, mlp, rope, mixer), each declared once in layer_columns(): its names at every edge (model.bin column, run
// record / --plan --json key, config.json key, flag), its flag's syntax and parser, its bounds (one bound for the
// flag, validate_config, model.bin and config.json), its validation rule, how --plan shows it and its uniform
// value. The flags (run/model_flags.h), build_config and validate_config (model/build.cpp), model.bin
// (run/checkpoint.h), --plan and the run record (run/plan_views.h) and config.json (hf/hf_config.h) loop over
// the table; a new column is one more entry here plus the arithmetic that uses it.
//
// Two values per layer: the stored word (LayerSpec's field as model.bin stores it; 0 is the default for every
// column but width and heads: kv_heads 0 = h_l, hidden 0 = the mlp_ratio rule, window 0 = global, no_attention,
// no_mlp, no_rope 0) and the value the layer computes with (kv_heads h_l or 0 without attention, the hidden size
// as built or 0 without an MLP, the window or 0 without attention, 1/0 for attention, mlp and rope), which --plan,
// the record, config.json and report show (a column of words, the mixer, shows its value's word: attention, gdn).
// is_uniform says whether a model is the uniform one, on the built table.
// Pure C++17 with no I/O.
#pragma once

#include <string>
#include <vector>

#include "model/schedules.h"
#include "model/spec.h"
#include "model_config.h"
#include "util/errors.h"

// What a column's schedule is built from: the layer count and the widths and heads built before it.
struct LayerContext {
    int L = 0;
    std::vector<int> widths, heads;
    int mlp_multiple = 32;
};

// A ModelSpec text field (a member pointer through an alias: nvcc's host pass writes a bare one with
// parentheses, which g++ -Werror=parentheses refuses).
using SpecText = std::string ModelSpec::*;
// A LayerSpec switch (attention, mlp, rope), through an alias for the same reason.
using LayerSwitch = bool LayerSpec::*;

// The sub-block a column belongs to: a layer without it shows "-" in every per-layer table (run/plan_views.h).
// attention is the layer's token mixer (softmax attention or GDN: heads, the mixer itself); softmax is what only
// softmax attention has (KV heads, the window, RoPE): "-" in a gdn layer too.
enum class SubBlock { layer, attention, mlp, softmax };

struct LayerColumn {
    const char* name;     // model.bin's column name ("kv_heads", "no_attention"): 1 to 16 of a-z, 0-9 and _
    const char* key;      // the run record's and --plan --json's per-layer key ("kv_heads", "attention")
    const char* hf_key;   // config.json's list of the values ("layer_kv_heads"); nullptr: implied by another list
    bool hf_optional;     // config.json may leave the list out: every layer then has the stored default
    const char* what;     // the value in messages ("window")
    const char* label;    // the model line's name ("kv", "no attention": "  no attention: layers 3,5")
    const char* note;     // after the model line ("(0 = global)"), or ""
    const char* heading;  // the per-layer tables' column (--plan, report, analyze, the model card): "kv", "RoPE"
    const char* zero;     // a table cell's text for the value 0 ("global"), or nullptr: the number
    const char* const* words = nullptr;  // the values' words, value v's at [v] (mixer: attention, gdn) wherever the
                                         // column is shown or exported; nullptr: a number column
    SubBlock part;                       // the sub-block it describes ("-" in a layer without it)
    bool is_switch;     // one bit per layer, set by a layer list (--no-attention 3,5); shown as true/false
    bool always_shown;  // --plan and the model lines show it for every model (width, heads), not only when set
    int lo, hi;         // bounds of the stored word, for the flag, validate_config, model.bin and config.json
    int (*get)(const LayerSpec&);                            // the stored word
    void (*set)(LayerSpec&, int);                            // stores a word
    int (*value)(const ModelConfig&, int l);                 // what layer l computes with (see the top)
    void (*set_value)(const ModelConfig&, LayerSpec&, int);  // stores what a value list says (config.json, record)
    int (*uniform)(const ModelConfig&, int l);               // the uniform model's value (LayerSpec{d, h_base}'s)
    std::string (*rule)(const ModelConfig&, int l);          // validate_config's check beyond the bounds: "" or why not
    // The flag: spellings, argument, --help line ("{default}": the spec's initial value), the ModelSpec field it
    // sets and the form that gives every layer one value ("gqa:{}"; {} the value, {L} the layer count; "" none).
    const char* flag;
    const char* arg;
    const char* help;
    SpecText spec;
    const char* every_layer;
    bool record_default;  // the run record keeps the flag at its default too (every column older than records)
    // The stored words of every layer from the flag's text (nullptr: build_config builds them, width and heads),
    // and the check of the text alone, before the model is known (nullptr: build on a nominal model).
    std::vector<int> (*build)(const std::string&, const LayerContext&, const LayerColumn&);
    void (*check)(const std::string&, const LayerColumn&);
};

// "--kv-heads" of "--kv-heads", "--widths" of "-w, --widths".
inline std::string canonical_flag(const LayerColumn& col) {
    const std::string f = col.flag;
    const size_t comma = f.rfind(", ");
    return comma == std::string::npos ? f : f.substr(comma + 2);
}

// "out of range [0, 1048576]".
inline std::string column_bound_text(const LayerColumn& col) {
    return "out of range [" + std::to_string(col.lo) + ", " + std::to_string(col.hi) + "]";
}

// A sub-block switch column's shared half: one bit per layer, stored as 1 where the layer lacks the sub-block (F
// false: model.bin's word 0 is the default, a layer that has it), shown as whether it has it; set by a layer list
// (--no-attention 3,5); uniform: every layer has it. The entry adds its names, flag and rule.
template <LayerSwitch F> LayerColumn switch_column() {
    LayerColumn c{};
    c.note = "", c.is_switch = true, c.part = SubBlock::layer, c.lo = 0, c.hi = 1, c.every_layer = "";
    c.get = [](const LayerSpec& s) { return (int)!(s.*F); };
    c.set = [](LayerSpec& s, int v) { s.*F = !v; };
    c.value = [](const ModelConfig& m, int l) { return (int)(m.layers[l].*F); };
    c.set_value = [](const ModelConfig&, LayerSpec& s, int v) { s.*F = v != 0; };
    c.uniform = [](const ModelConfig&, int) { return 1; };
    c.build = [](const std::string& v, const LayerContext& x, const LayerColumn& col) {
        std::vector<int> out;
        for (bool b : layer_set(v, x.L, canonical_flag(col))) out.push_back(b);
        return out;
    };
    // Before the model is known only the list's form is checked: its range is the model's (layer_set, at build).
    c.check = [](const std::string& v, const LayerColumn& col) {
        for_each_layer_item(v, canonical_flag(col), [](int, int, const std::string&) {});
    };
    return c;
}

// The table, in LayerSpec's order (model.bin writes its columns in this order).
inline const std::vector<LayerColumn>& layer_columns() {
    static const std::vector<LayerColumn> table = [] {
        std::vector<LayerColumn> t;
        auto none = [](const ModelConfig&, int) { return std::string(); };
        LayerColumn c{};

        c = LayerColumn{};
        c.name = c.key = "width", c.hf_key = "layer_widths", c.what = "width", c.label = "widths", c.note = "";
        c.heading = "width", c.part = SubBlock::layer;
        c.always_shown = true;
        c.lo = 1, c.hi = 65536;
        c.get = [](const LayerSpec& s) { return s.width; };
        c.set = [](LayerSpec& s, int v) { s.width = v; };
        c.value = [](const ModelConfig& m, int l) { return m.layers[l].width; };
        c.set_value = [](const ModelConfig&, LayerSpec& s, int v) { s.width = v; };
        c.uniform = [](const ModelConfig& m, int) { return m.d; };
        c.rule = none;
        c.flag = "-w, --widths", c.arg = "WIDTHS",
        c.help = "uniform | x | v | lambda | 3 | list of widths (default {default})";
        c.spec = &ModelSpec::widths, c.every_layer = "", c.record_default = true;
        c.check = [](const std::string& v, const LayerColumn& col) {
            if (v == "uniform" || v == "x" || v == "v" || v == "lambda" || v == "3") return;
            if (!is_list(v))
                throw ConfigError("unknown width schedule '" + v + "'; use uniform, x, v, lambda, 3 or a list");
            for (int w : parse_layer_list(v, "width schedule"))
                if (w > col.hi)
                    throw ConfigError("--widths " + v + ": width " + std::to_string(w) + " is " +
                                      column_bound_text(col));
        };
        t.push_back(c);

        c = LayerColumn{};
        c.name = c.key = "heads", c.hf_key = "layer_heads", c.what = "head count", c.label = "heads", c.note = "";
        c.heading = "heads", c.part = SubBlock::attention;
        c.always_shown = true;
        c.lo = 1, c.hi = 65536;
        c.get = [](const LayerSpec& s) { return s.heads; };
        c.set = [](LayerSpec& s, int v) { s.heads = v; };
        c.value = [](const ModelConfig& m, int l) { return m.layers[l].heads; };
        c.set_value = [](const ModelConfig&, LayerSpec& s, int v) { s.heads = v; };
        c.uniform = [](const ModelConfig& m, int) { return m.h_base; };
        c.rule = [](const ModelConfig& m, int l) {
            const LayerSpec& s = m.layers[l];
            if (s.width % s.heads != 0)
                return std::to_string(s.heads) + " heads do not divide width " + std::to_string(s.width) +
                       "; choose a head count that divides it";
            if (s.head_dim() % 2 == 0) return std::string();
            // The reason that applies to the layer: RoPE rotates pairs; without it, the kernels still read a head
            // in pairs; without attention, the heads are unused but exported (config.json holds them to it).
            const std::string odd = "head_dim " + std::to_string(s.head_dim()) + " (= " + std::to_string(s.width) +
                                    " / " + std::to_string(s.heads) + ") is odd; ";
            return odd +
                   (!s.attention ? "the layer has no attention, but its head count is still exported, and "
                                   "config.json holds every layer to an even head_dim"
                    : s.rope     ? "RoPE rotates pairs of a head's values, so it needs an even head_dim"
                                 : "the layer uses no RoPE, but the CUDA attention kernels read a head's values in "
                                   "pairs, so they need an even head_dim") +
                   ": choose a head count that gives one";
        };
        c.flag = "-s, --heads-schedule", c.arg = "HEADS";
        c.help = "uniform | prism | openelm[:LO-HI] | list like 3x3,6x3,12x6 or 5,5,5 (default {default})";
        c.spec = &ModelSpec::heads, c.every_layer = "--heads {}", c.record_default = true;
        c.check = [](const std::string& v, const LayerColumn& col) {
            if (v == "uniform" || v == "prism") return;
            if (v == "openelm" || v.compare(0, 8, "openelm:") == 0) {
                parse_range(v, "openelm", kOpenElmHeads[0], kOpenElmHeads[1], "head schedule");
                return;
            }
            if (!is_list(v))
                throw ConfigError("unknown head schedule '" + v +
                                  "'; use uniform, prism, openelm, openelm:LO-HI or a list like 3x3,6x3,12x6");
            for (int h : parse_layer_list(v, "head schedule"))
                if (h > col.hi)
                    throw ConfigError("--heads-schedule " + v + ": head count " + std::to_string(h) + " is " +
                                      column_bound_text(col));
        };
        t.push_back(c);

        c = LayerColumn{};
        c.name = c.key = "kv_heads", c.hf_key = "layer_kv_heads", c.hf_optional = true, c.what = "KV-head count";
        c.label = "kv", c.note = "", c.heading = "kv", c.part = SubBlock::softmax;
        c.lo = 0, c.hi = 65536;
        c.get = [](const LayerSpec& s) { return s.kv_heads; };
        c.set = [](LayerSpec& s, int v) { s.kv_heads = v; };
        c.value = [](const ModelConfig& m, int l) { return m.layers[l].attention ? m.layers[l].kv() : 0; };
        c.set_value = [](const ModelConfig&, LayerSpec& s, int v) {
            s.attention = v != 0, s.kv_heads = v && v != s.heads ? v : 0;
        };
        c.uniform = [](const ModelConfig& m, int l) { return m.layers[l].heads; };
        c.rule = [](const ModelConfig& m, int l) {
            const LayerSpec& s = m.layers[l];
            if (s.kv() > s.heads || s.heads % s.kv() != 0)
                return std::to_string(s.heads) + " query heads are not a multiple of " + std::to_string(s.kv_heads) +
                       " KV heads; choose a KV-head count that divides the head count (--kv-heads)";
            return std::string();
        };
        c.flag = "--kv-heads", c.arg = "KV";
        c.help =
            "K/V heads per layer (GQA): uniform (= heads) | mqa | gqa:G | list like 3x3,6x3,4x6 (default {default})";
        c.spec = &ModelSpec::kv_heads, c.every_layer = "--kv-heads gqa:{}", c.record_default = true;
        c.build = [](const std::string& v, const LayerContext& x, const LayerColumn&) {
            return kv_schedule(v, x.heads);
        };
        t.push_back(c);

        c = LayerColumn{};
        c.name = c.key = "hidden", c.hf_key = "layer_hidden_sizes", c.what = "MLP hidden size", c.label = "hidden";
        c.note = "", c.heading = "hidden", c.part = SubBlock::mlp;
        c.lo = 0, c.hi = 1 << 20;
        c.get = [](const LayerSpec& s) { return s.hidden; };
        c.set = [](LayerSpec& s, int v) { s.hidden = v; };
        c.value = [](const ModelConfig& m, int l) { return m.hidden_of(l); };
        c.set_value = [](const ModelConfig& m, LayerSpec& s, int v) {
            s.mlp = v != 0, s.hidden = v && v != m.hidden(s.width) ? v : 0;
        };
        c.uniform = [](const ModelConfig& m, int l) { return m.hidden(m.layers[l].width); };
        c.rule = none;
        c.flag = "--mlp", c.arg = "HIDDEN";
        c.help =
            "SwiGLU hidden per layer: uniform (--mlp-ratio) | openelm[:LO-HI] (OpenELM's 0.5-4.0 w) | list of "
            "sizes (default {default})";
        c.spec = &ModelSpec::mlp, c.every_layer = "--mlp {}x{L}", c.record_default = true;
        c.build = [](const std::string& v, const LayerContext& x, const LayerColumn&) {
            return mlp_schedule(v, x.widths, x.mlp_multiple);
        };
        t.push_back(c);

        c = LayerColumn{};
        c.name = c.key = "window", c.hf_key = "layer_windows", c.hf_optional = true, c.what = "window";
        c.label = "window", c.note = " (0 = global)", c.heading = "window", c.zero = "global";
        c.part = SubBlock::softmax;
        c.lo = 0, c.hi = 1 << 20;
        c.get = [](const LayerSpec& s) { return s.window; };
        c.set = [](LayerSpec& s, int v) { s.window = v; };
        c.value = [](const ModelConfig& m, int l) { return m.layers[l].attention ? m.layers[l].window : 0; };
        c.set_value = [](const ModelConfig&, LayerSpec& s, int v) { s.window = v; };
        c.uniform = [](const ModelConfig&, int) { return 0; };
        c.rule = none;
        c.flag = "--window", c.arg = "WINDOW";
        c.help =
            "attention window per layer: global | local:W | local:W,N:M (N local then M global, repeated) | "
            "list, 0 = global (default {default})";
        c.spec = &ModelSpec::window, c.every_layer = "--window local:{}", c.record_default = true;
        c.build = [](const std::string& v, const LayerContext& x, const LayerColumn&) {
            return window_schedule(v, x.L);
        };
        t.push_back(c);

        // The sub-block switches (switch_column): stored 1 where the layer lacks it, shown as whether it has it.
        c = switch_column<&LayerSpec::attention>();
        c.name = "no_attention", c.key = "attention", c.what = "no-attention word", c.label = "no attention";
        c.heading = "attention";
        c.rule = none;
        c.flag = "--no-attention", c.arg = "LAYERS", c.help = "layers (from 1: 3,5,7-9) without an attention sub-block";
        c.spec = &ModelSpec::no_attention, c.record_default = true;
        t.push_back(c);

        c = switch_column<&LayerSpec::mlp>();
        c.name = "no_mlp", c.key = "mlp", c.what = "no-MLP word", c.label = "no MLP", c.heading = "MLP";
        c.rule = [](const ModelConfig& m, int l) {
            const LayerSpec& s = m.layers[l];
            return !s.attention && !s.mlp
                       ? std::string("has neither attention nor an MLP; drop the layer instead (--layers)")
                       : std::string();
        };
        c.flag = "--no-mlp", c.arg = "LAYERS", c.help = "layers (from 1: 3,5,7-9) without an MLP sub-block";
        c.spec = &ModelSpec::no_mlp, c.record_default = true;
        t.push_back(c);

        c = switch_column<&LayerSpec::rope>();
        c.name = "no_rope", c.key = "rope", c.hf_key = "layer_rope", c.hf_optional = true, c.what = "no-RoPE word";
        c.label = "no RoPE", c.heading = "RoPE", c.part = SubBlock::softmax;
        c.rule = [](const ModelConfig& m, int l) {
            const LayerSpec& s = m.layers[l];
            return !s.attention && !s.rope ? std::string(
                                                 "has no attention, so no rotary embedding to leave out: only a layer "
                                                 "with attention can be NoPE")
                                           : std::string();
        };
        c.flag = "--no-rope", c.arg = "LAYERS";
        c.help = "layers (from 1: 3,5,7-9) whose attention uses no rotary embedding (NoPE)";
        c.spec = &ModelSpec::no_rope, c.record_default = false;
        t.push_back(c);

        // The token mixer of the attention sub-block: softmax attention (0) or Gated DeltaNet (1, docs/model.md).
        // A gdn layer has one key and value per head, no window and no RoPE: the columns that would say otherwise
        // are refused on it, and shown as "-".
        c = LayerColumn{};
        c.name = c.key = "mixer", c.hf_key = "layer_mixers", c.hf_optional = true, c.what = "mixer";
        c.label = "mixer", c.note = "", c.heading = "mixer", c.words = kMixerWords, c.part = SubBlock::attention;
        c.lo = 0, c.hi = 1;
        c.get = [](const LayerSpec& s) { return s.mixer; };
        c.set = [](LayerSpec& s, int v) { s.mixer = v; };
        c.value = [](const ModelConfig& m, int l) { return m.layers[l].mixer; };
        c.set_value = [](const ModelConfig&, LayerSpec& s, int v) { s.mixer = v; };
        c.uniform = [](const ModelConfig&, int) { return 0; };
        c.rule = [](const ModelConfig& m, int l) {
            const LayerSpec& s = m.layers[l];
            if (s.mixer == 0) return std::string();
            if (!s.attention)
                return std::string(
                    "is gdn (--mixer) but has no attention sub-block (--no-attention), so no mixer; leave it out "
                    "of one of the two");
            if (s.window)
                return "the gdn mixer has no attention window, but the layer has window " + std::to_string(s.window) +
                       "; give gdn layers window 0 (--window list) or make the layer attention (--mixer)";
            if (!s.rope)
                return std::string(
                    "the gdn mixer uses no rotary embedding, so it cannot be NoPE; leave the layer out of --no-rope");
            if (s.kv() != s.heads)
                return "the gdn mixer has one key and value per head, but the layer has " + std::to_string(s.kv()) +
                       " KV heads for " + std::to_string(s.heads) +
                       " heads; give gdn layers kv = heads (--kv-heads list) or make the layer attention (--mixer)";
            return std::string();
        };
        c.flag = "--mixer", c.arg = "MIXER";
        c.help =
            "token mixer per layer: attention | gdn (Gated DeltaNet) | gdn:N:M (N gdn then M attention, repeated) | "
            "list like gdnx3,attention (default {default})";
        c.spec = &ModelSpec::mixer, c.every_layer = "", c.record_default = false;
        c.build = [](const std::string& v, const LayerContext& x, const LayerColumn&) {
            return mixer_schedule(v, x.L);
        };
        c.check = [](const std::string& v, const LayerColumn&) { parse_mixer(v); };
        t.push_back(c);
        return t;
    }();
    return table;
}

// Layer l's value of col as text: its word (a column of words), else the number.
inline std::string column_word(const LayerColumn& col, int v) {
    return col.words && v >= col.lo && v <= col.hi ? col.words[v] : std::to_string(v);
}

// A column by its model.bin name; nullptr when this build does not know it.
inline const LayerColumn* find_layer_column(const std::string& name) {
    for (const LayerColumn& c : layer_columns())
        if (name == c.name) return &c;
    return nullptr;
}

// A single number where the flag wants one per layer (--kv-heads 3 on 12 layers): the error says the form that
// gives every layer that value (--kv-heads gqa:3). Nothing for a column without one, or a one-layer model.
inline void check_single_value(const LayerColumn& col, const std::string& text, int L) {
    if (!*col.every_layer || L == 1 || !is_list(text) || text.find_first_of(",xX*") != std::string::npos) return;
    if (parse_positive_int(text, canonical_flag(col), true) == 0) return;  // 0 is a value of its own (global)
    std::string form = col.every_layer;
    form.replace(form.find("{}"), 2, trim(text));
    if (form.find("{L}") != std::string::npos) form.replace(form.find("{L}"), 3, std::to_string(L));
    throw ConfigError(canonical_flag(col) + " " + trim(text) + " gives one value but the model has " +
                      std::to_string(L) + " layers; for " + trim(text) + " in every layer write " + form +
                      ", or give one value per layer (run-length lists like 12x6,4x6 work)");
}

// check_column_text's part: the builder's checks on a nominal model, and the bounds.
inline void check_column_syntax(const LayerColumn& col, const std::string& text) {
    if (col.check) return col.check(text, col);
    LayerContext x;
    x.L = col.is_switch ? 10000 : is_list(text) ? (int)parse_layer_list(text, canonical_flag(col), true).size() : 1;
    x.widths.assign(x.L, 64), x.heads.assign(x.L, 1);
    for (int v : col.build(text, x, col))
        if (v < col.lo || v > col.hi)
            throw ConfigError(canonical_flag(col) + " " + text + ": " + col.what + " " + std::to_string(v) + " is " +
                              column_bound_text(col));
}

// The flag's text checked before the model is known (the flag parser runs it, so a bad value is an error even
// beside --help): its syntax, and every value it gives within the column's bounds.
inline void check_column_text(const LayerColumn& col, const std::string& text) {
    const std::string flag = canonical_flag(col);
    try {
        check_column_syntax(col, text);
    } catch (const ConfigError& e) {  // in the flag's words
        const std::string why = e.what();
        throw why.compare(0, flag.size(), flag) == 0 ? e : ConfigError(flag + ": " + why);
    }
}

// build_config's first part: every column's flag text checked as the flag parser checks it, and a single value
// where L > 1 layers want one each.
inline void check_layer_flags(const ModelSpec& s, int L) {
    for (const LayerColumn& col : layer_columns()) {
        check_column_text(col, s.*col.spec);
        check_single_value(col, s.*col.spec, L);
    }
}

// build_config's part: every column with a builder, from the spec's flag text, onto c's layers (widths and heads
// already built). Values outside the bounds are left to validate_config.
inline void build_layer_columns(const ModelSpec& s, ModelConfig& c) {
    LayerContext x;
    x.L = c.L(), x.mlp_multiple = c.mlp_multiple;
    for (const LayerSpec& l : c.layers) x.widths.push_back(l.width), x.heads.push_back(l.heads);
    for (const LayerColumn& col : layer_columns()) {
        if (!col.build) continue;
        const std::vector<int> v = col.build(s.*col.spec, x, col);
        for (int l = 0; l < x.L; l++) col.set(c.layers[l], v[l]);
    }
}

// validate_config's part: every stored word within its column's bounds, then every column's rule.
inline void validate_layer_columns(const ModelConfig& c) {
    for (int l = 0; l < c.L(); l++) {
        const std::string at = "layer " + std::to_string(l + 1) + ": ";
        for (const LayerColumn& col : layer_columns()) {
            const int v = col.get(c.layers[l]);
            if (v < col.lo && col.lo == 1)
                throw ConfigError(at + col.what + " " + std::to_string(v) + " must be positive");
            if (v < col.lo || v > col.hi)
                throw ConfigError(at + col.what + " " + std::to_string(v) + " is " + column_bound_text(col) + " (" +
                                  canonical_flag(col) + ")");
        }
        for (const LayerColumn& col : layer_columns()) {
            const std::string why = col.rule(c, l);
            if (!why.empty()) throw ConfigError(at + why);
        }
    }
}

// Whether layer l departs from the uniform model in column col.
inline bool departs(const LayerColumn& col, const ModelConfig& c, int l) {
    return col.value(c, l) != col.uniform(c, l);
}

// The one definition of "the uniform model": every column of every layer at its uniform value (width d, h_base
// heads, every other column at its default as built).
inline bool is_uniform(const ModelConfig& c) {
    for (const LayerColumn& col : layer_columns())
        for (int l = 0; l < c.L(); l++)
            if (departs(col, c, l)) return false;
    return true;
}

// The values of a column, one per layer.
inline std::vector<int> column_values(const LayerColumn& col, const ModelConfig& c) {
    std::vector<int> v;
    for (int l = 0; l < c.L(); l++) v.push_back(col.value(c, l));
    return v;
}

// Whether every layer's MLP hidden size is the --mlp-ratio rule's (no --mlp list or scaling, no --match).
inline bool rule_hidden(const ModelConfig& c) {
    for (int l = 0; l < c.L(); l++)
        if (c.layers[l].mlp && c.hidden_of(l) != c.hidden(c.layers[l].width)) return false;
    return true;
}
