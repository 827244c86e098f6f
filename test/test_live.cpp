// test_live.cpp: tools/prism_live.py, the live view (docs/live.md), checked end to end: micro trainings, the bridge,
// then each library's own reader (TensorBoard's plugin_event_accumulator, the loader behind its dashboards, and its
// EventAccumulator.Scalars, what scripts read scalars with; W&B's `wandb leet inspect --json` of the offline run's
// transaction log) reads back what it wrote, compared value by value with log.jsonl, run.json and eval.json.
// Python is $PRISM_PYTHON, else python3; a library that does not import there is skipped (test/skip.h: counted as
// skipped, a failure where PRISM_REQUIRE names it; CI's venv has both), and then the bridge's one-line error
// naming its pip package is what is checked.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "test/skip.h"
#include "test/train_util.h"
#include "util/json.h"

namespace {

std::string python() {
    const char* p = getenv("PRISM_PYTHON");
    return p && *p ? p : "python3";
}

bool importable(const std::string& module) { return sh(python() + " -c 'import " + module + "'").rc == 0; }

// W&B's reader of an offline run's transaction log (the .wandb file) is `wandb leet inspect`, in recent wandb.
bool wandb_readable() {
    if (sh(python() + " -m wandb leet inspect --help").rc == 0) return true;
    PRISM_SKIP("wandb",
               "this wandb has no `wandb leet inspect` to read an offline run back: its read-back is skipped "
               "(pip install -U wandb)");
    return false;
}

// Prints what a library's own reader finds, one fact a line:
//   scalar RUN STEP TAG VALUE | hparam RUN KEY JSON | text RUN TAG JSON | config RUN JSON | summary RUN KEY VALUE
//   | simple RUN STEP TAG VALUE (TensorBoard's EventAccumulator.Scalars)
const char* kReader = R"PY(
import glob, json, os, subprocess, sys
kind, where = sys.argv[1], sys.argv[2]
if kind == "tb":
    from tensorboard.backend.event_processing import event_accumulator as sea
    from tensorboard.backend.event_processing import plugin_event_accumulator as ea
    from tensorboard.plugins.hparams import plugin_data_pb2
    from tensorboard.util import tensor_util
    for run in sorted(os.listdir(where)):
        acc = ea.EventAccumulator(os.path.join(where, run), size_guidance={ea.TENSORS: 0})
        acc.Reload()
        for tag in acc.Tags()["tensors"]:
            plugin = acc.SummaryMetadata(tag).plugin_data.plugin_name
            for e in acc.Tensors(tag):
                v = tensor_util.make_ndarray(e.tensor_proto)
                if plugin == "text":
                    print("text", run, tag, json.dumps(v.item().decode()))
                elif plugin == "scalars":
                    print("scalar", run, e.step, tag, repr(float(v.item())))
        for tag, content in acc.PluginTagToContent("hparams").items():
            d = plugin_data_pb2.HParamsPluginData.FromString(content)
            for k, v in d.session_start_info.hparams.items():
                x = v.WhichOneof("kind")
                print("hparam", run, k, json.dumps(getattr(v, x) if x else None))
        sacc = sea.EventAccumulator(os.path.join(where, run), size_guidance={sea.SCALARS: 0})
        sacc.Reload()
        for tag in sacc.Tags()["scalars"]:
            for e in sacc.Scalars(tag):
                print("simple", run, e.step, tag, repr(float(e.value)))
else:
    for f in sorted(glob.glob(os.path.join(where, "wandb", "offline-run-*", "run-*.wandb"))):
        cmd = [sys.executable, "-m", "wandb", "leet", "inspect", "--json", f]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        name = None
        for line in out.splitlines():
            r = json.loads(line)
            t = r.get("type")
            if t == "run":
                name = r["run"]["display_name"]
                print("config", name, json.dumps(r["run"].get("config", {}).get("update", {})))
            elif t == "config":
                print("config", name, json.dumps(r["config"].get("update", {})))
            elif t == "history":
                for k, v in r["history"]["item"].items():
                    if not k.startswith("_"):
                        print("scalar", name, r["history"]["step"]["num"], k, repr(float(v)))
            elif t == "summary":
                for k, v in r["summary"]["update"].items():
                    if not k.startswith("_"):
                        print("summary", name, k, repr(float(v)))
)PY";

