// train_prism: trains a model (docs/training.md) on the GPU when one is present, else on the CPU reference,
// or, with --plan, prints a model's per-layer table and totals and the GPU memory a run at -b B needs, and
// exits. Under mpirun (or srun, or the environment rendezvous) every process is one data-parallel rank.
// main reads top to bottom: the flags (their table is run/defaults.h), --plan, the engine, the data, the run
// (run/run.h: its directory, record and resume rules), then the loop: one step (train_step.h) on every rank, and
// on their own schedules the validation loss, a zero-shot eval task, a text sample and a checkpoint. The global
// batch is what the user asked for: B x T x world x n_micro tokens (run/defaults.h); rank r reads sequences
// [r B, r B + B) of each group of B x world (dataloader.h), so the ranks together are one process with B x world
// rows. Only rank 0 prints, logs and samples.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "dataloader.h"
#include "dist/process_group.h"
#include "engine.h"
#include "eval/scorer.h"
#include "inspect/sampler.h"
#include "memory_plan.h"
#include "model/spec.h"
#include "run/cli.h"
#include "run/defaults.h"
#include "run/plan_views.h"
#include "run/run.h"
#include "run/stop_signal.h"
#include "train_step.h"
#include "util/machine_load.h"

// The flags, on every rank (a bad flag is one message, not one per rank): parsed, a --resume's recorded ones
// beneath them (Run::restore_flags), the model built and the defaults resolved.
static void read_flags(Command& cmd, int argc, char** argv, TrainOptions& o, ModelConfig& cfg, Run& run,
                       std::vector<std::string>& warnings, const Dist& dist) {
    std::vector<std::string> notes;
    parse_command(cmd, argc, argv);
    if (cmd.help) return;
    if (o.json && !o.plan) throw ConfigError("--json only applies to --plan");
    std::string length;  // the run's length is set by one flag at most
    for (auto [given, name] : {std::pair<bool, const char*>{o.steps > 0, "--steps"},
                               {o.tokens > 0, "--tokens"},
                               {o.tokens_per_param > 0, "--tokens-per-param"},
                               {o.epochs > 0, "--epochs"}}) {
        if (given && !length.empty())
            throw ConfigError(length + " and " + name + " both set the run's length; pass one of them");
        if (given) length = name;
    }
    run.restore_flags(o, cmd, argc, argv, gpu_engine_available(o.cpu), notes);
    for (int i = 0; i < argc; i++) o.argv.push_back(argv[i]);
    default_model(o, gpu_engine_available(o.cpu));
    cfg = build_config(o.model, warnings);
    default_run(o, cfg, dist.world, notes);
    if (!o.plan) Run::check_out(o);
    if (o.plan) {  // training's checks of the batch, length and schedule; --epochs needs the shards' size, and a
                   // plan without them (outside the checkout, say) skips that check: a plan needs no data
        size_t tokens = 0;
        bool data = true;
        try {
            if (o.epochs > 0)
                for (const std::string& shard : glob_shards(o.train)) tokens += read_shard_info(shard).tokens;
        } catch (const std::runtime_error&) {
            data = false;
        }
        if (data) plan_run(o, cfg, dist.world, tokens);
    }
    if (dist.rank == 0) {
        for (const auto& w : warnings) fprintf(stderr, "warning: %s\n", w.c_str());
        if (!o.plan)
            for (const auto& n : notes) fprintf(stderr, "note: %s\n", n.c_str());
    }
}

// Mean loss over `tokens` validation tokens, always from the start of the validation shards. Each rank reads
// its share of every group of B x world sequences (its own loader), and the mean is over all ranks: the same
// sequences and the same mean as one process with B x world rows. A stop signal (stop_signal.h) ends it after the
// batch in progress once its grace has passed (StopGrace): then no rank has a whole validation, and the result
// is NaN on every rank (not logged; a resume from that step runs it again: Run::repair).
static double validation_loss(Engine& eng, DataLoader& val, int B, int T, long tokens, const Dist& dist,
                              bool* cut = nullptr) {
    long batches = std::max(1L, tokens / ((long)B * T * dist.world));
    std::vector<int> in((size_t)B * T), tg((size_t)B * T);
    val.reset();
    long done = 0;
    StopGrace grace;
    for (; done < batches && !grace.expired(); done++) {
        val.next_batch(in.data(), tg.data());
        eng.forward(in.data(), tg.data(), B, T);  // adds the batch's mean loss to the engine's loss sum
    }
    double sums[2] = {eng.read_stats().loss / batches, done < batches ? 1.0 : 0.0};
    dist.sum(sums, 2, "the sum of the validation losses");
    if (cut) *cut = sums[1] > 0;
    return sums[1] > 0 ? NAN : sums[0] / dist.world;
}

