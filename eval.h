// eval.h: zero-shot evaluation as lm-evaluation-harness v0.4 does it (../shared/EVAL.md is the protocol):
// the prompt rules of each task (text -> contexts and continuations), their tokenisation, the eval file that
// holds the result, and the scorer that runs an Engine over it. Used by data/prepare_eval.cpp (raw files ->
// eval files), eval_zeroshot.cu (checkpoint -> table) and the trainer (one task every N steps).
//
// Eval file (data/eval/TASK.bin), little-endian:
//   bytes [0, 1024)  256 x int32 header
//       [0] magic 0x4C564550 ("PEVL")   [1] version 1
//       [2] kind: 0 choice (score every request, argmax = pick), 1 target (one request; acc = every target
//           token is the argmax; perplexity), 2 rolling (one text per example, scored in windows of the model's T)
//       [3] 1 if acc_norm is defined (choices have code-point lengths)   [4] V of the tokenizer   [5] its EOT id
//       [6..7] example count (int64)   [8..9] tokenizer fingerprint (uint64, tokenizer_fingerprint below)
//       [10..11] payload bytes (int64)   [12..13] payload checksum (uint64, checkpoint.h's checksum64)
//       [14..15] total tokens over all records (int64)
//       [16..31] task name, 64 bytes, NUL-padded ASCII   [32..47] tokenizer name, 64 bytes (e.g. "gpt2")
//       the rest zero
//   then one record per example, back to back (the payload):
//       int32 n_tokens, int32 n_requests, int32 gold (-1: none), int32 0,
//       int64 words, int64 bytes              (rolling: counted on the original text; target: the target's
//                                              bytes and 1 word; choice: 0)
//       n_requests x {int32 ctx_begin, ctx_end, cont_begin, cont_end, norm_len}
//       n_tokens x int32 tokens               (the record's token pool; ranges index into it)
//   Request r scores pool[cont_begin, cont_end) given pool[ctx_begin, ctx_end): both ranges non-empty (an
//   empty context is [EOT], as lm-eval does). norm_len is the choice's length in Unicode code points without
//   the leading space (acc_norm's divisor), 0 where undefined. A rolling record has no requests: its pool is
//   the whole text, cut into windows at scoring time because the windows depend on the model's T.
//   Multiple choice: pool = ctx | cont_0 | cont_1 ...; WinoGrande: ctx_0 | cont_0 | ctx_1 | cont_1.
//
// Not here: reading the raw files (data/prepare_eval.cpp), the command line (eval_zeroshot.cu). The scorer
// never materialises more than one batch of logits (rows x T_batch x V, inside the engine).
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint.h"
#include "engine.h"
#include "tokenizer.h"

// Every problem with an eval file or a raw input: one line naming what and where.
struct EvalError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// ======================================================================================================
// JSON (RFC 8259): enough of a DOM for one object per JSON Lines line
// ======================================================================================================
namespace ev {

struct Json {
    enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
    bool b = false;
    std::string str;  // String: decoded UTF-8; Number: the literal as written (so "1" and 1 are both labels)
    std::vector<Json> arr;
    std::vector<std::pair<std::string, Json>> obj;

