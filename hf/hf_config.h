// hf/hf_config.h: a Prism model in Hugging Face's terms: the safetensors name and shape of each of
// model_config.h's parameter tensors, and config.json (what hf/modeling_prism.py's forward reads), both ways.
//
// Tensor names (modeling_prism.py's module names, so save_pretrained writes the same ones back); kw_l = kv_l *
// head_dim_l (w_l without KV groups); a layer without attention has no attn_norm / attn tensors, one without an
// MLP no mlp_norm / mlp tensors:
//   wte                 model.embed_tokens.weight           (V, d)
//   h{l}.ln1_w / ln1_b  model.layers.{l}.attn_norm.weight / .bias   (w_l)        bias: LayerNorm only
//   h{l}.wqkv           model.layers.{l}.attn.qkv.weight    (w_l + 2 kw_l, w_l)  rows q | k | v, heads consecutive
//   h{l}.wo             model.layers.{l}.attn.out.weight    (w_l, w_l)
//   a gdn layer's own (its wqkv is (3 w_l, w_l), q | k | v): conv_w model.layers.{l}.attn.conv.weight (3 w_l, 4),
//   wz attn.z.weight (w_l, w_l), wba attn.ba.weight (2 h_l, w_l), a_log attn.a_log (h_l), dt_bias attn.dt_bias
//   (h_l), onorm_w attn.out_norm.weight (head_dim_l)
//   h{l}.ln2_w / ln2_b  model.layers.{l}.mlp_norm.weight / .bias    (w_l)
//   h{l}.wfc            model.layers.{l}.mlp.gate_up.weight (2 hidden_l, w_l)  rows gate | up
//   h{l}.wproj          model.layers.{l}.mlp.down.weight    (w_l, hidden_l)
//   lnf_w / lnf_b       model.norm.weight / .bias           (Df)
//   lm_head             lm_head.weight                      (V, d)  untied only (tied: the embedding)
// config.json holds every number the forward depends on (d, V, T, one list per layer column with a config.json
// key in model/layer_columns.h: widths, heads, KV heads, SwiGLU hidden sizes, attention windows, RoPE on or off; the
// residual and final-norm widths, norm kind and eps, tying, attention scale, RoPE theta and its interleaved pairs,
// muP's base width mup_base_d when set: the logits' multiplier mup_base_d / d)
// and the rest of model.bin (h_base, the MLP rule, init_width_scale, the step, the run id, and the layer table's
// own words where the lists alone would not say them), so that import writes model.bin back byte for byte. The
// per-layer lists say what each layer computes (each column's value): layer_kv_heads 0 is a layer without
// attention (its layer_windows entry 0), layer_hidden_sizes 0 one without an MLP, layer_rope 0 a NoPE layer. model.bin
// stores 0 for "the default" (KV heads = heads, hidden = the mlp_ratio rule) and keeps a column's word on a layer
// that lacks the sub-block; when its words are not what the lists imply (an explicit KV-head count equal to the
// head count, say), prism_layer_words carries them: one [kv_heads, hidden, window] row per layer. Reading checks
// that the numbers agree with each other (a residual width that is not max(d, w_l), KV heads that do not divide
// the heads, a window on a layer without attention, words that contradict the lists, ...) and refuses a
// contradiction in one line. Lists an older export lacks (layer_kv_heads, layer_windows, layer_rope) mean what
// they meant: every head its own K and V, global attention, rotary embeddings.
// Does not: read or write files (hf/export.cpp, hf/import.cpp), or know the safetensors format.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/layer_columns.h"
#include "util/io.h"
#include "util/json.h"
#include "model/spec.h"

struct HfError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// The Hugging Face name of one of param_layout's tensors ("h3.wqkv" -> "model.layers.3.attn.qkv.weight").
inline std::string hf_tensor_name(const ParamTensor& t) {
    static const std::pair<const char*, const char*> layer_names[] = {
        {"ln1_w", "attn_norm.weight"}, {"ln1_b", "attn_norm.bias"},        {"wqkv", "attn.qkv.weight"},
        {"wo", "attn.out.weight"},     {"ln2_w", "mlp_norm.weight"},       {"ln2_b", "mlp_norm.bias"},
        {"wfc", "mlp.gate_up.weight"}, {"wproj", "mlp.down.weight"},       {"conv_w", "attn.conv.weight"},
        {"wz", "attn.z.weight"},       {"wba", "attn.ba.weight"},          {"a_log", "attn.a_log"},
        {"dt_bias", "attn.dt_bias"},   {"onorm_w", "attn.out_norm.weight"}};
    if (t.name == "wte") return "model.embed_tokens.weight";
    if (t.name == "lnf_w") return "model.norm.weight";
    if (t.name == "lnf_b") return "model.norm.bias";
    if (t.name == "lm_head") return "lm_head.weight";
    const std::string part = t.name.substr(t.name.find('.') + 1);
    for (const auto& [ours, theirs] : layer_names)
        if (part == ours) return "model.layers." + std::to_string(t.layer) + "." + theirs;
    throw std::logic_error("hf_tensor_name: no name for tensor " + t.name + "; hf/hf_config.h is behind param_layout");
}

