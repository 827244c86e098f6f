// The loaders of every file a run reads, fed thousands of mutated copies of a good file (a fixed-seed loop):
// a token shard, model.bin, a state file, an eval file and JSON Lines records (prepare_shards' text field, read
// by simdjson and by util/json.h, which must agree, and the eval tasks' raw records). Every case must either
// load a result equal to the original or fail with one line (an exception whose message is one non-empty line),
// never crash, hang or try to allocate what a corrupt count claims. Two formats cannot tell every change: llm.c's shards carry no checksum, so a token
// changed to another token below V loads; and a JSON line whose text changed is still a JSON line. Those
// cases are counted apart ("accepted, different, undetectable by the format") and still checked (every
// token below V; the record re-parses). A second pass re-seals each mutated checkpoint and eval file with a
// valid checksum (what a buggy writer would produce), so the range checks behind the checksum are reached:
// there a load may differ from the original, but must pass the loader's own checks; no crash, no OOM.
// Runs in `make test` and in the address build (build/test_fuzz_asan, make test-asan), printing its counts.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include "run/checkpoint.h"
#include "dataloader.h"
#include "eval/eval_file.h"
#include "util/io.h"
#include "util/json.h"
#include "test/test_util.h"
#define PREPARE_SHARDS_NO_MAIN
#include "data/prepare_shards.cpp"

