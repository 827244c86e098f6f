// test_formats.cpp: docs/formats.md is the byte formats' one description, and this test holds it to the code. It
// reads the page's field tables (offset, type, field, value, range), its **Size:** formulas, its checksum
// constants, its layer-table columns and its tensor table, then writes real files (a model with every per-layer
// column through run/checkpoint.h's save_model; a model.bin and state file by train_prism itself; token shards;
// an eval file) and checks each against the page: every field's bytes at its offset and type hold what the
// page says (a constant, or the value the file was written with), every header byte no row names is 0, the
// size is the formula's, the checksum is the page's algorithm's, a value just outside a stated range is refused
// naming the field, the tensors lie in the page's order with the page's shapes, and wqkv's rows are q, k, v as
// the page says (zeroing the page's q or k rows makes the attention uniform; its v rows, the attention output 0),
// wfc's gate and up rows too (the fp32 reference's SwiGLU output recomputed from them).
// Run from the checkout's root.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "dataloader.h"
#include "eval/eval_file.h"
#include "model/spec.h"
#include "ref/reference.h"
#include "run/checkpoint.h"
#include "test/train_util.h"
#include "util/io.h"

namespace {

const char* kPage = "docs/formats.md";

// The text of the page from the heading `heading` (its whole line) to the next heading of the same or a higher
// level.
std::string section(const std::string& text, const std::string& heading) {
    const size_t at = text.find("\n" + heading + "\n");
    INFO(kPage << " has no heading '" << heading << "'");
    REQUIRE(at != std::string::npos);
    const size_t level = heading.find(' ');
    size_t end = at + heading.size() + 2;
    while (true) {
        end = text.find("\n#", end);
        if (end == std::string::npos) return text.substr(at);
        const size_t hashes = text.find_first_not_of('#', end + 1) - (end + 1);
        if (hashes <= level) return text.substr(at, end - at);
        end++;
    }
}

std::string trim(const std::string& s) {
    const size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
    return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// The markdown tables of a text: each a list of rows of cells, its header row first (the --- row dropped).
using Table = std::vector<std::vector<std::string>>;
std::vector<Table> tables_of(const std::string& text) {
    std::vector<Table> out;
    std::istringstream in(text);
    std::string line;
    bool inside = false;
    while (std::getline(in, line)) {
        if (line.rfind("|", 0) != 0) {
            inside = false;
            continue;
        }
        std::vector<std::string> cells;
        size_t at = 1;
        while (at < line.size()) {
            const size_t bar = line.find('|', at);
            if (bar == std::string::npos) break;
            cells.push_back(trim(line.substr(at, bar - at)));
            at = bar + 1;
        }
        if (!inside) out.push_back({}), inside = true;
        if (!cells.empty() && cells[0].rfind("---", 0) == 0) continue;
        out.back().push_back(cells);
    }
    return out;
}

// The first table of a section whose header row begins with `first`.
Table table_of(const std::string& sec, const std::string& first) {
    for (const Table& t : tables_of(sec))
        if (!t.empty() && !t[0].empty() && t[0][0] == first) return t;
    FAIL("no table headed '" << first << "' in " << sec.substr(0, 60));
    return {};
}

// ---- the page's arithmetic: numbers, names, + - * /, parentheses, max(a, b), round(x) (half away from zero)
struct Expr {
    const std::string& s;
    const std::map<std::string, double>& vars;
    size_t i = 0;
    void space() {
        while (i < s.size() && s[i] == ' ') i++;
    }
    double primary() {
        space();
        if (s[i] == '(') {
            i++;
            const double v = sum();
            space();
            REQUIRE(s[i] == ')');
            i++;
            return v;
        }
        if (std::isdigit((unsigned char)s[i])) {
            size_t used = 0;
            const double v = std::stod(s.substr(i), &used);
            i += used;
            return v;
        }
        size_t j = i;
        while (j < s.size() && (std::isalnum((unsigned char)s[j]) || s[j] == '_')) j++;
        const std::string name = s.substr(i, j - i);
        INFO("in '" << s << "'");
        REQUIRE(!name.empty());
        i = j;
        space();
        if (i < s.size() && s[i] == '(') {  // a function
            i++;
            std::vector<double> args{sum()};
            space();
            while (s[i] == ',') i++, args.push_back(sum()), space();
            REQUIRE(s[i] == ')');
            i++;
            if (name == "max") return std::max(args.at(0), args.at(1));
            if (name == "round") return std::round(args.at(0));
            FAIL("unknown function " << name);
        }
        INFO("the name '" << name << "' has no value here");
        REQUIRE(vars.count(name));
        return vars.at(name);
    }
    double product() {
        double v = primary();
        while (true) {
            space();
            if (i < s.size() && s[i] == '*') i++, v *= primary();
            else if (i < s.size() && s[i] == '/') i++, v /= primary();
            else return v;
        }
    }
    double sum() {
        double v = product();
        while (true) {
            space();
            if (i < s.size() && s[i] == '+') i++, v += product();
            else if (i < s.size() && s[i] == '-') i++, v -= product();
            else return v;
        }
    }
};
double eval(const std::string& s, const std::map<std::string, double>& vars) {
    Expr e{s, vars};
    const double v = e.sum();
    e.space();
    INFO("'" << s << "' has more after position " << e.i);
    REQUIRE(e.i == s.size());
    return v;
}

// The section's size formula: the expression in backticks after "**Size:**".
std::string size_formula(const std::string& sec) {
    static const std::regex re(R"(\*\*Size:\*\* `([^`]+)`)");
    std::smatch m;
    INFO("no **Size:** line in " << sec.substr(0, 60));
    REQUIRE(std::regex_search(sec, m, re));
    return m[1].str();
}

// ---- the bytes of a field
struct Field {
    std::string offset, type, name, value, range;
};
std::vector<Field> fields_of(const Table& t) {
    std::vector<Field> out;
    for (size_t r = 1; r < t.size(); r++) {
        const auto& c = t[r];
        REQUIRE(c.size() >= 4);
        out.push_back({c[0], c[1], c[2], c[3], c.size() > 4 ? c[4] : ""});
    }
    return out;
}

// What a field holds, read from the bytes: numbers (one, or an array's), or the text of a char[N].
struct Value {
    std::vector<long double> nums;
    std::string text;
    bool is_text = false;
};

size_t type_size(const std::string& type, const std::map<std::string, double>& vars, std::string& base, long& n) {
    const size_t br = type.find('[');
    base = type.substr(0, br);
    n = br == std::string::npos ? 1 : (long)eval(type.substr(br + 1, type.size() - br - 2), vars);
    const size_t one = base == "int32" || base == "uint32" ? 4 : base == "char" ? 1 : 8;
    INFO("type " << type);
    REQUIRE((base == "int32" || base == "uint32" || base == "int64" || base == "uint64" || base == "float64" ||
             base == "char"));
    return one * (size_t)n;
}

Value read_field(const std::string& bytes, size_t at, const std::string& type,
                 const std::map<std::string, double>& vars, size_t& size) {
    std::string base;
    long n;
    size = type_size(type, vars, base, n);
    INFO("a field of " << size << " bytes at " << at << " in a file of " << bytes.size());
    REQUIRE(at + size <= bytes.size());
    Value v;
    const char* p = bytes.data() + at;
    if (base == "char") {
        v.is_text = true;
        v.text.assign(p, strnlen(p, (size_t)n));
        return v;
    }
    for (long k = 0; k < n; k++) {
        if (base == "int32") v.nums.push_back(((const int32_t*)p)[k]);
        else if (base == "uint32") v.nums.push_back(((const uint32_t*)p)[k]);
        else if (base == "int64") v.nums.push_back((long double)*(const int64_t*)(p + 8 * k));
        else if (base == "uint64") v.nums.push_back((long double)*(const uint64_t*)(p + 8 * k));
        else v.nums.push_back(*(const double*)(p + 8 * k));
    }
    return v;
}

// The constant a value cell starts with, if it does (decimal, or hex with 0x).
bool constant_of(const std::string& cell, long double& out) {
    static const std::regex re(R"(^(-?(0x[0-9A-Fa-f]+|[0-9]+(\.[0-9]+)?(e-?[0-9]+)?))(\s|$|\())");
    std::smatch m;
    if (!std::regex_search(cell, m, re)) return false;
    const std::string s = m[1].str();
    out = s.find("0x") != std::string::npos ? (long double)std::stoull(s, nullptr, 16) : std::stold(s);
    return true;
}

// What the test expects of each field: a value, or a check of its own (for what no constant states: a run id
// not 0, a checksum). A field of the page the test has no expectation for fails: a new field must be taught.
struct Expect {
    std::map<std::string, Value> values;
    std::map<std::string, std::function<void(const Value&)>> checks;
};
Value num(long double x) {
    Value v;
    v.nums = {x};
    return v;
}
Value nums(const std::vector<int32_t>& x) {
    Value v;
    v.nums.assign(x.begin(), x.end());
    return v;
}
Value text(const std::string& s) {
    Value v;
    v.is_text = true;
    v.text = s;
    return v;
}

// Checks every field of `fields` against `bytes` (from byte `base`); offsets may use the names in `vars`, and a
// row named in `repeated` is read for k (or r) = 0, 1, ... against each of its values. Marks the bytes the rows cover in `covered`.
void check_fields(const std::string& what, const std::vector<Field>& fields, const std::string& bytes, size_t base,
                  std::map<std::string, double> vars, const Expect& e, std::vector<bool>* covered = nullptr,
                  const std::map<std::string, std::vector<Value>>& repeated = {}) {
    for (const Field& f : fields) {
        const bool per_k = repeated.count(f.name) > 0;  // a row repeated for k (or r) = 0, 1, ...
        const size_t reps = per_k ? repeated.at(f.name).size() : 1;
        for (size_t k = 0; k < reps; k++) {
            vars["k"] = vars["r"] = (double)k;
            const size_t at = base + (size_t)eval(f.offset, vars);
            size_t size = 0;
            const Value got = read_field(bytes, at, f.type, vars, size);
            INFO(what << ": field '" << f.name << "' (" << f.type << " at byte " << at << ", " << kPage
                      << " says: " << f.value << ")");
            if (covered)
                for (size_t b = at; b < at + size && b < covered->size(); b++) (*covered)[b] = true;
            long double c;
            if (per_k) {
                const Value& want = repeated.at(f.name)[k];
                CHECK(got.text == want.text);
                CHECK(got.nums == want.nums);
            } else if (constant_of(f.value, c)) {
                REQUIRE(got.nums.size() == 1);
                CHECK(got.nums[0] == c);
            } else if (e.checks.count(f.name)) {
                e.checks.at(f.name)(got);
            } else {
                if (!e.values.count(f.name)) FAIL("the test does not know what this field holds: teach it");
                const Value& want = e.values.at(f.name);
                CHECK(got.is_text == want.is_text);
                CHECK(got.text == want.text);
                CHECK(got.nums == want.nums);
            }
        }
    }
}

// Every header byte no row names is 0.
void check_rest_zero(const std::string& what, const std::string& bytes, const std::vector<bool>& covered) {
    for (size_t b = 0; b < covered.size(); b++)
        if (!covered[b]) {
            INFO(what << ": header byte " << b << " is named by no row of " << kPage << ", so it must be 0");
            CHECK((int)(unsigned char)bytes[b] == 0);
        }
}

// The checksum as the page's pseudo-code computes it, with the page's constants, over `bytes` with the 8 bytes
// at `field` read as zero.
uint64_t page_checksum(std::string bytes, size_t field) {
    const std::string sec = section(read_file(kPage), "## Checksum");
    static const std::regex init(R"(h = (0x[0-9a-f]+))"), mul(R"(\* (0x[0-9a-f]+))"), shift(R"(h >> ([0-9]+))");
    std::smatch a, b, c;
    REQUIRE(std::regex_search(sec, a, init));
    REQUIRE(std::regex_search(sec, b, mul));
    REQUIRE(std::regex_search(sec, c, shift));
    const uint64_t h0 = std::stoull(a[1].str(), nullptr, 16), m = std::stoull(b[1].str(), nullptr, 16);
    const int s = std::stoi(c[1].str());
    memset(&bytes[field], 0, 8);
    uint64_t h = h0;
    size_t i = 0;
    for (; i + 8 <= bytes.size(); i += 8) {
        uint64_t w;
        memcpy(&w, bytes.data() + i, 8);
        h = (h ^ w) * m;
        h ^= h >> s;
    }
    for (; i < bytes.size(); i++) h = (h ^ (unsigned char)bytes[i]) * m;
    return h;
}

// The byte offset of a named field in a field table.
size_t offset_of(const std::vector<Field>& fields, const std::string& name) {
    for (const Field& f : fields)
        if (f.name == name) return (size_t)eval(f.offset, {});
    FAIL("no field '" << name << "' in " << kPage);
    return 0;
}

void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary);
    f.write(bytes.data(), (std::streamsize)bytes.size());
}

