// util/json.h: the project's one JSON reader and writer, a thin layer over nlohmann/json's parser (Debian
// nlohmann-json3-dev). json::parse reads one value strictly per RFC 8259 (a malformed line is an error naming the
// column, never silently misread) into a small DOM; json::field and friends pull typed fields out of an object
// with one-line errors; json::quote writes a string literal and json::number a number (null when it is not finite).
// Used by the eval tasks (one object per JSON Lines record), prepare_shards (the text field of each line), the
// tokenizer (GPT-2's encoder.json), the run record and log, Hugging Face configs and safetensors headers, the eval
// result file and `train_prism --plan --json`.
//
// The DOM is this file's, filled through nlohmann's SAX interface, because the readers need what nlohmann's own
// json type drops: objects keep their members in file order, duplicates too (find: the last wins, as in Python's
// json), and numbers keep their literal text, so that a label written 3 or "3" reads the same way and the run
// record writes back what it read (an integer comes back as its value's digits: -0 reads as 0).
// Text rules nlohmann does not have: a lone UTF-16 surrogate escape (\ud800 without its pair) is grammatical JSON
// but not text, and neither is a byte that is not UTF-8; both become U+FFFD, as Python's decode(errors="replace")
// has it, where nlohmann refuses them. Such a text (rare) is cleaned and parsed a second time, and an error in it
// still names the column of the original. A byte-order mark before the value is refused (nlohmann skips it), and a
// number beyond the double range (1e400) is an error.
//
// Does not: write whole documents (callers print their own objects with json::quote for the strings), or
// stream: a value is parsed whole, nesting bounded at 512 so that the DOM's recursive destructor stays shallow.
#pragma once

#include <algorithm>
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

#include <nlohmann/json.hpp>

#include "util/utf8.h"

namespace json {

// Every JSON problem: "invalid JSON: <what> at column N" for syntax ("at line L, column N" in a text of several
// lines), "missing field \"x\"" and the like for fields. One line; callers put the file (and line) in front.
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

namespace detail {

constexpr int kMaxDepth = 512;

// Builds a Value from nlohmann's SAX events: containers wait on a stack until they close.
struct Builder {
    std::vector<Value> stack;       // open arrays and objects, innermost last
    std::vector<std::string> keys;  // per open object: the key whose value comes next
    Value root;
    bool too_deep = false;
    size_t error_at = 0;  // nlohmann's position: bytes read, the offending one included
    std::string error;

    bool add(Value v) {
        if (stack.empty()) root = std::move(v);
        else if (stack.back().kind == Value::Array) stack.back().arr.push_back(std::move(v));
        else stack.back().obj.emplace_back(std::move(keys.back()), std::move(v));
        return true;
    }
    bool scalar(Value::Kind k, std::string s = {}, bool b = false) {
        Value v;
        v.kind = k, v.str = std::move(s), v.b = b;
        return add(std::move(v));
    }
    bool open(Value::Kind k) {
        if (stack.size() >= (size_t)kMaxDepth) return too_deep = true, false;
        stack.emplace_back().kind = k;
        if (k == Value::Object) keys.emplace_back();
        return true;
    }
    bool close() {
        Value v = std::move(stack.back());
        stack.pop_back();
        if (v.kind == Value::Object) keys.pop_back();
        return add(std::move(v));
    }