namespace {

using Bytes = std::string;

// What a loader made of a file, as one comparable string: equal strings mean equal results.
using Loader = std::function<Bytes(const std::string& path)>;

// How a case ended.
struct Counts {
    long cases = 0, clean_errors = 0, equal = 0, different = 0;
};

// One mutation of b, drawn from r: bit flips, random bytes, interesting int32 / 64-bit header values,
// truncation, appended bytes, a deleted range, a copied chunk, several byte changes. Header positions (the
// first 1024 bytes of the binary formats) are drawn half the time.
Bytes mutate(Bytes b, SplitMix64& r, size_t header) {
    auto pos = [&]() -> size_t {
        if (b.empty()) return 0;
        if (header && r.below(2) == 0) return (size_t)r.below(std::min(header, b.size()));
        return (size_t)r.below(b.size());
    };
    static const int32_t ints[] = {0,
                                   1,
                                   -1,
                                   2,
                                   3,
                                   255,
                                   256,
                                   65535,
                                   65536,
                                   1 << 20,
                                   1 << 24,
                                   1 << 30,
                                   std::numeric_limits<int32_t>::max(),
                                   std::numeric_limits<int32_t>::min()};
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    static const int64_t longs[] = {0,
                                    -1,
                                    1,
                                    1LL << 32,
                                    1LL << 40,
                                    1LL << 62,
                                    std::numeric_limits<int64_t>::max(),
                                    std::numeric_limits<int64_t>::min()};
    switch (r.below(9)) {
        case 0:
            if (!b.empty()) b[pos()] ^= (char)(1 << r.below(8));
            break;
        case 1:
            if (!b.empty()) b[pos()] = (char)r.below(256);
            break;
        case 2: {  // an aligned int32 word
            size_t at = pos() & ~(size_t)3;
            int32_t v = ints[r.below(sizeof ints / sizeof ints[0])];
            if (at + 4 <= b.size()) memcpy(&b[at], &v, 4);
            break;
        }
        case 3: {  // an aligned 8-byte slot: a double or an int64
            size_t at = pos() & ~(size_t)3;
            double d[] = {nan, inf, -inf, 0.0, -1.0, 1e300, 1e-300, 0.5};
            if (at + 8 <= b.size()) {
                if (r.below(2)) memcpy(&b[at], &d[r.below(8)], 8);
                else memcpy(&b[at], &longs[r.below(sizeof longs / sizeof longs[0])], 8);
            }
            break;
        }
        case 4:
            b.resize(b.empty() ? 0 : (size_t)r.below(b.size()));
            break;
        case 5:
            for (uint64_t n = 1 + r.below(64); n > 0; n--) b += (char)r.below(256);
            break;
        case 6: {
            size_t at = pos(), n = (size_t)std::min<uint64_t>(1 + r.below(64), b.size() - at);
            b.erase(at, n);
            break;
        }
        case 7: {
            if (b.size() < 2) break;
            size_t from = pos(), to = pos();
            size_t n = (size_t)std::min<uint64_t>(1 + r.below(32), b.size() - std::max(from, to));
            memmove(&b[to], &b[from], n);
            break;
        }
        default:
            for (uint64_t n = 2 + r.below(7); n > 0 && !b.empty(); n--) b[pos()] = (char)r.below(256);
    }
    return b;
}

// Runs one case: a crash ends the test binary; std::bad_alloc (a count believed) and a message that is not
// one line fail the test. `undetectable(result)`: whether a different result is one the format cannot tell.
void run_case(const Loader& load, const std::string& path, const Bytes& original_result, Counts& c,
              const std::function<bool(const Bytes&)>& undetectable, const std::string& what) {
    c.cases++;
    try {
        Bytes got = load(path);
        if (got == original_result) {
            c.equal++;
        } else {
            INFO(what << ": a mutated file loaded with a different result");
            REQUIRE(undetectable(got));
            c.different++;
        }
    } catch (const std::bad_alloc&) {
        FAIL(what << ": out of memory: a corrupt size was believed");
    } catch (const std::exception& e) {
        std::string m = e.what();
        INFO(what << ": " << m);
        REQUIRE(!m.empty());
        REQUIRE(m.find('\n') == std::string::npos);
        c.clean_errors++;
    }
}

// Rewrites the checksum of a model.bin (word 24), state file (11) or eval file (12) so that it matches.
Bytes reseal(Bytes b, int word) {
    if (b.size() < 1024) return b;
    memset(&b[4 * word], 0, 8);
    Checksum64 sum;
    sum.update(b.data(), b.size());
    uint64_t v = sum.value();
    memcpy(&b[4 * word], &v, 8);
    return b;
}

template <class T> void append_pod(Bytes& s, const T& x) { s.append((const char*)&x, sizeof x); }
Bytes floats(const std::vector<float>& v) { return Bytes((const char*)v.data(), v.size() * 4); }

// ---- the loaders, each reduced to a comparable string -----------------------------------------------------

Bytes load_shard(const std::string& path) {
    DataLoader dl(path, 2, 16, 0, 1, false, 0, 300);
    Bytes out;
    append_pod(out, dl.tokens_total());
    std::vector<int> x(32), y(32);
    for (size_t i = 0; i < dl.batches_per_epoch(); i++) {
        dl.next_batch(x.data(), y.data());
        bool in_range = true;  // whatever loads, loads in range
        for (int t : y) in_range = in_range && t >= 0 && t < 300;
        REQUIRE(in_range);
        out.append((const char*)x.data(), x.size() * 4);
        out.append((const char*)y.data(), y.size() * 4);
    }
    return out;
}

Bytes load_model_summary(const std::string& path) {
    LoadedModel m = load_model(path);
    const ModelConfig& c = m.cfg;
    Bytes out;
    for (int v :
         {c.d, c.V, c.T, c.h_base, c.mlp_multiple, (int)c.norm, (int)c.tied, (int)c.mup_attn, (int)c.init_width_scale})
        append_pod(out, v);
    for (double v : {c.mlp_ratio, c.rope_theta, c.norm_eps}) append_pod(out, v);
    for (const LayerSpec& s : c.layers) append_pod(out, s.width), append_pod(out, s.heads);
    append_pod(out, m.step);
    return out + floats(m.params);
}

Bytes load_state_summary(const std::string& path, size_t P) {
    TrainState s = load_state(path, P);
    Bytes out;
    for (int64_t v :
         {s.step, s.tokens, (int64_t)s.rng, (int64_t)s.rank, (int64_t)s.world, s.first_param, s.model_params})
        append_pod(out, v);
    out += Bytes(s.loader.begin(), s.loader.end());
    return out + floats(s.m) + floats(s.v);
}

Bytes load_eval_summary(const std::string& path) {
    EvalFile f = load_eval_file(path, 300);
    Bytes out = f.task + '\0' + f.tokenizer + '\0';
    for (int64_t v : {(int64_t)f.kind, (int64_t)f.has_norm, (int64_t)f.V, (int64_t)f.eot, (int64_t)f.fingerprint,
                      (int64_t)f.ex.size()})
        append_pod(out, v);
    for (const EvalExample& e : f.ex) {
        append_pod(out, e.gold), append_pod(out, e.words), append_pod(out, e.bytes);
        for (const EvalRequest& q : e.req) append_pod(out, q);
        out.append((const char*)e.tokens.data(), e.tokens.size() * 4);
    }
    return out;
}

// prepare_shards reads a line's text through simdjson and falls back to util/json.h: the two must agree on every
// line, in the text and in the error message.
void check_text_field_agrees(const std::string& line) {
    std::string tool, tool_err, direct, direct_err;
    const bool ok = get_string_field(line, "text", tool, tool_err);
    try {
        direct = json::str_field(json::parse(line), "text");
    } catch (const json::Error& e) {
        direct_err = e.what();
    }
    INFO("prepare_shards' reader against util/json.h: " << (ok ? "text" : tool_err) << " / "
                                                        << (direct_err.empty() ? "text" : direct_err));
    REQUIRE(ok == direct_err.empty());
    REQUIRE((ok ? tool == direct : tool_err == direct_err));
}

Bytes load_jsonl_line(const std::string& line) {
    check_text_field_agrees(line);
    json::Value v = json::parse(line);
    const json::Value* k = v.kind == json::Value::Object ? v.find("kind") : nullptr;
    if (k && k->kind == json::Value::String) {
        const std::string& kind = k->str;
        EvalDoc d = kind == "hellaswag" ? hellaswag_doc(v)
                    : kind == "arc"     ? arc_doc(v)
                    : kind == "wino"    ? winogrande_doc(v)
                                        : lambada_doc(v);
        Bytes out;
        for (size_t i = 0; i < d.ctx.size(); i++) out += d.ctx[i] + '\0' + d.cont[i] + '\0';
        for (int n : d.norm_len) append_pod(out, n);
        append_pod(out, d.gold), append_pod(out, d.words), append_pod(out, d.bytes);
        return out;
    }
    return json::str_field(v, "text");
}

}  // namespace

