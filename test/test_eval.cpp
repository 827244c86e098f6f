// Zero-shot evaluation against docs/zero_shot.md: the JSON reader (util/json.h), Python's string rules (text/pytext.h), the task
// prompts (eval/tasks.h), the eval file (eval/eval_file.h), the scorer (eval/scoring.h) and the two binaries
// (data/prepare_eval.cpp, eval_zeroshot.cu). The exact prompt strings of every task including the awkward
// cases, the continuation token ranges of lm-eval's pair encoding (token ids checked against tiktoken's gpt2
// encoding), the eval file format, the rolling windows and left truncation, and scores on a model whose
// output is known in closed form: with every weight zero the logits are all 0, so every token has
// log-probability -ln V and a continuation of n tokens scores -n ln V.
// Fixtures are synthetic, written here in the official raw formats. Needs the GPT-2 ranks file at
// $PRISM_TOKENIZER or data/cache/gpt2.tiktoken (bash data/get_tokenizer.sh).
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "run/checkpoint.h"
#include "ref/cpu_engine.h"
#include "test/test_util.h"
#include "test/tokenizer_util.h"
#include "eval/scoring.h"

namespace {

json::Value J(const std::string& s) { return json::parse(s); }

std::vector<int> range(const EvalExample& e, int a, int b) {
    return std::vector<int>(e.tokens.begin() + a, e.tokens.begin() + b);
}

bool one_line(const std::string& s) { return !s.empty() && s.find('\n') == s.size() - 1; }

// A model small enough to run in milliseconds but with GPT-2's vocabulary, so real token ids fit.
ModelConfig small_gpt2_vocab(int T) {
    ModelConfig c;
    c.d = 16, c.T = T, c.V = 50257, c.h_base = 2;
    c.layers = {{16, 2}};
    return c;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// Text rules
// ---------------------------------------------------------------------------------------------------------

TEST_CASE("the JSON parser reads RFC 8259 values and rejects malformed lines with the column", "[eval]") {
    json::Value o =
        J(R"( {"a": [1, -2.5e3, true, false, null], "s": "q\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00\ud800x", "a": 7} )");
    REQUIRE(o.kind == json::Value::Object);
    CHECK(json::field(o, "a").str == "7");  // duplicate key: the last wins, as in Python
    CHECK(o.obj[0].second.arr[1].str == "-2.5e3");
    CHECK(o.obj[0].second.arr[2].b);
    CHECK(json::str_field(o, "s") ==
          "q\"\\/\b\f\n\r\t\xC3\xA9\xF0\x9F\x98\x80\xEF\xBF\xBDx");  // lone surrogate -> U+FFFD
    CHECK(json::int_field(J(R"({"label": "3"})"), "label") == 3);
    CHECK(json::int_field(J(R"({"label": 2})"), "label") == 2);
    for (const char* bad :
         {"{\"a\": 1,}", "{\"a\" 1}", "[1 2]", "\"tab\there\"", "01", "{\"a\": tru}", "\"\\x\"", "{} x"})
        CHECK_THROWS_AS(J(bad), json::Error);
    CHECK_THROWS_WITH(J("{\"a\": 1,}"), Catch::Contains("column 9"));
    CHECK_THROWS_WITH(json::str_field(J("{}"), "ctx_b"), "missing field \"ctx_b\"");
}

TEST_CASE("json::quote writes a string literal that json::parse reads back byte for byte", "[eval]") {
    // Quotes, backslashes and every control character escaped; UTF-8 left as it is.
    std::string s = "say \"hi\" \\ ";
    for (int c = 0; c < 0x20; c++) s += (char)c;
    s += " caf\xC3\xA9 \xF0\x9F\x98\x80";
    std::string q = json::quote(s);
    CHECK(q.front() == '"');
    CHECK(q.back() == '"');
    CHECK(q.find('\n') == std::string::npos);
    json::Value v = J(q);
    REQUIRE(v.kind == json::Value::String);
    CHECK(v.str == s);
    CHECK(json::quote("a\tb") == "\"a\\u0009b\"");
    // A byte that is not UTF-8 is written as U+FFFD (JSON is UTF-8 text), which is also how parse reads one.
    const std::string bad = "x\xFF \xC3( \xED\xA0\x80", fffd = "\xEF\xBF\xBD";
    CHECK(json::quote(bad) == "\"x" + fffd + " " + fffd + "( " + fffd + fffd + fffd + "\"");
    CHECK(J("\"" + bad + "\"").str == J(json::quote(bad)).str);
}

TEST_CASE("Python string rules: capitalize lower-cases the rest, strip knows Unicode space, len counts code points",
          "[eval]") {
    CHECK(py::capitalize("tHEN YOU knead") == "Then you knead");
    CHECK(py::capitalize("") == "");
    CHECK(py::capitalize("1ST Place") == "1st place");
    // Beyond ASCII (values from CPython 3): Latin-1, Latin Extended-A, Greek with the final sigma, Cyrillic.
    CHECK(py::capitalize("ÀBΣ ΣΣ. ÿes") == "Àbς σς. ÿes");
    CHECK(py::capitalize("éCLAIR ŁÓDŹ") == "Éclair łódź");
    CHECK(py::capitalize("ßIG") == "Ssig");
    CHECK(py::capitalize("пРИВЕТ ЁЖ") == "Привет ёж");
    CHECK(py::strip("\xC2\xA0 a b\t\n") == "a b");  // NBSP is white space to str.strip()
    CHECK(py::rstrip(" a ") == " a");
    CHECK(py::len("café") == 4);
    CHECK(py::len("日本") == 2);
    CHECK(py::replace("a   b", "  ", " ") == "a  b");  // one pass, as str.replace
}

TEST_CASE("HellaSwag prompt: [title] becomes '. ', brackets vanish, ctx_b is capitalize()d", "[eval]") {
    EvalDoc d = hellaswag_doc(J(R"({"ind": 7, "activity_label": "Baking bread",
        "ctx_a": "[header] How to bake bread [title] Mix the flour.", "ctx_b": "tHEN YOU knead",
        "endings": ["the dough [step] for ten minutes.", "  a  cat. ", "x [sub]\n[y", "jump."], "label": 2,
        "split": "val", "split_type": "indomain", "source_id": "wikihow~1"})"));
    std::string q = "Baking bread: How to bake bread. Mix the flour. Then you knead";
    CHECK(d.ctx == std::vector<std::string>(4, q));
    CHECK(d.cont == std::vector<std::string>{" the dough for ten minutes.", " a cat.", " x \n[y", " jump."});
    CHECK(d.norm_len == std::vector<int>{26, 6, 5, 5});  // code points of the choice, without the leading space
    CHECK(d.gold == 2);
    // Continuation ids from tiktoken's gpt2: enc(ctx) and enc(ctx + cont)[len(enc(ctx)):].
    EvalExample e = encode_doc(gpt2(), d);
    REQUIRE(e.req.size() == 4);
    CHECK(range(e, e.req[0].ctx_begin, e.req[0].ctx_end) ==
          std::vector<int>{33, 868, 8509, 25, 1374, 284, 28450, 8509, 13, 15561, 262, 10601, 13, 3244, 345, 638, 1329});
    CHECK(range(e, e.req[0].cont_begin, e.req[0].cont_end) == std::vector<int>{262, 15756, 329, 3478, 2431, 13});
    CHECK(e.req[3].ctx_begin == e.req[0].ctx_begin);  // the choices share one context range
    // An empty ctx_b leaves "ctx_a " whose trailing space the strip removes.
    CHECK(
        hellaswag_doc(
            J(R"({"activity_label": "Ice fishing", "ctx_a": "A man sits.", "ctx_b": "", "endings": ["a"], "label": 0})"))
            .ctx[0] == "Ice fishing: A man sits.");
    CHECK_THROWS_WITH(hellaswag_doc(J(R"({"activity_label": "a", "ctx_a": "b", "endings": ["a"], "label": 0})")),
                      "missing field \"ctx_b\"");
}

TEST_CASE("PIQA, ARC-Easy (numeric labels, five choices) and LAMBADA prompts", "[eval]") {
    EvalDoc p = piqa_doc(J(R"({"goal": "How do I open a jar?", "sol1": "Twist the lid.", "sol2": "Hit it."})"), 1);
    CHECK(p.ctx[0] == "Question: How do I open a jar?\nAnswer:");
    CHECK(p.cont == std::vector<std::string>{" Twist the lid.", " Hit it."});
    CHECK(p.gold == 1);

    EvalDoc a = arc_doc(J(R"({"id": "Q1", "question": {"stem": "Which is a planet?", "choices": [
        {"text": "Moon", "label": "1"}, {"text": "Mars", "label": "2"}, {"text": "Sun", "label": "3"},
        {"text": "Comet", "label": "4"}, {"text": "Star", "label": "5"}]}, "answerKey": "2"})"));
    CHECK(a.ctx == std::vector<std::string>(5, "Question: Which is a planet?\nAnswer:"));
    CHECK(a.cont == std::vector<std::string>{" Moon", " Mars", " Sun", " Comet", " Star"});
    CHECK(a.norm_len == std::vector<int>{4, 4, 3, 5, 4});
    CHECK(a.gold == 1);
    CHECK_THROWS_WITH(
        arc_doc(J(R"({"question": {"stem": "s", "choices": [{"text": "a", "label": "A"}]}, "answerKey": "B"})")),
        Catch::Contains("answerKey \"B\""));

