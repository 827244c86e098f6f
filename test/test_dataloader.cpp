// Tests for dataloader.h (shards -> batches) and data/prepare_shards.cpp (text -> shards). Every test builds
// its own tiny shards in a fresh temporary directory; nothing here needs the tokenizer or downloaded data:
// the tool's pipeline runs with a stand-in tokenizer that maps each byte to its value.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dataloader.h"
#define PREPARE_SHARDS_NO_MAIN
#include "data/prepare_shards.cpp"

namespace {

// A fresh directory under /tmp, removed with everything in it when the test ends.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/prism_dataloader_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

// Tokens 0, 1, 2, ... (mod 50000), offset by `base`, so every window's content tells where it came from.
std::vector<int> ramp(size_t n, int base = 0) {
  std::vector<int> t(n);
  for (size_t i = 0; i < n; i++) t[i] = (int)((base + i) % 50000);
  return t;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

std::vector<uint16_t> shard_tokens(const std::string& path) {
  const std::string b = read_file(path);
  std::vector<uint16_t> t((b.size() - 1024) / 2);
  memcpy(t.data(), b.data() + 1024, t.size() * 2);
  return t;
}

// The error message a callable throws ("" if none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

struct Batch {
  std::vector<int> x, y;
  bool operator==(const Batch& o) const { return x == o.x && y == o.y; }
};

Batch next(DataLoader& dl, int B, int T) {
  Batch b{std::vector<int>((size_t)B * T), std::vector<int>((size_t)B * T)};
  dl.next_batch(b.x.data(), b.y.data());
  return b;
}

// The first input token of each of a batch's B windows: with ramp() data, the window's start.
std::vector<int> window_starts(const Batch& b, int B, int T) {
  std::vector<int> s;
  for (int i = 0; i < B; i++) s.push_back(b.x[(size_t)i * T]);
  return s;
}

const EncodeFn bytes_as_tokens = [](std::string_view text, std::vector<int>& out) {
  for (unsigned char c : text) out.push_back(c);
};

}  // namespace

// ------------------------------------------------------------------------------------------------------
// Format and offsets

TEST_CASE("shard offsets are 64-bit: a token past 2 GiB lands at the right byte", "[dataloader]") {
  // llm.c's bug: 1024 + 2 * index in int overflows once index > ~1.07e9. A shard may hold up to
  // INT32_MAX tokens (the header's count is int32), i.e. a 4 GiB file.
  CHECK(shard_token_offset(0) == 1024);
  CHECK(shard_token_offset(1500000000ull) == 3000001024ull);
  CHECK(shard_token_offset(1500000000ull) > (uint64_t)INT32_MAX);
  CHECK(shard_file_bytes((uint64_t)INT32_MAX) == 1024ull + 2ull * 2147483647ull);
  // And the loader's own window arithmetic: window k of width T starts at token k*T, also 64-bit.
  const uint64_t k = 2000000, T = 1024;
  CHECK(shard_token_offset(k * T) == 1024ull + 2ull * 2048000000ull);
}

TEST_CASE("a written shard has llm.c's header and reads back", "[dataloader]") {
  TempDir d;
  const std::vector<int> toks = {50256, 1, 2, 65535 - 15535, 7};
  write_shard(d / "s.bin", toks);
  const std::string b = read_file(d / "s.bin");
  REQUIRE(b.size() == 1024 + 2 * toks.size());
  int32_t h[3];
  memcpy(h, b.data(), sizeof(h));
  CHECK(h[0] == 20240520);
  CHECK(h[1] == 1);
  CHECK(h[2] == 5);
  CHECK(read_shard_info(d / "s.bin").tokens == 5);
  const std::vector<uint16_t> back = shard_tokens(d / "s.bin");
  CHECK(std::vector<int>(back.begin(), back.end()) == toks);
  // No temporary file is left beside it.
  CHECK(std::distance(std::filesystem::directory_iterator(d.path), std::filesystem::directory_iterator()) == 1);
  CHECK_THROWS_WITH(write_shard(d / "big.bin", std::vector<int>{70000}), Catch::Contains("does not fit uint16"));
}

TEST_CASE("a damaged shard fails with a one-line error naming the file and the problem", "[dataloader]") {
  TempDir d;
  write_shard(d / "good.bin", ramp(100));
  const std::string good = read_file(d / "good.bin");

  write_file(d / "trunc.bin", good.substr(0, good.size() - 10));
  CHECK(error_of([&] { DataLoader dl(d / "trunc.bin", 1, 4, 0, 1, false, 0); }) ==
        "shard " + (d / "trunc.bin") + ": truncated, header says 100 tokens but file has 95; re-run data/prepare_shards");

  write_file(d / "long.bin", good + "xx");
  CHECK_THROWS_WITH(DataLoader(d / "long.bin", 1, 4, 0, 1, false, 0), Catch::Contains("header says 100 tokens"));

  write_file(d / "tiny.bin", good.substr(0, 100));
  CHECK_THROWS_WITH(DataLoader(d / "tiny.bin", 1, 4, 0, 1, false, 0), Catch::Contains("less than the 1024-byte header"));

  std::string bad = good;
  bad[0] = 1;
  write_file(d / "magic.bin", bad);
  CHECK_THROWS_WITH(DataLoader(d / "magic.bin", 1, 4, 0, 1, false, 0),
                    Catch::Contains("magic.bin: bad magic") && Catch::Contains("not an llm.c token shard"));

  bad = good;
  bad[4] = 2;
  write_file(d / "version.bin", bad);
  CHECK_THROWS_WITH(DataLoader(d / "version.bin", 1, 4, 0, 1, false, 0),
                    Catch::Contains("version.bin: version 2 is not supported"));

  for (const char* name : {"trunc.bin", "magic.bin", "version.bin"})
    CHECK(error_of([&] { DataLoader dl(d / name, 1, 4, 0, 1, false, 0); }).find('\n') == std::string::npos);
}

TEST_CASE("a missing data directory or an empty glob is an error that says what to do", "[dataloader]") {
  TempDir d;
  CHECK_THROWS_WITH(DataLoader(d / "nowhere/x_train_*.bin", 1, 4, 0, 1, false, 0),
                    Catch::Contains("no shards match") && Catch::Contains("does not exist") &&
                        Catch::Contains("data/get_default.sh"));
  CHECK_THROWS_WITH(DataLoader(d / "x_train_*.bin", 1, 4, 0, 1, false, 0),
                    Catch::Contains("no shards match") && !Catch::Contains("does not exist"));
}

TEST_CASE("a token at or above the vocabulary anywhere in any shard fails when the loader opens them", "[dataloader]") {
  // Issue 10: such a token deep in a shard used to surface only when training reached its window, hours in.
  TempDir d;
  write_shard(d / "a_000.bin", ramp(100));
  std::vector<int> t = ramp(3000000);  // three 1M-token chunks: the bad token sits in the last one
  t[2500001] = 60000;
  t[2900000] = 50001;
  write_shard(d / "a_001.bin", t);
  CHECK_THROWS_WITH(DataLoader(d / "a_*.bin", 1, 4, 0, 1, false, 0),
                    Catch::Contains("a_001.bin: token 60000 at position 2500001 is outside the vocabulary (50257)"));
  CHECK_THROWS_WITH(DataLoader(d / "a_000.bin", 1, 4, 0, 1, false, 0, 50), Catch::Contains("token 50 at position 50"));
  CHECK_NOTHROW(DataLoader(d / "a_000.bin", 1, 4, 0, 1, false, 0, 100));
  t[2500001] = 0;
  t[2900000] = 0;
  write_shard(d / "a_001.bin", t);
  DataLoader dl(d / "a_*.bin", 1, 4, 0, 1, false, 0);
  CHECK(dl.validate_seconds() >= 0);
}

TEST_CASE("a directory given as a shard is named as one", "[dataloader]") {
  TempDir d;
  std::filesystem::create_directory(d / "shards");
  CHECK(error_of([&] { DataLoader dl(d / "shards", 1, 4, 0, 1, false, 0); }) ==
        "shard " + (d / "shards") + " is a directory, not a shard; pass the shard files, e.g. '" + (d / "shards") +
            "/*_train_*.bin'");
}

TEST_CASE("data too small for one batch is an error naming the need", "[dataloader]") {
  TempDir d;
  write_shard(d / "s.bin", ramp(16));  // 15 windows of T = 1 ... but B*T*world + 1 = 17 tokens needed
  CHECK_THROWS_WITH(DataLoader(d / "s.bin", 2, 8, 0, 1, false, 0), Catch::Contains("B*T*world+1 = 17"));
  CHECK_NOTHROW(DataLoader(d / "s.bin", 1, 15, 0, 1, false, 0));
}

// ------------------------------------------------------------------------------------------------------
// Windows, ranks, epochs

TEST_CASE("a batch is B windows of T+1 tokens: inputs the first T, targets the last T", "[dataloader]") {
  TempDir d;
  write_shard(d / "s.bin", ramp(50));
  const int B = 2, T = 4;
  DataLoader dl(d / "s.bin", B, T, 0, 1, false, 0);
  CHECK(dl.tokens_total() == 50);
  CHECK(dl.batches_per_epoch() == 6);  // (50 - 1) / 4 = 12 windows, 6 batches of 2
  Batch b = next(dl, B, T);
  CHECK(b.x == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(b.y == std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8});
  b = next(dl, B, T);
  CHECK(b.x == std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15});
  CHECK(b.y == std::vector<int>{9, 10, 11, 12, 13, 14, 15, 16});
}

