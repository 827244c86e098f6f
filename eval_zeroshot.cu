// eval_zeroshot: a checkpoint's zero-shot scores, the lm-evaluation-harness v0.4 way (docs/zero_shot.md).
//
//   ./eval_zeroshot out/step_000300/model.bin                        # hellaswag, piqa, arc_easy, winogrande
//   ./eval_zeroshot model.bin --tasks lambada,wikitext --json r.json
//   ./eval_zeroshot out/tiny --json out/tiny/eval.json                # a run directory: its model.bin
//   ./eval_zeroshot out/tiny --log-samples out/tiny/samples.jsonl     # and every example's log-likelihoods
//
// Given a run directory (train_prism -o OUT), it scores OUT/model.bin and reads OUT/run.json (run/run_record.h):
// the run's model, seed and status are printed and written into the JSON ("run"), which `report` reads back
// from OUT/eval.json (where `study` writes it).
// Reads data/eval/TASK.bin (made by data/get_eval.sh; format: eval/eval_file.h), scores it with eval/scoring.h's scorer on
// the engine make_engine picks (the GPU engine when one is built in, else the CPU reference) through the same
// Engine interface the trainer uses, packing --batch rows (one row per choice) into each forward. Prints one
// row per task: examples, acc and acc_norm with standard errors (sample std (n-1) / sqrt(n)), perplexities and
// bits per byte, seconds. Under mpirun every process is a rank (dist/process_group.h): each scores every world-th example on
// its own GPU and the counts are summed, so 8 GPUs take an eighth of the time for the same numbers.
// --log-samples FILE: one JSON line per example (eval/scoring.h's eval_samples_jsonl), the ranks' values summed
// into rank 0's, which writes the file atomically after the last task.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

// defines: load_model (a model.bin, checked), CheckpointError
#include "run/checkpoint.h"
// defines: Flag, parse_flags, print_flags, take_positional
#include "run/cli.h"
// defines: Dist (the ranks; one process otherwise), run_ranks (the error ending)
#include "dist/process_group.h"
// defines: make_engine (the CUDA engine on a GPU, the CPU reference otherwise)
#include "engine.h"
// defines: run_eval_task (the harness's scoring on an Engine), eval_result_json, load_eval_file (eval_file.h)
#include "eval/scoring.h"
// defines: RunRecord, read_run_record (OUT/run.json)
#include "run/run_record.h"
// defines: install_stop_handlers, stop_requested, kExitInterrupted
#include "run/stop_signal.h"
// defines: run_files (what of a run a tool must not write over), check_output_path (util/fs.h)
#include "run/step_dirs.h"

