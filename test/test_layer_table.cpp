// test_layer_table.cpp: the per-layer columns declared once (model/layer_columns.h) and the edges that iterate them:
// model.bin version 5's self-describing layer table (every column round-trips; versions 3 and 4 still load; a
// column this build does not know loads at its default and is refused, naming it, when set; a corrupt column count
// or name is refused), the flags' checks at parse time (bounds shared with the loader, a single value suggesting
// the every-layer form), the one "uniform" predicate, config.json's per-layer lists (layer_rope), and the run
// record's per-layer entries agreeing with the tables (null where they show "-"); the mixer column (--mixer's
// forms, its refusals, a gdn layer's tensors, accounting, init, --plan, model.bin and config.json).
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
#include "ref/init.h"
#include "ref/reference.h"
#include "run/cost_model.h"
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
        const size_t k = find_layer_column("no_rope") - layer_columns().data();  // no no_rope column
        hh[28] = (int32_t)C - 1;
        for (size_t j = k; j + 1 < C; j++) put_name(hh, (int)j, layer_columns()[j + 1].name);
        for (int i = 32 + 4 * ((int)C - 1); i < 256; i++) hh[i] = 0;
        for (int l = 0; l < c.L(); l++)
            for (size_t j = 0; j < C; j++)
                if (j != k) t.push_back(table[l * C + j]);
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

namespace {

// A two-layer hybrid small enough to count by hand: d 64, 4 heads (hd 16), T 32, explicit MLPs of 128.
ModelSpec hybrid() {
    ModelSpec s;
    s.preset = "tiny", s.d = 64, s.L = 2, s.T = 32, s.V = 97, s.h_base = 4, s.mlp = "128,128";
    s.mixer = "gdn,attention";
    return s;
}

std::vector<int> mixers(const ModelConfig& c) { return column_values(*find_layer_column("mixer"), c); }

std::string plan_text(const ModelConfig& c, bool as_json) {
    char* buf = nullptr;
    size_t n = 0;
    FILE* f = open_memstream(&buf, &n);
    if (as_json) print_plan_json(f, "t", c, {});
    else print_plan(f, "t", c);
    fclose(f);
    const std::string text(buf, n);
    free(buf);
    return text;
}

}  // namespace

TEST_CASE("--mixer: attention, gdn, gdn:N:M and run-length word lists give one mixer per layer", "[layers][mixer]") {
    ModelSpec s;
    s.preset = "124M";
    CHECK(mixers(build(s)) == std::vector<int>(12, 0));  // the default
    s.mixer = "gdn";
    CHECK(mixers(build(s)) == std::vector<int>(12, 1));
    s.mixer = "gdn:3:1";  // Qwen3-Next's 3:1: layers 4, 8, 12 attention
    CHECK(mixers(build(s)) == std::vector<int>{1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0});
    s.mixer = "gdn:1:2";
    CHECK(mixers(build(s)) == std::vector<int>{1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0});
    s.mixer = "gdnx3,attention,gdn x 3,attention,gdn*3, attention";
    CHECK(mixers(build(s)) == std::vector<int>{1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0});
    s.mixer = "attentionx11,gdn";
    CHECK(mixers(build(s)) == std::vector<int>{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1});
    // The words everywhere the column is shown: the model line in the flag's own form, the table's cells.
    s.mixer = "gdn:3:1";
    const ModelConfig c = build(s);
    CHECK_THAT(layer_column_lines(c), Catch::Contains("  mixer  gdnx3,attention,gdnx3,attention,gdnx3,attention\n"));
    CHECK(layer_cell(*find_layer_column("mixer"), c, 0) == "gdn");
    CHECK(layer_cell(*find_layer_column("mixer"), c, 3) == "attention");
    CHECK(!is_uniform(c));
    CHECK(is_uniform(build(ModelSpec())));
    // Bad forms: one line each, at parse time (the flag) and at build time (the layer count).
    for (const auto& [text, needle] : std::vector<std::pair<std::string, std::string>>{
             {"mamba", "unknown mixer schedule 'mamba'"},
             {"gdn:3", "give the interleave as gdn:N:M"},
             {"gdn:0:1", "gdn:N:M's N"},
             {"gdn:3:x", "gdn:N:M's M"},
             {"gdnx0,attention", "repeat count"},
             {"gdn,softmax", "'softmax' is not a mixer; use attention or gdn"},
             {"x3,gdn", "neither a mixer nor a run WORDxCOUNT"}}) {
        INFO(text);
        CHECK_THAT(flag_error({"--mixer", text}), Catch::Contains(needle));
        CHECK(flag_error({"--mixer", text}).find('\n') == std::string::npos);
    }
    s.mixer = "gdnx3,attention";
    CHECK_THAT(config_error(s), Catch::Contains("--mixer has 4 entries but the model has 12 layers"));
}

