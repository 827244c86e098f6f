// test_lr.cpp: the learning-rate schedules (lr_schedule.h's LrSchedule and lr_at, the one function every engine's
// lr comes from): every corner of every kind, the flags' refusals, and train_prism end to end on the micro model:
// a wsd run logs the formula's lr at every step, a cosine run the lr of the function as it was before the other
// kinds existed, and a wsd run branched into another decay from its stable phase (recorded in run.json), refused
// once its decay began.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <string>

#include "run/run_record.h"
#include "test/train_util.h"
#include "lr_schedule.h"

namespace {

// lr_at as it was before LrSchedule (linear warmup, then cosine to final_frac * lr at the last step): cosine
// runs must keep every bit of it.
double old_cosine(long step, long total_steps, long warmup, double lr, double final_frac) {
    if (step < warmup) return lr * (double)(step + 1) / (double)warmup;
    const long decay_steps = std::max(1L, total_steps - 1 - warmup);
    const double progress = std::min(1.0, (double)(step - warmup) / (double)decay_steps);
    const double lo = final_frac * lr;
    return lo + (lr - lo) * 0.5 * (1.0 + std::cos(3.141592653589793 * progress));
}

LrSchedule wsd(long total, long warmup, double frac, const std::string& shape, double lr = 2.0) {
    return make_lr_schedule("wsd", total, warmup, lr, 0.1, frac, shape);
}

// The log's "lr" as run/run.h's log_step writes it.
std::string logged(double lr) {
    char b[32];
    snprintf(b, sizeof b, "\"lr\": %.6e,", lr);
    return b;
}

std::string lr_field(const std::string& line) {
    const size_t at = line.find("\"lr\": ");
    return at == std::string::npos ? "" : line.substr(at, line.find(',', at) + 1 - at);
}

}  // namespace

TEST_CASE("cosine is the old function to the bit, at every step of many shapes", "[lr]") {
    for (long total : {1L, 2L, 3L, 10L, 111L, 1000L})
        for (long warmup : {0L, 1L, 4L, 10L, 111L}) {
            if (warmup > total) continue;
            const LrSchedule s = make_lr_schedule("cosine", total, warmup, 3e-3, 0.1);
            for (long step = 0; step < total; step++) {
                INFO("total " << total << " warmup " << warmup << " step " << step);
                REQUIRE(lr_at(s, step) == old_cosine(step, total, warmup, 3e-3, 0.1));
                REQUIRE(lr_at(step, total, warmup, 3e-3, 0.1) == old_cosine(step, total, warmup, 3e-3, 0.1));
            }
        }
}

TEST_CASE("wsd: warmup, exactly lr until the decay, the shape's decay to final_frac * lr at the last step", "[lr]") {
    // 100 steps, warmup 10, decay over the last 20: steps 10..79 at the peak (79: the decay's start, progress
    // 0), 80..99 below it, 99 at 0.2 (final_frac 0.1 of lr 2).
    for (const std::string shape : {"sqrt", "linear", "cosine"}) {
        INFO(shape);
        const LrSchedule s = wsd(100, 10, 0.2, shape);
        CHECK(s.decay_start() == 79);
        CHECK(lr_at(s, 0) == Approx(0.2).epsilon(1e-15));  // step 0 of the warmup: lr / warmup
        CHECK(lr_at(s, 4) == Approx(1.0).epsilon(1e-15));
        CHECK(lr_at(s, 9) == 2.0);                                              // the warmup's end
        for (long step = 10; step <= 79; step++) CHECK(lr_at(s, step) == 2.0);  // stable, to the bit
        CHECK(lr_at(s, 80) < 2.0);
        CHECK(lr_at(s, 99) == Approx(0.2).epsilon(1e-14));  // the last step
        for (long step = 79; step < 99; step++) CHECK(lr_at(s, step + 1) < lr_at(s, step));
        // Halfway (step 89: progress 10 / 20), the shape's value.
        const double down = shape == "sqrt" ? std::sqrt(0.5) : shape == "linear" ? 0.5 : 0.5;
        CHECK(lr_at(s, 89) == Approx(2.0 - 1.8 * down).epsilon(1e-14));
    }
    // 1-sqrt falls fastest at first: a quarter of the way, sqrt(0.25) = half of the way down.
    CHECK(lr_at(wsd(100, 10, 0.2, "sqrt"), 84) == Approx(2.0 - 1.8 * 0.5).epsilon(1e-14));
    CHECK(lr_at(wsd(100, 10, 0.2, "linear"), 84) == Approx(2.0 - 1.8 * 0.25).epsilon(1e-14));
    // The decay's length rounds like the warmup: 0.25 of 10 steps is 3 (2.5 rounded away from 0).
    CHECK(wsd(10, 0, 0.25, "sqrt").decay == 3);
    CHECK(wsd(10, 0, 0.25, "sqrt").decay_start() == 6);
}

