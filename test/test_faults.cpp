// Nothing lost, nothing silently wrong (issue 10): one test per way a run used to lose work or give a wrong
// result without saying so. Each drives ./train_prism end to end on the micro model of train_util.h and asserts
// the exit code, the message and what is left on disk: a NaN step is skipped and a diverged run stops with
// its last good checkpoint named; every checkpoint header field is under the checksum and range-checked;
// SIGTERM, SIGINT and SIGHUP end a run with a checkpoint it resumes from exactly; a forgotten --resume wipes
// nothing; --keep holds across resumes; numeric flags are bounded; a failed log write is an error; and the
// messages for a directory given as a shard, a corrupt OUT/latest, a bad token deep in a shard and an
// impossible eval header say what is wrong, at the start.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "run/checkpoint.h"
#include "eval/eval_file.h"
#include "util/json.h"
#include "test/train_util.h"

namespace {

bool has(const std::string& out, const std::string& what) { return out.find(what) != std::string::npos; }

std::string file_text(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Every line of the log parses as JSON (a NaN used to be written as -nan).
void require_json_lines(const std::string& path) {
    std::ifstream f(path);
    std::string line;
    while (std::getline(f, line)) {
        INFO(line);
        REQUIRE_NOTHROW(json::parse(line));
    }
}

// The step_* directories of OUT, as one string ("step_00000002 step_00000004").
std::string checkpoints_in(const std::string& out) {
    Result r = sh("cd '" + out + "' && ls -d step_* 2>/dev/null | tr '\\n' ' '");
    return r.out.empty() ? "" : r.out.substr(0, r.out.size() - 1);
}

// Overwrites `n` bytes of a file at `offset`.
void poke(const std::string& path, long offset, const void* bytes, size_t n) {
    FILE* f = fopen(path.c_str(), "r+b");
    REQUIRE(f);
    fseek(f, offset, SEEK_SET);
    REQUIRE(fwrite(bytes, 1, n, f) == n);
    fclose(f);
}

// Sets wte rows to 3e38 (every row, or one token's) and rewrites model.bin with a valid checksum: the next
// forward of a batch holding such a token overflows, so its loss is NaN.
void poison(const std::string& model, int token) {
    LoadedModel m = load_model(model);
    for (int v = 0; v < m.cfg.V; v++)
        if (token < 0 || v == token)
            for (int c = 0; c < m.cfg.d; c++) m.params[(size_t)v * m.cfg.d + c] = 3e38f;
    save_model(model, m.cfg, m.params.data(), m.params.size(), m.step, m.run_id);
}

}  // namespace

TEST_CASE("a NaN step makes no update and no checkpoint; K in a row stop the run, the last good checkpoint named",
          "[train][faults]") {
    // Issue 10 #1: a NaN loss went unnoticed, all-NaN checkpoints were written and --keep pruned the good ones.
    // Token 250 occurs once, in window 9 = the third step's batch (no shuffling, B = 4); an untied embedding
    // row of 3e38 makes exactly that step's loss NaN.
    std::string dir = make_data_dir(), out = dir + "/run";
    std::vector<int> train;
    for (int i = 0; i < 20000; i++) train.push_back((i * 7) % 200);
    train[300] = 250;
    write_shard(dir + "/rare_train_000001.bin", train);
    std::string cmd =
        "./train_prism --vocab 256 --d 32 --layers 2 --heads 2 --seq-len 32 -b 4 --untied --no-shuffle "
        "--val-every 0 --sample-every 0 --train '" +
        dir + "/rare_train_*.bin' -o " + out;
    REQUIRE(sh(cmd + " --steps 8 --stop-after 1").rc == 0);
    poison(out + "/step_00000001/model.bin", 250);
    Result r = sh(cmd + " --steps 8 --resume --ckpt-every 1 --keep 1");
    INFO(r.out);
    REQUIRE(r.rc == 0);  // one bad step is skipped and the run goes on
    REQUIRE(has(r.out, "step 3: non-finite loss: update skipped (1 in a row; the run stops at --max-nonfinite 3)"));
    REQUIRE(has(r.out, "no checkpoint at step 3: it was not finite; " + out + "/latest still names step_00000002"));
    require_json_lines(out + "/log.jsonl");
    auto log = read_log(out + "/log.jsonl");
    REQUIRE(log.size() == 8);
    REQUIRE(has(log[3], "\"train_loss\": null"));
    REQUIRE(has(log[3], "\"grad_norm\": null"));
    REQUIRE(has(log[3], "\"skipped\": true"));
    REQUIRE(!has(log[4], "skipped"));
    REQUIRE(checkpoints_in(out) == "step_00000008");

    // Every row poisoned: every step is NaN, and the third in a row ends the run with exit code 3.
    poison(out + "/step_00000008/model.bin", -1);
    Result d = sh(cmd + " --steps 20 --resume --ckpt-every 1 --keep 1");
    INFO(d.out);
    REQUIRE(d.rc == 3);
    REQUIRE(one_line_error(d));
    REQUIRE(has(d.out, "error: steps 9..11 had a NaN or infinite loss or gradient norm and were skipped"));
    // step_8 is finite but makes every step NaN at once: it is named as their source, not as a good one (issue 19).
    REQUIRE(has(d.out, out + "/latest names step_00000008, which every one of these steps started from: it makes "
                             "non-finite steps at once; resume from an earlier checkpoint"));
    REQUIRE(checkpoints_in(out) == "step_00000008");  // never pruned for a bad one
    REQUIRE(file_text(out + "/latest") == "step_00000008\n");
    require_json_lines(out + "/log.jsonl");
    REQUIRE(read_log(out + "/log.jsonl").size() == 11);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("values that make NaN or overflow by construction are refused by the flag bounds", "[train][faults][cli]") {
    // Issue 10 #1 and #7: --adam-eps 0 trained into NaN from step 2; --mlp-ratio 1e300 overflowed an int.
    struct Case {
        const char* flags;
        const char* message;
    };
    for (const Case& c :
         {Case{"--adam-eps 0", "--adam-eps must lie in [1e-30, 1]"},
          Case{"--lr 10 --wd 10", "--lr 10 times --wd 10 is 100; it must be below 1"},
          Case{"--mlp-ratio 1e300", "--mlp-ratio must lie in [0.001, 64]"},
          Case{"--bottleneck 0", "--bottleneck must lie in [0.01, 0.99]"},
          Case{"--d 100000", "--d must be at most 65536"}, Case{"--batch 2000000", "--batch must be at most 1048576"},
          Case{"--steps 99999999999999", "--steps must be at most 1000000000000"},
          Case{"--max-nonfinite 0", "--max-nonfinite must be positive"}}) {
        Result r = sh(std::string("./train_prism --steps 1 -o /nonexistent/out ") + c.flags);
        INFO(c.flags << "\n" << r.out);
        REQUIRE(one_line_error(r));
        REQUIRE(has(r.out, c.message));
        REQUIRE(access("/nonexistent", F_OK) != 0);  // a run that failed before writing anything leaves no OUT
    }
    Result plan = sh("./train_prism --plan -m 124M --mlp-ratio 1e300");
    REQUIRE(one_line_error(plan));
}

TEST_CASE("every checkpoint header field is under the checksum and range-checked when read",
          "[train][faults][checkpoint]") {
    // Issue 10 #2: a flipped bit in state_rank0.bin's step resumed silently at the wrong step; a NaN norm_eps
    // in model.bin scored an eval from NaN logits.
    std::string dir = make_data_dir(), out = dir + "/run";
    REQUIRE(sh(micro(dir, out) + " --steps 2").rc == 0);
    const std::string state = out + "/step_00000002/state_rank0.bin", model = out + "/step_00000002/model.bin";
    const std::string state_bytes = file_text(state), model_bytes = file_text(model);
    unsigned char b = (unsigned char)state_bytes[8] ^ 4;  // the step field, [2..3]: 2 -> 6
    poke(state, 8, &b, 1);
    Result r = sh(micro(dir, out) + " --steps 8 --resume");
    INFO(r.out);
    REQUIRE(one_line_error(r));
    REQUIRE(has(r.out, "state_rank0.bin: checksum mismatch: the file is corrupt"));
    poke(state, 8, state_bytes.data() + 8, 1);

    const double theta = 20000;  // in range, so only the checksum can tell
    poke(model, 18 * 4, &theta, 8);
    REQUIRE_THROWS_WITH(load_model(model), Catch::Contains("checksum mismatch"));
    poke(model, 0, model_bytes.data(), model_bytes.size());

    // Out-of-range fields with a valid checksum (what a buggy writer would produce) are named.
    LoadedModel m = load_model(model);
    struct Case {
        const char* what;
        void (*edit)(ModelConfig&);
    };
    for (const Case& c : {Case{"norm_eps = nan", [](ModelConfig& k) { k.norm_eps = NAN; }},
                          Case{"norm_eps = 0", [](ModelConfig& k) { k.norm_eps = 0; }},
                          Case{"rope_theta = 0", [](ModelConfig& k) { k.rope_theta = 0; }},
                          Case{"mlp_ratio = inf", [](ModelConfig& k) { k.mlp_ratio = INFINITY; }}}) {
        ModelConfig k = m.cfg;
        c.edit(k);
        save_model(dir + "/bad.bin", k, m.params.data(), m.params.size(), 2);
        REQUIRE_THROWS_WITH(load_model(dir + "/bad.bin"), Catch::Contains(std::string("corrupt header: ") + c.what));
    }
    for (int word : {4, 8, 13, 40}) {  // T = 0, tied = 2, the reserved word, a word past the fields
        int32_t h[256];
        memcpy(h, model_bytes.data(), 1024);
        h[word] = word == 8 ? 2 : word == 4 ? 0 : 7;
        put64(h, 24, 0);
        Checksum64 sum;
        sum.update(h, 1024);
        sum.update(model_bytes.data() + 1024, model_bytes.size() - 1024);
        put64(h, 24, (int64_t)sum.value());
        std::string bytes = model_bytes;
        memcpy(&bytes[0], h, 1024);
        std::ofstream(dir + "/bad.bin", std::ios::binary) << bytes;
        INFO("word " << word);
        REQUIRE_THROWS_WITH(load_model(dir + "/bad.bin"), Catch::Contains("corrupt header"));
    }
    TrainState s = load_state(state, m.params.size());
    REQUIRE(s.world == 0);
    s.world = 2, s.rank = 2;  // the data-parallel words must be consistent
    save_state(dir + "/bad_state.bin", s);
    REQUIRE_THROWS_WITH(load_state(dir + "/bad_state.bin", m.params.size()), Catch::Contains("rank 2 of world 2"));
    s.rank = 1, s.first_param = 0, s.model_params = 2 * (int64_t)m.params.size();
    save_state(dir + "/bad_state.bin", s);
    REQUIRE(load_state(dir + "/bad_state.bin", m.params.size()).rank == 1);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("version 1 checkpoints, whose checksum left the header out, are refused in one line", "[train][checkpoint]") {
    // Issue 19: a flipped attention-scale flag in a version 1 header loaded silently (no checksum covers it).
    ModelConfig c;
    c.d = 16, c.V = 40, c.T = 8, c.h_base = 2;
    c.layers = {{16, 2}, {16, 4}};
    const size_t P = param_layout(c).total;
    std::vector<float> p(P);
    for (size_t i = 0; i < P; i++) p[i] = (float)i * 1e-3f;
    // A version 1 file, byte for byte as the version 1 writer made it, with mup_attn flipped to 1.
    int32_t h[256] = {0};
    h[0] = kModelMagic, h[1] = 1, h[2] = c.d, h[3] = c.V, h[4] = c.T, h[5] = c.L(), h[6] = c.h_base, h[8] = 1, h[9] = 1;
    h[11] = c.mlp_multiple;
    put64(h, 14, (int64_t)P), putf64(h, 16, c.mlp_ratio), putf64(h, 18, c.rope_theta), putf64(h, 20, c.norm_eps);
    put64(h, 22, 7);
    std::vector<int32_t> table = {16, 2, 16, 4};
    put64(h, 24, (int64_t)checksum64(p.data(), 4 * P, checksum64(table.data(), 16)));
    std::string path = "/tmp/prism_v1_" + std::to_string(getpid()) + ".bin";
    write_atomically(path, {{h, sizeof h}, {table.data(), 16}, {p.data(), 4 * P}});
    REQUIRE_THROWS_WITH(load_model(path), Catch::Contains("version 1, whose checksum does not cover its header"));
    int32_t s[256] = {0};  // a version 1 state file likewise
    s[0] = kStateMagic, s[1] = 1;
    write_atomically(path, {{s, sizeof s}});
    REQUIRE_THROWS_WITH(load_state(path, 0), Catch::Contains("version 1, whose checksum does not cover its header"));
    unlink(path.c_str());
}

TEST_CASE("SIGTERM and SIGHUP end a run after its step with a checkpoint it resumes from exactly; a second exits",
          "[train][faults][signals]") {
    // Issue 10 #3: the signals killed the trainer at once, and without --ckpt-every all progress was lost.
    // SIGINT takes the same handler; it is not sent here because sh starts background jobs with it ignored
    // (and an ignored signal stays ignored, as under nohup).
    std::string dir = make_data_dir();
    Result a = sh(micro(dir, dir + "/straight") + " --steps 2000 --stop-after 120 --sample-every 0");
    REQUIRE(a.rc == 0);
    // The run is started in the background; the signal goes to it once it has logged 5 steps.
    auto interrupted = [&](const std::string& out, const std::string& signals) {
        return sh("(" + micro(dir, out) + " --steps 2000 --sample-every 0 > " + out +
                  ".txt 2>&1 & pid=$!; "
                  "while kill -0 $pid 2>/dev/null && [ \"$(cat " +
                  out +
                  "/log.jsonl 2>/dev/null | wc -l)\" -lt 5 ]; "
                  "do sleep 0.02; done; "
                  "for s in " +
                  signals + "; do kill -$s $pid; done; wait $pid; echo \"exit $?\"; cat " + out + ".txt)");
    };
    for (const char* sig : {"TERM", "HUP"}) {
        std::string out = dir + "/" + sig;
        Result r = interrupted(out, sig);
        INFO(r.out);
        REQUIRE(has(r.out, "exit 75"));
        REQUIRE(has(r.out, "stop signal: ending the step or phase in progress, then a checkpoint"));
        REQUIRE(has(r.out, std::string("stopped by SIG") + sig + " after step "));
        long stopped = std::stol(file_text(out + "/latest").substr(5));
        REQUIRE(read_log(out + "/log.jsonl").size() == (size_t)stopped);
        Result b = sh(micro(dir, out) + " --steps 2000 --sample-every 0 --resume --stop-after 20");
        INFO(b.out);
        REQUIRE(b.rc == 0);
        auto la = read_log(dir + "/straight/log.jsonl"), lb = read_log(out + "/log.jsonl");
        for (long s = 1; s <= std::min(stopped + 20, 120L); s++) {
            INFO("step " << s);
            REQUIRE(losses_of(la[s]) == losses_of(lb[s]));
        }
    }
    // A second signal ends the process at once (its default action): no checkpoint. Which of the two counts
    // as the second depends on the order the kernel delivers them in.
    Result twice = interrupted(dir + "/twice", "TERM HUP");
    INFO(twice.out);
    REQUIRE((has(twice.out, "exit 129") || has(twice.out, "exit 143")));
    REQUIRE(checkpoints_in(dir + "/twice").empty());
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("a fresh run into a directory holding a run is refused; --overwrite starts afresh", "[train][faults]") {
    // Issue 10 #4: forgetting --resume wiped log.jsonl before the first step, even when the run then failed.
    std::string dir = make_data_dir(), out = dir + "/run";
    REQUIRE(sh(micro(dir, out) + " --steps 3").rc == 0);
    const std::string log = file_text(out + "/log.jsonl");
    Result r = sh(micro(dir, out) + " --steps 3");
    INFO(r.out);
    REQUIRE(one_line_error(r));
    REQUIRE(has(r.out, out + " holds an earlier run (checkpoints up to step_00000003, a latest file, a model.bin and "
                             "a log of "));
    REQUIRE(has(r.out,
                "pass --resume to continue it, or --overwrite to delete its 1 checkpoint, latest, model.bin "
                "and log.jsonl and start afresh"));
    REQUIRE(file_text(out + "/log.jsonl") == log);
    REQUIRE(checkpoints_in(out) == "step_00000003");
    REQUIRE(one_line_error(sh(micro(dir, out) + " --steps 3 --resume --overwrite")));
    // --overwrite on a run that cannot start (a bad shard glob) deletes nothing either.
    REQUIRE(one_line_error(sh(micro(dir, out) + " --steps 3 --overwrite --train /nonexistent.bin")));
    REQUIRE(file_text(out + "/log.jsonl") == log);
    Result o = sh(micro(dir, out) + " --steps 2 --overwrite");
    INFO(o.out);
    REQUIRE(o.rc == 0);
    REQUIRE(checkpoints_in(out) == "step_00000002");
    REQUIRE(read_log(out + "/log.jsonl").size() == 2);
    // A log without checkpoints (a run that failed before its first) is an earlier run too.
    sh("rm -rf " + out + "/step_* " + out + "/latest " + out + "/model.bin");
    // Neither message sends the user to the other (issue 34 #5): both name --overwrite and what it deletes.
    Result fresh = sh(micro(dir, out) + " --steps 2"), resume = sh(micro(dir, out) + " --steps 2 --resume");
    INFO(fresh.out << resume.out);
    REQUIRE(one_line_error(fresh));
    REQUIRE(has(fresh.out, "holds an earlier run with no checkpoint --resume could continue (a log of "));
    REQUIRE(has(fresh.out, "pass --overwrite to delete latest, model.bin and log.jsonl and start afresh"));
    REQUIRE(!has(fresh.out, "pass --resume"));
    REQUIRE(one_line_error(resume));
    REQUIRE(has(resume.out, "holds no checkpoint to continue from, only a log of "));
    REQUIRE(has(resume.out, "start afresh with --overwrite (it deletes latest, model.bin and log.jsonl)"));
    REQUIRE(sh(micro(dir, out) + " --steps 2 --overwrite").rc == 0);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("--keep prunes every older checkpoint in OUT across resumes, and crash leftovers go at start",
          "[train][faults]") {
    // Issue 10 #5: five --stop-after jobs with --keep 2 left five checkpoints.
    std::string dir = make_data_dir(), out = dir + "/run";
    REQUIRE(sh(micro(dir, out) + " --steps 10 --stop-after 1 --keep 2").rc == 0);
    for (int job = 0; job < 4; job++)
        REQUIRE(sh(micro(dir, out) + " --steps 10 --stop-after 1 --keep 2 --resume").rc == 0);
    REQUIRE(checkpoints_in(out) == "step_00000004 step_00000005");
    // What a kill -9 in the middle of a save leaves: a partial directory and a half-written latest.tmp.
    REQUIRE(sh("mkdir " + out + "/step_00000006.tmp && echo x > " + out + "/step_00000006.tmp/model.bin && echo y > " +
               out + "/latest.tmp")
                .rc == 0);
    REQUIRE(sh(micro(dir, out) + " --steps 10 --stop-after 1 --keep 1 --resume").rc == 0);
    REQUIRE(checkpoints_in(out) == "step_00000006");
    REQUIRE(sh("ls " + out).out == "latest\nlock\nlog.jsonl\nmodel.bin\nrun.json\nstep_00000006\n");
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("a failed write of the log is a one-line error, not a silent gap", "[train][faults]") {
    // Issue 10 #8: a full disk left log.jsonl empty through printed steps. Issue 19: under a file-size limit the
    // trainer died of SIGXFSZ without a word; now the write fails (EFBIG) and says so. The limit is per file: sh's
    // ulimit -f 8 is 8 x 512 bytes, which hold the run record (OUT/run.json, ~2.2 KB for this model, written
    // before step 1) but only ~29 log lines of ~140 bytes.
    std::string dir = make_data_dir(), out = dir + "/run";
    Result r = sh("ulimit -f 8; " + micro(dir, out) + " --steps 60");
    INFO(r.out);
    REQUIRE(one_line_error(r));
    REQUIRE(has(r.out, "cannot write " + out + "/log.jsonl: File too large (over the file-size limit, ulimit -f?)"));
    REQUIRE(!has(r.out, "step    40/60"));  // it stopped at the first step it could not log
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
    std::string b = file_text(dir + "/piqa.bin");
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