TEST_CASE("a gdn layer refuses a window, NoPE, grouped KV heads and a missing attention sub-block", "[layers][mixer]") {
    ModelSpec s = hybrid();
    REQUIRE(config_error(s) == "(no error)");
    ModelSpec w = s;
    w.window = "8,0";
    CHECK(config_error(w) ==
          "layer 1: the gdn mixer has no attention window, but the layer has window 8; give gdn layers window 0 "
          "(--window list) or make the layer attention (--mixer)");
    w.window = "0,8";  // a window on the attention layer is its own business
    CHECK(config_error(w) == "(no error)");
    ModelSpec r = s;
    r.no_rope = "1";
    CHECK_THAT(config_error(r), Catch::Contains("layer 1: the gdn mixer uses no rotary embedding"));
    r.no_rope = "2";
    CHECK(config_error(r) == "(no error)");
    ModelSpec k = s;
    k.kv_heads = "2,4";
    CHECK_THAT(config_error(k), Catch::Contains("layer 1: the gdn mixer has one key and value per head, but the layer "
                                                "has 2 KV heads for 4 heads"));
    k.kv_heads = "4,2";  // kv = heads written out is the default, and GQA on the attention layer is fine
    CHECK(config_error(k) == "(no error)");
    ModelSpec a = s;
    a.no_attention = "1";
    CHECK_THAT(config_error(a), Catch::Contains("layer 1: is gdn (--mixer) but has no attention sub-block"));
}

TEST_CASE("a gdn layer's tensors: the contract's names, shapes, order and weight-decay groups", "[layers][mixer]") {
    const ModelConfig c = build(hybrid());
    const ParamLayout p = param_layout(c);
    struct Want {
        const char* name;
        size_t rows, cols;
        bool matrix;
    };
    const std::vector<Want> want = {
        {"wte", 97, 64, true},        {"h0.ln1_w", 64, 1, false},  {"h0.ln1_b", 64, 1, false},
        {"h0.wqkv", 192, 64, true},   {"h0.conv_w", 192, 4, true}, {"h0.wz", 64, 64, true},
        {"h0.wba", 8, 64, true},      {"h0.a_log", 4, 1, false},   {"h0.dt_bias", 4, 1, false},
        {"h0.onorm_w", 16, 1, false}, {"h0.wo", 64, 64, true},     {"h0.ln2_w", 64, 1, false},
        {"h0.ln2_b", 64, 1, false},   {"h0.wfc", 256, 64, true},   {"h0.wproj", 64, 128, true},
        {"h1.ln1_w", 64, 1, false},   {"h1.ln1_b", 64, 1, false},  {"h1.wqkv", 192, 64, true},
        {"h1.wo", 64, 64, true},      {"h1.ln2_w", 64, 1, false},  {"h1.ln2_b", 64, 1, false},
        {"h1.wfc", 256, 64, true},    {"h1.wproj", 64, 128, true}, {"lnf_w", 64, 1, false},
        {"lnf_b", 64, 1, false}};
    REQUIRE(p.tensors.size() == want.size());
    size_t at = 0;
    for (size_t i = 0; i < want.size(); i++) {
        const ParamTensor& t = p.tensors[i];
        INFO(t.name);
        CHECK(t.name == want[i].name);
        CHECK(t.rows == want[i].rows);
        CHECK(t.cols == want[i].cols);
        CHECK(t.is_matrix == want[i].matrix);
        CHECK(t.offset == at);
        at += t.numel();
    }
    CHECK(p.total == at);
    const LayerOffsets& g = p.layer[0];
    CHECK(g.wqkv == p.tensors[3].offset);
    CHECK(g.conv_w == p.tensors[4].offset);
    CHECK(g.wz == p.tensors[5].offset);
    CHECK(g.wba == p.tensors[6].offset);
    CHECK(g.a_log == p.tensors[7].offset);
    CHECK(g.dt_bias == p.tensors[8].offset);
    CHECK(g.onorm_w == p.tensors[9].offset);
    CHECK(g.wo == p.tensors[10].offset);
    const LayerOffsets& a = p.layer[1];  // the attention layer has none of them
    for (size_t o : {a.conv_w, a.wz, a.wba, a.a_log, a.dt_bias, a.onorm_w}) CHECK(o == SIZE_MAX);
    // The device layout moves the new fields with the rest.
    const ParamLayout d = device_layout(c);
    CHECK(d.layer[0].conv_w == d.tensors[4].offset);
    CHECK(d.layer[0].onorm_w == d.tensors[9].offset);
}