    // The member `key`, or null. Duplicate keys: the last one wins, as in Python's json.
    const Json* find(const std::string& key) const {
        for (size_t i = obj.size(); i-- > 0;)
            if (obj[i].first == key) return &obj[i].second;
        return nullptr;
    }
};

inline void put_utf8(uint32_t cp, std::string& out) {
    if (cp < 0x80) {
        out += (char)cp;
    } else if (cp < 0x800) {
        out += (char)(0xC0 | (cp >> 6)), out += (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += (char)(0xE0 | (cp >> 12)), out += (char)(0x80 | ((cp >> 6) & 0x3F)), out += (char)(0x80 | (cp & 0x3F));
    } else {
        out += (char)(0xF0 | (cp >> 18)), out += (char)(0x80 | ((cp >> 12) & 0x3F));
        out += (char)(0x80 | ((cp >> 6) & 0x3F)), out += (char)(0x80 | (cp & 0x3F));
    }
}

class JsonParser {
  public:
    explicit JsonParser(std::string_view s) : s_(s) {}
    Json parse() {
        Json v = value();
        ws();
        if (i_ != s_.size()) fail("trailing characters after the JSON value");
        return v;
    }

  private:
    std::string_view s_;
    size_t i_ = 0;
    int depth_ = 0;

    [[noreturn]] void fail(const std::string& what) {
        throw EvalError("invalid JSON: " + what + " at column " + std::to_string(i_ + 1));
    }
    void ws() {
        while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) i_++;
    }
    bool eat(char c) {
        ws();
        if (i_ < s_.size() && s_[i_] == c) return i_++, true;
        return false;
    }
    void literal(const char* word) {
        size_t n = strlen(word);
        if (s_.substr(i_, n) != word) fail("unexpected character");
        i_ += n;
    }
    Json value() {
        ws();
        if (i_ >= s_.size()) fail("unexpected end of input");
        if (++depth_ > 512) fail("nesting deeper than 512");
        Json v;
        char c = s_[i_];
        if (c == '{') {
            v.kind = Json::Object, i_++;
            if (!eat('}')) {
                do {
                    ws();
                    if (i_ >= s_.size() || s_[i_] != '"') fail("expected a string key");
                    std::string k = string();
                    if (!eat(':')) fail("expected ':'");
                    v.obj.emplace_back(std::move(k), value());
                } while (eat(','));
                if (!eat('}')) fail("expected ',' or '}'");
            }
        } else if (c == '[') {
            v.kind = Json::Array, i_++;
            if (!eat(']')) {
                do v.arr.push_back(value());
                while (eat(','));
                if (!eat(']')) fail("expected ',' or ']'");
            }
        } else if (c == '"') {
            v.kind = Json::String, v.str = string();
        } else if (c == 't') {
            literal("true"), v.kind = Json::Bool, v.b = true;
        } else if (c == 'f') {
            literal("false"), v.kind = Json::Bool;
        } else if (c == 'n') {
            literal("null");
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            v.kind = Json::Number, v.str = number();
        } else {
            fail(std::string("unexpected character '") + c + "'");
        }
        depth_--;
        return v;
    }
    std::string number() {
        size_t a = i_;
        auto digits = [&] {
            size_t b = i_;
            while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') i_++;
            return i_ > b;
        };
        if (s_[i_] == '-') i_++;
        if (i_ < s_.size() && s_[i_] == '0') i_++;
        else if (!digits()) fail("bad number");
        if (i_ < s_.size() && s_[i_] == '.' && (i_++, !digits())) fail("bad number fraction");
        if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
            i_++;
            if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) i_++;
            if (!digits()) fail("bad number exponent");
        }
        return std::string(s_.substr(a, i_ - a));
    }
    uint32_t hex4() {
        if (i_ + 4 > s_.size()) fail("truncated \\u escape");
        uint32_t v = 0;
        for (int k = 0; k < 4; k++) {
            char c = s_[i_++];
            v <<= 4;
            if (c >= '0' && c <= '9') v |= c - '0';
            else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
            else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
            else fail("bad hex digit in \\u escape");
        }
        return v;
    }
    // A lone UTF-16 surrogate (legal JSON, not representable in UTF-8) becomes U+FFFD.
    std::string string() {
        i_++;  // the opening quote
        std::string out;
        while (true) {
            if (i_ >= s_.size()) fail("unterminated string");
            unsigned char c = s_[i_++];
            if (c == '"') return out;
            if (c < 0x20) fail("raw control character in a string");
            if (c != '\\') { out += (char)c; continue; }
            if (i_ >= s_.size()) fail("unterminated escape");
            char e = s_[i_++];
            switch (e) {
                case '"': out += '"'; break;
                case '\\': out += '\\'; break;
                case '/': out += '/'; break;
                case 'b': out += '\b'; break;
                case 'f': out += '\f'; break;
                case 'n': out += '\n'; break;
                case 'r': out += '\r'; break;
                case 't': out += '\t'; break;
                case 'u': {
                    uint32_t cp = hex4();
                    if (cp >= 0xD800 && cp < 0xDC00 && s_.substr(i_, 2) == "\\u") {
                        size_t save = i_;
                        i_ += 2;
                        uint32_t lo = hex4();
                        if (lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        else i_ = save;  // not a pair: the high half is lone, the next escape stands alone
                    }
                    if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD;
                    put_utf8(cp, out);
                    break;
                }
                default: fail(std::string("bad escape \\") + e);
            }
        }
    }
};

inline Json parse_json(std::string_view s) { return JsonParser(s).parse(); }

// s as a JSON string literal, quotes included.
inline std::string json_quote(std::string_view s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') out += '\\', out += (char)c;
        else if (c < 0x20) {
            char b[8];
            snprintf(b, sizeof b, "\\u%04x", c);
            out += b;
        } else out += (char)c;
    }
    return out + "\"";
}

// Field access with one-line errors ("missing field \"ctx_b\"").
inline const Json& field(const Json& o, const std::string& key) {
    if (o.kind != Json::Object) throw EvalError("expected a JSON object");
    const Json* v = o.find(key);
    if (!v) throw EvalError("missing field \"" + key + "\"");
    return *v;
}
inline const std::string& str_field(const Json& o, const std::string& key) {
    const Json& v = field(o, key);
    if (v.kind != Json::String) throw EvalError("field \"" + key + "\" is not a string");
    return v.str;
}
// An integer written as a number (3) or a string ("3"), as labels are in the official files.
inline long int_field(const Json& o, const std::string& key) {
    const Json& v = field(o, key);
    if (v.kind == Json::Number || v.kind == Json::String) {
        char* end = nullptr;
        long x = strtol(v.str.c_str(), &end, 10);
        if (!v.str.empty() && *end == 0) return x;
    }
    throw EvalError("field \"" + key + "\" is not an integer");
}

// ======================================================================================================
// Python's string semantics, on UTF-8
// ======================================================================================================

// Code points of s. A byte that is not well-formed UTF-8 is one code point U+DC80 + byte (Python's
// surrogateescape), so encode(decode(s)) == s for every byte string.
inline std::vector<uint32_t> utf8_decode(std::string_view s) {
    std::vector<uint32_t> cps;
    const unsigned char* p = (const unsigned char*)s.data();
    for (size_t i = 0; i < s.size();) {
        size_t k = tokenizer_detail::utf8_seq_len(p, i, s.size());
        if (k == 0) { cps.push_back(0xDC00 + p[i]), i++; continue; }
        uint32_t cp = k == 1 ? p[i] : k == 2 ? p[i] & 0x1F : k == 3 ? p[i] & 0x0F : p[i] & 0x07;
        for (size_t j = 1; j < k; j++) cp = (cp << 6) | (p[i + j] & 0x3F);
        cps.push_back(cp), i += k;
    }
    return cps;
}
inline std::string utf8_encode(const std::vector<uint32_t>& cps, size_t a = 0, size_t b = SIZE_MAX) {
    std::string out;
    for (size_t i = a; i < std::min(b, cps.size()); i++) {
        if (cps[i] >= 0xDC80 && cps[i] <= 0xDCFF) out += (char)(cps[i] - 0xDC00);
        else put_utf8(cps[i], out);
    }
    return out;
}
// len() of the Python str: acc_norm's length unit.
inline int code_points(std::string_view s) { return (int)utf8_decode(s).size(); }

