// text/tokenizer.h: the GPT-2 byte-level BPE tokenizer (V = 50257: 50256 BPE tokens + <|endoftext|> = 50256),
// encode and decode, token-for-token identical to tiktoken's `gpt2` encoding (encode_ordinary).
//
// Encoding is two steps, exactly as in tiktoken:
//   1. Pre-tokenise the text into pieces with the GPT-2 pattern (text/pretokenize.h: the pattern, its Unicode 16
//      classes, and the ASCII scanner that cuts most pieces before PCRE2 is asked), matched by PCRE2 with JIT.
//   2. Each piece's bytes are looked up whole (tiktoken's shortcut, kept for identical output), else merged by
//      BPE: repeatedly merge the adjacent pair whose concatenation has the lowest rank, the leftmost on ties.
//
// Invalid UTF-8 (our tools read raw bytes; tiktoken takes a Python str): every byte outside a well-formed
// sequence (strict, as Python's decoder) is pre-tokenised as one symbol character, the class of the U+FFFD it
// becomes in Python, then BPE-encoded from its own bytes: piece boundaries equal tiktoken's, decode(encode(x))
// == x for every byte string, and only there do the ids differ from tiktoken's (which encodes U+FFFD), by design.
//
// Loads a tiktoken ranks file (`gpt2.tiktoken`: base64 bytes and rank per line) or a directory holding the
// original GPT-2 release's encoder.json + vocab.bpe (util/json.h). encode() is const and thread-safe (the pattern
// shared read-only, match data thread_local). Does not recognise special tokens in text (UTF-8 rules: util/utf8.h).
#pragma once

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <queue>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "util/json.h"
#include "text/pretokenize.h"
#include "util/utf8.h"
#include "util/io.h"
#include "util/fs.h"
#include "text/tokenizer_path.h"

namespace tokenizer_detail {

// ---- byte-string hashing ----------------------------------------------------------------------------------

inline uint64_t mix64(uint64_t x) {
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ull;
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ull;
    return x ^ (x >> 32);
}

inline uint64_t hash_bytes(const char* p, size_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (n * 0x100000001b3ull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = mix64(h ^ w);
        p += 8;
        n -= 8;
    }
    if (n) {
        uint64_t w = 0;
        memcpy(&w, p, n);
        h = mix64(h ^ w ^ 0xff00000000000000ull);
    }
    return h;
}

// Token ranks fit in 16 bits (GPT-2 has 50256), which lets both maps below pack a slot into 16 or 8 bytes:
// the lookups are the encoder's hot loop and their tables (2 MB each) should stay in cache.

// The first 12 bytes of a byte string, zero-padded: with the length, the whole key of 99% of GPT-2's tokens.
struct Prefix12 {
    uint64_t a = 0;
    uint32_t b = 0;
};
inline Prefix12 prefix12(const char* p, size_t n) {
    Prefix12 k;
    if (n >= 12) {
        memcpy(&k.a, p, 8);
        memcpy(&k.b, p + 8, 4);
    } else if (n > 8) {
        memcpy(&k.a, p, 8);
        memcpy(&k.b, p + 8, n - 8);
    } else memcpy(&k.a, p, n);
    return k;
}

// Open-addressing map from a token's bytes to its rank (linear probing, load factor <= 1/2).
struct BytesToRank {
    struct Slot {
        uint64_t a;
        uint32_t b;
        uint16_t len;
        uint16_t rank;
    };  // len 0: empty
    std::vector<Slot> slots;
    size_t mask = 0;

