// test/test_tokenizer.cpp: text/tokenizer.h against token ids that tiktoken's `gpt2` encoding gives (each expected
// list below was produced by tiktoken 0.14 encode_ordinary; invalid-UTF-8 cases by the rule at the top of
// text/tokenizer.h, computed as in dev/tiktoken_crosscheck.py), round trips on arbitrary bytes, the long-piece
// path, thread safety, both file formats and the error messages, and util/utf8.h's byte rules it is built on. The >= 1 MB equivalence with tiktoken itself
// is dev/tokenizer_crosscheck (needs Python + tiktoken).
//
// Needs the GPT-2 ranks file at $PRISM_TOKENIZER or data/cache/gpt2.tiktoken: bash data/get_tokenizer.sh.
#include <catch2/catch.hpp>

#include "text/tokenizer.h"
#include "test/test_util.h"
#include "test/tokenizer_util.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

std::string tmp_dir() {
    char tmpl[] = "/tmp/prism_tok_XXXXXX";
    char* d = mkdtemp(tmpl);
    REQUIRE(d != nullptr);
    return d;
}

std::string load_error(const std::string& path) {
    try {
        Tokenizer::load(path);
    } catch (const std::runtime_error& e) {
        return e.what();
    }
    return "(no error)";
}

using V = std::vector<int>;

}  // namespace

TEST_CASE("gpt2 tokenizer: ids identical to tiktoken on hand-checkable strings", "[tokenizer]") {
    const Tokenizer& t = gpt2();
    CHECK(t.eot() == 50256);
    CHECK(t.vocab_size() == 50257);
    CHECK(t.encode("Hello world") == V{15496, 995});
    CHECK(t.encode("Hello, world!") == V{15496, 11, 995, 0});
    CHECK(t.encode("") == V{});
    // <|endoftext|> inside text is ordinary text, never the special token.
    CHECK(t.encode("<|endoftext|>") == V{27, 91, 437, 1659, 5239, 91, 29});
    CHECK(t.decode(V{50256}) == "<|endoftext|>");
}

TEST_CASE("gpt2 tokenizer: contractions are lower-case ASCII only, as in GPT-2's pattern", "[tokenizer]") {
    const Tokenizer& t = gpt2();
    CHECK(t.encode("I'm sure you'll see we've done what they'd said: it's theirs.") ==
          V{40, 1101, 1654, 345, 1183, 766, 356, 1053, 1760, 644, 484, 1549, 531, 25, 340, 338, 22021, 13});
    CHECK(t.encode("IT'S DON'T WE'LL") == V{2043, 6, 50, 23917, 6, 51, 12887, 6, 3069});    // 'S is ' + S
    CHECK(t.encode("you\u2019re it\u2019s") == V{5832, 447, 247, 260, 340, 447, 247, 82});  // curly apostrophe
    CHECK(t.encode(" 'll") == V{705, 297});     // a space before ' makes it punctuation
    CHECK(t.encode("'''s") == V{7061, 6, 82});  // the punctuation run takes the last '
}

TEST_CASE("gpt2 tokenizer: a whitespace run leaves its last space to the next word", "[tokenizer]") {
    const Tokenizer& t = gpt2();
    CHECK(t.encode("a   b") == V{64, 220, 220, 275});
    CHECK(t.encode("trailing   ") == V{9535, 4386, 220, 220, 220});
    CHECK(t.encode("\n\n") == V{628});
    CHECK(t.encode("line\n\nnext line\n") == V{1370, 198, 198, 19545, 1627, 198});
    CHECK(t.encode("x \n y") == V{87, 220, 198, 331});
    CHECK(t.encode("\t\tindent\r\n") == V{197, 197, 521, 298, 201, 198});
    CHECK(t.encode("a\u00a0b \u3000c") == V{64, 1849, 65, 220, 5099, 222, 66});  // NBSP, ideographic space
}

TEST_CASE("gpt2 tokenizer: emoji, CJK, Cyrillic, accents and digits", "[tokenizer]") {
    const Tokenizer& t = gpt2();
    CHECK(t.encode("emoji \U0001F44B\U0001F30D \U0001F468\u200d\U0001F469\u200d\U0001F467") ==
          V{368, 31370, 50169, 233, 8582, 234, 235, 50169, 101, 447, 235, 41840, 102, 447, 235, 41840, 100});
    CHECK(t.encode("中文字符 日本語 한국어") == V{40792, 23877, 229, 27764, 245, 163,   105, 99,
                                                  10545, 245,   98,  17312, 105, 45739, 252, 220,
                                                  47991, 250,   166, 113,   255, 168,   244, 112});
    CHECK(t.encode("Привет мир") == V{140, 253, 21169, 18849, 38857, 16843, 20375, 12466, 120, 18849, 21169});
    CHECK(t.encode("café naïve") == V{66, 1878, 2634, 41492});
    CHECK(t.encode("12345 3.14159 1,000,000") == V{10163, 2231, 513, 13, 1415, 19707, 352, 11, 830, 11, 830});
}