// str.isspace(), which is also what `\s` matches in a Python str pattern.
inline bool py_isspace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}
inline std::string py_strip(std::string_view s, bool left = true, bool right = true) {
    std::vector<uint32_t> c = utf8_decode(s);
    size_t a = 0, b = c.size();
    while (left && a < b && py_isspace(c[a])) a++;
    while (right && b > a && py_isspace(c[b - 1])) b--;
    return utf8_encode(c, a, b);
}
inline std::string py_rstrip(std::string_view s) { return py_strip(s, false, true); }

// str.replace(from, to): every non-overlapping occurrence, left to right, in one pass.
inline std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
    std::string out;
    size_t i = 0;
    for (size_t j; (j = s.find(from, i)) != std::string_view::npos; i = j + from.size()) out.append(s, i, j - i), out += to;
    return out.append(s.substr(i));
}

// Simple case mappings. Covered exactly: ASCII, Latin-1, Latin Extended-A, basic Greek (with the final-sigma
// rule of str.lower()) and basic Cyrillic. Every other code point is left as it is (Python would map e.g.
// Armenian, Georgian or fullwidth letters); HellaSwag's text is English, where this never matters.
inline uint32_t lower_cp(uint32_t c) {
    if ((c >= 'A' && c <= 'Z') || (c >= 0xC0 && c <= 0xDE && c != 0xD7) || (c >= 0x391 && c <= 0x3AB && c != 0x3A2) ||
        (c >= 0x410 && c <= 0x42F))
        return c + 0x20;
    if (c >= 0x400 && c <= 0x40F) return c + 0x50;
    if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return c | 1;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c + 1 : c;
    if (c == 0x178) return 0xFF;
    if (c == 0x386) return 0x3AC;
    if (c >= 0x388 && c <= 0x38A) return c + 0x25;
    if (c == 0x38C) return 0x3CC;
    if (c == 0x38E || c == 0x38F) return c + 0x3F;
    return c;
}
inline uint32_t upper_cp(uint32_t c) {  // titlecase == uppercase for every code point covered here
    if ((c >= 'a' && c <= 'z') || (c >= 0xE0 && c <= 0xFE && c != 0xF7) || (c >= 0x3B1 && c <= 0x3CB && c != 0x3C2) ||
        (c >= 0x430 && c <= 0x44F))
        return c - 0x20;
    if (c >= 0x450 && c <= 0x45F) return c - 0x50;
    if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return c & ~1u;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c : c - 1;
    if (c == 0xFF) return 0x178;
    if (c == 0xB5) return 0x39C;
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    if (c == 0x3C2) return 0x3A3;
    if (c == 0x3AC) return 0x386;
    if (c >= 0x3AD && c <= 0x3AF) return c - 0x25;
    if (c == 0x3CC) return 0x38C;
    if (c == 0x3CD || c == 0x3CE) return c - 0x3F;
    return c;
}
inline bool cased_cp(uint32_t c) { return lower_cp(c) != c || upper_cp(c) != c || c == 0xDF; }

// str.capitalize() (Python >= 3.8): the first character titlecased, every other one lower-cased.
inline std::string py_capitalize(std::string_view s) {
    std::vector<uint32_t> c = utf8_decode(s), out;
    for (size_t i = 0; i < c.size(); i++) {
        if (i == 0) {
            if (c[0] == 0xDF) out.push_back('S'), out.push_back('s');  // titlecase of sharp s is "Ss"
            else out.push_back(upper_cp(c[0]));
        } else if (c[i] == 0x130) {
            out.push_back('i'), out.push_back(0x307);  // dotted capital I lowers to i + combining dot
        } else if (c[i] == 0x3A3) {
            // Final sigma: after a cased letter and not before one (Python skips case-ignorable characters
            // around it; we look at the direct neighbours only).
            bool final = cased_cp(c[i - 1]) && !(i + 1 < c.size() && cased_cp(c[i + 1]));
            out.push_back(final ? 0x3C2 : 0x3C3);
        } else {
            out.push_back(lower_cp(c[i]));
        }
    }
    return utf8_encode(out);
}

}  // namespace ev

// ======================================================================================================
// The tasks: raw records -> prompt strings (EVAL.md, exactly)
// ======================================================================================================

enum class EvalKind : int32_t { Choice = 0, Target = 1, Rolling = 2 };

struct EvalTaskInfo {
    const char* name;
    EvalKind kind;
    bool has_norm;     // acc_norm defined
    const char* raw;   // the official raw file(s) prepare_eval reads
};
inline const std::vector<EvalTaskInfo>& eval_tasks() {
    static const std::vector<EvalTaskInfo> t = {
        {"hellaswag", EvalKind::Choice, true, "hellaswag_val.jsonl"},
        {"piqa", EvalKind::Choice, true, "valid.jsonl valid-labels.lst"},
        {"arc_easy", EvalKind::Choice, true, "ARC-Easy-Test.jsonl"},
        {"winogrande", EvalKind::Choice, false, "dev.jsonl"},
        {"lambada", EvalKind::Target, false, "lambada_test.jsonl"},
        {"wikitext", EvalKind::Rolling, false, "wiki.test.raw"},
    };
    return t;
}
inline const EvalTaskInfo& find_eval_task(const std::string& name) {
    std::string known;
    for (const auto& t : eval_tasks()) {
        if (name == t.name) return t;
        known += std::string(known.empty() ? "" : ", ") + t.name;
    }
    throw EvalError("unknown task '" + name + "'; choose from " + known);
}

// One example as strings, before tokenisation. Request r is (ctx[r], cont[r]).
struct EvalDoc {
    std::vector<std::string> ctx, cont;
    std::vector<int> norm_len;  // acc_norm divisor per request: code points of the choice, no leading space
    int gold = -1;
    std::string text;           // rolling tasks: the text scored as a whole
    int64_t words = 0, bytes = 0;
};

