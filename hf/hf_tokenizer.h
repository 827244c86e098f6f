// hf/hf_tokenizer.h: the GPT-2 tokenizer in Hugging Face's files, derived from our ranks (tokenizer.h):
//   vocab.json   {"token spelled in the byte alphabet": id, ...} for the 50256 ranks, then "<|endoftext|>"
//   merges.txt   "#version: 0.2", then one merge "a b" per line; line i (from 0) makes token 256 + i
// The byte alphabet (GPT-2's): each byte is one printable code point, the printable Latin-1 bytes other
// than space as themselves and the other 68 (controls, space, DEL, NBSP, soft hyphen) as U+0100, U+0101, ...
// in byte order. A ranks file has no merges, so each is recovered by running BPE over the token's own bytes
// with the tokens of lower rank only: the merges a tokenizer with ranks below r would make, until no pair
// of lower rank is left. For a byte-level BPE vocabulary that stops at exactly two parts, and they are the merge
// that created token r (its rank is r, the lowest pair left). A vocabulary for which it does not is refused.
// Merging by merges.txt's line order (Hugging Face) then makes the same tokens as merging by rank (tiktoken,
// ours); test/test_hf.cpp checks it with a byte-pair encoder written the Hugging Face way.
// Does not: write tokenizer_config.json (hf/export.cpp), or encode anything itself.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "hf/hf_config.h"
#include "util/json.h"
#include "text/tokenizer.h"
#include "util/utf8.h"

// Byte -> its code point in GPT-2's byte alphabet.
inline std::vector<uint32_t> gpt2_byte_alphabet() {
    std::vector<uint32_t> cp(256);
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        cp[b] = printable ? (uint32_t)b : next++;
    }
    return cp;
}

// Bytes spelled in the alphabet, as UTF-8.
inline std::string gpt2_spell(const std::string& bytes, const std::vector<uint32_t>& alphabet) {
    std::string s;
    for (unsigned char b : bytes) put_utf8(alphabet[b], s);
    return s;
}

struct HfTokenizerFiles {
    std::string vocab_json, merges_txt;
};

inline HfTokenizerFiles hf_tokenizer_files(const Tokenizer& tok) {
    const int n = tok.eot();  // the BPE ranks are [0, n); n is EOT
    std::vector<std::string> bytes(n);
    std::unordered_map<std::string, int> rank;
    for (int r = 0; r < n; r++) rank[bytes[r] = tok.decode(&r, 1)] = r;
    const std::vector<uint32_t> alphabet = gpt2_byte_alphabet();

    HfTokenizerFiles f;
    f.vocab_json = "{";
    for (int r = 0; r < n; r++)
        f.vocab_json += json::quote(gpt2_spell(bytes[r], alphabet)) + ": " + std::to_string(r) + ", ";
    f.vocab_json += json::quote(tok.decode(&n, 1)) + ": " + std::to_string(n) + "}\n";

    f.merges_txt = "#version: 0.2\n";
    std::vector<std::string> parts;
    for (int r = 0; r < n; r++) {
        const std::string& b = bytes[r];
        if (b.size() == 1) {
            if (r >= 256)
                throw HfError("tokenizer: rank " + std::to_string(r) +
                              " is a single byte after the first 256; not GPT-2's byte-level BPE");
            continue;
        }
        if (r < 256)
            throw HfError("tokenizer: rank " + std::to_string(r) +
                          " is not a single byte; GPT-2's first 256 ranks are the bytes");
        parts.clear();
        for (char c : b) parts.emplace_back(1, c);
        while (parts.size() > 2) {  // merge the lowest-ranked adjacent pair below r, the leftmost on ties
            int best = -1, best_rank = r;
            for (size_t i = 0; i + 1 < parts.size(); i++) {
                auto it = rank.find(parts[i] + parts[i + 1]);
                if (it != rank.end() && it->second < best_rank) best = (int)i, best_rank = it->second;
            }
            if (best < 0) break;
            parts[best] += parts[best + 1];
            parts.erase(parts.begin() + best + 1);
        }
        if (parts.size() != 2)
            throw HfError("tokenizer: the bytes of rank " + std::to_string(r) +
                          " do not reduce to one merge of lower ranks; "
                          "not a byte-level BPE vocabulary, so it has no merges.txt");
        f.merges_txt += gpt2_spell(parts[0], alphabet) + " " + gpt2_spell(parts[1], alphabet) + "\n";
    }
    return f;
}
