// test_generate.cpp: the KV-cache decoder on the CPU reference (ref/cpu_decoder.h) against full forwards, the
// sampler (inspect/sampling.h), the streaming UTF-8 decoder, the trainer's samples across --resume, and the generate
// binary end to end (text, the cache off and on, bad input). The GPU decoder's tests are test_decode_cuda.cpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "run/checkpoint.h"
#include "ref/cpu_engine.h"
#include "inspect/recompute_decoder.h"
#include "ref/reference.h"
#include "inspect/sampling.h"
#include "test/inspect_util.h"
#include "test/test_util.h"
#include "test/train_util.h"

namespace {

double max_abs_diff(const float* a, const float* b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = std::max(m, (double)std::fabs(a[i] - b[i]));
    return m;
}

}  // namespace

TEST_CASE(
    "cached decoding gives a full forward's logits at every position (CPU reference: uniform, prism, x, lambda, "
    "shapes, hybrid)",
    "[generate][cache]") {
    // Tolerance 1e-5 of the logits' scale: the decoder runs the reference's own ops on the same rows (fp32, same
    // summation order), so any difference is a bug; measured 0 (bit-identical). A wrong position, head or cache
    // row moves logits by O(1). "shapes" has GQA, MQA, windows of 3 and 5 (their rings wrap: in the first chunk of
    // 5, in the chunk of 6 longer than either ring, and token by token), and layers without attention or MLP;
    // "hybrid" has Gated DeltaNet layers (their recurrent state and conv tail: measured bit-identical too).
    for (std::string kind : {"uniform", "prism", "x", "lambda", "shapes", "hybrid"}) {
        INFO(kind);
        const ModelConfig c = inspect_config(kind);
        const std::vector<float> params = inspect_params(c, 3);
        const std::vector<int> seq = inspect_tokens(c, c.T, 4);
        ref::RefModel<float> rm(c);
        rm.params = params;
        rm.forward(seq.data(), nullptr, 1, c.T);
        const float* full = rm.logits();  // (T, V)
        double scale = 0;
        for (int i = 0; i < c.T * c.V; i++) scale = std::max(scale, (double)std::fabs(full[i]));
        REQUIRE(scale > 1.0);  // logits spread: the comparison means something

        CpuDecoder dec(c, params, c.T);
        std::vector<float> got((size_t)c.T * c.V);
        dec.append(seq.data(), 5, got.data(), true);                 // a prefill chunk of 5, every position's logits
        dec.append(&seq[5], 6, got.data() + (size_t)5 * c.V, true);  // a chunk of 6
        for (int t = 11; t < c.T; t++) dec.append(&seq[t], 1, got.data() + (size_t)t * c.V);  // then one at a time
        REQUIRE(dec.position() == c.T);
        INFO("max |diff| " << max_abs_diff(got.data(), full, got.size()) << " of scale " << scale);
        CHECK(max_abs_diff(got.data(), full, got.size()) <= 1e-5 * scale);
        REQUIRE_THROWS(dec.append(&seq[0], 1, got.data()));  // the cache is full

        // reset() starts over: the same logits again, from one token at a time
        dec.reset();
        std::vector<float> again(c.V);
        for (int t = 0; t < c.T; t++) {
            dec.append(&seq[t], 1, again.data());
            CHECK(max_abs_diff(again.data(), full + (size_t)t * c.V, c.V) <= 1e-5 * scale);
        }
    }
}