// "42 s", "3.5 min", "2.1 h"
static std::string short_duration(double s) {
    char b[32];
    if (!std::isfinite(s) || s < 0) return "?";
    if (s < 120) snprintf(b, sizeof b, "%.0f s", s);
    else if (s < 7200) snprintf(b, sizeof b, "%.1f min", s / 60);
    else snprintf(b, sizeof b, "%.1f h", s / 3600);
    return b;
}

// One optimizer step's results as printed (StepRecord: run/run.h, which logs them). `left`: the estimated seconds to
// the last step (this invocation's mean step time, validation included).
static void print_step(const StepRecord& r, long steps, double left) {
    printf("step %5ld/%ld | loss %.4f", r.step, steps, r.loss);
    if (r.has_val) printf(" | val %.4f", r.val_loss);
    printf(" | lr %.2e | norm %6.3f | %7.0f tok/s", r.lr, r.norm, r.tokens_per_s);
    if (!std::isnan(r.mfu)) printf(" | MFU %4.1f%%", 100 * r.mfu);
    printf(" | %.1f s, %s left\n", r.elapsed, short_duration(left).c_str());
}

// The per-layer signals of a step that measured them (layer_stats.h): one line on --layer-stats-every's steps, a row
// per layer at the run's last step. Both name the layer furthest from the others by grad_rms, the gradient's RMS
// per parameter (layer_stats.h's furthest_layer: the largest |ln(grad_rms / median)|), which a layer's size does not
// bias as it does grad_norm.
static void print_layers(const StepRecord& r, const ModelConfig& cfg, bool table) {
    const LayerStats& s = r.layers;
    const LayerOutlier far = furthest_layer(s.grad_rms);
    auto what = [&](int l) {  // "w 32, 4 heads", "w 32, 4 gdn heads", "w 32, no attention", "w 32, 4 heads, no MLP"
        const LayerSpec& x = cfg.layers[l];
        return "w " + std::to_string(x.width) +
               (x.attention ? ", " + std::to_string(x.heads) + (x.gdn() ? " gdn heads" : " heads") : "") +
               (x.attention ? "" : ", no attention") + (x.mlp ? "" : ", no MLP");
    };
    std::string furthest = "none (fewer than two layers with a gradient)";
    if (far.layer >= 0) {
        char b[160];
        snprintf(b, sizeof b, "layer %d (%s), %.2fx the median %.3e", far.layer + 1, what(far.layer).c_str(),
                 far.factor, far.median);
        furthest = b;
    }
    if (!table) return (void)printf("layers: grad_rms furthest from the others: %s\n", furthest.c_str());
    printf("per-layer signals at step %ld (log.jsonl's \"layers\", docs/training.md):\n", r.step);
    printf("  layer  %-28s %10s %10s %10s %10s %12s %10s\n", "", "grad_norm", "grad_rms", "rms attn", "rms mlp",
           "update_ratio", "out_rms");
    auto cell = [](double x, int w) {
        char b[32];
        if (std::isfinite(x)) snprintf(b, sizeof b, "%*.3e", w, x);
        else snprintf(b, sizeof b, "%*s", w, "-");
        return std::string(b);
    };
    for (int l = 0; l < cfg.L(); l++)
        printf("  %5d  %-28s %s %s %s %s %s %s\n", l + 1, what(l).c_str(), cell(s.grad_norm[l], 10).c_str(),
               cell(s.grad_rms[l], 10).c_str(), cell(s.grad_rms_attn[l], 10).c_str(),
               cell(s.grad_rms_mlp[l], 10).c_str(), cell(s.update_ratio[l], 12).c_str(),
               cell(s.out_rms[l], 10).c_str());
    printf("  furthest from the others by grad_rms (largest |log(grad_rms / median)|): %s\n", furthest.c_str());
}