    EvalDoc l = lambada_doc(J(R"({"text": "the cat sat on the mat"})"));
    CHECK(l.ctx[0] == "the cat sat on the");
    CHECK(l.cont[0] == " mat");
    // A double space leaves the context ending in a space: it moves to the continuation before encoding.
    EvalExample e = encode_doc(gpt2(), lambada_doc(J(R"({"text": "the cat sat  down"})")));
    CHECK(range(e, e.req[0].ctx_begin, e.req[0].ctx_end) == std::vector<int>{1169, 3797, 3332});
    CHECK(range(e, e.req[0].cont_begin, e.req[0].cont_end) == std::vector<int>{220, 866});
}

TEST_CASE("WinoGrande partial scoring: two contexts, one continuation that keeps its space before 's", "[eval]") {
    EvalDoc w = winogrande_doc(J(R"({"qID": "x", "sentence": "Sarah lent Maria her car because _'s car was broken.",
        "option1": "Sarah", "option2": "Maria", "answer": "2"})"));
    CHECK(w.ctx ==
          std::vector<std::string>{"Sarah lent Maria her car because Sarah", "Sarah lent Maria her car because Maria"});
    CHECK(w.cont == std::vector<std::string>(2, " 's car was broken."));
    CHECK(w.gold == 1);
    EvalExample e = encode_doc(gpt2(), w);
    REQUIRE(e.req.size() == 2);
    CHECK(range(e, e.req[0].ctx_begin, e.req[0].ctx_end) ==
          std::vector<int>{29284, 26269, 14200, 607, 1097, 780, 10490});
    CHECK(range(e, e.req[0].cont_begin, e.req[0].cont_end) == std::vector<int>{705, 82, 1097, 373, 5445, 13});
    CHECK(e.req[1].ctx_begin != e.req[0].ctx_begin);
    CHECK_THROWS_WITH(winogrande_doc(J(R"({"sentence": "no blank", "option1": "a", "option2": "b", "answer": "1"})")),
                      Catch::Contains("no blank"));
}