TEST_CASE("the corners: no warmup, decay fractions 0 and 1, a run of one step, warmup the whole run", "[lr]") {
    // Warmup 0: the first step is at the peak (cosine's step 0 is its decay's start: lo + (lr - lo)).
    for (const char* kind : {"wsd", "linear", "constant"}) {
        const LrSchedule s =
            std::string(kind) == "wsd" ? wsd(50, 0, 0.2, "sqrt") : make_lr_schedule(kind, 50, 0, 2.0, 0.1);
        INFO(kind);
        CHECK(lr_at(s, 0) == 2.0);
    }
    CHECK(lr_at(make_lr_schedule("cosine", 50, 0, 2.0, 0.1), 0) == Approx(2.0).epsilon(1e-15));
    // Decay fraction 0: wsd is constant, to the bit, at every step.
    const LrSchedule c = make_lr_schedule("constant", 50, 5, 2.0, 0.1);
    for (const std::string shape : {"sqrt", "linear", "cosine"})
        for (long step = 0; step < 50; step++) CHECK(lr_at(wsd(50, 5, 0, shape), step) == lr_at(c, step));
    CHECK(lr_at(c, 49) == 2.0);  // constant never decays
    // Decay fraction 1: the decay starts at the warmup's end, as linear's and cosine's do: a linear shape is the
    // linear schedule to the bit, a cosine one cosine's curve (its own rounding).
    const LrSchedule lin = make_lr_schedule("linear", 50, 5, 2.0, 0.1),
                     cos = make_lr_schedule("cosine", 50, 5, 2.0, 0.1);
    CHECK(wsd(50, 5, 1, "linear").decay_start() == 5);
    for (long step = 0; step < 50; step++) {
        CHECK(lr_at(wsd(50, 5, 1, "linear"), step) == lr_at(lin, step));
        CHECK(lr_at(wsd(50, 5, 1, "cosine"), step) == Approx(lr_at(cos, step)).epsilon(1e-14));
    }
    CHECK(lr_at(lin, 5) == 2.0);
    CHECK(lr_at(lin, 27) == Approx(2.0 - 1.8 * 0.5).epsilon(1e-14));  // halfway from step 5 to step 49
    CHECK(lr_at(lin, 49) == Approx(0.2).epsilon(1e-14));
    // A run of one step: the peak (with or without a warmup), under every kind and any decay fraction.
    for (const char* kind : {"cosine", "linear", "constant"})
        for (long warmup : {0L, 1L}) CHECK(lr_at(make_lr_schedule(kind, 1, warmup, 2.0, 0.1), 0) == Approx(2.0));
    for (double frac : {0.0, 0.5, 1.0})
        for (long warmup : {0L, 1L}) CHECK(lr_at(wsd(1, warmup, frac, "sqrt"), 0) == 2.0);
    // Two steps decaying over one: the peak, then final_frac * lr.
    CHECK(lr_at(wsd(2, 0, 0.5, "sqrt"), 0) == 2.0);
    CHECK(lr_at(wsd(2, 0, 0.5, "sqrt"), 1) == Approx(0.2).epsilon(1e-15));
    // A warmup as long as the run: its last step reaches the peak, and nothing decays.
    for (long step = 0; step < 8; step++)
        CHECK(lr_at(wsd(8, 8, 0.5, "sqrt"), step) == Approx(2.0 * (step + 1) / 8).epsilon(1e-15));
    // A decay longer than what follows the warmup starts at the warmup's end.
    CHECK(wsd(20, 15, 0.5, "sqrt").decay_start() == 15);
    CHECK(lr_at(wsd(20, 15, 0.5, "sqrt"), 19) == Approx(0.2).epsilon(1e-14));
}

