// Tests for dataloader.h (shards -> batches; data/prepare_shards.cpp's are test_prepare_shards.cpp). Every test
// builds its own tiny shards in a fresh temporary directory; nothing here needs the tokenizer or downloaded data.
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
#include "test/shard_test_util.h"

namespace {

// Tokens 0, 1, 2, ... (mod 50000), offset by `base`, so every window's content tells where it came from.
std::vector<int> ramp(size_t n, int base = 0) {
    std::vector<int> t(n);
    for (size_t i = 0; i < n; i++) t[i] = (int)((base + i) % 50000);
    return t;
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
          "shard " + (d / "trunc.bin") +
              ": truncated, header says 100 tokens but file has 95; re-run build/prepare_shards");

    write_file(d / "long.bin", good + "xx");
    CHECK_THROWS_WITH(DataLoader(d / "long.bin", 1, 4, 0, 1, false, 0), Catch::Contains("header says 100 tokens"));

    write_file(d / "tiny.bin", good.substr(0, 100));
    CHECK_THROWS_WITH(DataLoader(d / "tiny.bin", 1, 4, 0, 1, false, 0),
                      Catch::Contains("less than the 1024-byte header"));

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
    CHECK_THROWS_WITH(DataLoader(d / "a_000.bin", 1, 4, 0, 1, false, 0, 50),
                      Catch::Contains("token 50 at position 50"));
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
    write_shard(d / "a.bin", ramp(4 * 61 + 1, 0));      // 61 windows of T = 4
    write_shard(d / "b.bin", ramp(4 * 40 + 1, 10000));  // 40 windows
    const int B = 2, T = 4, world = 3;                  // groups of 6: 10 + 6 groups, 1 + 4 windows left out
    for (bool shuffle : {false, true}) {
        std::vector<std::unique_ptr<DataLoader>> ranks;
        for (int r = 0; r < world; r++) ranks.emplace_back(new DataLoader(d / "*.bin", B, T, r, world, shuffle, 7));
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
// A set replaced under a running loader (issue 25)

TEST_CASE("a shard replaced while the loader runs is refused when the loader enters it again", "[dataloader]") {
    TempDir d;
    const std::string val = d / "s_val_000000.bin", train = d / "s_train_000001.bin";
    write_shard(val, ramp(2000), true, 0x1111);
    write_shard(train, ramp(4000), true, 0x1111);
    DataLoader dl(d / "s_val_*.bin", 2, 16, 0, 1, false, 0);
    next(dl, 2, 16);
    dl.reset();  // the same file: fine
    next(dl, 2, 16);
    // A new set (another id, the same token count), renamed over the path as prepare_shards --overwrite does.
    write_shard(val, ramp(2000, 7), true, 0x2222);
    const std::string e = error_of([&] { dl.reset(); });
    INFO(e);
    CHECK(e.find("shard " + val +
                 " changed while the run used it (set 0000000000001111, 2000 tokens at the start; "
                 "now set 0000000000002222, 2000 tokens)") != std::string::npos);
    CHECK(e.find("--allow-data-change") != std::string::npos);
    CHECK(e.find('\n') == std::string::npos);
    // An llm.c shard (no set id) rewritten with the same count: told by its modification time.
    write_shard(val, ramp(2000), true, 0);
    DataLoader plain(d / "s_val_*.bin", 2, 16, 0, 1, false, 0);
    write_shard(val, ramp(2000, 3), true, 0);
    const std::string f = error_of([&] { plain.reset(); });
    INFO(f);
    CHECK(f.find("(no set id, 2000 tokens at the start; now no set id, 2000 tokens, modified)") != std::string::npos);
    // Cut short in place (the same file, still open): noticed by its size when the loader enters it again.
    DataLoader cut(d / "s_val_*.bin", 2, 16, 0, 1, false, 0);
    REQUIRE(truncate(val.c_str(), 2000) == 0);
    const std::string g = error_of([&] { cut.reset(); });
    INFO(g);
    CHECK(g.find("shard " + val + " changed while the run used it") != std::string::npos);
}

TEST_CASE("the shards' fingerprint follows their content, not their path", "[dataloader]") {
    TempDir d;
    write_shard(d / "a_train_000001.bin", ramp(3000), true, 0);
    write_shard(d / "b_train_000001.bin", ramp(3000), true, 0);
    write_shard(d / "c_train_000001.bin", ramp(3000, 1), true, 0);  // the same count, other tokens
    auto fp = [&](const char* n) { return shards_fingerprint({read_shard_info(d / n)}); };
    CHECK(fp("a_train_000001.bin").size() == 16);
    CHECK(fp("a_train_000001.bin") == fp("b_train_000001.bin"));
    CHECK(fp("a_train_000001.bin") != fp("c_train_000001.bin"));
    CHECK(shards_fingerprint({}) == "");
}