// The run's header: engine, ranks, model, data, batch, learning-rate schedule.
// start, tokens: where a resumed run starts (0, 0 for a fresh one).
static void print_header(const TrainOptions& o, const Engine& eng, const std::string& why, const ModelConfig& cfg,
                         const DataLoader& train, bool val, const RunPlan& p, const Dist& dist, int zero, long start,
                         long tokens) {
    Accounting acc = account(cfg);
    printf("engine: %s (%s)\n", eng.describe().c_str(), why.c_str());
    if (dist.world > 1)
        printf("ranks: %s, ZeRO-%d%s\n", dist.describe().c_str(), zero,
               zero ? " (optimizer state sharded across ranks)" : " (every rank keeps the whole optimizer state)");
    printf("model: %s\n  widths %s\n  heads  %s\n%s  parameters %s, forward FLOPs/token %s\n",
           describe_config(cfg).c_str(), rle_list(layer_widths(cfg)).c_str(), rle_list(layer_heads(cfg)).c_str(),
           layer_column_lines(cfg).c_str(), human((double)acc.params).c_str(),
           human(acc.dense_flops_per_token).c_str());
    printf("data: %s (%s tokens, every token below V checked in %.2f s), val %s\n", o.train.c_str(),
           human((double)train.tokens_total()).c_str(), train.validate_seconds(), val ? o.val.c_str() : "off");
    std::string ranks = p.world > 1 ? " x " + std::to_string(p.world) + " ranks" : "";
    const double total = (double)tokens + (double)(p.steps - start) * p.total_batch;  // seen + still to come
    std::string length = std::to_string(p.steps) + " steps (" + human(total) + " tokens";
    if (start > 0)
        length += ", of which " + human((double)tokens) + " in steps 1.." + std::to_string(start) + " already done";
    printf("batch: B %d x T %d%s x %ld micro-steps = %ld tokens/step; %s)\n", o.B, p.T, ranks.c_str(), p.n_micro,
           p.total_batch, length.c_str());
    printf("%s\n", describe_lr_schedule(lr_schedule(o, p)).c_str());
    fflush(stdout);
}