TEST_CASE("a hybrid model's cached decoding equals the full forward across the Gated DeltaNet's chunks of 64",
          "[generate][cache][gdn]") {
    // T 150: the prefill of 5 and the chunk of 70 cross the first chunk boundary, single tokens the second.
    const ModelConfig c = inspect_config("hybrid", 37, 150);
    const std::vector<float> params = inspect_params(c, 5);
    const std::vector<int> seq = inspect_tokens(c, c.T, 6);
    ref::RefModel<float> rm(c);
    rm.params = params;
    rm.forward(seq.data(), nullptr, 1, c.T);
    const float* full = rm.logits();
    double scale = 0;
    for (int i = 0; i < c.T * c.V; i++) scale = std::max(scale, (double)std::fabs(full[i]));
    REQUIRE(scale > 1.0);
    CpuDecoder dec(c, params, c.T);
    std::vector<float> got((size_t)c.T * c.V);
    dec.append(seq.data(), 5, got.data(), true);
    dec.append(&seq[5], 70, got.data() + (size_t)5 * c.V, true);
    for (int t = 75; t < c.T; t++) dec.append(&seq[t], 1, got.data() + (size_t)t * c.V);
    INFO("max |diff| " << max_abs_diff(got.data(), full, got.size()) << " of scale " << scale);
    CHECK(max_abs_diff(got.data(), full, got.size()) <= 1e-5 * scale);
    // the state is constant in T: the same bytes after 150 tokens as after 1
    CpuDecoder one(c, params, c.T);
    one.append(seq.data(), 1, got.data());
    CHECK(one.cache_bytes() == dec.cache_bytes());
}

TEST_CASE(
    "the CPU decoder's cache is 2 kv_l head_dim_l fp32 numbers per layer and position it keeps (a window's "
    "last W), twice --plan's bf16 bytes",
    "[generate][cache]") {
    for (std::string kind : {"uniform", "prism", "x", "lambda", "shapes"}) {
        INFO(kind);
        const ModelConfig c = inspect_config(kind), c10 = inspect_config(kind, 37, 10);  // capacity 10: T = 10's
        CHECK(CpuDecoder(c, inspect_params(c, 1), c.T).cache_bytes() == 2 * (size_t)account(c).kv_cache_bytes);
        CHECK(CpuDecoder(c, inspect_params(c, 1), 10).cache_bytes() == 2 * (size_t)account(c10).kv_cache_bytes);
        if (kind == "uniform") CHECK(account(c).kv_cache_bytes == (long long)c.T * account(c).kv_bytes_per_token);
    }
    // GQA and windows shrink it: shapes' layers keep 24, 12, 48, 0, 12 and 24 columns of each of K and V per
    // position, of 3 positions (a window of 3), 16 (global: T), 5 (a window of 5), none (no attention), 16 (a window
    // past T) and 16.
    const ModelConfig s = inspect_config("shapes");
    CHECK(CpuDecoder(s, inspect_params(s, 1), 16).cache_bytes() ==
          2 * sizeof(float) * (size_t)(3 * 24 + 16 * 12 + 5 * 48 + 16 * 12 + 16 * 24));
}

TEST_CASE("decoders through the Engine interface: cache and full recompute sample the same text, past T",
          "[generate][cache]") {
    // Greedy decoding of 40 tokens from a decoder of capacity 8: the cache fills and slides four times
    // (inspect/sampling.h). The recompute decoder runs a full Engine::forward per token; both follow the same slide, so
    // greedy picks must agree token for token. (shapes: each slide's re-prefill of 4 is longer than a window of 3;
    // hybrid: each slide restarts its gdn layers' recurrent state.)
    for (std::string kind : {"prism", "shapes", "hybrid"}) {
        INFO(kind);
        const ModelConfig c = inspect_config(kind, 37, 8);
        CpuEngine eng(c);
        const std::vector<float> params = inspect_params(c, 5);
        eng.set_params(params.data());
        SamplingOptions greedy;
        greedy.temperature = 0;
        std::unique_ptr<Decoder> cached = eng.make_decoder(8);
        RecomputeDecoder full(eng, 8);
        uint64_t r1 = 1, r2 = 1;
        std::vector<int> emitted;
        std::vector<int> a =
            continue_text(*cached, c.V, {1, 2, 3}, 40, greedy, r1, -1, [&](int t) { emitted.push_back(t); });
        std::vector<int> b = continue_text(full, c.V, {1, 2, 3}, 40, greedy, r2, -1, [](int) {});
        REQUIRE(a.size() == 40);
        CHECK(a == b);
        CHECK(emitted == a);
        CHECK(r1 == 1);  // greedy draws nothing
        // A context longer than the capacity keeps its last 8 tokens: the same as passing those 8.
        std::vector<int> long_ctx = inspect_tokens(c, 20, 9), tail(long_ctx.end() - 8, long_ctx.end());
        CHECK(continue_text(*cached, c.V, long_ctx, 5, greedy, r1, -1, [](int) {}) ==
              continue_text(full, c.V, tail, 5, greedy, r2, -1, [](int) {}));
    }
}

