// The Hugging Face export (hf/): the safetensors writer and reader, config.json both ways, the tensor names, the
// GPT-2 tokenizer files against tokenizer.h (encoded the way Hugging Face's byte-pair encoder merges, from the
// exported vocab.json and merges.txt, over the default corpus' validation text and the tokenizer tests'
// strings), and the export and import binaries: fp32 round trips byte for byte, bf16 halves the file, and
// every bad directory is refused in one line. The comparison with PyTorch itself is `make test-hf`
// (test/hf/test_hf.py). Needs the GPT-2 ranks file and the default corpus (bash setup.sh).
#include <catch2/catch.hpp>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <unordered_map>
#include <string>
#include <vector>

#include "run/checkpoint.h"
#include "dataloader.h"
#include "hf/hf_config.h"
#include "hf/hf_tokenizer.h"
#include "hf/safetensors.h"
#include "ref/init.h"
#include "test/test_util.h"
#include "test/tokenizer_util.h"

namespace {

std::string tmp_dir() {
    char t[] = "/tmp/prism_hf_XXXXXX";
    REQUIRE(mkdtemp(t) != nullptr);
    return t;
}
void remove_all(const std::string& dir) { sh("rm -rf '" + dir + "'"); }
bool one_line(const std::string& s) { return !s.empty() && s.find('\n') == s.size() - 1; }

ModelConfig make(const std::string& heads, const std::string& widths, const std::string& norm, int untied, int d = 64) {
    ModelSpec s;
    s.preset = "tiny", s.heads = heads, s.widths = widths, s.norm = norm, s.untied = untied, s.d = d, s.L = 6, s.T = 32;
    s.V = 300, s.allow_ablation = true;
    std::vector<std::string> w;
    return build_config(s, w);
}

// A model with the per-layer columns (model_flags.h's --kv-heads, --mlp, --window, --no-attention, --no-mlp).
ModelConfig make_columns(const std::string& kv, const std::string& mlp, const std::string& window,
                         const std::string& no_attention, const std::string& no_mlp,
                         const std::string& heads = "uniform", const std::string& widths = "uniform") {
    ModelSpec s;
    s.preset = "tiny", s.heads = heads, s.widths = widths, s.d = 64, s.L = 6, s.T = 32, s.V = 300, s.h_base = 4;
    s.kv_heads = kv, s.mlp = mlp, s.window = window, s.no_attention = no_attention, s.no_mlp = no_mlp;
    s.allow_ablation = true;
    std::vector<std::string> w;
    return build_config(s, w);
}
// Every per-layer word model.bin stores (LayerSpec's, the defaults' 0 included).
bool same_layers(const ModelConfig& a, const ModelConfig& b) {
    if (a.L() != b.L()) return false;
    for (int l = 0; l < a.L(); l++) {
        const LayerSpec &x = a.layers[l], &y = b.layers[l];
        if (x.width != y.width || x.heads != y.heads || x.kv_heads != y.kv_heads || x.hidden != y.hidden ||
            x.window != y.window || x.attention != y.attention || x.mlp != y.mlp)
            return false;
    }
    return true;
}

// Random parameters of c, every tensor distinct (norm weights included), written as model.bin.
std::vector<float> write_model(const std::string& path, const ModelConfig& c, long step) {
    const ParamLayout layout = param_layout(c);
    std::vector<float> p(layout.total);
    ref::Rng rng(7);
    for (float& x : p) x = (float)rng.normal();
    save_model(path, c, p.data(), p.size(), step);
    return p;
}

// Hugging Face's GPT-2 byte-pair encoder (GPT2Tokenizer.bpe): the word is its bytes spelled in the byte
// alphabet; repeatedly take the adjacent pair that comes first in merges.txt and merge every occurrence of it,
// left to right, until no pair is a merge; each part is then looked up in vocab.json.
struct HfBpe {
    std::unordered_map<std::string, int> merge_rank;  // "a b" (a space is never part of a spelled token)
    std::unordered_map<std::string, int> vocab;
    std::vector<std::string> spelled;  // byte -> its spelling

