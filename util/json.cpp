// util/json.cpp: json::parse (util/json.h), the one translation unit that compiles nlohmann/json's parser. Each
// build links it in: build/json.o (the products and the tests), build/asan/json.o (the fuzz loop's address build),
// the GPU bundle's own (its host flags). What the parser accepts and refuses, and why through SAX: util/json.h.
#include "util/json.h"

#include <nlohmann/json.hpp>

namespace json {

namespace detail {
namespace {

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
size_t too_deep_at(std::string_view s) {
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
bool run(std::string_view s, Builder& b) {
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
Cleaned clean(std::string_view s) {
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
size_t original_offset(const Cleaned& c, size_t p) {
    size_t extra = 0;
    for (size_t o : c.grown) {
        if (p < o + extra) break;
        if (p < o + extra + 3) return o;
        extra += 2;
    }
    return p - extra;
}

// "invalid JSON: <what> at column C" (at line L, column C in a text of several lines); `at` is 0-based.
[[noreturn]] void fail(std::string_view s, const std::string& what, size_t at) {
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

}  // namespace
}  // namespace detail

Value parse(std::string_view s) {
    detail::Builder b;
    if (detail::run(s, b)) return std::move(b.root);
    const detail::Cleaned c = detail::clean(s);
    if (!c.changed) detail::fail(s, b.error, b.error_at ? b.error_at - 1 : 0);
    detail::Builder again;
    if (detail::run(c.text, again)) return std::move(again.root);
    detail::fail(s, again.error, detail::original_offset(c, again.error_at ? again.error_at - 1 : 0));
}

}  // namespace json