    static uint64_t hash(const Prefix12& k, const char* p, size_t n) {
        uint64_t h = mix64(k.a ^ ((uint64_t(k.b) << 16 | n) * 0x9e3779b97f4a7c15ull));
        return n > 12 ? h ^ hash_bytes(p + 12, n - 12) : h;
    }
    void build(const std::string& arena, const std::vector<uint32_t>& off, const std::vector<uint32_t>& len) {
        size_t cap = 16;
        while (cap < off.size() * 2) cap *= 2;
        slots.assign(cap, Slot{0, 0, 0, 0});
        mask = cap - 1;
        for (size_t r = 0; r < off.size(); r++) {
            const char* p = arena.data() + off[r];
            Prefix12 k = prefix12(p, len[r]);
            size_t i = hash(k, p, len[r]) & mask;
            while (slots[i].len) i = (i + 1) & mask;
            slots[i] = Slot{k.a, k.b, uint16_t(len[r]), uint16_t(r)};
        }
    }
    uint64_t hash_of(const char* p, size_t n) const { return hash(prefix12(p, n), p, n); }
    void prefetch(uint64_t h) const { __builtin_prefetch(&slots[h & mask]); }
    // Rank of the n bytes at p, or -1; h = hash_of(p, n). `arena`, `off`: the token bytes given to build
    // (passed, not stored, so that the owner can be copied and moved); only read for tokens over 12 bytes.
    int find(const char* arena, const uint32_t* off, const char* p, size_t n, uint64_t h) const {
        Prefix12 k = prefix12(p, n);
        for (size_t i = h & mask;; i = (i + 1) & mask) {
            const Slot& s = slots[i];
            if (s.len == 0) return -1;
            if (s.a == k.a && s.b == k.b && s.len == n &&
                (n <= 12 || memcmp(arena + off[s.rank] + 12, p + 12, n - 12) == 0))
                return s.rank;
        }
    }
    int find(const char* arena, const uint32_t* off, const char* p, size_t n) const {
        return find(arena, off, p, n, hash_of(p, n));
    }
};

// Open-addressing map (rank a, rank b) -> rank of the token whose bytes are bytes(a) + bytes(b). Filled with
// EVERY split of every token into two tokens, not only the merge that created it, so a lookup answers exactly
// "is bytes(a)+bytes(b) a token" as tiktoken's byte-string lookup does, without hashing bytes. A slot is
// (a << 16 | b) << 32 | rank; load factor <= 1/2.
struct PairToRank {
    static constexpr uint32_t kEmpty = ~0u;  // (0xFFFF, 0xFFFF) is no pair of ranks < 50256
    std::vector<uint64_t> slots;
    size_t mask = 0;

    static size_t hash(uint32_t k) { return size_t(mix64(k)); }
    void reserve(size_t n) {
        size_t cap = 16;
        while (cap < n * 2) cap *= 2;
        slots.assign(cap, uint64_t(kEmpty) << 32);
        mask = cap - 1;
    }
    void insert(int a, int b, int r) {
        uint32_t k = uint32_t(a) << 16 | uint32_t(b);
        size_t i = hash(k) & mask;
        while (uint32_t(slots[i] >> 32) != kEmpty && uint32_t(slots[i] >> 32) != k) i = (i + 1) & mask;
        slots[i] = uint64_t(k) << 32 | uint32_t(r);
    }
    void prefetch(int a, int b) const { __builtin_prefetch(&slots[hash(uint32_t(a) << 16 | uint32_t(b)) & mask]); }
    int find(int a, int b) const {
        uint32_t k = uint32_t(a) << 16 | uint32_t(b);
        for (size_t i = hash(k) & mask;; i = (i + 1) & mask) {
            uint32_t key = uint32_t(slots[i] >> 32);
            if (key == k) return int(uint32_t(slots[i]));
            if (key == kEmpty) return -1;
        }
    }
};

}  // namespace tokenizer_detail

class Tokenizer {
  public:
    // A .tiktoken ranks file, or a directory holding encoder.json + vocab.bpe. Throws std::runtime_error with a
    // one-line message naming the file and what to do.
    static Tokenizer load(const std::string& path);

    // Appends the tokens of `text` (raw bytes; invalid UTF-8 allowed, see the top of the file). Ordinary text
    // only: "<|endoftext|>" inside text is encoded as the characters it is made of.
    void encode(std::string_view text, std::vector<int>& out) const;
    std::vector<int> encode(std::string_view text) const {
        std::vector<int> v;
        encode(text, v);
        return v;
    }

    // The bytes of the tokens, concatenated (may be invalid UTF-8 when a multi-byte character is split across
    // a window boundary). Throws std::out_of_range on an id outside [0, V).
    std::string decode(const int* tokens, size_t n) const;
    std::string decode(const std::vector<int>& t) const { return decode(t.data(), t.size()); }

    // For tests: match with PCRE2's interpreter instead of its JIT (same matches, slower), the path taken on
    // CPUs that PCRE2 cannot JIT for.
    void disable_jit() { jit_ = false; }
    // For tests: every piece from PCRE2, without the ASCII shortcut (text/pretokenize.h's ascii_piece_end).
    void disable_ascii_shortcut() { ascii_ = false; }