// Its shape: (rows, cols) for matrices, (rows) for vectors.
inline std::vector<int64_t> hf_tensor_shape(const ParamTensor& t) {
    if (t.cols == 1 && !t.is_matrix) return {(int64_t)t.rows};
    return {(int64_t)t.rows, (int64_t)t.cols};
}

// The shortest decimal that reads back as exactly x (Python's repr does the same), so 8/3 survives the trip.
inline std::string exact_double(double x) {
    char b[40];
    if (x == std::floor(x) && std::fabs(x) < 1e15) {  // integral: 10000.0 rather than 1e+04
        snprintf(b, sizeof b, "%.1f", x);
        return b;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(b, sizeof b, "%.*g", p, x);
        if (std::strtod(b, nullptr) == x) break;
    }
    return b;
}

inline std::string int_list(const std::vector<int>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); i++) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
}

constexpr int kGpt2Eot = 50256;

// The columns whose stored words prism_layer_words carries, one row per layer: those a value list may leave
// unsaid (an explicit KV-head count equal to the heads, a window or hidden size on a layer without that sub-block).
inline const std::vector<const char*>& layer_word_columns() {
    static const std::vector<const char*> names = {"kv_heads", "hidden", "window"};
    return names;
}

// The layer config.json's value lists describe (model/layer_columns.h's set_value, in the table's order).
inline LayerSpec layer_of_values(const ModelConfig& c, int l) {
    LayerSpec s{0, 0};
    for (const LayerColumn& col : layer_columns())
        if (col.hf_key) col.set_value(c, s, col.value(c, l));
    return s;
}

// config.json of an export. dtype: "float32" or "bfloat16" (what model.safetensors holds).
// run_id: the model.bin's run (0: none, a version 2 file), kept so that import writes the same file back.
inline std::string hf_config_json(const ModelConfig& c, long step, const std::string& dtype, uint64_t run_id = 0) {
    std::string words;  // prism_layer_words, when some layer's words are not the ones the lists imply
    bool implied = true;
    for (int l = 0; l < c.L(); l++) {
        const LayerSpec implied_spec = layer_of_values(c, l);
        for (const LayerColumn& col : layer_columns())
            implied = implied && col.get(implied_spec) == col.get(c.layers[l]);
        std::vector<int> own;
        for (const char* name : layer_word_columns()) own.push_back(find_layer_column(name)->get(c.layers[l]));
        words += (l ? ", " : "") + int_list(own);
    }
    std::string s = "{\n";
    auto add = [&](const std::string& key, const std::string& value) {
        s += "  " + json::quote(key) + ": " + value + ",\n";
    };
    add("architectures", "[\"PrismForCausalLM\"]");
    add("model_type", "\"prism\"");
    add("auto_map",
        "{\"AutoConfig\": \"configuration_prism.PrismConfig\", "
        "\"AutoModelForCausalLM\": \"modeling_prism.PrismForCausalLM\"}");
    add("vocab_size", std::to_string(c.V));
    add("hidden_size", std::to_string(c.d));
    add("residual_width", std::to_string(c.D()));
    add("final_norm_width", std::to_string(c.Df()));
    add("num_hidden_layers", std::to_string(c.L()));
    for (const LayerColumn& col : layer_columns()) {
        if (!col.hf_key) continue;
        if (!col.words) {
            add(col.hf_key, int_list(column_values(col, c)));
            continue;
        }
        // A column of words (layer_mixers): a list of strings, written only where some layer departs from the
        // default (absent: every layer's is the first word, attention).
        std::string list;
        bool departs_somewhere = false;
        for (int v : column_values(col, c))
            list += (list.empty() ? "" : ", ") + json::quote(column_word(col, v)), departs_somewhere |= v != 0;
        if (departs_somewhere) add(col.hf_key, "[" + list + "]");
    }
    add("max_position_embeddings", std::to_string(c.T));
    add("norm_type", json::quote(norm_name(c.norm)));
    add("norm_eps", exact_double(c.norm_eps));
    add("tie_word_embeddings", c.tied ? "true" : "false");
    add("attention_scale", c.mup_attn ? "\"1/head_dim\"" : "\"1/sqrt(head_dim)\"");
    add("rope_theta", exact_double(c.rope_theta));
    add("rope_interleaved", "true");
    add("num_attention_heads", std::to_string(c.h_base));
    add("mlp_ratio", exact_double(c.mlp_ratio));
    add("mlp_multiple", std::to_string(c.mlp_multiple));
    add("init_width_scale", c.init_width_scale ? "true" : "false");
    if (c.mup_base_d) add("mup_base_d", std::to_string(c.mup_base_d));  // muP: logits x mup_base_d / d
    add("prism_step", std::to_string(step));
    if (!implied) add("prism_layer_words", "[" + words + "]");
    if (run_id) {
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)run_id);
        add("prism_run_id", json::quote(hex));
    }
    if (c.V > kGpt2Eot) {
        add("bos_token_id", std::to_string(kGpt2Eot));
        add("eos_token_id", std::to_string(kGpt2Eot));
    }
    add("use_cache", "true");
    s += "  \"dtype\": " + json::quote(dtype) + "\n}\n";
    return s;
}