TEST_CASE("a gdn layer's accounting: parameters, FLOPs, state bytes and dead weights, counted by hand",
          "[layers][mixer]") {
    const ModelConfig c = build(hybrid());
    const Accounting a = account(c);
    // Layer 1, gdn (w 64, h 4, hd 16, C = min(64, T 32) = 32): wqkv 3*64*64 + wz 64*64 + wba 8*64 + wo 64*64 = 20992,
    // the MLP 3*64*128 = 24576; conv 12*64, a_log and dt_bias 2*4, onorm_w 16, norms 2 sub-blocks x 2 x 64.
    const LayerCost& g = a.layers[0];
    CHECK(g.mixer == 1);
    CHECK(g.matrix_params == 20992 + 24576);
    CHECK(g.params == 45568 + 768 + 8 + 16 + 256);
    CHECK(g.dead_params == 0);
    const double mixing = 24.0 * 64 + 4 * (6.0 * 256 + 10.0 * 32 * 16 + 2.0 / 3.0 * 32 * 32);
    CHECK(g.mixing_flops == Approx(mixing).epsilon(1e-12));
    CHECK(g.flops_per_token == Approx(2.0 * 45568 + mixing).epsilon(1e-12));
    CHECK(g.kv_bytes_per_token == 0);
    CHECK(g.kv_cache_bytes == 0);
    CHECK(g.state_bytes == 4 * 4 * 16 * 16 + 2 * 3 * 3 * 64);  // fp32 S per head, the bf16 conv tail
    // Layer 2, attention: today's counts.
    const LayerCost& t = a.layers[1];
    CHECK(t.mixer == 0);
    CHECK(t.matrix_params == 3 * 64 * 64 + 64 * 64 + 24576);
    CHECK(t.flops_per_token == 2.0 * 40960 + 4.0 * 32 * 64);
    CHECK(t.kv_cache_bytes == 2 * 2 * 64 * 32);
    CHECK(t.state_bytes == 0);
    // Totals: the embedding (tied), both layers, the final LayerNorm; the head's 2 d V FLOPs.
    CHECK(a.params == 97 * 64 + 46616 + 40960 + 256 + 128);
    CHECK(a.state_bytes == 5248);
    CHECK(a.kv_cache_bytes == 8192);
    CHECK(a.flops_per_token == Approx(2.0 * 45568 + mixing + 90112 + 2.0 * 64 * 97).epsilon(1e-12));
    // The state is constant in T; the FLOPs' chunk stops growing at 64.
    ModelSpec longer = hybrid();
    longer.T = 4096;
    const LayerCost g4 = account(build(longer)).layers[0];
    CHECK(g4.state_bytes == g.state_bytes);
    CHECK(g4.mixing_flops == Approx(24.0 * 64 + 4 * (6.0 * 256 + 10.0 * 64 * 16 + 2.0 / 3.0 * 64 * 64)));
    // A gdn first layer wider than d: wqkv's, wz's and wba's input columns beyond d are dead (all read [0, w)).
    ModelSpec wide = hybrid();
    wide.widths = "96,64";
    const LayerCost w = account(build(wide)).layers[0];
    CHECK(w.dead_params == (3 * 96 + 96 + 2 * 4) * (96 - 64));
    CHECK(w.flops_per_token == Approx(2.0 * (w.matrix_params - w.dead_params) + w.mixing_flops));
    CHECK(w.dense_flops_per_token == Approx(2.0 * w.matrix_params + w.mixing_flops));
}

