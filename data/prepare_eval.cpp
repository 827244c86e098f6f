// prepare_eval: an official raw eval file in, one tokenised eval file out (format: top of eval/eval_file.h).
//
//   make build/prepare_eval
//   build/prepare_eval hellaswag  hellaswag_val.jsonl             -o data/eval/hellaswag.bin
//   build/prepare_eval piqa       valid.jsonl valid-labels.lst    -o data/eval/piqa.bin
//   build/prepare_eval arc_easy   ARC-Easy-Test.jsonl             -o data/eval/arc_easy.bin
//   build/prepare_eval winogrande dev.jsonl                       -o data/eval/winogrande.bin
//   build/prepare_eval lambada    lambada_test.jsonl              -o data/eval/lambada.bin
//   build/prepare_eval wikitext   wiki.test.raw                   -o data/eval/wikitext.bin
//
// data/get_eval.sh downloads the six and runs all of the above. The prompt rules live in eval/tasks.h (shared
// with the tests); this file only reads the raw formats, reports bad lines with their line number, tokenises
// (in parallel, output in input order) and writes. --show N prints the first N examples' contexts and
// continuations as the model will see them, token boundaries marked with '|', to compare against lm-eval.
// A data tool: it compiles the task rules, the file format and the tokenizer, never the model.
#include <omp.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "eval/eval_file.h"
#include "eval/tasks.h"
#include "util/json.h"
#include "text/pytext.h"
#include "text/tokenizer.h"
#include "run/cli.h"
#include "util/fs.h"

static std::string read_text_file(const std::string& path, const std::string& what) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw EvalError(what + " " + path + ": cannot open: " + strerror(errno));
    std::stringstream ss;
    ss << in.rdbuf();
    if (in.bad()) throw EvalError(what + " " + path + ": read error");
    return ss.str();
}

// Calls fn(line, line_number) for each non-blank line; errors from fn get "FILE line N: " in front.
template <typename Fn> static void for_each_line(const std::string& path, const std::string& text, Fn fn) {
    size_t a = 0;
    for (long no = 1; a < text.size(); no++) {
        size_t b = text.find('\n', a);
        if (b == std::string::npos) b = text.size();
        std::string line = text.substr(a, b - a);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        a = b + 1;
        if (line.find_first_not_of(" \t") == std::string::npos) continue;
        try {
            fn(line, no);
        } catch (const EvalError& e) {
            throw EvalError(path + " line " + std::to_string(no) + ": " + e.what());
        } catch (const json::Error& e) {
            throw EvalError(path + " line " + std::to_string(no) + ": " + e.what());
        }
    }
}

// The raw file(s) of a task -> documents (strings), in file order.
static std::vector<EvalDoc> read_docs(const std::string& task, const std::vector<std::string>& in) {
    const EvalTaskInfo& info = find_eval_task(task);
    size_t want = std::string(info.raw).find(' ') == std::string::npos ? 1 : 2;
    if (in.size() != want) throw EvalError(task + " takes " + std::to_string(want) + " input file(s): " + info.raw);
    std::vector<EvalDoc> docs;
    std::string text = read_text_file(in[0], task + " input");
    if (task == "wikitext") {
        for (const auto& page : wikitext_pages(text)) docs.push_back(wikitext_doc(page));
        return docs;
    }
    std::vector<long> labels;
    if (task == "piqa") {
        for_each_line(in[1], read_text_file(in[1], "piqa labels"), [&](const std::string& l, long) {
            std::string t = py::strip(l);
            if (t != "0" && t != "1") throw EvalError("label '" + t + "' is not 0 or 1");
            labels.push_back(t[0] - '0');
        });
    }
    for_each_line(in[0], text, [&](const std::string& line, long) {
        json::Value o = json::parse(line);
        if (o.kind != json::Value::Object) throw EvalError("expected one JSON object per line");
        if (task == "hellaswag") docs.push_back(hellaswag_doc(o));
        else if (task == "arc_easy") docs.push_back(arc_doc(o));
        else if (task == "winogrande") docs.push_back(winogrande_doc(o));
        else if (task == "lambada") docs.push_back(lambada_doc(o));
        else if (task == "piqa") {
            if (docs.size() >= labels.size())
                throw EvalError("more examples than labels in " + in[1] + " (" + std::to_string(labels.size()) + ")");
            docs.push_back(piqa_doc(o, labels[docs.size()]));
        }
    });
    if (task == "piqa" && labels.size() != docs.size())
        throw EvalError("piqa labels " + in[1] + " has " + std::to_string(labels.size()) + " labels but " + in[0] +
                        " has " + std::to_string(docs.size()) + " examples; use the matching pair of files");
    if (docs.empty()) throw EvalError(in[0] + ": no examples");
    return docs;
}

