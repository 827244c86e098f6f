// test_layer_table.cpp: the per-layer columns declared once (model/layer_columns.h) and the edges that iterate them:
// model.bin version 5's self-describing layer table (every column round-trips; versions 3 and 4 still load; a
// column this build does not know loads at its default and is refused, naming it, when set; a corrupt column count
// or name is refused), the flags' checks at parse time (bounds shared with the loader, a single value suggesting
// the every-layer form), the one "uniform" predicate, config.json's per-layer lists (layer_rope), and the run
// record's per-layer entries agreeing with the tables (null where they show "-").
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "model/layer_columns.h"
#include "hf/hf_config.h"
#include "run/checkpoint.h"
#include "run/plan_views.h"
#include "run/run_record.h"
#include "run/defaults.h"
#include "run/model_flags.h"
#include "test/train_util.h"

namespace {

ModelConfig build(const ModelSpec& s) {
    std::vector<std::string> w;
    return build_config(s, w);
}

// A tiny model that uses every column: widths, heads, GQA, MLP sizes, windows, dropped sub-blocks and NoPE.
ModelSpec every_column() {
    ModelSpec s;
    s.preset = "tiny", s.d = 64, s.L = 6, s.T = 32, s.V = 97, s.h_base = 4, s.allow_ablation = true;
    s.widths = "64,96,64,64,32,64", s.heads = "2,4,4,4,2,4", s.kv_heads = "1,2,2,4,1,1";
    s.mlp = "64,128,96,160,64,96", s.window = "8,0,16,0,4,0", s.no_attention = "3", s.no_mlp = "6";
    s.no_rope = "2,4";
    return s;
}

bool same_columns(const ModelConfig& a, const ModelConfig& b) {
    if (a.L() != b.L()) return false;
    for (const LayerColumn& col : layer_columns())
        for (int l = 0; l < a.L(); l++)
            if (col.get(a.layers[l]) != col.get(b.layers[l])) return false;
    return true;
}

std::string temp_dir() {
    char tmpl[] = "/tmp/prism_table_XXXXXX";
    return mkdtemp(tmpl);
}

std::vector<char> read_bytes(const std::string& path) {
    FILE* f = fopen(path.c_str(), "rb");
    REQUIRE(f);
    std::vector<char> b;
    char buf[65536];
    for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) b.insert(b.end(), buf, buf + n);
    fclose(f);
    return b;
}

// A model.bin of header h (its checksum words recomputed), table and parameters.
void write_model_file(const std::string& path, std::vector<int32_t> h, const std::vector<int32_t>& table,
                      const std::vector<float>& p) {
    put64(h.data(), 24, 0);
    Checksum64 sum;
    sum.update(h.data(), 1024);
    sum.update(table.data(), 4 * table.size());
    sum.update(p.data(), 4 * p.size());
    put64(h.data(), 24, (int64_t)sum.value());
    write_atomically(path, {{h.data(), 1024}, {table.data(), 4 * table.size()}, {p.data(), 4 * p.size()}});
}

void put_name(std::vector<int32_t>& h, int k, const char* name) {
    memset(&h[32 + 4 * k], 0, 16);
    memcpy(&h[32 + 4 * k], name, strlen(name));
}

void require_refused(const std::string& path, const std::string& needle) {
    try {
        load_model(path);
        FAIL("expected " << path << " to be refused with '" << needle << "'");
    } catch (const CheckpointError& e) {
        INFO("message: " << e.what());
        CHECK(std::string(e.what()).find(needle) != std::string::npos);
        CHECK(std::string(e.what()).find('\n') == std::string::npos);
    }
}