TEST_CASE("WikiText: pages split at top-level titles, Megatron detokenisation, words and bytes of the original",
          "[eval]") {
    std::string raw =
        " \n = Alpha = \n \n Alpha is a test , with ( a bracket ) and 1 @,@ 000 @.@ 5 \" quotes \" . \n \n"
        " = = Section = = \n \n It 's N ° C ; done . \n \n = Beta = \n \n b c . \n";
    std::vector<std::string> pages = wikitext_pages(raw);
    REQUIRE(pages.size() == 2);  // the blank opening line is no page; "= = Section = =" is not top level
    CHECK(pages[1] == " = Beta = \n \n b c . \n");
    CHECK(wikitext_detokenize(pages[0]) ==
          " = Alpha =\n\nAlpha is a test, with (a bracket) and 1,000.5 \"quotes\".\n\n== Section ==\n\nIt's N°C; "
          "done.\n");
    CHECK(wikitext_detokenize("x /' 5/ y") == "x /'[0-9]/ y");  // the original rule's quirk, kept
    EvalDoc d = wikitext_doc(pages[1]);
    CHECK(d.text == " = Beta =\n\nb c.\n");
    CHECK(d.words == 8);  // re.split(r"\s+") of " = Beta = \n \n b c . \n": "", =, Beta, =, b, c, ., ""
    CHECK(d.bytes == 21);
}

// ---------------------------------------------------------------------------------------------------------
// File format and scoring
// ---------------------------------------------------------------------------------------------------------

TEST_CASE("eval files round-trip and reject corruption, truncation and another vocabulary", "[eval]") {
    EvalFile f;
    f.task = "piqa", f.kind = EvalKind::Choice, f.has_norm = true, f.V = 50257, f.eot = 50256, f.fingerprint = 42;
    f.ex.push_back(encode_doc(gpt2(), choice_doc("Question: q\nAnswer:", {"go home.", "run."}, 1)));
    f.ex.back().words = 3, f.ex.back().bytes = 1ll << 40;
    std::string path = "/tmp/prism_test_eval_" + std::to_string(getpid()) + ".bin";
    save_eval_file(path, f);
    EvalFile g = load_eval_file(path, 50257);
    CHECK(g.task == "piqa");
    CHECK(g.tokenizer == "gpt2");
    CHECK(g.fingerprint == 42);
    REQUIRE(g.ex.size() == 1);
    CHECK(g.ex[0].tokens == f.ex[0].tokens);
    CHECK(g.ex[0].bytes == 1ll << 40);
    CHECK(g.ex[0].req[1].cont_end == f.ex[0].req[1].cont_end);
    CHECK(g.ex[0].req[1].norm_len == 4);
    CHECK_THROWS_WITH(load_eval_file(path, 300), Catch::Contains("vocabulary of 50257") && Catch::Contains(path));

    std::vector<unsigned char> b = read_file_bytes(path, "eval file");
    b[1024 + 40] ^= 1;
    write_file(path, std::string(b.begin(), b.end()));
    CHECK_THROWS_WITH(load_eval_file(path), Catch::Contains("checksum"));
    write_file(path, std::string(b.begin(), b.begin() + 1030));
    CHECK_THROWS_WITH(load_eval_file(path), Catch::Contains("truncated"));
    write_file(path, "not an eval file");
    CHECK_THROWS_WITH(load_eval_file(path), Catch::Contains("truncated"));
    unlink(path.c_str());
    CHECK_THROWS_WITH(load_eval_file(path), Catch::Contains("cannot open eval file " + path));
}