namespace {

struct Options {
    std::string model, tasks = "hellaswag,piqa,arc_easy,winogrande", data = "data/eval", json, samples, tokenizer;
    long limit = 0;
    int batch = 16;
    bool cpu = false;
    bool tasks_given = false;  // --tasks named them: a missing file is an error, not a task left out
};

std::vector<Flag> make_flags(Options& o) {
    std::string all = eval_task_names(",");
    return {
        make_flag("--tasks", "LIST", "comma-separated, from " + all + " (default " + o.tasks + "; 'all' for every one)",
                  [&o, all](const std::string& v) {
                      o.tasks = v == "all" ? all : v;
                      o.tasks_given = true;
                  }),
        path_flag("--data", "DIR", "directory of the eval files TASK.bin (default {default}, made by data/get_eval.sh)",
                  o.data),
        number_flag("--limit", "N", "only the first N examples of each task (default: all)", o.limit, 1, kMaxSteps),
        number_flag("--batch", "B", "rows (one per choice) per forward pass (default {default})", o.batch, 1, 1 << 20),
        path_flag("--json", "FILE", "also write the results as JSON", o.json),
        path_flag("--log-samples", "FILE",
                  "also write every example's choices' log-likelihoods and picks as JSON Lines (docs/zero_shot.md)",
                  o.samples),
        path_flag("--tokenizer", "FILE", "check the eval files were made with this tokenizer (gpt2.tiktoken)",
                  o.tokenizer),
        switch_flag("--cpu", "use the CPU reference even when a GPU engine is available", o.cpu),
    };
}

std::string fmt(const char* f, double v) {
    if (!std::isfinite(v)) return "-";
    char b[64];
    snprintf(b, sizeof b, f, v);
    return b;
}
std::string pct(double p, double se) {
    return std::isfinite(p) ? fmt("%.2f", 100 * p) + " ± " + fmt("%.2f", 100 * se) : "-";
}
// Right-aligned in w columns (printf's widths count bytes, and "±" is two).
std::string pad(const std::string& s, int w) { return std::string(std::max(0, w - py::len(s)), ' ') + s; }

// Every file is read and checked before the first forward: a bad one fails in a second, not after an hour.
struct Prepared {
    LoadedModel m;
    std::vector<EvalFile> files;
    std::unique_ptr<Engine> eng;
    std::string why;
};

Prepared prepare(const Options& o, Dist& dist) {
    Prepared p;
    std::vector<std::string> tasks;
    for (size_t a = 0; a <= o.tasks.size();) {
        size_t b = o.tasks.find(',', a);
        if (b == std::string::npos) b = o.tasks.size();
        std::string t = trim(o.tasks.substr(a, b - a));
        if (t == "lambada_openai") t = "lambada";
        if (!t.empty()) find_eval_task(t), tasks.push_back(t);
        a = b + 1;
    }
    if (tasks.empty()) throw ConfigError("--tasks is empty; name at least one task");
    // The one output rule (util/fs.h), checked first: neither output may replace the model, its run's files or an
    // eval file.
    std::vector<ReadPath> inputs = run_files(o.model);
    for (const auto& t : tasks) inputs.push_back({o.data + "/" + t + ".bin", "the eval file"});
    inputs.push_back({o.tokenizer, "the tokenizer"});
    check_output_path(o.json, "--json", inputs);
    check_output_path(o.samples, "--log-samples", inputs);
    if (!o.tasks_given) {  // the default tasks: score those whose file is there, and name the others
        std::vector<std::string> present, missing;
        for (const auto& t : tasks)
            (access((o.data + "/" + t + ".bin").c_str(), F_OK) == 0 ? present : missing).push_back(t);
        std::string names, words;
        for (const auto& t : missing) names += (names.empty() ? "" : ", ") + t, words += " " + t;
        if (present.empty())
            throw EvalError("no eval file of the default tasks (" + names + ") in " + o.data +
                            "; run data/get_eval.sh, or pass --data DIR");
        if (!missing.empty() && dist.rank == 0)
            fprintf(stderr, "note: no eval file in %s for %s: %s left out (bash data/get_eval.sh%s fetches %s)\n",
                    o.data.c_str(), names.c_str(), missing.size() == 1 ? "it is" : "they are", words.c_str(),
                    missing.size() == 1 ? "it" : "them");
        tasks = present;
    }

    p.m = load_model(is_dir(o.model) ? o.model + "/model.bin" : o.model);
    const LoadedModel& m = p.m;
    uint64_t want = 0;
    if (!o.tokenizer.empty()) want = tokenizer_fingerprint(Tokenizer::load(o.tokenizer));
    std::vector<EvalFile>& files = p.files;
    for (const auto& t : tasks) {
        files.push_back(load_eval_file(o.data + "/" + t + ".bin", m.cfg.V));
        const EvalFile& f = files.back();
        if (f.task != t) throw EvalError("eval file " + f.path + " holds task '" + f.task + "', not '" + t + "'");
        if (want && f.fingerprint != want)
            throw EvalError("eval file " + f.path + " was tokenised with another tokenizer than " + o.tokenizer +
                            "; rebuild it with data/get_eval.sh");
        if (f.fingerprint != files[0].fingerprint)
            throw EvalError("eval file " + f.path + " was tokenised with another tokenizer than " + files[0].path +
                            "; rebuild them all with the same one");
    }

    EngineOptions eo;
    eo.force_cpu = o.cpu, eo.dp = DataParallel{&dist, 0};  // ranks score their own examples: no optimizer to shard
    p.eng = make_engine(m.cfg, eo, p.why);
    p.eng->set_params(m.params.data());
    return p;
}

int run(const Options& o, Dist& dist) {
    const bool lead = dist.rank == 0;
    Prepared p;
    dist.all_or_none([&] { p = prepare(o, dist); });
    const LoadedModel& m = p.m;
    const std::unique_ptr<Engine>& eng = p.eng;
    const std::string& why = p.why;
    RunRecord rec;
    const bool recorded = is_dir(o.model) && read_run_record(o.model, rec);
    if (lead) {
        printf("eval_zeroshot: %s (step %lld, %zu parameters, T = %d)\n", o.model.c_str(), (long long)m.step,
               eng->num_params(), m.cfg.T);
        if (recorded)
            printf("run: %s, heads %s, widths %s, seed %s, %s steps, lr %s; last invocation %s (commit %s)\n",
                   rec.arg("--model").c_str(), rec.arg("--heads-schedule").c_str(), rec.arg("--widths").c_str(),
                   rec.arg("--seed").c_str(), rec.arg("--steps").c_str(), rec.arg("--lr").c_str(), rec.status().c_str(),
                   rec.latest("commit").c_str());
        printf("engine: %s; %s; %d rows per forward%s\n\n", eng->describe().c_str(), why.c_str(), o.batch,
               dist.world > 1 ? ("; " + dist.describe()).c_str() : "");
        printf("%-11s %8s %16s %16s %10s %9s %9s %8s\n", "task", "examples", "acc %", "acc_norm %", "ppl", "byte_ppl",
               "bits/byte", "seconds");
        fflush(stdout);  // a log (study's eval.log) shows what is being scored while it is
    }
    std::vector<EvalResult> results;
    std::string samples;  // --log-samples: the lines of every task, in task order
    for (const auto& f : p.files) {
        EvalSamples per_example;
        EvalResult r = run_eval_task(
            *eng, f, o.batch, o.limit, &dist, [] { return stop_requested(); },
            o.samples.empty() ? nullptr : &per_example);
        if (r.stopped) {  // partial sums are no result: nothing is written, and a rerun (study's too) scores it
            if (lead)
                printf(
                    "eval_zeroshot: stopped by %s during %s; nothing written (--json, --log-samples): run the "
                    "same command again\n",
                    stop_signal_name(g_stop_signal), r.task.c_str());
            fflush(stdout);
            return kExitInterrupted;
        }
        if (!lead) continue;
        if (!o.samples.empty()) samples += eval_samples_jsonl(f, per_example);
        printf("%-11s %8ld %s %s %10s %9s %9s %8.1f\n", r.task.c_str(), r.n, pad(pct(r.acc, r.acc_se), 16).c_str(),
               pad(pct(r.acc_norm, r.acc_norm_se), 16).c_str(), fmt("%.3f", r.ppl).c_str(),
               fmt("%.4f", r.byte_ppl).c_str(), fmt("%.4f", r.bits_per_byte).c_str(), r.seconds);
        fflush(stdout);
        results.push_back(r);
    }
    if (!lead) return 0;
    printf(
        "\nppl: LAMBADA exp(-mean target log-likelihood); WikiText word perplexity. LAMBADA's bytes are its "
        "targets' (\" word\").\n");
    if (!o.json.empty()) {
        std::string s = "{\"model\": " + json::quote(o.model) + ", \"step\": " + std::to_string(m.step);
        if (recorded)
            s += ", \"run\": {\"record\": " + json::quote(rec.path) + ", \"seed\": " + json::quote(rec.arg("--seed")) +
                 ", \"steps\": " + json::quote(rec.arg("--steps")) + ", \"status\": " + json::quote(rec.status()) + "}";
        s += ", \"results\": [";
        for (size_t i = 0; i < results.size(); i++) s += (i ? ",\n  " : "\n  ") + eval_result_json(results[i]);
        s += "\n]}\n";
        try {
            write_atomically(o.json, {{s.data(), s.size()}});
        } catch (const IoError& e) {
            throw EvalError(std::string("--json: ") + e.what());
        }
    }
    if (!o.samples.empty()) {
        try {
            write_atomically(o.samples, {{samples.data(), samples.size()}});
        } catch (const IoError& e) {
            throw EvalError(std::string("--log-samples: ") + e.what());
        }
    }
    return 0;
}

}  // namespace