TEST_CASE("gpt2 tokenizer: invalid UTF-8 bytes are symbols that keep their own byte", "[tokenizer]") {
    // Expected: tiktoken's pattern on the text decoded with errors="surrogateescape" (each invalid byte one
    // symbol character), tiktoken's BPE on each piece's original bytes.
    const Tokenizer& t = gpt2();
    CHECK(t.encode("\xff") == V{187});
    CHECK(t.encode("a\xff"
                   "b") == V{64, 187, 65});
    CHECK(t.encode(" \xff\xfe!") == V{220, 187, 186, 0});                        // one symbol piece with the space
    CHECK(t.encode("caf\xe9 ok") == V{66, 1878, 165, 12876});                    // Latin-1 e-acute: not a letter
    CHECK(t.encode("\xe2\x82 euro \xe2\x82\xac") == V{158, 224, 11063, 10432});  // truncated, then whole euro sign
    CHECK(t.encode("it\xff's") == V{270, 187, 6, 82});                           // the symbol run takes the apostrophe
    CHECK(t.encode("\xc0\x80\xed\xa0\x80") == V{124, 222, 169, 254, 222});       // overlong NUL, UTF-16 surrogate
}

TEST_CASE("gpt2 tokenizer: long pieces take the heap merge and agree with tiktoken", "[tokenizer]") {
    const Tokenizer& t = gpt2();
    CHECK(t.encode(std::string(100, 'a')) == V(25, 24794));  // 100 > 64 bytes: one piece through bpe_large
    V ones(32, 26259);
    ones.push_back(1157);
    CHECK(t.encode(std::string(130, '1')) == ones);
    std::string e;
    for (int i = 0; i < 70; i++) e += "é";
    CHECK(t.encode(e) == V(70, 2634));
    // Huge pieces must neither recurse nor go quadratic nor overflow the JIT stack.
    std::string digits(1 << 20, '7'), spaces(1 << 20, ' '), letters(1 << 20, 'q');
    for (auto* s : {&digits, &spaces, &letters}) CHECK(t.decode(t.encode(*s)) == *s);
}

TEST_CASE("gpt2 tokenizer: decode(encode(x)) == x on arbitrary bytes", "[tokenizer]") {
    const Tokenizer& t = gpt2();
    std::mt19937_64 rng(20240520);
    // Pieces to glue: valid multi-byte characters, their fragments, spaces of all kinds, apostrophes.
    const char* frags[] = {"a",
                           "Z",
                           "7",
                           " ",
                           "  ",
                           "\n",
                           "\r\n",
                           "\t",
                           "'",
                           "'s",
                           "\xc3\xa9",
                           "\xe4\xb8\xad",
                           "\xf0\x9f\x98\x80",
                           "\xc2\xa0",
                           "\xe3\x80\x80",
                           "\xe2\x80\x99",
                           "\xc3",
                           "\xe4\xb8",
                           "\xf0\x9f",
                           "\x80",
                           "\xff",
                           "\xed\xa0\x80",
                           "\xc0\xaf",
                           "\x00",
                           "!",
                           "\xea\x9f\x9a"};
    for (int it = 0; it < 3000; it++) {
        std::string s;
        size_t len = rng() % 200;
        if (it % 2 == 0) {
            for (size_t i = 0; i < len; i++) s += char(rng() & 0xff);  // uniform random bytes
        } else {
            for (size_t i = 0; i < len / 3; i++) s += frags[rng() % (sizeof frags / sizeof *frags)];
        }
        V ids = t.encode(s);
        REQUIRE(t.decode(ids) == s);
        for (int id : ids) REQUIRE((id >= 0 && id < 50256));  // never the special token from plain text
    }
    std::string mixed = "The quick brown fox's 3 jumps — über 中文 \xf0\x9f\x98\x80!!\n\n\tEnd   \xff\xfe ";
    CHECK(t.decode(t.encode(mixed)) == mixed);
    // Appending encode: out keeps what was there.
    V out{1, 2};
    t.encode("hi", out);
    CHECK(out.size() > 2);
    CHECK(out[0] == 1);
}

TEST_CASE("gpt2 tokenizer: PCRE2's interpreter splits exactly as its JIT", "[tokenizer]") {
    const Tokenizer& t = gpt2();
    Tokenizer slow = t;  // copies share the compiled pattern
    slow.disable_jit();
    std::string s = "It's 3.14 — über 中文 \xf0\x9f\x98\x80!!\n\n\tEnd   \xff\xfe 'LL we'd\u00a0x  \u3000y ";
    for (int i = 0; i < 6; i++) s += s;
    CHECK(slow.encode(s) == t.encode(s));
}