// What a reader printed.
struct ReadBack {
    std::map<std::tuple<std::string, long, std::string>, double> scalars;  // (run, step, tag) -> value
    std::map<std::tuple<std::string, long, std::string>, double> simple;   // EventAccumulator.Scalars' (TensorBoard)
    int duplicates = 0;                                                    // a (run, step, tag) seen twice
    std::map<std::pair<std::string, std::string>, std::string> hparams, summary;
    std::map<std::string, std::string> config, text;  // run -> the last JSON / text
    std::set<std::string> runs;
};

ReadBack read_back(const std::string& kind, const std::string& where, const std::string& tmp) {
    std::ofstream(tmp + "/reader.py") << kReader;
    Result r = sh("(" + python() + " " + tmp + "/reader.py " + kind + " " + where + " 2>" + tmp + "/reader.err)");
    INFO(r.out << sh("cat " + tmp + "/reader.err").out);
    REQUIRE(r.rc == 0);
    ReadBack b;
    std::istringstream in(r.out);
    std::string what, run, line;
    while (std::getline(in, line)) {
        std::istringstream l(line);
        l >> what >> run;
        std::string rest;
        std::getline(l >> std::ws, rest);
        if (what == "scalar" || what == "hparam" || what == "summary" || what == "config" || what == "text")
            b.runs.insert(run);
        if (what == "scalar" || what == "simple") {
            std::istringstream s(rest);
            long step;
            std::string tag, value;
            s >> step >> tag >> value;
            auto& into = what == "scalar" ? b.scalars : b.simple;
            if (!into.emplace(std::make_tuple(run, step, tag), std::stod(value)).second) b.duplicates++;
        } else if (what == "hparam" || what == "summary") {
            const size_t sp = rest.find(' ');
            (what == "hparam" ? b.hparams : b.summary)[{run, rest.substr(0, sp)}] = rest.substr(sp + 1);
        } else if (what == "config") {
            if (rest != "{\"_wandb\": {}}") b.config[run] = rest;
        } else if (what == "text") {
            b.text[run] = json::parse(rest.substr(rest.find(' ') + 1)).str;
        }
    }
    return b;
}

// log.jsonl's fields and the scalar tag each is logged as (tools/prism_live.py's STEP_TAGS).
const std::vector<std::pair<std::string, std::string>> kTags = {
    {"train_loss", "train/loss"},     {"val_loss", "val/loss"},   {"lr", "train/lr"},
    {"grad_norm", "train/grad_norm"}, {"tokens", "train/tokens"}, {"tokens_per_s", "perf/tokens_per_s"},
    {"elapsed_s", "perf/elapsed_s"},  {"mfu", "perf/mfu"}};

// Every number of every step of the log at `log_path` was read back for `run`, equal (TensorBoard keeps float32:
// equal as float32, W&B doubles: equal), and the run holds no other step scalar. Returns the log's number count.
size_t check_log(const ReadBack& b, const std::string& run, const std::string& log_path, bool float32) {
    std::ifstream f(log_path);
    std::string line;
    size_t numbers = 0, steps = 0;
    while (std::getline(f, line)) {
        const json::Value o = json::parse(line);
        const long step = std::stol(o.find("step")->str);
        steps++;
        for (const auto& [key, tag] : kTags) {
            const json::Value* v = o.find(key);
            if (!v || v->kind != json::Value::Number) continue;
            numbers++;
            const double want = std::stod(v->str);
            auto it = b.scalars.find({run, step, tag});
            INFO(run << " step " << step << " " << tag << " logged " << v->str);
            REQUIRE(it != b.scalars.end());
            if (float32) CHECK((float)it->second == (float)want);
            else CHECK(it->second == want);
        }
        // The per-layer signals (--layer-stats-every): layers/KIND/LNN, layer NN (from 1, two digits) of KIND.
        const json::Value* layers = o.find("layers");
        for (const auto& [kind, values] : layers ? layers->obj : decltype(layers->obj)()) {
            for (size_t l = 0; l < values.arr.size(); l++) {
                if (values.arr[l].kind != json::Value::Number) continue;
                numbers++;
                char tag[64];
                snprintf(tag, sizeof tag, "layers/%s/L%02zu", kind.c_str(), l + 1);
                auto it = b.scalars.find({run, step, tag});
                INFO(run << " step " << step << " " << tag << " logged " << values.arr[l].str);
                REQUIRE(it != b.scalars.end());
                if (float32) CHECK((float)it->second == (float)std::stod(values.arr[l].str));
                else CHECK(it->second == std::stod(values.arr[l].str));
            }
        }
    }
    size_t read = 0;
    for (const auto& [k, v] : b.scalars)
        if (std::get<0>(k) == run && std::get<2>(k).rfind("zeroshot/", 0) != 0) read++;
    CHECK(read == numbers);
    CHECK(steps > 0);
    return numbers;
}