// Before main, as in train_prism: SIGTERM, SIGINT, SIGHUP and SIGUSR1 (what study and mpirun pass on) stop the
// evaluation after the batch in progress, with kExitInterrupted (75) and no output written.
static const bool g_stop_handlers_installed =
    (g_stop_message =
         "\neval_zeroshot: stop signal: ending the batch in progress; nothing is written (send it "
         "again to exit at once)\n",
     install_stop_handlers(), true);

int main(int argc, char** argv) {
    Dist dist;
    return run_ranks(dist, "use a smaller --batch", [&] {
        dist.start(&argc, &argv, "eval_zeroshot");
        Options o;
        Command cmd{"eval_zeroshot", "MODEL.bin|RUN_DIR [flags]",
                    "Zero-shot scores of a checkpoint (RUN_DIR: its "
                    "model.bin), as lm-evaluation-harness computes them (prompts and metrics: docs/zero_shot.md). "
                    "Under mpirun the examples are split across the ranks.",
                    make_flags(o)};
        cmd.missing = "checkpoint", cmd.min_positional = 1, cmd.max_positional = 1;
        dist.all_or_none([&] {
            const Parsed p = parse_command(cmd, argc, argv);
            if (cmd.help) return;
            o.model = p.positional[0];
            if (!o.json.empty()) check_output_file(o.json, "--json");  // before the evaluation, not after it
            if (!o.samples.empty()) check_output_file(o.samples, "--log-samples");
            if (!o.samples.empty() && !o.json.empty() && same_file(o.samples, o.json))
                throw ConfigError("--log-samples " + printable(o.samples) + " is also the --json file " +
                                  printable(o.json) + "; write them to two files");
        });
        if (cmd.help) {
            if (dist.rank == 0) print_help(stdout, cmd);
            return 0;
        }
        return run(o, dist);
    });
}