// Zero-shot multiple choice: one context, each choice scored as " " + choice.
inline EvalDoc choice_doc(const std::string& query, const std::vector<std::string>& choices, long gold) {
    if (gold < 0 || gold >= (long)choices.size())
        throw EvalError("gold index " + std::to_string(gold) + " is outside the " + std::to_string(choices.size()) +
                        " choices");
    EvalDoc d;
    for (const auto& c : choices) d.ctx.push_back(query), d.cont.push_back(" " + c), d.norm_len.push_back(ev::code_points(c));
    d.gold = (int)gold;
    return d;
}

// HellaSwag's preprocess: strip; " [title]" -> ". "; drop every [...] (non-greedy, not across a newline, as
// Python's `.`); "  " -> " " in a single pass.
inline std::string hellaswag_preprocess(std::string_view text) {
    std::string s = ev::replace_all(ev::py_strip(text), " [title]", ". "), out;
    for (size_t i = 0; i < s.size(); i++) {
        if (s[i] == '[') {
            size_t j = s.find_first_of("]\n", i + 1);
            if (j != std::string::npos && s[j] == ']') { i = j; continue; }
        }
        out += s[i];
    }
    return ev::replace_all(out, "  ", " ");
}

inline EvalDoc hellaswag_doc(const ev::Json& o) {
    std::string ctx = ev::str_field(o, "ctx_a") + " " + ev::py_capitalize(ev::str_field(o, "ctx_b"));
    std::string query = hellaswag_preprocess(ev::str_field(o, "activity_label") + ": " + ctx);
    const ev::Json& e = ev::field(o, "endings");
    if (e.kind != ev::Json::Array || e.arr.empty()) throw EvalError("field \"endings\" is not a non-empty array");
    std::vector<std::string> choices;
    for (const auto& x : e.arr) {
        if (x.kind != ev::Json::String) throw EvalError("an ending is not a string");
        choices.push_back(hellaswag_preprocess(x.str));
    }
    return choice_doc(query, choices, ev::int_field(o, "label"));
}

inline EvalDoc piqa_doc(const ev::Json& o, long label) {
    return choice_doc("Question: " + ev::str_field(o, "goal") + "\nAnswer:", {ev::str_field(o, "sol1"), ev::str_field(o, "sol2")},
                      label);
}

// ARC: 3 to 5 choices, labels "A".."E" or "1".."5"; gold = position of answerKey among the labels.
inline EvalDoc arc_doc(const ev::Json& o) {
    const ev::Json& q = ev::field(o, "question");
    const ev::Json& ch = ev::field(q, "choices");
    if (ch.kind != ev::Json::Array || ch.arr.empty()) throw EvalError("field \"choices\" is not a non-empty array");
    std::string key = ev::str_field(o, "answerKey");
    std::vector<std::string> texts;
    long gold = -1;
    for (const auto& c : ch.arr) {
        if (ev::str_field(c, "label") == key && gold < 0) gold = (long)texts.size();
        texts.push_back(ev::str_field(c, "text"));
    }
    if (gold < 0) throw EvalError("answerKey \"" + key + "\" is not among the choice labels");
    return choice_doc("Question: " + ev::str_field(q, "stem") + "\nAnswer:", texts, gold);
}

// WinoGrande, partial scoring: each option fills the blank to make a context; the rest of the sentence after
// the blank, stripped, is the one continuation " " + rest scored under both (it keeps its space even before
// punctuation such as "'s").
inline EvalDoc winogrande_doc(const ev::Json& o) {
    const std::string& s = ev::str_field(o, "sentence");
    size_t i = s.find('_');
    if (i == std::string::npos) throw EvalError("sentence has no blank '_'");
    std::string ans = ev::str_field(o, "answer");
    if (ans != "1" && ans != "2") throw EvalError("field \"answer\" must be \"1\" or \"2\", got \"" + ans + "\"");
    EvalDoc d;
    std::string rest = " " + ev::py_strip(std::string_view(s).substr(i + 1));
    for (const char* opt : {"option1", "option2"}) d.ctx.push_back(s.substr(0, i) + ev::str_field(o, opt)), d.cont.push_back(rest);
    d.norm_len = {0, 0};
    d.gold = ans == "1" ? 0 : 1;
    return d;
}

// LAMBADA (OpenAI): context = every word but the last, target = " " + the last word (words split on " ").
inline EvalDoc lambada_doc(const ev::Json& o) {
    const std::string& t = ev::str_field(o, "text");
    size_t i = t.rfind(' ');
    if (i == std::string::npos) throw EvalError("text has a single word: nothing to predict it from");
    EvalDoc d;
    d.ctx = {t.substr(0, i)};
    d.cont = {" " + t.substr(i + 1)};
    d.norm_len = {0};
    d.gold = 0;
    d.words = 1, d.bytes = (int64_t)d.cont[0].size();
    return d;
}

