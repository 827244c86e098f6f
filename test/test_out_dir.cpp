// test_out_dir.cpp: the run directory OUT, end to end on the micro model of train_util.h: what a run writes there,
// what it refuses to find there and what it deletes. A fresh run refuses an OUT holding what the trainer writes (a
// run, a model.bin, a checkpoint-named link) and --overwrite starts afresh; pruning and --overwrite unlink links,
// never their targets, and ignore names the trainer did not write; one writer per OUT, the lock being OUT itself (a
// moved OUT stops the run); FIFOs, devices and links where OUT's files belong are refused in one line.
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

TEST_CASE("pruning and --overwrite unlink a link under a checkpoint's name, never empty its target",
          "[train][faults]") {
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
    REQUIRE(read_file(b + "/step_00000001/notes.txt") == "mine\n");
    Result o = sh(micro(dir, b) + " --steps 2 --overwrite");
    INFO(o.out);
    REQUIRE(o.rc == 0);
    REQUIRE(sh("ls " + a + "/step_00000002").out == "model.bin\nstate_rank0.bin\n");
    REQUIRE(sh("test -L " + b + "/step_00000000").rc != 0);  // the link itself is gone
    REQUIRE(load_model(a + "/model.bin").step == 2);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("a fresh run refuses an OUT holding only a model.bin or a checkpoint-named link", "[train][faults]") {
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

TEST_CASE("one writer per OUT: a second trainer or a --resume beside a live run fails naming its pid",
          "[train][faults]") {
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

TEST_CASE("FIFOs, devices and links where OUT's files belong are refused in one line, never waited on",
          "[train][faults]") {
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
    // A directory there: the advice that works on one (rm would refuse it), followed literally.
    REQUIRE(sh("rm -f " + out + "/log.jsonl && mkdir " + out + "/log.jsonl").rc == 0);
    Result d = sh(micro(dir, out) + " --steps 2 --resume");
    INFO(d.out);
    REQUIRE(one_line_error(d));
    REQUIRE(has(d.out, "is a directory, not the file train_prism writes there; move it aside (mv " + out +
                           "/log.jsonl " + out + "/log.jsonl.aside) or pass another -o"));
    REQUIRE(sh("mv " + out + "/log.jsonl " + out + "/log.jsonl.aside").rc == 0);
    REQUIRE(sh(micro(dir, out) + " --steps 2 --resume").rc == 0);
    REQUIRE(sh("rm -rf " + out + "/log.jsonl.aside && rm -f " + out + "/log.jsonl && mkfifo " + out +
               "/log.jsonl && mkfifo " + dir + "/model.fifo")
                .rc == 0);
    REQUIRE_THROWS_WITH(read_run(out, [](const std::string&) {}),
                        Catch::Contains("log.jsonl is a FIFO, not a regular file"));
    REQUIRE_THROWS_WITH(load_model(dir + "/model.fifo"), Catch::Contains("model.fifo is a FIFO, not a regular file"));
    REQUIRE_THROWS_WITH(load_model(dir), Catch::Contains("is a directory, not a regular file"));
    sh("rm -rf '" + dir + "'");
}

// ------------------------------------------------------------------------------------------------------
// Nothing lost, round three (issue 25): the run directory, its data and its messages.

TEST_CASE(
    "the lock is OUT itself: removing, replacing or linking around OUT/lock lets no second writer in; a "
    "moved OUT stops the run before its next checkpoint",
    "[train][faults]") {
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
    const std::string first = read_file(dir + "/first.txt");
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

TEST_CASE("names in OUT the trainer did not write (a huge step number) are ignored, before and after --overwrite",
          "[train][faults]") {
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

TEST_CASE("a fresh run into a directory holding a run is refused; --overwrite starts afresh", "[train][faults]") {
    // Issue 10 #4: forgetting --resume wiped log.jsonl before the first step, even when the run then failed.
    std::string dir = make_data_dir(), out = dir + "/run";
    REQUIRE(sh(micro(dir, out) + " --steps 3").rc == 0);
    const std::string log = read_file(out + "/log.jsonl");
    Result r = sh(micro(dir, out) + " --steps 3");
    INFO(r.out);
    REQUIRE(one_line_error(r));
    REQUIRE(has(r.out, out + " holds an earlier run (checkpoints up to step_00000003, a latest file, a model.bin and "
                             "a log of "));
    REQUIRE(has(r.out,
                "pass --resume to continue it, or --overwrite to delete its 1 checkpoint, latest, model.bin "
                "and log.jsonl and start afresh"));
    REQUIRE(read_file(out + "/log.jsonl") == log);
    REQUIRE(checkpoints_in(out) == "step_00000003");
    REQUIRE(one_line_error(sh(micro(dir, out) + " --steps 3 --resume --overwrite")));
    // --overwrite on a run that cannot start (a bad shard glob) deletes nothing either.
    REQUIRE(one_line_error(sh(micro(dir, out) + " --steps 3 --overwrite --train /nonexistent.bin")));
    REQUIRE(read_file(out + "/log.jsonl") == log);
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