TEST_CASE("the schedule's description and its refusals", "[lr]") {
    CHECK(describe_lr_schedule(wsd(40, 5, 0.25, "sqrt", 3e-3)) ==
          "lr: wsd, warmup 5, stable at 0.003 to step 30, 1-sqrt decay over 10 steps to 0.0003");
    CHECK(describe_lr_schedule(wsd(40, 0, 0, "linear", 3e-3)) ==
          "lr: wsd, no warmup, stable at 0.003 to step 40 (no decay: --decay-frac 0)");
    CHECK(describe_lr_schedule(make_lr_schedule("cosine", 150, 4, 3e-3, 0.1)) ==
          "lr: cosine, warmup 4, 0.003 -> 0.0003 at step 150");
    CHECK(describe_lr_schedule(make_lr_schedule("constant", 150, 0, 3e-3, 0.1)) ==
          "lr: constant, no warmup, then 0.003 to step 150");
    CHECK_THROWS_WITH(make_lr_schedule("step", 10, 0, 1, 0.1), Catch::Contains("--lr-schedule must be cosine, wsd"));
    CHECK_THROWS_WITH(make_lr_schedule("cosine", 10, 0, 1, 0.1, 0.2, ""),
                      Catch::Contains("--decay-frac shapes the decay of --lr-schedule wsd, not of cosine"));
    CHECK_THROWS_WITH(make_lr_schedule("linear", 10, 0, 1, 0.1, NAN, "sqrt"), Catch::Contains("--decay-shape"));
    CHECK_THROWS_WITH(make_lr_schedule("wsd", 10, 0, 1, 0.1, 1.5, "sqrt"), Catch::Contains("[0, 1]"));
    CHECK_THROWS_WITH(make_lr_schedule("wsd", 10, 0, 1, 0.1, 0.2, "cube"), Catch::Contains("--decay-shape must be"));
    CHECK_THROWS_WITH(make_lr_schedule("wsd", 10, 11, 1, 0.1, 0.2, "sqrt"), Catch::Contains("--warmup 11"));
}