// lm-eval's wikitext_detokenizer (the Megatron rules, in their order). Two quirks kept on purpose: the
// "/' [0-9]/" rule matches that literal text (a slash, a quote, a space, a digit, a slash) and writes the
// literal "/'[0-9]/"; the bracket and quote rules pair an opener with the next closer and trim the white
// space just inside them.
inline std::string wikitext_detokenize(std::string_view page) {
    using ev::replace_all;
    std::string s = replace_all(page, "s '", "s'");
    {
        std::string out;
        for (size_t i = 0; i < s.size(); i++) {
            if (s.compare(i, 3, "/' ") == 0 && i + 4 < s.size() && isdigit((unsigned char)s[i + 3]) && s[i + 4] == '/') {
                out += "/'[0-9]/", i += 4;
                continue;
            }
            out += s[i];
        }
        s = out;
    }
    for (const char* p : {"@-@", "@,@", "@.@"}) s = replace_all(s, std::string(" ") + p + " ", std::string(1, p[1]));
    for (const char* p : {":", ";", ".", "!", "?", ","}) s = replace_all(s, std::string(" ") + p + " ", std::string(p) + " ");
    for (const char* oc : {"()", "[]", "{}", "\"\"", "''"}) {
        std::vector<uint32_t> c = ev::utf8_decode(s), out;
        for (size_t i = 0; i < c.size(); i++) {
            size_t j = c[i] == (uint32_t)oc[0] ? i + 1 : c.size();
            while (j < c.size() && c[j] != (uint32_t)oc[1]) j++;
            if (j >= c.size()) { out.push_back(c[i]); continue; }
            size_t a = i + 1, b = j;
            while (a < b && ev::py_isspace(c[a])) a++;
            while (b > a && ev::py_isspace(c[b - 1])) b--;
            out.push_back(c[i]), out.insert(out.end(), c.begin() + a, c.begin() + b), out.push_back(c[j]);
            i = j;
        }
        s = ev::utf8_encode(out);
    }
    s = replace_all(s, "= = = =", "===="), s = replace_all(s, "= = =", "==="), s = replace_all(s, "= =", "==");
    s = replace_all(s, " \xC2\xB0 ", "\xC2\xB0");  // " ° " -> "°"
    s = replace_all(s, " \n", "\n"), s = replace_all(s, "\n ", "\n");
    s = replace_all(s, " N ", " 1 "), s = replace_all(s, " 's", "'s");
    return s;
}

// The raw test file -> pages, as the EleutherAI/wikitext_document_level loader splits it: a line starts a
// new page when, with "= = =" -> "===" and "= =" -> "==" and stripped, it starts with "= " and ends with " ="
// (a top-level "= Title =" line); pages are their lines joined by "\n"; an all-blank page (the file's
// opening line) is dropped, the last page is always kept.
inline std::vector<std::string> wikitext_pages(std::string_view raw) {
    std::vector<std::string> pages, lines;
    auto flush = [&](bool always) {
        std::string page;
        for (size_t k = 0; k < lines.size(); k++) page += (k ? "\n" : "") + lines[k];
        if (always || !ev::py_strip(page).empty()) pages.push_back(page);
        lines.clear();
    };
    size_t a = 0;
    while (true) {
        size_t b = raw.find('\n', a);
        std::string line(raw.substr(a, b == std::string_view::npos ? std::string_view::npos : b - a));
        std::string r = ev::py_strip(ev::replace_all(ev::replace_all(line, "= = =", "==="), "= =", "=="));
        if (r.size() >= 3 && r.compare(0, 2, "= ") == 0 && r.compare(r.size() - 2, 2, " =") == 0) flush(false);
        lines.push_back(line);
        if (b == std::string_view::npos) break;
        a = b + 1;
    }
    flush(true);
    return pages;
}

// A page is scored detokenised; words (len(re.split(r"\s+", page))) and UTF-8 bytes count the original.
inline EvalDoc wikitext_doc(const std::string& page) {
    EvalDoc d;
    d.text = wikitext_detokenize(page);
    std::vector<uint32_t> c = ev::utf8_decode(page);
    d.words = 1;
    for (size_t i = 0; i < c.size(); i++)
        if (ev::py_isspace(c[i]) && (i == 0 || !ev::py_isspace(c[i - 1]))) d.words++;
    d.bytes = (int64_t)page.size();
    return d;
}

// ======================================================================================================
// Tokenised examples and the eval file
// ======================================================================================================

struct EvalRequest {
    int32_t ctx_begin, ctx_end, cont_begin, cont_end, norm_len;
};
struct EvalExample {
    std::vector<int32_t> tokens;  // the pool
    std::vector<EvalRequest> req;
    int32_t gold = -1;
    int64_t words = 0, bytes = 0;
};
struct EvalFile {
    std::string path, task, tokenizer = "gpt2";
    EvalKind kind = EvalKind::Choice;
    bool has_norm = false;
    int32_t V = 0, eot = 0;
    uint64_t fingerprint = 0;
    std::vector<EvalExample> ex;
};

static const int32_t kEvalMagic = 0x4C564550;  // "PEVL"
static const int32_t kEvalVersion = 1;

// Identifies a vocabulary: a hash of every token's bytes, in id order.
inline uint64_t tokenizer_fingerprint(const Tokenizer& tok) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < tok.vocab_size(); i++) {
        std::string b = tok.decode(&i, 1);
        uint32_t n = (uint32_t)b.size();
        h = checksum64(&n, 4, h), h = checksum64(b.data(), b.size(), h);
    }
    return h;
}

// lm-eval's pair encoding: trailing white space of the context moves to the continuation; the context is
// encoded alone and the continuation is what enc(ctx + cont) has beyond len(enc(ctx)) tokens. An empty
// context is [EOT].
inline void encode_pair(const Tokenizer& tok, const std::string& ctx_in, const std::string& cont_in,
                        std::vector<int>& ctx, std::vector<int>& cont) {
    ctx.clear(), cont.clear();
    if (ctx_in.empty()) {
        ctx = {tok.eot()}, cont = tok.encode(cont_in);
        return;
    }
    std::string c = ev::py_rstrip(ctx_in);
    std::string k = ctx_in.substr(c.size()) + cont_in;
    ctx = tok.encode(c);
    std::vector<int> whole = tok.encode(c + k);
    if (whole.size() > ctx.size()) cont.assign(whole.begin() + ctx.size(), whole.end());
    if (ctx.empty()) ctx = {tok.eot()};  // a white-space-only context: score as if empty
}