TEST_CASE("gpt2 tokenizer: the ASCII shortcut splits exactly as PCRE2, on every short string", "[tokenizer]") {
    // Every string of up to 5 characters over an alphabet with each class in ASCII and outside it (and the
    // letters of the contractions): the shortcut must agree with PCRE2 or hand the piece over to it.
    const Tokenizer& t = gpt2();
    Tokenizer pcre_only = t;
    pcre_only.disable_ascii_shortcut();
    const std::vector<std::string> alphabet = {"a",
                                               "s",
                                               "r",
                                               "e",
                                               "1",
                                               "!",
                                               "'",
                                               " ",
                                               "\n",
                                               "\xc3\xa9" /* e-acute */,
                                               "\xd9\xa3" /* Arabic-Indic 3 */,
                                               "\xc2\xa0" /* NBSP */,
                                               "\xff"};
    size_t A = alphabet.size(), checked = 0, bad = 0;
    for (int len = 1; len <= 5; len++) {
        size_t total = 1;
        for (int i = 0; i < len; i++) total *= A;
        for (size_t code = 0; code < total; code++) {
            std::string s;
            for (size_t c = code, i = 0; i < (size_t)len; i++, c /= A) s += alphabet[c % A];
            if (t.encode(s) != pcre_only.encode(s) && bad++ < 5) FAIL_CHECK("differs on '" << s << "'");
            checked++;
        }
    }
    CHECK(bad == 0);
    CHECK(checked > 400000);
}

TEST_CASE("gpt2 tokenizer: encode is thread-safe", "[tokenizer]") {
    const Tokenizer& t = gpt2();
    std::vector<std::string> texts;
    for (int k = 0; k < 8; k++) {
        std::string s;
        for (int i = 0; i < 2000; i++) s += "word" + std::to_string(i * (k + 1)) + (i % 7 ? " " : "\xff\n") + "中'S ";
        texts.push_back(s);
    }
    std::vector<V> serial, parallel(texts.size());
    for (auto& s : texts) serial.push_back(t.encode(s));
    std::vector<std::thread> th;
    for (size_t k = 0; k < texts.size(); k++)
        th.emplace_back([&, k] {
            for (int r = 0; r < 3; r++) parallel[k] = t.encode(texts[k]);
        });
    for (auto& x : th) x.join();
    CHECK(parallel == serial);
}

TEST_CASE("gpt2 tokenizer: decode rejects ids outside the vocabulary", "[tokenizer]") {
    const Tokenizer& t = gpt2();
    CHECK_THROWS_AS(t.decode(V{50257}), std::out_of_range);
    CHECK_THROWS_AS(t.decode(V{-1}), std::out_of_range);
}