    int eot() const { return n_ranks_; }             // 50256: the id after the last BPE rank
    int vocab_size() const { return n_ranks_ + 1; }  // 50257

  private:
    static constexpr int kGpt2Ranks = 50256;
    static constexpr const char* kEotText = "<|endoftext|>";

    int n_ranks_ = 0;
    std::string bytes_;                    // every token's bytes, concatenated; eot's text at the end
    std::vector<uint32_t> off_, len_;      // (V,) where token r's bytes are in bytes_
    int byte_rank_[256];                   // rank of each single byte
    tokenizer_detail::BytesToRank whole_;  // bytes -> rank, for the whole-piece shortcut
    tokenizer_detail::PairToRank pair_;    // (rank, rank) -> rank of the concatenation
    std::shared_ptr<pcre2_code> re_;       // the pre-tokenisation pattern (shared by copies, read-only)
    bool jit_ = false;
    bool ascii_ = true;  // try ascii_piece_end before PCRE2

    // Built from ranks[r] = bytes of token r, r in [0, 50256). `what` names the source for error messages.
    void build(std::vector<std::string> ranks, const std::string& what);
    void encode_piece(const char* p, size_t n, uint64_t hash, std::vector<int>& out) const;
    void bpe_small(const char* p, size_t n, std::vector<int>& out) const;
    void bpe_large(const char* p, size_t n, std::vector<int>& out) const;
};

// =============================================================================================================
// loading
// =============================================================================================================

namespace tokenizer_detail {

[[noreturn]] inline void fail(const std::string& msg) { throw std::runtime_error(msg); }

// A regular file only (a FIFO or a device is refused, never waited on), at most 1 GiB (GPT-2's files are a few MB).
inline std::string read_file(const std::string& path, const char* hint) {
    if (access(path.c_str(), F_OK) != 0) fail("tokenizer: cannot open " + path + " (" + strerror(errno) + "); " + hint);
    try {
        return read_file_text(path, "tokenizer file", (size_t)1 << 30);
    } catch (const IoError& e) {
        fail(std::string("tokenizer: ") + e.what());
    }
}

// Calls fn(line_number, line) for each non-empty line of text (1-based numbers; a trailing \r dropped).
template <class Fn> void for_each_line(const std::string& text, Fn fn) {
    size_t pos = 0, line = 0;
    while (pos < text.size()) {
        size_t eol = std::min(text.find('\n', pos), text.size());
        std::string_view ln(text.data() + pos, eol - pos);
        pos = eol + 1;
        line++;
        if (!ln.empty() && ln.back() == '\r') ln.remove_suffix(1);
        if (!ln.empty()) fn(line, ln);
    }
}

inline bool decode_base64(std::string_view s, std::string& out) {
    auto val = [](char c) -> int {
        if (c >= 'A' && c <= 'Z') return c - 'A';
        if (c >= 'a' && c <= 'z') return c - 'a' + 26;
        if (c >= '0' && c <= '9') return c - '0' + 52;
        if (c == '+') return 62;
        if (c == '/') return 63;
        return -1;
    };
    out.clear();
    if (s.empty() || s.size() % 4 != 0) return false;
    for (size_t i = 0; i < s.size(); i += 4) {
        int v[4];
        for (int k = 0; k < 4; k++) {
            v[k] = (s[i + k] == '=' && i + 4 == s.size() && k >= 2) ? 0 : val(s[i + k]);
            if (v[k] < 0) return false;
        }
        if (s[i + 2] == '=' && s[i + 3] != '=') return false;  // "x=y": padding inside the quad
        uint32_t w = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
        out.push_back(char(w >> 16));
        if (s[i + 2] != '=') out.push_back(char(w >> 8));
        if (s[i + 3] != '=') out.push_back(char(w));
    }
    return true;
}

// GPT-2's encoder.json / vocab.bpe spell each byte as one printable code point: bytes that are printable
// Latin-1 other than space stand for themselves, the other 68 (controls, space, DEL, NBSP, soft hyphen) are
// renumbered 256, 257, ... in byte order. Returns code point -> byte (-1 if the code point is not used).
inline std::vector<int> gpt2_codepoint_to_byte() {
    std::vector<int> cp2b(256 + 68, -1);
    int next = 256;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        cp2b[printable ? b : next++] = b;
    }
    return cp2b;
}

