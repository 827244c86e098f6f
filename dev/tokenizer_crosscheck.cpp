// dev/tokenizer_crosscheck.cpp: compares text/tokenizer.h with tiktoken's `gpt2` token for token, on the cases that
// dev/tiktoken_crosscheck.py writes (NAME.bin input bytes, NAME.tok expected int32 ids, NAME.idx record ends).
// Exits non-zero on the first case with a mismatch, printing the first differing position of each bad record
// (up to 10), the tokens around it and the bytes. Also checks decode(encode(x)) == x on every case, and, when
// DIR/datagym/ exists, that loading encoder.json + vocab.bpe gives the same tokenizer as the ranks file, and,
// when DIR/classes.txt exists, that the pattern's letter / number / space classes contain exactly tiktoken's
// code points (printing the ranges to add to text/pretokenize.h's kLettersSince14 / kNumbersSince14 if not).
//
//   python3 dev/tiktoken_crosscheck.py && make crosscheck-tokenizer
//   (or the binary alone: make build/tokenizer_crosscheck CPU_ONLY=1 && build/tokenizer_crosscheck
//    data/cache/gpt2.tiktoken build/crosscheck; make test builds it, so that it keeps compiling)
#include "text/tokenizer.h"

#include <chrono>
#include <cstdio>
#include <dirent.h>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

static std::string slurp(const std::string& path) {
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) {
        fprintf(stderr, "crosscheck: cannot open %s; run python3 dev/tiktoken_crosscheck.py first\n", path.c_str());
        exit(2);
    }
    std::string s;
    char buf[1 << 16];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, k);
    fclose(f);
    return s;
}

static std::string show_bytes(const std::string& s) {
    std::string o;
    for (unsigned char c : s) {
        if (c >= 0x20 && c < 0x7f && c != '\\') o += char(c);
        else {
            char b[8];
            snprintf(b, sizeof b, "\\x%02x", c);
            o += b;
        }
    }
    return o;
}

static void show_tokens(const char* who, const Tokenizer& tok, const int* t, size_t n, size_t at) {
    size_t lo = at >= 3 ? at - 3 : 0, hi = std::min(n, at + 4);
    printf("    %-8s", who);
    for (size_t i = lo; i < hi; i++)
        printf(" %s%d'%s'", i == at ? ">" : "", t[i], show_bytes(tok.decode(&t[i], 1)).c_str());
    printf("\n");
}