std::string temp_dir() {
    char tmpl[] = "/tmp/prism_formats_XXXXXX";
    return mkdtemp(tmpl);
}

}  // namespace

namespace {

// A model with every per-layer column in use: GQA and MQA, an explicit MLP size, a window, NoPE, a layer without
// attention, one without an MLP that keeps its written hidden size, a gdn mixer, widths above and below d.
ModelConfig every_column_model(NormType norm, bool tied) {
    ModelConfig c;
    c.d = 64, c.V = 97, c.T = 16, c.h_base = 4, c.mlp_multiple = 16, c.norm = norm, c.tied = tied;
    c.mup_attn = true, c.init_width_scale = true, c.rope_theta = 5000, c.norm_eps = 1e-6, c.mlp_ratio = 2.5;
    LayerSpec a{64, 4};
    a.kv_heads = 2;
    LayerSpec b{96, 4};
    b.hidden = 160, b.window = 5;
    b.rope = false;
    LayerSpec x{64, 2};
    x.attention = false;
    LayerSpec y{32, 2};
    y.mlp = false, y.hidden = 48;
    LayerSpec z{64, 4};
    z.kv_heads = 1, z.window = 3;
    LayerSpec g{64, 4};
    g.mixer = 1;
    c.layers = {a, g, b, x, y, z};
    validate_config(c);
    return c;
}

// A layer's stored value of a column, as the page's column table says it is stored: the test's own reading of
// each column's words (a column the page adds must be taught here).
int32_t stored(const LayerSpec& s, const std::string& column) {
    if (column == "width") return s.width;
    if (column == "heads") return s.heads;
    if (column == "kv_heads") return s.kv_heads;
    if (column == "hidden") return s.hidden;
    if (column == "window") return s.window;
    if (column == "no_attention") return !s.attention;
    if (column == "no_mlp") return !s.mlp;
    if (column == "no_rope") return !s.rope;
    if (column == "mixer") return s.mixer;
    if (column == "flags") return (!s.attention) | (!s.mlp) << 1;  // version 4's
    FAIL("the page's layer-table column '" << column << "' is unknown to the test: teach test/test_formats.cpp");
    return 0;
}

struct Page {
    std::string text = read_file(kPage);
    std::string model = section(text, "## model.bin");
    std::vector<Field> header = fields_of(table_of(model, "offset"));
    Table columns = table_of(section(model, "### The layer table"), "column");
    Table versions = table_of(section(model, "### The layer table"), "version");
    Table tensors = table_of(section(model, "### The parameters"), "tensor");
    std::vector<std::string> column_names() const {
        std::vector<std::string> out;
        for (size_t r = 1; r < columns.size(); r++) out.push_back(columns[r][0]);
        return out;
    }
    // The MLP rule, the expression in backticks in the hidden column's "0 means" cell.
    std::string hidden_rule() const {
        for (size_t r = 1; r < columns.size(); r++)
            if (columns[r][0] == "hidden") {
                static const std::regex re("`([^`]+)`");
                std::smatch m;
                REQUIRE(std::regex_search(columns[r][2], m, re));
                return m[1].str();
            }
        FAIL("no hidden column");
        return "";
    }
};

struct PageTensor {
    std::string name;
    size_t rows, cols;
};

// Splits "a, (b, c)" at its top-level commas.
std::vector<std::string> top_level_split(const std::string& s) {
    std::vector<std::string> out{""};
    int depth = 0;
    for (char ch : s) {
        if (ch == '(') depth++;
        if (ch == ')') depth--;
        if (ch == ',' && depth == 0) out.push_back("");
        else out.back() += ch;
    }
    for (auto& x : out) x = trim(x);
    return out;
}

// The tensors of a model as the page's tensor table lists them, in its order, with its shapes.
std::vector<PageTensor> page_tensors(const Page& page, const ModelConfig& c) {
    std::vector<PageTensor> out;
    const std::string rule = page.hidden_rule();
    auto add = [&](const std::vector<std::string>& row, const std::map<std::string, double>& vars, int layer,
                   const LayerSpec* s) {
        for (const std::string& cond : top_level_split(row[2])) {
            const std::map<std::string, bool> conds = {{"always", true},
                                                       {"attention", s && s->attention},
                                                       {"softmax", s && s->softmax()},
                                                       {"gdn", s && s->gdn()},
                                                       {"mlp", s && s->mlp},
                                                       {"layernorm", c.norm == NormType::LayerNorm},
                                                       {"untied", !c.tied}};
            INFO("the page's condition '" << cond << "' is unknown to the test");
            REQUIRE(conds.count(cond));
            if (!conds.at(cond)) return;
        }
        std::string name = row[0];
        const size_t brace = name.find("{l}");
        if (brace != std::string::npos) name.replace(brace, 3, std::to_string(layer));
        const std::vector<std::string> shape = top_level_split(row[1]);
        REQUIRE(shape.size() <= 2);
        out.push_back({name, (size_t)eval(shape[0], vars), shape.size() == 2 ? (size_t)eval(shape[1], vars) : 1});
    };
    std::map<std::string, double> g = {{"V", c.V}, {"d", c.d}, {"Df", std::max(c.d, c.layers.back().width)}};
    std::vector<std::vector<std::string>> before, per_layer, after;
    for (size_t r = 1; r < page.tensors.size(); r++) {
        const auto& row = page.tensors[r];
        (row[0].find("{l}") != std::string::npos ? per_layer : per_layer.empty() ? before : after).push_back(row);
    }
    for (const auto& row : before) add(row, g, -1, nullptr);
    for (int l = 0; l < c.L(); l++) {
        const LayerSpec& s = c.layers[l];
        std::map<std::string, double> v = g;
        v["w"] = s.width, v["h"] = s.heads, v["kv"] = s.kv_heads ? s.kv_heads : s.heads;
        v["hd"] = s.width / s.heads;
        v["q"] = c.mlp_multiple, v["R"] = c.mlp_ratio;
        v["hidden"] = s.hidden ? s.hidden : eval(rule, v);
        for (const auto& row : per_layer) add(row, v, l, &s);
    }
    for (const auto& row : after) add(row, g, -1, nullptr);
    return out;
}

size_t total_of(const std::vector<PageTensor>& t) {
    size_t n = 0;
    for (const auto& x : t) n += x.rows * x.cols;
    return n;
}

// Parameters whose every element is its tensor's index in param_layout, so that where each tensor lies in a
// file can be read back.
std::vector<float> indexed_params(const ModelConfig& c) {
    const ParamLayout lay = param_layout(c);
    std::vector<float> p(lay.total);
    for (size_t i = 0; i < lay.tensors.size(); i++)
        std::fill(p.begin() + lay.tensors[i].offset, p.begin() + lay.tensors[i].offset + lay.tensors[i].numel(),
                  (float)i);
    return p;
}

// The header expectations of a model.bin written from c at `step`.
Expect model_expect(const ModelConfig& c, size_t P, int64_t step, const std::string& bytes, size_t checksum_at,
                    uint64_t run_id = 0) {
    Expect e;
    e.values = {{"d", num(c.d)},
                {"V", num(c.V)},
                {"T", num(c.T)},
                {"L", num(c.L())},
                {"h_base", num(c.h_base)},
                {"norm", num((int)c.norm)},
                {"tied", num(c.tied)},
                {"mup_attn", num(c.mup_attn)},
                {"init_width_scale", num(c.init_width_scale)},
                {"mup_base_d", num(c.mup_base_d)},
                {"mlp_multiple", num(c.mlp_multiple)},
                {"P", num(P)},
                {"mlp_ratio", num(c.mlp_ratio)},
                {"rope_theta", num(c.rope_theta)},
                {"norm_eps", num(c.norm_eps)},
                {"step", num(step)}};
    e.checks["checksum"] = [&bytes, checksum_at](const Value& v) {
        CHECK(v.nums.at(0) == (long double)page_checksum(bytes, checksum_at));
    };
    e.checks["run_id"] = [run_id](const Value& v) {
        CHECK(v.nums.at(0) != 0);
        if (run_id) CHECK(v.nums.at(0) == (long double)run_id);
    };
    return e;
}

// Checks a model.bin's bytes against the page: header, column names, layer table, size, tensors in order.
void check_model_bytes(const Page& page, const std::string& what, const std::string& bytes, const ModelConfig& c,
                       int64_t step, bool indexed) {
    const std::vector<std::string> cols = page.column_names();
    const size_t C = cols.size(), L = (size_t)c.L();
    const std::vector<PageTensor> tensors = page_tensors(page, c);
    const size_t P = total_of(tensors);
    std::vector<Value> names;
    for (const std::string& n : cols) names.push_back(text(n));
    Expect e = model_expect(c, P, step, bytes, offset_of(page.header, "checksum"));
    e.values["C"] = num(C);
    std::vector<bool> covered(1024, false);
    check_fields(what + " header", page.header, bytes, 0, {}, e, &covered, {{"column_name", names}});
    check_rest_zero(what, bytes, covered);
    // The size formula.
    const std::map<std::string, double> vars = {{"C", C}, {"L", L}, {"P", P}};
    INFO(what << ": the size, by " << kPage << "'s model.bin formula " << size_formula(page.model) << " with C = " << C
              << ", L = " << L << ", P = " << P);
    CHECK(bytes.size() == (size_t)eval(size_formula(page.model), vars));
    // The layer table: L rows of C int32 at byte 1024, each column as the page stores it.
    for (size_t l = 0; l < L; l++)
        for (size_t k = 0; k < C; k++) {
            int32_t w;
            memcpy(&w, bytes.data() + 1024 + 4 * (l * C + k), 4);
            INFO(what << ": layer " << l << ", column " << cols[k]);
            CHECK(w == stored(c.layers[l], cols[k]));
        }
    // The parameters: the page's tensors in its order, with its shapes, are param_layout's; in an indexed file
    // every element of the page's i-th tensor holds i.
    const ParamLayout lay = param_layout(c);
    REQUIRE(tensors.size() == lay.tensors.size());
    size_t at = 1024 + 4 * C * L;
    for (size_t i = 0; i < tensors.size(); i++) {
        INFO(what << ": tensor " << i << ", the page's " << tensors[i].name << " (" << tensors[i].rows << ", "
                  << tensors[i].cols << "), param_layout's " << lay.tensors[i].name << " (" << lay.tensors[i].rows
                  << ", " << lay.tensors[i].cols << ")");
        CHECK(tensors[i].name == lay.tensors[i].name);
        CHECK(tensors[i].rows == lay.tensors[i].rows);
        CHECK(tensors[i].cols == lay.tensors[i].cols);
        if (indexed) {
            float first, last;
            memcpy(&first, bytes.data() + at, 4);
            memcpy(&last, bytes.data() + at + 4 * (tensors[i].rows * tensors[i].cols - 1), 4);
            CHECK(first == (float)i);
            CHECK(last == (float)i);
        }
        at += 4 * tensors[i].rows * tensors[i].cols;
    }
    CHECK(at == bytes.size());
}

}  // namespace