// Decodes one token spelled in the GPT-2 alphabet (UTF-8 text of the code points above) back to its bytes.
inline bool gpt2_alphabet_to_bytes(std::string_view s, const std::vector<int>& cp2b, std::string& out) {
    out.clear();
    const unsigned char* u = (const unsigned char*)s.data();
    for (size_t i = 0; i < s.size();) {
        size_t k = utf8_seq_len(u, i, s.size());
        if (k == 0 || k > 2) return false;  // every code point of the alphabet is below U+0800
        uint32_t cp = utf8_code_point(u, i, k);
        if (cp >= cp2b.size() || cp2b[cp] < 0) return false;
        out.push_back(char(cp2b[cp]));
        i += k;
    }
    return true;
}

// The flat JSON object of encoder.json, {"token": id, ...}, in file order (a token listed twice stays twice,
// for build's duplicate check to name).
inline void parse_encoder_json(const std::string& text, const std::string& path,
                               std::vector<std::pair<std::string, long>>& out) {
    auto bad = [&](const std::string& what) {
        fail("tokenizer: " + path + " is not a valid encoder.json (" + what +
             "); re-download the GPT-2 encoder.json or use data/get_tokenizer.sh for gpt2.tiktoken");
    };
    json::Value o;
    try {
        o = json::parse(text);
    } catch (const json::Error& e) {
        bad(e.what());
    }
    if (o.kind != json::Value::Object) bad("expected an object");
    for (auto& [key, id] : o.obj) {
        const std::string& v = id.str;
        if (id.kind != json::Value::Number || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos)
            bad("the id of a token is not a non-negative integer");
        out.emplace_back(std::move(key), std::stol(v));
    }
}

}  // namespace tokenizer_detail

