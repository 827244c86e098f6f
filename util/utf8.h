// util/utf8.h: the UTF-8 byte rules every text tool here shares: how long the well-formed sequence at a byte is
// (strict, as Python's decoder and PCRE2's UTF check: no overlongs, no surrogates, nothing above U+10FFFF),
// where a text stops being valid, the code point of a well-formed sequence, and writing one code point.
//
// Does not: decide what to do with invalid bytes (the tokenizer cuts them as symbols, text/pytext.h keeps them as
// Python's surrogateescape code points), or know anything about Unicode classes (text/pretokenize.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

// Length of the well-formed UTF-8 sequence starting at s[i], or 0 if s[i] does not start one (Unicode's
// Table 3-7, which is also what Python's strict decoder and PCRE2's UTF check accept).
inline size_t utf8_seq_len(const unsigned char* s, size_t i, size_t n) {
    unsigned c = s[i];
    if (c < 0x80) return 1;
    auto cont = [&](size_t k, unsigned lo, unsigned hi) { return i + k < n && s[i + k] >= lo && s[i + k] <= hi; };
    if (c >= 0xC2 && c <= 0xDF) return cont(1, 0x80, 0xBF) ? 2 : 0;
    if (c == 0xE0) return cont(1, 0xA0, 0xBF) && cont(2, 0x80, 0xBF) ? 3 : 0;
    if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) return cont(1, 0x80, 0xBF) && cont(2, 0x80, 0xBF) ? 3 : 0;
    if (c == 0xED) return cont(1, 0x80, 0x9F) && cont(2, 0x80, 0xBF) ? 3 : 0;  // no UTF-16 surrogates
    if (c == 0xF0) return cont(1, 0x90, 0xBF) && cont(2, 0x80, 0xBF) && cont(3, 0x80, 0xBF) ? 4 : 0;
    if (c >= 0xF1 && c <= 0xF3) return cont(1, 0x80, 0xBF) && cont(2, 0x80, 0xBF) && cont(3, 0x80, 0xBF) ? 4 : 0;
    if (c == 0xF4) return cont(1, 0x80, 0x8F) && cont(2, 0x80, 0xBF) && cont(3, 0x80, 0xBF) ? 4 : 0;
    return 0;
}

// Offset of the first byte that is not part of well-formed UTF-8, or n if the text is valid.
inline size_t first_invalid_utf8(const unsigned char* s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (i + 8 <= n) {  // ASCII fast path: 8 bytes with no high bit
            uint64_t w;
            memcpy(&w, s + i, 8);
            if ((w & 0x8080808080808080ull) == 0) {
                i += 8;
                continue;
            }
        }
        size_t k = utf8_seq_len(s, i, n);
        if (k == 0) return i;
        i += k;
    }
    return n;
}

// The code point of the k-byte sequence at s[i]; k = utf8_seq_len(s, i, n) > 0 (not checked again here).
inline uint32_t utf8_code_point(const unsigned char* s, size_t i, size_t k) {
    uint32_t cp = k == 1 ? s[i] : k == 2 ? s[i] & 0x1F : k == 3 ? s[i] & 0x0F : s[i] & 0x07;
    for (size_t j = 1; j < k; j++) cp = (cp << 6) | (s[i + j] & 0x3F);
    return cp;
}

// Appends code point cp (below 0x110000) as UTF-8. Surrogates are written as their 3-byte form: callers that
// must not produce them (the JSON parser) replace them first.
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