TEST_CASE("a context longer than T keeps the last T + 1 tokens; rolling windows score every token once", "[eval]") {
    EvalFile f;
    f.kind = EvalKind::Choice, f.V = 100, f.eot = 99;
    EvalExample e;
    e.tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};  // ctx 1..7, cont 8 9 10
    e.req = {{0, 7, 7, 10, 3}, {0, 7, 9, 10, 1}};
    f.ex = {e};
    std::vector<EvalRow> rows;
    eval_rows(f, 0, 4, rows);
    REQUIRE(rows.size() == 2);
    CHECK(rows[0].seq == std::vector<int>{6, 7, 8, 9, 10});  // the last T + 1 = 5 of ctx + cont
    CHECK(rows[0].n_scored == 3);
    CHECK(rows[1].seq == std::vector<int>{4, 5, 6, 7, 10});  // another choice: its own last T + 1
    CHECK(rows[1].n_scored == 1);
    rows.clear();
    eval_rows(f, 0, 16, rows);
    CHECK(rows[1].seq == std::vector<int>{1, 2, 3, 4, 5, 6, 7, 10});  // short enough: untouched
    rows.clear();
    eval_rows(f, 0, 2, rows);  // the continuation itself is longer than T: its last T tokens are scored
    CHECK(rows[0].seq == std::vector<int>{8, 9, 10});
    CHECK(rows[0].n_scored == 2);

    f.kind = EvalKind::Rolling;
    f.ex[0].req.clear();  // t = 1..10, T = 4
    rows.clear();
    eval_rows(f, 0, 4, rows);
    REQUIRE(rows.size() == 3);
    CHECK(rows[0].seq == std::vector<int>{99, 1, 2, 3, 4});  // [EOT] + t[0:3] predicts t[0:4]
    CHECK(rows[0].n_scored == 4);
    CHECK(rows[1].seq == std::vector<int>{4, 5, 6, 7, 8});  // predicts t[4:8]
    CHECK(rows[1].n_scored == 4);
    CHECK(rows[2].seq == std::vector<int>{6, 7, 8, 9, 10});  // full-length input, scores only t[8:10]
    CHECK(rows[2].n_scored == 2);
    rows.clear();
    f.ex[0].tokens = {5, 6};
    eval_rows(f, 0, 4, rows);
    CHECK(rows.size() == 1);
    CHECK(rows[0].seq == std::vector<int>{99, 5, 6});
}

TEST_CASE("on an all-zero model every continuation scores -n ln V, so acc and acc_norm picks follow by hand",
          "[eval]") {
    struct OneThread {  // the matrices are tiny: OpenMP's barriers would cost more than the work
        int saved = omp_get_max_threads();
        OneThread() { omp_set_num_threads(1); }
        ~OneThread() { omp_set_num_threads(saved); }
    } one_thread;
    CpuEngine eng(small_gpt2_vocab(8));
    std::vector<float> zeros(eng.num_params(), 0.0f);
    eng.set_params(zeros.data());
    const double lnV = std::log(50257.0);
    // Choices' GPT-2 tokens (one per word and per '.'): " go home." 3 tokens / 8 code points, " run." 2 / 4,
    // " sit down now." 4 / 13, " eat." 2 / 4. acc takes the fewest tokens (first of a tie); acc_norm the
    // smallest tokens per code point: 2/4, 3/8, 4/13 -> "sit down now.".
    EvalFile f;
    f.task = "hellaswag", f.kind = EvalKind::Choice, f.has_norm = true, f.V = 50257, f.eot = 50256;
    std::string ctx = "A context long enough that T = 8 truncates it on the left, since it has many words";
    f.ex.push_back(
        encode_doc(gpt2(), choice_doc(ctx, {"go home.", "run.", "sit down now.", "eat."}, 2)));  // acc 0, norm 1
    f.ex.push_back(encode_doc(gpt2(), choice_doc(ctx, {"eat.", "sit down now."}, 0)));           // acc 1, norm 0
    f.ex.push_back(encode_doc(gpt2(), choice_doc("Q", {"run.", "go home."}, 1)));                // acc 0, norm 1
    for (int batch : {1, 3, 64}) {  // packing must not change a score
        EvalSums s = eval_task_sums(eng, f, batch);
        CHECK(s[EvalSums::N] == 3);
        CHECK(s[EvalSums::ACC] == 1);
        CHECK(s[EvalSums::ACC_NORM] == 2);
        CHECK(s[EvalSums::TOKENS] == 3 + 2 + 4 + 2 + 2 + 4 + 2 + 3);
    }
    EvalResult r = run_eval_task(eng, f, 4);
    CHECK(r.acc == Approx(1.0 / 3));
    CHECK(r.acc_se == Approx(std::sqrt((1.0 / 3) * (2.0 / 3) / 2)));  // sample std (n-1) / sqrt(n)
    CHECK(r.acc_norm == Approx(2.0 / 3));
    CHECK(eval_task_sums(eng, f, 4, 2)[EvalSums::N] == 2);               // --limit
    CHECK(eval_task_sums(eng, f, 4, 0, 1, 2)[EvalSums::ACC_NORM] == 0);  // rank 1 of 2 holds example 1 only

    // LAMBADA: targets " mat" (1 token) and, with the moved space, "  down" (2): LL = -3 ln V; the argmax of
    // equal logits is token 0, never the target, so acc = 0.
    EvalFile l;
    l.task = "lambada", l.kind = EvalKind::Target, l.V = 50257, l.eot = 50256;
    l.ex.push_back(encode_doc(gpt2(), lambada_doc(J(R"({"text": "the cat sat on the mat"})"))));
    l.ex.push_back(encode_doc(gpt2(), lambada_doc(J(R"({"text": "the cat sat  down"})"))));
    EvalSums s = eval_task_sums(eng, l, 2);
    // The log-probabilities are float: ln V = 10.82 carries a relative error near 1e-7.
    CHECK(s[EvalSums::LL] == Approx(-3 * lnV).epsilon(1e-6));
    r = eval_finish(l, s, 0);
    CHECK(r.acc == 0);
    CHECK(r.ppl == Approx(std::exp(1.5 * lnV)).epsilon(1e-5));
    CHECK(r.bits_per_byte == Approx(3 * lnV / 9 / std::log(2.0)).epsilon(1e-6));  // bytes of " mat" and " down"

    // WikiText: every token is scored exactly once whatever the windows, so LL = -N ln V.
    EvalFile w;
    w.task = "wikitext", w.kind = EvalKind::Rolling, w.V = 50257, w.eot = 50256;
    EvalDoc d = wikitext_doc(
        " = Beta = \n \n b c . \n Some more words here so that the page takes several windows of eight tokens . \n");
    w.ex.push_back(encode_doc(gpt2(), d));
    const double N = (double)w.ex[0].tokens.size();
    REQUIRE(N > 16);
    s = eval_task_sums(eng, w, 2);
    CHECK(s[EvalSums::TOKENS] == N);
    r = eval_finish(w, s, 0);
    CHECK(r.ppl == Approx(std::exp(N * lnV / d.words)).epsilon(1e-5));
    CHECK(r.bits_per_byte == Approx(N * lnV / d.bytes / std::log(2.0)).epsilon(1e-6));
}