// Waits up to `seconds` for `text` in the file at `path`.
bool wait_for(const std::string& path, const std::string& text, int seconds) {
    for (int i = 0; i < seconds * 10; i++) {
        if (read_file(path).find(text) != std::string::npos) return true;
        usleep(100000);
    }
    return false;
}

const std::string kBridge = "tools/prism_live.py";

}  // namespace

TEST_CASE(
    "live: a finished run and its zero-shot scores, imported with --once, read back by TensorBoard's and W&B's "
    "own readers",
    "[live]") {
    if (sh(python() + " -c 'import json'").rc != 0) {
        PRISM_SKIP("python3", "no " << python() << " to run tools/prism_live.py with (set PRISM_PYTHON)");
        return;
    }
    const std::string dir = make_data_dir(), out = dir + "/tiny-run";
    Result t = sh(micro(dir, out) + " --steps 20");
    INFO(t.out);
    REQUIRE(t.rc == 0);
    // eval_zeroshot --json's form (eval/scoring.h's eval_result_json), as study writes it beside the run.
    std::ofstream(out + "/eval.json") << "{\"model\": \"" << out << "/model.bin\", \"step\": 20, \"results\": [\n"
                                      << "  {\"task\": \"piqa\", \"examples\": 16, \"acc\": 0.5625, \"acc_stderr\": "
                                         "0.1280868845, \"acc_norm\": 0.625, \"acc_norm_stderr\": 0.125}\n]}\n";
    const bool tb = importable("tensorboard"), wb = importable("wandb");
    Result none = sh(python() + " " + kBridge + " " + out + " --once");
    CHECK(none.rc == 1);
    CHECK(none.out == "prism_live: error: nothing to write to: pass --tensorboard LOGDIR and/or --wandb\n");

    {  // TensorBoard
        if (!tb) {
            PRISM_SKIP("tensorboard", "the tensorboard package is not importable by "
                                          << python() << " (set PRISM_PYTHON to a python with it): its read-back");
            Result e = sh(python() + " " + kBridge + " " + out + " --tensorboard " + dir + "/tb --once");
            INFO(e.out);
            CHECK(e.rc == 1);
            CHECK(one_line_error(e));
            CHECK(e.out.find("pip install tensorboard\n") != std::string::npos);
        } else {
            Result r = sh(python() + " " + kBridge + " " + out + " --tensorboard " + dir + "/tb --once");
            INFO(r.out);
            REQUIRE(r.rc == 0);
            CHECK(r.out.find("tiny-run: done at step 20 (logged to step 20)") != std::string::npos);
            ReadBack b = read_back("tb", dir + "/tb", dir);
            CHECK(b.duplicates == 0);
            CHECK(check_log(b, "tiny-run", out + "/log.jsonl", true) > 40);  // 20 steps x 6 fields, 2 val losses
            // Every scalar is one that EventAccumulator.Scalars returns too, the per-layer ones by layer from 1.
            CHECK(b.simple.size() == b.scalars.size());
            CHECK(b.simple == b.scalars);
            const std::string last = read_log(out + "/log.jsonl")[20];
            for (const char* kind :
                 {"grad_norm", "grad_rms", "grad_rms_attn", "grad_rms_mlp", "update_ratio", "out_rms"}) {
                INFO(kind);
                const std::string tag = std::string("layers/") + kind + "/L02";  // the micro model's second layer
                REQUIRE(b.simple.count({"tiny-run", 20, tag}));
                const json::Value ly = *json::parse(last).find("layers");
                CHECK((float)b.simple.at({"tiny-run", 20, tag}) == (float)std::stod(ly.find(kind)->arr[1].str));
            }
            CHECK(b.scalars.at({"tiny-run", 20, "zeroshot/piqa/acc"}) == 0.5625);
            CHECK((float)b.scalars.at({"tiny-run", 20, "zeroshot/piqa/acc_norm"}) == 0.625f);
            // The run record's flags, model and per-layer table as hyper-parameters, and as text.
            CHECK(b.hparams.at({"tiny-run", "args/lr"}) == "0.01");
            CHECK(b.hparams.at({"tiny-run", "args/steps"}) == "20.0");
            CHECK(b.hparams.at({"tiny-run", "model/widths"}) == "\"32x2\"");
            CHECK(b.hparams.at({"tiny-run", "layer/01/width"}) == "32.0");
            CHECK(b.hparams.at({"tiny-run", "layer/02/heads"}) == "2.0");
            CHECK(b.text.at("tiny-run").find("| --lr | 0.01 |") != std::string::npos);
            // Its columns are the record's own (run.json's "layers"), in the record's order.
            CHECK(b.text.at("tiny-run")
                      .find("| layer | width | heads | kv_heads | hidden | window | attention | mlp | "
                            "rope | mixer | head_dim |") != std::string::npos);
            CHECK(b.text.at("tiny-run").find("| 2 | 32 | 2 | 2 | 96 | 0 | True | True | True | attention | 16 |") !=
                  std::string::npos);
            // Imported again into the same LOGDIR: the second import replaces the first (its SessionLog START at
            // step 0), so every value is still there once.
            REQUIRE(sh(python() + " " + kBridge + " " + out + " --tensorboard " + dir + "/tb --once").rc == 0);
            ReadBack again = read_back("tb", dir + "/tb", dir);
            CHECK(again.duplicates == 0);
            CHECK(again.scalars == b.scalars);
        }
    }
    {  // Weights & Biases, offline
        if (!wb) {
            PRISM_SKIP("wandb", "the wandb package is not importable by "
                                    << python() << " (set PRISM_PYTHON to a python with it): its read-back");
            Result e = sh(python() + " " + kBridge + " " + out + " --wandb --wandb-mode offline --once");
            INFO(e.out);
            CHECK(e.rc == 1);
            CHECK(one_line_error(e));
            CHECK(e.out.find("pip install wandb\n") != std::string::npos);
        } else {
            Result r = sh("WANDB_API_KEY= " + python() + " " + kBridge + " " + out + " --wandb --wandb-mode offline " +
                          "--wandb-project prism-test --wandb-dir " + dir + "/wb --once");
            INFO(r.out);
            REQUIRE(r.rc == 0);
            CHECK(r.out.find("upload: wandb sync " + dir + "/wb/wandb/offline-run-") != std::string::npos);
        }
        if (wb && wandb_readable()) {
            ReadBack b = read_back("wb", dir + "/wb", dir);
            CHECK(b.runs == std::set<std::string>{"tiny-run"});
            CHECK(b.duplicates == 0);
            CHECK(check_log(b, "tiny-run", out + "/log.jsonl", false) > 40);
            CHECK(b.summary.at({"tiny-run", "zeroshot/piqa/acc"}) == "0.5625");
            CHECK(b.summary.at({"tiny-run", "zeroshot/piqa/examples"}) == "16.0");
            const json::Value cfg = json::parse(b.config.at("tiny-run"));
            CHECK(cfg.find("args")->find("lr")->str == "0.01");
            CHECK(cfg.find("args")->find("heads-schedule")->str == "uniform");
            const json::Value* layers = cfg.find("model")->find("layers");
            REQUIRE(layers->arr.size() == 2);
            CHECK(layers->arr[1].find("layer")->str == "2");
            CHECK(layers->arr[1].find("width")->str == "32");
            CHECK(layers->arr[1].find("heads")->str == "2");
        }
    }
    sh("rm -rf '" + dir + "'");
}