static EvalFile build_eval_file(const std::string& task, const std::vector<EvalDoc>& docs, const Tokenizer& tok) {
    const EvalTaskInfo& info = find_eval_task(task);
    EvalFile f;
    f.task = task, f.kind = info.kind, f.has_norm = info.has_norm;
    f.V = tok.vocab_size(), f.eot = tok.eot(), f.fingerprint = tokenizer_fingerprint(tok);
    f.ex.resize(docs.size());
    std::vector<std::string> errs(docs.size());
#pragma omp parallel for schedule(dynamic, 16)
    for (long i = 0; i < (long)docs.size(); i++) {
        try {
            f.ex[i] = encode_doc(tok, docs[i]);
        } catch (const std::exception& e) {
            errs[i] = e.what();
        }
    }
    for (size_t i = 0; i < errs.size(); i++)
        if (!errs[i].empty()) throw EvalError(task + " example " + std::to_string(i) + ": " + errs[i]);
    return f;
}

static std::string show_tokens(const Tokenizer& tok, const std::vector<int32_t>& t, int a, int b) {
    std::string s;
    for (int i = a; i < b; i++) s += (i > a ? "|" : "") + tok.decode(&t[i], 1);
    return s;
}

int main(int argc, char** argv) {
    std::string out, tok_path;
    long limit = 0, show = 0;
    Command cmd(
        "prepare_eval", "TASK INPUT [LABELS] [-o OUT] [flags]",
        "Converts an official raw eval file to a tokenised eval file (format: eval/eval_file.h).\n"
        "  TASK / INPUT: hellaswag hellaswag_val.jsonl | piqa valid.jsonl valid-labels.lst | arc_easy "
        "ARC-Easy-Test.jsonl\n                | winogrande dev.jsonl | lambada lambada_test.jsonl | wikitext "
        "wiki.test.raw",
        {path_flag("-o, --out", "FILE", "output (default data/eval/TASK.bin)", out),
         path_flag("--tokenizer", "PATH",
                   std::string("gpt2.tiktoken or a dir with encoder.json + vocab.bpe\n(") + kTokenizerHelp + ")",
                   tok_path),
         number_flag("--limit", "N", "only the first N examples", limit, 0, kMaxLong),
         number_flag("--show", "N", "print the first N examples as token pieces", show, 0, kMaxLong)});
    cmd.missing = "TASK", cmd.min_positional = 1, cmd.max_positional = (size_t)-1;
    return command_main(cmd, argc, argv, "", [&](const Parsed& p) {
        const std::vector<std::string>& pos = p.positional;
        std::string task = pos[0];
        if (task == "lambada_openai") task = "lambada";
        find_eval_task(task);
        if (out.empty()) out = "data/eval/" + task + ".bin";
        if (tok_path.empty()) tok_path = default_tokenizer_path();
        std::vector<ReadPath> inputs = {{tok_path, "the tokenizer", true}};  // the one output rule (util/fs.h)
        for (size_t i = 1; i < pos.size(); i++) inputs.push_back({pos[i], "the input"});
        check_output_path(out, "-o", inputs);
        std::vector<EvalDoc> docs = read_docs(task, std::vector<std::string>(pos.begin() + 1, pos.end()));
        if (limit > 0 && (long)docs.size() > limit) docs.resize(limit);
        Tokenizer tok = Tokenizer::load(tok_path);
        EvalFile f = build_eval_file(task, docs, tok);
        for (long i = 0; i < std::min<long>(show, (long)f.ex.size()); i++) {
            const EvalExample& e = f.ex[i];
            printf("--- %s example %ld (gold %d)\n", task.c_str(), i, e.gold);
            if (e.req.empty()) printf("text: %s\n", show_tokens(tok, e.tokens, 0, (int)e.tokens.size()).c_str());
            for (size_t r = 0; r < e.req.size(); r++) {
                const EvalRequest& q = e.req[r];
                printf("[%zu] ctx:  %s\n    cont: %s   (norm_len %d)\n", r,
                       show_tokens(tok, e.tokens, q.ctx_begin, q.ctx_end).c_str(),
                       show_tokens(tok, e.tokens, q.cont_begin, q.cont_end).c_str(), q.norm_len);
            }
        }
        size_t slash = out.rfind('/');
        if (slash != std::string::npos && slash > 0) make_dirs(out.substr(0, slash));
        save_eval_file(out, f);
        long tokens = 0;
        for (const auto& e : f.ex) tokens += (long)e.tokens.size();
        static const std::pair<const char*, long> official[] = {{"hellaswag", 10042}, {"piqa", 1838},
                                                                {"arc_easy", 2376},   {"winogrande", 1267},
                                                                {"lambada", 5153},    {"wikitext", 62}};
        long expect = 0;
        for (const auto& o : official)
            if (task == o.first) expect = o.second;
        printf("prepare_eval: wrote %s: %zu examples, %ld tokens%s\n", out.c_str(), f.ex.size(), tokens,
               limit == 0 && (long)f.ex.size() != expect
                   ? (" (the official file has " + std::to_string(expect) + ": is this the right file?)").c_str()
                   : "");
        return 0;
    });
}
