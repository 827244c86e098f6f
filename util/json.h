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

// The value `s` holds, read strictly (RFC 8259 and the text rules above); json::Error on anything else. Defined in
// util/json.cpp with nlohmann's parser, compiled once per build and linked into every binary, so that the forty
// translation units that read or write JSON do not each compile nlohmann's headers (the costliest of the tree).
Value parse(std::string_view s);

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