static double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Trains the model of o.model on `eng` (made for cfg and this rank of dist; `why` says which engine and why).
// Every rank runs this. Returns the exit code (run/stop_signal.h); errors are thrown.
static int train(const TrainOptions& o, const ModelConfig& cfg, Engine& eng, const std::string& why, Run& run,
                 const Dist& dist) {
    const bool lead = dist.rank == 0;  // the rank that prints, logs and samples
    const MachineLoad load;            // the last line says whether the machine was busy (tokens/s not its own)
    std::unique_ptr<DataLoader> train, val;
    std::unique_ptr<TextSampler> sampler;  // rank 0's, when it samples (inspect/sampler.h)
    std::unique_ptr<TaskScorer> scorer;    // loaded up front, so that a missing eval file fails before training
    long val_tokens = o.val_tokens;        // bounded by what the validation shards hold (a note says when)
    RunPlan p;
    // stdout reaches its reader at each step's end (the fflush below), and not between a stop signal and the
    // checkpoint: mpirun stops reading its ranks' output (a terminal it made) once it is told to end the job, and
    // kills them a second later, so a step's lines written into that full terminal would wait there with the
    // checkpoint unwritten. Fully buffered, they wait in this buffer instead, and go with the last words.
    setvbuf(stdout, nullptr, _IOFBF, 1 << 16);
    // The set-up, on every rank, in three phases; a failure anywhere ends every rank with one message
    // (dist/process_group.h) at the end of its phase. Decide, then act: OUT is locked (a branch a stopped run left
    // half done, completed), then every rule and every read, then OUT changed (run/run.h).
    dist.all_or_none([&] { run.open(o, cfg); });
    dist.all_or_none([&] {
        const int T = train_seq_len(o, cfg);
        train.reset(new DataLoader(o.train, o.B, T, dist.rank, dist.world, o.shuffle, o.seed, cfg.V));
        if (o.val_every > 0) {
            val.reset(new DataLoader(o.val, o.B, T, dist.rank, dist.world, false, 0, cfg.V));
            check_shard_sets(train->shards(), val->shards());
        }
        p = run.plan(*train, val.get());
        if (val) {  // more would read the same sequences again, for as long as it is asked (hours at 1e11)
            const long all = (long)val->batches_per_epoch() * o.B * T * dist.world;
            if (val_tokens > all) {
                val_tokens = all;
                if (lead)
                    fprintf(stderr,
                            "note: --val-tokens %ld is more than the validation shards %s hold in batches "
                            "of B %d x T %d x %d rank%s; each validation reads their %ld tokens\n",
                            o.val_tokens, o.val.c_str(), o.B, T, dist.world, dist.world > 1 ? "s" : "", all);
            }
        }
        if (o.sample_every > 0 && lead) sampler = TextSampler::open(o.tokenizer, cfg.V, o.sample_flag_given);
        if (o.eval_every > 0) scorer.reset(new TaskScorer(o.eval_data + "/" + o.eval_task + ".bin", cfg.V));
        run.decide(eng, *train);
    });
    dist.all_or_none([&] { run.begin(eng, why); });
    auto validate = [&](bool* cut) { return validation_loss(eng, *val, o.B, p.T, val_tokens, dist, cut); };
    auto evaluate = [&] { return scorer->score(eng, o.B, o.eval_limit, dist); };
    run.repair(val ? validate : std::function<double(bool*)>(), scorer ? evaluate : std::function<std::string()>());
    if (const int sig = run.stop_signal()) return run.interrupted_at_start(sig);
    long start = run.start_step(), tokens = run.tokens();
    uint64_t rng = run.rng();
    if (lead) print_header(o, eng, why, cfg, *train, val != nullptr, p, dist, zero_stage(o, dist.world), start, tokens);

    const double peak = eng.peak_flops() * dist.world;  // 0 on the CPU: no MFU column
    const double flops_per_token = account(cfg).dense_flops_per_token;
    std::vector<int> in((size_t)p.micro_tokens), tg((size_t)p.micro_tokens);
    install_stop_handlers();  // main installed them already; here for callers that did not (the tests)
    long streak = 0;          // steps in a row whose loss or gradient norm was not finite
    const double t0 = now_seconds();
    for (long step = start; step < p.steps; step++) {
        Watchdog::get().set_step(step);
        const double ts = now_seconds();
        StepRecord r;
        r.lr = lr_at(run.schedule(), step);
        const StepStats s = train_step(
            eng, [&](int* i, int* t) { train->next_batch(i, t); }, o.B, p.T, p.n_micro, o.clip, r.lr, o.opt, in, tg,
            dist.world);
        r.loss = s.loss, r.norm = s.grad_norm;  // both summed over the ranks by the engine: the same on every rank
        if (o.layer_stats_every > 0 && ((step + 1) % o.layer_stats_every == 0 || step + 1 == p.steps))
            r.layers = eng.layer_stats();  // a collective, right after the step's read (in its time per step)
        // A NaN or inf anywhere reaches the loss or the norm. The engine's adamw_step skips such a step by itself
        // (on the GPU without a wait: the update kernel reads the step's loss and norm on the device), so it
        // changes nothing: no update, the moments and the step count stay, the next zero_grad drops its gradients.
        r.skipped = !std::isfinite(r.loss) || !std::isfinite(r.norm);
        streak = r.skipped ? streak + 1 : 0;
        tokens += p.total_batch;
        r.step = step + 1, r.tokens = tokens;
        r.tokens_per_s = p.total_batch / (now_seconds() - ts);
        const bool last = step + 1 == p.steps, stopping = o.stop_after > 0 && step + 1 - start == o.stop_after;
        if (val && ((step + 1) % o.val_every == 0 || last)) {
            bool cut = false;
            r.val_loss = validate(&cut);
            r.has_val = !cut;  // cut short by a stop signal: not logged
            if (cut && lead) printf("validation at step %ld: cut short by the stop signal, not logged\n", step + 1);
        }
        r.elapsed = now_seconds() - t0;
        if (peak > 0) r.mfu = 3.0 * flops_per_token * r.tokens_per_s / peak;
        if (lead) print_step(r, p.steps, r.elapsed / (step + 1 - start) * (p.steps - step - 1));
        if (lead && r.skipped)
            printf("step %ld: non-finite %s: update skipped (%ld in a row; the run stops at --max-nonfinite %d)\n",
                   r.step, std::isfinite(r.loss) ? "gradient norm" : "loss", streak, o.max_nonfinite);
        if (lead && !r.layers.grad_norm.empty()) print_layers(r, cfg, last);
        std::string line = log_step(r);
        if (scorer && ((step + 1) % o.eval_every == 0 || last)) {
            // Uses the engine's activations; the next step's forward rebuilds them, so training is unaffected.
            const std::string e = evaluate();
            if (!e.empty()) line += ", \"eval\": " + e;
        }
        run.log(line + "}\n");
        if (sampler && (step + 1) % o.sample_every == 0)  // rank 0 only: forward passes, no collectives
            printf("sample: %s\n", sampler->sample(eng, o.sample_tokens, rng, p.T).c_str());
        if (!stop_requested()) fflush(stdout);
        // The checkpoint and the ends: non-finite steps, a stop signal, --stop-after.
        int sig = run.stop_signal();
        if (streak >= o.max_nonfinite || (streak > 0 && (last || stopping)))
            return run.diverged(r.step - streak + 1, r.step);
        const bool ckpt = (o.ckpt_every > 0 && (step + 1) % o.ckpt_every == 0) || last || stopping || sig;
        if (ckpt && streak == 0) {
            run.save(eng, train->state(), step + 1, tokens, rng);
            if (!sig) sig = run.stop_signal();  // one that came during the write: stop now, it is saved
        }
        if (ckpt && streak > 0) run.no_checkpoint(r.step);
        if (sig) return run.interrupted(sig, r.step);
        if (!stop_requested()) fflush(stdout);
        if (stopping && !last) return run.stopped(r.step);
    }
    return run.done(load.line());
}