inline EvalExample encode_doc(const Tokenizer& tok, const EvalDoc& d) {
    EvalExample e;
    e.gold = d.gold, e.words = d.words, e.bytes = d.bytes;
    if (d.ctx.empty()) {
        e.tokens = tok.encode(d.text);
        if (e.tokens.empty()) throw EvalError("empty text");
        return e;
    }
    std::vector<int> ctx, cont, prev_ctx;
    int32_t cb = 0, ce = 0;
    for (size_t r = 0; r < d.ctx.size(); r++) {
        encode_pair(tok, d.ctx[r], d.cont[r], ctx, cont);
        if (cont.empty()) throw EvalError("continuation \"" + d.cont[r] + "\" has no tokens");
        if (r == 0 || ctx != prev_ctx) {  // choices share one context range
            cb = (int32_t)e.tokens.size();
            e.tokens.insert(e.tokens.end(), ctx.begin(), ctx.end());
            ce = (int32_t)e.tokens.size();
            prev_ctx = ctx;
        }
        int32_t kb = (int32_t)e.tokens.size();
        e.tokens.insert(e.tokens.end(), cont.begin(), cont.end());
        e.req.push_back({cb, ce, kb, (int32_t)e.tokens.size(), d.norm_len.empty() ? 0 : d.norm_len[r]});
    }
    return e;
}

inline void save_eval_file(const std::string& path, const EvalFile& f) {
    std::vector<int32_t> p;  // the payload
    int64_t total = 0;
    for (const auto& e : f.ex) {
        p.insert(p.end(), {(int32_t)e.tokens.size(), (int32_t)e.req.size(), e.gold, 0});
        int32_t w[4];
        memcpy(w, &e.words, 8), memcpy(w + 2, &e.bytes, 8);
        p.insert(p.end(), w, w + 4);
        for (const auto& r : e.req) p.insert(p.end(), {r.ctx_begin, r.ctx_end, r.cont_begin, r.cont_end, r.norm_len});
        p.insert(p.end(), e.tokens.begin(), e.tokens.end());
        total += (int64_t)e.tokens.size();
    }
    int32_t h[256] = {0};
    h[0] = kEvalMagic, h[1] = kEvalVersion, h[2] = (int32_t)f.kind, h[3] = f.has_norm, h[4] = f.V, h[5] = f.eot;
    put64(h, 6, (int64_t)f.ex.size());
    put64(h, 8, (int64_t)f.fingerprint);
    put64(h, 10, (int64_t)p.size() * 4);
    put64(h, 12, (int64_t)checksum64(p.data(), p.size() * 4));
    put64(h, 14, total);
    strncpy((char*)(h + 16), f.task.c_str(), 63);
    strncpy((char*)(h + 32), f.tokenizer.c_str(), 63);
    try {
        write_atomically(path, {{h, sizeof h}, {p.data(), p.size() * 4}});
    } catch (const CheckpointError& e) {
        throw EvalError(e.what());
    }
}

// Reads and checks every field; model_V > 0 also checks the file was tokenised for the model's vocabulary.
inline EvalFile load_eval_file(const std::string& path, int model_V = 0) {
    std::vector<unsigned char> buf;
    try {
        buf = read_file_bytes(path, "eval file");
    } catch (const CheckpointError& e) {
        throw EvalError(std::string(e.what()) + "; build it with data/get_eval.sh");
    }
    auto bad = [&](const std::string& why) { return EvalError("eval file " + path + ": " + why); };
    if (buf.size() < 1024) throw bad("truncated (" + std::to_string(buf.size()) + " bytes, the header needs 1024)");
    const int32_t* h = (const int32_t*)buf.data();
    if (h[0] != kEvalMagic) throw bad("not a Prism eval file (bad magic); build it with data/prepare_eval");
    if (h[1] != kEvalVersion)
        throw bad("version " + std::to_string(h[1]) + ", this build reads " + std::to_string(kEvalVersion) + "; rebuild it");
    EvalFile f;
    f.path = path;
    f.task.assign((const char*)(h + 16), strnlen((const char*)(h + 16), 64));
    f.tokenizer.assign((const char*)(h + 32), strnlen((const char*)(h + 32), 64));
    if (h[2] < 0 || h[2] > 2) throw bad("unknown kind " + std::to_string(h[2]));
    f.kind = (EvalKind)h[2], f.has_norm = h[3] != 0, f.V = h[4], f.eot = h[5];
    f.fingerprint = (uint64_t)get64(h, 8);
    if (f.V <= 0 || f.eot < 0 || f.eot >= f.V) throw bad("corrupt header (V or EOT)");
    if (model_V > 0 && f.V != model_V)
        throw bad("tokenised for a vocabulary of " + std::to_string(f.V) + " (tokenizer '" + f.tokenizer +
                  "') but the model has V = " + std::to_string(model_V) + "; rebuild it with the model's tokenizer");
    int64_t n = get64(h, 6), bytes = get64(h, 10);
    if (n < 0 || bytes < 0 || bytes % 4) throw bad("corrupt header (counts)");
    if ((int64_t)buf.size() != 1024 + bytes)
        throw bad(std::string((int64_t)buf.size() < 1024 + bytes ? "truncated: " : "trailing bytes: ") +
                  std::to_string(buf.size()) + " bytes, expected " + std::to_string(1024 + bytes));
    if (checksum64(buf.data() + 1024, (size_t)bytes) != (uint64_t)get64(h, 12)) throw bad("checksum mismatch: the file is corrupt");
    const int32_t* p = (const int32_t*)(buf.data() + 1024);
    const int64_t np = bytes / 4;
    int64_t at = 0;
    f.ex.resize((size_t)n);
    for (int64_t i = 0; i < n; i++) {
        auto rec = [&](const std::string& why) { return bad("example " + std::to_string(i) + ": " + why); };
        if (at + 8 > np) throw rec("truncated record");
        EvalExample& e = f.ex[i];
        int32_t nt = p[at], nr = p[at + 1];
        e.gold = p[at + 2];
        memcpy(&e.words, p + at + 4, 8), memcpy(&e.bytes, p + at + 6, 8);
        at += 8;
        if (nt <= 0 || nr < 0 || at + 5 * (int64_t)nr + nt > np) throw rec("corrupt sizes");
        if (e.gold < -1 || e.gold >= std::max(nr, 1)) throw rec("gold index out of range");
        if ((f.kind == EvalKind::Rolling) != (nr == 0) || (f.kind == EvalKind::Target && nr != 1))
            throw rec("request count does not fit the task kind");
        for (int32_t r = 0; r < nr; r++, at += 5) {
            EvalRequest q{p[at], p[at + 1], p[at + 2], p[at + 3], p[at + 4]};
            if (q.ctx_begin < 0 || q.ctx_begin >= q.ctx_end || q.ctx_end > nt || q.cont_begin < 0 ||
                q.cont_begin >= q.cont_end || q.cont_end > nt || q.norm_len < 0)
                throw rec("request " + std::to_string(r) + " has a bad token range");
            e.req.push_back(q);
        }
        e.tokens.assign(p + at, p + at + nt);
        at += nt;
        for (int32_t t : e.tokens)
            if (t < 0 || t >= f.V) throw rec("token " + std::to_string(t) + " outside [0, V)");
    }
    if (at != np) throw bad("payload has " + std::to_string(np - at) + " words after the last record");
    return f;
}