TEST_CASE("sampling: greedy, top-k, top-p and temperature draw from the distribution they promise",
          "[generate][sampling]") {
    const int V = 6;
    const std::vector<float> logits = {1.0f, 3.0f, 0.5f, 2.0f, 3.0f, -1.0f};  // ties at ids 1 and 4
    auto draw = [&](SamplingOptions s, uint64_t& rng) {
        std::vector<float> l = logits;
        return sample_token(l.data(), V, s, rng);
    };
    uint64_t rng = sampling_rng_state(7);
    SamplingOptions s;
    s.temperature = 0;
    CHECK(draw(s, rng) == 1);  // the largest logit, the lower id of a tie
    CHECK(rng == sampling_rng_state(7));
    s.temperature = 1, s.top_k = 1;
    CHECK(draw(s, rng) == 1);
    s.top_k = 0, s.top_p = 1e-6;  // the nucleus of the single most likely token
    CHECK(draw(s, rng) == 1);

    // Frequencies over 40000 draws against the promised probabilities; each within 5 standard errors
    // (sqrt(p (1 - p) / n) <= 0.0025): a wrong temperature, cut or renormalisation is off by far more.
    auto check_freqs = [&](SamplingOptions so, const std::vector<double>& want) {
        std::vector<int> count(V, 0);
        const int n = 40000;
        uint64_t r = sampling_rng_state(11);
        for (int i = 0; i < n; i++) count[draw(so, r)]++;
        for (int v = 0; v < V; v++) {
            INFO("token " << v);
            CHECK(std::fabs(count[v] / (double)n - want[v]) <= 5 * std::sqrt(want[v] * (1 - want[v]) / n) + 1e-12);
        }
    };
    auto softmax = [&](double t, const std::vector<int>& kept) {
        std::vector<double> p(V, 0.0);
        double z = 0;
        for (int v : kept) z += std::exp(logits[v] / t);
        for (int v : kept) p[v] = std::exp(logits[v] / t) / z;
        return p;
    };
    SamplingOptions plain;
    check_freqs(plain, softmax(1.0, {0, 1, 2, 3, 4, 5}));
    SamplingOptions hot;
    hot.temperature = 2.0;
    check_freqs(hot, softmax(2.0, {0, 1, 2, 3, 4, 5}));
    SamplingOptions k3;
    k3.top_k = 3;  // ids 1, 4 (3.0) and 3 (2.0)
    check_freqs(k3, softmax(1.0, {1, 3, 4}));
    SamplingOptions p08;
    p08.top_p = 0.8;  // p(1) = p(4) = 0.359, p(3) = 0.132: 0.718 < 0.8, so id 3 joins, then 0.85 >= 0.8
    check_freqs(p08, softmax(1.0, {1, 3, 4}));
    SamplingOptions limit;
    limit.vocab_limit = 4;  // ids 4 and 5 never sampled
    check_freqs(limit, softmax(1.0, {0, 1, 2, 3}));
}

TEST_CASE("at temperature 1 the sampler is the trainer's old one, draw for draw", "[generate][sampling]") {
    // train_prism.cu's samples before this sampler: exp(l - max) in float, one LCG draw, the first id whose running
    // sum reaches u x sum. Checkpoints store that LCG's state, so the new sampler must consume it identically.
    ref::Rng gen(3);
    const int V = 1000;
    uint64_t a = sampling_rng_state(42), b = a;
    for (int round = 0; round < 200; round++) {
        std::vector<float> logits(V);
        for (float& x : logits) x = (float)(gen.uniform() * 12 - 6);
        std::vector<float> old = logits;
        float mx = *std::max_element(old.begin(), old.end());
        double sum = 0;
        for (float& x : old) sum += (x = std::exp(x - mx));
        b = b * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(b >> 11) * 0x1.0p-53 * sum;
        int want = V - 1;
        for (int v = 0; v < V; v++)
            if ((u -= old[v]) <= 0) {
                want = v;
                break;
            }
        REQUIRE(sample_token(logits.data(), V, SamplingOptions(), a) == want);
        REQUIRE(a == b);
    }
}