    HfBpe(const std::string& vocab_json, const std::string& merges_txt) {
        for (const auto& [k, v] : json::parse(vocab_json).obj) vocab[k] = std::stoi(v.str);
        size_t a = merges_txt.find('\n') + 1;  // the first line is the "#version" header
        for (int rank = 0; a < merges_txt.size(); rank++) {
            const size_t b = merges_txt.find('\n', a);
            merge_rank[merges_txt.substr(a, b - a)] = rank;
            a = b + 1;
        }
        const std::vector<uint32_t> cp = gpt2_byte_alphabet();
        for (int b = 0; b < 256; b++) spelled.push_back(""), put_utf8(cp[b], spelled.back());
    }
    void encode_piece(const std::string& piece, std::vector<int>& out) const {
        std::vector<std::string> word;
        for (unsigned char c : piece) word.push_back(spelled[c]);
        while (word.size() > 1) {
            int best = INT32_MAX;
            size_t at = 0;
            for (size_t i = 0; i + 1 < word.size(); i++) {
                auto it = merge_rank.find(word[i] + " " + word[i + 1]);
                if (it != merge_rank.end() && it->second < best) best = it->second, at = i;
            }
            if (best == INT32_MAX) break;
            const std::string first = word[at], second = word[at + 1];
            std::vector<std::string> merged;
            for (size_t i = 0; i < word.size(); i++) {
                if (i + 1 < word.size() && word[i] == first && word[i + 1] == second)
                    merged.push_back(first + second), i++;
                else merged.push_back(word[i]);
            }
            word.swap(merged);
        }
        for (const std::string& w : word) out.push_back(vocab.at(w));
    }
};

// The pieces of GPT-2's pre-tokeniser (the same pattern in Hugging Face's ByteLevel pre-tokeniser). The text is
// valid UTF-8 (the caller checks), so PCRE2 is told not to check it again at every match, which is O(length) each.
std::vector<std::string> pieces(const std::string& text) {
    const std::string pat = tokenizer_detail::gpt2_pattern();
    int err;
    PCRE2_SIZE off;
    pcre2_code* re = pcre2_compile((PCRE2_SPTR)pat.data(), pat.size(), PCRE2_UTF, &err, &off, nullptr);
    REQUIRE(re);
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    std::vector<std::string> out;
    for (size_t pos = 0; pos < text.size();) {
        REQUIRE(pcre2_match(re, (PCRE2_SPTR)text.data(), text.size(), pos, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK, md,
                            nullptr) > 0);
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        REQUIRE(ov[1] > pos);
        out.push_back(text.substr(pos, ov[1] - pos));
        pos = ov[1];
    }
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return out;
}

// What parse_hf_config says of `good` with `from` replaced by `to` (read as x/config.json): its error, or
// "(no error)".
std::string config_error(const std::string& good, const std::string& from, const std::string& to) {
    std::string t = good;
    const size_t at = t.find(from);
    REQUIRE(at != std::string::npos);
    t.replace(at, from.size(), to);
    try {
        parse_hf_config(t, "x/config.json");
    } catch (const HfError& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

TEST_CASE("safetensors: fp32 reads back bit for bit, bf16 rounds to nearest even, the data starts 8-byte aligned",
          "[hf]") {
    const std::string dir = tmp_dir(), path = dir + "/t.safetensors";
    std::vector<float> a = {1.0f, -0.0f, 3.14159274f, 1e-40f, INFINITY, -2.5e30f}, b(12);
    for (size_t i = 0; i < b.size(); i++) b[i] = (float)(i * 0.37 - 1);
    write_safetensors(path, {{"a", {6}, a.data()}, {"m.b", {3, 4}, b.data()}}, StDtype::F32, {{"format", "pt"}});
    SafetensorsFile f = read_safetensors_header(path);
    CHECK(f.metadata.at("format") == "pt");
    REQUIRE(f.tensors.size() == 2);
    CHECK(f.tensors[0].begin % 8 == 0);
    CHECK(f.find("m.b")->shape == std::vector<int64_t>{3, 4});
    std::vector<float> back(12);
    read_safetensors_f32(f, *f.find("a"), back.data());
    CHECK(memcmp(back.data(), a.data(), 6 * 4) == 0);
    read_safetensors_f32(f, *f.find("m.b"), back.data());
    CHECK(memcmp(back.data(), b.data(), 12 * 4) == 0);

    // bf16: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 and goes to the even one (1); just above it rounds up;
    // NaN stays NaN; the file's data is half the size.
    const float up = 1.0f + 0x1.0p-8f + 0x1.0p-20f;
    std::vector<float> c = {1.0f + 0x1.0p-8f, up, NAN, -3.0f};
    write_safetensors(path, {{"c", {4}, c.data()}}, StDtype::BF16, {});
    f = read_safetensors_header(path);
    CHECK(f.tensors[0].dtype == StDtype::BF16);
    CHECK(f.tensors[0].end - f.tensors[0].begin == 8);
    read_safetensors_f32(f, f.tensors[0], back.data());
    CHECK(back[0] == 1.0f);
    CHECK(back[1] == 1.0f + 0x1.0p-7f);
    CHECK(std::isnan(back[2]));
    CHECK(back[3] == -3.0f);
    CHECK(float_from_f16(0x3c00) == 1.0f);  // F16, read by import: 1, the smallest subnormal, -infinity
    CHECK(float_from_f16(0x0001) == 0x1.0p-24f);
    CHECK(float_from_f16(0xfc00) == -INFINITY);
    remove_all(dir);
}

TEST_CASE("safetensors: a damaged file is refused in one line that names it", "[hf]") {
    const std::string dir = tmp_dir(), path = dir + "/bad.safetensors";
    auto file = [&](const std::string& header, size_t data_bytes) {
        uint64_t n = header.size();
        write_file(path, std::string((const char*)&n, 8) + header + std::string(data_bytes, '\0'));
    };
    auto error = [&]() -> std::string {
        try {
            read_safetensors_header(path);
        } catch (const std::runtime_error& e) {
            return e.what();
        }
        return "(no error)";
    };
    const std::vector<std::pair<std::string, std::string>> cases = {
        {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", "(no error)"},
        {R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", "needs 12 bytes but data_offsets hold 8"},
        {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 16]}})", "outside the 8 data bytes"},
        {R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", "belong to no tensor"},
        {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
         "overlap"},
        {R"({"a": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})",
         "dtype I64 is not a floating-point type we read"},
        {R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", "not a non-negative integer"},
        {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
         "listed twice"},
        {R"({"a": {"dtype": "F32", "shape": [2]}})", "needs dtype, shape and data_offsets"},
        {R"({"a": )", "header"},
    };
    for (const auto& [header, want] : cases) {
        file(header, 8);
        const std::string e = error();
        INFO(header);
        CHECK_THAT(e, Catch::Contains(want));
        if (want != "(no error)") CHECK_THAT(e, Catch::Contains(path) && !Catch::Contains("\n"));
    }
    write_file(path, "1234");
    CHECK_THAT(error(), Catch::Contains("shorter than its 8-byte header length"));
    file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 8);
    std::string s = read_file(path);
    s[0] = (char)0xff;  // a header length far beyond the file
    write_file(path, s);
    CHECK_THAT(error(), Catch::Contains("does not fit a file of " + std::to_string(s.size()) + " bytes"));
    remove_all(dir);
}

TEST_CASE(
    "config.json reads back as the same model for uniform, Prism, X, lambda, RMSNorm, untied and muP models, and "
    "every per-layer column",
    "[hf]") {
    std::vector<ModelConfig> kinds = {
        make("uniform", "uniform", "layernorm", 0),
        make("prism", "uniform", "layernorm", 0),
        make("uniform", "x", "layernorm", 0),
        make("uniform", "lambda", "layernorm", 0),
        make("prism", "x", "rmsnorm", 1),
        make_columns("gqa:2", "uniform", "global", "", ""),
        make_columns("mqa", "openelm", "local:8,2:1", "", ""),
        make_columns("uniform", "uniform", "global", "1,4", "2"),
        make_columns("gqa:4", "uniform", "global", "", ""),                         // explicit KV heads = heads
        make_columns("1,1,1,1,2,4", "openelm", "8x3,0x3", "2", "5", "prism", "x"),  // window on a no-attention layer
        make("uniform", "uniform", "rmsnorm", 1)};
    kinds.back().mup_attn = true, kinds.back().init_width_scale = true, kinds.back().rope_theta = 500000,
    kinds.back().norm_eps = 1e-6, kinds.back().mup_base_d = 16;
    for (const ModelConfig& c : kinds) {
        const std::string text = hf_config_json(c, 1234, "float32");
        INFO(text);
        const HfConfig r = parse_hf_config(text, "config.json");
        CHECK(r.step == 1234);
        const ModelConfig& b = r.cfg;
        CHECK(b.d == c.d);
        CHECK(b.V == c.V);
        CHECK(b.T == c.T);
        CHECK(b.h_base == c.h_base);
        CHECK(b.mlp_ratio == c.mlp_ratio);  // exactly: 8/3 survives the decimal
        CHECK(b.mlp_multiple == c.mlp_multiple);
        CHECK(b.norm == c.norm);
        CHECK(b.tied == c.tied);
        CHECK(b.mup_attn == c.mup_attn);
        CHECK(b.init_width_scale == c.init_width_scale);
        CHECK(b.mup_base_d == c.mup_base_d);
        CHECK(b.rope_theta == c.rope_theta);
        CHECK(b.norm_eps == c.norm_eps);
        CHECK(same_layers(b, c));  // every word of the layer table, a default's 0 included
        CHECK(json::parse(text).find("auto_map")->find("AutoModelForCausalLM")->str ==
              "modeling_prism.PrismForCausalLM");
    }
    CHECK(exact_double(8.0 / 3.0) == "2.6666666666666665");
    CHECK(exact_double(1e-5) == "1e-05");
    CHECK(exact_double(0.1 + 0.2) == "0.30000000000000004");
    CHECK(exact_double(10000) == "10000.0");
}

TEST_CASE("config.json whose numbers contradict each other is refused in one line", "[hf]") {
    const ModelConfig c = make("prism", "x", "layernorm", 0);
    const std::string good = hf_config_json(c, 0, "float32");
    auto error = [&](const std::string& from, const std::string& to) { return config_error(good, from, to); };
    // A hidden size other than the rule's is the layer's own (model.bin stores it); 0 is a layer without an MLP.
    const int hid0 = c.hidden_of(0);
    CHECK(error("\"layer_hidden_sizes\": [" + std::to_string(hid0),
                "\"layer_hidden_sizes\": [" + std::to_string(hid0 + 32)) == "(no error)");
    CHECK_THAT(error("\"residual_width\": " + std::to_string(c.D()), "\"residual_width\": 64"),
               Catch::Contains("residual_width"));
    CHECK_THAT(error("\"model_type\": \"prism\"", "\"model_type\": \"gpt2\""), Catch::Contains("not \"prism\""));
    CHECK_THAT(error("\"rope_interleaved\": true", "\"rope_interleaved\": false"),
               Catch::Contains("interleaved pairs"));
    CHECK_THAT(error("\"num_hidden_layers\": 6", "\"num_hidden_layers\": 5"),
               Catch::Contains("list of num_hidden_layers = 5"));
    CHECK_THAT(error("\"norm_type\": \"layernorm\"", "\"norm_type\": \"batchnorm\""),
               Catch::Contains("layernorm or rmsnorm"));
    CHECK_THAT(error("\"layer_heads\": [", "\"layer_heads\": [3, "), Catch::Contains("list of num_hidden_layers"));
    CHECK_THAT(error("\"vocab_size\": 300", "\"vocab_size\": 3.5"),
               Catch::Contains("\"vocab_size\" must be an integer"));
    CHECK_THAT(error("\"attention_scale\": \"1/sqrt(head_dim)\"", "\"attention_scale\": 0.125"),
               Catch::Contains("must be a string"));
    const std::string e = error("\"tie_word_embeddings\": true,", "");
    CHECK_THAT(e, Catch::Contains("x/config.json: missing \"tie_word_embeddings\""));
    CHECK(e.find('\n') == std::string::npos);
}

TEST_CASE(
    "config.json's per-layer columns: layer_kv_heads, layer_hidden_sizes and layer_windows say what each layer "
    "computes, prism_layer_words only when model.bin's words differ, older configs read as before, contradictions "
    "refused",
    "[hf]") {
    // GQA 2 groups, a 2:1 local/global interleave of window 8, layer 2 without attention, layer 5 without an MLP
    const ModelConfig c = make_columns("gqa:2", "uniform", "local:8,2:1", "2", "5");
    const std::string good = hf_config_json(c, 0, "float32");
    INFO(good);
    const int hid = c.hidden(64);
    CHECK_THAT(good, Catch::Contains("\"layer_kv_heads\": [2, 0, 2, 2, 2, 2],"));
    CHECK_THAT(good, Catch::Contains("\"layer_windows\": [8, 0, 0, 8, 8, 0],"));  // layer 2's window: no attention
    const std::string h = std::to_string(hid);
    CHECK_THAT(good,
               Catch::Contains("\"layer_hidden_sizes\": [" + h + ", " + h + ", " + h + ", " + h + ", 0, " + h + "],"));
    // layer 2's window word (8) is only in model.bin's table: prism_layer_words carries it
    CHECK_THAT(good, Catch::Contains("\"prism_layer_words\": [[2, 0, 8], [2, 0, 8], [2, 0, 0], [2, 0, 8], [2, 0, 8], "
                                     "[2, 0, 0]]"));
    CHECK(same_layers(parse_hf_config(good, "config.json").cfg, c));
    // A model whose words the lists imply writes none; a uniform one reads back without the new keys at all.
    const ModelConfig plain = make_columns("gqa:2", "uniform", "local:8,2:1", "", "");
    CHECK_THAT(hf_config_json(plain, 0, "float32"), !Catch::Contains("prism_layer_words"));
    const ModelConfig uniform = make("uniform", "uniform", "layernorm", 0);
    std::string old = hf_config_json(uniform, 0, "float32");
    for (const char* key :
         {"  \"layer_kv_heads\": [4, 4, 4, 4, 4, 4],\n", "  \"layer_windows\": [0, 0, 0, 0, 0, 0],\n"}) {
        REQUIRE(old.find(key) != std::string::npos);
        old.erase(old.find(key), strlen(key));
    }
    CHECK(same_layers(parse_hf_config(old, "config.json").cfg, uniform));

    auto error = [&](const std::string& from, const std::string& to) { return config_error(good, from, to); };
    const std::string kv = "\"layer_kv_heads\": [2, 0, 2, 2, 2, 2]", win = "\"layer_windows\": [8, 0, 0, 8, 8, 0]";
    const std::vector<std::pair<std::string, std::string>> bad = {
        {error(kv, "\"layer_kv_heads\": [3, 0, 2, 2, 2, 2]"),
         "x/config.json: layer 0 (model.layers.0): layer_kv_heads 3 does not divide layer_heads 4"},
        {error(kv, "\"layer_kv_heads\": [8, 0, 2, 2, 2, 2]"), "layer_kv_heads 8 does not divide layer_heads 4"},
        {error(kv, "\"layer_kv_heads\": [-1, 0, 2, 2, 2, 2]"), "\"layer_kv_heads\" must be an integer in [0, 65536]"},
        {error(kv, "\"layer_kv_heads\": [2, 0, 2, 2, 2]"),
         "\"layer_kv_heads\" must be a list of num_hidden_layers = 6"},
        {error(kv, "\"layer_kv_heads\": 2"), "\"layer_kv_heads\" must be a list of num_hidden_layers = 6"},
        {error(win, "\"layer_windows\": [8, 4, 0, 8, 8, 0]"),
         "layer 1 (model.layers.1) has no attention (layer_kv_heads 0) but layer_windows 4"},
        {error(win, "\"layer_windows\": [8, 0, 0, 8, -8, 0]"), "\"layer_windows\" must be an integer in [0, 1048576]"},
        {error("\"layer_hidden_sizes\": [" + h + ", " + h, "\"layer_hidden_sizes\": [" + h + ", 0"),
         "x/config.json: layer 1 (model.layers.1) has neither attention (layer_kv_heads 0) nor an MLP"},
        {error("[2, 0, 8], [2, 0, 8], [2, 0, 0]", "[2, 0, 8], [2, 0, 8], [1, 0, 0]"),
         "\"prism_layer_words\" row 2 [1, 0, 0] (model.bin's words, 0: the default) gives 1 KV heads, hidden " + h +
             " and window 0 where the lists say 2, " + h + " and 0; delete prism_layer_words"},
        {error("[2, 0, 8], [2, 0, 8], [2, 0, 0]", "[2, 0, 8], [2, 0, 8], [2, 0, 0, 0]"),
         "\"prism_layer_words\" must be a list of num_hidden_layers = 6 rows [kv_heads, hidden, window]"},
        {error("[2, 0, 8], [2, 0, 8], [2, 0, 0]", "[2, 0, 8], [2, 0, 8], [2, 0, 2000000]"),
         "\"prism_layer_words\" must be an integer in [0, 1048576]"},
        {error("\"prism_layer_words\": [[2, 0, 8], ", "\"prism_layer_words\": [8, "),
         "rows [kv_heads, hidden, window]"},
    };
    for (const auto& [e, want] : bad) {
        CHECK_THAT(e, Catch::Contains(want));
        CHECK(e.find('\n') == std::string::npos);
    }
}

TEST_CASE("every parameter tensor has one Hugging Face name, and the shapes cover the model", "[hf]") {
    for (const ModelConfig& c : {make("prism", "x", "layernorm", 1), make("uniform", "lambda", "rmsnorm", 0)}) {
        const ParamLayout layout = param_layout(c);
        std::map<std::string, int> seen;
        size_t total = 0;
        for (const ParamTensor& t : layout.tensors) {
            seen[hf_tensor_name(t)]++;
            size_t n = 1;
            for (int64_t s : hf_tensor_shape(t)) n *= (size_t)s;
            CHECK(n == t.numel());
            total += n;
        }
        CHECK(seen.size() == layout.tensors.size());
        CHECK(total == layout.total);
        CHECK(seen.count("model.layers.5.mlp.gate_up.weight"));
        CHECK(seen.count("model.norm.weight"));
        CHECK(seen.count("model.norm.bias") == (c.norm == NormType::LayerNorm));
        CHECK(seen.count("lm_head.weight") == !c.tied);
    }
    const ModelConfig c = make("uniform", "x", "layernorm", 0);
    const ParamTensor& wqkv0 = param_layout(c).tensors[3];
    CHECK(hf_tensor_name(wqkv0) == "model.layers.0.attn.qkv.weight");
    CHECK(hf_tensor_shape(wqkv0) == std::vector<int64_t>{3 * c.layers[0].width, c.layers[0].width});
}

TEST_CASE("vocab.json and merges.txt tokenise the default corpus as tokenizer.h does, merged the Hugging Face way",
          "[hf]") {
    const Tokenizer& tok = gpt2();
    const HfTokenizerFiles f = hf_tokenizer_files(tok);
    CHECK(std::count(f.merges_txt.begin(), f.merges_txt.end(), '\n') == 50001);
    CHECK(f.merges_txt.substr(0, 18) == "#version: 0.2\n\xc4\xa0 t");  // the first merge: " t" (space is U+0120)
    const json::Value vocab = json::parse(f.vocab_json);
    CHECK(vocab.obj.size() == 50257);
    CHECK(vocab.find("<|endoftext|>")->str == "50256");
    CHECK(vocab.find("\xc4\xa0the")->str == "262");  // " the"

    // The text: the default corpus' validation shard (Bible, Shakespeare, Milton) decoded, and the tokenizer
    // tests' strings (contractions, white-space runs, emoji, CJK, Cyrillic, accents, digits).
    std::vector<std::string> texts = {
        "I'm sure you'll see we've done what they'd said: it's theirs. IT'S DON'T WE'LL you\u2019re 'll '''s",
        "a   b trailing   \n\nline\n\nnext line\nx \n y\t\tindent\r\n a\u00a0b \u3000c",
        "emoji \U0001F44B\U0001F30D \U0001F468\u200d\U0001F469\u200d\U0001F467 中文字符 日本語 한국어 Привет мир café "
        "naïve",
        "12345 3.14159 1,000,000 " + std::string(100, 'a') + " " + std::string(130, '1')};
    const std::string shard = "data/default/default_val_000000.bin";
    INFO("needs the default corpus: bash setup.sh");
    REQUIRE(access(shard.c_str(), R_OK) == 0);
    const std::vector<unsigned char> raw = read_file_bytes(shard, "shard");
    const size_t n = std::min<size_t>((raw.size() - 1024) / 2, 60000);
    std::vector<int> ids(n);
    for (size_t i = 0; i < n; i++) ids[i] = raw[1024 + 2 * i] | raw[1024 + 2 * i + 1] << 8;
    std::string corpus;
    for (size_t a = 0; a < n;) {  // documents between EOTs
        size_t b = a;
        while (b < n && ids[b] != tok.eot()) b++;
        if (b > a) texts.push_back(tok.decode(ids.data() + a, b - a));
        a = b + 1;
    }
    REQUIRE(texts.size() > 5);
    const HfBpe hf(f.vocab_json, f.merges_txt);
    size_t total = 0, differ = 0;
    for (const std::string& t : texts) {
        if (first_invalid_utf8((const unsigned char*)t.data(), t.size()) < t.size())
            continue;  // Python takes text, not bytes
        std::vector<int> theirs;
        for (const std::string& p : pieces(t)) hf.encode_piece(p, theirs);
        const std::vector<int> ours = tok.encode(t);
        total += ours.size();
        differ += theirs != ours;
    }
    CHECK(total > 50000);
    CHECK(differ == 0);

    // tokenizer.h's own reader of the GPT-2 release format accepts the files as encoder.json and vocab.bpe
    // (it checks that merge i makes token 256 + i) and tokenises as the ranks file does.
    const std::string dir = tmp_dir();
    write_file(dir + "/encoder.json", f.vocab_json);
    write_file(dir + "/vocab.bpe", f.merges_txt);
    const Tokenizer back = Tokenizer::load(dir);
    CHECK(back.encode(texts[2]) == tok.encode(texts[2]));
    remove_all(dir);
}

TEST_CASE("export then import gives model.bin back byte for byte; bf16 halves the file and imports its rounded values",
          "[hf]") {
    const std::string dir = tmp_dir();
    for (const ModelConfig& c : {make("prism", "uniform", "layernorm", 0), make("uniform", "x", "rmsnorm", 1),
                                 make_columns("1,1,1,1,2,4", "openelm", "8x3,0x3", "2", "5", "prism", "x")}) {
        const std::string bin = dir + "/model.bin", out = dir + "/hf", back = dir + "/back.bin";
        remove_all(out), unlink(back.c_str());
        const std::vector<float> p = write_model(bin, c, 42);
        const Result e = sh("./export " + bin + " -o " + out);
        INFO(e.out);
        REQUIRE(e.rc == 0);
        CHECK_THAT(e.out, Catch::Contains("no tokenizer files: the model's vocabulary V = 300"));
        for (const char* name : {"model.safetensors", "config.json", "configuration_prism.py", "modeling_prism.py",
                                 "generation_config.json", "README.md"})
            CHECK(access((out + "/" + name).c_str(), R_OK) == 0);
        CHECK(read_file(out + "/config.json") == hf_config_json(c, 42, "float32", load_model(bin).run_id));
        // The card's table numbers layers from 1: the sixth layer (index 5) is row 6.
        CHECK_THAT(read_file(out + "/README.md"),
                   Catch::Contains("| 6 | " + std::to_string(c.layers[5].width) + " | "));
        if (!c.layers[1].attention)  // the columns of a sub-block the layer lacks are "-"
            CHECK_THAT(read_file(out + "/README.md"),
                       Catch::Contains("| 2 | " + std::to_string(c.layers[1].width) + " | - | - | - | " +
                                       std::to_string(c.hidden_of(1)) + " | - | no | "));
        CHECK_THAT(read_file(out + "/modeling_prism.py"), Catch::Contains("class PrismForCausalLM"));
        const Result i = sh("./import " + out + " -o " + back);
        INFO(i.out);
        REQUIRE(i.rc == 0);
        CHECK(read_file(back) == read_file(bin));

        // The same tensors in two shards and model.safetensors.index.json, as save_pretrained writes large models.
        const std::string sharded = dir + "/sharded", back2 = dir + "/back2.bin";
        remove_all(sharded), unlink(back2.c_str());
        REQUIRE(sh("mkdir -p " + sharded + " && cp " + out + "/config.json " + sharded).rc == 0);
        std::vector<StSource> shard[2];
        std::string map;
        const ParamLayout layout = param_layout(c);
        for (size_t k = 0; k < layout.tensors.size(); k++) {
            const ParamTensor& t = layout.tensors[k];
            shard[k % 2].push_back({hf_tensor_name(t), hf_tensor_shape(t), p.data() + t.offset});
            map += std::string(k ? ", " : "") + json::quote(hf_tensor_name(t)) + ": \"part-" + std::to_string(k % 2) +
                   ".safetensors\"";
        }
        for (int s = 0; s < 2; s++)
            write_safetensors(sharded + "/part-" + std::to_string(s) + ".safetensors", shard[s], StDtype::F32, {});
        write_file(sharded + "/model.safetensors.index.json", "{\"metadata\": {}, \"weight_map\": {" + map + "}}");
        const Result i2 = sh("./import " + sharded + " -o " + back2);
        INFO(i2.out);
        REQUIRE(i2.rc == 0);
        CHECK(read_file(back2) == read_file(bin));

        const std::string out16 = dir + "/hf16", back16 = dir + "/back16.bin";
        remove_all(out16), unlink(back16.c_str());
        REQUIRE(sh("./export " + bin + " -o " + out16 + " --dtype bf16").rc == 0);
        struct stat a, b;
        stat((out + "/model.safetensors").c_str(), &a), stat((out16 + "/model.safetensors").c_str(), &b);
        CHECK(std::abs((double)a.st_size / 2 - (double)b.st_size) < 4096);  // the data halves; the header stays
        const Result i16 = sh("./import " + out16 + " -o " + back16);
        CHECK_THAT(i16.out, Catch::Contains("widened exactly to fp32"));
        const LoadedModel m = load_model(back16);
        size_t same = 0;
        for (size_t k = 0; k < p.size(); k++) same += m.params[k] == float_from_bf16(bf16_from_float(p[k]));
        CHECK(same == p.size());
    }
    remove_all(dir);
}

TEST_CASE(
    "import refuses what is not an export, tensors of the wrong shape or dtype, and a config that contradicts them",
    "[hf]") {
    const std::string dir = tmp_dir(), bin = dir + "/model.bin", out = dir + "/hf";
    const ModelConfig c = make("uniform", "uniform", "layernorm", 1);
    const std::vector<float> p = write_model(bin, c, 3);
    REQUIRE(sh("./export " + bin + " -o " + out).rc == 0);
    const std::string config = read_file(out + "/config.json");
    auto import_error = [&]() {
        const Result r = sh("./import " + out + " -o " + dir + "/x.bin");
        INFO(r.out);
        CHECK(r.rc == 1);
        CHECK(one_line(r.out));
        CHECK(access((dir + "/x.bin").c_str(), F_OK) != 0);
        return r.out;
    };
    const ParamLayout layout = param_layout(c);
    auto write_tensors = [&](const std::string& rename, const std::vector<int64_t>& shape, StDtype dtype, bool extra) {
        std::vector<StSource> t;
        for (const ParamTensor& x : layout.tensors) {
            std::string name = hf_tensor_name(x);
            t.push_back({name, name == rename ? shape : hf_tensor_shape(x), p.data() + x.offset});
        }
        if (extra) t.push_back({"model.layers.0.attn.bias", {4}, p.data()});
        write_safetensors(out + "/model.safetensors", t, dtype, {});
    };

    // a tensor of the wrong shape (same bytes, so the file itself is sound)
    write_tensors("model.layers.2.attn.out.weight", {(int64_t)c.d * c.d / 2, 2}, StDtype::F32, false);
    CHECK_THAT(
        import_error(),
        Catch::Contains("tensor model.layers.2.attn.out.weight has shape [2048, 2] but config.json needs [64, 64]"));
    // a tensor the config has no place for
    write_tensors("", {}, StDtype::F32, true);
    CHECK_THAT(import_error(), Catch::Contains("tensor model.layers.0.attn.bias is not part of the Prism model"));
    // a dtype import does not read
    write_tensors("", {}, StDtype::F32, false);
    std::string st = read_file(out + "/model.safetensors");
    const size_t at = st.find("\"F32\"");
    st.replace(at, 5, "\"I32\"");
    write_file(out + "/model.safetensors", st);
    CHECK_THAT(import_error(), Catch::Contains("dtype I32 is not a floating-point type we read"));
    write_tensors("", {}, StDtype::F32, false);
    // a config that contradicts the tensors: one layer wider than its tensors, or tied while the head differs
    std::string wider = config;
    wider.replace(wider.find("\"layer_widths\": [64"), 19, "\"layer_widths\": [96");
    wider.replace(wider.find("\"layer_hidden_sizes\": ["), 23 + std::to_string(c.hidden_of(0)).size(),
                  "\"layer_hidden_sizes\": [" + std::to_string(c.hidden(96)));
    wider.replace(wider.find("\"residual_width\": 64"), 20, "\"residual_width\": 96");
    write_file(out + "/config.json", wider);
    CHECK_THAT(import_error(),
               Catch::Contains("tensor model.layers.0.attn_norm.weight has shape [64] but config.json needs [96]"));
    // per-layer columns: KV heads that do not divide the heads; valid GQA the tensors do not have (wqkv's rows)
    std::string gqa = config;
    const std::string kv4 = "\"layer_kv_heads\": [4";
    gqa.replace(gqa.find(kv4), kv4.size(), "\"layer_kv_heads\": [3");
    write_file(out + "/config.json", gqa);
    CHECK_THAT(import_error(),
               Catch::Contains("config.json: layer 0 (model.layers.0): layer_kv_heads 3 does not divide "
                               "layer_heads 4"));
    gqa.replace(gqa.find("\"layer_kv_heads\": [3"), kv4.size(), "\"layer_kv_heads\": [2");
    write_file(out + "/config.json", gqa);
    CHECK_THAT(
        import_error(),
        Catch::Contains("tensor model.layers.0.attn.qkv.weight has shape [192, 64] but config.json needs [128, 64]"));
    std::string tied = config;
    tied.replace(tied.find("\"tie_word_embeddings\": false"), 28, "\"tie_word_embeddings\": true");
    write_file(out + "/config.json", tied);
    CHECK_THAT(import_error(), Catch::Contains("lm_head.weight differs from model.embed_tokens.weight"));
    write_file(out + "/config.json", config);
    // a directory that is not an export
    REQUIRE(unlink((out + "/model.safetensors").c_str()) == 0);
    CHECK_THAT(import_error(), Catch::Contains("holds neither model.safetensors nor model.safetensors.index.json"));
    REQUIRE(unlink((out + "/config.json").c_str()) == 0);
    CHECK_THAT(import_error(), Catch::Contains("holds no config.json: it is not an export"));
    // export into a directory that holds files, import over an existing model.bin
    const Result e = sh("./export " + bin + " -o " + out);
    CHECK(e.rc == 1);
    CHECK_THAT(e.out, Catch::Contains("already holds files; pass --overwrite"));
    REQUIRE(sh("./export " + bin + " -o " + out + " --overwrite").rc == 0);
    const Result i = sh("./import " + out + " -o " + bin);
    CHECK(i.rc == 1);
    CHECK_THAT(i.out, Catch::Contains("exists; pass --overwrite"));
    remove_all(dir);
}

TEST_CASE("the model card carries the run's training record and logged evals, from RUN_DIR or RUN/step_N/model.bin",
          "[hf]") {
    const std::string run = tmp_dir(), step = run + "/step_00000010";
    REQUIRE(sh("mkdir -p " + step).rc == 0);
    const ModelConfig c = make("prism", "uniform", "layernorm", 0);
    write_model(step + "/model.bin", c, 10);
    REQUIRE(link((step + "/model.bin").c_str(), (run + "/model.bin").c_str()) == 0);
    write_file(run + "/log.jsonl",
               "{\"step\": 5, \"tokens\": 10240, \"train_loss\": 6.25, \"elapsed_s\": 6.0}\n"
               "{\"step\": 10, \"tokens\": 20480, \"train_loss\": 5.5, \"val_loss\": 5.4, \"elapsed_s\": 12.5, "
               "\"eval\": {\"task\": \"hellaswag\", \"examples\": 10, \"acc\": 0.3}}\n");
    for (const std::string& from : {run, step + "/model.bin"}) {
        remove_all(run + "/hf");
        const Result e = sh("./export " + from + " -o " + run + "/hf");
        INFO(e.out);
        REQUIRE(e.rc == 0);
        const std::string card = read_file(run + "/hf/README.md");
        CHECK_THAT(card, Catch::Contains("| 10 | 20480 | 5.5000 | 5.4000 | 5.4000 | 12.5 |"));
        CHECK_THAT(card, Catch::Contains("| hellaswag | 10 | examples 10, acc 0.3 |"));
        // Layers numbered from 1, as --plan numbers them.
        // run/plan_views.h's per-layer table: width, heads, head_dim, kv, hidden, window, then the parameters.
        CHECK_THAT(card, Catch::Contains("| layer | width | heads | head_dim | kv | hidden | window | parameters |"));
        CHECK_THAT(card, Catch::Contains("| 1 | 64 | 2 | 32 | 2 | " + std::to_string(c.hidden_of(0)) + " | global | "));
        CHECK_THAT(card, !Catch::Contains("| 0 | 64 |"));
    }
    remove_all(run);
}

TEST_CASE("export and import: bad command lines are one-line errors", "[hf]") {
    // (every flag of their --help parsed back: test_cli.cpp)
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"./export", "export: error: no checkpoint given"},
        {"./export x.bin", "export: error: no output directory; pass -o DIR"},
        {"./export x.bin -o d --dtype fp16", "--dtype must be fp32 or bf16, not 'fp16'"},
        {"./export /nonexistent/model.bin -o /tmp/never", "cannot open checkpoint /nonexistent/model.bin"},
        {"./export x.bin -o d --bogus", "unknown flag '--bogus'"},
        {"./import", "import: error: no directory given"},
        {"./import /nonexistent -o x.bin", "/nonexistent is not a directory"},
    };
    for (const auto& [cmd, want] : bad) {
        const Result r = sh(cmd);
        INFO(cmd);
        CHECK(r.rc == 1);
        CHECK(one_line(r.out));
        CHECK_THAT(r.out, Catch::Contains(want));
    }
}

TEST_CASE(
    "import validates before it allocates: config sizes against the headers, a bounded header, non-finite "
    "weights refused by name, out of memory names the file and size",
    "[hf][import_limits]") {
    const std::string dir = tmp_dir(), bin = dir + "/model.bin", out = dir + "/hf";
    const ModelConfig c = make("uniform", "uniform", "layernorm", 1);
    std::vector<float> p = write_model(bin, c, 3);
    REQUIRE(sh("./export " + bin + " -o " + out).rc == 0);
    const std::string config = read_file(out + "/config.json");
    const ParamLayout layout = param_layout(c);
    auto import = [&](const std::string& limit = "") {
        return sh(limit + "./import " + out + " -o " + dir + "/x.bin");
    };
    auto refused = [&](const Result& r, const std::string& says) {
        INFO(r.out);
        CHECK(r.rc == 1);
        CHECK(one_line(r.out));
        CHECK_THAT(r.out, Catch::Contains(says));
        CHECK(access((dir + "/x.bin").c_str(), F_OK) != 0);
    };
    // A small directory whose config claims vocab 2^24: refused on the shapes under 200 MB of address space,
    // where the 4 GB buffer the claim asks for (untied: two V x d matrices) would not even be allocated.
    std::string big = config;
    big.replace(big.find("\"vocab_size\": 300"), 17, "\"vocab_size\": 16777216");
    write_file(out + "/config.json", big);
    refused(import("ulimit -v 200000; "),
            "tensor model.embed_tokens.weight has shape [300, 64] but config.json needs "
            "[16777216, 64]");
    write_file(out + "/config.json", config);

    // Non-finite weights, fp32 and bf16: one line naming the tensor and the element.
    auto write_tensors = [&](StDtype dtype) {
        std::vector<StSource> t;
        for (const ParamTensor& x : layout.tensors)
            t.push_back({hf_tensor_name(x), hf_tensor_shape(x), p.data() + x.offset});
        write_safetensors(out + "/model.safetensors", t, dtype, {});
    };
    const ParamTensor& down = layout.tensors[layout.tensors.size() / 2];
    p[down.offset + 5] = NAN;
    write_tensors(StDtype::F32);
    refused(import(), "model.safetensors: tensor " + hf_tensor_name(down) +
                          " holds nan at element 5; a model.bin holds "
                          "finite weights only");
    p[down.offset + 5] = 0, p[layout.wte + 7] = INFINITY;
    write_tensors(StDtype::BF16);
    refused(import(), "tensor model.embed_tokens.weight holds inf at element 7");
    p[layout.wte + 7] = 0;
    write_tensors(StDtype::F32);
    REQUIRE(import().rc == 0);
    sh("rm -f " + dir + "/x.bin");

    // A header of 300k zero-size entries (inside the 100 MB cap): refused at once, not checked pair by pair.
    std::string h = "{";
    for (int i = 0; i < 300000; i++)
        h += (i ? ", \"t" : "\"t") + std::to_string(i) +
             "\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [0, 0]}";
    h += "}";
    uint64_t hn = h.size();
    write_file(out + "/model.safetensors", std::string((const char*)&hn, 8) + h);
    auto t0 = std::chrono::steady_clock::now();
    refused(import(), "model.safetensors: its header holds 3000000 JSON values, more than ");
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 20);
    // The reader's own bound, and its duplicate check at the bound's size (80000 names, the last one twice).
    const std::string st = dir + "/dup.safetensors";
    h = "{";
    for (int i = 0; i < 80000; i++)
        h += (i ? ", \"t" : "\"t") + std::to_string(i == 79999 ? 0 : i) +
             "\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [0, 0]}";
    h += "}";
    hn = h.size();
    write_file(st, std::string((const char*)&hn, 8) + h);
    t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH(read_safetensors_header(st), Catch::Contains("tensor \"t0\": listed twice"));
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 20);
    CHECK_THROWS_WITH(read_safetensors_header(st, 1000), Catch::Contains("more than 1000 tensors can need"));

    // Out of memory: a sound bf16 directory whose fp32 model does not fit the address space names config.json
    // and the bytes it needed.
    ModelSpec s;
    s.preset = "tiny", s.d = 192, s.L = 2, s.h_base = 2, s.T = 32, s.V = 50257, s.untied = 1;
    std::vector<std::string> w;
    const ModelConfig large = build_config(s, w);
    write_model(bin, large, 1);
    REQUIRE(sh("./export " + bin + " --dtype bf16 --overwrite -o " + out).rc == 0);
    const size_t P = param_layout(large).total;
    refused(import("ulimit -v 70000; OMP_NUM_THREADS=1 "),
            "out of memory: " + out + "/config.json describes a model of " + std::to_string(P) +
                " parameters, and its weights need " + std::to_string(P * 4) + " bytes as fp32");
    REQUIRE(import().rc == 0);
    remove_all(dir);
}