// ======================================================================================================
// Scoring
// ======================================================================================================

// One row of a batch: input seq[0, n-1), the last n_scored targets of seq[1, n) are scored.
struct EvalRow {
    std::vector<int> seq;
    int n_scored;
    int example;  // index into the file
    int request;  // which request (rolling: which window)
};

// The rows of example e for a model of context T. Choice / target requests: ctx + cont, keeping the last
// T + 1 tokens when longer (then all of the continuation that fits is scored). Rolling: disjoint windows, the
// first fed [EOT] + t[0, T-1) to predict t[0, T), each later one predicting the next (at most) T tokens from
// a full-length input that ends just before its last target.
inline void eval_rows(const EvalFile& f, int e, int T, std::vector<EvalRow>& out) {
    const EvalExample& x = f.ex[e];
    if (f.kind == EvalKind::Rolling) {
        const int N = (int)x.tokens.size();
        std::vector<int> buf(1, f.eot);  // buf[i + 1] = t[i]
        buf.insert(buf.end(), x.tokens.begin(), x.tokens.end());
        int first = std::min(N, T);
        out.push_back({std::vector<int>(buf.begin(), buf.begin() + first + 1), first, e, 0});
        for (int done = first, w = 1; done < N; w++) {
            int n = std::min(N - done, T), end = done + n;  // predicts t[done, end) from t[end - T - 1, end - 1)
            out.push_back({std::vector<int>(buf.begin() + end - T, buf.begin() + end + 1), n, e, w});
            done = end;
        }
        return;
    }
    for (int r = 0; r < (int)x.req.size(); r++) {
        const EvalRequest& q = x.req[r];
        EvalRow row{std::vector<int>(x.tokens.begin() + q.ctx_begin, x.tokens.begin() + q.ctx_end), 0, e, r};
        row.seq.insert(row.seq.end(), x.tokens.begin() + q.cont_begin, x.tokens.begin() + q.cont_end);
        if ((int)row.seq.size() > T + 1) row.seq.erase(row.seq.begin(), row.seq.end() - (T + 1));
        row.n_scored = std::min(q.cont_end - q.cont_begin, (int)row.seq.size() - 1);
        out.push_back(std::move(row));
    }
}

// Additive over examples, so data-parallel ranks sum them (all-reduce of kCount doubles) before eval_finish.
struct EvalSums {
    enum { N, ACC, ACC_NORM, LL, WORDS, BYTES, TOKENS, kCount };
    std::array<double, kCount> v{};  // TOKENS: scored target tokens
    double& operator[](int i) { return v[i]; }
    double operator[](int i) const { return v[i]; }
};

struct EvalResult {
    std::string task;
    EvalKind kind = EvalKind::Choice;
    bool has_norm = false;
    long n = 0;
    double acc = NAN, acc_se = NAN, acc_norm = NAN, acc_norm_se = NAN;  // fractions in [0, 1]
    double ppl = NAN;                  // target: exp(-mean LL per example); rolling: word perplexity
    double byte_ppl = NAN, bits_per_byte = NAN;  // per UTF-8 byte (target: of the targets " word")
    double seconds = 0;
};