TEST_CASE("mutated shards, checkpoints, state files, eval files and JSON lines load equal or fail with one line",
          "[fuzz]") {
    const auto t0 = std::chrono::steady_clock::now();
    char tmpl[] = "/tmp/prism_fuzz_XXXXXX";
    const std::string dir = mkdtemp(tmpl), path = dir + "/case.bin";
    SplitMix64 rng(20240521);
    const int per_format = 700;

    // The originals: small, so that every case loads in microseconds.
    std::vector<int> toks(2000);
    for (size_t i = 0; i < toks.size(); i++) toks[i] = (int)((i * 37) % 300);
    write_shard(dir + "/orig_shard.bin", toks);

    ModelConfig cfg;
    cfg.d = 16, cfg.V = 40, cfg.T = 8, cfg.h_base = 2, cfg.norm = NormType::RMSNorm, cfg.tied = false;
    cfg.layers = {{16, 2}, {32, 4}};
    const size_t P = param_layout(cfg).total;
    std::vector<float> params(P);
    for (size_t i = 0; i < P; i++) params[i] = std::sin((float)i);
    save_model(dir + "/orig_model.bin", cfg, params.data(), P, 12);

    TrainState st;
    st.step = 12, st.tokens = 12 * 512, st.rng = 0x1234567890abcdefull;
    st.loader.assign(56, 7);
    st.m = params, st.v = std::vector<float>(P, 0.25f);
    save_state(dir + "/orig_state.bin", st);

    EvalFile ef;
    ef.task = "hellaswag", ef.kind = EvalKind::Choice, ef.has_norm = true, ef.V = 300, ef.eot = 299,
    ef.fingerprint = 99;
    for (int e = 0; e < 4; e++) {
        EvalExample x;
        for (int t = 0; t < 12; t++) x.tokens.push_back((e * 31 + t * 7) % 299);
        x.req = {{0, 4, 4, 8, 3}, {0, 4, 8, 12, 5}};
        x.gold = e % 2;
        ef.ex.push_back(x);
    }
    save_eval_file(dir + "/orig_eval.bin", ef);

    const std::vector<std::string> lines = {
        "{\"text\": \"Caf\\u00e9 \\\"quoted\\\" \\ud83d\\ude00 tab\\tend\", \"id\": 3}",
        "{\"kind\": \"hellaswag\", \"activity_label\": \"Baking\", \"ctx_a\": \"A man [title] puts flour.\", "
        "\"ctx_b\": \"he\", \"endings\": [\"mixes it.\", \"flies [x] away.\"], \"label\": 1}",
        "{\"kind\": \"arc\", \"question\": {\"stem\": \"Why?\", \"choices\": [{\"label\": \"A\", \"text\": \"a\"}, "
        "{\"label\": \"B\", \"text\": \"b\"}]}, \"answerKey\": \"B\"}",
        "{\"kind\": \"wino\", \"sentence\": \"Tom gave _ the book's cover.\", \"option1\": \"Ann\", \"option2\": "
        "\"Bob\", \"answer\": \"2\"}",
        "{\"kind\": \"lambada\", \"text\": \"the last word is here\"}",
    };

    struct Format {
        const char* name;
        std::string original;
        Loader load;
        size_t header;              // bytes of header to aim at (0: none)
        int seal_word;              // checksum word for the re-sealed pass (-1: no checksum)
        bool undetectable_changes;  // the format cannot tell every change (shard tokens)
    };
    std::vector<Format> formats = {
        {"shard", dir + "/orig_shard.bin", load_shard, 1024, -1, true},
        {"model.bin", dir + "/orig_model.bin", load_model_summary, 1024 + 16, 24, false},
        {"state", dir + "/orig_state.bin", [P](const std::string& p) { return load_state_summary(p, P); }, 1024 + 56,
         11, false},
        {"eval file", dir + "/orig_eval.bin", load_eval_summary, 1024 + 64, 12, false},
    };
    Counts total, resealed;
    for (const Format& f : formats) {
        const Bytes good = read_file(f.original);
        write_file(path, good);
        const Bytes expect = f.load(path);
        Counts c;
        for (int i = 0; i < per_format; i++) {
            Bytes b = mutate(good, rng, f.header);
            write_file(path, b);
            run_case(
                f.load, path, expect, c, [&](const Bytes&) { return f.undetectable_changes; },
                std::string(f.name) + " case " + std::to_string(i));
        }
        printf(
            "fuzz %-10s %5ld cases: %5ld clean errors, %5ld accepted and equal, %4ld accepted and different "
            "(undetectable by the format)\n",
            f.name, c.cases, c.clean_errors, c.equal, c.different);
        total.cases += c.cases, total.clean_errors += c.clean_errors, total.equal += c.equal;
        total.different += c.different;
        if (f.seal_word < 0) continue;
        // Re-sealed: the checksum matches, so the range checks and size arithmetic are what stands.
        Counts s;
        for (int i = 0; i < per_format / 2; i++) {
            write_file(path, reseal(mutate(good, rng, f.header), f.seal_word));
            run_case(
                f.load, path, expect, s, [](const Bytes&) { return true; },
                std::string(f.name) + " re-sealed case " + std::to_string(i));
        }
        printf(
            "fuzz %-10s %5ld re-sealed cases: %5ld clean errors, %5ld accepted and equal, %4ld accepted and "
            "different (a valid file with other values)\n",
            f.name, s.cases, s.clean_errors, s.equal, s.different);
        resealed.cases += s.cases, resealed.clean_errors += s.clean_errors, resealed.equal += s.equal;
        resealed.different += s.different;
    }

    // JSON Lines records: mutated bytes of each line, parsed as prepare_shards and the eval tasks parse them.
    Counts j;
    for (const std::string& line : lines) {
        const Bytes expect = load_jsonl_line(line);
        for (int i = 0; i < per_format / (int)lines.size(); i++) {
            const Bytes m = mutate(line, rng, 0);
            run_case([&](const std::string&) { return load_jsonl_line(m); }, "", expect, j,
                     [&](const Bytes&) { return load_jsonl_line(m) == load_jsonl_line(m); },  // deterministic
                     "JSON line " + std::to_string(i) + ": " + m);
        }
    }
    printf(
        "fuzz %-10s %5ld cases: %5ld clean errors, %5ld accepted and equal, %4ld accepted and different "
        "(a valid record with other text)\n",
        "JSON lines", j.cases, j.clean_errors, j.equal, j.different);
    total.cases += j.cases, total.clean_errors += j.clean_errors, total.equal += j.equal;
    total.different += j.different;

    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf(
        "fuzz total: %ld cases: %ld clean errors, %ld accepted and equal, %ld accepted and different where the "
        "format cannot tell (shard tokens below V, JSON text); %ld re-sealed cases: %ld clean errors, %ld equal, "
        "%ld valid but different; %.1f s\n",
        total.cases, total.clean_errors, total.equal, total.different, resealed.cases, resealed.clean_errors,
        resealed.equal, resealed.different, secs);
    fflush(stdout);
    // (Every case was checked in run_case: an accepted case of a checksummed format had to be equal.) The time is
    // printed, not asserted: on a loaded machine a wall-clock bound fails for reasons that are not the code's.
    std::string rm = "rm -rf '" + dir + "'";
    REQUIRE(system(rm.c_str()) == 0);
}
