// text/pretokenize.h: where GPT-2's pre-tokeniser cuts text into pieces (text/tokenizer.h then BPE-encodes each piece):
// the pattern, exactly tiktoken's `gpt2` one,
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (case-sensitive contractions, Unicode letter / number classes, white-space runs that leave their last space
// to the next word); its three character classes as PCRE2 class items, brought up to tiktoken's Unicode
// version; and ascii_piece_end, which cuts most English pieces from ASCII bytes alone, without PCRE2.
// tiktoken spells the pattern differently for speed ('(?:[sdmt]|ll|ve|re)| ... |\s++$|\s+(?!\S)|\s), with
// the same matches; a test checks ascii_piece_end against PCRE2 on every string of up to 5 characters drawn
// from all classes.
//
// Unicode version: PCRE2 10.42 knows Unicode 14, tiktoken's Rust regex Unicode 16. The letters and numbers
// assigned in between (kLettersSince14, read out of tiktoken's engine) are added to the classes, so the
// classes agree on every code point; dev/tokenizer_crosscheck checks all 1.1M of them.
//
// Does not: run PCRE2 (text/tokenizer.h compiles the pattern and matches), or know about invalid UTF-8 (text/tokenizer.h
// hands PCRE2 a cleaned copy).
#pragma once

#include <cstddef>
#include <string>

namespace tokenizer_detail {

// Letters and numbers (general categories L*, N*) of Unicode 16, the version of tiktoken's Rust regex
// (regex-syntax 0.8.11), that PCRE2 10.42's Unicode 14 tables do not know (nothing went the other way, and the
// White_Space set is the same). Not a hand-made table: dev/tiktoken_crosscheck.py reads each class out of
// tiktoken's own regex engine for every code point and dev/tokenizer_crosscheck compares it with PCRE2's and
// prints these ranges when they differ. They matter: U+A7DA then a CJK ideograph tokenises differently when
// the letter is not a letter. With a newer PCRE2 they are redundant, never wrong.
constexpr const char* kLettersSince14 =
    "\\x{1C89}-\\x{1C8A}\\x{A7CB}-\\x{A7CD}\\x{A7DA}-\\x{A7DC}\\x{105C0}-\\x{105F3}"
    "\\x{10D4A}-\\x{10D65}\\x{10D6F}-\\x{10D85}\\x{10EC2}-\\x{10EC4}\\x{1123F}-\\x{11240}"
    "\\x{11380}-\\x{11389}\\x{1138B}\\x{1138E}\\x{11390}-\\x{113B5}\\x{113B7}\\x{113D1}\\x{113D3}"
    "\\x{11BC0}-\\x{11BE0}\\x{11F02}\\x{11F04}-\\x{11F10}\\x{11F12}-\\x{11F33}\\x{1342F}"
    "\\x{13441}-\\x{13446}\\x{13460}-\\x{143FA}\\x{16100}-\\x{1611D}\\x{16D40}-\\x{16D6C}\\x{18CFF}"
    "\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}\\x{1E030}-\\x{1E06D}\\x{1E4D0}-\\x{1E4EB}"
    "\\x{1E5D0}-\\x{1E5ED}\\x{1E5F0}\\x{2B739}\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{323AF}";
constexpr const char* kNumbersSince14 =
    "\\x{10D40}-\\x{10D49}\\x{116D0}-\\x{116E3}\\x{11BF0}-\\x{11BF9}\\x{11F50}-\\x{11F59}"
    "\\x{16130}-\\x{16139}\\x{16D70}-\\x{16D79}\\x{1CCF0}-\\x{1CCF9}\\x{1D2C0}-\\x{1D2D3}"
    "\\x{1E4F0}-\\x{1E4F9}\\x{1E5F1}-\\x{1E5FA}";

// The three character classes of the pattern as PCRE2 class items (dev/tokenizer_crosscheck checks each one
// against tiktoken's on every code point). \s is spelled White_Space because that is what Rust's regex means
// by \s; PCRE2's own UCP \s also matches U+180E, which is not white space since Unicode 6.3.
inline std::string letter_items() { return std::string("\\p{L}") + kLettersSince14; }
inline std::string number_items() { return std::string("\\p{N}") + kNumbersSince14; }
inline std::string space_items() { return "\\p{White_Space}"; }

// The pre-tokenisation pattern; see the top of the file. Possessive runs (++) only skip useless backtracking.
// Compiled ANCHORED: every code point is in one of the classes, so a match always starts where the previous
// one ended.
inline std::string gpt2_pattern() {
    std::string L = "[" + letter_items() + "]", N = "[" + number_items() + "]", S = "[" + space_items() + "]";
    std::string other = "[^" + space_items() + letter_items() + number_items() + "]";
    return "'(?:s|t|re|ve|m|ll|d)| ?" + L + "++| ?" + N + "++| ?" + other + "++|" + S + "+(?![^" + space_items() +
           "])|" + S + "+";
}

// The pattern's classes on ASCII, where they are plain ranges: letters A-Z a-z, numbers 0-9, white space
// \t \n \v \f \r and space (not 0x1C-0x1F: Rust's \s is White_Space), everything else "other".
enum AsciiClass : unsigned char { kSpace, kLetter, kNumber, kOther };
inline AsciiClass ascii_class(unsigned char c) {
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return kLetter;
    if (c >= '0' && c <= '9') return kNumber;
    if (c == ' ' || (c >= '\t' && c <= '\r')) return kSpace;
    return kOther;
}

// End of the piece that the pattern matches at s[pos], decided from ASCII bytes alone, or 0 when any byte the
// decision depends on is not ASCII (then PCRE2 matches the piece). English is nearly all ASCII, and this
// skips PCRE2's per-call cost, which was a third of the encode time. It walks the alternatives in order:
// contraction, optional space + a run of one class, white space (all but the last before a non-space).
inline size_t ascii_piece_end(const unsigned char* s, size_t n, size_t pos) {
    auto ascii = [&](size_t i) { return s[i] < 0x80; };
    unsigned char c = s[pos];
    if (!ascii(pos)) return 0;
    if (c == '\'' && pos + 1 < n) {
        unsigned char d = s[pos + 1];
        if (d == 's' || d == 't' || d == 'm' || d == 'd') return pos + 2;
        if (pos + 2 < n &&
            ((d == 'r' && s[pos + 2] == 'e') || (d == 'v' && s[pos + 2] == 'e') || (d == 'l' && s[pos + 2] == 'l')))
            return pos + 3;
    }
    size_t i = pos;
    if (c == ' ' && pos + 1 < n) {
        if (!ascii(pos + 1)) return 0;  // a space before a non-ASCII character: its class decides
        if (ascii_class(s[pos + 1]) != kSpace) i = pos + 1;
    }
    AsciiClass k = ascii_class(s[i]);
    if (k != kSpace) {  // ' ?' then a possessive run of class k
        for (i++; i < n; i++) {
            if (!ascii(i)) return 0;
            if (ascii_class(s[i]) != k) break;
        }
        return i;
    }
    // White space: the run to the end of text, else all of it but its last character (left to the word
    // after it), else that single character.
    size_t j = pos;
    while (j < n && ascii(j) && ascii_class(s[j]) == kSpace) j++;
    if (j == n) return n;
    if (!ascii(j)) return 0;
    return j - pos >= 2 ? j - 1 : pos + 1;
}

}  // namespace tokenizer_detail
