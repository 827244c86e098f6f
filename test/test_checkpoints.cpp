// test_checkpoints.cpp: checkpoints and resume, end to end on the micro model of train_util.h. The resume check of
// each engine (train_util.h's check_resume: a run stopped and resumed repeats the uninterrupted run's losses and
// parameters bit for bit): the CPU engine's, resumed by `--resume -o OUT` alone with a differing flag refused, and
// the CUDA engine's on the executor (build/train_prism_executor) with every layer column the kernels run; mpirun's
// is test_dist.cpp's. Then what a checkpoint is: model.bin round-trips the config and every parameter; a torn
// write never replaces the last good checkpoint; every header field is under the checksum and range-checked, and
// version 1 headers are refused; the files of a checkpoint name one run and non-finite parameters are refused;
// --keep holds across resumes; what the first checkpoint needs is checked before step 1; a resume trains on the
// recorded data or says why not; every refused resume leaves OUT byte for byte as it was; and a branch killed at any
// of its renames is completed by the next command and recorded once.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "model/layer_columns.h"
#include "run/checkpoint.h"
#include "run/cli.h"
#include "run/run.h"
#include "run/run_dir.h"
#include "run/run_log.h"
#include "run/run_record.h"
#include "util/json.h"
#include "test/skip.h"
#include "test/train_util.h"

