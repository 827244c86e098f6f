// test/hf/hf_check.cpp: the C++ side of `make test-hf` (test/hf/test_hf.py drives it): test models and the
// reference numbers the exported PyTorch model is compared with.
//
//   hf_check make-model OUT.bin [model flags] [--seed S] [--step N] [--scale X]
//       a model.bin of any config (train_prism's model flags), GPT-2 initialised, every matrix then scaled by X
//       (default 5: attention far from uniform, so RoPE and the masks matter) and every norm weight and bias
//       drawn at random (so that a norm mapped to the wrong tensor shows)
//   hf_check logits MODEL.bin TOKENS.i32 B OUT.f32
//       the fp32 CPU reference's logits (B, S, V) of the B x S int32 tokens in TOKENS.i32
//   hf_check requests MODEL.bin EVAL.bin [N]
//       per request of the first N examples (default all) of a choice or target eval file: one JSON line with
//       its context and continuation as text and tokens, norm_len and its log-likelihood as eval_zeroshot
//       scores it (eval/scoring.h's eval_task_sums on the CPU engine, the request alone as a one-request target task)
//   hf_check encode TEXT_FILE
//       our tokenizer's ids of the file's bytes, one line of space-separated numbers
//   hf_check visible N
//       attention_span.h's visibility rule for every window W in 0..N (0: global): one line per W of N x N
//       characters, row-major over (query i, key j), '1' where key j is visible to query i
#include <cstdio>
#include <string>
#include <vector>

#include "attention_span.h"
#include "run/checkpoint.h"
#include "run/cli.h"
#include "run/model_flags.h"
#include "ref/cpu_engine.h"
#include "eval/scoring.h"
#include "ref/reference.h"
#include "text/tokenizer.h"

namespace {

int make_model(int argc, char** argv) {
    ModelSpec spec;
    long seed = 1, step = 0;
    double scale = 5;
    std::vector<Flag> flags;
    add_model_flags(flags, spec);
    flags.push_back(number_flag("--seed", "S", "", seed, 0, kMaxLong));
    flags.push_back(number_flag("--step", "N", "", step, 0, kMaxLong));
    flags.push_back(number_flag("--scale", "X", "", scale, 0, 100));
    parse_flags(argc, argv, flags, "hf_check make-model");  // argv[0] is OUT.bin
    std::vector<std::string> warnings;
    const ModelConfig c = build_config(spec, warnings);
    const ParamLayout layout = param_layout(c);
    std::vector<float> p(layout.total);
    ref::init_params(p.data(), c, layout, (uint64_t)seed);
    ref::Rng rng((uint64_t)seed * 7919 + 17);
    for (const ParamTensor& t : layout.tensors) {
        float* x = p.data() + t.offset;
        for (size_t i = 0; i < t.numel(); i++) {
            if (t.is_matrix) x[i] *= (float)scale;
            else x[i] += (float)(0.3 * rng.normal());  // weights around 1, biases around 0
        }
    }
    save_model(argv[0], c, p.data(), p.size(), step);
    printf("%s: %zu parameters, widths", argv[0], p.size());
    for (const LayerSpec& s : c.layers) printf(" %d/%d", s.width, s.heads);
    printf("\n");
    return 0;
}

int logits(char** argv) {
    const LoadedModel m = load_model(argv[0]);
    const std::vector<unsigned char> raw = read_file_bytes(argv[1], "tokens");
    const int B = parse_int_flag("B", argv[2]);
    const size_t n = raw.size() / 4;
    if (B < 1 || n % B) throw ConfigError("the tokens file does not hold B rows");
    const int S = (int)(n / B);
    std::vector<int> tokens(n);
    memcpy(tokens.data(), raw.data(), n * 4);
    ref::RefModel<float> model(m.cfg);
    model.params = m.params;
    model.forward(tokens.data(), nullptr, B, S);
    write_atomically(argv[3], {{model.logits(), n * m.cfg.V * 4}});
    return 0;
}

int requests(int argc, char** argv) {
    const LoadedModel m = load_model(argv[0]);
    const EvalFile f = load_eval_file(argv[1], m.cfg.V);
    if (f.kind == EvalKind::Rolling)
        throw ConfigError("requests: rolling tasks have no (context, continuation) requests");
    const long limit = argc > 2 ? parse_long_flag("N", argv[2]) : (long)f.ex.size();
    const Tokenizer tok = Tokenizer::load(default_tokenizer_path());
    CpuEngine eng(m.cfg);
    eng.set_params(m.params.data());
    for (long e = 0; e < std::min<long>(limit, (long)f.ex.size()); e++)
        for (size_t r = 0; r < f.ex[e].req.size(); r++) {
            const EvalExample& x = f.ex[e];
            const EvalRequest& q = x.req[r];
            EvalFile one = f;  // this request alone, scored as a target task: its LL is the task's LL sum
            one.kind = EvalKind::Target, one.ex.assign(1, x), one.ex[0].req.assign(1, q);
            const double ll = eval_task_sums(eng, one, 1)[EvalSums::LL];
            auto ids = [&](int a, int b) {
                std::string s = "[";
                for (int i = a; i < b; i++) s += (i > a ? "," : "") + std::to_string(x.tokens[i]);
                return s + "]";
            };
            const std::string ctx = tok.decode(x.tokens.data() + q.ctx_begin, q.ctx_end - q.ctx_begin);
            const std::string cont = tok.decode(x.tokens.data() + q.cont_begin, q.cont_end - q.cont_begin);
            printf(
                "{\"example\": %ld, \"request\": %zu, \"gold\": %d, \"norm_len\": %d, \"context\": %s, "
                "\"continuation\": %s, "
                "\"context_ids\": %s, \"continuation_ids\": %s, \"ll\": %.17g}\n",
                e, r, x.gold, q.norm_len, json::quote(ctx).c_str(), json::quote(cont).c_str(),
                ids(q.ctx_begin, q.ctx_end).c_str(), ids(q.cont_begin, q.cont_end).c_str(), ll);
        }
    return 0;
}

int encode(char** argv) {
    const std::vector<unsigned char> text = read_file_bytes(argv[0], "text");
    const Tokenizer tok = Tokenizer::load(default_tokenizer_path());
    const std::vector<int> ids = tok.encode(std::string_view((const char*)text.data(), text.size()));
    for (size_t i = 0; i < ids.size(); i++) printf("%s%d", i ? " " : "", ids[i]);
    printf("\n");
    return 0;
}

int visible(char** argv) {
    const int n = std::stoi(argv[0]);
    for (int W = 0; W <= n; W++) {
        std::string line;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) line += att_visible(i, j, W) ? '1' : '0';
        printf("%s\n", line.c_str());
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return run_tool("hf_check", "", [&] {
        const std::string cmd = argc > 1 ? argv[1] : "";
        if (cmd == "make-model" && argc >= 3) return make_model(argc - 2, argv + 2);
        if (cmd == "logits" && argc == 6) return logits(argv + 2);
        if (cmd == "requests" && (argc == 4 || argc == 5)) return requests(argc - 2, argv + 2);
        if (cmd == "encode" && argc == 3) return encode(argv + 2);
        if (cmd == "visible" && argc == 3) return visible(argv + 2);
        throw ConfigError(
            "usage: hf_check make-model OUT.bin [flags] | logits MODEL TOKENS B OUT | requests MODEL EVAL [N] | encode "
            "FILE | visible N");
    });
}