// The body of main on every rank; errors are thrown (run_ranks reports them).
static int train_main(int argc, char** argv, Dist& dist) {
    TrainOptions o;
    Command cmd = train_prism_command(o);
    ModelConfig cfg;
    std::vector<std::string> warnings;
    Run run(dist);
    dist.all_or_none([&] { read_flags(cmd, argc, argv, o, cfg, run, warnings, dist); });
    if (cmd.help) {
        if (dist.rank == 0) print_help(stdout, cmd);
        return 0;
    }
    if (o.plan) {
        if (dist.rank > 0) return 0;
        std::string title = o.model.preset + " (heads " + o.model.heads + ", widths " + o.model.widths + ")";
        if (o.json) {
            print_plan_json(stdout, title, cfg, warnings, optimizer_plan_columns(o, cfg));
        } else {
            print_plan(stdout, title, cfg, optimizer_plan_columns(o, cfg));
            print_gpu_memory(stdout, cfg, o.B, o.T ? o.T : cfg.T);
        }
        return 0;
    }
    if (dist.rank == 0) {  // a stop signal ignored since the start (a script's background job's SIGINT), said once
        const std::string note = ignored_stop_signals_note("train_prism", (long)getpid());
        if (!note.empty()) fprintf(stderr, "%s\n", note.c_str());
    }
    Watchdog::get().set_limit(o.comm_timeout);
    std::string why;
    std::unique_ptr<Engine> eng;
    EngineOptions eo;
    eo.force_cpu = o.cpu, eo.recompute = o.recompute, eo.B = o.B, eo.T = o.T ? o.T : cfg.T;
    eo.dp = DataParallel{&dist, zero_stage(o, dist.world)}, eo.multipliers = optimizer_multipliers(o, cfg);
    dist.all_or_none([&] { eng = make_engine(cfg, eo, why); });
    try {
        return train(o, cfg, *eng, why, run, dist);
    } catch (const AgreedFailure& e) {
        throw run.explain(e);
    }
}

// Before main, as the program's static objects are built: a stop signal from then on is honoured (a run
// stopped during its start-up ends with kExitInterrupted); only one that lands while the kernel and the dynamic
// loader start the process takes the signal's default action.
static const bool g_stop_handlers_installed = (install_stop_handlers(), true);

int main(int argc, char** argv) {
    for (int i = 1; i + 1 < argc;
         i++)  // the watchdog's limit bounds the process group's forming too (dist/process_group.h)
        if (std::string(argv[i]) == "--comm-timeout") {
            char* end = nullptr;
            const double s = strtod(argv[i + 1], &end);
            if (*end == 0 && s >= 1 && s <= 1e6) Watchdog::get().set_limit(s);  // else parse_flags says why
        }
    Dist dist;
    return run_ranks(dist, "use a smaller model or batch (-b)", [&] {
        dist.start(&argc, &argv, "train_prism");
        return train_main(argc, argv, dist);
    });
}