// Scores this rank's share (examples i < limit with i % world == rank; limit <= 0: all) with `batch` rows
// per forward. Rows are sorted by length so a batch is padded to its own longest row, not to T. Padded
// positions are fed EOT and carry target -1. Leaves the engine's activations overwritten (call between steps).
inline EvalSums eval_task_sums(Engine& eng, const EvalFile& f, int batch, long limit = 0, int rank = 0, int world = 1) {
    const ModelConfig& cfg = eng.config();
    if (f.V != cfg.V)
        throw EvalError("eval file " + f.path + ": tokenised for V = " + std::to_string(f.V) + " but the model has V = " +
                        std::to_string(cfg.V));
    if (batch < 1) throw EvalError("eval batch must be at least 1 row");
    const long n = limit > 0 ? std::min<long>(limit, (long)f.ex.size()) : (long)f.ex.size();
    std::vector<EvalRow> rows;
    for (long i = rank; i < n; i += world) eval_rows(f, (int)i, cfg.T, rows);
    std::vector<size_t> order(rows.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rows[a].seq.size() > rows[b].seq.size(); });

    std::vector<double> ll(rows.size(), 0.0);
    std::vector<char> greedy(rows.size(), 1);
    std::vector<int> inputs, targets;
    std::vector<float> lp, logits(f.kind == EvalKind::Target ? cfg.V : 0);
    for (size_t b0 = 0; b0 < order.size(); b0 += batch) {
        const int B = (int)std::min<size_t>(batch, order.size() - b0);
        int Tb = 1;
        for (int j = 0; j < B; j++) Tb = std::max(Tb, (int)rows[order[b0 + j]].seq.size() - 1);
        inputs.assign((size_t)B * Tb, f.eot), targets.assign((size_t)B * Tb, -1), lp.assign((size_t)B * Tb, 0.f);
        for (int j = 0; j < B; j++) {
            const EvalRow& r = rows[order[b0 + j]];
            const int len = (int)r.seq.size() - 1;
            std::copy(r.seq.begin(), r.seq.end() - 1, inputs.begin() + (size_t)j * Tb);
            for (int t = len - r.n_scored; t < len; t++) targets[(size_t)j * Tb + t] = r.seq[t + 1];
        }
        eng.forward(inputs.data(), nullptr, B, Tb);
        eng.target_logprobs(targets.data(), lp.data());
        for (int j = 0; j < B; j++) {
            const size_t ri = order[b0 + j];
            double s = 0;
            for (int t = 0; t < Tb; t++) s += lp[(size_t)j * Tb + t];
            ll[ri] = s;
            if (f.kind != EvalKind::Target) continue;
            for (int t = 0; t < Tb && greedy[ri]; t++) {
                int tg = targets[(size_t)j * Tb + t];
                if (tg < 0) continue;
                eng.logits_at(j, t, logits.data());
                greedy[ri] = (int)(std::max_element(logits.begin(), logits.end()) - logits.begin()) == tg;
            }
        }
    }

    EvalSums s;
    for (size_t a = 0; a < rows.size();) {  // rows of one example are adjacent (built in example order)
        size_t b = a;
        while (b < rows.size() && rows[b].example == rows[a].example) b++;
        const EvalExample& x = f.ex[rows[a].example];
        double total = 0;
        for (size_t k = a; k < b; k++) total += ll[k], s[EvalSums::TOKENS] += rows[k].n_scored;
        s[EvalSums::N] += 1, s[EvalSums::WORDS] += (double)x.words, s[EvalSums::BYTES] += (double)x.bytes;
        if (f.kind == EvalKind::Choice) {
            size_t pick = a, pick_norm = a;  // argmax: the first of equal scores, as numpy
            for (size_t k = a; k < b; k++) {
                if (ll[k] > ll[pick]) pick = k;
                if (f.has_norm && ll[k] / x.req[rows[k].request].norm_len > ll[pick_norm] / x.req[rows[pick_norm].request].norm_len)
                    pick_norm = k;
            }
            s[EvalSums::ACC] += rows[pick].request == x.gold;
            s[EvalSums::ACC_NORM] += f.has_norm && rows[pick_norm].request == x.gold;
        } else {
            s[EvalSums::ACC] += f.kind == EvalKind::Target && greedy[a];
            s[EvalSums::LL] += total;
        }
        a = b;
    }
    return s;
}

inline EvalResult eval_finish(const EvalFile& f, const EvalSums& s, double seconds) {
    EvalResult r;
    r.task = f.task, r.kind = f.kind, r.has_norm = f.has_norm, r.n = (long)s[EvalSums::N], r.seconds = seconds;
    const double n = s[EvalSums::N];
    auto se = [&](double p) { return n > 1 ? std::sqrt(p * (1 - p) / (n - 1)) : NAN; };  // sample std (n-1) / sqrt(n), 0/1 items
    if (n <= 0) return r;
    if (f.kind != EvalKind::Rolling) r.acc = s[EvalSums::ACC] / n, r.acc_se = se(r.acc);
    if (f.has_norm) r.acc_norm = s[EvalSums::ACC_NORM] / n, r.acc_norm_se = se(r.acc_norm);
    const double ll = s[EvalSums::LL], bytes = s[EvalSums::BYTES];
    if (f.kind == EvalKind::Target) r.ppl = std::exp(-ll / n);
    if (f.kind == EvalKind::Rolling) r.ppl = std::exp(-ll / s[EvalSums::WORDS]);
    if (f.kind != EvalKind::Choice && bytes > 0) r.byte_ppl = std::exp(-ll / bytes), r.bits_per_byte = -ll / bytes / std::log(2.0);
    return r;
}

// One process, the whole task (or its first `limit` examples).
inline EvalResult run_eval_task(Engine& eng, const EvalFile& f, int batch, long limit = 0) {
    auto t0 = std::chrono::steady_clock::now();
    EvalSums s = eval_task_sums(eng, f, batch, limit);
    return eval_finish(f, s, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

// {"task": ..., "examples": n, "acc": ..., ...}: the metrics the task defines, lm-eval's names, NaN omitted.
inline std::string eval_result_json(const EvalResult& r) {
    std::string s = "{\"task\": " + ev::json_quote(r.task) + ", \"examples\": " + std::to_string(r.n);
    auto add = [&](const char* k, double v) {
        if (!std::isfinite(v)) return;
        char b[64];
        snprintf(b, sizeof b, "%.10g", v);
        s += std::string(", \"") + k + "\": " + b;
    };
    add("acc", r.acc), add("acc_stderr", r.acc_se), add("acc_norm", r.acc_norm), add("acc_norm_stderr", r.acc_norm_se);
    add(r.kind == EvalKind::Rolling ? "word_perplexity" : "perplexity", r.ppl);
    add("byte_perplexity", r.byte_ppl), add("bits_per_byte", r.bits_per_byte), add("seconds", r.seconds);
    return s + "}";
}