std::string config_error(const ModelSpec& s) {
    try {
        build(s);
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "(no error)";
}

// train_prism's flags applied to argv (--help included): the error, or "(no error)".
std::string flag_error(std::vector<std::string> args) {
    TrainOptions o;
    Command cmd = train_prism_command(o);
    args.insert(args.begin(), "train_prism");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(&a[0]);
    try {
        parse_command(cmd, (int)argv.size(), argv.data());
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

TEST_CASE("model.bin version 5 names its columns and round-trips every one", "[layers][checkpoint]") {
    const ModelConfig c = build(every_column());
    REQUIRE(!c.layers[1].rope);
    REQUIRE(!c.layers[2].attention);
    REQUIRE(!c.layers[5].mlp);
    const size_t P = param_layout(c).total;
    std::vector<float> p(P);
    for (size_t i = 0; i < P; i++) p[i] = (float)i * 1e-4f - 0.25f;
    const std::string dir = temp_dir();
    save_model(dir + "/m.bin", c, p.data(), P, 9, 1234);
    const std::vector<char> bytes = read_bytes(dir + "/m.bin");
    const size_t C = layer_columns().size();
    REQUIRE(bytes.size() == 1024 + 4 * C * c.L() + 4 * P);
    const int32_t* h = (const int32_t*)bytes.data();
    CHECK(h[1] == 5);
    CHECK(h[28] == (int32_t)C);
    for (size_t k = 0; k < C; k++) CHECK(std::string((const char*)(h + 32 + 4 * k)) == layer_columns()[k].name);
    const int32_t* table = h + 256;
    for (int l = 0; l < c.L(); l++)
        for (size_t k = 0; k < C; k++) CHECK(table[l * C + k] == layer_columns()[k].get(c.layers[l]));
    const LoadedModel m = load_model(dir + "/m.bin");
    CHECK(same_columns(m.cfg, c));
    CHECK(m.params == p);
    CHECK(m.step == 9);
    CHECK(m.run_id == 1234);
    // the default layer stores 0 in every column but width and heads
    const ModelConfig u = build(ModelSpec());
    for (const LayerColumn& col : layer_columns())
        if (col.lo == 0) CHECK(col.get(u.layers[0]) == 0);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("model.bin versions 3 and 4 (fixed layer tables) still load", "[layers][checkpoint]") {
    ModelSpec s = every_column();
    s.no_rope = "";  // versions before 5 have no NoPE column
    const ModelConfig c = build(s);
    const size_t P = param_layout(c).total;
    std::vector<float> p(P, 0.125f);
    const std::string dir = temp_dir();
    save_model(dir + "/v5.bin", c, p.data(), P, 4, 77);
    std::vector<int32_t> h(256);
    memcpy(h.data(), read_bytes(dir + "/v5.bin").data(), 1024);
    for (int i = 28; i < 256; i++) h[i] = 0;
    h[1] = 4;
    std::vector<int32_t> v4;
    for (const LayerSpec& l : c.layers)
        v4.insert(v4.end(), {l.width, l.heads, l.kv_heads, l.hidden, l.window, (!l.attention) | (!l.mlp) << 1});
    write_model_file(dir + "/v4.bin", h, v4, p);
    const LoadedModel m4 = load_model(dir + "/v4.bin");
    CHECK(same_columns(m4.cfg, c));
    CHECK(m4.params == p);
    v4[5] = 4;  // a flags word beyond bits 0 and 1
    write_model_file(dir + "/v4bad.bin", h, v4, p);
    require_refused(dir + "/v4bad.bin", "layer 1 flags = 4, must lie in [0, 3]");

    ModelSpec plain;
    plain.V = 97;
    const ModelConfig old = build(plain);  // a version 3 table: width and heads
    std::vector<float> po(param_layout(old).total, 0.5f);
    h[1] = 3, h[2] = old.d, h[3] = old.V, h[4] = old.T, h[5] = old.L(), h[6] = old.h_base, h[7] = (int)old.norm;
    h[8] = old.tied, h[11] = old.mlp_multiple;
    put64(h.data(), 14, (int64_t)po.size());
    std::vector<int32_t> v3;
    for (const LayerSpec& l : old.layers) v3.insert(v3.end(), {l.width, l.heads});
    write_model_file(dir + "/v3.bin", h, v3, po);
    const LoadedModel m3 = load_model(dir + "/v3.bin");
    CHECK(same_columns(m3.cfg, old));
    CHECK(m3.params == po);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("a model.bin column this build does not know loads when all 0 and is refused by name when set",
          "[layers][checkpoint]") {
    const ModelConfig c = build(every_column());
    const size_t P = param_layout(c).total, C = layer_columns().size();
    std::vector<float> p(P, -0.5f);
    const std::string dir = temp_dir();
    save_model(dir + "/m.bin", c, p.data(), P, 1, 5);
    const std::vector<char> bytes = read_bytes(dir + "/m.bin");
    std::vector<int32_t> h(256),
        table((const int32_t*)(bytes.data() + 1024), (const int32_t*)(bytes.data() + 1024 + 4 * C * c.L()));
    memcpy(h.data(), bytes.data(), 1024);
    // One more column, "later_col", inserted second (a reader takes columns by name, not position).
    auto with_column = [&](int32_t value_in_layer_3) {
        std::vector<int32_t> hh = h, t;
        hh[28] = (int32_t)C + 1;
        std::vector<std::string> names = {layer_columns()[0].name, "later_col"};
        for (size_t k = 1; k < C; k++) names.push_back(layer_columns()[k].name);
        for (size_t k = 0; k < names.size(); k++) put_name(hh, (int)k, names[k].c_str());
        for (int l = 0; l < c.L(); l++) {
            t.push_back(table[l * C]);
            t.push_back(l == 2 ? value_in_layer_3 : 0);
            t.insert(t.end(), table.begin() + l * C + 1, table.begin() + (l + 1) * C);
        }
        return std::make_pair(hh, t);
    };
    auto [h0, t0] = with_column(0);
    write_model_file(dir + "/zero.bin", h0, t0, p);
    const LoadedModel m = load_model(dir + "/zero.bin");
    CHECK(same_columns(m.cfg, c));
    CHECK(m.params == p);
    auto [h1, t1] = with_column(3);
    write_model_file(dir + "/set.bin", h1, t1, p);
    require_refused(dir + "/set.bin", "sets column later_col (layer 3 later_col = 3), which this build does not know");

    // A file without a column that has a default loads with that default (an older version 5 writer).
    {
        std::vector<int32_t> hh = h, t;
        hh[28] = (int32_t)C - 1;  // no no_rope column (the last)
        for (int i = 32 + 4 * ((int)C - 1); i < 256; i++) hh[i] = 0;
        for (int l = 0; l < c.L(); l++) t.insert(t.end(), table.begin() + l * C, table.begin() + (l + 1) * C - 1);
        write_model_file(dir + "/short.bin", hh, t, p);
        const LoadedModel s = load_model(dir + "/short.bin");
        for (const LayerSpec& l : s.cfg.layers) CHECK(l.rope);
    }

    // Corrupt column counts and names.
    struct Case {
        const char* what;
        void (*edit)(std::vector<int32_t>&);
        const char* needle;
    };
    const Case cases[] = {
        {"no columns", [](std::vector<int32_t>& x) { x[28] = 0; }, "layer column count = 0"},
        {"too many", [](std::vector<int32_t>& x) { x[28] = 57; }, "layer column count = 57"},
        {"one more than the table", [](std::vector<int32_t>& x) { x[28] += 1; },
         "corrupt header: the name of layer column"},
        {"one fewer", [](std::vector<int32_t>& x) { x[28] -= 1; }, "corrupt header: word"},
        {"a non-ASCII name", [](std::vector<int32_t>& x) { ((char*)&x[32 + 8])[1] = (char)0xC3; }, "layer column 2"},
        {"bytes after the name's end", [](std::vector<int32_t>& x) { ((char*)&x[32 + 4])[15] = 'x'; },
         "layer column 1"},
        {"an empty name", [](std::vector<int32_t>& x) { memset(&x[32 + 12], 0, 16); }, "layer column 3"},
        {"a name twice", [](std::vector<int32_t>& x) { memcpy(&x[32 + 8], &x[32 + 12], 16); }, "named twice"},
        {"no width column", [](std::vector<int32_t>& x) { put_name(x, 0, "wide"); }, "has no width column"},
        {"words 29..31 not zero", [](std::vector<int32_t>& x) { x[30] = 1; }, "corrupt header: word 30"},
    };
    for (const Case& k : cases) {
        INFO(k.what);
        std::vector<int32_t> hh = h;
        k.edit(hh);
        write_model_file(dir + "/bad.bin", hh, table, p);
        require_refused(dir + "/bad.bin", k.needle);
    }
    // A column word outside its bounds is refused, naming layer and column.
    std::vector<int32_t> t = table;
    t[1 * C + 4] = (1 << 20) + 1;  // layer 2's window
    write_model_file(dir + "/win.bin", h, t, p);
    require_refused(dir + "/win.bin", "layer 2 window = 1048577, must lie in [0, 1048576]");
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("a layer flag is checked when parsed, against the bound the loader applies", "[layers][cli]") {
    // The window bound is model.bin's: a window the loader would refuse is refused before anything trains.
    CHECK_THAT(flag_error({"--window", "local:2000000"}),
               Catch::Contains("--window local:2000000: window 2000000 is out of range [0, 1048576]"));
    CHECK(flag_error({"--window", "local:1048576"}) == "(no error)");
    CHECK_THAT(flag_error({"--window", "8,2000000"}), Catch::Contains("window 2000000 is out of range"));
    CHECK_THAT(flag_error({"--kv-heads", "gqa:70000"}), Catch::Contains("--kv-heads gqa:70000: KV-head count 70000"));
    CHECK_THAT(flag_error({"--mlp", "2000000x2"}), Catch::Contains("--mlp 2000000x2: MLP hidden size 2000000"));
    CHECK_THAT(flag_error({"-w", "100000,64"}), Catch::Contains("--widths 100000,64: width 100000 is out of range"));
    // ... before --help, so that a bad value is an error even there
    CHECK_THAT(flag_error({"--kv-heads", "x<y", "--help"}), Catch::Contains("unknown KV-head schedule 'x<y'"));
    CHECK_THAT(flag_error({"--help", "-s", "primes"}), Catch::Contains("unknown head schedule 'primes'"));
    CHECK_THAT(flag_error({"--no-rope", "2-", "--help"}), Catch::Contains("--no-rope"));
    CHECK(flag_error({"--no-rope", "2,4", "--kv-heads", "gqa:2", "--window", "local:32,2:1", "--help"}) ==
          "(no error)");
    // the same bound in validate_config (a config built in code, or read from a file)
    ModelConfig c = build(ModelSpec());
    c.layers[1].window = (1 << 20) + 1;
    REQUIRE_THROWS_WITH(validate_config(c), Catch::Contains("layer 2: window 1048577 is out of range [0, 1048576]"));
}

TEST_CASE("a single value for a per-layer flag suggests the form that gives every layer that value", "[layers]") {
    ModelSpec s;  // tiny: 6 layers of 4 heads
    s.kv_heads = "2";
    CHECK_THAT(config_error(s), Catch::Contains("--kv-heads 2 gives one value but the model has 6 layers; for 2 in "
                                                "every layer write --kv-heads gqa:2"));
    s = ModelSpec(), s.window = "32";
    CHECK_THAT(config_error(s), Catch::Contains("write --window local:32"));
    s = ModelSpec(), s.mlp = "256";
    CHECK_THAT(config_error(s), Catch::Contains("write --mlp 256x6"));
    s = ModelSpec(), s.heads = "2";
    CHECK_THAT(config_error(s), Catch::Contains("write --heads 2"));
    s = ModelSpec(), s.kv_heads = "2,2";  // a list of another length keeps its own message
    CHECK_THAT(config_error(s), Catch::Contains("--kv-heads has 2 entries but the model has 6 layers"));
    s = ModelSpec(), s.L = 1, s.kv_heads = "2";  // one layer: one value is the whole list
    CHECK(config_error(s) == "(no error)");
}

TEST_CASE("is_uniform: one predicate on the built table", "[layers]") {
    auto uniform = [](void (*edit)(ModelSpec&)) {
        ModelSpec s;
        edit(s);
        return is_uniform(build(s));
    };
    CHECK(uniform([](ModelSpec&) {}));
    CHECK(uniform([](ModelSpec& s) { s.window = "0x6"; }));    // spelled differently, built the same
    CHECK(uniform([](ModelSpec& s) { s.kv_heads = "4x6"; }));  // every head its own K and V
    CHECK(uniform([](ModelSpec& s) { s.heads = "4,4,4,4,4,4"; }));
    CHECK(!uniform([](ModelSpec& s) { s.window = "local:32"; }));
    CHECK(!uniform([](ModelSpec& s) { s.kv_heads = "gqa:2"; }));
    CHECK(!uniform([](ModelSpec& s) { s.no_mlp = "2"; }));
    CHECK(!uniform([](ModelSpec& s) { s.no_rope = "2"; }));
    CHECK(!uniform([](ModelSpec& s) { s.mlp = "openelm"; }));
    CHECK(!uniform([](ModelSpec& s) { s.widths = "lambda"; }));
    // a run record's args rebuild its model (report's groups)
    CHECK(is_uniform(model_of_args({{"--model", "tiny"}, {"--window", "0x6"}, {"--seed", "3"}})));
    CHECK(!is_uniform(model_of_args({{"--model", "tiny"}, {"--no-rope", "1"}})));
}

TEST_CASE("--plan and the record show every column: NoPE layers included", "[layers]") {
    ModelSpec s;
    s.no_rope = "2,4", s.kv_heads = "gqa:2", s.window = "local:32,2:1";
    const ModelConfig c = build(s);
    const std::string lines = layer_column_lines(c);
    CHECK_THAT(lines, Catch::Contains("  kv     2x6\n"));
    CHECK_THAT(lines, Catch::Contains("  window 32x2,0,32x2,0 (0 = global)\n"));
    CHECK_THAT(lines, Catch::Contains("  no RoPE: layers 2,4\n"));
    CHECK_THAT(layer_json_members(c, 1), Catch::Contains("\"kv_heads\": 2, \"hidden\": "));
    CHECK_THAT(layer_json_members(c, 1), Catch::Contains("\"attention\": true, \"mlp\": true, \"rope\": false"));
    CHECK(layer_column_lines(build(ModelSpec())).empty());
    // --plan's per-layer table (layer_table, as report, analyze and export's model card): a RoPE column, "no" in
    // layers 2 and 4, beside every number column; a uniform model's has no RoPE column.
    auto plan_table = [](const ModelConfig& m) {
        char* buf = nullptr;
        size_t n = 0;
        FILE* f = open_memstream(&buf, &n);
        print_plan(f, "t", m);
        fclose(f);
        const std::string text(buf, n);
        free(buf);
        std::vector<std::vector<std::string>> rows;  // the table's lines, split at spaces
        size_t at = text.find("\nlayer ");
        REQUIRE(at != std::string::npos);
        for (size_t k = 0; k <= (size_t)m.L(); k++) {
            const size_t end = text.find('\n', at + 1);
            std::vector<std::string> cells;
            std::string cell;
            for (char ch : text.substr(at + 1, end - at - 1) + " ")
                if (ch != ' ') cell += ch;
                else if (!cell.empty()) cells.push_back(cell), cell.clear();
            rows.push_back(cells), at = end;
        }
        return rows;
    };
    const std::vector<std::vector<std::string>> t = plan_table(c);
    REQUIRE(t[0] == std::vector<std::string>{"layer", "width", "heads", "head_dim", "kv", "hidden", "window", "RoPE",
                                             "params", "FLOPs/token", "KV", "B/tok"});
    for (int l = 1; l <= 6; l++) {
        INFO("layer " << l);
        CHECK(t[l][0] == std::to_string(l));
        CHECK(t[l][4] == "2");
        CHECK(t[l][6] == (l == 3 || l == 6 ? "global" : "32"));
        CHECK(t[l][7] == (l == 2 || l == 4 ? "no" : "yes"));
    }
    CHECK(plan_table(build(ModelSpec()))[0] == std::vector<std::string>{"layer", "width", "heads", "head_dim", "kv",
                                                                        "hidden", "window", "params", "FLOPs/token",
                                                                        "KV", "B/tok"});
}

TEST_CASE("the run record's per-layer entries agree with the tables: null for a sub-block the layer lacks",
          "[layers]") {
    ModelSpec s = every_column();
    const ModelConfig c = build(s);  // layer 3 without attention, layer 6 without an MLP, layers 2 and 4 NoPE
    const json::Value rec = json::parse(model_record_json(s, c));
    const json::Value& layers = json::field(rec, "layers");
    REQUIRE(layers.arr.size() == 6);
    std::vector<const LayerColumn*> all;
    for (const LayerColumn& col : layer_columns()) all.push_back(&col);
    const std::vector<LayerTableColumn> table = layer_table(c, all);  // --plan's, report's: every column
    for (int l = 0; l < 6; l++) {
        const json::Value& e = layers.arr[l];
        CHECK(json::int_field(e, "layer") == l + 1);
        for (const LayerTableColumn& col : table) {
            // the table's heading to the record's key: the column's key, or head_dim
            std::string key = col.heading;
            for (const LayerColumn& lc : layer_columns())
                if (col.heading == lc.heading) key = lc.key;
            INFO("layer " << l + 1 << " " << key << ": table " << col.cells[l]);
            const json::Value* v = e.find(key);
            REQUIRE(v);
            CHECK((col.cells[l] == "-") == (v->kind == json::Value::Null));
            if (v->kind == json::Value::Bool) CHECK(col.cells[l] == (v->b ? "yes" : "no"));
            if (v->kind == json::Value::Number && col.cells[l] != "global") CHECK(col.cells[l] == v->str);
        }
    }
    // The layer without attention: no heads, KV heads, head_dim, window or RoPE; "attention": false says why.
    const json::Value& none = layers.arr[2];
    for (const char* key : {"heads", "kv_heads", "head_dim", "window", "rope"}) {
        INFO(key);
        CHECK(json::field(none, key).kind == json::Value::Null);
    }
    CHECK(json::field(none, "attention").kind == json::Value::Bool);
    CHECK(!json::field(none, "attention").b);
    CHECK(json::int_field(none, "width") == 64);
    CHECK(json::int_field(none, "hidden") == 96);
    // The layer without an MLP: no hidden size; its attention whole.
    CHECK(json::field(layers.arr[5], "hidden").kind == json::Value::Null);
    CHECK(!json::field(layers.arr[5], "mlp").b);
    CHECK(json::int_field(layers.arr[5], "heads") == 4);
    CHECK(json::int_field(layers.arr[5], "head_dim") == 16);
    // A NoPE layer has attention, so its RoPE is false, not null.
    CHECK(json::field(layers.arr[1], "rope").kind == json::Value::Bool);
    CHECK(!json::field(layers.arr[1], "rope").b);
}

TEST_CASE("config.json carries layer_rope; without it every layer is rotary", "[hf]") {
    ModelSpec s = every_column();
    const ModelConfig c = build(s);
    const std::string json = hf_config_json(c, 3, "float32");
    INFO(json);
    CHECK_THAT(json, Catch::Contains("\"layer_rope\": [1, 0, 1, 0, 1, 1],"));
    CHECK(same_columns(parse_hf_config(json, "config.json").cfg, c));
    // an export of before layer_rope
    s.no_rope = "";
    const ModelConfig rotary = build(s);
    std::string old = hf_config_json(rotary, 3, "float32");
    const std::string key = "  \"layer_rope\": [1, 1, 1, 1, 1, 1],\n";
    REQUIRE(old.find(key) != std::string::npos);
    old.erase(old.find(key), key.size());
    CHECK(same_columns(parse_hf_config(old, "config.json").cfg, rotary));
    // NoPE on a layer without attention, or a value other than 0 / 1, is refused
    std::string bad = json;
    bad.replace(bad.find("\"layer_rope\": [1, 0, 1"), 22, "\"layer_rope\": [1, 0, 0");
    CHECK_THROWS_WITH(parse_hf_config(bad, "config.json"), Catch::Contains("layer 3: has no attention"));
    bad = json;
    bad.replace(bad.find("\"layer_rope\": [1"), 16, "\"layer_rope\": [2");
    CHECK_THROWS_WITH(parse_hf_config(bad, "config.json"),
                      Catch::Contains("\"layer_rope\" must be an integer in [0, 1]"));
}