TEST_CASE("streamed UTF-8: a character split across tokens prints whole, invalid bytes as U+FFFD", "[generate][utf8]") {
    const std::string R = "\xEF\xBF\xBD";  // U+FFFD
    auto feed = [](const std::vector<std::string>& pieces) {
        Utf8Stream s;
        std::string out;
        for (const std::string& p : pieces) out += s.push(p) + "|";
        return out + s.finish();
    };
    CHECK(feed({"caf\xC3", "\xA9!"}) == "caf|\xC3\xA9!|");                // é split 1 + 1
    CHECK(feed({"\xE2", "\x82", "\xAC"}) == "||\xE2\x82\xAC|");           // € split 1 + 1 + 1
    CHECK(feed({"\xF0\x9F", "\x98\x80 ok"}) == "|\xF0\x9F\x98\x80 ok|");  // 😀 split 2 + 2
    CHECK(feed({"a\xC0", "b"}) == "a" + R + "|b|");                       // C0 never starts a character
    CHECK(feed({"\xE2\x82", "A"}) == "|" + R + "A|");                     // one U+FFFD for E2 82, as Python
    CHECK(feed({"\xED\xA0\x80"}) == R + R + R + "|");                     // a surrogate: 3 maximal subparts
    CHECK(feed({"end\xE2\x82"}) == "end|" + R);                           // incomplete at the end: finish
    CHECK(feed({"\x80x"}) == R + "x|");                                   // a lone continuation byte
}