// Returns the number of mismatching records.
static size_t check_case(const Tokenizer& tok, const std::string& dir, const std::string& name, double* mbps) {
    std::string data = slurp(dir + "/" + name + ".bin");
    std::string tk = slurp(dir + "/" + name + ".tok"), ix = slurp(dir + "/" + name + ".idx");
    std::vector<int> expect(tk.size() / 4);
    memcpy(expect.data(), tk.data(), expect.size() * 4);
    std::vector<uint64_t> idx(ix.size() / 8);
    memcpy(idx.data(), ix.data(), idx.size() * 8);

    std::vector<int> got;
    size_t bad = 0, b0 = 0, t0 = 0;
    auto start = std::chrono::steady_clock::now();
    for (size_t r = 0; r + 1 < idx.size(); r += 2) {
        size_t b1 = idx[r], t1 = idx[r + 1];
        got.clear();
        tok.encode(std::string_view(data).substr(b0, b1 - b0), got);
        size_t n = t1 - t0;
        if (got.size() != n || memcmp(got.data(), expect.data() + t0, n * 4) != 0) {
            size_t at = 0;
            while (at < n && at < got.size() && got[at] == expect[t0 + at]) at++;
            if (++bad <= 10) {
                size_t byte = b0;
                for (size_t i = 0; i < at; i++) byte += tok.decode(&got[i], 1).size();
                printf(
                    "  %s: MISMATCH in record %zu (bytes %zu..%zu) at token %zu (byte %zu): ours %zu tokens, tiktoken "
                    "%zu\n",
                    name.c_str(), r / 2, b0, b1, at, byte, got.size(), n);
                printf("    text     '%s'\n", show_bytes(data.substr(b0, std::min<size_t>(b1 - b0, 200))).c_str());
                show_tokens("ours", tok, got.data(), got.size(), at);
                show_tokens("tiktoken", tok, expect.data() + t0, n, at);
            }
        }
        b0 = b1;
        t0 = t1;
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    *mbps = data.size() / s / 1e6;
    std::string round = tok.decode(tok.encode(data));
    if (round != data) {
        printf("  %s: decode(encode(x)) != x\n", name.c_str());
        bad++;
    }
    printf("  %-13s %8.2f MB  %9zu tokens  %s\n", name.c_str(), data.size() / 1e6, expect.size(),
           bad ? "MISMATCH" : "identical to tiktoken, round trip exact");
    if (bad > 10) printf("  %s: %zu mismatching records in all\n", name.c_str(), bad);
    return bad;
}

// Compares one class of the pattern with tiktoken's list of code points ("L 41-5a 61-7a ..."); returns the
// number of code points that differ.
static size_t check_class(const std::string& line) {
    using namespace tokenizer_detail;
    std::istringstream ss(line);
    std::string name, range;
    ss >> name;
    std::vector<char> theirs(0x110000, 0);
    while (ss >> range) {
        size_t dash = range.find('-');
        uint32_t a = std::stoul(range.substr(0, dash), nullptr, 16),
                 b = std::stoul(range.substr(dash + 1), nullptr, 16);
        for (uint32_t c = a; c <= b && c < 0x110000; c++) theirs[c] = 1;
    }
    std::string items = name == "L" ? letter_items() : name == "N" ? number_items() : space_items();
    std::string pat = "[" + items + "]";
    int err;
    PCRE2_SIZE off;
    pcre2_code* re = pcre2_compile((PCRE2_SPTR)pat.data(), pat.size(), PCRE2_UTF | PCRE2_ANCHORED, &err, &off, nullptr);
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    std::vector<uint32_t> add, remove;
    for (uint32_t c = 0; c < 0x110000; c++) {
        if (c >= 0xD800 && c <= 0xDFFF) continue;
        std::string s;
        put_utf8(c, s);
        bool ours = pcre2_match(re, (PCRE2_SPTR)s.data(), s.size(), 0, 0, md, nullptr) > 0;
        if (ours && !theirs[c]) remove.push_back(c);
        if (!ours && theirs[c]) add.push_back(c);
    }
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    auto print = [](const char* what, const std::vector<uint32_t>& v) {
        printf("    %s:", what);
        for (size_t i = 0; i < v.size();) {
            size_t j = i;
            while (j + 1 < v.size() && v[j + 1] == v[j] + 1) j++;
            if (i == j) printf("\\\\x{%X}", v[i]);
            else printf("\\\\x{%X}-\\\\x{%X}", v[i], v[j]);
            i = j + 1;
        }
        printf("\n");
    };
    printf("  class %-3s %s\n", name.c_str(),
           add.empty() && remove.empty() ? "identical to tiktoken's on every code point" : "DIFFERS from tiktoken's");
    if (!add.empty()) print("missing, add to text/pretokenize.h", add);
    if (!remove.empty()) print("extra (text/pretokenize.h needs a subtraction)", remove);
    return add.size() + remove.size();
}

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s RANKS_FILE CASE_DIR   (CASE_DIR written by dev/tiktoken_crosscheck.py)\n", argv[0]);
        return 2;
    }
    std::string dir = argv[2];
    try {
        Tokenizer tok = Tokenizer::load(argv[1]);
        std::vector<std::string> names;
        if (DIR* d = opendir(dir.c_str())) {
            while (dirent* e = readdir(d)) {
                std::string f = e->d_name;
                if (f.size() > 4 && f.substr(f.size() - 4) == ".bin") names.push_back(f.substr(0, f.size() - 4));
            }
            closedir(d);
        }
        std::sort(names.begin(), names.end());
        if (names.empty()) {
            fprintf(stderr, "crosscheck: no cases in %s; run python3 dev/tiktoken_crosscheck.py\n", dir.c_str());
            return 2;
        }
        size_t bad = 0, total = 0;
        printf("text/tokenizer.h vs tiktoken gpt2 (%s):\n", argv[1]);
        for (auto& n : names) {
            double mbps;
            bad += check_case(tok, dir, n, &mbps);
            total += 1;
        }
        struct stat st;
        std::string dg = dir + "/datagym";
        if (stat(dg.c_str(), &st) == 0) {
            Tokenizer t2 = Tokenizer::load(dg);
            std::vector<int> all(t2.vocab_size());
            for (int i = 0; i < t2.vocab_size(); i++) all[i] = i;
            bool same = t2.decode(all) == tok.decode(all);
            for (auto& n : names) {
                std::string data = slurp(dir + "/" + n + ".bin");
                same = same && t2.encode(data) == tok.encode(data);
            }
            printf("  encoder.json + vocab.bpe loader: %s\n",
                   same ? "same vocabulary and tokens as the ranks file" : "DIFFERENT");
            bad += !same;
        }
        std::ifstream cf(dir + "/classes.txt");
        for (std::string line; std::getline(cf, line);) bad += check_class(line) > 0;
        if (bad) {
            printf("FAIL: %zu mismatches\n", bad);
            return 1;
        }
        printf("PASS: %zu cases identical\n", total);
    } catch (const std::exception& e) {
        fprintf(stderr, "%s\n", e.what());
        return 2;
    }
    return 0;
}