inline void Tokenizer::build(std::vector<std::string> ranks, const std::string& what) {
    using namespace tokenizer_detail;
    if ((int)ranks.size() != kGpt2Ranks)
        fail("tokenizer: " + what + " has " + std::to_string(ranks.size()) + " ranks, expected " +
             std::to_string(kGpt2Ranks) + " (GPT-2); use the GPT-2 file from data/get_tokenizer.sh");
    n_ranks_ = kGpt2Ranks;
    for (int b = 0; b < 256; b++) byte_rank_[b] = -1;
    size_t total = 0;
    for (auto& r : ranks) total += r.size();
    bytes_.reserve(total + strlen(kEotText));
    off_.resize(n_ranks_ + 1);
    len_.resize(n_ranks_ + 1);
    for (int r = 0; r < n_ranks_; r++) {
        if (ranks[r].empty())
            fail("tokenizer: " + what + " has no token for rank " + std::to_string(r) +
                 "; the file is corrupt, re-run data/get_tokenizer.sh");
        off_[r] = bytes_.size();
        len_[r] = ranks[r].size();
        bytes_ += ranks[r];
        if (ranks[r].size() == 1) byte_rank_[(unsigned char)ranks[r][0]] = r;
    }
    off_[n_ranks_] = bytes_.size();
    len_[n_ranks_] = strlen(kEotText);
    bytes_ += kEotText;
    for (int b = 0; b < 256; b++)
        if (byte_rank_[b] < 0)
            fail("tokenizer: " + what + " lacks the single-byte token " + std::to_string(b) +
                 "; not a byte-level BPE file, re-run data/get_tokenizer.sh");

    std::vector<uint32_t> o(off_.begin(), off_.end() - 1), l(len_.begin(), len_.end() - 1);
    whole_.build(bytes_, o, l);
    for (int r = 0; r < n_ranks_; r++)
        if (whole_.find(bytes_.data(), off_.data(), bytes_.data() + off_[r], len_[r]) != r)
            fail("tokenizer: " + what + " lists the bytes of rank " + std::to_string(r) +
                 " twice; the file is corrupt, re-run data/get_tokenizer.sh");

    // Every split of every token into two tokens (see PairToRank).
    std::vector<std::array<int, 3>> pairs;
    for (int r = 0; r < n_ranks_; r++) {
        const char* p = bytes_.data() + off_[r];
        for (size_t k = 1; k < len_[r]; k++) {
            int a = whole_.find(bytes_.data(), off_.data(), p, k),
                b = whole_.find(bytes_.data(), off_.data(), p + k, len_[r] - k);
            if (a >= 0 && b >= 0) pairs.push_back({a, b, r});
        }
    }
    pair_.reserve(pairs.size());
    for (auto& t : pairs) pair_.insert(t[0], t[1], t[2]);

    int err;
    PCRE2_SIZE erroff;
    std::string pat = gpt2_pattern();
    pcre2_code* code = pcre2_compile((PCRE2_SPTR)pat.data(), pat.size(),
                                     PCRE2_UTF | PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK, &err, &erroff, nullptr);
    if (!code) {
        PCRE2_UCHAR buf[256];
        pcre2_get_error_message(err, buf, sizeof buf);
        fail(std::string("tokenizer: PCRE2 rejected the GPT-2 pattern (") + (const char*)buf +
             "); PCRE2 >= 10.40 with Unicode support is required");
    }
    re_.reset(code, pcre2_code_free);
    // Without JIT (an unsupported CPU) pcre2_match gives the same matches, only slower.
    jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

inline Tokenizer Tokenizer::load(const std::string& path) {
    using namespace tokenizer_detail;
    struct stat st;
    if (stat(path.c_str(), &st) != 0)
        fail("tokenizer: " + path +
             " does not exist; run data/get_tokenizer.sh (writes data/cache/gpt2.tiktoken) or pass a directory with "
             "encoder.json + vocab.bpe");
    Tokenizer t;
    if (!S_ISDIR(st.st_mode)) {
        // .tiktoken: "<base64 bytes> <rank>\n" per line.
        std::string text = read_file(path, "run data/get_tokenizer.sh");
        std::vector<std::string> ranks;
        std::string tok;
        for_each_line(text, [&](size_t line, std::string_view ln) {
            auto bad = [&](const char* why) {
                fail("tokenizer: " + path + " line " + std::to_string(line) + ": " + why +
                     "; not a tiktoken ranks file or corrupt, delete it and re-run data/get_tokenizer.sh");
            };
            size_t sp = ln.find(' ');
            if (sp == std::string_view::npos) bad("expected '<base64> <rank>'");
            if (!decode_base64(ln.substr(0, sp), tok)) bad("bad base64");
            std::string_view num = ln.substr(sp + 1);
            if (num.empty() || num.size() > 9 || num.find_first_not_of("0123456789") != std::string_view::npos)
                bad("bad rank");
            long r = std::stol(std::string(num));
            if (r >= kGpt2Ranks) bad("rank out of range for GPT-2 (>= 50256)");
            if ((size_t)r >= ranks.size()) ranks.resize(r + 1);
            if (!ranks[r].empty()) bad("rank listed twice");
            ranks[r] = tok;
        });
        t.build(std::move(ranks), path);
        return t;
    }

    // Directory: the GPT-2 release's encoder.json (token -> id) and vocab.bpe (merges in rank order).
    std::string ej = path + "/encoder.json", vb = path + "/vocab.bpe";
    const char* hint =
        "the directory must hold GPT-2's encoder.json and vocab.bpe, or pass data/cache/gpt2.tiktoken from "
        "data/get_tokenizer.sh";
    std::string ej_text = read_file(ej, hint), vb_text = read_file(vb, hint);
    std::vector<std::pair<std::string, long>> entries;
    parse_encoder_json(ej_text, ej, entries);
    std::vector<int> cp2b = gpt2_codepoint_to_byte();
    std::vector<std::string> ranks;
    std::string bytes;
    for (auto& [key, id] : entries) {
        if (key == kEotText) {
            if (id != kGpt2Ranks)
                fail("tokenizer: " + ej + ": <|endoftext|> has id " + std::to_string(id) +
                     ", expected 50256; not the GPT-2 encoder.json");
            continue;
        }
        if (!gpt2_alphabet_to_bytes(key, cp2b, bytes))
            fail("tokenizer: " + ej + ": token id " + std::to_string(id) +
                 " is not spelled in GPT-2's byte alphabet; not the GPT-2 encoder.json");
        if (id >= kGpt2Ranks)
            fail("tokenizer: " + ej + ": id " + std::to_string(id) +
                 " out of range for GPT-2; not the GPT-2 encoder.json");
        if ((size_t)id >= ranks.size()) ranks.resize(id + 1);
        if (!ranks[id].empty())
            fail("tokenizer: " + ej + ": id " + std::to_string(id) + " listed twice; the file is corrupt");
        ranks[id] = bytes;
    }
    // The BPE ranks are the ids: merge i of vocab.bpe makes id 256 + i. Check it, since byte-pair merging by
    // id would silently differ from the release if the two files disagreed.
    size_t merge = 0;
    std::string a, b;
    for_each_line(vb_text, [&](size_t line, std::string_view ln) {
        if (line == 1 && ln.substr(0, 9) == "#version:") return;
        size_t sp = ln.find(' ');
        std::string where = "tokenizer: " + vb + " line " + std::to_string(line) + ": ";
        if (sp == std::string_view::npos || !gpt2_alphabet_to_bytes(ln.substr(0, sp), cp2b, a) ||
            !gpt2_alphabet_to_bytes(ln.substr(sp + 1), cp2b, b))
            fail(where + "expected two tokens in GPT-2's byte alphabet; not the GPT-2 vocab.bpe");
        size_t id = 256 + merge++;
        if (id >= ranks.size() || ranks[id] != a + b)
            fail(where + "merge does not produce id " + std::to_string(id) +
                 " of encoder.json; the two files do not belong together");
    });
    if (merge + 256 != (size_t)kGpt2Ranks)
        fail("tokenizer: " + vb + " has " + std::to_string(merge) +
             " merges, expected 50000; the file is truncated, re-download it");
    t.build(std::move(ranks), ej);
    return t;
}

// =============================================================================================================
// encode / decode
// =============================================================================================================

// BPE for short pieces, tiktoken's way: a scan for the lowest pair rank per merge, O(n^2) but tiny n.
inline void Tokenizer::bpe_small(const char* p, size_t n, std::vector<int>& out) const {
    int tok[64], pr[64];  // tok: (m,) current parts; pr[i]: rank of merging tok[i], tok[i+1] (INT32_MAX if none)
    size_t m = n;
    for (size_t i = 0; i < n; i++) tok[i] = byte_rank_[(unsigned char)p[i]];
    for (size_t i = 0; i + 1 < m; i++) pair_.prefetch(tok[i], tok[i + 1]);  // n - 1 cache misses at once
    for (size_t i = 0; i + 1 < m; i++) {
        int r = pair_.find(tok[i], tok[i + 1]);
        pr[i] = r < 0 ? INT32_MAX : r;
    }
    while (m > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < m; i++)
            if (pr[i] < pr[best]) best = i;  // strict <: leftmost on ties
        if (pr[best] == INT32_MAX) break;
        tok[best] = pr[best];  // the pair's rank is the merged token
        for (size_t i = best + 1; i + 1 < m; i++) {
            tok[i] = tok[i + 1];
            pr[i] = pr[i + 1];
        }
        m--;
        if (best + 1 < m) {
            int r = pair_.find(tok[best], tok[best + 1]);
            pr[best] = r < 0 ? INT32_MAX : r;
        }
        if (best > 0) {
            int r = pair_.find(tok[best - 1], tok[best]);
            pr[best - 1] = r < 0 ? INT32_MAX : r;
        }
    }
    out.insert(out.end(), tok, tok + m);
}