TEST_CASE("train_prism refuses bad schedule and batch flags with one line, and --plan refuses the same", "[lr]") {
    const std::string dir = make_data_dir(), out = dir + "/run";
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"-b 8 --total-batch 1000", "--total-batch 1000 is not a multiple of B*T = 256"},
        {"--warmup 40 --steps 30", "--warmup 40 must lie in [0, --steps 30]"},
        {"--lr 1 --wd 1", "--lr 1 times --wd 1 is 1; it must be below 1"},
        {"--lr-schedule step", "--lr-schedule must be cosine, wsd, linear or constant, not 'step'"},
        {"--lr-schedule wsd --decay-frac 1.5", "--decay-frac must lie in [0, 1]"},
        {"--lr-schedule wsd --decay-frac -0.1", "--decay-frac must lie in [0, 1]"},
        {"--lr-schedule wsd --decay-shape cube", "--decay-shape must be sqrt, linear or cosine, not 'cube'"},
        {"--decay-frac 0.1", "--decay-frac shapes the decay of --lr-schedule wsd, not of cosine"},
        {"--lr-schedule constant --decay-shape linear", "--decay-shape shapes the decay of --lr-schedule wsd"},
        {"--warmup 11", "--warmup 11 must lie in [0, --steps 10]"},
        {"--warmup -1", "--warmup must be at least 0"},
    };
    for (const auto& [flags, message] : bad) {
        const Result r = sh(micro(dir, out) + " --steps 10 " + flags);
        INFO(flags << ": " << r.out);
        CHECK(one_line_error(r));
        CHECK(r.out.find(message) != std::string::npos);
        const Result plan = sh(micro(dir, out) + " --steps 10 " + flags + " --plan");  // plan_run's one check
        INFO("--plan: " << plan.out);
        CHECK(one_line_error(plan));
        CHECK(plan.rc == 1);
        CHECK(plan.out.find(message) != std::string::npos);
    }
    CHECK(sh(micro(dir, out) + " --steps 10 --lr-schedule wsd --decay-frac 0.1 --plan").rc == 0);
    // --epochs: --plan counts the training shards' tokens as training does (36,000 tokens of 128 a step).
    CHECK(sh(micro(dir, out) + " --epochs 1 --warmup 200 --plan").rc == 0);
    const Result epochs = sh(micro(dir, out) + " --epochs 0.1 --warmup 200 --plan");
    INFO(epochs.out);
    CHECK(one_line_error(epochs));
    CHECK(epochs.out.find("--warmup 200 must lie in [0, --steps 28]") != std::string::npos);
    CHECK(access((out + "/log.jsonl").c_str(), F_OK) != 0);  // refused before any step
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("a default run logs the old cosine's lr, and its record is what it was", "[lr]") {
    const std::string dir = make_data_dir(), out = dir + "/cos";
    const Result r = sh(micro(dir, out) + " --steps 12 --warmup-frac 0.25 --val-every 0");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    CHECK(r.out.find("\nlr: cosine, warmup 3, 0.01 -> 0.001 at step 12\n") != std::string::npos);
    const auto log = read_log(out + "/log.jsonl");
    REQUIRE(log.size() == 12);
    for (long s = 1; s <= 12; s++) CHECK(lr_field(log.at(s)) == logged(old_cosine(s - 1, 12, 3, 1e-2, 0.1)));
    RunRecord rec;
    REQUIRE(read_run_record(out, rec));
    for (const char* f : {"--lr-schedule", "--decay-frac", "--decay-shape", "--warmup"}) CHECK(!rec.has(f));
    CHECK(!rec.doc.find("branches"));
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("a wsd run logs the formula's lr; branched from its stable phase into a shorter decay; refused after",
          "[lr]") {
    const std::string dir = make_data_dir();
    const std::string wsd_flags = " --steps 20 --warmup 3 --lr-schedule wsd --decay-frac 0.3 --val-every 0";
    // Straight through: warmup 3, stable to step 14, 1-sqrt decay over the last 6 steps.
    const Result a = sh(micro(dir, dir + "/a") + wsd_flags);
    INFO(a.out);
    REQUIRE(a.rc == 0);
    CHECK(a.out.find("\nlr: wsd, warmup 3, stable at 0.01 to step 14, 1-sqrt decay over 6 steps to 0.001\n") !=
          std::string::npos);
    const LrSchedule sa = wsd(20, 3, 0.3, "sqrt", 1e-2);
    const auto la = read_log(dir + "/a/log.jsonl");
    REQUIRE(la.size() == 20);
    for (long s = 1; s <= 20; s++) CHECK(lr_field(la.at(s)) == logged(lr_at(sa, s - 1)));
    CHECK(lr_field(la.at(14)) == logged(1e-2));
    CHECK(lr_field(la.at(20)) == logged(1e-3));
    RunRecord ra;
    REQUIRE(read_run_record(dir + "/a", ra));
    CHECK(ra.arg("--lr-schedule") == "wsd");
    CHECK(ra.arg("--decay-frac") == "0.3");
    CHECK(ra.arg("--decay-shape") == "sqrt");  // the default, recorded

    // The same run stopped in its stable phase, copied, and the copy resumed into a decay over 3 steps.
    REQUIRE(sh(micro(dir, dir + "/b") + wsd_flags + " --stop-after 10").rc == 0);
    REQUIRE(sh("cp -r '" + dir + "/b' '" + dir + "/c'").rc == 0);
    const Result c = sh("./train_prism --resume -o '" + dir + "/c' --decay-frac 0.15");
    INFO(c.out);
    REQUIRE(c.rc == 0);
    CHECK(c.out.find("\nlr: wsd, warmup 3, stable at 0.01 to step 17, 1-sqrt decay over 3 steps to 0.001\n") !=
          std::string::npos);
    const LrSchedule sc = wsd(20, 3, 0.15, "sqrt", 1e-2);
    const auto lc = read_log(dir + "/c/log.jsonl");
    REQUIRE(lc.size() == 20);
    for (long s = 1; s <= 20; s++) {
        INFO("step " << s);
        CHECK(lr_field(lc.at(s)) == logged(lr_at(sc, s - 1)));
        if (s <= 14) CHECK(losses_of(lc.at(s)) == losses_of(la.at(s)));  // the same run until a's decay
    }
    CHECK(lr_field(lc.at(17)) == logged(1e-2));
    CHECK(lr_field(lc.at(18)) != logged(1e-2));
    RunRecord rc;
    REQUIRE(read_run_record(dir + "/c", rc));
    CHECK(rc.arg("--decay-frac") == "0.15");
    const json::Value* br = rc.doc.find("branches");
    REQUIRE(br);
    REQUIRE(br->kind == json::Value::Array);
    REQUIRE(br->arr.size() == 1);
    CHECK(run_record::dump(br->arr[0]) ==
          "{\"step\": 10, \"flag\": \"--decay-frac\", \"old\": \"0.3\", \"new\": \"0.15\"}");
    // The original is untouched: stopped at step 10, no branch, and it still resumes as recorded.
    RunRecord rb;
    REQUIRE(read_run_record(dir + "/b", rb));
    CHECK(rb.arg("--decay-frac") == "0.3");
    CHECK(!rb.doc.find("branches"));
    CHECK(read_log(dir + "/b/log.jsonl").size() == 10);

    // A longer wsd run from the stable phase: --steps 24 moves the decay to the last 7 steps (from step 18).
    REQUIRE(sh("cp -r '" + dir + "/b' '" + dir + "/d'").rc == 0);
    const Result d = sh("./train_prism --resume -o '" + dir + "/d' --steps 24");
    INFO(d.out);
    REQUIRE(d.rc == 0);
    const auto ld = read_log(dir + "/d/log.jsonl");
    REQUIRE(ld.size() == 24);
    for (long s = 1; s <= 24; s++) CHECK(lr_field(ld.at(s)) == logged(lr_at(wsd(24, 3, 0.3, "sqrt", 1e-2), s - 1)));
    RunRecord rd;
    REQUIRE(read_run_record(dir + "/d", rd));
    REQUIRE(rd.doc.find("branches"));
    CHECK(run_record::dump(*rd.doc.find("branches")) ==
          "[{\"step\": 10, \"flag\": \"--steps\", \"old\": \"20\", \"new\": \"24\"}]");

    // After the decay began, another decay (or length) is refused with one line, naming where it began.
    const Result late = sh("./train_prism --resume -o '" + dir + "/c' --steps 30");
    INFO(late.out);
    CHECK(one_line_error(late));
    CHECK(late.out.find("the recorded decay began after step 17") != std::string::npos);
    CHECK(late.out.find("the checkpoint is at step 20") != std::string::npos);
    const Result late2 = sh("./train_prism --resume -o '" + dir + "/a' --decay-frac 0.1 --steps 20");
    INFO(late2.out);
    CHECK(one_line_error(late2));
    CHECK(late2.out.find("--decay-frac 0.1 (recorded 0.3) would change the lr of step 15") != std::string::npos);
    CHECK(read_log(dir + "/c/log.jsonl").size() == 20);  // nothing written by the refusals
    RunRecord rc2;
    REQUIRE(read_run_record(dir + "/c", rc2));
    CHECK(rc2.doc.find("branches")->arr.size() == 1);

    // Restating --lr-schedule wsd keeps the recorded decay (no branch); cosine from step 10 is refused (its decay
    // would start at the warmup's end).
    REQUIRE(sh("cp -r '" + dir + "/b' '" + dir + "/e'").rc == 0);
    const Result cos = sh("./train_prism --resume -o '" + dir + "/e' --lr-schedule cosine");
    INFO(cos.out);
    CHECK(one_line_error(cos));
    CHECK(cos.out.find("--lr-schedule cosine (recorded wsd), no --decay-frac (recorded 0.3), no --decay-shape "
                       "(recorded sqrt) would change the lr of step 4") != std::string::npos);
    const Result same = sh("./train_prism --resume -o '" + dir + "/e' --lr-schedule wsd --stop-after 1");
    INFO(same.out);
    REQUIRE(same.rc == 0);
    RunRecord re;
    REQUIRE(read_run_record(dir + "/e", re));
    CHECK(re.arg("--decay-frac") == "0.3");
    CHECK(!re.doc.find("branches"));
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("a branch changes only what it names: a default warmup keeps its recorded length under another --steps",
          "[lr]") {
    const std::string dir = make_data_dir();
    // wsd with the default warmup, --warmup-frac 0.025 of 40 steps = 1; stopped at step 10, in the stable phase.
    REQUIRE(sh(micro(dir, dir + "/a") + " --steps 40 --lr-schedule wsd --val-every 0 --stop-after 10").rc == 0);
    REQUIRE(sh("cp -r '" + dir + "/a' '" + dir + "/b'").rc == 0);
    // 80 steps would make the fraction's warmup 2 and change step 1's lr: the recorded 1 is kept, and said.
    const Result b = sh("./train_prism --resume -o '" + dir + "/b' --steps 80");
    INFO(b.out);
    REQUIRE(b.rc == 0);
    CHECK(b.out.find("note: the warmup keeps its recorded 1 steps (--warmup-frac 0.025 of --steps 80 would give 2); "
                     "pass --warmup N to change it") != std::string::npos);
    CHECK(b.out.find("\nlr: wsd, warmup 1, stable at 0.01 to step 64, 1-sqrt decay over 16 steps to 0.001\n") !=
          std::string::npos);
    const auto lb = read_log(dir + "/b/log.jsonl");
    REQUIRE(lb.size() == 80);
    for (long s = 1; s <= 80; s++) CHECK(lr_field(lb.at(s)) == logged(lr_at(wsd(80, 1, 0.2, "sqrt", 1e-2), s - 1)));
    RunRecord rb;
    REQUIRE(read_run_record(dir + "/b", rb));
    CHECK(rb.arg("--warmup") == "1");  // kept, so recorded: a later resume keeps it too
    REQUIRE(rb.doc.find("branches"));
    CHECK(run_record::dump(*rb.doc.find("branches")) ==  // the one change named, not the warmup
          "[{\"step\": 10, \"flag\": \"--steps\", \"old\": \"40\", \"new\": \"80\"}]");
    // A warmup named on the resume that changes a step done is refused, naming the flag that keeps it.
    REQUIRE(sh("cp -r '" + dir + "/a' '" + dir + "/c'").rc == 0);
    const Result c = sh("./train_prism --resume -o '" + dir + "/c' --steps 80 --warmup 3");
    INFO(c.out);
    CHECK(one_line_error(c));
    CHECK(c.out.find("would change the lr of step 1, already done") != std::string::npos);
    CHECK(c.out.find("pass --warmup 1 to keep the recorded warmup") != std::string::npos);
    // A decay that would start before the checkpoint names the --decay-frac that keeps the steps done.
    const Result d = sh("./train_prism --resume -o '" + dir + "/c' --decay-frac 0.9");
    INFO(d.out);
    CHECK(one_line_error(d));
    CHECK(d.out.find("a decay of at most 30 steps (--decay-frac 0.75 or less, or a larger --steps) keeps the steps "
                     "done") != std::string::npos);
    // Resuming the original as recorded records no warmup and no branch.
    REQUIRE(sh("./train_prism --resume -o '" + dir + "/a' --stop-after 5").rc == 0);
    RunRecord ra;
    REQUIRE(read_run_record(dir + "/a", ra));
    CHECK(!ra.has("--warmup"));
    CHECK(!ra.doc.find("branches"));
    sh("rm -rf '" + dir + "'");
}

// A finished cosine run resumed with another length: its decay stretches (the steps done would have had another
// lr), so it goes on as a branch: a note names the first such step, and run.json records the change.
TEST_CASE("a cosine run resumed with another --steps is a recorded branch, with a note", "[lr]") {
    const std::string dir = make_data_dir(), out = dir + "/cos";
    REQUIRE(sh(micro(dir, out) + " --steps 12 --warmup-frac 0.25 --val-every 0").rc == 0);
    const Result r = sh("./train_prism --resume -o '" + out + "' --steps 16");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    CHECK(r.out.find("note: --steps 16 (recorded 12) stretches the cosine decay: the lr of step 5, already done,") !=
          std::string::npos);
    RunRecord rec;
    REQUIRE(read_run_record(out, rec));
    REQUIRE(rec.doc.find("branches"));
    CHECK(run_record::dump(*rec.doc.find("branches")) ==
          "[{\"step\": 12, \"flag\": \"--steps\", \"old\": \"12\", \"new\": \"16\"}]");
    sh("rm -rf '" + dir + "'");
}
