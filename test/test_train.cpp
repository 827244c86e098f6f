// End-to-end tests of the train_prism binary on a micro model and synthetic shards: a resumed run repeats the
// uninterrupted run's losses exactly, the log has a line per step, checkpoints round-trip, and bad input (flags,
// shards, checkpoints) ends with a one-line error and a non-zero exit. The binary is built by `make test`
// before this runs (the Makefile's test target depends on it).
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "run/checkpoint.h"
#include "test/train_util.h"

TEST_CASE("resumed training repeats the uninterrupted run's losses bit for bit", "[train]") {
    std::string dir = make_data_dir();
    Result a = sh(micro(dir, dir + "/straight") + " --steps 40");
    INFO(a.out);
    REQUIRE(a.rc == 0);
    Result b1 = sh(micro(dir, dir + "/resumed") + " --steps 40 --stop-after 20");
    INFO(b1.out);
    REQUIRE(b1.rc == 0);
    REQUIRE(b1.out.find("stopped after 20 steps") != std::string::npos);
    Result b2 = sh(micro(dir, dir + "/resumed") + " --steps 40 --resume");
    INFO(b2.out);
    REQUIRE(b2.rc == 0);
    REQUIRE(b2.out.find("resumed from") != std::string::npos);

    auto la = read_log(dir + "/straight/log.jsonl"), lb = read_log(dir + "/resumed/log.jsonl");
    REQUIRE(la.size() == 40);  // a line per step
    REQUIRE(lb.size() == 40);
    for (long s = 1; s <= 40; s++) {
        INFO("step " << s);
        REQUIRE(losses_of(la[s]) == losses_of(lb[s]));  // every digit printed: identical on the CPU
    }
    // The loss fell (the counting pattern is learnable) and validation ran every 10 steps.
    double first, last;
    sscanf(la[1].c_str(), "{\"step\": 1, \"tokens\": %*d, \"train_loss\": %lf", &first);
    sscanf(la[40].c_str(), "{\"step\": 40, \"tokens\": %*d, \"train_loss\": %lf", &last);
    REQUIRE(first == Approx(std::log(256.0)).margin(0.2));
    REQUIRE(last < first - 1.0);
    REQUIRE(la[10].find("val_loss") != std::string::npos);
    REQUIRE(la[11].find("val_loss") == std::string::npos);

    // Both runs end with the same parameters.
    LoadedModel ma = load_model(dir + "/straight/model.bin"), mb = load_model(dir + "/resumed/model.bin");
    REQUIRE(ma.step == 40);
    REQUIRE(ma.params == mb.params);
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

TEST_CASE("the GPU engine trains KV groups, windows and a layer without an MLP, and resumes bit for bit",
          "[train][layers]") {
    // train_prism on the executor (as above) with every layer column the CUDA kernels added: GQA (2 K/V heads for 4
    // query heads), a window of 16 in layers 1 and 3 (T 32), no MLP in layer 2. Six steps straight, and three plus
    // three resumed: every logged loss and norm, and the final weights, identical; the loss falls.
    std::string dir = make_data_dir();
    auto run = [&](const std::string& out, const std::string& extra) {
        std::string cmd = micro(dir, dir + "/" + out) +
                          " --layers 3 --heads 4 -b 2 --kv-heads gqa:2 --window local:16,1:1 --no-mlp 2 --steps 6 " +
                          extra;
        return sh("./build/train_prism_executor" + cmd.substr(std::string("./train_prism").size()));
    };
    Result a = run("straight", ""), b1 = run("resumed", "--stop-after 3"), b2 = run("resumed", "--resume");
    INFO(a.out << b1.out << b2.out);
    REQUIRE(a.rc == 0);
    REQUIRE(b1.rc == 0);
    REQUIRE(b2.rc == 0);
    REQUIRE(a.out.find("engine: CUDA") != std::string::npos);
    REQUIRE(b2.out.find("resumed from") != std::string::npos);
    auto la = read_log(dir + "/straight/log.jsonl"), lb = read_log(dir + "/resumed/log.jsonl");
    REQUIRE(la.size() == 6);
    REQUIRE(lb.size() == 6);
    for (auto& [step, line] : la) CHECK(losses_of(line) == losses_of(lb[step]));
    double first, last;
    sscanf(la[1].c_str(), "{\"step\": 1, \"tokens\": %*d, \"train_loss\": %lf", &first);
    sscanf(la[6].c_str(), "{\"step\": 6, \"tokens\": %*d, \"train_loss\": %lf", &last);
    CHECK(last < first);
    LoadedModel ma = load_model(dir + "/straight/model.bin"), mb = load_model(dir + "/resumed/model.bin");
    REQUIRE(ma.cfg.layers[0].kv() == 2);
    REQUIRE(ma.cfg.layers[0].window == 16);
    REQUIRE(!ma.cfg.layers[1].mlp);
    REQUIRE(ma.params == mb.params);
    sh("rm -rf '" + dir + "'");
}
