// generate: text from a checkpoint, streamed as it is sampled.
//
//   ./generate out/tiny/model.bin --prompt "And God said"
//   echo "To be, or not to be" | ./generate out/tiny --tokens 200 --temperature 0.7 --top-p 0.9 --seed 7
//
// Loads model.bin (or RUN_DIR/model.bin), makes the engine for this machine (engine.cpp: the GPU when present) and
// a KV-cache decoder on it (Engine::make_decoder), encodes EOT + the prompt with the GPT-2 tokenizer (a document starts
// after EOT in the training shards), and samples with inspect/sampling.h: the prompt is printed, then each token as it
// is sampled (stdout flushed per token; a character split across tokens is printed when complete). Stops after
// --tokens tokens or at EOT. Past the context T the cache slides (inspect/sampling.h). Progress and timings go to stderr,
// so stdout is the text alone.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "run/checkpoint.h"
#include "run/cli.h"
#include "inspect/recompute_decoder.h"
#include "engine.h"
#include "run/plan_views.h"
#include "util/fs.h"
#include "inspect/sampling.h"
#include "text/tokenizer.h"

namespace {

struct Options {
    std::string model, prompt, tokenizer = default_tokenizer_path();
    bool has_prompt = false, cpu = false, no_cache = false;
    int tokens = 128, top_k = 200, samples = 1;
    double temperature = 0.8, top_p = 1.0;
    long seed = 1337;
};

std::vector<Flag> make_flags(Options& o) {
    return {
        text_flag("-p, --prompt", "TEXT",
                  "the text to continue (default: read standard input to its end; empty: from "
                  "EOT alone)",
                  o.prompt)
            .then([&o] { o.has_prompt = true; }),
        number_flag("-n, --tokens", "N", "tokens to sample (default {default}; sampling stops earlier at EOT)",
                    o.tokens, 1, 1 << 24),
        number_flag("--temperature", "T",
                    "divide the logits by T (default {default}; 0: greedy, the most likely token "
                    "every time)",
                    o.temperature, 0, 100),
        number_flag("--top-k", "K", "sample among the K most likely tokens only (default {default}; 0: all)", o.top_k,
                    0, kMaxInt),
        number_flag("--top-p", "P",
                    "then among the most likely tokens whose probabilities add up to P (default "
                    "{default}: all)",
                    o.top_p, 1e-6, 1),
        number_flag("--seed", "S", "seed of the sampling RNG (default {default})", o.seed, 0, kMaxLong),
        number_flag("--samples", "N", "independent samples of the same prompt, one after the other (default {default})",
                    o.samples, 1, 1000),
        path_flag("--tokenizer", "FILE", std::string("GPT-2 ranks file (") + kTokenizerHelp + ")", o.tokenizer),
        switch_flag("--no-cache", "no KV cache: a full forward over the whole context per token (slow; for checking)",
                    o.no_cache),
        switch_flag("--cpu", "use the CPU reference even when a GPU engine is available", o.cpu),
    };
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run(Options& o) {
    const std::string path = is_dir(o.model) ? o.model + "/model.bin" : o.model;
    LoadedModel m = load_model(path);
    const Tokenizer tok = Tokenizer::load(o.tokenizer);
    if (m.cfg.V < tok.vocab_size())
        throw ConfigError("the model's vocabulary has V = " + std::to_string(m.cfg.V) + " tokens but the tokenizer " +
                          o.tokenizer + " has " + std::to_string(tok.vocab_size()) +
                          ": this checkpoint was not trained on GPT-2 tokens, so its text cannot be decoded");
    if (!o.has_prompt) {
        if (isatty(0)) fprintf(stderr, "generate: reading the prompt from standard input (end it with Ctrl-D)\n");
        // Bounded: only the last T tokens are read anyway, and a pipe from /dev/zero must not fill the memory.
        const size_t kMaxPrompt = (size_t)4 << 20;
        o.prompt.resize(kMaxPrompt + 1);
        const size_t got = fread(&o.prompt[0], 1, o.prompt.size(), stdin);
        if (ferror(stdin))
            throw ConfigError(std::string("cannot read the prompt from standard input: ") + strerror(errno));
        if (got > kMaxPrompt)
            throw ConfigError("the prompt on standard input is longer than 4 MiB (" + std::to_string(kMaxPrompt) +
                              " bytes), the most generate reads (the model reads only its last T = " +
                              std::to_string(m.cfg.T) + " tokens); pass a shorter one, e.g. through tail -c 100000");
        o.prompt.resize(got);
    }
    std::vector<int> context = {tok.eot()};
    tok.encode(o.prompt, context);

    std::string why;
    std::unique_ptr<Engine> eng = make_engine(m.cfg, o.cpu, why);
    eng->set_params(m.params.data());
    std::unique_ptr<Decoder> dec;
    if (o.no_cache) dec.reset(new RecomputeDecoder(*eng, m.cfg.T));
    else dec = eng->make_decoder(m.cfg.T);
    fprintf(stderr, "generate: %s (step %lld): %s\n%s", path.c_str(), (long long)m.step, describe_config(m.cfg).c_str(),
            layer_column_lines(m.cfg).c_str());
    fprintf(stderr, "generate: %s (%s); %s", eng->describe().c_str(), why.c_str(), dec->describe().c_str());
    if (dec->cache_bytes()) fprintf(stderr, ", %.2f MiB for T = %d", dec->cache_bytes() / 1048576.0, dec->capacity());
    fprintf(stderr, "\ngenerate: prompt %zu tokens (EOT + %zu)%s\n", context.size(), context.size() - 1,
            (int)context.size() > m.cfg.T ? "; longer than T: only its last T are read" : "");

    SamplingOptions s;
    s.temperature = o.temperature, s.top_k = o.top_k, s.top_p = o.top_p;
    s.vocab_limit = tok.vocab_size();  // ids past the tokenizer's (a padded vocabulary) would not decode
    uint64_t rng = sampling_rng_state((uint64_t)o.seed);
    const int V = m.cfg.V, stop = tok.eot();
    for (int k = 0; k < o.samples; k++) {
        if (o.samples > 1) printf("%s--- sample %d of %d ---\n", k ? "\n" : "", k + 1, o.samples);
        fwrite(o.prompt.data(), 1, o.prompt.size(), stdout);  // all of it: a NUL in the prompt is one of its bytes
        fflush(stdout);
        Utf8Stream text;
        long produced = 0;
        const auto t0 = std::chrono::steady_clock::now();
        continue_text(*dec, V, context, o.tokens, s, rng, stop, [&](int t) {
            fputs(text.push(tok.decode(&t, 1)).c_str(), stdout);
            fflush(stdout);
            produced++;
        });
        fputs((text.finish() + "\n").c_str(), stdout);
        fflush(stdout);
        const double sec = seconds_since(t0);
        fprintf(stderr, "generate: %ld tokens in %.2f s (%.1f tokens/s)%s\n", produced, sec, produced / sec,
                produced < o.tokens ? ", stopped at EOT" : "");
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    Command cmd{"generate", "MODEL.bin|RUN_DIR [flags]",
                "Text from a checkpoint, sampled with a KV cache and printed "
                "as it is sampled (the GPU when present, else the CPU).",
                make_flags(o)};
    cmd.missing = "checkpoint", cmd.min_positional = 1, cmd.max_positional = 1;
    return command_main(cmd, argc, argv, "", [&](const Parsed& p) {
        o.model = p.positional[0];
        return run(o);
    });
}
