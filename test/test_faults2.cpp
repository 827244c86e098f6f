// Nothing lost, round two (issue 19): one test per class of fault a red-team campaign found on main. Deletion
// never leaves OUT or follows a link; a shard set is replaced whole (a kill -9 at any moment of prepare_shards
// --overwrite leaves a set the trainer trains on whole, or one it refuses); a fresh run refuses any OUT holding
// what the trainer writes; one writer per OUT; rank variables without a launcher are an error; the files of a
// checkpoint name one run; non-finite parameters are refused at load; what the first checkpoint needs is
// checked before step 1; stop signals end validation and the start-up in bounded time; non-regular files are
// refused in one line; and the messages the campaign found misleading say what is true. Micro models (train_util.h),
// a few seconds each.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "run/checkpoint.h"
#include "run/cli.h"
#include "run/run_dir.h"
#include "dataloader.h"
#include "run/run_log.h"
#include "test/train_util.h"

#define PREPARE_SHARDS_NO_MAIN
#include "data/prepare_shards.cpp"

namespace {

bool has(const std::string& out, const std::string& what) { return out.find(what) != std::string::npos; }

std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// A run started in the background: its command, with `until` a shell condition it waits for before returning.
// Returns the pid (as text) in $pid of the following shell commands.
std::string background(const std::string& cmd, const std::string& log, const std::string& until) {
    return "(" + cmd + " > " + log + " 2>&1 & pid=$!; n=0; while kill -0 $pid 2>/dev/null && ! (" + until +
           ") && [ $n -lt 3000 ]; do sleep 0.01; n=$((n+1)); done; ";
}

}  // namespace