TEST_CASE("padding and packing rows into batches leave every score unchanged (random model)", "[eval]") {
    struct OneThread {
        int saved = omp_get_max_threads();
        OneThread() { omp_set_num_threads(1); }
        ~OneThread() { omp_set_num_threads(saved); }
    } one_thread;
    const int T = 8;
    CpuEngine eng(small_gpt2_vocab(T));
    eng.init_params(3);
    EvalFile f;
    f.task = "lambada", f.kind = EvalKind::Target, f.V = 50257, f.eot = 50256;
    for (const char* t : {"the cat sat on the mat", "a b", "one two three four five six seven eight nine ten eleven"})
        f.ex.push_back(encode_doc(gpt2(), lambada_doc(J(std::string("{\"text\": \"") + t + "\"}"))));
    // The oracle: each example alone, unpadded, its last T + 1 tokens, summing the continuation's log-probs.
    double want = 0;
    for (const auto& e : f.ex) {
        std::vector<int> seq(e.tokens.begin(), e.tokens.end());  // ctx | cont, one request
        const int n_cont = e.req[0].cont_end - e.req[0].cont_begin;
        if ((int)seq.size() > T + 1) seq.erase(seq.begin(), seq.end() - (T + 1));
        const int n = (int)seq.size() - 1;
        std::vector<int> tg(seq.begin() + 1, seq.end());
        for (int t = 0; t < n - n_cont; t++) tg[t] = -1;
        std::vector<float> lp(n);
        eng.forward(seq.data(), nullptr, 1, n);
        eng.target_logprobs(tg.data(), lp.data());
        for (float x : lp) want += x;
    }
    // Float sums over different batch shapes: agree to ~1e-6 relative; 1e-5 leaves room for the reduction order.
    for (int batch : {1, 2, 3}) CHECK(eval_task_sums(eng, f, batch)[EvalSums::LL] == Approx(want).epsilon(1e-5));
    // --log-samples's per-example values are the ones summed: they add up to the task's log-likelihood exactly.
    EvalSamples samples;
    const EvalSums s = eval_task_sums(eng, f, 2, 0, 0, 1, nullptr, &samples);
    REQUIRE(samples.ll.size() == 3);
    CHECK(samples.ll[0] + samples.ll[1] + samples.ll[2] == s[EvalSums::LL]);
    CHECK(samples.ll[0] + samples.ll[1] + samples.ll[2] == Approx(want).epsilon(1e-5));
}

// ---------------------------------------------------------------------------------------------------------
// The two binaries, end to end (built by make test before this runs)
// ---------------------------------------------------------------------------------------------------------

