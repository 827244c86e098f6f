// train_prism: the command line and training loop (README "Training") on whichever Engine this machine has (engine.h), plus
// `--plan`, which prints a model's per-layer table and totals and exits. One step:
//   zero_grad; for each of n_micro micro-batches: forward, backward(1 / n_micro)   (gradient accumulation)
//   clip the global norm; lr from the schedule (linear warmup, cosine to final_lr_frac * lr); AdamW
// Each step prints one line and appends one JSON object to OUT/log.jsonl. Checkpoints go to
// OUT/step_XXXXXXXX/{model.bin, state_rank0.bin} (written in a .tmp directory, then renamed), OUT/latest names
// the newest complete one, and OUT/model.bin is a hard link to its model. --resume continues from OUT/latest
// with the identical loss sequence of an uninterrupted run. See README.md for every flag.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "cli.h"
#include "dataloader.h"
#include "engines.h"
#include "eval.h"
#include "plan.h"
#include "ref_optimizer.h"
#include "schedule.h"
#include "tokenizer.h"

struct TrainOptions {
    ModelSpec model;
    bool plan = false, json = false, help = false, cpu = false, resume = false;
    std::string train = "data/default/*_train_*.bin", val = "data/default/*_val_*.bin", out = "out/tiny";
    std::string tokenizer = "data/cache/gpt2.tiktoken";
    int B = 16, T = 0;          // micro-batch rows; T = 0: the model's context
    long total_batch = 0;       // tokens per optimizer step (0: one micro-batch); a multiple of B * T
    long steps = 0;             // optimizer steps (0: from --tokens / --tokens-per-param, else 150)
    long tokens = 0;            // token budget
    double tokens_per_param = 0;
    double lr = 3e-3, warmup_frac = 0.025, final_lr_frac = 0.1, clip = 1.0;
    OptimizerHyper opt;
    uint64_t seed = 1337;
    bool shuffle = true;
    long val_every = 50, val_tokens = 8192, ckpt_every = 0, sample_every = 50;
    bool sample_flag_given = false;
    long stop_after = 0;        // stop (with a checkpoint) after this many steps of this invocation
    int sample_tokens = 48, keep = 2;
    long eval_every = 0, eval_limit = 500;  // a zero-shot task every N steps (eval.h), on this many examples
    std::string eval_task = "hellaswag", eval_data = "data/eval";
};