TEST_CASE("pruning and --overwrite unlink a link under a checkpoint's name, never empty its target",
          "[train][faults][faults2]") {
    // Issue 19: a step directory that was a link to another run's checkpoint had the target emptied.
    std::string dir = make_data_dir(), a = dir + "/a", b = dir + "/b";
    REQUIRE(sh(micro(dir, a) + " --steps 2").rc == 0);
    REQUIRE(sh(micro(dir, b) + " --steps 4 --stop-after 1").rc == 0);
    REQUIRE(sh("ln -s " + a + "/step_00000002 " + b + "/step_00000000 && echo mine > " + b + "/step_00000001/notes.txt")
                .rc == 0);
    Result r = sh(micro(dir, b) + " --steps 4 --resume --ckpt-every 1 --keep 1");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    REQUIRE(has(r.out, "note: " + b + "/step_00000001 not pruned: it holds files train_prism did not write"));
    REQUIRE(sh("ls " + a + "/step_00000002").out == "model.bin\nstate_rank0.bin\n");  // the other run's, intact
    REQUIRE(slurp(b + "/step_00000001/notes.txt") == "mine\n");
    Result o = sh(micro(dir, b) + " --steps 2 --overwrite");
    INFO(o.out);
    REQUIRE(o.rc == 0);
    REQUIRE(sh("ls " + a + "/step_00000002").out == "model.bin\nstate_rank0.bin\n");
    REQUIRE(sh("test -L " + b + "/step_00000000").rc != 0);  // the link itself is gone
    REQUIRE(load_model(a + "/model.bin").step == 2);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("a fresh run refuses an OUT holding only a model.bin or a checkpoint-named link",
          "[train][faults][faults2]") {
    std::string dir = make_data_dir(), out = dir + "/run";
    REQUIRE(sh(micro(dir, dir + "/other") + " --steps 1").rc == 0);
    REQUIRE(sh("mkdir " + out + " && cp " + dir + "/other/model.bin " + out + "/").rc == 0);
    Result r = sh(micro(dir, out) + " --steps 1");
    INFO(r.out);
    REQUIRE(one_line_error(r));
    REQUIRE(
        has(r.out,
            out + " holds an earlier run with no checkpoint --resume could continue (a model.bin); pass --overwrite"));
    REQUIRE(sh("rm " + out + "/model.bin && ln -s " + dir + "/other/step_00000001 " + out + "/step_00000001").rc == 0);
    REQUIRE(has(
        sh(micro(dir, out) + " --steps 1").out,
        "holds an earlier run with no checkpoint --resume could continue (1 file or link named like a checkpoint)"));
    sh("rm -rf '" + dir + "'");
}

TEST_CASE(
    "shards of two sets under one prefix are refused; a kill -9 anywhere in prepare_shards --overwrite "
    "leaves the old set, the new set, or a refused mixture",
    "[data][faults][faults2]") {
    char tmpl[] = "/tmp/prism_sets_XXXXXX";
    std::string dir = mkdtemp(tmpl), prefix = dir + "/c";
    std::vector<int> t(3000, 5);
    write_shard(prefix + "_val_000000.bin", t, false, 0x1111);
    write_shard(prefix + "_train_000001.bin", t, false, 0x2222);
    REQUIRE_THROWS_WITH(check_shard_sets({read_shard_info(prefix + "_train_000001.bin")},
                                         {read_shard_info(prefix + "_val_000000.bin")}),
                        Catch::Contains("(set 0000000000001111) were not written together: an interrupted "
                                        "prepare_shards --overwrite"));
    // The training shards alone are refused too: their set's validation shard is another set's.
    REQUIRE_THROWS_WITH(DataLoader(prefix + "_train_*.bin", 2, 8, 0, 1, false, 0, 300),
                        Catch::Contains("were not written together"));
    sh("rm -f " + prefix + "_val_000000.bin");  // ... or missing: a set cut short before its last rename
    REQUIRE_THROWS_WITH(DataLoader(prefix + "_train_*.bin", 2, 8, 0, 1, false, 0, 300),
                        Catch::Contains("has no " + prefix + "_val_000000.bin: an interrupted prepare_shards"));
    write_shard(prefix + "_val_000000.bin", t, false, 0x2222);
    REQUIRE(DataLoader(prefix + "_train_*.bin", 2, 8, 0, 1, false, 0, 300).num_shards() == 1);  // one set: fine
    write_shard(prefix + "_train_000002.bin", t, false);  // llm.c's, no id, beside a tied one
    REQUIRE_THROWS_WITH(DataLoader(prefix + "_train_*.bin", 2, 8, 0, 1, false, 0, 300), Catch::Contains("no set id"));
    sh("rm -f " + prefix + "_*");
    write_shard(prefix + "_train_000001.bin", t, false);  // llm.c's own shards, all without an id: read
    write_shard(prefix + "_train_000002.bin", t, false);
    REQUIRE(DataLoader(prefix + "_train_*.bin", 2, 8, 0, 1, false, 0, 300).num_shards() == 2);
    sh("rm -f " + prefix + "_*");

    // The real pipeline, killed at moments spread over its run: a small old set, a large new one (other letters).
    auto prepare = [&](const std::string& in, const std::string& out, bool overwrite) {
        PrepareOptions o;
        o.inputs = {in}, o.out_prefix = out, o.format = InputFormat::LINES;
        o.shard_tokens = 200, o.val_tokens = 200, o.progress = 0, o.sync = false, o.overwrite = overwrite,
        o.threads = 1;
        return prepare_shards(
                   o,
                   [](std::string_view s, std::vector<int>& v) {
                       for (unsigned char c : s) v.push_back(c);
                   },
                   0)
            .shards.size();
    };
    {
        std::ofstream old_in(dir + "/old.txt"), new_in(dir + "/new.txt");
        for (int i = 0; i < 120; i++) old_in << "old line " << i << "\n";
        for (int i = 0; i < 3000; i++) new_in << "NEW LINE " << i << "\n";
    }
    const auto t_new0 = std::chrono::steady_clock::now();
    const size_t n_new = prepare(dir + "/new.txt", dir + "/n", false);
    const double t_new = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_new0).count();
    int whole_old = 0, whole_new = 0, refused = 0;
    const int trials = 36;
    for (int trial = 0; trial < trials; trial++) {
        sh("rm -f " + prefix + "_*");
        const size_t n_old = prepare(dir + "/old.txt", prefix, false);
        const pid_t child = fork();
        if (child == 0) {
            try {
                prepare(dir + "/new.txt", prefix, true);
            } catch (...) {
            }
            _exit(0);
        }
        // A third of the kill moments spread over 1.5 times an uninterrupted run (the last land after its end), the
        // rest packed around its end, where the renames are.
        const double at = trial < 12 ? 1.5 * trial / 11 : 0.85 + 0.3 * (trial - 12) / 23;
        std::this_thread::sleep_for(std::chrono::duration<double>(at * t_new));
        kill(child, SIGKILL);
        waitpid(child, nullptr, 0);
        try {
            DataLoader tr(prefix + "_train_*.bin", 1, 8, 0, 1, false, 0, 300);
            DataLoader va(prefix + "_val_*.bin", 1, 8, 0, 1, false, 0, 300);
            check_shard_sets(tr.shards(), va.shards());
            const size_t n = tr.shards().size() + va.shards().size();
            const uint64_t id = tr.shards()[0].set_id;
            for (const ShardInfo& s : tr.shards()) REQUIRE(s.set_id == id);
            std::vector<int> x(8), y(8);
            tr.next_batch(x.data(), y.data());
            bool is_new = false;  // a window of 8 always holds a letter: upper case is the new set's
            for (int c : x) is_new = is_new || (c >= 'A' && c <= 'Z');
            INFO("trial " << trial << ": " << n << " shards");
            REQUIRE(n == (is_new ? n_new : n_old));  // whole: every shard of one set, no more, no fewer
            (is_new ? whole_new : whole_old)++;
        } catch (const std::runtime_error& e) {
            INFO(e.what());
            REQUIRE(has(e.what(), "were not written together"));
            refused++;
        }
    }
    printf(
        "prepare_shards --overwrite (%.0f ms, %zu shards) killed at %d moments: %d old set whole, %d new set whole, "
        "%d mixtures refused\n",
        1e3 * t_new, n_new, trials, whole_old, whole_new, refused);
    CHECK(whole_old + whole_new + refused == trials);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("one writer per OUT: a second trainer or a --resume beside a live run fails naming its pid",
          "[train][faults][faults2]") {
    std::string dir = make_data_dir(), out = dir + "/run";
    Result r = sh(background(micro(dir, out) + " --steps 100000", dir + "/first.txt", "[ -s " + out + "/log.jsonl ]") +
                  micro(dir, out) + " --steps 5 --resume; echo \"second exit $? first $pid\"; " + micro(dir, out) +
                  " --steps 5 --overwrite; kill -TERM $pid; wait $pid; echo \"first exit $?\")");
    INFO(r.out);
    const size_t at = r.out.find(" first ") + 7;
    const std::string pid = r.out.substr(at, r.out.find('\n', at) - at);
    REQUIRE(has(r.out, "error: " + out + " is in use by another train_prism (pid " + pid + " on "));
    REQUIRE(has(r.out, "holds " + out + "/lock); wait for it to end or stop it, or pass another -o"));
    REQUIRE(has(r.out, "second exit 1"));
    REQUIRE(has(r.out, "first exit 75"));
    REQUIRE(sh(micro(dir, out) + " --steps 100000 --resume --stop-after 1").rc == 0);  // the lock went with it
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("RANK and WORLD_SIZE without a launcher or rendezvous are an error", "[train][faults][faults2]") {
    std::string dir = make_data_dir();
    Result r = sh("RANK=1 WORLD_SIZE=2 " + micro(dir, dir + "/run") + " --steps 1");
    INFO(r.out);
    REQUIRE(one_line_error(r));
    REQUIRE(has(r.out, "RANK=1 and WORLD_SIZE=2 are set, but neither a launcher"));
    REQUIRE(sh("RANK=0 WORLD_SIZE=1 " + micro(dir, dir + "/run") + " --steps 1").rc == 0);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("a checkpoint whose files name different runs is refused; non-finite parameters are refused at load",
          "[train][faults][checkpoint][faults2]") {
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

TEST_CASE("what the first checkpoint needs is checked before step 1: a too-long -o fails at once",
          "[train][faults][faults2]") {
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

TEST_CASE("SIGTERM during a long validation and during the start-up ends the run in bounded time, exit 75",
          "[train][faults][signals][faults2]") {
    // Issue 19: with --val-tokens 1e12 the run was still validating 25 s after SIGTERM; SIGTERM during the
    // start-up exited 143 without a line.
    // (--val-tokens is bounded by the validation set since issue 25: a large set makes the validation long.)
    std::string dir = make_data_dir(), out = dir + "/run";
    write_shard(dir + "/big_val_000000.bin", std::vector<int>(20000000, 3), false);
    const auto t0 = std::chrono::steady_clock::now();
    Result r =
        sh(background(micro(dir, out) + " --steps 100 --val-every 3 --val-tokens 1000000000000 --val '" + dir +
                          "/big_val_*.bin'",
                      dir + "/v.txt", "[ \"$(cat " + out + "/log.jsonl 2>/dev/null | wc -l)\" -ge 2 ] && sleep 0.3") +
           "kill -TERM $pid; wait $pid; echo \"exit $?\"; cat " + dir + "/v.txt)");
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO(r.out);
    REQUIRE(has(r.out, "exit 75"));
    REQUIRE(has(r.out, "validation at step 3: cut short by the stop signal, not logged"));
    REQUIRE(has(r.out, "stopped by SIGTERM after step 3; " + out + "/latest names step_00000003"));
    CHECK(secs < 20);
    REQUIRE(read_log(out + "/log.jsonl").size() == 3);
    REQUIRE(!has(read_log(out + "/log.jsonl")[3], "val_loss"));
    // The resumed run validates at step 3 first (here on the small validation set: the checkpoint's parameters are
    // what an uninterrupted run has at step 3, so its val_loss is that run's), and the log has a val_loss at every
    // --val-every step.
    const std::string flags6 =
        " --steps 100 --val-every 3 --val-tokens 1000000000000 --val '" + dir + "/syn_val_*.bin'";
    Result res = sh(micro(dir, out) + flags6 + " --resume --allow-data-change --stop-after 3");
    INFO(res.out);
    REQUIRE(res.rc == 0);
    REQUIRE(has(res.out, "validation at step 3, not in the log (a stop cut it short): val "));
    Result whole_run = sh(micro(dir, dir + "/whole") + flags6 + " --stop-after 6");
    INFO(whole_run.out);
    REQUIRE(whole_run.rc == 0);
    const auto resumed = read_log(out + "/log.jsonl"), whole = read_log(dir + "/whole/log.jsonl");
    REQUIRE(resumed.size() == 6);
    for (long k : {3L, 6L}) {
        INFO("step " << k);
        REQUIRE(has(resumed.at(k), "\"val_loss\": "));
        CHECK(losses_of(resumed.at(k)) == losses_of(whole.at(k)));
    }

    // The start-up: the signal lands once the lock is taken (the first thing the set-up does), while the 60
    // shards are checked; whichever phase it meets, the run ends with 75 and a line, never 143.
    std::vector<int> t(200000, 3);
    for (int i = 0; i < 60; i++)
        write_shard(dir + "/big_train_" + std::to_string(100000 + i).substr(1) + ".bin", t, false);
    std::string cmd = micro(dir, dir + "/s") + " --steps 3 --train '" + dir + "/big_train_*.bin'";
    Result s = sh(background(cmd, dir + "/s.txt", "ls -l /proc/$pid/fd 2>/dev/null | grep -q " + dir + "/s/lock") +
                  "kill -TERM $pid; wait $pid; echo \"exit $?\"; cat " + dir + "/s.txt)");
    INFO(s.out);
    REQUIRE(has(s.out, "exit 75"));
    REQUIRE((has(s.out,
                 "stopped by SIGTERM during the start-up, before step 1; no checkpoint yet: run the same "
                 "command again") ||
             has(s.out, "stopped by SIGTERM after step 1")));
    if (has(s.out, "during the start-up")) REQUIRE(sh(cmd).rc == 0);  // the same command starts: an empty log is no run
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("FIFOs, devices and links where OUT's files belong are refused in one line, never waited on",
          "[train][faults][faults2]") {
    std::string dir = make_data_dir(), out = dir + "/run";
    REQUIRE(sh(micro(dir, out) + " --steps 1").rc == 0);
    for (const std::string& make : {"mkfifo " + out + "/log.jsonl", "ln -s /dev/zero " + out + "/log.jsonl",
                                    "ln -s /dev/full " + out + "/log.jsonl"}) {
        REQUIRE(sh("rm -f " + out + "/log.jsonl && " + make).rc == 0);
        for (const char* flags : {" --steps 2 --resume", " --steps 2 --overwrite"}) {
            Result r = sh("timeout 20 " + micro(dir, out) + flags);
            INFO(make << flags << "\n" << r.out);
            REQUIRE(one_line_error(r));
            REQUIRE(has(r.out, out + "/log.jsonl is a "));
            REQUIRE(has(r.out, ", not the file train_prism writes there; remove it"));
        }
    }
    REQUIRE(sh("rm -f " + out + "/log.jsonl && mkfifo " + out + "/log.jsonl && mkfifo " + dir + "/model.fifo").rc == 0);
    REQUIRE_THROWS_WITH(read_run(out, [](const std::string&) {}),
                        Catch::Contains("log.jsonl is a FIFO, not a regular file"));
    REQUIRE_THROWS_WITH(load_model(dir + "/model.fifo"), Catch::Contains("model.fifo is a FIFO, not a regular file"));
    REQUIRE_THROWS_WITH(load_model(dir), Catch::Contains("is a directory, not a regular file"));
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("messages say what is true: conflicting flags, a changed batch, a missing latest, the plan's tokens",
          "[train][faults][cli][faults2]") {
    std::string dir = make_data_dir(), out = dir + "/run";
    Result both = sh(micro(dir, out) + " --steps 3 --tokens 1000");
    REQUIRE(one_line_error(both));
    REQUIRE(has(both.out, "--steps and --tokens both set the run's length; pass one of them"));
    Result task = sh(micro(dir, out) + " --steps 3 --eval-task foo");
    REQUIRE(has(task.out, "unknown task 'foo'; choose from hellaswag, piqa"));

    REQUIRE(sh(micro(dir, out) + " --steps 6 --stop-after 2 --ckpt-every 1").rc == 0);
    // Without its record (a run from before run records): a recorded run would restore --total-batch 128 and go on
    // with 2 micro-steps of B 2 (test_study.cpp), so the checkpoint's own batch is what catches the change here.
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

TEST_CASE("report warns about negative, duplicated and string-valued steps; a directory as output is refused first",
          "[report][faults][faults2]") {
    char tmpl[] = "/tmp/prism_rep_XXXXXX";
    std::string dir = mkdtemp(tmpl);
    std::ofstream(dir + "/log.jsonl") << "{\"step\": 1, \"train_loss\": 5.0}\n{\"step\": -3, \"train_loss\": 4.0}\n"
                                         "{\"step\": 1, \"train_loss\": 4.5}\n{\"step\": 2, \"train_loss\": \"low\"}\n"
                                         "{\"step\": 3, \"train_loss\": 4.2}\n";
    std::vector<std::string> warned;
    RunLog r = read_run(dir, [&](const std::string& w) { warned.push_back(w); });
    REQUIRE(r.steps.size() == 2);
    REQUIRE(warned.size() == 3);
    CHECK(has(warned[0], "line 2 is not a step's JSON (step -3 is not a whole number >= 1)"));
    CHECK(
        has(warned[1], "line 3 is not a step's JSON (step 1 does not follow step 1: a duplicated or reordered line)"));
    CHECK(has(warned[2], "line 4 is not a step's JSON (\"train_loss\" is not a number)"));
    Result o = sh("./report " + dir + " -o " + dir);
    CHECK(one_line_error(o));
    CHECK(has(o.out, "-o " + dir + " is a directory; pass a file name"));
    CHECK(sh("ls " + dir).out == "log.jsonl\n");  // no .tmp litter
    sh("rm -rf '" + dir + "'");
}

// ------------------------------------------------------------------------------------------------------
// Nothing lost, round three (issue 25): the run directory, its data and its messages.

TEST_CASE(
    "the lock is OUT itself: removing, replacing or linking around OUT/lock lets no second writer in; a "
    "moved OUT stops the run before its next checkpoint",
    "[train][faults][faults25]") {
    std::string dir = make_data_dir(), out = dir + "/run";
    const std::string second = micro(dir, out) + " --steps 5 --resume";
    Result r = sh(background(micro(dir, out) + " --steps 100000 --ckpt-every 20", dir + "/first.txt",
                             "[ -s " + out + "/latest ]") +
                  "rm " + out + "/lock; " + second +
                  "; echo \"after rm: $?\"; "
                  "echo 'pid 1 on nowhere' > " +
                  out + "/lock; " + second +
                  "; echo \"after replace: $?\"; "
                  "ln -s " +
                  out + " " + dir + "/link; " + micro(dir, dir + "/link") +
                  " --steps 5 --resume; "
                  "echo \"through a link: $?\"; " +
                  micro(dir, out) +
                  " --steps 5 --overwrite; echo \"overwrite: $?\"; "
                  "mv " +
                  out + " " + dir + "/moved; wait $pid; echo \"first exit $?\")");
    INFO(r.out);
    // (The holder puts its note back at its next checkpoint, so what the note says here depends on timing.)
    REQUIRE(has(r.out, "error: " + out + " is in use by another train_prism ("));
    REQUIRE(has(r.out, "after rm: 1"));
    REQUIRE(has(r.out, "after replace: 1"));
    REQUIRE(has(r.out, "error: " + dir + "/link is in use by another train_prism"));
    REQUIRE(has(r.out, "through a link: 1"));
    REQUIRE(has(r.out, "overwrite: 1"));
    REQUIRE(has(r.out, "first exit 1"));
    const std::string first = slurp(dir + "/first.txt");
    INFO(first);
    REQUIRE(has(first, "error: " + out +
                           " is no longer the directory this run started in (moved, renamed or "
                           "replaced while it ran); stopping without writing a checkpoint"));
    REQUIRE(one_line_error({1, first}));
    REQUIRE(sh("test -e " + out).rc != 0);  // nothing written at the old path
    Result c = sh(micro(dir, dir + "/moved") + " --steps 100000 --resume --stop-after 1");
    INFO(c.out);
    REQUIRE(c.rc == 0);  // the moved run is whole and resumes where it is
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("an empty path flag is an error, never the default", "[train][faults][faults25]") {
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

TEST_CASE("names in OUT the trainer did not write (a huge step number) are ignored, before and after --overwrite",
          "[train][faults][faults25]") {
    std::string dir = make_data_dir(), out = dir + "/run";
    REQUIRE(sh(micro(dir, out) + " --steps 2").rc == 0);
    REQUIRE(sh("mkdir " + out + "/step_9999999999999999999 " + out + "/step_99999999999999999999999 " + out +
               "/step_-0000001 && touch " + out + "/step_9999999999999999999/mine")
                .rc == 0);
    Result r = sh(micro(dir, out) + " --steps 3 --resume");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    Result o = sh(micro(dir, out) + " --steps 2 --overwrite");
    INFO(o.out);
    REQUIRE(o.rc == 0);
    REQUIRE(sh("test -f " + out + "/step_9999999999999999999/mine && test -d " + out + "/step_-0000001").rc == 0);
    REQUIRE(step_of_dir_name("step_9999999999999999999") == -1);
    REQUIRE(step_of_dir_name("step_999999999999999999") == 999999999999999999L);
    REQUIRE(step_of_dir_name("step_00000012") == 12);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE(
    "the data stays the recorded data: a set replaced under a running trainer stops it; a resume onto other "
    "shards is refused unless --allow-data-change; an old record resumes with a note",
    "[train][faults][faults25]") {
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
    const std::string first = slurp(dir + "/first.txt");
    INFO(first);
    REQUIRE(one_line_error({1, first}));
    REQUIRE(has(first, "error: shard " + dir +
                           "/syn_val_000000.bin changed while the run used it (set "
                           "0000000000001111, 4000 tokens at the start; now set 0000000000002222, 4000 tokens)"));
    const std::string latest = slurp(out + "/latest");
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
    const std::string rec = slurp(out + "/run.json");
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
    REQUIRE(has(slurp(out + "/run.json"), "\n \"data\": {\"train\": \""));
    sh("rm -rf '" + dir + "'");
}

TEST_CASE(
    "bounded work and true messages: --val-tokens beyond the set, a changed --seq-len, a missing run.json, "
    "RANK=abc, a 3 GB run.json or log.jsonl",
    "[train][faults][faults25]") {
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
    REQUIRE(sh("mv " + dir + "/run.json.good " + out + "/run.json && truncate -s 3G " + out + "/log.jsonl").rc == 0);
    Result l = sh("/usr/bin/time -f 'maxrss %M' " + micro(dir, out) + " --steps 3 --resume");
    INFO(l.out);
    REQUIRE(l.rc == 0);
    const size_t at = l.out.find("maxrss ");
    REQUIRE(at != std::string::npos);
    CHECK(std::stol(l.out.substr(at + 7)) < 500000);  // KB: the log is streamed, never held
    CHECK(read_log(out + "/log.jsonl").size() == 3);  // the 3 GB of zeros were no log lines
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("a resume runs the in-training eval a stop cut from the checkpoint's step, the last step's included",
          "[train][faults][signals][faults2]") {
    // Issue 34: a stop during the last step's eval left the run "done" on --resume without that eval. The cut is
    // made by hand (the eval taken out of the last step's line, as a stop leaves it): the resume runs it on the
    // checkpoint's parameters and writes it into that line, the same numbers as the uninterrupted run's.
    std::string dir = make_data_dir(), out = dir + "/run";
    make_dirs(dir + "/eval");
    write_micro_eval_file(dir + "/eval/piqa.bin", 40);
    const std::string cmd = micro(dir, out) + " --steps 4 --eval-every 2 --eval-task piqa --eval-data " + dir + "/eval";
    Result r = sh(cmd);
    INFO(r.out);
    REQUIRE(r.rc == 0);
    const std::map<long, std::string> whole = read_log(out + "/log.jsonl");
    REQUIRE(whole.size() == 4);
    const std::string last = whole.at(4);
    const size_t at = last.find(", \"eval\": ");
    REQUIRE(at != std::string::npos);
    auto scores = [](const std::string& line) {  // the eval's numbers, its seconds left out
        const size_t a = line.find("\"eval\": "), b = line.find(", \"seconds\"", a);
        return a == std::string::npos || b == std::string::npos ? std::string() : line.substr(a, b - a);
    };
    std::string cut;
    for (const auto& [step, line] : whole) cut += (step == 4 ? last.substr(0, at) + "}" : line) + "\n";
    std::ofstream(out + "/log.jsonl", std::ios::trunc) << cut;
    Result res = sh(cmd + " --resume");
    INFO(res.out);
    REQUIRE(res.rc == 0);
    CHECK(has(res.out, "eval at step 4, not in the log (a stop cut it short): added to its line"));
    const std::map<long, std::string> resumed = read_log(out + "/log.jsonl");
    REQUIRE(resumed.size() == 4);
    CHECK(!scores(last).empty());
    CHECK(scores(resumed.at(4)) == scores(last));
    CHECK(resumed.at(2) == whole.at(2));
    // A run whose lines all hold their evals runs none again.
    Result again = sh(cmd + " --resume");
    INFO(again.out);
    REQUIRE(again.rc == 0);
    CHECK(!has(again.out, "not in the log"));
    sh("rm -rf '" + dir + "'");
}