// BPE for long pieces (a 1 MB run of digits is one piece): the same merge order from a min-heap of
// (rank, position) over a linked list, O(n log n). Stale heap entries are skipped when popped: an entry is
// live if its left part still exists and still pairs with its right neighbour at that rank.
inline void Tokenizer::bpe_large(const char* p, size_t n, std::vector<int>& out) const {
    std::vector<int> tok(n), next(n), prev(n);
    for (size_t i = 0; i < n; i++) {
        tok[i] = byte_rank_[(unsigned char)p[i]];
        next[i] = int(i) + 1;
        prev[i] = int(i) - 1;
    }
    next[n - 1] = -1;
    using Entry = std::pair<int, int>;  // (rank, position of the left part): smallest rank, then leftmost
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
    for (size_t i = 0; i + 1 < n; i++) {
        int r = pair_.find(tok[i], tok[i + 1]);
        if (r >= 0) heap.push({r, int(i)});
    }
    while (!heap.empty()) {
        auto [r, i] = heap.top();
        heap.pop();
        if (tok[i] < 0 || next[i] < 0 || pair_.find(tok[i], tok[next[i]]) != r) continue;
        int j = next[i];
        tok[i] = r;
        tok[j] = -1;  // j is gone
        next[i] = next[j];
        if (next[j] >= 0) prev[next[j]] = i;
        if (next[i] >= 0) {
            int q = pair_.find(tok[i], tok[next[i]]);
            if (q >= 0) heap.push({q, i});
        }
        if (prev[i] >= 0) {
            int q = pair_.find(tok[prev[i]], tok[i]);
            if (q >= 0) heap.push({q, prev[i]});
        }
    }
    for (int i = 0; i >= 0; i = next[i]) out.push_back(tok[i]);
}

