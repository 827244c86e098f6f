// text/pytext.h: the few Python str methods the lm-evaluation-harness prompt rules call, with Python's exact
// semantics, on UTF-8 std::strings: decoding to code points (len() counts them), str.isspace / strip / rstrip,
// str.replace, str.capitalize. The eval tasks (eval/tasks.h) build every prompt from these so that our
// strings are byte-for-byte the harness's.
//
// Invalid UTF-8 survives a round trip: a byte that is not well-formed UTF-8 is one code point U+DC80 + byte
// (Python's surrogateescape), so py::encode(py::decode(s)) == s for every byte string.
//
// Does not: know about tasks or tokens; case-map every script (see lower_cp: the covered ranges are listed).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "util/utf8.h"

namespace py {

// Code points of s (surrogateescape for invalid bytes, see the top of the file).
inline std::vector<uint32_t> decode(std::string_view s) {
    std::vector<uint32_t> cps;
    const unsigned char* p = (const unsigned char*)s.data();
    for (size_t i = 0; i < s.size();) {
        size_t k = utf8_seq_len(p, i, s.size());
        if (k == 0) {
            cps.push_back(0xDC00 + p[i]), i++;
            continue;
        }
        cps.push_back(utf8_code_point(p, i, k)), i += k;
    }
    return cps;
}
// Code points [a, b) back to bytes; the surrogateescape ones become their original byte again.
inline std::string encode(const std::vector<uint32_t>& cps, size_t a = 0, size_t b = SIZE_MAX) {
    std::string out;
    for (size_t i = a; i < std::min(b, cps.size()); i++) {
        if (cps[i] >= 0xDC80 && cps[i] <= 0xDCFF) out += (char)(cps[i] - 0xDC00);
        else put_utf8(cps[i], out);
    }
    return out;
}
// len() of the Python str: acc_norm's length unit.
inline int len(std::string_view s) { return (int)decode(s).size(); }

// str.isspace(), which is also what `\s` matches in a Python str pattern.
inline bool isspace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}
inline std::string strip(std::string_view s, bool left = true, bool right = true) {
    std::vector<uint32_t> c = decode(s);
    size_t a = 0, b = c.size();
    while (left && a < b && isspace(c[a])) a++;
    while (right && b > a && isspace(c[b - 1])) b--;
    return encode(c, a, b);
}
inline std::string rstrip(std::string_view s) { return strip(s, false, true); }

// str.replace(from, to): every non-overlapping occurrence, left to right, in one pass.
inline std::string replace(std::string_view s, std::string_view from, std::string_view to) {
    std::string out;
    size_t i = 0;
    for (size_t j; (j = s.find(from, i)) != std::string_view::npos; i = j + from.size())
        out.append(s, i, j - i), out += to;
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
inline std::string capitalize(std::string_view s) {
    std::vector<uint32_t> c = decode(s), out;
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
    return encode(out);
}

}  // namespace py