TEST_CASE("--match mlp parameter-matches a hybrid to the uniform all-attention model", "[layers][mixer]") {
    ModelSpec s;
    s.preset = "124M", s.mixer = "gdn:3:1";
    const ModelConfig raw = build(s);
    s.match = "mlp";
    const ModelConfig c = build(s);
    const long long target = account(uniform_baseline(c)).matched_params;
    CHECK(account(raw).matched_params > target);  // a gdn layer's wz and wba are more than attention's matrices
    CHECK(std::llabs(account(c).matched_params - target) <= 3LL * 768 * 32);  // one rounding step of one MLP
    CHECK(mixers(c) == mixers(raw));
}

TEST_CASE("a gdn layer's init: the conv, A_log, dt_bias and the output norm as the contract says", "[layers][mixer]") {
    const ModelConfig c = build(hybrid());
    const ParamLayout p = param_layout(c);
    std::vector<float> w(p.total);
    ref::init_params(w.data(), c, p, 7);
    const LayerOffsets& g = p.layer[0];
    double conv_lo = 1, conv_hi = -1;
    for (size_t i = 0; i < 192 * 4; i++)
        conv_lo = std::min<double>(conv_lo, w[g.conv_w + i]), conv_hi = std::max<double>(conv_hi, w[g.conv_w + i]);
    CHECK(conv_lo >= -0.5);
    CHECK(conv_hi <= 0.5);
    CHECK(conv_hi - conv_lo > 0.8);  // spread over the interval, not a normal's 0.02
    for (int j = 0; j < 4; j++) {
        CHECK(w[g.a_log + j] <= std::log(16.0f));                                     // log A, A in (0, 16]
        const double dt_bias = w[g.dt_bias + j], dt = std::log1p(std::exp(dt_bias));  // softplus inverts it
        CHECK(dt >= 0.001 * (1 - 1e-4));
        CHECK(dt <= 0.1 * (1 + 1e-4));
    }
    for (int j = 0; j < 16; j++) CHECK(w[g.onorm_w + j] == 1.0f);
    // Deterministic per seed, and the attention layer's tensors are those of the same model without the mixer.
    std::vector<float> again(p.total);
    ref::init_params(again.data(), c, p, 7);
    CHECK(again == w);
}

TEST_CASE("the CPU reference runs a gdn layer; the CUDA engine refuses one whose head_dim its kernels cannot take",
          "[layers][mixer]") {
    const ModelConfig c = build(hybrid());  // head_dim 16
    CHECK_NOTHROW(ref::RefModel<float>(c));
    CHECK_NOTHROW(check_gdn_on_cuda(c));
    ModelSpec narrow = hybrid();
    narrow.h_base = 8;  // head_dim 8
    CHECK_THROWS_WITH(check_gdn_on_cuda(build(narrow)),
                      "layer 1 is gdn with head_dim 8, but the CUDA engine's GDN kernels need head_dim 16 to 256, a "
                      "multiple of 8: change its width or heads, or train on the CPU (--cpu)");
    narrow.mixer = "attention";
    CHECK_NOTHROW(check_gdn_on_cuda(build(narrow)));
}