static std::vector<Flag> make_flags(TrainOptions& o) {
    std::vector<Flag> f;
    f.push_back({"-h, --help", "", "print this help and exit", [&o](const std::string&) { o.help = true; }});
    f.push_back({"--plan", "", "print the model's per-layer table and totals and exit", [&o](const std::string&) { o.plan = true; }});
    f.push_back({"--json", "", "with --plan: print it as JSON", [&o](const std::string&) { o.json = true; }});
    add_model_flags(f, o.model);
    f.push_back({"--train", "GLOB", "training shards (default data/default/*_train_*.bin)", [&o](const std::string& v) { o.train = v; }});
    f.push_back({"--val", "GLOB", "validation shards (default data/default/*_val_*.bin)", [&o](const std::string& v) { o.val = v; }});
    f.push_back({"-o, --out", "DIR", "output directory: log.jsonl, checkpoints (default out/tiny)", [&o](const std::string& v) { o.out = v; }});
    f.push_back({"-b, --batch", "B", "micro-batch rows (default 16)", int_flag("--batch", o.B, 1)});
    f.push_back({"-t, --train-seq", "T", "training sequence length (default: the model's context)", int_flag("--train-seq", o.T, 1)});
    f.push_back({"--total-batch", "TOKENS", "tokens per optimizer step; a multiple of B*T (gradient accumulation)",
                 long_flag("--total-batch", o.total_batch, 1)});
    f.push_back({"--steps", "N", "optimizer steps (default 150, the quick tiny run, unless a token budget is given)", long_flag("--steps", o.steps, 1)});
    f.push_back({"--tokens", "N", "token budget: steps = N / total batch", long_flag("--tokens", o.tokens, 1)});
    f.push_back({"--tokens-per-param", "R", "token budget of R tokens per parameter (the papers use 25 to 30)",
                 double_flag("--tokens-per-param", o.tokens_per_param, 1e-9, 1e6)});
    f.push_back({"--lr", "LR", "peak learning rate (default 3e-3)", double_flag("--lr", o.lr, 0, 10)});
    f.push_back({"--warmup-frac", "F", "linear warmup over this fraction of the steps (default 0.025)", double_flag("--warmup-frac", o.warmup_frac, 0, 1)});
    f.push_back({"--final-lr-frac", "F", "cosine decays to F * lr (default 0.1)", double_flag("--final-lr-frac", o.final_lr_frac, 0, 1)});
    f.push_back({"--wd", "W", "AdamW weight decay on matrices (default 0.1)", double_flag("--wd", o.opt.weight_decay, 0, 10)});
    f.push_back({"--beta1", "B1", "AdamW beta1 (default 0.9)", double_flag("--beta1", o.opt.beta1, 0, 0.999999)});
    f.push_back({"--beta2", "B2", "AdamW beta2 (default 0.95)", double_flag("--beta2", o.opt.beta2, 0, 0.999999)});
    f.push_back({"--adam-eps", "E", "AdamW epsilon (default 1e-8)", double_flag("--adam-eps", o.opt.eps, 0, 1)});
    f.push_back({"--clip", "C", "clip the global gradient norm to C (0: off; default 1.0)", double_flag("--clip", o.clip, 0, 1e9)});
    f.push_back({"--seed", "S", "seed for init, data order and sampling (default 1337)", [&o](const std::string& v) {
                     long s = parse_long_flag("--seed", v);
                     if (s < 0) throw ConfigError("--seed must be non-negative");
                     o.seed = (uint64_t)s;
                 }});
    f.push_back({"--no-shuffle", "", "read shards and windows in order", [&o](const std::string&) { o.shuffle = false; }});
    f.push_back({"--val-every", "N", "validation loss every N steps and at the end (0: never; default 50)", long_flag("--val-every", o.val_every, 0)});
    f.push_back({"--val-tokens", "N", "tokens per validation (default 8192)", long_flag("--val-tokens", o.val_tokens, 1)});
    f.push_back({"--ckpt-every", "N", "checkpoint every N steps; always one at the end (default: only at the end)",
                 long_flag("--ckpt-every", o.ckpt_every, 0)});
    f.push_back({"--keep", "K", "checkpoints to keep (default 2)", int_flag("--keep", o.keep, 1)});
    f.push_back({"--stop-after", "N", "stop after N steps of this run, with a checkpoint (e.g. to fit a job time limit)",
                 long_flag("--stop-after", o.stop_after, 1)});
    f.push_back({"--resume", "", "continue from OUT/latest (pass the same flags as the first run)",
                 [&o](const std::string&) { o.resume = true; }});
    f.push_back({"--sample-every", "N", "print a text sample every N steps (0: never; default 50)",
                 [&o](const std::string& v) {
                     o.sample_every = parse_long_flag("--sample-every", v);
                     if (o.sample_every < 0) throw ConfigError("--sample-every must be at least 0");
                     o.sample_flag_given = true;
                 }});
    f.push_back({"--sample-tokens", "N", "tokens per sample (default 48)", int_flag("--sample-tokens", o.sample_tokens, 1)});
    f.push_back({"--tokenizer", "FILE", "GPT-2 ranks file for samples (default data/cache/gpt2.tiktoken)",
                 [&o](const std::string& v) { o.tokenizer = v; }});
    f.push_back({"--eval-every", "N", "run the zero-shot task --eval-task every N steps and log it (0: never)",
                 long_flag("--eval-every", o.eval_every, 0)});
    f.push_back({"--eval-task", "TASK", "hellaswag | piqa | arc_easy | winogrande | lambada | wikitext (default hellaswag)",
                 [&o](const std::string& v) { o.eval_task = v; }});
    f.push_back({"--eval-limit", "N", "examples per in-training eval (0: all; default 500)", long_flag("--eval-limit", o.eval_limit, 0)});
    f.push_back({"--eval-data", "DIR", "prepared eval files (default data/eval, see data/get_eval.sh)",
                 [&o](const std::string& v) { o.eval_data = v; }});
    f.push_back({"--cpu", "", "train on the CPU reference even when a GPU is present", [&o](const std::string&) { o.cpu = true; }});
    return f;
}