TEST_CASE("docs/formats.md: model.bin's header, layer table, size and tensor order are the writer's", "[formats]") {
    const Page page;
    const std::string dir = temp_dir();
    for (const auto& [norm, tied] :
         {std::pair<NormType, bool>{NormType::LayerNorm, false}, {NormType::RMSNorm, true}}) {
        ModelConfig c = every_column_model(norm, tied);
        c.mup_base_d = tied ? 16 : 0;  // muP's header word, set and not
        const std::vector<float> p = indexed_params(c);
        const std::string path = dir + "/model.bin";
        save_model(path, c, p.data(), p.size(), 1234, 0x1122334455667788ull);
        const std::string bytes = read_file(path);
        check_model_bytes(page, std::string("every column, ") + norm_name(norm) + (tied ? ", tied" : ", untied"), bytes,
                          c, 1234, true);
        CHECK(*(const uint64_t*)(bytes.data() + offset_of(page.header, "run_id")) == 0x1122334455667788ull);
    }
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("docs/formats.md: every stated range of model.bin is the reader's", "[formats]") {
    const Page page;
    const std::string dir = temp_dir(), path = dir + "/model.bin";
    const ModelConfig c = every_column_model(NormType::LayerNorm, false);
    const std::vector<float> p = indexed_params(c);
    save_model(path, c, p.data(), p.size(), 7);
    const std::string good = read_file(path);
    const size_t sum_at = offset_of(page.header, "checksum");
    // Writes `value` over the field, fixes the checksum, and expects load_model to refuse naming `name`.
    auto refused = [&](size_t at, const std::string& type, double value, const std::string& name) {
        std::string b = good;
        if (type == "int32") {
            const int32_t x = (int32_t)value;
            memcpy(&b[at], &x, 4);
        } else {
            REQUIRE(type == "float64");
            memcpy(&b[at], &value, 8);
        }
        const uint64_t s = page_checksum(b, sum_at);
        memcpy(&b[sum_at], &s, 8);
        write_bytes(path, b);
        INFO(name << " = " << value << " at byte " << at);
        try {
            load_model(path);
            FAIL("accepted");
        } catch (const CheckpointError& e) {
            INFO(e.what());
            CHECK(std::string(e.what()).find(name) != std::string::npos);
        }
    };
    int checked = 0;
    for (const Field& f : page.header) {
        if (f.range.empty()) continue;
        const size_t dots = f.range.find("..");
        const double lo = std::stod(f.range.substr(0, dots)), hi = std::stod(f.range.substr(dots + 2));
        const bool real = f.type == "float64";
        const size_t at = (size_t)eval(f.offset, {});
        const std::string word = real ? "(words " + std::to_string(at / 4) + ".." + std::to_string(at / 4 + 1) + ")"
                                      : "(word " + std::to_string(at / 4) + ")";  // the reader names the field so
        refused(at, f.type, real ? lo * (1 - 1e-9) : lo - 1, word);
        refused(at, f.type, real ? hi * (1 + 1e-9) : hi + 1, word);
        checked++;
    }
    CHECK(checked >= 12);
    // The layer table's ranges, in layer 1's row.
    const std::vector<std::string> cols = page.column_names();
    for (size_t k = 0; k < cols.size(); k++) {
        const std::string range = page.columns[k + 1][3];
        const size_t dots = range.find("..");
        REQUIRE(dots != std::string::npos);
        const double lo = std::stod(range.substr(0, dots)), hi = std::stod(range.substr(dots + 2));
        const size_t at = 1024 + 4 * k;
        refused(at, "int32", lo - 1, "layer 1 " + cols[k] + " = " + std::to_string((long)lo - 1));
        refused(at, "int32", hi + 1, "layer 1 " + cols[k] + " = " + std::to_string((long)hi + 1));
    }
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("docs/formats.md: versions 2 to 4 read as the page's version table says", "[formats]") {
    const Page page;
    const std::string dir = temp_dir(), path = dir + "/model.bin";
    // Representable in every version: no NoPE and no gdn mixer (version 4 has no column for them); versions 2 and 3
    // only width and heads, so a model whose other columns are their defaults.
    ModelConfig full = every_column_model(NormType::LayerNorm, false);
    for (auto& s : full.layers) s.rope = true, s.mixer = 0;
    ModelConfig plain = full;
    for (auto& s : plain.layers) s.kv_heads = 0, s.hidden = 0, s.window = 0, s.attention = true, s.mlp = true;
    const size_t run_at = offset_of(page.header, "run_id"), sum_at = offset_of(page.header, "checksum");
    for (size_t r = 1; r < page.versions.size(); r++) {
        const int version = std::stoi(page.versions[r][0]);
        const size_t C = (size_t)std::stoi(page.versions[r][1]);
        std::vector<std::string> cols = top_level_split(page.versions[r][2]);
        for (auto& col : cols) col = col.substr(0, col.find(' '));  // "flags (bit 0: ...)" -> "flags"
        cols.resize(C);
        const ModelConfig& c = C == 2 ? plain : full;
        const std::vector<float> p = indexed_params(c);
        save_model(path, c, p.data(), p.size(), 3);
        const std::string v5 = read_file(path);
        std::string b = v5.substr(0, 1024);
        const int32_t v = version;
        memcpy(&b[4], &v, 4);
        std::fill(b.begin() + 112, b.begin() + 1024, 0);  // words 28..255
        if (version == 2) std::fill(b.begin() + run_at, b.begin() + run_at + 8, 0);
        for (const LayerSpec& s : c.layers)
            for (const std::string& col : cols) {
                const int32_t w = stored(s, col);
                b.append((const char*)&w, 4);
            }
        b += v5.substr(1024 + 4 * page.column_names().size() * (size_t)c.L());
        const uint64_t s = page_checksum(b, sum_at);
        memcpy(&b[sum_at], &s, 8);
        CHECK(b.size() == (size_t)eval(size_formula(page.model), {{"C", C}, {"L", c.L()}, {"P", p.size()}}));
        write_bytes(path, b);
        INFO("version " << version);
        const LoadedModel m = load_model(path);
        CHECK(m.params == p);
        CHECK(m.step == 3);
        REQUIRE(m.cfg.L() == c.L());
        for (int l = 0; l < c.L(); l++)
            for (const std::string& col : page.column_names()) {
                INFO("layer " << l << ", " << col);
                CHECK(stored(m.cfg.layers[l], col) == stored(c.layers[l], col));
            }
    }
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("docs/formats.md: wqkv's rows are q, k, v as the page says (GQA); NoPE changes no tensor", "[formats]") {
    const Page page;
    ModelConfig c = every_column_model(NormType::LayerNorm, false);
    // The row split from the page: "q `h*hd` rows, then k `kv*hd` rows, then v `kv*hd` rows".
    const std::string sec = section(page.model, "### The parameters");
    static const std::regex part(R"(\b([qkv])\s+`([^`]+)`\s+rows)");
    const LayerSpec& s = c.layers[0];  // GQA: 4 query heads, 2 K/V heads
    REQUIRE(s.kv_heads != 0);
    const std::map<std::string, double> vars = {
        {"h", s.heads}, {"kv", s.kv_heads}, {"hd", s.width / s.heads}, {"w", s.width}};
    std::map<std::string, std::pair<size_t, size_t>> rows;  // part -> [begin, end)
    size_t at = 0;
    for (auto it = std::sregex_iterator(sec.begin(), sec.end(), part); it != std::sregex_iterator(); ++it) {
        const size_t n = (size_t)eval((*it)[2].str(), vars);
        rows[(*it)[1].str()] = {at, at + n};
        at += n;
    }
    REQUIRE(rows.size() == 3);
    CHECK(at == (size_t)s.qkv_rows());  // the three parts are all of wqkv's rows
    const std::vector<PageTensor> tensors = page_tensors(page, c);
    size_t wqkv = 0, wo = 0;  // element offsets, from the page's order
    for (size_t i = 0, off = 0; i < tensors.size(); off += tensors[i].rows * tensors[i].cols, i++) {
        if (tensors[i].name == "h0.wqkv") wqkv = off;
        if (tensors[i].name == "h0.wo") wo = off;
    }
    const int T = c.T;
    std::vector<int> in(T), tg(T);
    for (int t = 0; t < T; t++) in[t] = (t * 7 + 3) % c.V, tg[t] = (t * 5 + 1) % c.V;
    ref::RefModel<double> base(c);
    base.init_params(5);
    auto run = [&](const std::function<void(std::vector<double>&)>& edit) {
        auto m = std::make_unique<ref::RefModel<double>>(c);
        m->params = base.params;
        edit(m->params);
        m->forward(in.data(), tg.data(), 1, T);
        return m;
    };
    auto zero_rows = [&](const std::string& which) {
        return [&, which](std::vector<double>& p) {
            const auto [b, e] = rows.at(which);
            std::fill(p.begin() + wqkv + b * s.width, p.begin() + wqkv + e * s.width, 0.0);
        };
    };
    auto uniform = [&](const ref::RefModel<double>& m) {  // layer 0's attention: 1 / (i + 1) over keys 0..i
        double worst = 0;
        const double* a = m.attention(0);
        for (int h = 0; h < s.heads; h++)
            for (int i = 0; i < T; i++)
                for (int j = 0; j <= i; j++)
                    worst = std::max(worst, std::fabs(a[((size_t)h * T + i) * T + j] - 1.0 / (i + 1)));
        return worst;
    };
    CHECK(uniform(*run([](std::vector<double>&) {})) > 1e-3);  // not uniform to begin with
    CHECK(uniform(*run(zero_rows("q"))) < 1e-12);              // q = 0: every score 0
    CHECK(uniform(*run(zero_rows("k"))) < 1e-12);              // k = 0: the same
    // v = 0: the attention's output is 0, as with wo = 0.
    const auto v0 = run(zero_rows("v"));
    const auto wo0 = run(
        [&](std::vector<double>& p) { std::fill(p.begin() + wo, p.begin() + wo + (size_t)s.width * s.width, 0.0); });
    const double* la = v0->logits();
    const double* lb = wo0->logits();
    double diff = 0;
    for (size_t i = 0; i < (size_t)T * c.V; i++) diff = std::max(diff, std::fabs(la[i] - lb[i]));
    CHECK(diff < 1e-12);
    // wfc's rows: the page's gate rows, then its up rows. Layer 0's SwiGLU output is silu(n W_gate^T) * (n W_up^T),
    // n the LayerNorm (the page's ln2_w, ln2_b) of the residual before the MLP.
    static const std::regex fc_part(R"(\b(gate|up)\s+`([^`]+)`\s+rows)");
    std::map<std::string, std::pair<size_t, size_t>> fc;
    std::map<std::string, double> fv = vars;
    fv["hidden"] = c.hidden_of(0);
    at = 0;
    for (auto it = std::sregex_iterator(sec.begin(), sec.end(), fc_part); it != std::sregex_iterator(); ++it) {
        const size_t n = (size_t)eval((*it)[2].str(), fv);
        fc[(*it)[1].str()] = {at, at + n};
        at += n;
    }
    REQUIRE(fc.size() == 2);
    std::map<std::string, size_t> off;
    for (size_t i = 0, o = 0; i < tensors.size(); o += tensors[i].rows * tensors[i].cols, i++) off[tensors[i].name] = o;
    const auto m = run([](std::vector<double>&) {});
    const std::vector<double>& P = m->params;
    const int w = s.width, hid = c.hidden_of(0);
    const double* resid = m->residual_state(1);
    double worst = 0;
    for (int t = 0; t < T; t++) {
        const double* x = resid + (size_t)t * c.D();
        double mean = 0, var = 0;
        for (int i = 0; i < w; i++) mean += x[i] / w;
        for (int i = 0; i < w; i++) var += (x[i] - mean) * (x[i] - mean) / w;
        std::vector<double> n(w);
        for (int i = 0; i < w; i++)
            n[i] = (x[i] - mean) / std::sqrt(var + c.norm_eps) * P[off["h0.ln2_w"] + i] + P[off["h0.ln2_b"] + i];
        for (int j = 0; j < hid; j++) {
            double g = 0, u = 0;
            for (int i = 0; i < w; i++) {
                g += n[i] * P[off["h0.wfc"] + (fc.at("gate").first + j) * w + i];
                u += n[i] * P[off["h0.wfc"] + (fc.at("up").first + j) * w + i];
            }
            worst = std::max(worst, std::fabs(g / (1 + std::exp(-g)) * u - m->swiglu_out(0)[(size_t)t * hid + j]));
        }
    }
    CHECK(worst < 1e-9);
    // NoPE changes no tensor: the same layout with every layer rotary.
    ModelConfig rotary = c;
    for (auto& l : rotary.layers) l.rope = true;
    const ParamLayout a = param_layout(c), b = param_layout(rotary);
    REQUIRE(a.tensors.size() == b.tensors.size());
    for (size_t i = 0; i < a.tensors.size(); i++) {
        CHECK(a.tensors[i].name == b.tensors[i].name);
        CHECK(a.tensors[i].offset == b.tensors[i].offset);
    }
    CHECK(a.total == b.total);
}

TEST_CASE("docs/formats.md: train_prism's model.bin and state file are the page's", "[formats]") {
    const Page page;
    const std::string sec = section(page.text, "## state_rank<r>.bin");
    const std::vector<Table> tables = tables_of(sec);
    REQUIRE(tables.size() == 2);  // the header, the data-loader position
    const std::vector<Field> header = fields_of(tables[0]), loader = fields_of(tables[1]);
    const std::string dir = make_data_dir(), out = dir + "/run";
    const Result r = sh(micro(dir, out) + " --steps 2 --val-every 0 --no-shuffle --seed 99");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    const std::string ckpt = out + "/step_00000002/";
    const std::string model = read_file(ckpt + "model.bin"), state = read_file(ckpt + "state_rank0.bin");
    const LoadedModel m = load_model(ckpt + "model.bin");
    const size_t P = m.params.size();
    check_model_bytes(page, "train_prism's model.bin", model, m.cfg, 2, false);
    const uint64_t run_id = *(const uint64_t*)(model.data() + offset_of(page.header, "run_id"));
    // The micro run: B 4, T 32, one process, 2 steps of B T = 128 tokens, not shuffled.
    Expect e;
    e.values = {{"step", num(2)},  {"n", num(P)},     {"tokens", num(256)}, {"S", num(56)},           {"rank", num(0)},
                {"world", num(0)}, {"first", num(0)}, {"model_P", num(0)},  {"total_batch", num(128)}};
    e.checks["rng"] = [](const Value&) {};  // the sampler's state: any value
    e.checks["checksum"] = [&](const Value& v) {
        CHECK(v.nums.at(0) == (long double)page_checksum(state, offset_of(header, "checksum")));
    };
    e.checks["run_id"] = [&](const Value& v) { CHECK(v.nums.at(0) == (long double)run_id); };
    std::vector<bool> covered(1024, false);
    check_fields("state_rank0.bin header", header, state, 0, {}, e, &covered);
    check_rest_zero("state_rank0.bin", state, covered);
    // The loader position after 2 steps of one sequence group each, in the only training shard.
    Expect le;
    le.values = {{"seed", num(99)}, {"epoch", num(0)}, {"shard_pos", num(0)},    {"group_pos", num(2)},
                 {"B", num(4)},     {"T", num(32)},    {"loader_world", num(1)}, {"shuffle", num(0)}};
    le.checks["fingerprint"] = [&](const Value& v) {
        DataLoader dl(dir + "/syn_train_*.bin", 4, 32, 0, 1, false, 0, 256);
        CHECK(v.nums.at(0) == (long double)dl.state().fingerprint);
    };
    check_fields("state_rank0.bin loader position", loader, state, 0, {}, le);
    CHECK(state.size() == (size_t)eval(size_formula(sec), {{"S", 56}, {"n", P}}));
    // m and v follow, finite, v >= 0.
    const float* mv = (const float*)(state.data() + 1024 + 56);
    bool ok = true;
    for (size_t i = 0; i < 2 * P; i++) ok = ok && std::isfinite(mv[i]) && (i < P || mv[i] >= 0);
    CHECK(ok);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("docs/formats.md: token shards are the page's, with a set id and without", "[formats]") {
    const std::string sec = section(read_file(kPage), "## Token shards");
    const std::vector<Field> header = fields_of(table_of(sec, "offset"));
    const std::string dir = temp_dir();
    const std::vector<int> tokens = {50256, 1, 2, 3, 50256, 65535, 7};
    for (uint64_t set_id : {0ull, 0xA1B2C3D4E5F60718ull}) {
        const std::string path = dir + "/s_val_000000.bin";
        write_shard(path, tokens, false, set_id);
        const std::string b = read_file(path);
        Expect e;
        e.values = {{"N", num(tokens.size())}, {"set_id", num(set_id)}, {"set_tag", num(set_id ? 0x54455350 : 0)}};
        std::vector<bool> covered(1024, false);
        check_fields("shard", header, b, 0, {}, e, &covered);
        check_rest_zero("shard", b, covered);
        CHECK(b.size() == (size_t)eval(size_formula(sec), {{"N", tokens.size()}}));
        for (size_t i = 0; i < tokens.size(); i++) CHECK(*(const uint16_t*)(b.data() + 1024 + 2 * i) == tokens[i]);
    }
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("docs/formats.md: an eval file's header and records are the page's", "[formats]") {
    const std::string sec = section(read_file(kPage), "## Eval files");
    const std::vector<Table> tables = tables_of(sec);
    REQUIRE(tables.size() == 2);  // the header, a record
    const std::vector<Field> header = fields_of(tables[0]), record = fields_of(tables[1]);
    EvalFile f;
    f.task = "hellaswag", f.tokenizer = "gpt2", f.kind = EvalKind::Choice, f.has_norm = true, f.V = 50257;
    f.eot = 50256, f.fingerprint = 0x0102030405060708ull;
    EvalExample a;
    a.tokens = {5, 6, 7, 8, 9, 10};
    a.req = {{0, 2, 2, 4, 11}, {0, 2, 4, 6, 13}};
    a.gold = 1;
    EvalExample b;
    b.tokens = {50256, 3, 4};
    b.req = {{0, 1, 1, 2, 1}, {0, 1, 2, 3, 2}};
    b.gold = 0;
    f.ex = {a, b};
    const std::string dir = temp_dir(), path = dir + "/task.bin";
    save_eval_file(path, f);
    const std::string bytes = read_file(path);
    const size_t payload = bytes.size() - 1024;
    Expect e;
    e.values = {{"kind", num(0)},
                {"acc_norm", num(1)},
                {"V", num(50257)},
                {"EOT", num(50256)},
                {"examples", num(2)},
                {"tokenizer_fingerprint", num(f.fingerprint)},
                {"payload_bytes", num(payload)},
                {"total_tokens", num(9)},
                {"task", text("hellaswag")},
                {"tokenizer", text("gpt2")}};
    e.checks["checksum"] = [&](const Value& v) {
        CHECK(v.nums.at(0) == (long double)page_checksum(bytes, offset_of(header, "checksum")));
    };
    std::vector<bool> covered(1024, false);
    check_fields("eval file header", header, bytes, 0, {}, e, &covered);
    check_rest_zero("eval file", bytes, covered);
    CHECK(bytes.size() == (size_t)eval(size_formula(sec), {{"payload_bytes", payload}}));
    // The records, back to back.
    size_t at = 1024;
    for (const EvalExample& x : f.ex) {
        Expect r;
        r.values = {{"n_tokens", num(x.tokens.size())},
                    {"n_requests", num(x.req.size())},
                    {"gold", num(x.gold)},
                    {"zero", num(0)},
                    {"words", num(x.words)},
                    {"bytes", num(x.bytes)},
                    {"tokens", nums(x.tokens)}};
        std::vector<Value> reqs;
        for (const EvalRequest& q : x.req)
            reqs.push_back(nums({q.ctx_begin, q.ctx_end, q.cont_begin, q.cont_end, q.norm_len}));
        const std::map<std::string, double> vars = {{"n_requests", x.req.size()}, {"n_tokens", x.tokens.size()}};
        check_fields("eval record", record, bytes, at, vars, r, nullptr, {{"request", reqs}});
        at += 32 + 20 * x.req.size() + 4 * x.tokens.size();
    }
    CHECK(at == bytes.size());
    sh("rm -rf '" + dir + "'");
}
