// test_output_rule.cpp: the one output rule (util/fs.h's check_output_path) in every tool that writes: each output
// flag of each tool pointed at each of the tool's inputs (the model, a run's files, a checkpoint, an eval file, a
// shard, the tokenizer, an export's files; by its own name, through a link, a hard link or `..`, and with
// --overwrite where the tool has it) is refused in one line, exit 1, and the input's bytes stay as they were.
// PRISM_OUTPUT_RULE_TABLE=1 prints the table of what was tried (tool, flag, input).
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "test/train_util.h"
#include "util/fs.h"
#include "util/io.h"

namespace {

void put(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string bytes_of(const std::string& path) {
    const std::vector<unsigned char> b = read_file_bytes(path, "input");
    return std::string(b.begin(), b.end());
}

struct Try {
    std::string tool, flag, input, cmd, path;  // path: the input's file, whose bytes must not change
};

}  // namespace

TEST_CASE("the output rule: no output flag of any tool replaces one of its inputs, --overwrite or not", "[faults]") {
    const std::string dir = make_data_dir(), run = dir + "/run", ev = dir + "/eval", hf = dir + "/hf",
                      ck = run + "/step_00000002", shard = dir + "/syn_val_000000.bin",
                      train = dir + "/syn_train_000001.bin", tok = dir + "/tok.tiktoken";
    {
        Result t = sh(micro(dir, run) + " --steps 2 --sample-every 0");
        INFO(t.out);
        REQUIRE(t.rc == 0);
    }
    make_dirs(ev);
    write_micro_eval_file(ev + "/piqa.bin");
    REQUIRE(sh("./export " + run + " -o " + hf).rc == 0);
    REQUIRE(sh("cp data/cache/gpt2.tiktoken " + tok).rc == 0);
    REQUIRE(sh("cp " + run + "/model.bin " + dir + "/lone.bin").rc == 0);  // a lone model.bin: the only copy
    REQUIRE(symlink((run + "/model.bin").c_str(), (dir + "/model.link").c_str()) == 0);
    REQUIRE(link((run + "/log.jsonl").c_str(), (dir + "/log.hard").c_str()) == 0);
    put(dir + "/valid.jsonl", "{\"goal\": \"How do I open a jar?\", \"sol1\": \"twist.\", \"sol2\": \"run.\"}\n");
    put(dir + "/labels.lst", "0\n");
    put(dir + "/text.txt", "some text to tokenise\n");
    for (const std::string& f : {run + "/latest", run + "/lock", run + "/run.json", ck + "/state_rank0.bin"})
        REQUIRE(access(f.c_str(), F_OK) == 0);

    // The tools run as they would for real: each succeeds with an output elsewhere (so a refusal below is the
    // rule's, not a bad input's).
    const std::string evz = "OMP_NUM_THREADS=1 ./eval_zeroshot ", evz_args = " --tasks piqa --data " + ev,
                      an = "OMP_NUM_THREADS=1 ./analyze ", an_args = " --sequences 1 --data '" + shard + "'";
    for (const std::string& ok :
         {evz + run + evz_args + " --json " + dir + "/e.json --log-samples " + dir + "/s.jsonl",
          an + run + an_args + " --json " + dir + "/a.json -o " + dir + "/charts",
          "./report " + run + " -o " + dir + "/r.html --json " + dir + "/r.json",
          "./import " + hf + " -o " + dir + "/i.bin",
          "./build/prepare_eval piqa " + dir + "/valid.jsonl " + dir + "/labels.lst --tokenizer " + tok + " -o " + dir +
              "/p.bin",
          "./build/prepare_shards " + dir + "/text.txt --tokenizer " + tok + " -o " + dir + "/new"}) {
        Result r = sh(ok);
        INFO(ok << "\n" << r.out);
        REQUIRE(r.rc == 0);
    }

    std::vector<Try> tries;
    const std::vector<std::pair<std::string, std::string>> run_files = {
        {"the run's model.bin", run + "/model.bin"},
        {"a checkpoint's model.bin", ck + "/model.bin"},
        {"a checkpoint's state_rank0.bin", ck + "/state_rank0.bin"},
        {"run.json", run + "/run.json"},
        {"log.jsonl", run + "/log.jsonl"},
        {"latest", run + "/latest"},
        {"lock", run + "/lock"}};
    auto add = [&](const std::string& tool, const std::string& flag, const std::string& input, const std::string& cmd,
                   const std::string& path) {
        tries.push_back({tool, flag, input, cmd, path});
    };
    // eval_zeroshot: --json and --log-samples, given the run, a step's checkpoint or a lone model.bin.
    for (const char* flag : {"--json", "--log-samples"}) {
        for (const auto& [what, p] : run_files)
            add("eval_zeroshot RUN", flag, what, evz + run + evz_args + " " + flag + " " + p, p);
        add("eval_zeroshot RUN", flag, "the eval file", evz + run + evz_args + " " + flag + " " + ev + "/piqa.bin",
            ev + "/piqa.bin");
        add("eval_zeroshot RUN/step_N/model.bin", flag, "the run's log.jsonl",
            evz + ck + "/model.bin" + evz_args + " " + flag + " " + run + "/log.jsonl", run + "/log.jsonl");
        add("eval_zeroshot RUN/step_N/model.bin", flag, "the model (as RUN/step_N/../step_N/model.bin)",
            evz + ck + "/model.bin" + evz_args + " " + flag + " " + ck + "/../step_00000002/model.bin",
            ck + "/model.bin");
        add("eval_zeroshot lone.bin", flag, "the model itself",
            evz + dir + "/lone.bin" + evz_args + " " + flag + " " + dir + "/lone.bin", dir + "/lone.bin");
        add("eval_zeroshot RUN", flag, "the model through a link",
            evz + run + evz_args + " " + flag + " " + dir + "/model.link", run + "/model.bin");
        add("eval_zeroshot RUN", flag, "log.jsonl through a hard link",
            evz + run + evz_args + " " + flag + " " + dir + "/log.hard", run + "/log.jsonl");
    }
    // analyze: --json FILE and -o DIR.
    for (const auto& [what, p] : run_files) add("analyze RUN", "--json", what, an + run + an_args + " --json " + p, p);
    add("analyze RUN", "--json", "the shard", an + run + an_args + " --json " + shard, shard);
    add("analyze lone.bin", "--json", "the model itself",
        an + dir + "/lone.bin" + an_args + " --json " + dir + "/lone.bin", dir + "/lone.bin");
    add("analyze RUN", "-o", "the run directory (holds the model)", an + run + an_args + " -o " + run,
        run + "/model.bin");
    add("analyze RUN", "-o", "a checkpoint directory", an + run + an_args + " -o " + ck, ck + "/model.bin");
    add("analyze RUN", "-o", "the shard's directory", an + run + an_args + " -o " + dir, shard);
    // report: -o and --json.
    for (const char* flag : {"-o", "--json"})
        for (const auto& [what, p] : run_files)
            add("report RUN", flag, what,
                "./report " + run + (flag[1] == '-' ? " -o " + dir + "/r.html " : " ") + flag + " " + p, p);
    // export -o DIR (--overwrite too), import -o FILE --overwrite.
    for (const char* extra : {"", " --overwrite"}) {
        add("export RUN", std::string("-o") + extra, "the run directory (holds the model)",
            "./export " + run + " -o " + run + extra, run + "/model.bin");
        add("export RUN", std::string("-o") + extra, "a checkpoint directory", "./export " + run + " -o " + ck + extra,
            ck + "/model.bin");
    }
    add("import HF", "-o --overwrite", "model.safetensors",
        "./import " + hf + " -o " + hf + "/model.safetensors --overwrite", hf + "/model.safetensors");
    add("import HF", "-o --overwrite", "config.json", "./import " + hf + " -o " + hf + "/config.json --overwrite",
        hf + "/config.json");
    // train_prism -o DIR (--overwrite too): a shard, the directory holding the shards, the eval file's directory,
    // the tokenizer.
    const std::string tp = micro(dir, "");
    for (const std::string& extra : {std::string(), std::string(" --overwrite")}) {
        const std::string args = extra + " --steps 1";
        add("train_prism", "-o" + extra, "the training shard", tp + train + args, train);
        add("train_prism", "-o" + extra, "the shards' directory", tp + dir + args, shard);
        add("train_prism", "-o" + extra, "the eval file's directory",
            tp + ev + args + " --eval-every 1 --eval-task piqa --eval-data " + ev, ev + "/piqa.bin");
        add("train_prism", "-o" + extra, "the tokenizer", tp + tok + args + " --tokenizer " + tok, tok);
    }
    // study DIR: a shard or the eval file as the study directory.
    const std::string study =
        "./study --trainer ./train_prism -m tiny --heads uniform --widths uniform --seeds 1 --eval-data " + ev + " ";
    add("study", "DIR", "the training shard", study + train + " -- --train '" + train + "' --val '" + shard + "'",
        train);
    add("study", "DIR", "the eval file", study + ev + "/piqa.bin -- --train '" + train + "' --val '" + shard + "'",
        ev + "/piqa.bin");
    // The data tools.
    add("prepare_shards", "-o --overwrite", "an input that is a shard of the set replaced",
        "./build/prepare_shards " + train + " --tokenizer " + tok + " -o " + dir + "/syn --overwrite", train);
    add("prepare_eval", "-o", "the input",
        "./build/prepare_eval piqa " + dir + "/valid.jsonl " + dir + "/labels.lst --tokenizer " + tok + " -o " + dir +
            "/valid.jsonl",
        dir + "/valid.jsonl");
    add("prepare_eval", "-o", "the labels",
        "./build/prepare_eval piqa " + dir + "/valid.jsonl " + dir + "/labels.lst --tokenizer " + tok + " -o " + dir +
            "/labels.lst",
        dir + "/labels.lst");
    add("prepare_eval", "-o", "the tokenizer",
        "./build/prepare_eval piqa " + dir + "/valid.jsonl " + dir + "/labels.lst --tokenizer " + tok + " -o " + tok,
        tok);

    std::set<std::string> tools, flags, inputs;
    for (const Try& t : tries) {
        const std::string before = bytes_of(t.path);
        Result r = sh(t.cmd);
        INFO(t.tool << " " << t.flag << " onto " << t.input << ": " << t.cmd << "\n" << r.out);
        CHECK(r.rc == 1);
        CHECK(one_line_error(r));
        CHECK(r.out.find(", which this command reads; write to another path") != std::string::npos);
        CHECK(bytes_of(t.path) == before);
        tools.insert(t.tool.substr(0, t.tool.find(' '))), flags.insert(t.tool + " " + t.flag), inputs.insert(t.input);
        if (getenv("PRISM_OUTPUT_RULE_TABLE"))
            printf("%-36s %-24s %s\n", t.tool.c_str(), t.flag.c_str(), t.input.c_str());
    }
    if (getenv("PRISM_OUTPUT_RULE_TABLE"))
        printf("output rule: %zu refusals: %zu tools x %zu output flags x %zu inputs (generate writes stdout only)\n",
               tries.size(), tools.size(), flags.size(), inputs.size());
    // Nothing the refused commands would have written is there.
    for (const std::string& p : {dir + "/syn_train_000002.bin", run + "/step_00000001", ev + "/step_00000001"})
        CHECK(access(p.c_str(), F_OK) != 0);
    sh("rm -rf '" + dir + "'");
}

TEST_CASE("the output rule: the file-system root and an empty study directory are refused", "[faults]") {
    for (const std::string& cmd : {std::string("./study '' -m tiny --list"), std::string("./study / -m tiny --list"),
                                   std::string("./study // -m tiny --list"), std::string("./analyze x -o /")}) {
        Result r = sh(cmd);
        INFO(cmd << "\n" << r.out);
        CHECK(r.rc == 1);
        CHECK(one_line_error(r));
    }
    CHECK(sh("./study '' -m tiny --list").out.find("the study directory is an empty path") != std::string::npos);
    CHECK(sh("./study / -m tiny --list").out.find("is the file-system root") != std::string::npos);
    CHECK(sh("./analyze x -o /").out.find("-o / is the file-system root") != std::string::npos);
}