static double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static bool is_dir(const std::string& p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

static void make_dirs(const std::string& path) {
    std::string cur;
    for (size_t i = 0; i <= path.size(); i++) {
        if (i == path.size() || path[i] == '/') {
            if (!cur.empty() && !is_dir(cur) && mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
                throw ConfigError("cannot create directory " + cur + ": " + strerror(errno));
        }
        if (i < path.size()) cur += path[i];
    }
}

static void remove_tree(const std::string& dir) {
    DIR* d = opendir(dir.c_str());
    if (!d) return;
    while (dirent* e = readdir(d)) {
        std::string n = e->d_name;
        if (n != "." && n != "..") unlink((dir + "/" + n).c_str());
    }
    closedir(d);
    rmdir(dir.c_str());
}

static std::string read_text(const std::string& path) {
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) return "";
    std::string s;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
    fclose(f);
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
}

static std::string step_dir_name(long step) {
    char b[32];
    snprintf(b, sizeof b, "step_%08ld", step);
    return b;
}

// Writes OUT/step_N.tmp/{model.bin,state_rank0.bin}, renames the directory to OUT/step_N, then points
// OUT/latest and OUT/model.bin at it (each by an atomic rename), and prunes all but the newest `keep`.
// A crash at any point leaves OUT/latest naming a complete checkpoint.
static void save_checkpoint(const TrainOptions& o, Engine& eng, const DataLoader& loader, long step, long tokens,
                            uint64_t rng, std::vector<long>& kept) {
    std::string name = step_dir_name(step), dir = o.out + "/" + name, tmp = dir + ".tmp";
    remove_tree(tmp);
    make_dirs(tmp);
    std::vector<float> params(eng.num_params());
    eng.get_params(params.data());
    save_model(tmp + "/model.bin", eng.config(), params.data(), params.size(), step);
    TrainState st;
    st.step = step;
    st.tokens = tokens;
    st.rng = rng;
    LoaderState ls = loader.state();
    st.loader.assign((const unsigned char*)&ls, (const unsigned char*)&ls + sizeof ls);
    long t;
    eng.get_optimizer(st.m, st.v, t);
    save_state(tmp + "/state_rank0.bin", st);
    remove_tree(dir);
    if (rename(tmp.c_str(), dir.c_str()) != 0)
        throw CheckpointError("cannot rename " + tmp + " to " + dir + ": " + strerror(errno));
    write_atomically(o.out + "/latest", {{name.c_str(), name.size()}, {"\n", 1}});
    std::string link_tmp = o.out + "/model.bin.tmp";
    unlink(link_tmp.c_str());
    if (link((dir + "/model.bin").c_str(), link_tmp.c_str()) == 0) rename(link_tmp.c_str(), (o.out + "/model.bin").c_str());
    kept.push_back(step);
    while ((int)kept.size() > o.keep) {
        remove_tree(o.out + "/" + step_dir_name(kept.front()));
        kept.erase(kept.begin());
    }
}

// Mean loss over `tokens` validation tokens, always from the start of the validation shards.
static double validate(Engine& eng, DataLoader& val, int B, int T, long tokens) {
    long batches = std::max(1L, tokens / ((long)B * T));
    std::vector<int> in((size_t)B * T), tg((size_t)B * T);
    val.reset();
    double sum = 0;
    for (long i = 0; i < batches; i++) {
        val.next_batch(in.data(), tg.data());
        sum += eng.forward(in.data(), tg.data(), B, T);
    }
    return sum / batches;
}

// Ancestral sampling at temperature 1 from EOT, with our own RNG so samples are part of the reproducible state.
static std::string sample_text(Engine& eng, const Tokenizer& tok, int n, uint64_t& rng, int T) {
    std::vector<int> ctx = {tok.eot()}, out;
    const int V = eng.config().V;
    std::vector<float> logits(V);
    for (int i = 0; i < n; i++) {
        int len = std::min((int)ctx.size(), T);
        eng.forward(ctx.data() + ctx.size() - len, nullptr, 1, len);
        eng.logits_at(0, len - 1, logits.data());
        float mx = *std::max_element(logits.begin(), logits.end());
        double sum = 0;
        for (float& x : logits) sum += (x = std::exp(x - mx));
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(rng >> 11) * 0x1.0p-53 * sum;
        int next = V - 1;
        for (int v = 0; v < V; v++)
            if ((u -= logits[v]) <= 0) {
                next = v;
                break;
            }
        if (next == tok.eot()) break;
        ctx.push_back(next);
        out.push_back(next);
    }
    return tok.decode(out);
}

// Keeps the log lines of steps <= last_step (a resumed run rewrites what the interrupted one logged after its
// checkpoint, so the log reads as one uninterrupted run).
static void truncate_log(const std::string& path, long last_step) {
    std::string all = read_text(path), kept;
    size_t a = 0;
    while (a < all.size()) {
        size_t b = all.find('\n', a);
        std::string line = all.substr(a, b == std::string::npos ? std::string::npos : b - a);
        long s = -1;
        if (sscanf(line.c_str(), "{\"step\": %ld", &s) == 1 && s <= last_step) kept += line + "\n";
        if (b == std::string::npos) break;
        a = b + 1;
    }
    write_atomically(path, {{kept.data(), kept.size()}});
}

static int run(TrainOptions& o) {
    std::vector<std::string> warnings;
    ModelConfig cfg = build_config(o.model, warnings);
    for (const auto& w : warnings) fprintf(stderr, "warning: %s\n", w.c_str());
    int T = o.T ? o.T : cfg.T;
    if (T > cfg.T) throw ConfigError("--train-seq " + std::to_string(T) + " exceeds the model's context T = " + std::to_string(cfg.T));
    long micro_tokens = (long)o.B * T;
    long total_batch = o.total_batch ? o.total_batch : micro_tokens;
    if (total_batch % micro_tokens != 0)
        throw ConfigError("--total-batch " + std::to_string(total_batch) + " is not a multiple of B*T = " +
                          std::to_string(micro_tokens) + "; change --total-batch or -b");
    long n_micro = total_batch / micro_tokens;
    size_t P = param_layout(cfg).total;
    long steps = o.steps;
    if (!steps && o.tokens) steps = std::max(1L, o.tokens / total_batch);
    if (!steps && o.tokens_per_param > 0) steps = std::max(1L, (long)(o.tokens_per_param * P / total_batch));
    if (!steps) steps = 150;
    long warmup = (long)std::lround(o.warmup_frac * steps);

    std::string why;
    std::unique_ptr<Engine> eng = make_engine(cfg, o.cpu, why);
    DataLoader train(o.train, o.B, T, 0, 1, o.shuffle, o.seed, cfg.V);
    std::unique_ptr<DataLoader> val;
    if (o.val_every > 0) val.reset(new DataLoader(o.val, o.B, T, 0, 1, false, 0, cfg.V));
    std::unique_ptr<Tokenizer> tok;
    if (o.sample_every > 0) {
        try {
            tok.reset(new Tokenizer(Tokenizer::load(o.tokenizer)));
        } catch (const std::runtime_error& e) {
            if (o.sample_flag_given) throw;  // asked for samples explicitly: a missing tokenizer is an error
            fprintf(stderr, "note: no text samples (%s)\n", e.what());
        }
    }
    std::unique_ptr<EvalFile> evalf;  // loaded up front so that a missing file fails before training starts
    if (o.eval_every > 0) evalf.reset(new EvalFile(load_eval_file(o.eval_data + "/" + o.eval_task + ".bin", cfg.V)));

    make_dirs(o.out);
    long start = 0, tokens = 0;
    uint64_t rng = o.seed * 0x9E3779B97F4A7C15ull + 1;
    std::vector<long> kept;
    if (o.resume) {
        std::string latest = read_text(o.out + "/latest");
        if (latest.empty())
            throw ConfigError("--resume: no checkpoint in " + o.out + " (OUT/latest is missing); train without --resume first");
        std::string dir = o.out + "/" + latest;
        LoadedModel m = load_model(dir + "/model.bin");
        if (param_layout(m.cfg).total != P || layer_widths(m.cfg) != layer_widths(cfg) ||
            layer_heads(m.cfg) != layer_heads(cfg) || m.cfg.d != cfg.d || m.cfg.V != cfg.V || m.cfg.norm != cfg.norm ||
            m.cfg.tied != cfg.tied)
            throw ConfigError("--resume: " + dir + " holds a different model (" + describe_config(m.cfg) +
                              "); pass the model flags of the first run");
        TrainState st = load_state(dir + "/state_rank0.bin", P);
        eng->set_params(m.params.data());
        eng->set_optimizer(st.m, st.v, (long)st.step);
        LoaderState ls;
        if (st.loader.size() != sizeof ls) throw CheckpointError(dir + ": data-loader position has the wrong size");
        memcpy(&ls, st.loader.data(), sizeof ls);
        train.restore(ls);
        start = st.step, tokens = st.tokens, rng = st.rng;
        kept.push_back(start);
        truncate_log(o.out + "/log.jsonl", start);
        printf("resumed from %s at step %ld (%ld tokens)\n", dir.c_str(), start, tokens);
    } else {
        eng->init_params(o.seed);
        FILE* lf = fopen((o.out + "/log.jsonl").c_str(), "w");
        if (!lf) throw ConfigError("cannot write " + o.out + "/log.jsonl: " + strerror(errno));
        fclose(lf);
    }
    if (start > steps) throw ConfigError("--resume: the checkpoint is at step " + std::to_string(start) +
                                         ", beyond --steps " + std::to_string(steps));

    Accounting acc = account(cfg);
    printf("engine: %s (%s)\n", eng->describe().c_str(), why.c_str());
    printf("model: %s\n  widths %s\n  heads  %s\n  parameters %s, forward FLOPs/token %s\n", describe_config(cfg).c_str(),
           rle_list(layer_widths(cfg)).c_str(), rle_list(layer_heads(cfg)).c_str(), human((double)acc.params).c_str(),
           human(acc.dense_flops_per_token).c_str());
    printf("data: %s (%s tokens), val %s\n", o.train.c_str(), human((double)train.tokens_total()).c_str(),
           val ? o.val.c_str() : "off");
    printf("batch: B %d x T %d x %ld micro-steps = %ld tokens/step; %ld steps (%s tokens), warmup %ld, lr %g -> %g\n",
           o.B, T, n_micro, total_batch, steps, human((double)steps * total_batch).c_str(), warmup, o.lr,
           o.lr * o.final_lr_frac);
    fflush(stdout);

    const double peak = eng->peak_flops();  // 0 on the CPU: no MFU column
    FILE* log = fopen((o.out + "/log.jsonl").c_str(), "a");
    if (!log) throw ConfigError("cannot append to " + o.out + "/log.jsonl: " + strerror(errno));
    std::vector<int> in((size_t)micro_tokens), tg((size_t)micro_tokens);
    double t0 = now_s(), elapsed_before = 0;
    for (long step = start; step < steps; step++) {
        double ts = now_s();
        eng->zero_grad();
        double loss = 0;
        for (long k = 0; k < n_micro; k++) {
            train.next_batch(in.data(), tg.data());
            loss += eng->forward(in.data(), tg.data(), o.B, T) / n_micro;
            eng->backward(1.0f / n_micro);
        }
        double norm = eng->clip_grad_norm(o.clip);
        double lr = ref::lr_at(step, steps, warmup, o.lr, o.final_lr_frac);
        eng->adamw_step(lr, o.opt);
        tokens += total_batch;
        double dt = now_s() - ts, tps = total_batch / dt;
        bool last = step + 1 == steps, stopping = o.stop_after > 0 && step + 1 - start == o.stop_after;
        double vloss = NAN;
        if (val && ((step + 1) % o.val_every == 0 || last)) vloss = validate(*eng, *val, o.B, T, o.val_tokens);
        double elapsed = elapsed_before + now_s() - t0;
        printf("step %5ld/%ld | loss %.4f", step + 1, steps, loss);
        if (!std::isnan(vloss)) printf(" | val %.4f", vloss);
        printf(" | lr %.2e | norm %6.3f | %7.0f tok/s", lr, norm, tps);
        double mfu = peak > 0 ? 3.0 * acc.dense_flops_per_token * tps / peak : NAN;
        if (!std::isnan(mfu)) printf(" | MFU %4.1f%%", 100 * mfu);
        printf(" | %.1f s\n", elapsed);
        fprintf(log, "{\"step\": %ld, \"tokens\": %ld, \"train_loss\": %.6f", step + 1, tokens, loss);
        if (!std::isnan(vloss)) fprintf(log, ", \"val_loss\": %.6f", vloss);
        fprintf(log, ", \"lr\": %.6e, \"grad_norm\": %.6f, \"tokens_per_s\": %.1f, \"elapsed_s\": %.3f", lr, norm,
                tps, elapsed);
        if (!std::isnan(mfu)) fprintf(log, ", \"mfu\": %.4f", mfu);
        if (evalf && ((step + 1) % o.eval_every == 0 || last)) {
            // Uses the engine's activations; the next step's forward rebuilds them, so training is unaffected.
            EvalResult r = run_eval_task(*eng, *evalf, o.B, o.eval_limit);
            printf("eval %s: %ld examples, acc %.4f", r.task.c_str(), r.n, r.acc);
            if (r.has_norm) printf(", acc_norm %.4f", r.acc_norm);
            printf(" (%.1f s)\n", r.seconds);
            fprintf(log, ", \"eval\": %s", eval_result_json(r).c_str());
        }
        fprintf(log, "}\n");
        fflush(log);
        if (tok && (step + 1) % o.sample_every == 0)
            printf("sample: %s\n", sample_text(*eng, *tok, o.sample_tokens, rng, T).c_str());
        if ((o.ckpt_every > 0 && (step + 1) % o.ckpt_every == 0) || last || stopping)
            save_checkpoint(o, *eng, train, step + 1, tokens, rng, kept);
        fflush(stdout);
        if (stopping && !last) {
            printf("stopped after %ld steps; continue with the same flags plus --resume\n", o.stop_after);
            fclose(log);
            return 0;
        }
    }
    fclose(log);
    printf("done: %s/model.bin\n", o.out.c_str());
    return 0;
}

int main(int argc, char** argv) {
    TrainOptions o;
    std::vector<Flag> flags = make_flags(o);
    try {
        parse_flags(argc, argv, flags, "train_prism");
        if (o.help) {
            printf("usage: train_prism [flags]\n\nTrains a model (default: tiny on data/default/) on the GPU when one is "
                   "present, else on the CPU.\n\n");
            print_flags(stdout, flags);
            return 0;
        }
        if (o.json && !o.plan) throw ConfigError("--json only applies to --plan");
        if (o.plan) {
            std::vector<std::string> warnings;
            ModelConfig cfg = build_config(o.model, warnings);
            for (const auto& w : warnings) fprintf(stderr, "warning: %s\n", w.c_str());
            std::string title = o.model.preset + " (heads " + o.model.heads + ", widths " + o.model.widths + ")";
            if (o.json) print_plan_json(stdout, title, cfg, warnings);
            else print_plan(stdout, title, cfg);
            return 0;
        }
        return run(o);
    } catch (const std::runtime_error& e) {  // ConfigError, CheckpointError, data and tokenizer errors
        fprintf(stderr, "train_prism: error: %s\n", e.what());
    } catch (const std::bad_alloc&) {
        fprintf(stderr, "train_prism: error: out of memory; use a smaller model or batch (-b)\n");
    }
    return 1;
}