TEST_CASE("prepare_eval and eval_zeroshot: six tasks from raw fixtures, table and JSON, one-line errors", "[eval]") {
    gpt2();  // fails with the hint when the ranks file is missing
    char tmpl[] = "/tmp/prism_eval_test_XXXXXX";
    std::string dir = mkdtemp(tmpl), raw = dir + "/raw", ev = dir + "/eval";
    REQUIRE(system(("mkdir -p " + raw).c_str()) == 0);
    write_file(
        raw + "/hellaswag_val.jsonl",
        R"({"ind": 1, "activity_label": "Baking bread", "ctx_a": "[header] How to bake bread [title] Mix the flour.", "ctx_b": "tHEN YOU knead", "endings": ["go home.", "run.", "sit down now.", "eat."], "label": 2})"
        "\n"
        R"({"ind": 2, "activity_label": "Ice fishing", "ctx_a": "A man sits.", "ctx_b": "", "endings": ["eat.", "sit down now."], "label": "0"})"
        "\n");
    write_file(raw + "/valid.jsonl", R"({"goal": "How do I open a jar?", "sol1": "go home.", "sol2": "run."})"
                                     "\n");
    write_file(raw + "/valid-labels.lst", "0\n");
    write_file(
        raw + "/ARC-Easy-Test.jsonl",
        R"({"id": "Q1", "question": {"stem": "Which is a planet?", "choices": [{"text": "Mars", "label": "1"}, {"text": "Moon", "label": "2"}, {"text": "Sun", "label": "3"}, {"text": "Comet", "label": "4"}, {"text": "Star", "label": "5"}]}, "answerKey": "1"})"
        "\n");
    write_file(
        raw + "/dev.jsonl",
        R"({"qID": "a", "sentence": "Sarah lent Maria her car because _'s car was broken.", "option1": "Sarah", "option2": "Maria", "answer": "2"})"
        "\n"
        R"({"qID": "b", "sentence": "The trophy did not fit in the suitcase because the _ was too big.", "option1": "trophy", "option2": "suitcase", "answer": "1"})"
        "\n");
    write_file(raw + "/lambada_test.jsonl",
               "{\"text\": \"the cat sat on the mat\"}\n{\"text\": \"the cat sat  down\"}\n");
    write_file(raw + "/wiki.test.raw",
               " \n = Alpha = \n \n Alpha is a test , with ( a bracket ) . \n \n = Beta = \n \n b c . \n");
    const std::vector<std::string> cmds = {
        "hellaswag hellaswag_val.jsonl", "piqa valid.jsonl " + raw + "/valid-labels.lst",
        "arc_easy ARC-Easy-Test.jsonl",  "winogrande dev.jsonl",
        "lambada lambada_test.jsonl",    "wikitext wiki.test.raw"};
    for (const auto& c : cmds) {
        std::string task = c.substr(0, c.find(' ')), in = c.substr(c.find(' ') + 1);
        Result r = sh("./build/prepare_eval " + task + " " + raw + "/" + in + " -o " + ev + "/" + task + ".bin");
        INFO(r.out);
        REQUIRE(r.rc == 0);
    }
    // The all-zero model, T = 8 so that HellaSwag's contexts are truncated and WikiText takes several windows.
    ModelConfig cfg = small_gpt2_vocab(8);
    std::vector<float> zeros(param_layout(cfg).total, 0.0f);
    save_model(dir + "/model.bin", cfg, zeros.data(), zeros.size(), 5);
    // One thread: on a shared two-core machine OpenMP's barriers over such tiny matrices cost more than the work.
    Result r = sh("OMP_NUM_THREADS=1 ./eval_zeroshot " + dir + "/model.bin --tasks all --data " + ev +
                  " --batch 3 --json " + dir + "/r.json --log-samples " + dir + "/s.jsonl");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    CHECK(r.out.find("hellaswag") != std::string::npos);
    CHECK(r.out.find("wikitext") != std::string::npos);
    json::Value j = J(read_file(dir + "/r.json"));
    const auto& res = json::field(j, "results").arr;
    REQUIRE(res.size() == 6);
    auto num = [&](int t, const char* k) { return std::stod(json::field(res[t], k).str); };
    // By hand as in the test above: HellaSwag acc picks "run." / "eat." (wrong, right), acc_norm picks
    // "sit down now." twice (right, wrong). PIQA: acc "run." (wrong), acc_norm "go home." (right). ARC: five
    // one-token choices, acc takes the first (right), acc_norm the longest, "Comet" (wrong). WinoGrande: the
    // same continuation scores the same under both contexts, the first wins: right once out of two.
    CHECK(num(0, "acc") == 0.5);
    CHECK(num(0, "acc_norm") == 0.5);
    CHECK(num(0, "acc_stderr") == Approx(0.5));
    CHECK(num(1, "acc") == 0);
    CHECK(num(1, "acc_norm") == 1);
    CHECK(num(2, "acc") == 1);
    CHECK(num(2, "acc_norm") == 0);
    CHECK(num(3, "acc") == 0.5);
    CHECK(json::field(res[3], "task").str == "winogrande");
    CHECK(res[3].find("acc_norm") == nullptr);
    CHECK(num(4, "acc") == 0);
    CHECK(num(4, "perplexity") == Approx(std::pow(50257.0, 1.5)).epsilon(1e-5));
    EvalFile wf = load_eval_file(ev + "/wikitext.bin");
    REQUIRE(wf.ex.size() == 2);
    double N = (double)(wf.ex[0].tokens.size() + wf.ex[1].tokens.size()),
           words = (double)(wf.ex[0].words + wf.ex[1].words);
    CHECK(num(5, "word_perplexity") == Approx(std::exp(N * std::log(50257.0) / words)).epsilon(1e-5));
    CHECK(res[5].find("acc") == nullptr);

    // --log-samples: one line per example in task order; per task the examples' acc (acc_norm) average to the
    // task's, and the log-likelihoods are the scorer's own (recomputed here in process, the same doubles), on the
    // all-zero model -(continuation tokens) ln V each.
    {
        std::vector<json::Value> lines;
        std::ifstream in(dir + "/s.jsonl");
        for (std::string l; std::getline(in, l);) lines.push_back(J(l));
        size_t at = 0;
        for (int t = 0; t < 6; t++) {
            const std::string task = json::field(res[t], "task").str;
            INFO("task " << task);
            const EvalFile f = load_eval_file(ev + "/" + task + ".bin");
            EvalSamples want;
            CpuEngine eng(cfg);
            eng.set_params(zeros.data());
            run_eval_task(eng, f, 3, 0, nullptr, nullptr, &want);
            double acc = 0, acc_norm = 0;
            for (size_t i = 0; i < f.ex.size(); i++, at++) {
                REQUIRE(at < lines.size());
                const json::Value& o = lines[at];
                CHECK(json::field(o, "task").str == task);
                CHECK(json::int_field(o, "index") == (int)i);
                const auto& ll = json::field(o, "loglik").arr;
                REQUIRE(ll.size() == want.first[i + 1] - want.first[i]);
                for (size_t c = 0; c < ll.size(); c++) {
                    CHECK(std::stod(ll[c].str) == want.ll[want.first[i] + c]);
                    if (f.kind != EvalKind::Rolling)
                        CHECK(
                            std::stod(ll[c].str) ==
                            Approx(-std::stod(json::field(o, "tokens").arr[c].str) * std::log(50257.0)).epsilon(1e-6));
                }
                if (f.kind == EvalKind::Rolling) {
                    CHECK(o.find("acc") == nullptr);
                    continue;
                }
                CHECK(json::int_field(o, "label") == std::max(0, (int)f.ex[i].gold));
                acc += json::int_field(o, "acc");
                CHECK((o.find("acc_norm") != nullptr) == f.has_norm);
                if (f.has_norm) acc_norm += json::int_field(o, "acc_norm");
            }
            if (f.kind == EvalKind::Rolling) continue;
            CHECK(acc / f.ex.size() == num(t, "acc"));
            if (f.has_norm) CHECK(acc_norm / f.ex.size() == num(t, "acc_norm"));
        }
        CHECK(at == lines.size());
    }

    // Under mpirun each rank scores every other example and the counts are summed over the ranks: the same
    // results (log-likelihoods summed in another order: 1e-12 relative).
    Result m = sh("OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root -np 2 ./eval_zeroshot " + dir +
                  "/model.bin --tasks all --data " + ev + " --batch 3 --json " + dir + "/r2.json --log-samples " + dir +
                  "/s2.jsonl");
    INFO(m.out);
    REQUIRE(m.rc == 0);
    CHECK(m.out.find("2 ranks over MPI") != std::string::npos);
    json::Value j2 = J(read_file(dir + "/r2.json"));
    const auto& res2 = json::field(j2, "results").arr;
    REQUIRE(res2.size() == 6);
    for (int t = 0; t < 6; t++)
        for (const char* k : {"examples", "acc", "acc_norm", "perplexity", "word_perplexity", "bits_per_byte"}) {
            INFO("task " << t << " " << k);
            REQUIRE((res[t].find(k) == nullptr) == (res2[t].find(k) == nullptr));
            if (res[t].find(k)) CHECK(std::stod(json::field(res2[t], k).str) == Approx(num(t, k)).epsilon(1e-12));
        }
    CHECK(read_file(dir + "/s2.jsonl") == read_file(dir + "/s.jsonl"));  // rank 0 writes every rank's examples
    // --log-samples where no file can be: one line, before any scoring.
    REQUIRE(system(("mkfifo " + dir + "/fifo && mkdir " + dir + "/sdir && ln -s r.json " + dir + "/rlink").c_str()) ==
            0);
    for (const auto& [bad, says] : std::vector<std::pair<std::string, std::string>>{
             {dir + "/sdir", dir + "/sdir is a directory"},
             {dir + "/fifo", dir + "/fifo is a FIFO"},
             {dir + "/no/s.jsonl", "the directory " + dir + "/no does not exist"},
             {dir + "/r.json --json " + dir + "/r.json", "is also the --json file"},
             // Issue 43 #4: one file by two spellings (the existing r.json, a file still to be written, a link).
             {dir + "/r.json --json " + dir + "/./r.json", "is also the --json file"},
             {dir + "/new.json --json " + dir + "/sdir/../new.json", "is also the --json file"},
             {dir + "/rlink --json " + dir + "/r.json", "is also the --json file"},
             {dir + "/s.jsonl --json " + dir + "/model.bin/", dir + "/model.bin is a regular file, not a directory"}}) {
        Result b =
            sh("timeout 60 ./eval_zeroshot " + dir + "/model.bin --tasks piqa --data " + ev + " --log-samples " + bad);
        INFO(b.out);
        CHECK(b.rc == 1);
        CHECK(one_line(b.out));
        CHECK(b.out.find(says) != std::string::npos);
    }

    // One-line errors naming the file.
    Result e1 =
        sh("./build/prepare_eval piqa " + raw + "/valid.jsonl " + raw + "/missing-labels.lst -o " + dir + "/x.bin");
    CHECK(e1.rc == 1);
    CHECK(one_line(e1.out));
    CHECK(e1.out.find(raw + "/missing-labels.lst") != std::string::npos);
    write_file(raw + "/bad.jsonl",
               R"({"activity_label": "a", "ctx_a": "b", "ctx_b": "c", "endings": ["d"], "label": 0})"
               "\n"
               R"({"activity_label": "a", "ctx_a": "b", "endings": ["d"], "label": 0})"
               "\n");
    Result e2 = sh("./build/prepare_eval hellaswag " + raw + "/bad.jsonl -o " + dir + "/x.bin");
    CHECK(e2.rc == 1);
    CHECK(one_line(e2.out));
    CHECK(e2.out.find(raw + "/bad.jsonl line 2: missing field \"ctx_b\"") != std::string::npos);
    write_file(raw + "/labels2.lst", "0\n1\n");
    Result e3 = sh("./build/prepare_eval piqa " + raw + "/valid.jsonl " + raw + "/labels2.lst -o " + dir + "/x.bin");
    CHECK(e3.rc == 1);
    CHECK(e3.out.find("2 labels") != std::string::npos);
    EvalFile other = load_eval_file(ev + "/piqa.bin");
    other.V = 300, other.eot = 299, other.tokenizer = "bytes";
    for (auto& x : other.ex)
        for (auto& t : x.tokens) t %= 300;
    REQUIRE(system(("mkdir -p " + dir + "/other").c_str()) == 0);
    save_eval_file(dir + "/other/piqa.bin", other);
    Result e4 = sh("./eval_zeroshot " + dir + "/model.bin --tasks piqa --data " + dir + "/other");
    CHECK(e4.rc == 1);
    CHECK(one_line(e4.out));
    CHECK(e4.out.find(dir + "/other/piqa.bin") != std::string::npos);
    CHECK(e4.out.find("tokenizer 'bytes'") != std::string::npos);
    // --tokenizer: files made with it pass, a file with another fingerprint (same V) is refused.
    std::string tok_path = getenv("PRISM_TOKENIZER") && *getenv("PRISM_TOKENIZER") ? getenv("PRISM_TOKENIZER")
                                                                                   : "data/cache/gpt2.tiktoken";
    CHECK(sh("OMP_NUM_THREADS=1 ./eval_zeroshot " + dir + "/model.bin --tasks piqa --data " + ev + " --tokenizer " +
             tok_path)
              .rc == 0);
    EvalFile fp = load_eval_file(ev + "/piqa.bin");
    fp.fingerprint ^= 1;
    REQUIRE(system(("mkdir -p " + dir + "/fp").c_str()) == 0);
    save_eval_file(dir + "/fp/piqa.bin", fp);
    Result e8 = sh("./eval_zeroshot " + dir + "/model.bin --tasks piqa --data " + dir + "/fp --tokenizer " + tok_path);
    CHECK(e8.rc == 1);
    CHECK(one_line(e8.out));
    CHECK(e8.out.find(dir + "/fp/piqa.bin was tokenised with another tokenizer") != std::string::npos);
    Result e5 = sh("./eval_zeroshot " + dir + "/nothing/model.bin --data " + ev);
    CHECK(e5.rc == 1);
    CHECK(one_line(e5.out));
    CHECK(e5.out.find(dir + "/nothing/model.bin") != std::string::npos);
    Result e6 = sh("./eval_zeroshot " + dir + "/model.bin --tasks piqa,nope --data " + ev);
    CHECK(e6.rc == 1);
    CHECK(e6.out.find("unknown task 'nope'") != std::string::npos);
    Result e7 = sh("./eval_zeroshot " + dir + "/model.bin --tasks lambada --data " + dir + "/raw");
    CHECK(e7.rc == 1);
    CHECK(e7.out.find(dir + "/raw/lambada.bin") != std::string::npos);
    // The default tasks score the files that are there and name the others; a task named by --tasks whose file is
    // missing stays an error, and so does a directory holding none of the default tasks.
    REQUIRE(system(("mkdir -p " + dir + "/only && cp " + ev + "/piqa.bin " + dir + "/only/").c_str()) == 0);
    Result d1 = sh("OMP_NUM_THREADS=1 ./eval_zeroshot " + dir + "/model.bin --data " + dir + "/only");
    INFO(d1.out);
    CHECK(d1.rc == 0);
    CHECK(d1.out.find("note: no eval file in " + dir +
                      "/only for hellaswag, arc_easy, winogrande: they are left "
                      "out (bash data/get_eval.sh hellaswag arc_easy winogrande fetches them)") != std::string::npos);
    CHECK(d1.out.find("piqa") != std::string::npos);
    Result d2 = sh("./eval_zeroshot " + dir + "/model.bin --tasks piqa,hellaswag --data " + dir + "/only");
    CHECK(d2.rc == 1);
    CHECK(one_line(d2.out));
    CHECK(d2.out.find(dir + "/only/hellaswag.bin") != std::string::npos);
    Result d3 = sh("./eval_zeroshot " + dir + "/model.bin --data " + dir + "/raw");
    CHECK(d3.rc == 1);
    CHECK(one_line(d3.out));
    CHECK(d3.out.find("no eval file of the default tasks (hellaswag, piqa, arc_easy, winogrande) in " + dir +
                      "/raw; run data/get_eval.sh") != std::string::npos);

    // (every flag of its --help parsed back: test_cli.cpp)
    REQUIRE(system(("rm -rf " + dir).c_str()) == 0);
}
