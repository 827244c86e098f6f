// test_report_outputs.cpp: what report writes, and over what: -o and --json naming one file by two spellings are
// refused (compared as files, not strings), another tool's file (analyze's analyze.json) is replaced only with
// --overwrite while report's own earlier page is rewritten, and a run that lacks one of its outputs (eval.json
// without samples.jsonl) is named, on stderr and in the runs' table.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "test/test_util.h"
#include "test/train_util.h"

TEST_CASE("report refuses -o and --json that are one file by two spellings, and replaces no other tool's file",
          "[report][cli]") {
    char tmpl[] = "/tmp/prism_report_out_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    write_recorded_run(dir + "/run", "uniform", {{"--seed", "1"}}, {6.0, 5.5, 5.2});
    // One file, three spellings: relative, absolute, through ".."; the strings differ, the file does not.
    for (const std::string& json : std::vector<std::string>{dir + "/r.html", "./r.html", "run/../r.html"}) {
        Result r = sh("cd '" + dir + "' && " + std::string(getenv("PWD")) + "/report run -o r.html --json " + json);
        INFO(json << ": " << r.out);
        CHECK(r.rc != 0);
        CHECK(one_line_error(r));
        CHECK(has(r.out, "is the page's own file (-o), r.html by another name"));
        CHECK(sh("test -e '" + dir + "/r.html'").rc != 0);  // refused before anything was written
    }
    // Two files: both written.
    REQUIRE(sh("cd '" + dir + "' && " + std::string(getenv("PWD")) + "/report run -o r.html --json r.json").rc == 0);
    CHECK(has(read_file(dir + "/r.json"), "\"baseline\""));
    // An earlier page and JSON of report's are rewritten without a word (a rerun)...
    CHECK(sh("./report " + dir + "/run -o " + dir + "/r.html --json " + dir + "/r.json").rc == 0);
    // ...but analyze -o DIR's analyze.json, or any file report did not write, only with --overwrite.
    write_file(dir + "/analyze.json", "{\"checkpoints\": []}\n");
    for (const std::string& flags : std::vector<std::string>{"-o " + dir + "/analyze.json",
                                                             "-o " + dir + "/p.html --json " + dir + "/analyze.json"}) {
        Result r = sh("./report " + dir + "/run " + flags);
        INFO(r.out);
        CHECK(r.rc != 0);
        CHECK(one_line_error(r));
        CHECK(has(r.out, dir + "/analyze.json exists and is not a report's; write to another file, or pass "
                               "--overwrite to replace it"));
        CHECK(read_file(dir + "/analyze.json") == "{\"checkpoints\": []}\n");
    }
    CHECK(sh("./report " + dir + "/run -o " + dir + "/analyze.json --overwrite").rc == 0);
    CHECK(has(read_file(dir + "/analyze.json"), "<!DOCTYPE html>"));
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("report names a run's missing output: eval.json without samples.jsonl, an eval of another step",
          "[report][cli]") {
    char tmpl[] = "/tmp/prism_report_missing_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    write_recorded_run(dir + "/run", "uniform", {{"--seed", "1"}}, {6.0, 5.5, 5.2});  // 15 steps
    write_file(dir + "/run/eval.json",
               "{\"model\": \"run\", \"step\": 10, \"results\": [{\"task\": \"piqa\", \"examples\": 4, \"acc\": 0.5, "
               "\"acc_stderr\": 0.25}]}\n");
    Result r = sh("./report " + dir + "/run -o " + dir + "/r.html");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    CHECK(has(r.out, "report: warning: " + dir + "/run: eval.json without samples.jsonl"));
    CHECK(has(r.out, "report: warning: " + dir + "/run: eval.json scores step 10, the weights are at step 15"));
    CHECK(has(read_file(dir + "/r.html"),
              "<td>done; no model.bin; eval.json without samples.jsonl; eval.json "
              "scores step 10, the weights are at step 15</td>"));
    // With the file there and of the weights' step, nothing is missing.
    write_file(dir + "/run/samples.jsonl", "");
    write_file(dir + "/run/eval.json",
               "{\"model\": \"run\", \"step\": 15, \"results\": [{\"task\": \"piqa\", \"examples\": 4, \"acc\": 0.5, "
               "\"acc_stderr\": 0.25}]}\n");
    r = sh("./report " + dir + "/run -o " + dir + "/r.html");
    CHECK(!has(r.out, "without samples.jsonl"));
    CHECK(!has(r.out, "scores step"));
    sh("rm -rf '" + dir + "'");
}