TEST_CASE(
    "resumed training repeats the uninterrupted run bit for bit, resumed by --resume -o OUT alone; a differing "
    "flag is refused in one line",
    "[train][record]") {
    // The CPU engine's resume check (check_resume): 40 steps straight, and 20 then resumed by `--resume -o OUT` alone,
    // every other flag coming from the run's record, after four resumes with a differing flag were refused.
    const std::string dir = make_data_dir();
    const Train train = [&](const std::string& out, const std::string& extra) { return sh(micro(dir, out) + extra); };
    const ResumedRuns runs = check_resume(dir, train, 40, 20, [&](const std::string& out) {
        // A flag that differs from the record, one that was not in it, and a changed model: one line each.
        for (const auto& [flag, says] : std::vector<std::pair<std::string, std::string>>{
                 {"--lr 0.02", "--resume: --lr 0.02 differs from the recorded --lr 0.01 ("},
                 {"--no-shuffle", "--resume: --no-shuffle is not part of the recorded run"},
                 {"--layers 3", "--resume: --layers 3 differs from the recorded --layers 2"},
                 {"--total-batch 256", "--resume: --total-batch 256 differs from the recorded --total-batch 128"}}) {
            Result r = sh("./train_prism --resume -o " + out + " " + flag);
            INFO(flag << ": " << r.out);
            CHECK(one_line_error(r));
            CHECK(r.out.find(says) != std::string::npos);
            CHECK(r.out.find("a resume may change only --out, --batch, --steps") != std::string::npos);
        }
        // The refusals changed nothing: the resume alone continues as if never interrupted (check_resume).
        return sh("./train_prism --resume -o " + out);
    });
    CHECK(has(runs.stopped.out, "continue with train_prism --resume -o " + dir + "/resumed"));
    // The loss fell (the counting pattern is learnable) and validation ran every 10 steps.
    auto la = runs.straight_log;
    double first, last;
    sscanf(la[1].c_str(), "{\"step\": 1, \"tokens\": %*d, \"train_loss\": %lf", &first);
    sscanf(la[40].c_str(), "{\"step\": 40, \"tokens\": %*d, \"train_loss\": %lf", &last);
    REQUIRE(first == Approx(std::log(256.0)).margin(0.2));
    REQUIRE(last < first - 1.0);
    REQUIRE(la[10].find("val_loss") != std::string::npos);
    REQUIRE(la[11].find("val_loss") == std::string::npos);
    REQUIRE(load_model(dir + "/resumed/model.bin").step == 40);

    // The record: the resolved flags, the model, and one entry per invocation.
    RunRecord rec;
    REQUIRE(read_run_record(dir + "/resumed", rec));
    CHECK(rec.arg("--lr") == "0.01");
    CHECK(rec.arg("--steps") == "40");
    CHECK(rec.arg("--seed") == "1337");
    CHECK(rec.status() == "done");
    const json::Value* inv = rec.doc.find("invocations");
    REQUIRE(inv);
    REQUIRE(inv->arr.size() == 2);
    CHECK(json::str_field(inv->arr[0], "status") == "stopped");
    CHECK(json::int_field(inv->arr[0], "end_step") == 20);
    CHECK(json::int_field(inv->arr[1], "start_step") == 20);
    CHECK(json::str_field(inv->arr[1], "commit") != "");
    CHECK(json::field(inv->arr[1], "ended").kind == json::Value::String);
    const json::Value& layers = json::field(json::field(rec.doc, "model"), "layers");
    REQUIRE(layers.arr.size() == 2);
    CHECK(json::int_field(layers.arr[0], "layer") == 1);
    CHECK(json::int_field(layers.arr[0], "head_dim") == 16);

    // What may change: the length (continuing a finished run), and the cadence.
    Result c = sh("./train_prism --resume -o " + dir + "/resumed --steps 46 --val-every 3");
    INFO(c.out);
    REQUIRE(c.rc == 0);
    CHECK(read_log(dir + "/resumed/log.jsonl").size() == 46);
    REQUIRE(read_run_record(dir + "/resumed", rec));
    CHECK(rec.arg("--steps") == "46");
    CHECK(json::field(rec.doc, "invocations").arr.size() == 3);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("a hybrid model (Gated DeltaNet and attention layers) resumes bit for bit and its loss falls",
          "[train][gdn]") {
    // check_resume on the CPU engine: 12 steps straight, and 6 then --resume; the gdn layer's tensors and their
    // AdamW moments survive the checkpoint exactly, and model.bin carries the mixer column; the loss falls.
    const std::string dir = make_data_dir();
    const Train train = [&](const std::string& out, const std::string& extra) {
        return sh(micro(dir, out) + " --mixer gdn,attention" + extra);
    };
    const ResumedRuns runs = check_resume(dir, train, 12, 6);
    double first, last;
    sscanf(runs.straight_log.at(1).c_str(), "{\"step\": 1, \"tokens\": %*d, \"train_loss\": %lf", &first);
    sscanf(runs.straight_log.at(12).c_str(), "{\"step\": 12, \"tokens\": %*d, \"train_loss\": %lf", &last);
    CHECK(last < first - 0.2);  // measured 5.57 -> 5.27 in 12 steps
    const LoadedModel m = load_model(dir + "/resumed/model.bin");
    REQUIRE(m.cfg.layers[0].gdn());
    REQUIRE(m.cfg.layers[1].softmax());
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("the GPU engine trains KV groups, windows and a layer without an MLP, and resumes bit for bit",
          "[train][layers]") {
    // The CUDA engine's resume check (check_resume): build/train_prism_executor is train_prism with the CUDA engine on
    // the CUDA-on-CPU executor (built by make test), the GPU code path without a GPU, here with every layer column the
    // CUDA kernels added: GQA (2 K/V heads for 4 query heads), a window of 16 in layers 1 and 3 (T 32), no MLP in
    // layer 2. Six steps straight, and three plus three resumed; the loss falls.
    std::string dir = make_data_dir();
    const Train train = [&](const std::string& out, const std::string& extra) {
        std::string cmd =
            micro(dir, out) + " --layers 3 --heads 4 -b 2 --kv-heads gqa:2 --window local:16,1:1 --no-mlp 2" + extra;
        return sh("./build/train_prism_executor" + cmd.substr(std::string("./train_prism").size()));
    };
    const ResumedRuns runs = check_resume(dir, train, 6, 3);
    REQUIRE(has(runs.straight.out, "engine: CUDA"));
    auto la = runs.straight_log;
    double first, last;
    sscanf(la[1].c_str(), "{\"step\": 1, \"tokens\": %*d, \"train_loss\": %lf", &first);
    sscanf(la[6].c_str(), "{\"step\": 6, \"tokens\": %*d, \"train_loss\": %lf", &last);
    CHECK(last < first);
    LoadedModel ma = load_model(dir + "/straight/model.bin");
    REQUIRE(ma.cfg.layers[0].kv() == 2);
    REQUIRE(ma.cfg.layers[0].window == 16);
    REQUIRE(!ma.cfg.layers[1].mlp);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("a torn checkpoint never replaces the last good one", "[train]") {
    std::string dir = make_data_dir(), out = dir + "/run";
    REQUIRE(sh(micro(dir, out) + " --steps 6 --stop-after 3").rc == 0);
    // A crash while writing the next checkpoint leaves a partial .tmp directory behind.
    REQUIRE(sh("mkdir -p " + out + "/step_00000006.tmp && head -c 100 " + out + "/step_00000003/model.bin > " + out +
               "/step_00000006.tmp/model.bin")
                .rc == 0);
    Result r = sh(micro(dir, out) + " --steps 6 --resume");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    REQUIRE(r.out.find("resumed from " + out + "/step_00000003 at step 3") != std::string::npos);
    REQUIRE(read_log(out + "/log.jsonl").size() == 6);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("model.bin round-trips the config and every parameter", "[train][checkpoint]") {
    ModelConfig c;
    c.d = 16, c.V = 50, c.T = 8, c.h_base = 2, c.norm = NormType::RMSNorm, c.tied = false, c.mup_attn = true;
    c.layers = {{32, 2}, {16, 4}, {32, 16}};
    size_t P = param_layout(c).total;
    std::vector<float> p(P);
    for (size_t i = 0; i < P; i++) p[i] = (float)i * 0.001f - 1.0f;
    char tmpl[] = "/tmp/prism_ckpt_XXXXXX";
    std::string dir = mkdtemp(tmpl);
    save_model(dir + "/m.bin", c, p.data(), P, 123);
    LoadedModel m = load_model(dir + "/m.bin");
    REQUIRE(m.step == 123);
    REQUIRE(m.params == p);
    REQUIRE(m.cfg.layers.size() == 3);
    REQUIRE(m.cfg.layers[1].width == 16);
    REQUIRE(m.cfg.layers[2].heads == 16);
    REQUIRE(m.cfg.norm == NormType::RMSNorm);
    REQUIRE(!m.cfg.tied);
    REQUIRE(m.cfg.mup_attn);
    REQUIRE(m.cfg.mlp_ratio == c.mlp_ratio);
    TrainState s;
    s.step = 5, s.tokens = 999, s.rng = 42;
    s.loader = {1, 2, 3};                        // a length that is not a multiple of 8
    s.m = p, s.v = std::vector<float>(P, 0.5f);  // v, a mean of squares, is never negative
    save_state(dir + "/s.bin", s);
    TrainState r = load_state(dir + "/s.bin", P);
    REQUIRE(r.step == 5);
    REQUIRE(r.tokens == 999);
    REQUIRE(r.rng == 42);
    REQUIRE(r.loader == s.loader);
    REQUIRE(r.m == p);
    REQUIRE_THROWS_WITH(load_state(dir + "/s.bin", P + 1), Catch::Contains("belongs to a different model"));
    REQUIRE_THROWS_WITH(load_model(dir + "/nope.bin"), Catch::Contains("cannot open checkpoint"));
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("every checkpoint header field is under the checksum and range-checked when read",
          "[train][faults][checkpoint]") {
    // Issue 10 #2: a flipped bit in state_rank0.bin's step resumed silently at the wrong step; a NaN norm_eps
    // in model.bin scored an eval from NaN logits.
    std::string dir = make_data_dir(), out = dir + "/run";
    REQUIRE(sh(micro(dir, out) + " --steps 2").rc == 0);
    const std::string state = out + "/step_00000002/state_rank0.bin", model = out + "/step_00000002/model.bin";
    const std::string state_bytes = read_file(state), model_bytes = read_file(model);
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

TEST_CASE("a checkpoint whose files name different runs is refused; non-finite parameters are refused at load",
          "[train][faults][checkpoint]") {
    // Issue 19: a state_rank0.bin from another run with the same seed resumed with exit 0.
    std::string dir = make_data_dir();
    REQUIRE(sh(micro(dir, dir + "/a") + " --steps 2").rc == 0);
    REQUIRE(sh(micro(dir, dir + "/b") + " --steps 2").rc == 0);
    REQUIRE(sh("cp " + dir + "/b/step_00000002/state_rank0.bin " + dir + "/a/step_00000002/").rc == 0);
    Result r = sh(micro(dir, dir + "/a") + " --steps 4 --resume");
    INFO(r.out);
    REQUIRE(one_line_error(r));
    REQUIRE(has(r.out, "state_rank0.bin names run "));
    REQUIRE(has(r.out, ": the checkpoint mixes two runs (a file copied in from another run?)"));

    LoadedModel m = load_model(dir + "/b/model.bin");
    REQUIRE(m.run_id != 0);
    m.params[7] = NAN;
    save_model(dir + "/nan.bin", m.cfg, m.params.data(), m.params.size(), m.step, m.run_id);  // a valid checksum
    REQUIRE_THROWS_WITH(load_model(dir + "/nan.bin"), Catch::Contains("parameter 7 of ") && Catch::Contains("is nan"));
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("what the first checkpoint needs is checked before step 1: a too-long -o fails at once", "[train][faults]") {
    std::string dir = make_data_dir(), out = dir;
    while (out.size() < 4060) out += "/" + std::string(200, 'x');  // the run's own names fit; the checkpoint's not
    out = out.substr(0, 4060);
    Result r = sh("mkdir -p " + out + " 2>/dev/null; " + micro(dir, out) + " --steps 3");
    INFO(r.out.substr(r.out.size() > 600 ? r.out.size() - 600 : 0));
    REQUIRE(one_line_error(r));
    REQUIRE(has(r.out, "is too long: the checkpoints' paths"));
    REQUIRE(!has(r.out, "step     1/3"));
    sh("rm -rf '" + dir + "'");
}

TEST_CASE(
    "the data stays the recorded data: a set replaced under a running trainer stops it; a resume onto other "
    "shards is refused unless --allow-data-change; an old record resumes with a note",
    "[train][faults]") {
    std::string dir = make_data_dir(), out = dir + "/run";
    // Two sets as prepare_shards writes them (one id on all of a set's shards), the second in dir/new.
    std::vector<int> val(4000), train(36000), other(36000);
    for (size_t i = 0; i < val.size(); i++) val[i] = (int)(i * 7 % 256);
    for (size_t i = 0; i < train.size(); i++) train[i] = (int)(i * 7 % 256), other[i] = (int)(i * 3 % 256);
    write_shard(dir + "/syn_val_000000.bin", val, true, 0x1111);
    write_shard(dir + "/syn_train_000001.bin", train, true, 0x1111);
    REQUIRE(sh("mkdir " + dir + "/new").rc == 0);
    write_shard(dir + "/new/syn_val_000000.bin", val, true, 0x2222);
    write_shard(dir + "/new/syn_train_000001.bin", other, true, 0x2222);
    // prepare_shards --overwrite renames the new set over the old one: the trainer stops at its next validation.
    Result r = sh(background(micro(dir, out) + " --steps 100000 --ckpt-every 5", dir + "/first.txt",
                             "[ -s " + out + "/latest ]") +
                  "mv " + dir + "/new/syn_train_000001.bin " + dir + "/new/syn_val_000000.bin " + dir +
                  "/; "
                  "wait $pid; echo \"first exit $?\")");
    INFO(r.out);
    REQUIRE(has(r.out, "first exit 1"));
    const std::string first = read_file(dir + "/first.txt");
    INFO(first);
    REQUIRE(one_line_error({1, first}));
    REQUIRE(has(first, "error: shard " + dir +
                           "/syn_val_000000.bin changed while the run used it (set "
                           "0000000000001111, 4000 tokens at the start; now set 0000000000002222, 4000 tokens)"));
    const std::string latest = read_file(out + "/latest");
    REQUIRE(sh("test -f " + out + "/" + latest.substr(0, latest.size() - 1) + "/model.bin").rc == 0);  // kept
    // A resume onto the new set: refused, naming the flag; accepted with it.
    Result a = sh(micro(dir, out) + " --steps 100000 --resume --stop-after 1");
    INFO(a.out);
    REQUIRE(one_line_error(a));
    REQUIRE(has(a.out, "error: --resume: the training shards " + dir + "/syn_train_*.bin are not the data " + out +
                           "/run.json recorded (fingerprint "));
    REQUIRE(has(a.out,
                "another set, or its shards were replaced); resume on the recorded data, or pass "
                "--allow-data-change to go on with this data"));
    Result n = sh(micro(dir, out) + " --steps 100000 --stop-after 1");
    REQUIRE(has(n.out, "holds an earlier run"));  // (a fresh run is refused as ever)
    Result y = sh(micro(dir, out) + " --steps 100000 --resume --stop-after 1 --allow-data-change");
    INFO(y.out);
    REQUIRE(y.rc == 0);
    REQUIRE(has(y.out, "note: --resume: the training shards "));
    REQUIRE(has(y.out, "going on with this data (--allow-data-change), the record now fingerprints it"));
    const std::string rec = read_file(out + "/run.json");
    REQUIRE(!has(rec.substr(0, rec.find("\"model\"")), "--allow-data-change"));  // never among the recorded args
    Result again = sh(micro(dir, out) + " --steps 100000 --resume --stop-after 1");
    INFO(again.out);
    REQUIRE(again.rc == 0);  // the record holds the new data now
    REQUIRE(has(sh(micro(dir, out) + " --steps 3 --allow-data-change").out,
                "error: --allow-data-change only applies to --resume"));
    // A record from before fingerprints: resumes, with a note.
    REQUIRE(sh("sed -i '/^ \"data\": /d' " + out + "/run.json").rc == 0);
    Result old = sh(micro(dir, out) + " --steps 100000 --resume --stop-after 1");
    INFO(old.out);
    REQUIRE(old.rc == 0);
    REQUIRE(has(old.out,
                "note: " + out +
                    "/run.json records no fingerprint of its data (written by an older "
                    "train_prism): the shards are not compared with the first run's; this invocation records them"));
    REQUIRE(has(read_file(out + "/run.json"), "\n \"data\": {\"train\": \""));
    sh("rm -rf '" + dir + "'");
}

// A resume may continue only the model it trained: run/run.h's model_difference compares every scalar of the
// model (model_config.h's model_scalars, the declaration model.bin's header is written from) and every column of
// every layer (model/layer_columns.h), each found different on its own here.
TEST_CASE("a resume's identity check compares every field of the model, each on its own", "[checkpoints]") {
    // ModelConfig's fields: d, V, T, h_base, mlp_ratio, mlp_multiple, norm, tied, mup_attn, init_width_scale,
    // mup_base_d, rope_theta, norm_eps (model_scalars) and layers (layer_columns). A new field changes the size: add it to
    // model_scalars (or to the layer table), then this number.
    static_assert(sizeof(ModelConfig) == 80, "ModelConfig has a field model_scalars() may not hold: add it there");
    ModelConfig base;
    base.d = 64, base.V = 256, base.T = 32, base.h_base = 4;
    base.layers.assign(3, LayerSpec{64, 4});
    REQUIRE(model_difference(base, base).empty());
    REQUIRE(model_scalars().size() == 13);
    for (const ModelScalar& s : model_scalars()) {
        ModelConfig want = base;
        s.set(want, s.get(base) == s.lo ? s.hi : s.lo);
        INFO(s.name);
        CHECK(model_difference(base, want).rfind(std::string(s.name) + " ", 0) == 0);
    }
    for (const LayerColumn& col : layer_columns()) {
        ModelConfig want = base;
        bool changed = false;  // layer 2's stored word set to the first in-bound value that changes what it computes
        for (int v = col.lo; v <= std::min(col.hi, col.lo + 64) && !changed; v++) {
            want = base, col.set(want.layers[1], v);
            changed = col.value(want, 1) != col.value(base, 1);
        }
        INFO(col.name);
        REQUIRE(changed);
        CHECK(model_difference(base, want).rfind(std::string("layer 2 ") + col.key + " ", 0) == 0);
    }
    // A column of words names them: the mixer
    ModelConfig hybrid = base;
    hybrid.layers[2].mixer = 1;
    CHECK(model_difference(base, hybrid) == "layer 3 mixer attention vs gdn asked for");
}

// Without a record, a resume builds the model from the flags given and the checkpoint refuses one that is not its
// own: a flag left out (here --no-rope) is named with both values, and nothing is trained.
TEST_CASE("a resume without run.json whose flags lack --no-rope is refused, naming the layer", "[checkpoints]") {
    const std::string dir = make_data_dir(), out = dir + "/nr";
    REQUIRE(sh(micro(dir, out) + " --cpu --steps 2 --no-rope 2 --sample-every 0").rc == 0);
    REQUIRE(unlink((out + "/run.json").c_str()) == 0);
    const Result r = sh(micro(dir, out) + " --cpu --steps 3 --sample-every 0 --resume");
    REQUIRE(r.rc == 1);
    REQUIRE(one_line_error(r));
    CHECK(r.out.find("holds a different model (layer 2 rope 0 vs 1 asked for)") != std::string::npos);
    CHECK(access((out + "/step_00000003").c_str(), F_OK) != 0);
    sh("rm -rf '" + dir + "'");
}

// The record keeps the data's globs as absolute paths beside their fingerprints: a run started with relative ones
// resumes from another working directory, and the same shards named by another path are the same data.
TEST_CASE("a resume finds the run's data from any directory; the same shards by another path are the same data",
          "[checkpoints]") {
    char* cwd = getcwd(nullptr, 0);
    const std::string dir = make_data_dir(), root = cwd;
    free(cwd);
    const std::string relative = "cd '" + dir + "' && '" + root +
                                 "/train_prism' --vocab 256 --d 32 --layers 2 --heads 2 --seq-len 32 -b 4 --cpu "
                                 "--val-every 2 --val-tokens 256 --sample-every 0 --train 'syn_train_*.bin' --val "
                                 "'syn_val_*.bin' -o run --steps 4";
    REQUIRE(sh(relative + " --stop-after 2").rc == 0);
    const Result a = sh("./train_prism --resume -o '" + dir + "/run' --stop-after 1");  // from the checkout's root
    INFO(a.out);
    REQUIRE(a.rc == 0);
    CHECK(a.out.find("resumed from " + dir + "/run/step_00000002 at step 2") != std::string::npos);
    const Result b = sh("./train_prism --resume -o '" + dir + "/run' --train '" + dir + "/syn_train_*.bin' --val '" +
                        dir + "/syn_val_*.bin'");
    INFO(b.out);
    REQUIRE(b.rc == 0);
    CHECK(b.out.find("resumed from " + dir + "/run/step_00000003 at step 3") != std::string::npos);
    sh("rm -rf '" + dir + "'");
}

// A run to copy for the resume tests below: 12 wsd steps (decay over the last 3), a checkpoint every 4, all kept.
static std::string make_branchable_run(const std::string& dir) {
    const std::string base = dir + "/base";
    Result r = sh(micro(dir, base) + " --steps 12 --ckpt-every 4 --keep 10 --lr-schedule wsd --decay-frac 0.25");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    REQUIRE(checkpoints_in(base) == "step_00000004 step_00000008 step_00000012");
    return base;
}

// Decide, then act (run/run.h): a resume runs every rule it will apply and reads and checks the checkpoint it will
// load before it moves, cuts, links or records anything, so a refusal at any point leaves OUT byte for byte as it
// was. Each refusal here runs on its own copy of one run, its tree compared before and after.
TEST_CASE("every refused resume leaves the run directory byte for byte as it was", "[checkpoints][faults]") {
    const std::string dir = make_data_dir(), base = make_branchable_run(dir);
    std::vector<int> other(36000);
    for (size_t i = 0; i < other.size(); i++) other[i] = (int)(i * 3 % 256);
    REQUIRE(sh("mkdir " + dir + "/other").rc == 0);
    write_shard(dir + "/other/syn_train_000001.bin", other);
    struct Refusal {
        const char* what;
        std::string prepare, flags, says;  // prepare: a shell command on the copy, $C
    };
    const std::string rec = "$C/run.json";
    const std::vector<Refusal> refusals = {
        {"--branch-from a checkpoint beyond a shorter --steps", "", "--branch-from step_00000008 --steps 6",
         "is at step 8, beyond --steps 6"},
        {"--branch-from with a --decay-frac that changes a step done", "",
         "--branch-from step_00000012 --decay-frac 0.5", "would change the lr of step 7, already done"},
        {"--branch-from with a --warmup that changes a step done", "", "--branch-from step_00000004 --warmup 3",
         "would change the lr of step 1, already done"},
        {"--branch-from a checkpoint whose model.bin is corrupt",
         "printf X | dd of=$C/step_00000008/model.bin bs=1 seek=3000 conv=notrunc 2>/dev/null",
         "--branch-from step_00000008", "step_00000008/model.bin"},
        {"--branch-from a checkpoint whose state file is cut short",
         "truncate -s 2000 $C/step_00000008/state_rank0.bin", "--branch-from step_00000008",
         "step_00000008/state_rank0.bin"},
        {"--branch-from a name that is no checkpoint", "", "--branch-from step_00000099",
         "--branch-from step_00000099: not a checkpoint directory of"},
        {"--branch-from another model", "", "--branch-from step_00000008 --d 64", "--d 64 differs from the recorded"},
        {"--resume with another --lr", "", "--lr 2e-2", "--lr 0.02 differs from the recorded --lr 0.01"},
        {"--resume with --steps before the checkpoint", "", "--steps 6", "is at step 12, beyond --steps 6"},
        {"--resume onto other shards", "", "--train '" + dir + "/other/syn_train_*.bin'", "are not the data"},
        {"--resume with another global batch", "", "--total-batch 256", "--total-batch"},
        {"--resume whose latest names no checkpoint", "echo step_00000016 > $C/latest", "",
         "/latest names step_00000016, which does not exist"},
        {"--resume with a crash's leftovers in OUT and a refused flag",
         "mkdir $C/step_00000012.tmp && echo w > $C/step_00000012.tmp/state_rank0.bin.tmp && echo x > $C/latest.tmp && "
         "echo y > $C/run.json.tmp",
         "--lr 2e-2", "differs from the recorded --lr"},
        {"run.json's plan edited: another lr", "sed -i 's/\"lr\": 0.01,/\"lr\": 0.02,/' " + rec, "",
         "disagrees with itself: its \"plan\" has \"lr\": 0.02, its \"args\" give 0.01 (--lr)"},
        {"run.json's plan edited: another length", "sed -i 's/\"steps\": 12,/\"steps\": 13,/' " + rec, "",
         "its \"plan\" has \"steps\": 13, its \"args\" give 12 (--steps)"},
        {"run.json's plan edited: a warmup of 1e300", "sed -i 's/\"warmup\": 0,/\"warmup\": 1e300,/' " + rec, "",
         "its \"plan\" has \"warmup\": 1e+300, its \"args\" give 0"},
        {"run.json's args edited: a warmup of 1e300",
         "sed -i 's/\\[\"--steps\", \"12\"\\]/[\"--steps\", \"12\"], [\"--warmup\", \"1e300\"]/' " + rec, "",
         "run.json's \"args\": --warmup"},
        {"run.json's args edited: a word for the lr",
         "sed -i 's/\\[\"--lr\", \"0.01\"\\]/[\"--lr\", \"fast\"]/' " + rec, "", "run.json's \"args\": --lr"},
        {"run.json's plan edited: a string for a number", "sed -i 's/\"seed\": 1337/\"seed\": \"1337\"/' " + rec, "",
         "run.json's \"plan\": {\"seed\": \"1337\"} is not a number"},
    };
    int n = 0;
    for (const Refusal& f : refusals) {
        const std::string c = dir + "/case" + std::to_string(n++);
        INFO(f.what);
        REQUIRE(sh("cp -a " + base + " " + c).rc == 0);
        if (!f.prepare.empty()) REQUIRE(sh("C=" + c + "; " + f.prepare).rc == 0);
        const std::string before = tree_of(c);
        Result r = sh(micro(dir, c) + " --resume " + f.flags);
        INFO(r.out);
        CHECK(one_line_error(r));
        CHECK(has(r.out, f.says));
        CHECK(tree_of(c) == before);  // tree unchanged
    }
    sh("rm -rf '" + dir + "'");
}

// The branch's changes run in an order a crash can be completed from (run/run_dir.h's begin_branch: its intent in
// OUT/branch.json first). strace kills the trainer at its n-th rename, for every n up to the first after which the
// branch is recorded; then the same command again either finds nothing of the branch begun (the kill came before
// branch.json existed: OUT is as it was) or completes the branch first, and either way ends where the branch that
// was never interrupted ended: the same record of the lineage (once) and the same parameters, bit for bit.
TEST_CASE("a branch killed at any of its renames is completed by the next command and recorded once",
          "[checkpoints][faults]") {
    if (sh("command -v strace").rc != 0) {
        PRISM_SKIP("strace", "strace is not installed (setup.sh installs it): no kill at each rename");
        return;
    }
    const std::string dir = make_data_dir(), base = make_branchable_run(dir), ref = dir + "/ref";
    // From step 4 into a longer decay (steps 7-12): the steps done keep their lr, the rest differ from the base run's.
    const std::string branch = " --resume --branch-from step_00000004 --decay-frac 0.5";
    REQUIRE(sh("cp -a " + base + " " + ref).rc == 0);
    Result whole = sh(micro(dir, ref) + branch);
    INFO(whole.out);
    REQUIRE(whole.rc == 0);
    REQUIRE(
        has(whole.out, "branch: " + ref + "/latest names step_00000004; the later checkpoints and the log moved to "));
    const std::vector<float> want = load_model(ref + "/model.bin").params;
    REQUIRE(want != load_model(base + "/model.bin").params);  // the test means something: the branch trained anew
    auto branches_in = [](const std::string& out) {
        RunRecord r;
        REQUIRE(read_run_record(out, r));
        const json::Value* b = r.doc.find("branches");
        return b ? run_record::dump(*b) : std::string("none");
    };
    const std::string recorded = branches_in(ref);
    REQUIRE(recorded ==
            "[{\"step\": 4, \"flag\": \"--branch-from\", \"old\": \"step_00000012\", \"new\": \"step_00000004\"}, "
            "{\"step\": 4, \"flag\": \"--decay-frac\", \"old\": \"0.25\", \"new\": \"0.5\"}]");
    // The old lineage is kept whole: its checkpoints and its log.
    REQUIRE(sh("ls -d " + ref + "/lineage_*/step_00000008 " + ref + "/lineage_*/step_00000012").rc == 0);
    const std::string old_log = sh("ls " + ref + "/lineage_*/log.jsonl").out;
    REQUIRE(read_log(old_log.substr(0, old_log.find('\n'))).size() == 12);
    auto without_tmp = [](const std::string& tree) {
        std::string kept, line;
        std::istringstream in(tree);
        while (std::getline(in, line))
            if (line.find(".tmp") == std::string::npos) kept += line + "\n";
        return kept;
    };
    bool recorded_before_kill = false;
    for (int n = 1; n <= 20 && !recorded_before_kill; n++) {
        const std::string c = dir + "/kill" + std::to_string(n);
        INFO("killed at rename " << n);
        REQUIRE(sh("cp -a " + base + " " + c).rc == 0);
        const std::string before = tree_of(c);
        Result k =
            sh("strace -f -o /dev/null -e trace=rename,renameat,renameat2 "
               "-e inject=rename,renameat,renameat2:signal=KILL:when=" +
               std::to_string(n) + " " + micro(dir, c) + branch);
        INFO(k.out);
        REQUIRE(k.rc != 0);  // killed (the run renames more than the branch does)
        const bool begun = sh("test -e " + c + "/branch.json").rc == 0;
        recorded_before_kill = !begun && branches_in(c) != "none";
        if (!begun && !recorded_before_kill) CHECK(without_tmp(tree_of(c)) == without_tmp(before));  // nothing done
        Result next = sh(micro(dir, c) + branch);  // the same command again
        INFO(next.out);
        REQUIRE(next.rc == 0);
        if (begun) CHECK(has(next.out, "was stopped half way; completed now"));
        CHECK(sh("test -e " + c + "/branch.json").rc != 0);
        CHECK(sh("ls " + c + " | grep -q '\\.tmp$'").rc != 0);  // no leftover
        CHECK(branches_in(c) == recorded);                      // the lineage, recorded once
        CHECK(sh("ls -d " + c + "/lineage_*/step_00000008 " + c + "/lineage_*/step_00000012").rc == 0);
        CHECK(read_log(c + "/log.jsonl").size() == 12);
        CHECK(load_model(c + "/model.bin").params == want);
    }
    REQUIRE(recorded_before_kill);  // every rename of the branch was reached
    // A second --branch-from to the checkpoint latest names already, with nothing later, changes nothing.
    Result again = sh(micro(dir, ref) + " --resume --branch-from step_00000012");
    INFO(again.out);
    REQUIRE(again.rc == 0);
    REQUIRE(has(again.out, "latest names step_00000012 already, with nothing later: nothing to move"));
    CHECK(branches_in(ref) == recorded);
    REQUIRE(sh("ls " + ref + " | grep -q '\\.tmp$'").rc != 0);
    sh("rm -rf '" + dir + "'");
}
