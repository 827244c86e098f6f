// Tests for data/prepare_shards.cpp (text -> shards). Every test builds its own inputs in a fresh temporary
// directory; the tool's pipeline runs with a stand-in tokenizer that maps each byte to its value, so nothing here
// needs the tokenizer or downloaded data.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dataloader.h"
#define PREPARE_SHARDS_NO_MAIN
#include "data/prepare_shards.cpp"
#include "test/shard_test_util.h"

namespace {

const EncodeFn bytes_as_tokens = [](std::string_view text, std::vector<int>& out) {
    for (unsigned char c : text) out.push_back(c);
};

}  // namespace

// ------------------------------------------------------------------------------------------------------
// prepare_shards: JSON field extraction

TEST_CASE("the JSON text field is decoded with every escape, including surrogate pairs", "[prepare_shards]") {
    std::string out, err;
    auto field = [&](const std::string& line) {
        out.clear();
        err.clear();
        return get_string_field(line, "text", out, err);
    };
    REQUIRE(field(R"({"text": "a\"b\\c\/d\be\ff\ng\rh\ti"})"));
    CHECK(out == "a\"b\\c/d\be\ff\ng\rh\ti");
    REQUIRE(field(R"({"text":"\u00e9\u4E2D\ud83d\ude00!"})"));
    CHECK(out == "\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80!");        // é 中 😀
    REQUIRE(field(R"({"text":"x\ud800y\udc00z\ud800\u0041"})"));  // lone halves become U+FFFD
    CHECK(out ==
          "x\xEF\xBF\xBDy\xEF\xBF\xBDz\xEF\xBF\xBD"
          "A");
    REQUIRE(field("{\"text\":\"caf\xC3\xA9 raw utf-8\"}"));
    CHECK(out == "caf\xC3\xA9 raw utf-8");
    REQUIRE(field("{\"text\":\"a\xFF b\xC3(\xED\xA0\x80\"}"));  // not UTF-8 (a surrogate's bytes too): U+FFFD each
    CHECK(out == "a\xEF\xBF\xBD b\xEF\xBF\xBD(\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    REQUIRE(field(R"({"text": [1, -0, 12345678901234567890123, 2.50e+3], "text": "\ud800\\ud800"})"));
    CHECK(out == "\xEF\xBF\xBD\\ud800");  // an escaped backslash does not start an escape
    REQUIRE(field(R"(  {"id": [1, -2.5e+3, {"text": "nested"}], "meta": {"a": null, "b": true, "c": false},)"
                  R"( "text": "top", "n": 0} )"));
    CHECK(out == "top");
    REQUIRE(field(R"({"text": "first", "text": "last"})"));
    CHECK(out == "last");  // as Python's json
    REQUIRE(field(R"({"text": ""})"));
    CHECK(out.empty());
    CHECK(get_string_field(R"({"content": "c"})", "content", out, err));
    CHECK(out == "c");
}

TEST_CASE("a malformed JSON line is rejected with the reason and column", "[prepare_shards]") {
    std::string out, err;
    auto reason = [&](const std::string& line) {
        err.clear();
        return get_string_field(line, "text", out, err) ? std::string("ok") : err;
    };
    // The reasons are nlohmann's words; the column is where its parser stopped (one-based, in bytes).
    CHECK(reason(R"({"text": "unterminated)") ==
          "invalid JSON: syntax error while parsing value - invalid string: missing closing quote at column 23");
    CHECK(reason(R"({"text": "a"} x)") ==
          "invalid JSON: syntax error while parsing value - invalid literal; expected end of input at column 15");
    CHECK(reason(R"({"id": 1})") == "missing field \"text\"");
    CHECK_THAT(reason(R"({"text": 5})"), Catch::StartsWith("field \"text\" is not a string"));
    CHECK_THAT(reason(R"({"text": "\q"})"), Catch::Contains("forbidden character after backslash at column 12"));
    CHECK_THAT(reason(R"({"text": "\u12g4"})"), Catch::Contains("'\\u' must be followed by 4 hex digits"));
    CHECK_THAT(reason("{\"text\": \"tab\there\"}"), Catch::Contains("control character U+0009 (HT) must be escaped"));
    CHECK_THAT(reason(R"(["text", "a"])"), Catch::StartsWith("expected a JSON object"));
    CHECK_THAT(reason(R"({"text": "a",})"), Catch::Contains("unexpected '}'; expected string literal at column 14"));
    CHECK_THAT(reason(R"({"text" "a"})"), Catch::Contains("expected ':'"));
    CHECK_THAT(reason(R"({"a": 01, "text": "x"})"), Catch::Contains("expected '}'"));
    CHECK_THAT(reason(R"({"a": tru, "text": "x"})"), Catch::Contains("invalid literal"));
    CHECK_THAT(reason(R"({"a": [1 2], "text": "x"})"), Catch::Contains("expected ']'"));
    CHECK_THAT(reason(R"({"a": 1e400, "text": "x"})"),
               Catch::StartsWith("invalid JSON: number out of the double range"));
    CHECK(reason("\xEF\xBB\xBF{\"text\": \"x\"}") ==
          "invalid JSON: a byte-order mark before the JSON value at column 1");
    // After a byte that is not UTF-8 (read as U+FFFD's three bytes) the column is still the original's.
    CHECK_THAT(reason("{\"a\": \"\xFF\xFE\", \"text\": tru}"), Catch::EndsWith("invalid literal at column 24"));
    CHECK(reason(std::string(600, '[')) == "invalid JSON: nesting deeper than 512 at column 513");
    CHECK(reason("{\"a\":" + std::string(600, '[')) == "invalid JSON: nesting deeper than 512 at column 517");
    CHECK(reason(std::string(512, '[') + std::string(512, ']')) == "expected a JSON object");  // 512 deep is fine
    const std::string head = "{\"text\": \"x\", \"a\": ";  // the object and 511 arrays: 512 deep
    CHECK(reason(head + std::string(511, '[') + std::string(511, ']') + "}") == "ok");
    CHECK(reason(head + std::string(512, '[') + std::string(512, ']') + "}") ==
          "invalid JSON: nesting deeper than 512 at column " + std::to_string(head.size() + 512));
}

// ------------------------------------------------------------------------------------------------------
// prepare_shards: the whole pipeline (with bytes as tokens)

namespace {
PrepareOptions quiet_options(const TempDir& d, std::vector<std::string> inputs) {
    PrepareOptions o;
    o.inputs = std::move(inputs);
    o.out_prefix = d / "out";
    o.progress = 0;
    o.sync = false;  // durability is not under test, and fsync costs ~50 ms a shard here
    return o;
}
// Every shard's tokens, concatenated.
std::vector<uint16_t> all_tokens(const PrepareStats& st) {
    std::vector<uint16_t> t;
    for (const std::string& p : st.shards) {
        const std::vector<uint16_t> s = shard_tokens(p);
        t.insert(t.end(), s.begin(), s.end());
    }
    return t;
}
std::vector<uint16_t> expect_docs(const std::vector<std::string>& docs) {
    std::vector<uint16_t> t;
    for (const std::string& doc : docs) {
        t.push_back(50256);
        for (unsigned char c : doc) t.push_back(c);
    }
    return t;
}
}  // namespace

TEST_CASE("prepare_shards writes EOT-prefixed documents in input order, val shard first", "[prepare_shards]") {
    TempDir d;
    write_file(d / "a.jsonl", "{\"text\": \"hello\"}\n\n{\"text\": \"w\\u00f6rld\", \"id\": 2}\r\n");
    write_file(d / "b.txt", "a whole\n\nfile\n");
    write_file(d / "c.txt", "");  // empty files are no document
    PrepareOptions o = quiet_options(d, {d / "a.jsonl", d / "b.txt", d / "c.txt"});
    o.val_tokens = 4;
    o.shard_tokens = 10;
    const PrepareStats st = prepare_shards(o, bytes_as_tokens, 50256);
    CHECK(st.documents == 3);
    const std::vector<uint16_t> expect = expect_docs({"hello", "w\xC3\xB6rld", "a whole\n\nfile\n"});
    CHECK(all_tokens(st) == expect);
    CHECK(st.tokens == expect.size());
    REQUIRE(st.shards.size() == 4);  // 28 tokens: 4 + 10 + 10 + 4
    CHECK(st.shards[0] == d / "out_val_000000.bin");
    CHECK(st.shards[1] == d / "out_train_000001.bin");
    CHECK(st.shards[3] == d / "out_train_000003.bin");
    CHECK(read_shard_info(st.shards[0]).tokens == 4);
    CHECK(read_shard_info(st.shards[1]).tokens == 10);
    CHECK(read_shard_info(st.shards[3]).tokens == 4);
    // The loader reads what the tool writes.
    DataLoader dl(d / "out_train_*.bin", 1, 9, 0, 1, false, 0);
    CHECK(dl.tokens_total() == expect.size() - 4);
}

TEST_CASE("prepare_shards splits paragraphs and lines into documents", "[prepare_shards]") {
    TempDir d;
    write_file(d / "p.txt", "one\ntwo\n\n\n  \nthree\r\n\nfour");
    PrepareOptions o = quiet_options(d, {d / "p.txt"});
    o.format = InputFormat::PARAGRAPHS;
    o.val_tokens = 1;
    CHECK(all_tokens(prepare_shards(o, bytes_as_tokens, 50256)) == expect_docs({"one\ntwo", "three", "four"}));
    o.format = InputFormat::LINES;
    o.overwrite = true;
    CHECK(all_tokens(prepare_shards(o, bytes_as_tokens, 50256)) == expect_docs({"one", "two", "three", "four"}));
}

TEST_CASE("prepare_shards output is byte-identical for any thread count and block size, but for the set id",
          "[prepare_shards]") {
    TempDir d;
    std::string jsonl, para;
    std::vector<std::string> docs;
    for (int i = 0; i < 120; i++) {
        std::string doc = "doc " + std::to_string(i) + std::string((size_t)(i * 7919) % 200, 'a' + i % 26);
        docs.push_back(doc);
        jsonl += "{\"text\": \"" + doc + "\"}\n";
        para += doc + "\n\n";
    }
    write_file(d / "in.jsonl", jsonl);
    write_file(d / "in.txt", para);
    std::vector<std::string> first;
    for (int threads : {1, 3}) {
        for (size_t block : {(size_t)0, (size_t)700, (size_t)1}) {  // small blocks: documents straddle blocks
            PrepareOptions o = quiet_options(d, {d / "in.jsonl"});
            o.overwrite = true;  // the same prefix, again and again
            o.threads = threads;
            o.block_bytes = block;
            o.val_tokens = 1000;
            o.shard_tokens = 3000;
            const PrepareStats st = prepare_shards(o, bytes_as_tokens, 50256);
            std::vector<std::string> bytes;
            uint64_t id = 0;
            for (const std::string& p : st.shards) {
                bytes.push_back(read_file(p));
                const ShardInfo info = read_shard_info(p);  // every shard of a run carries its run's set id ...
                if (id == 0) id = info.set_id;
                CHECK(info.set_id == id);
                CHECK(id != 0);
                bytes.back().replace(4 * 4, 8, 8, '\0');  // ... (header words [4..5]), drawn afresh by every run
            }
            if (first.empty()) first = bytes;
            CHECK(bytes == first);
            o.inputs = {d / "in.txt"};
            o.format = InputFormat::PARAGRAPHS;
            o.out_prefix = d / "para";
            CHECK(all_tokens(prepare_shards(o, bytes_as_tokens, 50256)) == expect_docs(docs));
        }
    }
}

TEST_CASE("a malformed JSON line is reported with file and line; --on-error skip drops just that line",
          "[prepare_shards]") {
    TempDir d;
    write_file(d / "in.jsonl", "{\"text\": \"a\"}\n\n{\"text\": \"b\"\n{\"text\": \"c\"}\n");
    PrepareOptions o = quiet_options(d, {d / "in.jsonl"});
    o.val_tokens = 2;
    CHECK(error_of([&] { prepare_shards(o, bytes_as_tokens, 50256); }) ==
          d / "in.jsonl" +
              ":3: invalid JSON: syntax error while parsing object - unexpected end of input; "
              "expected '}' at column 13; "
              "fix or remove the line, or re-run with --on-error skip");
    o.skip_errors = true;
    const PrepareStats st = prepare_shards(o, bytes_as_tokens, 50256);
    CHECK(st.skipped == 1);
    CHECK(all_tokens(st) == expect_docs({"a", "c"}));
}

TEST_CASE("prepare_shards refuses a missing input or output directory before any work", "[prepare_shards]") {
    TempDir d;
    write_file(d / "a.txt", "x");
    PrepareOptions o = quiet_options(d, {d / "missing.txt"});
    CHECK_THROWS_WITH(prepare_shards(o, bytes_as_tokens, 50256),
                      Catch::Contains("cannot open input") && Catch::Contains("missing.txt"));
    o = quiet_options(d, {d / "a.txt"});
    o.out_prefix = d / "no/such/dir/x";
    CHECK_THROWS_WITH(prepare_shards(o, bytes_as_tokens, 50256), Catch::Contains("mkdir -p"));
}

// The files under d, sorted, with their bytes.
std::map<std::string, std::string> dir_contents(const TempDir& d) {
    std::map<std::string, std::string> m;
    for (const auto& e : std::filesystem::directory_iterator(d.path)) m[e.path().filename()] = read_file(e.path());
    return m;
}

TEST_CASE("a failed prepare_shards leaves the earlier set as it was; replacing a set needs --overwrite",
          "[prepare_shards]") {
    // Issue 10: a run that failed half way used to leave its first shards beside the old set's later ones, and
    // a training glob picked up the mix.
    TempDir d;
    std::string big, small, broken;
    for (int i = 0; i < 60; i++) big += "{\"text\": \"document number " + std::to_string(i) + "\"}\n";
    for (int i = 0; i < 10; i++) small += "{\"text\": \"short " + std::to_string(i) + "\"}\n";
    broken = big + "{\"text\": oops}\n";
    write_file(d / "big.jsonl", big);
    write_file(d / "small.jsonl", small);
    write_file(d / "broken.jsonl", broken);
    write_file(d / "empty.txt", "");
    write_file(d / "blank.jsonl", "\n  \n");
    PrepareOptions o = quiet_options(d, {d / "big.jsonl"});
    o.val_tokens = 100, o.shard_tokens = 200, o.block_bytes = 64;  // small blocks: shards are written before the end
    const PrepareStats first = prepare_shards(o, bytes_as_tokens, 50256);
    REQUIRE(first.shards.size() > 5);
    const auto before = dir_contents(d);

    CHECK_THROWS_WITH(prepare_shards(o, bytes_as_tokens, 50256),
                      Catch::Contains("already holds a shard set") && Catch::Contains("--overwrite"));
    o.overwrite = true;
    o.inputs = {d / "broken.jsonl"};
    CHECK_THROWS_WITH(prepare_shards(o, bytes_as_tokens, 50256), Catch::Contains("broken.jsonl:61: invalid JSON"));
    CHECK(dir_contents(d) == before);  // the old set byte for byte, and no .partial file
    o.inputs = {d / "empty.txt", d / "blank.jsonl"};
    CHECK_THROWS_WITH(prepare_shards(o, bytes_as_tokens, 50256), Catch::Contains("the input holds no text"));
    CHECK(dir_contents(d) == before);

    o.inputs = {d / "small.jsonl"};
    const PrepareStats second = prepare_shards(o, bytes_as_tokens, 50256);
    std::set<std::string> shards;
    for (const auto& [name, bytes] : dir_contents(d))
        if (name.rfind("out_", 0) == 0) shards.insert(d / name);
    CHECK(shards == std::set<std::string>(second.shards.begin(), second.shards.end()));  // nothing of the old set
    CHECK(second.shards.size() < first.shards.size());
}

namespace {
// prepare_shards(o) with stderr captured: what it wrote there, and its error ("" when it succeeded).
std::pair<std::string, std::string> run_capturing_stderr(const TempDir& d, const PrepareOptions& o, PrepareStats& st) {
    fflush(stderr);
    const int saved = dup(2), fd = open((d / "stderr.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    REQUIRE(saved >= 0);
    REQUIRE(fd >= 0);
    dup2(fd, 2);
    close(fd);
    std::string error;
    try {
        st = prepare_shards(o, bytes_as_tokens, 50256);
    } catch (const std::exception& e) {
        error = e.what();
    }
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    return {read_file(d / "stderr.txt"), error};
}
}  // namespace

TEST_CASE("an input pipe with nothing to read yet is said to be waited for, once; a writer that comes later is read",
          "[prepare_shards]") {
    TempDir d;
    const std::string fifo = d / "in.jsonl";
    REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
    const PrepareOptions o = quiet_options(d, {fifo});
    // The writer opens the FIFO only after 3 s: until then no writer exists (an open() without O_NONBLOCK would
    // block with no word, and a read would see an EOF).
    std::thread writer([&] {
        std::this_thread::sleep_for(std::chrono::seconds(3));
        std::ofstream(fifo) << "{\"text\": \"late\"}\n";
    });
    PrepareStats st;
    const auto [err, error] = run_capturing_stderr(d, o, st);
    writer.join();
    CHECK(error == "");
    CHECK(err == "prepare_shards: waiting for input on " + fifo + " (nothing to read yet)\n");
    CHECK(all_tokens(st) == expect_docs({"late"}));
    // A writer that is there at once: no line.
    std::thread prompt([&] { std::ofstream(fifo) << "{\"text\": \"now\"}\n"; });
    PrepareOptions again = o;
    again.overwrite = true;
    const auto [err2, error2] = run_capturing_stderr(d, again, st);
    prompt.join();
    CHECK(error2 == "");
    CHECK(err2 == "");
    CHECK(all_tokens(st) == expect_docs({"now"}));
}

TEST_CASE("the command line's --shard-tokens is at least 65536", "[prepare_shards]") {
    CHECK_THROWS_WITH(check_prepare_cli(parse_prepare_cli({"-o", "d/p", "--shard-tokens", "1", "a.txt"})),
                      "--shard-tokens 1 is below 65536: such small shards only multiply files; pass 65536 or more "
                      "(default 100000000)");
    CHECK_THROWS_WITH(check_prepare_cli(parse_prepare_cli({"--shard-tokens", "65535"})),
                      Catch::Contains("is below 65536"));
    CHECK_NOTHROW(check_prepare_cli(parse_prepare_cli({"--shard-tokens", "65536"})));
    CHECK_NOTHROW(check_prepare_cli(parse_prepare_cli({"-o", "d/p", "a.txt"})));  // the default, 100M
    CHECK_NOTHROW(check_prepare_cli(parse_prepare_cli({"--val-tokens", "10"})));  // a small validation shard is fine
}

TEST_CASE(
    "shards of two sets under one prefix are refused; a kill -9 anywhere in prepare_shards --overwrite "
    "leaves the old set, the new set, or a refused mixture",
    "[data][faults]") {
    char tmpl[] = "/tmp/prism_sets_XXXXXX";
    std::string dir = mkdtemp(tmpl), prefix = dir + "/c";
    std::vector<int> t(3000, 5);
    write_shard(prefix + "_val_000000.bin", t, false, 0x1111);
    write_shard(prefix + "_train_000001.bin", t, false, 0x2222);
    REQUIRE_THROWS_WITH(check_shard_sets({read_shard_info(prefix + "_train_000001.bin")},
                                         {read_shard_info(prefix + "_val_000000.bin")}),
                        Catch::Contains("(set 0000000000001111) were not written together: an interrupted "
                                        "prepare_shards --overwrite"));
    // The training shards alone are refused too: their set's validation shard is another set's.
    REQUIRE_THROWS_WITH(DataLoader(prefix + "_train_*.bin", 2, 8, 0, 1, false, 0, 300),
                        Catch::Contains("were not written together"));
    sh("rm -f " + prefix + "_val_000000.bin");  // ... or missing: a set cut short before its last rename
    REQUIRE_THROWS_WITH(DataLoader(prefix + "_train_*.bin", 2, 8, 0, 1, false, 0, 300),
                        Catch::Contains("has no " + prefix + "_val_000000.bin: an interrupted prepare_shards"));
    write_shard(prefix + "_val_000000.bin", t, false, 0x2222);
    REQUIRE(DataLoader(prefix + "_train_*.bin", 2, 8, 0, 1, false, 0, 300).num_shards() == 1);  // one set: fine
    write_shard(prefix + "_train_000002.bin", t, false);  // llm.c's, no id, beside a tied one
    REQUIRE_THROWS_WITH(DataLoader(prefix + "_train_*.bin", 2, 8, 0, 1, false, 0, 300), Catch::Contains("no set id"));
    sh("rm -f " + prefix + "_*");
    write_shard(prefix + "_train_000001.bin", t, false);  // llm.c's own shards, all without an id: read
    write_shard(prefix + "_train_000002.bin", t, false);
    REQUIRE(DataLoader(prefix + "_train_*.bin", 2, 8, 0, 1, false, 0, 300).num_shards() == 2);
    sh("rm -f " + prefix + "_*");

    // The real pipeline, killed at moments spread over its run: a small old set, a large new one (other letters).
    auto prepare = [&](const std::string& in, const std::string& out, bool overwrite) {
        PrepareOptions o;
        o.inputs = {in}, o.out_prefix = out, o.format = InputFormat::LINES;
        o.shard_tokens = 200, o.val_tokens = 200, o.progress = 0, o.sync = false, o.overwrite = overwrite,
        o.threads = 1;
        return prepare_shards(
                   o,
                   [](std::string_view s, std::vector<int>& v) {
                       for (unsigned char c : s) v.push_back(c);
                   },
                   0)
            .shards.size();
    };
    {
        std::ofstream old_in(dir + "/old.txt"), new_in(dir + "/new.txt");
        for (int i = 0; i < 120; i++) old_in << "old line " << i << "\n";
        for (int i = 0; i < 3000; i++) new_in << "NEW LINE " << i << "\n";
    }
    const auto t_new0 = std::chrono::steady_clock::now();
    const size_t n_new = prepare(dir + "/new.txt", dir + "/n", false);
    const double t_new = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_new0).count();
    int whole_old = 0, whole_new = 0, refused = 0;
    const int trials = 36;
    for (int trial = 0; trial < trials; trial++) {
        sh("rm -f " + prefix + "_*");
        const size_t n_old = prepare(dir + "/old.txt", prefix, false);
        const pid_t child = fork();
        if (child == 0) {
            try {
                prepare(dir + "/new.txt", prefix, true);
            } catch (...) {
            }
            _exit(0);
        }
        // A third of the kill moments spread over 1.5 times an uninterrupted run (the last land after its end), the
        // rest packed around its end, where the renames are.
        const double at = trial < 12 ? 1.5 * trial / 11 : 0.85 + 0.3 * (trial - 12) / 23;
        std::this_thread::sleep_for(std::chrono::duration<double>(at * t_new));
        kill(child, SIGKILL);
        waitpid(child, nullptr, 0);
        try {
            DataLoader tr(prefix + "_train_*.bin", 1, 8, 0, 1, false, 0, 300);
            DataLoader va(prefix + "_val_*.bin", 1, 8, 0, 1, false, 0, 300);
            check_shard_sets(tr.shards(), va.shards());
            const size_t n = tr.shards().size() + va.shards().size();
            const uint64_t id = tr.shards()[0].set_id;
            for (const ShardInfo& s : tr.shards()) REQUIRE(s.set_id == id);
            std::vector<int> x(8), y(8);
            tr.next_batch(x.data(), y.data());
            bool is_new = false;  // a window of 8 always holds a letter: upper case is the new set's
            for (int c : x) is_new = is_new || (c >= 'A' && c <= 'Z');
            INFO("trial " << trial << ": " << n << " shards");
            REQUIRE(n == (is_new ? n_new : n_old));  // whole: every shard of one set, no more, no fewer
            (is_new ? whole_new : whole_old)++;
        } catch (const std::runtime_error& e) {
            INFO(e.what());
            REQUIRE(has(e.what(), "were not written together"));
            refused++;
        }
    }
    printf(
        "prepare_shards --overwrite (%.0f ms, %zu shards) killed at %d moments: %d old set whole, %d new set whole, "
        "%d mixtures refused\n",
        1e3 * t_new, n_new, trials, whole_old, whole_new, refused);
    CHECK(whole_old + whole_new + refused == trials);
    sh("rm -rf '" + dir + "'");
}