inline void Tokenizer::encode_piece(const char* p, size_t n, uint64_t h, std::vector<int>& out) const {
    if (n == 1) {
        out.push_back(byte_rank_[(unsigned char)p[0]]);
        return;
    }
    int r =
        whole_.find(bytes_.data(), off_.data(), p, n, h);  // tiktoken's shortcut: a piece that is a token is that token
    if (r >= 0) {
        out.push_back(r);
        return;
    }
    if (n <= 64) bpe_small(p, n, out);
    else bpe_large(p, n, out);
}

inline void Tokenizer::encode(std::string_view text, std::vector<int>& out) const {
    using namespace tokenizer_detail;
    const unsigned char* s = (const unsigned char*)text.data();
    size_t n = text.size();
    // PCRE2 must see valid UTF-8. Invalid bytes become '!' in a copy: a one-byte symbol in the same class as
    // the U+FFFD tiktoken would see, so offsets carry over and pieces are cut from the original bytes.
    std::string clean;
    const unsigned char* subject = s;
    size_t bad = first_invalid_utf8(s, n);
    if (bad < n) {
        clean.assign(text.data(), n);
        for (size_t i = bad; i < n;) {
            size_t k = utf8_seq_len(s, i, n);
            if (k == 0) {
                clean[i] = '!';
                i++;
            } else i += k;
        }
        subject = (const unsigned char*)clean.data();
    }

    struct MatchData {  // per thread, shared by every Tokenizer: match data does not depend on the pattern
        pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
        ~MatchData() { pcre2_match_data_free(md); }
    };
    static thread_local MatchData tl;
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(tl.md);
    // Pieces go in batches: split kBatch pieces, prefetch their slots in the bytes -> rank table, then encode
    // them. The table (2 MB) does not fit in L2, and the lookup's cache miss was half of the encode time.
    constexpr int kBatch = 32;
    size_t start[kBatch + 1];
    uint64_t hash[kBatch];
    size_t pos = 0;
    while (pos < n) {
        int m = 0;
        start[0] = pos;
        while (m < kBatch && pos < n) {
            size_t end = ascii_ ? ascii_piece_end(subject, n, pos) : 0;
            if (end) {
                pos = end;
                start[++m] = pos;
                continue;
            }
            int rc = jit_ ? pcre2_jit_match(re_.get(), subject, n, pos, 0, tl.md, nullptr)
                          : pcre2_match(re_.get(), subject, n, pos, PCRE2_NO_UTF_CHECK, tl.md, nullptr);
            if (rc < 0 || ov[0] != pos || ov[1] <= pos) {
                PCRE2_UCHAR buf[256];
                pcre2_get_error_message(rc, buf, sizeof buf);
                throw std::logic_error("tokenizer: pre-tokeniser stopped at byte " + std::to_string(pos) + " (" +
                                       (rc < 0 ? (const char*)buf : "empty match") +
                                       "); this is a bug in text/tokenizer.h");
            }
            pos = ov[1];
            start[++m] = pos;
        }
        for (int i = 0; i < m; i++) {
            hash[i] = whole_.hash_of(text.data() + start[i], start[i + 1] - start[i]);
            whole_.prefetch(hash[i]);
        }
        for (int i = 0; i < m; i++) encode_piece(text.data() + start[i], start[i + 1] - start[i], hash[i], out);
    }
}

inline std::string Tokenizer::decode(const int* tokens, size_t n) const {
    std::string s;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] > n_ranks_)
            throw std::out_of_range("tokenizer: decode: token id " + std::to_string(tokens[i]) + " at position " +
                                    std::to_string(i) + " is outside [0, " + std::to_string(vocab_size()) + ")");
        total += len_[tokens[i]];
    }
    s.resize(total);
    char* d = s.data();
    for (size_t i = 0; i < n; i++) {
        memcpy(d, bytes_.data() + off_[tokens[i]], len_[tokens[i]]);
        d += len_[tokens[i]];
    }
    return s;
}