TEST_CASE("gpt2 tokenizer: encoder.json + vocab.bpe load the same tokenizer as the ranks file", "[tokenizer]") {
    const Tokenizer& t = gpt2();
    // Write the release format from the ranks: each byte spelled as one code point (printable Latin-1 but
    // space as itself, the rest 256, 257, ... in byte order), non-ASCII written as \u escapes.
    std::vector<int> spell(256);
    for (int b = 0, next = 256; b < 256; b++) {
        bool printable = (b > 0x20 && b < 0x7f) || (b > 0xa0 && b != 0xad);
        spell[b] = printable ? b : next++;
    }
    auto json_spell = [&](const std::string& bytes) {
        std::string s;
        for (unsigned char c : bytes) {
            int cp = spell[c];
            if (cp == '"' || cp == '\\') {
                s += '\\';
                s += char(cp);
            } else if (cp < 0x80) s += char(cp);
            else {
                char buf[16];
                snprintf(buf, sizeof buf, "\\u%04x", cp);
                s += buf;
            }
        }
        return s;
    };
    auto bpe_spell = [&](const std::string& bytes) {  // vocab.bpe is raw UTF-8
        std::string s;
        for (unsigned char c : bytes) {
            int cp = spell[c];
            if (cp < 0x80) s += char(cp);
            else {
                s += char(0xC0 | (cp >> 6));
                s += char(0x80 | (cp & 0x3F));
            }
        }
        return s;
    };
    std::map<std::string, int> id;
    std::vector<std::string> bytes(50256);
    for (int i = 0; i < 50256; i++) id[bytes[i] = t.decode(V{i})] = i;
    std::string ej = "{", vb = "#version: 0.2\n";
    for (int i = 0; i < 50256; i++) ej += "\"" + json_spell(bytes[i]) + "\": " + std::to_string(i) + ", ";
    ej += "\"<|endoftext|>\": 50256}";
    for (int i = 256; i < 50256; i++) {
        const std::string& b = bytes[i];
        size_t k = 1;
        while (k < b.size() && !(id.count(b.substr(0, k)) && id.count(b.substr(k)))) k++;
        REQUIRE(k < b.size());
        vb += bpe_spell(b.substr(0, k)) + " " + bpe_spell(b.substr(k)) + "\n";
    }
    std::string dir = tmp_dir();
    write_file(dir + "/encoder.json", ej);
    write_file(dir + "/vocab.bpe", vb);
    Tokenizer t2 = Tokenizer::load(dir);
    std::string text = "Hello world, it's 2024: café 中文 \xf0\x9f\x98\x80 \xff  end\n";
    CHECK(t2.encode(text) == t.encode(text));
    V all(50257);
    for (int i = 0; i < 50257; i++) all[i] = i;
    CHECK(t2.decode(all) == t.decode(all));

    // A vocab.bpe that does not belong to the encoder.json is refused, naming the line.
    std::string bad = vb;
    bad.replace(bad.find('\n') + 1, 0, "x y\n");
    write_file(dir + "/vocab.bpe", bad);
    std::string err = load_error(dir);
    CHECK_THAT(err, Catch::Contains("vocab.bpe line 2"));
    // A malformed encoder.json, or one whose ids are not plain non-negative integers, is refused in one line.
    for (const char* ej_bad : {"{\"a\": 1,}", "[1, 2]", "{\"a\": -1}", "{\"a\": 1.5}", "{\"a\": \"1\"}"}) {
        write_file(dir + "/encoder.json", ej_bad);
        err = load_error(dir);
        CHECK_THAT(err,
                   Catch::Contains("encoder.json is not a valid encoder.json") && Catch::Contains("get_tokenizer.sh"));
        CHECK(err.find('\n') == std::string::npos);
    }
    CHECK_THAT(err, Catch::Contains("not a non-negative integer"));
    std::remove((dir + "/vocab.bpe").c_str());
    std::remove((dir + "/encoder.json").c_str());
    rmdir(dir.c_str());
}

TEST_CASE("util/utf8.h: every scalar value is written as one well-formed sequence that reads back as itself",
          "[tokenizer]") {
    for (uint32_t cp = 0; cp < 0x110000; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        std::string s;
        put_utf8(cp, s);
        const unsigned char* u = (const unsigned char*)s.data();
        size_t k = utf8_seq_len(u, 0, s.size());
        if (k != s.size() || utf8_code_point(u, 0, k) != cp || first_invalid_utf8(u, s.size()) != s.size())
            FAIL("code point " << cp << " does not round-trip");
    }
    // Not well-formed (Python's strict decoder agrees): a surrogate, an overlong form, a truncated sequence,
    // a stray continuation byte, anything above U+10FFFF.
    for (std::string bad : {"\xED\xA0\x80", "\xC0\xAF", "\xE2\x82", "\x80", "\xF4\x90\x80\x80"})
        CHECK(utf8_seq_len((const unsigned char*)bad.data(), 0, bad.size()) == 0);
    std::string mixed = "abcdefgh\xC3\xA9\xFF";
    CHECK(first_invalid_utf8((const unsigned char*)mixed.data(), mixed.size()) == 10);
}

TEST_CASE("gpt2 tokenizer: a missing or corrupt ranks file is a one-line error naming the file", "[tokenizer]") {
    std::string err = load_error("/nonexistent/gpt2.tiktoken");
    CHECK_THAT(err, Catch::Contains("/nonexistent/gpt2.tiktoken") && Catch::Contains("data/get_tokenizer.sh"));
    CHECK(err.find('\n') == std::string::npos);

    std::string dir = tmp_dir();
    write_file(dir + "/garbage.tiktoken", "IQ== 0\nthis is not base64!\n");
    err = load_error(dir + "/garbage.tiktoken");
    CHECK_THAT(err, Catch::Contains("garbage.tiktoken line 2") && Catch::Contains("get_tokenizer.sh"));

    write_file(dir + "/short.tiktoken", "IQ== 0\nIg== 1\n");  // a truncated download
    err = load_error(dir + "/short.tiktoken");
    CHECK_THAT(err, Catch::Contains("short.tiktoken has 2 ranks, expected 50256"));

    err = load_error(dir);  // a directory without encoder.json
    CHECK_THAT(err, Catch::Contains("encoder.json"));
    std::remove((dir + "/garbage.tiktoken").c_str());
    std::remove((dir + "/short.tiktoken").c_str());
    rmdir(dir.c_str());
}