TEST_CASE("the trainer's samples continue identically after --resume (CPU and GPU engines)", "[generate][train]") {
    // A sample every 2 steps of 4: the straight run's sample at step 4 must equal the resumed run's, which
    // needs the sampling RNG's state from the checkpoint and the same sampler on both engines. GPT-2's vocabulary
    // (samples start from EOT, 50256); the data's tokens are below 256.
    std::string dir = make_data_dir();
    for (std::string bin : {"./train_prism", "./build/train_prism_executor"}) {
        INFO(bin);
        const Train train = [&](const std::string& out, const std::string& extra) {
            std::string cmd = micro(dir, out) + " --vocab 50257 -b 1 --seq-len 16 --val-every 0 " +
                              "--sample-every 2 --sample-tokens 6" + extra;
            return sh(bin + cmd.substr(std::string("./train_prism").size()));
        };
        // train_util.h's resume check, then the samples of its runs.
        const std::string tag = bin.size() > 14 ? "gpu" : "cpu";
        REQUIRE(sh("mkdir " + dir + "/" + tag).rc == 0);
        const ResumedRuns runs = check_resume(dir + "/" + tag, train, 4, 2);
        auto sample_at_4 = [](const std::string& out) {
            size_t at = out.find("step     4/4");
            REQUIRE(at != std::string::npos);
            size_t s = out.find("sample: ", at);
            REQUIRE(s != std::string::npos);
            return out.substr(s, out.find('\n', s) - s);
        };
        CHECK(sample_at_4(runs.straight.out) == sample_at_4(runs.resumed.out));
    }
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("generate prints text, the same with the cache and without; bad input is one line", "[generate][cli]") {
    // A small model over GPT-2's vocabulary (the tokenizer's 50257 ids), random weights.
    char tmpl[] = "/tmp/prism_generate_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    ModelConfig c = inspect_config("prism", 50257, 32);
    const std::vector<float> p = inspect_params(c, 8);
    save_model(dir + "/model.bin", c, p.data(), p.size(), 7);
    Result a =
        sh("(./generate " + dir + "/model.bin --prompt 'And God said' --tokens 12 --temperature 0 --cpu 2>/dev/null)");
    Result b =
        sh("(./generate " + dir + " --prompt 'And God said' --tokens 12 --temperature 0 --cpu --no-cache 2>/dev/null)");
    INFO(a.out << "\n" << b.out);
    REQUIRE(a.rc == 0);
    REQUIRE(b.rc == 0);
    CHECK(a.out.rfind("And God said", 0) == 0);
    CHECK(a.out.size() > std::string("And God said\n").size());
    CHECK(a.out == b.out);
    // GQA, windows (3 and 5: their rings wrap within the prompt and the 12 tokens) and dropped sub-blocks: the
    // cached text is the full recompute's
    ModelConfig shapes = inspect_config("shapes", 50257, 32);
    const std::vector<float> ps5 = inspect_params(shapes, 8);
    save_model(dir + "/shapes.bin", shapes, ps5.data(), ps5.size(), 7);
    Result sa =
        sh("(./generate " + dir + "/shapes.bin --prompt 'And God said' --tokens 12 --temperature 0 --cpu 2>/dev/null)");
    Result sb = sh("(./generate " + dir +
                   "/shapes.bin --prompt 'And God said' --tokens 12 --temperature 0 --cpu --no-cache 2>/dev/null)");
    INFO(sa.out << "\n" << sb.out);
    REQUIRE(sa.rc == 0);
    REQUIRE(sb.rc == 0);
    CHECK(sa.out == sb.out);
    // The model line names the columns beyond widths and heads (stderr, merged by sh)
    Result sc = sh("./generate " + dir + "/shapes.bin --prompt 'And' --tokens 1 --temperature 0 --cpu");
    INFO(sc.out);
    CHECK(sc.out.find("\n  kv     ") != std::string::npos);
    CHECK(sc.out.find("\n  window ") != std::string::npos);
    CHECK(sc.out.find("\n  no attention: layers ") != std::string::npos);
    Result info = sh("echo 'From stdin' | ./generate " + dir + " --tokens 3 --seed 5 --top-p 0.9 --cpu");
    INFO(info.out);
    REQUIRE(info.rc == 0);
    CHECK(info.out.find("From stdin") != std::string::npos);
    CHECK(info.out.find("tokens/s") != std::string::npos);  // the timing line (stderr, merged by sh)
    // Standard input is read to at most 4 MiB: /dev/zero (endless) and a prompt one byte over are one line, at
    // once; one of exactly 4 MiB is read.
    for (const std::string& in : {std::string("< /dev/zero"), std::string("< ") + dir + "/over.txt"}) {
        sh("head -c 4194305 /dev/zero | tr '\\0' a > " + dir + "/over.txt");
        Result big = sh("timeout 60 ./generate " + dir + " --tokens 1 --cpu " + in);
        INFO(in << ": " << big.out);
        CHECK(one_line_error(big));
        CHECK(big.out.find("the prompt on standard input is longer than 4 MiB (4194304 bytes), the most generate reads "
                           "(the model reads only its last T = 32 tokens); pass a shorter one") != std::string::npos);
    }
    sh("head -c 4194304 /dev/zero | tr '\\0' ' ' > " + dir + "/fits.txt");
    Result fits = sh("timeout 300 ./generate " + dir + " --tokens 1 --cpu < " + dir + "/fits.txt");
    INFO(fits.out.substr(fits.out.size() > 2000 ? fits.out.size() - 2000 : 0));
    CHECK(fits.rc == 0);
    CHECK(fits.out.find("longer than T: only its last T are read") != std::string::npos);

    ModelConfig small = inspect_config("uniform", 256, 16);
    const std::vector<float> ps = inspect_params(small, 1);
    save_model(dir + "/small.bin", small, ps.data(), ps.size(), 1);
    for (std::string bad :
         {dir + "/small.bin --prompt hi", dir + "/missing.bin --prompt hi", dir + "/model.bin --temperature -1",
          dir + "/model.bin --top-p 0", std::string("--prompt hi")}) {
        Result r = sh("./generate " + bad);
        INFO(bad << ": " << r.out);
        CHECK(one_line_error(r));
    }
    CHECK(sh("./generate " + dir + "/small.bin --prompt hi").out.find("not trained on GPT-2 tokens") !=
          std::string::npos);
    sh("rm -rf '" + dir + "'");
}