TEST_CASE(
    "live: following a study while it trains: a run that appears later, a log rewritten by a resume from an "
    "earlier checkpoint; a run followed before its directory exists",
    "[live]") {
    const bool tb = importable("tensorboard"), wb = importable("wandb");
    if (!tb && !wb) {
        PRISM_SKIP("tensorboard", "neither tensorboard nor wandb is importable by "
                                      << python() << " (set PRISM_PYTHON to a python with them)");
        PRISM_SKIP("wandb", "neither tensorboard nor wandb is importable by " << python());
        return;
    }
    const std::string dir = make_data_dir(), study = dir + "/study", bout = dir + "/bridge.out";
    const std::string sinks =
        std::string(tb ? " --tensorboard " + dir + "/tb" : "") +
        (wb ? " --wandb --wandb-mode offline --wandb-project prism-test --wandb-dir " + dir + "/wb" : "");
    REQUIRE(sh("mkdir " + study).rc == 0);
    // The bridge in the background, following the (still empty) study; its pid from the shell it replaces (timeout
    // passes SIGTERM on, and ends a bridge a failed check left running).
    REQUIRE(sh("(sh -c 'echo $$ > " + dir + "/bridge.pid; exec timeout 300 env WANDB_API_KEY= " + python() + " " +
               kBridge + " " + study + sinks + " --interval 0.1' > " + bout + " 2>&1; echo $? > " + dir +
               "/bridge.rc) > /dev/null 2>&1 &")
                .rc == 0);
    REQUIRE(wait_for(dir + "/bridge.pid", "\n", 10));
    const int pid = std::stoi(read_file(dir + "/bridge.pid"));
    REQUIRE(wait_for(bout, "waiting for a run in " + study, 30));
    Result a = sh(micro(dir, study + "/a") + " --steps 20 --ckpt-every 10 --keep 5");
    INFO(a.out);
    REQUIRE(a.rc == 0);
    REQUIRE(wait_for(bout, "a: done at step 20 (logged to step 20)", 30));
    const std::string first_log = read_file(study + "/a/log.jsonl");
    std::ofstream(dir + "/a_first.jsonl") << first_log;
    // A run that appears later, then a resumed from its step-10 checkpoint into a longer schedule: its log is
    // rewritten (steps 1-10 kept) and steps 11-20 get other values.
    REQUIRE(sh(micro(dir, study + "/b") + " --steps 10").rc == 0);
    Result r = sh(micro(dir, study + "/a") + " --steps 30 --resume --branch-from step_00000010");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    REQUIRE(wait_for(bout, "a: done at step 30 (logged to step 30)", 30));
    REQUIRE(wait_for(bout, "b: done at step 10 (logged to step 10)", 30));
    kill(pid, SIGTERM);
    REQUIRE(wait_for(dir + "/bridge.rc", "\n", 60));
    INFO(read_file(bout));
    CHECK(read_file(dir + "/bridge.rc") == "0\n");
    CHECK(read_file(bout).find("a: the log was rewritten from step 11 (a --resume from an earlier checkpoint)") !=
          std::string::npos);
    CHECK(read_file(bout).find("stopped by SIGTERM; everything read so far is written") != std::string::npos);
    // The test means something: the branch's values at steps 11-20 differ from the first run's.
    auto lr_at = [](const std::string& log, int step) {
        const std::string key = "{\"step\": " + std::to_string(step) + ",";
        return json::parse(log.substr(log.find(key), log.find('\n', log.find(key)) - log.find(key))).find("lr")->str;
    };
    REQUIRE(lr_at(first_log, 15) != lr_at(read_file(study + "/a/log.jsonl"), 15));
    REQUIRE(lr_at(first_log, 5) == lr_at(read_file(study + "/a/log.jsonl"), 5));

    if (tb) {
        // TensorBoard: the run as it is now (the abandoned steps 11-20 purged), and the later run.
        ReadBack b = read_back("tb", dir + "/tb", dir);
        CHECK(b.runs == std::set<std::string>{"a", "b"});
        CHECK(b.duplicates == 0);
        check_log(b, "a", study + "/a/log.jsonl", true);
        check_log(b, "b", study + "/b/log.jsonl", true);
        CHECK(b.simple == b.scalars);  // EventAccumulator purges the abandoned steps alike
    } else {
        PRISM_SKIP("tensorboard", "the tensorboard package is not importable by " << python() << ": its part");
    }
    if (wb && wandb_readable()) {
        // W&B: the first run as it was, the branch as a run of its own holding the rewritten log whole.
        ReadBack b = read_back("wb", dir + "/wb", dir);
        CHECK(b.runs == std::set<std::string>{"a", "a@11", "b"});
        CHECK(b.duplicates == 0);
        check_log(b, "a", dir + "/a_first.jsonl", false);
        check_log(b, "a@11", study + "/a/log.jsonl", false);
        check_log(b, "b", study + "/b/log.jsonl", false);
        CHECK(json::parse(b.config.at("a@11")).find("args")->find("steps")->str == "30");
    } else {
        if (!wb) PRISM_SKIP("wandb", "the wandb package is not importable by " << python() << ": its part");
    }

    // One run followed from before its directory exists: the bridge waits for it and stops once it is done.
    const bool via_tb = tb;
    const std::string one =
        via_tb ? " --tensorboard " + dir + "/tb1"
               : " --wandb --wandb-mode offline --wandb-dir " + dir + "/wb1 --wandb-project prism-test";
    REQUIRE(sh("(timeout 300 env WANDB_API_KEY= " + python() + " " + kBridge + " " + dir + "/c" + one +
               " --interval 0.1 > " + dir + "/c.out 2>&1; echo $? > " + dir + "/c.rc) > /dev/null 2>&1 &")
                .rc == 0);
    REQUIRE(wait_for(dir + "/c.out", "waiting for a run in " + dir + "/c", 30));
    REQUIRE(sh(micro(dir, dir + "/c") + " --steps 10").rc == 0);
    REQUIRE(wait_for(dir + "/c.rc", "\n", 60));
    INFO(read_file(dir + "/c.out"));
    CHECK(read_file(dir + "/c.rc") == "0\n");
    CHECK(read_file(dir + "/c.out").find("c: the run's invocation ended (done); stopped following") !=
          std::string::npos);
    if (!via_tb && !wandb_readable()) return;  // the bridge's own end was checked; nothing reads W&B back here
    ReadBack c = read_back(via_tb ? "tb" : "wb", dir + (via_tb ? "/tb1" : "/wb1"), dir);
    check_log(c, "c", dir + "/c/log.jsonl", via_tb);
    sh("rm -rf '" + dir + "'");
}