// A config.json read back: the model and its step. `path` names the file in errors.
struct HfConfig {
    ModelConfig cfg;
    long step = 0;
    uint64_t run_id = 0;  // prism_run_id (0: none given; import then draws one, as a fresh save does)
};

// config.json's values read with their checks; each error names the file and the key.
struct HfConfigReader {
    json::Value o;
    const std::string& path;
    HfError bad(const std::string& why) const { return HfError(path + ": " + why); }
    const json::Value& need(const char* key) const {
        const json::Value* v = o.find(key);
        if (!v || v->kind == json::Value::Null) throw bad(std::string("missing \"") + key + "\"");
        return *v;
    }
    long integer(const json::Value& v, const std::string& key, long lo, long hi) const {
        char* end = nullptr;
        long x = v.kind == json::Value::Number ? strtol(v.str.c_str(), &end, 10) : 0;
        if (v.kind != json::Value::Number || *end != 0 || x < lo || x > hi)
            throw bad("\"" + key + "\" must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
        return x;
    }
    long integer(const char* key, long lo, long hi) const { return integer(need(key), key, lo, hi); }
    double number(const char* key, double lo, double hi) const {
        const json::Value& v = need(key);
        char* end = nullptr;
        double x = v.kind == json::Value::Number ? strtod(v.str.c_str(), &end) : NAN;
        if (v.kind != json::Value::Number || *end != 0 || !(x >= lo && x <= hi))
            throw bad(std::string("\"") + key + "\" must be a number in [" + exact_double(lo) + ", " +
                      exact_double(hi) + "]");
        return x;
    }
    bool boolean(const char* key) const {
        const json::Value& v = need(key);
        if (v.kind != json::Value::Bool) throw bad(std::string("\"") + key + "\" must be true or false");
        return v.b;
    }
    std::string text(const char* key) const {
        const json::Value& v = need(key);
        if (v.kind != json::Value::String) throw bad(std::string("\"") + key + "\" must be a string");
        return v.str;
    }
    // A list of num_hidden_layers = n of a column's words (layer_mixers: "attention", "gdn"), as their values.
    std::vector<int> words(const LayerColumn& col, size_t n) const {
        const json::Value* v = o.find(col.hf_key);
        std::string known;
        for (int k = col.lo; k <= col.hi; k++)
            known += std::string(known.empty() ? "\"" : ", \"") + col.words[k] + "\"";
        const std::string want = std::string("\"") + col.hf_key +
                                 "\" must be a list of num_hidden_layers = " + std::to_string(n) + " of " + known;
        if (!v || v->kind != json::Value::Array || v->arr.size() != n) throw bad(want);
        std::vector<int> out;
        for (const json::Value& x : v->arr) {
            int found = -1;
            for (int k = col.lo; k <= col.hi && x.kind == json::Value::String; k++)
                if (x.str == col.words[k]) found = k;
            if (found < 0) throw bad(want);
            out.push_back(found);
        }
        return out;
    }
    // A list of num_hidden_layers = n integers in [lo, hi].
    std::vector<int> list(const char* key, size_t n, long lo, long hi) const {
        const json::Value* v = o.find(key);
        if (!v || v->kind != json::Value::Array || v->arr.size() != n)
            throw bad(std::string("\"") + key + "\" must be a list of num_hidden_layers = " + std::to_string(n) +
                      " integers");
        std::vector<int> out;
        for (const json::Value& x : v->arr) out.push_back((int)integer(x, key, lo, hi));
        return out;
    }
    // The value of an optional key, or null when it is absent.
    const json::Value* optional(const char* key) const {
        const json::Value* v = o.find(key);
        return v && v->kind != json::Value::Null ? v : nullptr;
    }
};

// The norm, its eps, tying, the attention scale, RoPE and the MLP rule.
inline void read_hf_globals(const HfConfigReader& in, ModelConfig& c) {
    const std::string norm = in.text("norm_type");
    if (norm != "layernorm" && norm != "rmsnorm")
        throw in.bad("\"norm_type\" is \"" + printable(norm) + "\"; it must be layernorm or rmsnorm");
    c.norm = norm == "layernorm" ? NormType::LayerNorm : NormType::RMSNorm;
    c.norm_eps = in.number("norm_eps", 1e-20, 1);
    c.tied = in.boolean("tie_word_embeddings");
    const std::string scale = in.text("attention_scale");
    if (scale != "1/sqrt(head_dim)" && scale != "1/head_dim")
        throw in.bad("\"attention_scale\" is \"" + printable(scale) +
                     "\"; it must be \"1/sqrt(head_dim)\" or \"1/head_dim\"");
    c.mup_attn = scale == "1/head_dim";
    c.rope_theta = in.number("rope_theta", 1, 1e12);
    if (!in.boolean("rope_interleaved"))
        throw in.bad(
            "\"rope_interleaved\" is false; Prism rotates interleaved pairs (2i, 2i+1), and model.bin has no other "
            "layout");
    c.mlp_ratio = in.number("mlp_ratio", 1e-3, 64);
    c.mlp_multiple = (int)in.integer("mlp_multiple", 1, 65536);
}

// The layers' sub-blocks agree with each other: no window without attention, no layer without both, KV heads that
// divide the heads.
inline void check_hf_layers(const HfConfigReader& in, const ModelConfig& c, const std::vector<int>& heads,
                            const std::vector<int>& kv, const std::vector<int>& windows) {
    for (int l = 0; l < c.L(); l++) {
        const LayerSpec& s = c.layers[l];
        const std::string at = "layer " + std::to_string(l) + " (model.layers." + std::to_string(l) + ")";
        if (!s.attention && windows[l])
            throw in.bad(at + " has no attention (layer_kv_heads 0) but layer_windows " + std::to_string(windows[l]) +
                         "; a layer without attention has window 0");
        if (!s.attention && !s.mlp)
            throw in.bad(at +
                         " has neither attention (layer_kv_heads 0) nor an MLP (layer_hidden_sizes 0); drop the layer");
        if (s.attention && (kv[l] > heads[l] || heads[l] % kv[l]))
            throw in.bad(at + ": layer_kv_heads " + std::to_string(kv[l]) + " does not divide layer_heads " +
                         std::to_string(heads[l]) + "; each K/V head serves a whole group of query heads");
    }
}

// prism_layer_words, when given: each layer's stored words, in place of those the lists imply.
inline void read_hf_layer_words(const HfConfigReader& in, ModelConfig& c) {
    const json::Value* w = in.optional("prism_layer_words");
    if (!w) return;
    const std::string want = "\"prism_layer_words\" must be a list of num_hidden_layers = " + std::to_string(c.L()) +
                             " rows [kv_heads, hidden, window] of integers within each column's bounds";
    if (w->kind != json::Value::Array || w->arr.size() != (size_t)c.L()) throw in.bad(want);
    const std::vector<const char*>& names = layer_word_columns();
    for (int l = 0; l < c.L(); l++) {
        const json::Value& row = w->arr[l];
        if (row.kind != json::Value::Array || row.arr.size() != names.size()) throw in.bad(want);
        for (size_t k = 0; k < names.size(); k++) {
            const LayerColumn& col = *find_layer_column(names[k]);
            col.set(c.layers[l], (int)in.integer(row.arr[k], "prism_layer_words", col.lo, col.hi));
        }
    }
}

// The model's stored words (prism_layer_words) give what every list says each layer computes.
inline void check_hf_words_agree(const HfConfigReader& in, const ModelConfig& c,
                                 const std::vector<std::vector<int>>& lists) {
    const std::vector<LayerColumn>& cols = layer_columns();
    auto list = [&](const char* name) -> const std::vector<int>& {
        return lists[find_layer_column(name) - cols.data()];
    };
    for (int l = 0; l < c.L(); l++) {
        bool agree = true;
        for (size_t k = 0; k < cols.size(); k++)
            agree = agree && (!cols[k].hf_key || cols[k].value(c, l) == lists[k][l]);
        if (agree) continue;
        const LayerSpec& s = c.layers[l];
        auto value = [&](const char* name) { return std::to_string(find_layer_column(name)->value(c, l)); };
        throw in.bad("\"prism_layer_words\" row " + std::to_string(l) + " " +
                     int_list({s.kv_heads, s.hidden, s.window}) + " (model.bin's words, 0: the default) gives " +
                     value("kv_heads") + " KV heads, hidden " + value("hidden") + " and window " + value("window") +
                     " where the lists say " + std::to_string(list("kv_heads")[l]) + ", " +
                     std::to_string(list("hidden")[l]) + " and " + std::to_string(list("window")[l]) +
                     "; delete prism_layer_words (kept only for a byte-identical import) if you changed the lists");
    }
}

inline HfConfig parse_hf_config(const std::string& text, const std::string& path) {
    HfConfigReader in{json::Value(), path};
    try {
        in.o = json::parse(text);
    } catch (const json::Error& e) {
        throw in.bad(e.what());
    }
    if (in.o.kind != json::Value::Object) throw in.bad("not a JSON object");
    const json::Value* mt = in.o.find("model_type");
    if (!mt || mt->kind != json::Value::String || mt->str != "prism")
        throw in.bad(
            "model_type is " +
            (mt && mt->kind == json::Value::String ? "\"" + printable(mt->str) + "\"" : std::string("missing")) +
            ", not \"prism\"; pass a directory written by export (or saved from its PrismForCausalLM)");
    HfConfig r;
    ModelConfig& c = r.cfg;
    c.V = (int)in.integer("vocab_size", 1, 1 << 24);
    c.d = (int)in.integer("hidden_size", 1, 65536);
    c.T = (int)in.integer("max_position_embeddings", 1, 1 << 20);
    c.h_base = (int)in.integer("num_attention_heads", 1, 65536);
    const int L = (int)in.integer("num_hidden_layers", 1, 10000);
    // Every column's value list (model/layer_columns.h), within the column's bounds; an optional one may be absent.
    const std::vector<LayerColumn>& cols = layer_columns();
    std::vector<std::vector<int>> lists;
    for (const LayerColumn& col : cols)
        lists.push_back(!col.hf_key || (!in.optional(col.hf_key) && col.hf_optional) ? std::vector<int>{}
                        : col.words                                                  ? in.words(col, L)
                                    : in.list(col.hf_key, L, col.lo, col.hi));
    read_hf_globals(in, c);
    // The layers: what the lists say, stored as model.bin stores it (a layer's default as 0), or
    // prism_layer_words' own words, which must then say the same. An absent optional list keeps the default.
    for (int l = 0; l < L; l++) {
        LayerSpec s{0, 0};
        for (size_t k = 0; k < cols.size(); k++)
            if (!lists[k].empty()) cols[k].set_value(c, s, lists[k][l]);
        c.layers.push_back(s);
    }
    for (size_t k = 0; k < cols.size(); k++)  // an absent list: the values the layers have without it
        if (lists[k].empty()) lists[k] = column_values(cols[k], c);
    auto values = [&](const char* name) -> const std::vector<int>& {
        return lists[find_layer_column(name) - cols.data()];
    };
    check_hf_layers(in, c, values("heads"), values("kv_heads"), values("window"));
    read_hf_layer_words(in, c);
    c.init_width_scale = in.boolean("init_width_scale");
    if (const json::Value* b = in.optional("mup_base_d")) c.mup_base_d = (int)in.integer(*b, "mup_base_d", 0, 65536);
    const json::Value* step = in.optional("prism_step");
    r.step = step ? in.integer(*step, "prism_step", 0, 9223372036854775807L) : 0;
    if (const json::Value* id = in.optional("prism_run_id")) {
        char* end = nullptr;
        const std::string h = id->kind == json::Value::String ? id->str : "";
        r.run_id = h.size() == 16 ? strtoull(h.c_str(), &end, 16) : 0;
        if (h.size() != 16 || *end != 0 || r.run_id == 0)
            throw in.bad("\"prism_run_id\" must be 16 hex digits, not 0 (the model.bin's run id), or null");
    }
    try {
        validate_config(c);
    } catch (const ConfigError& e) {
        throw in.bad(e.what());
    }
    check_hf_words_agree(in, c, lists);
    if (in.integer("residual_width", 1, 1 << 30) != c.D())
        throw in.bad("\"residual_width\" must be max(hidden_size, layer_widths) = " + std::to_string(c.D()));
    if (in.integer("final_norm_width", 1, 1 << 30) != c.Df())
        throw in.bad("\"final_norm_width\" must be max(hidden_size, last layer width) = " + std::to_string(c.Df()));
    return r;
}