TEST_CASE("without shuffling the loader walks the shards in order and wraps to the start", "[dataloader]") {
  TempDir d;
  write_shard(d / "x_train_000002.bin", ramp(33, 1000));  // 8 windows of T = 4: 4 batches
  write_shard(d / "x_train_000001.bin", ramp(17, 0));     // 4 windows: 2 batches
  write_shard(d / "x_train_000003.bin", ramp(5, 2000));   // 1 window: too small for B = 2, skipped
  const int B = 2, T = 4;
  DataLoader dl(d / "x_train_*.bin", B, T, 0, 1, false, 0);
  REQUIRE(dl.num_shards() == 3);
  CHECK(dl.shards()[0].path == d / "x_train_000001.bin");  // sorted
  std::vector<int> starts;
  for (int s = 0; s < 7; s++)
    for (int v : window_starts(next(dl, B, T), B, T)) starts.push_back(v);
  CHECK(starts == std::vector<int>{0, 4, 8, 12, 1000, 1004, 1008, 1012, 1016, 1020, 1024, 1028, 0, 4});
  CHECK(dl.epoch() == 1);
}

TEST_CASE("ranks read disjoint windows that together cover every group", "[dataloader]") {
  TempDir d;
  write_shard(d / "a.bin", ramp(4 * 61 + 1, 0));     // 61 windows of T = 4
  write_shard(d / "b.bin", ramp(4 * 40 + 1, 10000)); // 40 windows
  const int B = 2, T = 4, world = 3;                  // groups of 6: 10 + 6 groups, 1 + 4 windows left out
  for (bool shuffle : {false, true}) {
    std::vector<std::unique_ptr<DataLoader>> ranks;
    for (int r = 0; r < world; r++)
      ranks.emplace_back(new DataLoader(d / "*.bin", B, T, r, world, shuffle, 7));
    REQUIRE(ranks[0]->batches_per_epoch() == 16);
    std::multiset<int> seen;
    for (size_t s = 0; s < ranks[0]->batches_per_epoch(); s++)
      for (int r = 0; r < world; r++)
        for (int v : window_starts(next(*ranks[r], B, T), B, T)) seen.insert(v);
    CHECK(seen.size() == 16 * 6);
    CHECK(std::set<int>(seen.begin(), seen.end()).size() == seen.size());  // no window twice
    if (!shuffle) {
      std::multiset<int> expect;
      for (int w = 0; w < 60; w++) expect.insert(4 * w);
      for (int w = 0; w < 36; w++) expect.insert(10000 + 4 * w);
      CHECK(seen == expect);
    }
    for (int r = 0; r < world; r++) CHECK(ranks[r]->epoch() == 1);
  }
}