namespace {

// The bridge's Run with a recording writer in place of TensorBoard and W&B (which CI does not install): what it
// would log, one fact a line, and the process's peak memory.
const char* kRecorder = R"PY(
import importlib.util, json, resource, sys
spec = importlib.util.spec_from_file_location("prism_live", sys.argv[1])
live = importlib.util.module_from_spec(spec)
spec.loader.exec_module(live)

class Handle:
    def config(self, cfg, start):
        print("hparams", json.dumps(live.flat_hparams(cfg), sort_keys=True))
        print("markdown", json.dumps(live.config_markdown(cfg)))
    def scalars(self, step, values, wall_time):
        print("scalars", step, json.dumps(values, sort_keys=True))
    def final_eval(self, step, values):
        print("final", step, json.dumps(values, sort_keys=True))
    def branch(self, step, earlier):
        print("branch", step)
    def flush(self): pass
    def close(self): pass
    def describe(self): return "a recorder"

class Sink:
    def open(self, run): return Handle()

r = live.Run(sys.argv[2], "run", None, [Sink()], [])
r.poll()
r.close()
print("maxrss_mib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10)
)PY";

Result record(const std::string& dir, const std::string& run) {
    std::ofstream(dir + "/recorder.py") << kRecorder;
    return sh(python() + " " + dir + "/recorder.py " + kBridge + " " + run);
}

}  // namespace