TEST_CASE("--plan shows the mixer, a gdn layer's costs and its state bytes beside the KV cache", "[layers][mixer]") {
    const ModelConfig c = build(hybrid());
    const Accounting a = account(c);
    const std::string text = plan_text(c, false);
    INFO(text);
    CHECK_THAT(text, Catch::Contains("  mixer  gdn,attention\n"));
    CHECK_THAT(text, Catch::Contains("mixer params FLOPs/token KV B/tok state B\n"));
    // Layer 1's row: kv and window "-" (a gdn layer has neither), its state bytes; layer 2's: no state.
    auto row = [&](int l) {  // layer l's row of the table, split at spaces
        const size_t at = text.find("\n" + std::string(5 - std::to_string(l).size(), ' ') + std::to_string(l) + " ");
        REQUIRE(at != std::string::npos);
        std::vector<std::string> cells;
        std::string cell;
        for (char ch : text.substr(at + 1, text.find('\n', at + 1) - at - 1) + " ")
            if (ch != ' ') cell += ch;
            else if (!cell.empty()) cells.push_back(cell), cell.clear();
        return cells;
    };
    CHECK(row(1) ==
          std::vector<std::string>{"1", "64", "4", "16", "-", "128", "-", "gdn", "46.62K", "122.03K", "0", "5.25K"});
    CHECK(row(2) == std::vector<std::string>{"2", "64", "4", "16", "4", "128", "global", "attention", "41.22K",
                                             "90.11K", "256", "0"});
    CHECK_THAT(text, Catch::Contains("GDN state bytes/sequence"));
    CHECK_THAT(text, Catch::Contains("KV + state bytes at T"));
    // An all-attention model's plan has neither the column nor the rows.
    ModelSpec plain = hybrid();
    plain.mixer = "attention", plain.mlp = "uniform";
    const std::string before = plan_text(build(plain), false);
    CHECK(before.find("state") == std::string::npos);
    CHECK(before.find("mixer") == std::string::npos);
    // JSON: the mixer's word, null for the columns a gdn layer lacks, state_bytes per layer and in the totals.
    const json::Value j = json::parse(plan_text(c, true));
    const json::Value& l1 = json::field(j, "layers").arr[0];
    CHECK(json::field(l1, "mixer").str == "gdn");
    for (const char* key : {"kv_heads", "window", "rope"}) CHECK(json::field(l1, key).kind == json::Value::Null);
    CHECK(json::int_field(l1, "heads") == 4);
    CHECK(json::int_field(l1, "head_dim") == 16);
    CHECK(json::int_field(l1, "params") == a.layers[0].params);
    CHECK(json::int_field(l1, "state_bytes") == 5248);
    CHECK(json::int_field(l1, "kv_cache_bytes") == 0);
    const json::Value& l2 = json::field(j, "layers").arr[1];
    CHECK(json::field(l2, "mixer").str == "attention");
    CHECK(json::int_field(l2, "kv_heads") == 4);
    CHECK(json::int_field(json::field(j, "totals"), "state_bytes") == 5248);
    CHECK(json::int_field(json::field(j, "baseline"), "state_bytes") == 0);
}

TEST_CASE("the cost model counts a gdn layer's estimated kernels", "[layers][mixer]") {
    ModelSpec s = hybrid();
    const ModelConfig c = build(s);
    const std::vector<OpCost> ops = step_ops(c, 2, 32, 1, false);
    auto count = [&](const std::string& name) {
        return std::count_if(ops.begin(), ops.end(), [&](const OpCost& o) { return o.name == name; });
    };
    CHECK(count("gdn_forward") == 1);
    CHECK(count("gdn_backward") == 1);
    CHECK(count("attention_forward") == 1);
    CHECK(count("matmul gdn in") == 1);
    for (const OpCost& o : ops)
        if (o.name == "gdn_forward") CHECK(o.flops == Approx(2.0 * 32 * account(c).layers[0].mixing_flops));
}

