// test_train.cpp: the train_prism binary end to end on the micro model of train_util.h and synthetic shards: what a
// run logs (an in-training zero-shot eval with its step; --recompute's losses on the GPU engine, on the executor) and
// what it says: bad input (flags, shards, checkpoints) ends with a one-line error and a non-zero exit, an empty path
// flag is never the default, and the messages say what is wrong and what is true, with bounded work. Checkpoints and
// resume are test_checkpoints.cpp; the run directory OUT test_out_dir.cpp; faults and signals test_faults.cpp. The
// binaries are built by `make test` before this runs (the Makefile's test target depends on them).
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "eval/eval_file.h"
#include "run/checkpoint.h"
#include "run/cli.h"
#include "run/run_log.h"
#include "test/train_util.h"

TEST_CASE("bad input ends with a one-line error and a non-zero exit", "[train][errors]") {
    std::string dir = make_data_dir(), out = dir + "/run";
    SECTION("unknown flag") {
        Result r = sh("./train_prism --lerning-rate 3");
        INFO(r.out);
        REQUIRE(one_line_error(r));
        REQUIRE(r.out.find("unknown flag '--lerning-rate'") != std::string::npos);
    }
    SECTION("impossible schedule") {
        Result r = sh("./train_prism --plan -m 124M -s 5x12");
        REQUIRE(one_line_error(r));
        REQUIRE(r.out.find("5 heads do not divide width 768") != std::string::npos);
    }
    SECTION("missing shards") {
        Result r = sh("./train_prism --train '/nonexistent/*.bin' -o " + out);
        INFO(r.out);
        REQUIRE(one_line_error(r));
        REQUIRE(r.out.find("/nonexistent") != std::string::npos);
    }
    SECTION("truncated shard") {
        REQUIRE(sh("truncate -s 5000 " + dir + "/syn_train_000001.bin").rc == 0);
        Result r = sh(micro(dir, out) + " --steps 2");
        INFO(r.out);
        REQUIRE(one_line_error(r));
        REQUIRE(r.out.find("syn_train_000001.bin") != std::string::npos);
    }
    SECTION("token outside the vocabulary") {
        Result r = sh(micro(dir, out) + " --steps 2 --vocab 100");
        INFO(r.out);
        REQUIRE(one_line_error(r));
    }
    SECTION("batch larger than the data") {
        Result r = sh(micro(dir, out) + " --steps 2 -b 100000");
        INFO(r.out);
        REQUIRE(one_line_error(r));
    }
    SECTION("total batch not a multiple of B*T") {
        Result r = sh(micro(dir, out) + " --steps 2 --total-batch 100");
        INFO(r.out);
        REQUIRE(one_line_error(r));
        REQUIRE(r.out.find("not a multiple of B*T = 128") != std::string::npos);
    }
    SECTION("resume without a checkpoint") {
        Result r = sh(micro(dir, out) + " --steps 2 --resume");
        INFO(r.out);
        REQUIRE(one_line_error(r));
        REQUIRE(r.out.find("no checkpoint") != std::string::npos);
    }
    SECTION("corrupt and truncated checkpoints") {
        REQUIRE(sh(micro(dir, out) + " --steps 2").rc == 0);
        std::string model = out + "/step_00000002/model.bin";
        // Flip one byte inside the parameters: the checksum catches it.
        Result r0 = sh("printf '\\x01' | dd of=" + model + " bs=1 seek=3000 conv=notrunc status=none");
        REQUIRE(r0.rc == 0);
        Result r = sh(micro(dir, out) + " --steps 4 --resume");
        INFO(r.out);
        REQUIRE(one_line_error(r));
        REQUIRE(r.out.find("checksum mismatch") != std::string::npos);
        REQUIRE(sh("truncate -s 2000 " + model).rc == 0);
        r = sh(micro(dir, out) + " --steps 4 --resume");
        INFO(r.out);
        REQUIRE(one_line_error(r));
        REQUIRE(r.out.find("truncated") != std::string::npos);
    }
    SECTION("resume with a different model") {
        REQUIRE(sh(micro(dir, out) + " --steps 2").rc == 0);
        Result r = sh(micro(dir, out) + " --steps 4 --resume --layers 3");
        INFO(r.out);
        REQUIRE(one_line_error(r));
        REQUIRE(r.out.find("--layers 3 differs from the recorded --layers 2") != std::string::npos);
        // Without the run record (a run from before records), the checkpoint's own model check refuses it.
        REQUIRE(sh("rm " + out + "/run.json").rc == 0);
        r = sh(micro(dir, out) + " --steps 4 --resume --layers 3");
        INFO(r.out);
        REQUIRE(one_line_error(r));
        REQUIRE(r.out.find("holds a different model") != std::string::npos);
    }
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("an in-training zero-shot eval is logged with its step", "[train][eval]") {
    std::string dir = make_data_dir();
    {
        std::ofstream f(dir + "/hs.jsonl");
        f << "{\"activity_label\": \"Baking\", \"ctx_a\": \"A man puts flour in a bowl.\", \"ctx_b\": \"he\", "
             "\"endings\": [\"mixes it.\", \"flies away.\", \"sings.\", \"eats the bowl.\"], \"label\": 0}\n";
    }
    Result p = sh("./build/prepare_eval hellaswag " + dir + "/hs.jsonl -o " + dir + "/hellaswag.bin");
    INFO(p.out);
    REQUIRE(p.rc == 0);
    std::string cmd = "./train_prism --d 32 --layers 2 --heads 2 --seq-len 32 -b 2 --val-every 0 --train '" + dir +
                      "/syn_train_*.bin' -o " + dir + "/run --steps 4 --eval-every 2 --eval-data " + dir;
    Result r = sh(cmd);
    INFO(r.out);
    REQUIRE(r.rc == 0);
    auto log = read_log(dir + "/run/log.jsonl");
    REQUIRE(log[2].find("\"eval\": {\"task\": \"hellaswag\", \"examples\": 1") != std::string::npos);
    REQUIRE(log[3].find("\"eval\"") == std::string::npos);
    // A missing eval file fails before training starts.
    Result m = sh(cmd + " --eval-task piqa --overwrite");  // --overwrite: a run that fails to start deletes nothing
    REQUIRE(one_line_error(m));
    REQUIRE(m.out.find("piqa.bin") != std::string::npos);
    REQUIRE(read_log(dir + "/run/log.jsonl").size() == 4);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("--recompute on the GPU engine gives the same losses from the command line", "[train][recompute]") {
    // build/train_prism_executor is train_prism with the CUDA engine on the CUDA-on-CPU executor (built by make
    // test): the GPU code path's command line, without a GPU. Recomputation reads the same bf16 inputs with the
    // same kernels, so every logged loss and norm is the same, to the last printed digit.
    std::string dir = make_data_dir();
    auto run = [&](const std::string& out, const std::string& extra) {
        std::string cmd = micro(dir, dir + "/" + out) + " --steps 4 --val-every 2 " + extra;
        return sh("./build/train_prism_executor" + cmd.substr(std::string("./train_prism").size()));
    };
    Result plain = run("plain", ""), rec = run("rec", "--recompute");
    INFO(plain.out << rec.out);
    REQUIRE(plain.rc == 0);
    REQUIRE(rec.rc == 0);
    REQUIRE(plain.out.find("engine: CUDA") != std::string::npos);
    REQUIRE(rec.out.find("recomputing norm and SwiGLU outputs") != std::string::npos);
    auto a = read_log(dir + "/plain/log.jsonl"), b = read_log(dir + "/rec/log.jsonl");
    REQUIRE(a.size() == 4);
    REQUIRE(b.size() == 4);
    for (auto& [step, line] : a) CHECK(losses_of(line) == losses_of(b[step]));
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("messages say what is wrong: a directory as a shard, a corrupt OUT/latest, a bad token deep in a shard",
          "[train][faults]") {
    // Issue 10 #9.
    std::string dir = make_data_dir(), out = dir + "/run";
    Result d = sh(micro(dir, out) + " --steps 2 --train " + dir);
    INFO(d.out);
    REQUIRE(one_line_error(d));
    REQUIRE(has(d.out, "shard " + dir + " is a directory, not a shard"));

    REQUIRE(sh(micro(dir, out) + " --steps 2").rc == 0);
    poke(out + "/latest", 5, "\0\n", 2);  // "step_\0\n0000002\n": a NUL used to cut the message short
    Result n = sh(micro(dir, out) + " --steps 4 --resume");
    INFO(n.out);
    REQUIRE(one_line_error(n));
    REQUIRE(has(n.out, out + "/latest is corrupt: it holds \"step_\\x00\\x0a000002\", not a checkpoint name"));

    // A token >= V near the end of the training shard fails before the first step, not when reached.
    std::vector<int> t(200000, 3);
    t[199990] = 300;
    write_shard(dir + "/deep_train_000001.bin", t);
    Result v = sh(micro(dir, dir + "/run2") + " --steps 2 --train " + dir + "/deep_train_000001.bin");
    INFO(v.out);
    REQUIRE(one_line_error(v));
    REQUIRE(has(v.out, "deep_train_000001.bin: token 300 at position 199990 is outside the vocabulary (256)"));
    REQUIRE(!has(v.out, "step "));

    // An eval file claiming 2^40 examples (with a valid checksum) is a corrupt header, not "out of memory".
    EvalFile f;
    f.task = "piqa", f.V = 300, f.eot = 299;
    EvalExample e;
    e.tokens = {1, 2, 3};
    e.req = {{0, 1, 1, 3, 0}};
    f.ex.push_back(e);
    save_eval_file(dir + "/piqa.bin", f);
    std::string b = read_file(dir + "/piqa.bin");
    int64_t huge = 1LL << 40;
    memcpy(&b[6 * 4], &huge, 8);
    memset(&b[12 * 4], 0, 8);
    Checksum64 sum;
    sum.update(b.data(), b.size());
    uint64_t v64 = sum.value();
    memcpy(&b[12 * 4], &v64, 8);
    std::ofstream(dir + "/piqa.bin", std::ios::binary) << b;
    REQUIRE_THROWS_WITH(load_eval_file(dir + "/piqa.bin"),
                        Catch::Contains("corrupt header: 1099511627776 examples cannot fit in a payload of 64 bytes"));
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("messages say what is true: conflicting flags, a changed batch, a missing latest, the plan's tokens",
          "[train][faults][cli]") {
    std::string dir = make_data_dir(), out = dir + "/run";
    Result both = sh(micro(dir, out) + " --steps 3 --tokens 1000");
    REQUIRE(one_line_error(both));
    REQUIRE(has(both.out, "--steps and --tokens both set the run's length; pass one of them"));
    Result task = sh(micro(dir, out) + " --steps 3 --eval-task foo");
    REQUIRE(has(task.out, "unknown task 'foo'; choose from hellaswag, piqa"));

    REQUIRE(sh(micro(dir, out) + " --steps 6 --stop-after 2 --ckpt-every 1").rc == 0);
    // Without its record (a run from before run records): a recorded run would restore --total-batch 128 and go on
    // with 2 micro-steps of B 2 (the run record, test_checkpoints.cpp), so the checkpoint's own batch is what catches the change here.
    REQUIRE(sh("rm " + out + "/run.json").rc == 0);
    Result b = sh(micro(dir, out) + " --steps 6 --resume -b 2");  // 2 x 32 tokens a step instead of 4 x 32
    INFO(b.out);
    REQUIRE(one_line_error(b));
    REQUIRE(has(b.out,
                "was trained with a global batch of 128 tokens per step, this run would take 64 (B 2 x T 32 x 1 "
                "rank x 1 micro-steps); pass --total-batch 128 to keep it, or --allow-batch-change"));
    Result k = sh(micro(dir, out) + " --steps 6 --resume -b 2 --total-batch 128 --stop-after 1");
    INFO(k.out);
    REQUIRE(k.rc == 0);
    REQUIRE(has(k.out, "6 steps (768 tokens, of which 256 in steps 1..2 already done)"));

    REQUIRE(sh("rm " + out + "/latest").rc == 0);
    Result l = sh(micro(dir, out) + " --steps 6 --resume");
    INFO(l.out);
    REQUIRE(has(l.out, out + "/latest is missing, but " + out +
                           " holds 2 checkpoints (newest step_00000003); to "
                           "resume from it: echo step_00000003 > " +
                           out + "/latest, then run again"));
    REQUIRE(sh("echo step_00000005 > " + out + "/latest").rc == 0);
    Result g = sh(micro(dir, out) + " --steps 6 --resume");
    INFO(g.out);
    REQUIRE(has(g.out, "latest names step_00000005, which does not exist; " + out + " holds step_00000003: echo "));
    Result h = sh("./train_prism --plan -m tiny --mlp-multiple 65536");
    REQUIRE(has(h.out, "SwiGLU hidden 65536 (2.667 w to a multiple of 65536)"));
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("an empty path flag is an error, never the default", "[train][faults]") {
    std::string dir = make_data_dir();
    for (const char* flag : {"-o ''", "--out=", "--train ''", "--val ''", "--tokenizer ''", "--eval-data ''"}) {
        Result r = sh(micro(dir, dir + "/run") + " --steps 1 --overwrite " + flag);
        INFO(flag << ": " << r.out);
        CHECK(one_line_error(r));
        CHECK(has(r.out, "was given an empty "));
    }
    // Every binary parses its flags with run/cli.h: a FILE, DIR, GLOB or PATH flag refuses "" there.
    std::string got;
    std::vector<Flag> flags = {path_flag("--in", "FILE", "", got), text_flag("--name", "NAME", "", got)};
    const char* a1[] = {"x", "--in", ""};
    REQUIRE_THROWS_WITH(parse_flags(3, (char**)a1, flags, "x"),
                        "flag --in was given an empty path; pass a path (an unset shell variable?), or leave the flag "
                        "out for its default");
    const char* a2[] = {"x", "--name="};
    parse_flags(2, (char**)a2, flags, "x");  // not a path: "" is a value like any other
    CHECK(got.empty());
    REQUIRE(sh("test -e " + dir + "/run").rc != 0);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE(
    "bounded work and true messages: --val-tokens beyond the set, a changed --seq-len, a missing run.json, "
    "RANK=abc, a 3 GB run.json, a 1 GB log.jsonl",
    "[train][faults]") {
    std::string dir = make_data_dir(), out = dir + "/run";
    Result v = sh("timeout 60 " + micro(dir, out) + " --steps 2 --val-tokens 100000000000");
    INFO(v.out);
    REQUIRE(v.rc == 0);
    REQUIRE(has(v.out,
                "note: --val-tokens 100000000000 is more than the validation shards " + dir +
                    "/syn_val_*.bin hold in batches of B 4 x T 32 x 1 rank; each validation reads their 3968 tokens"));
    REQUIRE(sh("cp -r " + out + " " + dir + "/s && sed -i 's/\\[\"--seq-len\", \"32\"\\]/[\"--seq-len\", \"48\"]/' " +
               dir + "/s/run.json")
                .rc == 0);
    Result t = sh("./train_prism -o " + dir + "/s --resume --steps 4");
    INFO(t.out);
    REQUIRE(one_line_error(t));
    REQUIRE(
        has(t.out, "error: --resume: the model's context would be T 48 (--seq-len 48, given or in " + dir +
                       "/s/run.json's \"args\"), but the recorded run's model has T 32 (\"model\": {\"T\"}); resume "
                       "with --seq-len 32"));
    REQUIRE(sh("rm " + dir + "/s/run.json").rc == 0);
    Result m = sh("./train_prism -o " + dir + "/s --resume --steps 4");
    INFO(m.out);
    REQUIRE(one_line_error(m));
    REQUIRE(has(m.out, "(" + dir +
                           "/s/run.json is missing, so only the flags given apply: pass the first run's "
                           "flags, or restore run.json from a copy)"));
    Result k = sh("RANK=abc " + micro(dir, dir + "/k") + " --steps 1");
    INFO(k.out);
    REQUIRE(one_line_error(k));
    REQUIRE(has(k.out, "error: RANK=abc in the environment is not a whole number; set it to this process's value"));
    // Sparse files: no disk, but a size that reading whole would have to allocate.
    REQUIRE(sh("rm -rf " + out + " && " + micro(dir, out) + " --steps 2").rc == 0);
    REQUIRE(sh("cp " + out + "/run.json " + dir + "/run.json.good && truncate -s 3G " + out + "/run.json").rc == 0);
    Result j = sh(micro(dir, out) + " --steps 3 --resume");
    INFO(j.out);
    REQUIRE(one_line_error(j));
    REQUIRE(has(j.out, "error: " + out +
                           "/run.json is 3221225472 bytes, more than the 64 MiB train_prism reads of "
                           "such a file; it is not one train_prism wrote: move it aside"));
    // 1 GiB of zeros, twice the memory bound below (dev/redteam.sh's big-log case reads 3 GB): held whole, it
    // would exceed it; streamed, it stays far below.
    REQUIRE(sh("mv " + dir + "/run.json.good " + out + "/run.json && truncate -s 1G " + out + "/log.jsonl").rc == 0);
    Result l = sh("/usr/bin/time -f 'maxrss %M' " + micro(dir, out) + " --steps 3 --resume");
    INFO(l.out);
    REQUIRE(l.rc == 0);
    const size_t at = l.out.find("maxrss ");
    REQUIRE(at != std::string::npos);
    CHECK(std::stol(l.out.substr(at + 7)) < 500000);  // KB: the log is streamed, never held
    CHECK(read_log(out + "/log.jsonl").size() == 3);  // the 1 GiB of zeros were no log lines
    sh("rm -rf '" + dir + "'");
}

// A hint that names a path names one the command takes: the root refused as -o suggests runs/NAME, a directory
// given for a file suggests a file in it, and a path through a file says to move that file aside; each followed
// literally works.
TEST_CASE("a directory hint, followed literally, is accepted: -o /, report -o /, -o through a file",
          "[train][errors]") {
    char cwd[4096];
    const std::string here = getcwd(cwd, sizeof cwd) ? cwd : ".", dir = make_data_dir();
    const std::string train = "cd " + dir + " && " + here + "/train_prism" + micro(dir, "").substr(13);  // no ./
    auto hint = [](const std::string& out) {  // what "(e.g. PATH)" names
        const size_t a = out.find("(e.g. "), b = out.find(')', a);
        return a == std::string::npos || b == std::string::npos ? std::string() : out.substr(a + 6, b - a - 6);
    };
    const Result root = sh(train + "/ --steps 1");
    INFO(root.out);
    CHECK(one_line_error(root));
    CHECK(has(root.out, "-o / is the file-system root; pass a directory of its own (e.g. runs/NAME)"));
    const std::string run = hint(root.out);
    REQUIRE(run == "runs/NAME");
    const Result ok = sh(train + run + " --steps 1");
    INFO(ok.out);
    CHECK(ok.rc == 0);
    CHECK(access((dir + "/runs/NAME/model.bin").c_str(), F_OK) == 0);
    // A directory where a file goes: a file in it, the root's as ./out (not //out), the run's as RUN/out.
    const std::string report = "cd " + dir + " && " + here + "/report " + run + " -o ";
    for (const auto& [given, file] : {std::pair<std::string, std::string>{"/", "./out"}, {run, run + "/out"}}) {
        const Result rr = sh(report + given);
        INFO(rr.out);
        CHECK(one_line_error(rr));
        CHECK(has(rr.out, "-o " + given + " is a directory; pass a file name (e.g. " + file + ")"));
        REQUIRE(hint(rr.out) == file);
        const Result rok = sh(report + file);
        INFO(rok.out);
        CHECK(rok.rc == 0);
        CHECK(access((dir + "/" + file).c_str(), F_OK) == 0);
    }
    // The rule itself, for an output that is a file (report's, eval_zeroshot's): the root's example is ./NAME.
    REQUIRE_THROWS_WITH(check_output_path("/", "--json", {}),
                        "--json / is the file-system root; pass a path of its own (e.g. ./NAME)");
    CHECK_NOTHROW(check_output_path("./NAME", "--json", {}));
    REQUIRE_THROWS_WITH(check_output_path("//", "-o", {}, true),
                        "-o // is the file-system root; pass a directory of its own (e.g. runs/NAME)");
    // A file where a directory of -o would be: move it aside, as said, and the same command runs.
    write_file(dir + "/f", "x");
    const Result through = sh(train + "f/run --steps 1");
    INFO(through.out);
    CHECK(one_line_error(through));
    CHECK(has(through.out,
              "cannot create directory f/run: f exists and is not a directory; move it aside, or give a "
              "path that does not pass through it"));
    REQUIRE(sh("mv " + dir + "/f " + dir + "/f.aside").rc == 0);
    CHECK(sh(train + "f/run --steps 1").rc == 0);
    sh("rm -rf '" + dir + "'");
}

// The trainer's words for the model's mistakes: a schedule word it does not know, a layer beyond the model, an odd
// head_dim in a NoPE layer, a flag near one it knows and one of 100,000 characters.
TEST_CASE("the trainer's messages: -w X, --no-rope 9, an odd NoPE head_dim, --stpes, a huge flag", "[train][errors]") {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"-w X", "--widths: unknown width schedule 'X'; use uniform, x, v, lambda, 3 or a list"},
        {"-s X", "--heads-schedule: unknown head schedule 'X'; use uniform, prism, openelm, openelm:LO-HI or a list"},
        {"--no-rope 9", "--no-rope: '9' is not a layer range within 1..6, the layers of this model (L = 6)"},
        {"--no-mlp 5-7", "--no-mlp: '5-7' is not a layer range within 1..6, the layers of this model (L = 6)"},
        {"--d 96 --heads 32 --no-rope 1-6",
         "layer 1: head_dim 3 (= 96 / 32) is odd; the layer uses no RoPE, but the CUDA attention kernels read a "
         "head's values in pairs"},
        {"--stpes 3", "unknown flag '--stpes'; did you mean --steps?"},
        {"--zz 3", "unknown flag '--zz'; run train_prism --help for the list"}};
    for (const auto& [flags, want] : cases) {
        const Result r = sh("./train_prism --cpu -m tiny --plan " + flags);
        INFO(flags << ": " << r.out);
        CHECK(one_line_error(r));
        CHECK(has(r.out, "train_prism: error: " + want));
    }
}

TEST_CASE("per-layer lr and wd multipliers: a layer at lr x 0 never moves; recorded, resumed only as recorded, planned",
          "[train][optimizer]") {
    std::string dir = make_data_dir();
    // Layer 1 at lr x 0 against a run at --lr 0 (nothing moves: the initial weights of the same seed).
    REQUIRE(sh(micro(dir, dir + "/init") + " --steps 1 --lr 0").rc == 0);
    Result r = sh(micro(dir, dir + "/frozen") + " --steps 4 --lr-mult 0,1 --wd-mult 1x2");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    const LoadedModel init = load_model(dir + "/init/model.bin"), frozen = load_model(dir + "/frozen/model.bin");
    REQUIRE(init.params.size() == frozen.params.size());
    for (const ParamTensor& t : param_layout(init.cfg).tensors) {
        const bool same = std::equal(init.params.begin() + t.offset, init.params.begin() + t.offset + t.numel(),
                                     frozen.params.begin() + t.offset);
        INFO(t.name);
        CHECK(same == (t.layer == 0));  // layer 1's every tensor (norms too) as initialised; the rest trained
    }
    // The record keeps them; a resume with another value is refused, with the same one it goes on.
    const std::string rec = read_file(dir + "/frozen/run.json");
    CHECK(rec.find("[\"--lr-mult\", \"0,1\"]") != std::string::npos);
    CHECK(rec.find("[\"--wd-mult\", \"1x2\"]") != std::string::npos);
    r = sh(micro(dir, dir + "/frozen") + " --steps 6 --resume --lr-mult 0.5,1");
    INFO(r.out);
    REQUIRE(one_line_error(r));
    CHECK(r.out.find("--lr-mult 0.5,1 differs from the recorded --lr-mult 0,1") != std::string::npos);
    r = sh("./train_prism --resume -o " + dir + "/frozen --steps 6");
    INFO(r.out);
    CHECK(r.rc == 0);
    // A run without them records neither (its record is as before).
    CHECK(read_file(dir + "/init/run.json").find("-mult") == std::string::npos);
    // --plan shows them per layer, in the table and in its JSON.
    r = sh("./train_prism --plan -m tiny --layers 4 --lr-mult 1x2,0.25x2");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    CHECK(r.out.find("lr x") != std::string::npos);
    CHECK(r.out.find("wd x") == std::string::npos);
    r = sh("./train_prism --plan --json -m tiny --layers 4 --lr-mult 1x2,0.25x2 --wd-mult 0,1,2,3");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    CHECK(r.out.find("\"lr_mult\": 0.25, \"wd_mult\": 3, \"params\"") != std::string::npos);
    // Bad lists: one line each, naming the flag.
    for (auto [flags, says] :
         {std::pair<const char*, const char*>{"--lr-mult 1,2,3", "has 3 entries but the model has 4 layers"},
          {"--lr-mult 0.5", "has 1 entries but the model has 4 layers"},
          {"--wd-mult 1,abc,1,1", "'abc' is not a multiplier"},
          {"--lr-mult=-1,1,1,1", "'-1' is not a multiplier"},
          {"--lr-mult 1,1,1,1000 --lr 0.01", "layer 4: --lr 0.01 x --lr-mult 1000"}}) {
        r = sh(std::string("./train_prism --plan -m tiny --layers 4 ") + flags);
        INFO(flags << "\n" << r.out);
        CHECK(one_line_error(r));
        CHECK(r.out.find(says) != std::string::npos);
    }
}
