// train_prism: trains a model (docs/training.md) on the GPU when one is present, else on the CPU reference,
// or, with --plan, prints a model's per-layer table and totals and the GPU memory a run at -b B needs, and
// exits. Under mpirun (or srun, or the environment rendezvous) every process is one data-parallel rank. This
// file is main: the flags (their table is run/train_flags.h), a resume's recorded flags, --plan, the engine, the loop.
#include <glob.h>

#include <memory>
#include <string>
#include <vector>

// defines: ModelConfig, LayerSpec, ModelSpec, presets, head and width schedules, add_model_flags
#include "model_config.h"
// defines: TrainOptions (every flag's value), the machine-, model- and data-dependent defaults
#include "run/defaults.h"
// defines: Flag, parse_flags, print_flags (--help from the table the parser reads), the numeric flag appliers
#include "run/cli.h"
// defines: Dist (MPI, srun or the environment rendezvous; one process otherwise), run_ranks (the error ending)
#include "dist/process_group.h"
// defines: make_engine (the CUDA engine on a GPU, the CPU reference otherwise), EngineOptions
#include "engine_factory.h"
// defines: gpu_memory, print_gpu_memory (what --plan says a GPU run needs)
#include "memory_plan.h"
// defines: print_plan, print_plan_json (--plan's per-layer table and totals)
#include "run/plan_views.h"
// defines: run_training (the loop: steps, validation, checkpoints, the log), LoopSeam (what it does through other folders)
#include "train_loop.h"
// defines: train_prism_seam (the run record's flags, text samples, the in-training eval: the loop's seam filled in)
#include "run/loop_seam.h"
// defines: plan_run (RunPlan: the batch and the length)
#include "run/run_plan.h"
// defines: make_train_flags (the flag table: --help is rendered from it), which flags a resume may change
#include "run/train_flags.h"
// defines: RunRecord (OUT/run.json: the resolved flags, the model, one entry per invocation)
#include "run/run_record.h"

// The one output rule (util/fs.h), before OUT is created or locked: OUT is none of the files the run reads (the
// shards, the eval file, the tokenizer) and holds none of them (--overwrite deletes in it).
static void check_out_dir(const TrainOptions& o) {
    std::vector<ReadPath> inputs;
    for (const std::string& pattern : {o.train, o.val}) {
        glob_t g;
        if (glob(pattern.c_str(), 0, nullptr, &g) == 0)
            for (size_t i = 0; i < g.gl_pathc; i++) inputs.push_back({g.gl_pathv[i], "the shard"});
        globfree(&g);
    }
    if (o.eval_every > 0) inputs.push_back({o.eval_data + "/" + o.eval_task + ".bin", "the eval file"});
    inputs.push_back({o.tokenizer.empty() ? default_tokenizer_path() : o.tokenizer, "the tokenizer"});
    check_output_path(o.out, "-o", inputs, true);
}

// The body of main on every rank; errors are thrown (run_ranks reports them).
static int train_main(int argc, char** argv, Dist& dist) {
    TrainOptions o;
    Command cmd = train_prism_command(o);
    ModelConfig cfg;
    std::vector<std::string> warnings, notes;
    RunRecord record;  // OUT/run.json of the run a --resume continues
    bool recorded = false;
    std::string unrecorded;  // a --resume of an OUT without run.json: that OUT
    dist.all_or_none([&] {   // a bad flag is one message, not one per rank
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
        if (o.allow_batch_change && !o.resume && !o.plan)
            throw ConfigError("--allow-batch-change only applies to --resume");
        if (o.allow_data_change && !o.resume && !o.plan)
            throw ConfigError("--allow-data-change only applies to --resume");
        if (o.resume && !o.plan) {  // the recorded flags first, the ones given now on top (run/train_flags.h)
            default_model(o, gpu_engine_available(o.cpu));
            const std::string out = o.out.empty() ? default_out_dir(o.model) : o.out;
            if (read_run_record(out, record)) {
                std::vector<std::string> args = restore_recorded_args(record, argc, argv, cmd.flags);
                std::vector<char*> av;
                for (std::string& a : args) av.push_back(&a[0]);
                o = TrainOptions();
                parse_flags((int)av.size(), av.data(), cmd.flags, "train_prism");
                if (o.out.empty()) o.out = out;
                recorded = true;
            } else if (is_dir(out)) {
                unrecorded = out;
                notes.push_back(out +
                                " holds no run.json (a run from before run records): resuming with the flags "
                                "given, which must be the first run's");
            }
        }
        for (int i = 0; i < argc; i++) o.argv.push_back(argv[i]);
        default_model(o, gpu_engine_available(o.cpu));
        cfg = build_config(o.model, warnings);
        default_run(o, cfg, dist.world, notes);
        if (!o.plan) check_out_dir(o);
        if (o.plan) {  // training's checks of the batch, length and schedule; --epochs needs the shards' size
            size_t tokens = 0;
            if (o.epochs > 0)
                for (const std::string& shard : glob_shards(o.train)) tokens += read_shard_info(shard).tokens;
            plan_run(o, cfg, dist.world, tokens);
        }
        if (dist.rank == 0) {
            for (const auto& w : warnings) fprintf(stderr, "warning: %s\n", w.c_str());
            if (!o.plan)
                for (const auto& n : notes) fprintf(stderr, "note: %s\n", n.c_str());
        }
    });
    if (cmd.help) {
        if (dist.rank == 0) print_help(stdout, cmd);
        return 0;
    }
    if (o.plan) {
        if (dist.rank > 0) return 0;
        std::string title = o.model.preset + " (heads " + o.model.heads + ", widths " + o.model.widths + ")";
        if (o.json) {
            print_plan_json(stdout, title, cfg, warnings);
        } else {
            print_plan(stdout, title, cfg);
            print_gpu_memory(stdout, cfg, o.B, o.T ? o.T : cfg.T);
        }
        return 0;
    }
    Watchdog::get().set_limit(o.comm_timeout);
    std::string why;
    std::unique_ptr<Engine> eng;
    EngineOptions eo;
    eo.force_cpu = o.cpu, eo.recompute = o.recompute, eo.B = o.B, eo.T = o.T ? o.T : cfg.T;
    eo.dp = DataParallel{&dist, zero_stage(o, dist.world)};
    dist.all_or_none([&] { eng = make_engine(cfg, eo, why); });
    try {
        return run_training(o, cfg, *eng, why, dist, train_prism_seam(), recorded ? &record : nullptr);
    } catch (const AgreedFailure& e) {
        // A set-up error of such a resume (it writes run.json once set up) most likely comes from flags that are
        // not the first run's: run.json was deleted, or the run is from before records. Say so on the one line.
        if (unrecorded.empty() || access(run_record_path(unrecorded).c_str(), F_OK) == 0) throw;
        throw AgreedFailure(std::string(e.what()) + " (" + unrecorded +
                            "/run.json is missing, so only the flags given "
                            "apply: pass the first run's flags, or restore run.json from a copy)");
    }
}

// Before main, as the program's static objects are built: a stop signal from then on is honoured (train_loop.h
// ends a run stopped during its start-up with kExitInterrupted); only one that lands while the kernel and the
// dynamic loader start the process takes the signal's default action.
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
