// util/json.h: the project's one JSON reader and writer. json::parse reads one value strictly per RFC 8259 (a
// malformed line is an error naming the column, never silently misread) into a small DOM; json::field and
// friends pull typed fields out of an object with one-line errors; json::quote writes a string literal and
// json::number a number (null when it is not finite).
// Used by the eval tasks (one object per JSON Lines record), prepare_shards (the text field of each line),
// the tokenizer (GPT-2's encoder.json), the eval result file and `train_prism --plan --json`.
//
// Strings decode to UTF-8. Raw bytes >= 0x80 pass through as they are (not validated: the tokenizer and the
// text rules have their own policy for invalid UTF-8). A lone UTF-16 surrogate escape (\ud800 without its
// pair) is grammatical JSON but not text: it becomes U+FFFD, as Python's encode(errors="replace") writes it.
// Numbers are kept as the literal text, so that a label written 3 or "3" reads the same way.
//
// Does not: write whole documents (callers print their own objects with json::quote for the strings), or
// stream: a value is parsed whole, nesting bounded at 512 so a hostile line cannot overflow the stack.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/utf8.h"

namespace json {

// Every JSON problem: "invalid JSON: <what> at column N" for syntax, "missing field \"x\"" and the like for
// fields. One line; callers put the file and line in front.
struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct Value {
    enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
    bool b = false;
    std::string str;  // String: decoded UTF-8; Number: the literal as written
    std::vector<Value> arr;
    std::vector<std::pair<std::string, Value>> obj;  // in file order, duplicates kept

    // The member `key`, or null. Duplicate keys: the last one wins, as in Python's json.
    const Value* find(std::string_view key) const {
        for (size_t i = obj.size(); i-- > 0;)
            if (obj[i].first == key) return &obj[i].second;
        return nullptr;
    }
};

class Parser {
  public:
    explicit Parser(std::string_view s) : s_(s) {}
    Value parse() {
        Value v = value();
        ws();
        if (i_ != s_.size()) fail("trailing characters after the JSON value");
        return v;
    }

  private:
    std::string_view s_;
    size_t i_ = 0;
    int depth_ = 0;

    [[noreturn]] void fail(const std::string& what) {
        throw Error("invalid JSON: " + what + " at column " + std::to_string(i_ + 1));
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
        if (s_.substr(i_, n) != word) fail("invalid value");
        i_ += n;
    }
    Value value() {
        ws();
        if (i_ >= s_.size()) fail("unexpected end of input");
        if (++depth_ > 512) fail("nesting deeper than 512");
        Value v;
        char c = s_[i_];
        if (c == '{') {
            v.kind = Value::Object, i_++;
            if (!eat('}')) {
                do {
                    ws();
                    if (i_ >= s_.size() || s_[i_] != '"') fail("expected a string key");
                    std::string k = string();
                    if (!eat(':')) fail("expected ':' after key");
                    v.obj.emplace_back(std::move(k), value());
                } while (eat(','));
                if (!eat('}')) fail("expected ',' or '}' in object");
            }
        } else if (c == '[') {
            v.kind = Value::Array, i_++;
            if (!eat(']')) {
                do v.arr.push_back(value());
                while (eat(','));
                if (!eat(']')) fail("expected ',' or ']' in array");
            }
        } else if (c == '"') {
            v.kind = Value::String, v.str = string();
        } else if (c == 't') {
            literal("true"), v.kind = Value::Bool, v.b = true;
        } else if (c == 'f') {
            literal("false"), v.kind = Value::Bool;
        } else if (c == 'n') {
            literal("null");
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            v.kind = Value::Number, v.str = number();
        } else {
            fail("invalid value");
        }
        depth_--;
        return v;
    }
    // -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
    std::string number() {
        size_t a = i_;
        auto digits = [&] {
            size_t b = i_;
            while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') i_++;
            return i_ > b;
        };
        if (s_[i_] == '-') i_++;
        if (i_ < s_.size() && s_[i_] == '0') i_++;
        else if (!digits()) fail("invalid number");
        if (i_ < s_.size() && s_[i_] == '.' && (i_++, !digits())) fail("invalid number");
        if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
            i_++;
            if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) i_++;
            if (!digits()) fail("invalid number");
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
    // The string at s_[i_] == '"'. Runs without escapes are copied whole: a FineWeb line is mostly one long
    // text field, and this loop is what prepare_shards spends its JSON time in.
    std::string string() {
        i_++;  // the opening quote
        std::string out;
        while (true) {
            size_t start = i_;
            while (i_ < s_.size() && s_[i_] != '"' && s_[i_] != '\\' && (unsigned char)s_[i_] >= 0x20) i_++;
            out.append(s_.data() + start, i_ - start);
            if (i_ >= s_.size()) fail("unterminated string");
            char c = s_[i_++];
            if (c == '"') return out;
            if (c != '\\') i_--, fail("raw control character in a string (must be escaped)");
            if (i_ >= s_.size()) fail("unterminated string");
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
                default: i_--, fail(std::string("invalid escape \\") + e);
            }
        }
    }
};

inline Value parse(std::string_view s) { return Parser(s).parse(); }

// s as a JSON string literal, quotes included: '"' and '\' escaped, control characters as \u00XX, every
// other byte as it is (UTF-8 stays UTF-8).
inline std::string quote(std::string_view s) {
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

// x as a JSON number printed with the printf format `fmt` ("%.6f"), or null when x is NaN or infinite: JSON has
// no literal for them, and printf's "nan" / "-nan" would make the line unreadable to every JSON parser.
inline std::string number(double x, const char* fmt) {
    if (!std::isfinite(x)) return "null";
    char b[64];
    snprintf(b, sizeof b, fmt, x);
    return b;
}

// Field access with one-line errors ("missing field \"ctx_b\"").
inline const Value& field(const Value& o, std::string_view key) {
    if (o.kind != Value::Object) throw Error("expected a JSON object");
    const Value* v = o.find(key);
    if (!v) throw Error("missing field \"" + std::string(key) + "\"");
    return *v;
}
inline const std::string& str_field(const Value& o, std::string_view key) {
    const Value& v = field(o, key);
    if (v.kind != Value::String) throw Error("field \"" + std::string(key) + "\" is not a string");
    return v.str;
}
// An integer written as a number (3) or a string ("3"), as labels are in the official eval files.
inline long int_field(const Value& o, std::string_view key) {
    const Value& v = field(o, key);
    if (v.kind == Value::Number || v.kind == Value::String) {
        char* end = nullptr;
        long x = strtol(v.str.c_str(), &end, 10);
        if (!v.str.empty() && *end == 0) return x;
    }
    throw Error("field \"" + std::string(key) + "\" is not an integer");
}

}  // namespace json