TEST_CASE(
    "live: a line or file it cannot turn into finite numbers is skipped with a warning; a log is read a line limit "
    "at a time; the per-layer columns are run.json's",
    "[live]") {
    if (sh(python() + " -c 'import json'").rc != 0) {
        WARN("skipped: no " << python() << " to run tools/prism_live.py with (set PRISM_PYTHON)");
        return;
    }
    char tmpl[] = "/tmp/prism_live_hostile_XXXXXX";
    const std::string dir = mkdtemp(tmpl), run = dir + "/r";
    make_dirs(run);
    // Valid JSON, hostile values (issue 34 #6): a 10^400 integer, NaN, Infinity, in a line, in the eval object.
    std::ofstream(run + "/log.jsonl") << "{\"step\": 1, \"train_loss\": 2.5}\n"
                                      << "{\"step\": 2, \"train_loss\": 1" << std::string(400, '0') << "}\n"
                                      << "{\"step\": 3, \"train_loss\": NaN}\n"
                                      << "{\"step\": 4, \"val_loss\": Infinity}\n"
                                      << "{\"step\": 5, \"eval\": {\"task\": \"piqa\", \"acc\": -Infinity}}\n"
                                      << "{\"step\": 6, \"train_loss\": 1.5}\n";
    std::ofstream(run + "/run.json") << "{\"prism_run\": 1, \"model\": {\"layers\": [{\"layer\": 1, \"width\": NaN}]}}";
    std::ofstream(run + "/eval.json") << "{\"step\": Infinity, \"results\": [{\"task\": \"piqa\", \"acc\": 0.5}]}";
    Result r = record(dir, run);
    INFO(r.out);
    REQUIRE(r.rc == 0);
    CHECK(r.out.find("Traceback") == std::string::npos);
    CHECK(r.out.find("scalars 1 {\"train/loss\": 2.5}\n") != std::string::npos);
    CHECK(r.out.find("scalars 6 {\"train/loss\": 1.5}\n") != std::string::npos);
    for (const char* s : {"scalars 2", "scalars 3", "scalars 4", "scalars 5", "hparams", "final"})
        CHECK(r.out.find(s) == std::string::npos);
    CHECK(r.out.find("log.jsonl line 2 holds 10000000000000000000...(401 digits), not a finite number: skipped") !=
          std::string::npos);
    CHECK(r.out.find("log.jsonl line 3 holds nan, not a finite number: skipped") != std::string::npos);
    CHECK(r.out.find("log.jsonl line 4 holds inf, not a finite number: skipped") != std::string::npos);
    CHECK(r.out.find("log.jsonl line 5 holds -inf, not a finite number: skipped") != std::string::npos);
    CHECK(r.out.find("run.json: it holds nan, not a finite number: its config is not logged") != std::string::npos);
    CHECK(r.out.find("eval.json: it holds inf, not a finite number: not logged") != std::string::npos);

    // A finite eval step that no step can be (1e300) is logged at the last step, with a warning; the per-layer
    // columns are whatever run.json's layers hold (a column the bridge has never heard of included).
    std::ofstream(run + "/log.jsonl") << "{\"step\": 1, \"train_loss\": 2.5}\n";
    std::ofstream(run + "/run.json")
        << "{\"prism_run\": 1, \"model\": {\"layers\": [{\"layer\": 1, \"width\": 32, "
           "\"no_rope\": 1, \"window\": null}, {\"layer\": 2, \"width\": 32, \"no_rope\": 0}]}}";
    std::ofstream(run + "/eval.json") << "{\"step\": 1e300, \"results\": [{\"task\": \"piqa\", \"acc\": 0.5}]}";
    r = record(dir, run);
    INFO(r.out);
    REQUIRE(r.rc == 0);
    CHECK(r.out.find("\"layer/01/no_rope\": 1") != std::string::npos);
    CHECK(r.out.find("\"layer/02/no_rope\": 0") != std::string::npos);
    CHECK(r.out.find("| layer | width | no_rope |") != std::string::npos);
    CHECK(r.out.find("| 1 | 32 | 1 | - |") != std::string::npos);  // null (no such sub-block) shows as the tables' "-"
    CHECK(r.out.find("eval.json: \"step\" 1e+300 is not a step: logged at the last one") != std::string::npos);
    CHECK(r.out.find("final 1 {\"zeroshot/piqa/acc\": 0.5}") != std::string::npos);

    // A 256 MiB sparse run of zeros (no newline) before a real line: read 1 MiB at a time, the overlong "line"
    // skipped with a warning, the real one logged, and the process never near the file's size (it read it whole).
    REQUIRE(sh("truncate -s 0 " + run + "/log.jsonl && truncate -s 256M " + run +
               "/log.jsonl && printf '\\n{\"step\": 1, \"train_loss\": 2.5}\\n' >> " + run + "/log.jsonl")
                .rc == 0);
    r = record(dir, run);
    INFO(r.out);
    REQUIRE(r.rc == 0);
    CHECK(r.out.find("log.jsonl line 1 is over 1 MiB: not a step's JSON, skipped") != std::string::npos);
    CHECK(r.out.find("scalars 1 {\"train/loss\": 2.5}\n") != std::string::npos);
    const size_t at = r.out.find("maxrss_mib ");
    REQUIRE(at != std::string::npos);
    CHECK(std::stol(r.out.substr(at + 11)) < 100);
    sh("rm -rf '" + dir + "'");
}