    // nlohmann's SAX interface.
    bool null() { return scalar(Value::Null); }
    bool boolean(bool b) { return scalar(Value::Bool, {}, b); }
    bool number_integer(int64_t x) { return scalar(Value::Number, std::to_string(x)); }
    bool number_unsigned(uint64_t x) { return scalar(Value::Number, std::to_string(x)); }
    bool number_float(double, const std::string& literal) { return scalar(Value::Number, literal); }
    bool string(std::string& s) { return scalar(Value::String, std::move(s)); }
    bool binary(std::vector<uint8_t>&) { return false; }  // only CBOR and the like have it
    bool start_object(size_t) { return open(Value::Object); }
    bool key(std::string& k) { return keys.back() = std::move(k), true; }
    bool end_object() { return close(); }
    bool start_array(size_t) { return open(Value::Array); }
    bool end_array() { return close(); }
    bool parse_error(size_t position, const std::string& last_token, const nlohmann::detail::exception& e) {
        // "[json.exception.parse_error.101] parse error at line 1, column 5: syntax error while parsing value -
        // invalid literal; last read: 'tru,'": the reason alone; the token it quotes can be a megabyte of text.
        std::string m = e.what();
        size_t at = m.find("column ");
        at = m.find(": ", at == std::string::npos ? 0 : at);
        m = at == std::string::npos ? m.substr(m.find(']') + 1) : m.substr(at + 2);
        const std::string quoted = "; last read: '" + last_token + "'";
        if ((at = m.find(quoted)) != std::string::npos) m.erase(at, quoted.size());
        if (e.id == 406) m = "number out of the double range";  // quotes the whole literal otherwise
        error_at = position, error = m;
        return false;
    }
};

// Where `s` first opens a container deeper than kMaxDepth (s parsed cleanly up to there, so strings are well
// formed and only their quotes and escapes need following).
inline size_t too_deep_at(std::string_view s) {
    int depth = 0;
    bool in_string = false;
    for (size_t i = 0; i < s.size(); i++) {
        const char c = s[i];
        if (in_string) {
            if (c == '\\') i++;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > kMaxDepth) return i;
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return s.size();
}

// Runs nlohmann's strict parser; false with b.error set on any error.
inline bool run(std::string_view s, Builder& b) {
    if (s.substr(0, 3) == "\xEF\xBB\xBF") {
        b.error = "a byte-order mark before the JSON value", b.error_at = 1;
        return false;
    }
    if (nlohmann::json::sax_parse(s.begin(), s.end(), &b)) return true;
    if (b.too_deep) b.error = "nesting deeper than " + std::to_string(kMaxDepth), b.error_at = too_deep_at(s) + 1;
    return false;
}

// `s` with the text rules at the top applied: each lone surrogate escape rewritten as \ufffd (same length) and
// each byte that is not UTF-8 as U+FFFD's three bytes, at the original offsets in `grown` (to map positions back).
struct Cleaned {
    std::string text;
    std::vector<size_t> grown;
    bool changed = false;
};
inline Cleaned clean(std::string_view s) {
    auto hex4 = [&](size_t i, uint32_t& v) {
        if (i + 4 > s.size()) return false;
        v = 0;
        for (size_t k = i; k < i + 4; k++) {
            const char c = s[k];
            const int d = c >= '0' && c <= '9'   ? c - '0'
                          : c >= 'a' && c <= 'f' ? c - 'a' + 10
                          : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                 : -1;
            if (d < 0) return false;
            v = v << 4 | (uint32_t)d;
        }
        return true;
    };
    Cleaned c;
    c.text.reserve(s.size() + 16);
    const auto* u = (const unsigned char*)s.data();
    for (size_t i = 0; i < s.size();) {
        uint32_t cp, lo;
        if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == 'u' && hex4(i + 2, cp) && cp >= 0xD800 && cp < 0xE000) {
            if (cp < 0xDC00 && i + 7 < s.size() && s[i + 6] == '\\' && s[i + 7] == 'u' && hex4(i + 8, lo) &&
                lo >= 0xDC00 && lo < 0xE000) {
                c.text.append(s.substr(i, 12)), i += 12;  // a pair
            } else {
                c.text += "\\ufffd", i += 6, c.changed = true;
            }
        } else if (s[i] == '\\') {
            c.text.append(s.substr(i, 2)), i += 2;  // any other escape, or a backslash the parser will refuse
        } else if (u[i] < 0x80) {
            c.text += s[i++];
        } else if (const size_t k = utf8_seq_len(u, i, s.size())) {
            c.text.append(s.substr(i, k)), i += k;
        } else {
            c.text += "\xEF\xBF\xBD", c.grown.push_back(i++), c.changed = true;
        }
    }
    return c;
}

// The offset in the original of offset p in c.text.
inline size_t original_offset(const Cleaned& c, size_t p) {
    size_t extra = 0;
    for (size_t o : c.grown) {
        if (p < o + extra) break;
        if (p < o + extra + 3) return o;
        extra += 2;
    }
    return p - extra;
}

// "invalid JSON: <what> at column C" (at line L, column C in a text of several lines); `at` is 0-based.
[[noreturn]] inline void fail(std::string_view s, const std::string& what, size_t at) {
    at = std::min(at, s.size());
    const size_t nl = at ? s.rfind('\n', at - 1) : std::string_view::npos;
    const size_t col = nl == std::string_view::npos ? at + 1 : at - nl;
    std::string where = "column " + std::to_string(col);
    if (nl != std::string_view::npos) {
        size_t line = 1;
        for (size_t i = 0; i < at; i++) line += s[i] == '\n';
        where = "line " + std::to_string(line) + ", " + where;
    }
    throw Error("invalid JSON: " + what + " at " + where);
}

}  // namespace detail

inline Value parse(std::string_view s) {
    detail::Builder b;
    if (detail::run(s, b)) return std::move(b.root);
    const detail::Cleaned c = detail::clean(s);
    if (!c.changed) detail::fail(s, b.error, b.error_at ? b.error_at - 1 : 0);
    detail::Builder again;
    if (detail::run(c.text, again)) return std::move(again.root);
    detail::fail(s, again.error, detail::original_offset(c, again.error_at ? again.error_at - 1 : 0));
}

// s as a JSON string literal, quotes included: '"' and '\' escaped, control characters as \u00XX, UTF-8 as it
// is, and a byte that is not UTF-8 as U+FFFD: JSON is UTF-8 text (RFC 8259), and what parse reads back anyway.
inline std::string quote(std::string_view s) {
    std::string out = "\"";
    const auto* u = (const unsigned char*)s.data();
    for (size_t i = 0; i < s.size(); i++) {
        const unsigned char c = u[i];
        if (c == '"' || c == '\\') {
            out += '\\', out += (char)c;
        } else if (c < 0x20) {
            char b[8];
            snprintf(b, sizeof b, "\\u%04x", c);
            out += b;
        } else if (c < 0x80) {
            out += (char)c;
        } else if (const size_t k = utf8_seq_len(u, i, s.size())) {
            out.append(s.substr(i, k)), i += k - 1;
        } else {
            out += "\xEF\xBF\xBD";
        }
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