// ------------------------------------------------------------------------------------------------------
// Shuffling and exact resume

TEST_CASE("shuffling is a seeded permutation: same seed same order, other seed other order", "[dataloader]") {
  TempDir d;
  for (int s = 0; s < 4; s++) write_shard(d / ("s" + std::to_string(s) + ".bin"), ramp(8 * 32 + 1, 10000 * s));
  const int B = 1, T = 8;  // 4 shards x 32 windows, no window left out
  auto epoch_starts = [&](DataLoader& dl) {
    std::vector<int> v;
    for (size_t s = 0; s < dl.batches_per_epoch(); s++) v.push_back(window_starts(next(dl, B, T), B, T)[0]);
    return v;
  };
  DataLoader a(d / "*.bin", B, T, 0, 1, true, 42), b(d / "*.bin", B, T, 0, 1, true, 42);
  DataLoader c(d / "*.bin", B, T, 0, 1, true, 43), plain(d / "*.bin", B, T, 0, 1, false, 42);
  const std::vector<int> a0 = epoch_starts(a), a1 = epoch_starts(a);
  CHECK(a0 == epoch_starts(b));
  CHECK(a1 == epoch_starts(b));
  CHECK(a0 != epoch_starts(c));
  CHECK(a0 != a1);  // a new order every epoch
  std::vector<int> sorted = a0, plain0 = epoch_starts(plain);
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == plain0);  // the same windows, each once
  CHECK(a0 != plain0);
  // Windows of one shard stay together (a shard is read to its end before the next one opens).
  for (size_t i = 0; i < a0.size(); i += 32)
    for (size_t j = i; j < i + 32; j++) CHECK(a0[j] / 10000 == a0[i] / 10000);
}