namespace {

// The bridge's main on a study (--once) with the recording writer in place of TensorBoard's: what it would log for
// each run, one fact a line, named by the run.
const char* kStudyRecorder = R"PY(
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("prism_live", sys.argv[1])
live = importlib.util.module_from_spec(spec)
spec.loader.exec_module(live)

class Handle:
    def __init__(self, name): self.name = name
    def config(self, cfg, start):
        print("hparams", self.name, json.dumps(live.flat_hparams(cfg), sort_keys=True))
    def scalars(self, step, values, wall_time):
        print("scalars", self.name, step, json.dumps(values, sort_keys=True))
    def final_eval(self, step, values):
        print("final", self.name, step, json.dumps(values, sort_keys=True))
    def branch(self, step, earlier): print("branch", self.name, step)
    def flush(self): pass
    def close(self): pass
    def describe(self): return "a recorder"

class Sink:
    def __init__(self, logdir): pass
    def open(self, run): return Handle(run.name)

live.TensorBoardSink = Sink
sys.exit(live.main([sys.argv[2], "--tensorboard", sys.argv[3], "--once"]))
)PY";

}  // namespace

TEST_CASE(
    "live: whatever Python raises on a line or file (nesting 1000 deep, 10^400 or 5000 digits in run.json's flags) "
    "is a warning; in a study a run whose log is not a regular file is skipped and the others go on",
    "[live]") {
    // Issue 43 #3: RecursionError, OverflowError and ValueError (the digit limit) were tracebacks, exit 1; a FIFO
    // for one run's log ended the whole study.
    if (sh(python() + " -c 'import json'").rc != 0) {
        WARN("skipped: no " << python() << " to run tools/prism_live.py with (set PRISM_PYTHON)");
        return;
    }
    char tmpl[] = "/tmp/prism_live_study_XXXXXX";
    const std::string dir = mkdtemp(tmpl), study = dir + "/s";
    for (const char* r : {"a", "b", "c"}) make_dirs(study + "/" + r);
    const std::string deep = std::string(1000, '[') + std::string(1000, ']');
    std::ofstream(study + "/a/log.jsonl") << "{\"step\": 1, \"train_loss\": 2.5}\n"
                                          << "{\"step\": 2, \"x\": " << deep << "}\n"
                                          << "{\"step\": 3, \"train_loss\": 1.5}\n";
    std::ofstream(study + "/a/run.json") << "{\"prism_run\": 1, \"args\": [[\"--lr\", \"1" << std::string(400, '0')
                                         << "\"], [\"--steps\", \"" << std::string(5000, '7')
                                         << "\"], [\"--seed\", \"3\"]]}";
    std::ofstream(study + "/a/eval.json") << "{\"step\": 1, \"results\": " << deep << "}";
    REQUIRE(sh("mkfifo " + study + "/b/log.jsonl").rc == 0);
    std::ofstream(study + "/c/log.jsonl") << "{\"step\": 1, \"train_loss\": 4.5}\n";
    std::ofstream(study + "/c/run.json") << "{\"prism_run\": 1, \"model\": " << deep << "}";
    std::ofstream(dir + "/recorder.py") << kStudyRecorder;
    Result r = sh("timeout 60 " + python() + " " + dir + "/recorder.py " + kBridge + " " + study + " " + dir + "/tb");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    CHECK(!has(r.out, "Traceback"));
    CHECK(has(r.out, "scalars a 1 {\"train/loss\": 2.5}\n"));
    CHECK(has(r.out, "scalars a 3 {\"train/loss\": 1.5}\n"));
    CHECK(!has(r.out, "scalars a 2"));
    CHECK(has(r.out, "a/log.jsonl line 2 cannot be read as JSON of finite numbers (RecursionError"));
    CHECK(has(r.out, "a/eval.json: it cannot be read as JSON of finite numbers (RecursionError"));
    CHECK(!has(r.out, "final a"));
    // The flags past float's range and Python's digit limit are kept as their text; the others as numbers.
    CHECK(has(r.out, "\"args/lr\": \"1" + std::string(400, '0') + "\""));
    CHECK(has(r.out, "\"args/steps\": \"" + std::string(5000, '7') + "\""));
    CHECK(has(r.out, "\"args/seed\": 3"));
    CHECK(has(r.out, "b/log.jsonl is not a regular file"));
    CHECK(has(r.out, "the run b is skipped while it is so, the others go on"));
    CHECK(has(r.out, "scalars c 1 {\"train/loss\": 4.5}\n"));
    CHECK(has(r.out, "c/run.json: it cannot be read as JSON of finite numbers (RecursionError"));
    CHECK(!has(r.out, "hparams c"));
    sh("rm -rf '" + dir + "'");
}