TEST_CASE("model.bin carries the mixer column and round-trips a hybrid", "[layers][mixer][checkpoint]") {
    const ModelConfig c = build(hybrid());
    const size_t P = param_layout(c).total;
    std::vector<float> p(P);
    for (size_t i = 0; i < P; i++) p[i] = (float)i * 1e-4f - 0.5f;
    const std::string dir = temp_dir();
    save_model(dir + "/m.bin", c, p.data(), P, 3, 77);
    const std::vector<char> bytes = read_bytes(dir + "/m.bin");
    const int32_t* h = (const int32_t*)bytes.data();
    const size_t C = layer_columns().size();
    size_t k = 0;
    while (k < C && std::string((const char*)(h + 32 + 4 * k)) != "mixer") k++;
    REQUIRE(k < C);
    CHECK(h[256 + k] == 1);      // layer 1: gdn
    CHECK(h[256 + C + k] == 0);  // layer 2: attention
    const LoadedModel m = load_model(dir + "/m.bin");
    CHECK(same_columns(m.cfg, c));
    CHECK(m.cfg.layers[0].gdn());
    CHECK(m.params == p);
    // A mixer word outside [0, 1] is refused by name.
    std::vector<int32_t> hd(h, h + 256),
        table((const int32_t*)bytes.data() + 256, (const int32_t*)bytes.data() + 256 + C * 2);
    table[k] = 2;
    write_model_file(dir + "/bad.bin", hd, table, p);
    require_refused(dir + "/bad.bin", "layer 1 mixer = 2");
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("config.json carries layer_mixers as words only when a layer is gdn, and reads them back", "[hf][mixer]") {
    ModelSpec s = hybrid();
    s.mixer = "attention";
    const std::string plain = hf_config_json(build(s), 1, "float32");
    CHECK(plain.find("layer_mixers") == std::string::npos);  // every export before the column: unchanged
    // A hand-written list of words reads back; attention everywhere is the default.
    std::string with = plain;
    with.insert(with.find("  \"max_position_embeddings\""), "  \"layer_mixers\": [\"attention\", \"attention\"],\n");
    CHECK(mixers(parse_hf_config(with, "config.json").cfg) == std::vector<int>{0, 0});
    std::string bad = with;
    bad.replace(bad.find("[\"attention\", \"attention\"]"), 26, "[\"attention\", \"mamba\"]");
    CHECK_THROWS_WITH(
        parse_hf_config(bad, "config.json"),
        Catch::Contains("\"layer_mixers\" must be a list of num_hidden_layers = 2 of \"attention\", \"gdn\""));
    const ModelConfig c = build(hybrid());
    const std::string json = hf_config_json(c, 1, "float32");
    CHECK_THAT(json, Catch::Contains("  \"layer_mixers\": [\"gdn\", \"attention\"],\n"));
    CHECK(mixers(parse_hf_config(json, "config.json").cfg) == mixers(c));
}

TEST_CASE(
    "train_prism's CUDA engine trains a hybrid, refuses a gdn head_dim its kernels cannot take in one line "
    "and writes nothing; the CPU engine trains it",
    "[layers][mixer][train]") {
    const std::string dir = temp_dir();
    // The CUDA engine (on the CUDA-on-CPU executor, as make test builds it).
    Result r =
        sh("OMP_NUM_THREADS=1 ./build/train_prism_executor -m tiny --d 32 --layers 2 --heads 2 --seq-len 16 "
           "-b 2 --mixer gdn,attention --steps 2 --val-every 0 -o " +
           dir + "/gpu");
    INFO(r.out);
    CHECK(r.rc == 0);
    r =
        sh("OMP_NUM_THREADS=1 ./build/train_prism_executor -m tiny --d 32 --layers 2 --heads 4 --seq-len 16 -b 2 "
           "--mixer gdn --steps 1 -o " +
           dir + "/narrow");
    CHECK(r.rc == 1);
    CHECK(one_line_error(r));
    CHECK(has(r.out,
              "train_prism: error: layer 1 is gdn with head_dim 8, but the CUDA engine's GDN kernels need "
              "head_dim 16 to 256"));
    CHECK(!is_dir(dir + "/narrow"));
    // The CPU engine trains it (the hybrid's training, resume and ranks: test_checkpoints.cpp and test_dist.cpp).
    r =
        sh("OMP_NUM_THREADS=1 ./train_prism --cpu -m tiny --d 32 --layers 2 --heads 2 --seq-len 16 -b 2 --mixer gdn,"
           "attention --steps 1 --val-every 0 -o " +
           dir + "/cpu");
    INFO(r.out);
    CHECK(r.rc == 0);
    sh("rm -rf '" + dir + "'");
}