TEST_CASE("the permutation stream is fixed by its definition", "[dataloader]") {
  // These values pin the RNG so a refactor cannot silently change every shuffled run. SplitMix64 from
  // seed 0 starts with 0xE220A8397B1DCDAF (the published reference value).
  SplitMix64 r(0);
  CHECK(r.next() == 0xE220A8397B1DCDAFull);
  std::vector<uint32_t> p = loader_permutation(10, 123);
  std::vector<uint32_t> q = p;
  std::sort(q.begin(), q.end());
  CHECK(q == std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(p == loader_permutation(10, 123));
  CHECK(p != loader_permutation(10, 124));
}

TEST_CASE("a restored position continues exactly as the uninterrupted loader, across epochs", "[dataloader]") {
  TempDir d;
  write_shard(d / "a.bin", ramp(4 * 23 + 1, 0));
  write_shard(d / "b.bin", ramp(4 * 9 + 1, 20000));
  write_shard(d / "c.bin", ramp(4 * 14 + 1, 30000));
  const int B = 2, T = 4, world = 2;
  for (bool shuffle : {false, true}) {
    DataLoader ref(d / "*.bin", B, T, 1, world, shuffle, 99);
    const size_t epoch = ref.batches_per_epoch();  // 5 + 2 + 3 = 10
    REQUIRE(epoch == 10);
    std::vector<Batch> straight;
    std::vector<LoaderState> states;
    for (size_t s = 0; s < 2 * epoch + 12; s++) {
      states.push_back(ref.state());
      straight.push_back(next(ref, B, T));
    }
    // Resume from every position in the first two epochs (which includes both epoch boundaries) in a
    // fresh loader, as a restarted run would, and compare the next 12 batches.
    for (size_t k = 0; k < 2 * epoch; k++) {
      DataLoader resumed(d / "*.bin", B, T, 1, world, shuffle, 99);
      LoaderState st;
      memcpy(&st, &states[k], sizeof(st));  // a checkpoint stores the bytes
      resumed.restore(st);
      for (size_t s = k; s < k + 12; s++) {
        INFO("shuffle " << shuffle << ", resumed at batch " << k << ", batch " << s);
        REQUIRE(next(resumed, B, T) == straight[s]);
      }
    }
    // reset() goes back to the start: what a validation loader does before each evaluation.
    ref.reset();
    CHECK(next(ref, B, T) == straight[0]);
    CHECK(next(ref, B, T) == straight[1]);
  }
}

TEST_CASE("a position saved under another T, seed or data is refused", "[dataloader]") {
  TempDir d;
  write_shard(d / "a.bin", ramp(200));
  DataLoader a(d / "a.bin", 2, 4, 0, 1, true, 5);
  next(a, 2, 4);
  const LoaderState st = a.state();
  DataLoader otherT(d / "a.bin", 2, 5, 0, 1, true, 5), otherSeed(d / "a.bin", 2, 4, 0, 1, true, 6);
  CHECK_THROWS_WITH(otherT.restore(st), Catch::Contains("resume with the same values"));
  CHECK_THROWS_WITH(otherSeed.restore(st), Catch::Contains("resume with the same values"));
  write_shard(d / "b.bin", ramp(300));
  DataLoader otherData(d / "b.bin", 2, 4, 0, 1, true, 5);
  CHECK_THROWS_WITH(otherData.restore(st), Catch::Contains("different shards"));
  LoaderState bad = st;
  bad.group_pos = 1000;
  CHECK_THROWS_WITH(a.restore(bad), Catch::Contains("outside the data"));
}

// The position is global: what 2 ranks of B = 2 saved, 1 rank of B = 4 (the same group of 4 windows) continues
// exactly, and 3 ranks of B = 2 (groups of 6) continue from the first whole group at or after it.
TEST_CASE("a position saved by one rank count resumes on another from the same window", "[dataloader]") {
  TempDir d;
  write_shard(d / "a.bin", ramp(4 * 40 + 1, 0));      // 40 windows of T = 4
  write_shard(d / "b.bin", ramp(4 * 30 + 1, 20000));  // 30 windows
  const int T = 4;
  for (bool shuffle : {false, true}) {
    // The windows of one epoch in the order the 2-rank run consumes them (rank 0's two, then rank 1's).
    DataLoader r0(d / "*.bin", 2, T, 0, 2, shuffle, 11), r1(d / "*.bin", 2, T, 1, 2, shuffle, 11);
    std::vector<int> order;
    LoaderState saved{};
    for (int s = 0; s < 13; s++) {  // groups of 4: 10 in the first shard of the order, 7 in the second
      if (s == 3) saved = r0.state();
      for (DataLoader* l : {&r0, &r1})
        for (int v : window_starts(next(*l, 2, T), 2, T)) order.push_back(v);
    }
    INFO("shuffle " << shuffle);
    // One rank, B = 4: from window 12 (group 3) on, exactly the 2-rank run's windows.
    DataLoader one(d / "*.bin", 4, T, 0, 1, shuffle, 11);
    one.restore(saved);
    std::vector<int> got = window_starts(next(one, 4, T), 4, T);
    CHECK(got == std::vector<int>(order.begin() + 12, order.begin() + 16));
    // Three ranks, B = 2: window 12 is the start of group 2 of 6, so again from window 12.
    std::vector<int> three;
    for (int r = 0; r < 3; r++) {
      DataLoader l(d / "*.bin", 2, T, r, 3, shuffle, 11);
      l.restore(saved);
      for (int v : window_starts(next(l, 2, T), 2, T)) three.push_back(v);
    }
    CHECK(three == std::vector<int>(order.begin() + 12, order.begin() + 18));
    // A saved window that is not at a group boundary of the new shape rounds up: window 12 with groups of 5
    // (one rank, B = 5) continues at window 15, skipping 3.
    DataLoader five(d / "*.bin", 5, T, 0, 1, shuffle, 11);
    five.restore(saved);
    CHECK(window_starts(next(five, 5, T), 5, T) == std::vector<int>(order.begin() + 15, order.begin() + 20));
  }
}

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
  CHECK(out == "\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80!");  // é 中 😀
  REQUIRE(field(R"({"text":"x\ud800y\udc00z\ud800\u0041"})"));  // lone halves become U+FFFD
  CHECK(out == "x\xEF\xBF\xBDy\xEF\xBF\xBDz\xEF\xBF\xBD" "A");
  REQUIRE(field("{\"text\":\"caf\xC3\xA9 raw utf-8\"}"));
  CHECK(out == "caf\xC3\xA9 raw utf-8");
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
  CHECK(reason(R"({"text": "unterminated)") == "invalid JSON: unterminated string at column 23");
  CHECK(reason(R"({"text": "a"} x)") == "invalid JSON: trailing characters after the JSON value at column 15");
  CHECK(reason(R"({"id": 1})") == "missing field \"text\"");
  CHECK_THAT(reason(R"({"text": 5})"), Catch::StartsWith("field \"text\" is not a string"));
  CHECK_THAT(reason(R"({"text": "\q"})"), Catch::StartsWith("invalid JSON: invalid escape \\q"));
  CHECK_THAT(reason(R"({"text": "\u12g4"})"), Catch::StartsWith("invalid JSON: bad hex digit"));
  CHECK_THAT(reason("{\"text\": \"tab\there\"}"), Catch::StartsWith("invalid JSON: raw control character"));
  CHECK_THAT(reason(R"(["text", "a"])"), Catch::StartsWith("expected a JSON object"));
  CHECK_THAT(reason(R"({"text": "a",})"), Catch::StartsWith("invalid JSON: expected a string key"));
  CHECK_THAT(reason(R"({"text" "a"})"), Catch::StartsWith("invalid JSON: expected ':'"));
  CHECK_THAT(reason(R"({"a": 01, "text": "x"})"), Catch::StartsWith("invalid JSON: expected ',' or '}'"));
  CHECK_THAT(reason(R"({"a": tru, "text": "x"})"), Catch::StartsWith("invalid JSON: invalid value"));
  CHECK_THAT(reason(R"({"a": [1 2], "text": "x"})"), Catch::StartsWith("invalid JSON: expected ',' or ']'"));
  CHECK_THAT(reason(std::string(600, '[')), Catch::StartsWith("invalid JSON: nesting deeper than 512"));
  CHECK_THAT(reason("{\"a\":" + std::string(600, '[')), Catch::StartsWith("invalid JSON: nesting deeper than 512"));
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

TEST_CASE("prepare_shards output is byte-identical for any thread count and block size", "[prepare_shards]") {
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
      for (const std::string& p : st.shards) bytes.push_back(read_file(p));
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
        d / "in.jsonl" + ":3: invalid JSON: expected ',' or '}' in object at column 13; "
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

TEST_CASE("every flag the prepare_shards help text names is one its parser accepts", "[prepare_shards]") {
  // llm.c once printed usage for flags its parser did not know. Here each "--flag VALUE" line of the help
  // is fed back to the parser with a valid value of the kind it names.
  const std::string usage = PREPARE_SHARDS_USAGE;
  std::istringstream lines(usage);
  std::string line;
  int flags = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("  -", 0) != 0) continue;
    // "  -o, --out PREFIX          output path ...": the spec ends at the first double space.
    std::istringstream spec(line.substr(2, line.find("  ", 2) - 2));
    std::vector<std::string> spellings;
    std::string w, meta;
    while (spec >> w) {
      if (w[0] == '-') spellings.push_back(w.back() == ',' ? w.substr(0, w.size() - 1) : w);
      else meta = w;
    }
    for (const std::string& flag : spellings) {
      std::vector<std::string> args = {flag};
      if (meta == "N") args.push_back("5");
      else if (meta == "F") args.push_back("paragraphs");
      else if (meta == "skip|stop") args.push_back("skip");
      else if (meta == "PREFIX" || meta == "NAME" || meta == "PATH") args.push_back("x");
      else REQUIRE(meta.empty());  // a new kind of value: teach this test what to pass
      INFO("help line: " << line);
      CHECK_NOTHROW(parse_prepare_cli(args));
      flags++;
    }
  }
  CHECK(flags == 13);  // -o --out --format --field --shard-tokens --val-tokens --tokenizer --threads
                      // --on-error --overwrite --quiet -h --help
  const PrepareCli c = parse_prepare_cli({"-o", "d/p", "--format", "lines", "--shard-tokens", "1e6", "--val-tokens",
                                          "1000", "--on-error", "skip", "--threads", "3", "--quiet", "a.txt", "-"});
  CHECK(c.o.out_prefix == "d/p");
  CHECK(c.o.format == InputFormat::LINES);
  CHECK(c.o.shard_tokens == 1000000);
  CHECK(c.o.val_tokens == 1000);
  CHECK(c.o.skip_errors);
  CHECK(c.o.threads == 3);
  CHECK(c.o.progress == 0);
  CHECK(c.o.inputs == std::vector<std::string>{"a.txt", "-"});
  CHECK_THROWS_WITH(parse_prepare_cli({"--bogus"}), "unknown option --bogus; see --help");
  CHECK_THROWS_WITH(parse_prepare_cli({"--on-error", "ignore"}), Catch::Contains("must be skip or stop"));
  CHECK_THROWS_WITH(parse_prepare_cli({"--shard-tokens", "1.5"}), Catch::Contains("positive whole number"));
  CHECK_THROWS_WITH(parse_prepare_cli({"-o"}), "-o needs a value; see --help");
}
