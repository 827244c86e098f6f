// eval/tasks.h: the zero-shot tasks as lm-evaluation-harness v0.4 defines them (docs/zero_shot.md, exactly):
// the task table (name, kind, whether acc_norm exists, the official raw files) and, per task, the rule that
// turns one raw record into prompt strings: the contexts, the continuations scored after them, the gold
// index, and the acc_norm lengths. HellaSwag, PIQA, ARC-Easy, WinoGrande, LAMBADA (OpenAI) and WikiText-2.
//
// Does not: read files (data/prepare_eval.cpp), tokenise (eval/eval_file.h's encode_doc), or score (eval/scoring.h). The
// strings are built with Python's str semantics (text/pytext.h), so they are byte-for-byte the harness's.
#pragma once

#include <cctype>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "util/errors.h"
#include "util/json.h"
#include "text/pytext.h"

// How a task is scored: Choice scores every request and picks the argmax; Target has one request (acc: every
// target token is the argmax; perplexity); Rolling is one text per example, scored in windows of the model's T.
enum class EvalKind : int32_t { Choice = 0, Target = 1, Rolling = 2 };

struct EvalTaskInfo {
    const char* name;
    EvalKind kind;
    bool has_norm;    // acc_norm defined
    const char* raw;  // the official raw file(s) prepare_eval reads
};
inline const std::vector<EvalTaskInfo>& eval_tasks() {
    static const std::vector<EvalTaskInfo> t = {
        {"hellaswag", EvalKind::Choice, true, "hellaswag_val.jsonl"},
        {"piqa", EvalKind::Choice, true, "valid.jsonl valid-labels.lst"},
        {"arc_easy", EvalKind::Choice, true, "ARC-Easy-Test.jsonl"},
        {"winogrande", EvalKind::Choice, false, "dev.jsonl"},
        {"lambada", EvalKind::Target, false, "lambada_test.jsonl"},
        {"wikitext", EvalKind::Rolling, false, "wiki.test.raw"},
    };
    return t;
}
// Every task's name, in table order, joined by sep (the --tasks help text, the unknown-task error).
inline std::string eval_task_names(const char* sep) {
    std::string s;
    for (const auto& t : eval_tasks()) s += (s.empty() ? "" : sep) + std::string(t.name);
    return s;
}
inline const EvalTaskInfo& find_eval_task(const std::string& name) {
    for (const auto& t : eval_tasks())
        if (name == t.name) return t;
    throw EvalError("unknown task '" + name + "'; choose from " + eval_task_names(", "));
}

// One example as strings, before tokenisation. Request r is (ctx[r], cont[r]).
struct EvalDoc {
    std::vector<std::string> ctx, cont;
    std::vector<int> norm_len;  // acc_norm divisor per request: code points of the choice, no leading space
    int gold = -1;
    std::string text;  // rolling tasks: the text scored as a whole
    int64_t words = 0, bytes = 0;
};

// Zero-shot multiple choice: one context, each choice scored as " " + choice.
inline EvalDoc choice_doc(const std::string& query, const std::vector<std::string>& choices, long gold) {
    if (gold < 0 || gold >= (long)choices.size())
        throw EvalError("gold index " + std::to_string(gold) + " is outside the " + std::to_string(choices.size()) +
                        " choices");
    EvalDoc d;
    for (const auto& c : choices) d.ctx.push_back(query), d.cont.push_back(" " + c), d.norm_len.push_back(py::len(c));
    d.gold = (int)gold;
    return d;
}

// HellaSwag's preprocess: strip; " [title]" -> ". "; drop every [...] (non-greedy, not across a newline, as
// Python's `.`); "  " -> " " in a single pass.
inline std::string hellaswag_preprocess(std::string_view text) {
    std::string s = py::replace(py::strip(text), " [title]", ". "), out;
    for (size_t i = 0; i < s.size(); i++) {
        if (s[i] == '[') {
            size_t j = s.find_first_of("]\n", i + 1);
            if (j != std::string::npos && s[j] == ']') {
                i = j;
                continue;
            }
        }
        out += s[i];
    }
    return py::replace(out, "  ", " ");
}

inline EvalDoc hellaswag_doc(const json::Value& o) {
    std::string ctx = json::str_field(o, "ctx_a") + " " + py::capitalize(json::str_field(o, "ctx_b"));
    std::string query = hellaswag_preprocess(json::str_field(o, "activity_label") + ": " + ctx);
    const json::Value& e = json::field(o, "endings");
    if (e.kind != json::Value::Array || e.arr.empty()) throw EvalError("field \"endings\" is not a non-empty array");
    std::vector<std::string> choices;
    for (const auto& x : e.arr) {
        if (x.kind != json::Value::String) throw EvalError("an ending is not a string");
        choices.push_back(hellaswag_preprocess(x.str));
    }
    return choice_doc(query, choices, json::int_field(o, "label"));
}

inline EvalDoc piqa_doc(const json::Value& o, long label) {
    return choice_doc("Question: " + json::str_field(o, "goal") + "\nAnswer:",
                      {json::str_field(o, "sol1"), json::str_field(o, "sol2")}, label);
}

// ARC: 3 to 5 choices, labels "A".."E" or "1".."5"; gold = position of answerKey among the labels.
inline EvalDoc arc_doc(const json::Value& o) {
    const json::Value& q = json::field(o, "question");
    const json::Value& ch = json::field(q, "choices");
    if (ch.kind != json::Value::Array || ch.arr.empty()) throw EvalError("field \"choices\" is not a non-empty array");
    std::string key = json::str_field(o, "answerKey");
    std::vector<std::string> texts;
    long gold = -1;
    for (const auto& c : ch.arr) {
        if (json::str_field(c, "label") == key && gold < 0) gold = (long)texts.size();
        texts.push_back(json::str_field(c, "text"));
    }
    if (gold < 0) throw EvalError("answerKey \"" + key + "\" is not among the choice labels");
    return choice_doc("Question: " + json::str_field(q, "stem") + "\nAnswer:", texts, gold);
}

// WinoGrande, partial scoring: each option fills the blank to make a context; the rest of the sentence after
// the blank, stripped, is the one continuation " " + rest scored under both (it keeps its space even before
// punctuation such as "'s").
inline EvalDoc winogrande_doc(const json::Value& o) {
    const std::string& s = json::str_field(o, "sentence");
    size_t i = s.find('_');
    if (i == std::string::npos) throw EvalError("sentence has no blank '_'");
    std::string ans = json::str_field(o, "answer");
    if (ans != "1" && ans != "2") throw EvalError("field \"answer\" must be \"1\" or \"2\", got \"" + ans + "\"");
    EvalDoc d;
    std::string rest = " " + py::strip(std::string_view(s).substr(i + 1));
    for (const char* opt : {"option1", "option2"})
        d.ctx.push_back(s.substr(0, i) + json::str_field(o, opt)), d.cont.push_back(rest);
    d.norm_len = {0, 0};
    d.gold = ans == "1" ? 0 : 1;
    return d;
}

// LAMBADA (OpenAI): context = every word but the last, target = " " + the last word (words split on " ").
inline EvalDoc lambada_doc(const json::Value& o) {
    const std::string& t = json::str_field(o, "text");
    size_t i = t.rfind(' ');
    if (i == std::string::npos) throw EvalError("text has a single word: nothing to predict it from");
    EvalDoc d;
    d.ctx = {t.substr(0, i)};
    d.cont = {" " + t.substr(i + 1)};
    d.norm_len = {0};
    d.gold = 0;
    d.words = 1, d.bytes = (int64_t)d.cont[0].size();
    return d;
}

// lm-eval's wikitext_detokenizer (the Megatron rules, in their order). Two quirks kept on purpose: the
// "/' [0-9]/" rule matches that literal text (a slash, a quote, a space, a digit, a slash) and writes the
// literal "/'[0-9]/"; the bracket and quote rules pair an opener with the next closer and trim the white
// space just inside them.
inline std::string wikitext_detokenize(std::string_view page) {
    std::string s = py::replace(page, "s '", "s'");
    {
        std::string out;
        for (size_t i = 0; i < s.size(); i++) {
            if (s.compare(i, 3, "/' ") == 0 && i + 4 < s.size() && isdigit((unsigned char)s[i + 3]) &&
                s[i + 4] == '/') {
                out += "/'[0-9]/", i += 4;
                continue;
            }
            out += s[i];
        }
        s = out;
    }
    for (const char* p : {"@-@", "@,@", "@.@"}) s = py::replace(s, std::string(" ") + p + " ", std::string(1, p[1]));
    for (const char* p : {":", ";", ".", "!", "?", ","})
        s = py::replace(s, std::string(" ") + p + " ", std::string(p) + " ");
    for (const char* oc : {"()", "[]", "{}", "\"\"", "''"}) {
        std::vector<uint32_t> c = py::decode(s), out;
        for (size_t i = 0; i < c.size(); i++) {
            size_t j = c[i] == (uint32_t)oc[0] ? i + 1 : c.size();
            while (j < c.size() && c[j] != (uint32_t)oc[1]) j++;
            if (j >= c.size()) {
                out.push_back(c[i]);
                continue;
            }
            size_t a = i + 1, b = j;
            while (a < b && py::isspace(c[a])) a++;
            while (b > a && py::isspace(c[b - 1])) b--;
            out.push_back(c[i]), out.insert(out.end(), c.begin() + a, c.begin() + b), out.push_back(c[j]);
            i = j;
        }
        s = py::encode(out);
    }
    s = py::replace(s, "= = = =", "===="), s = py::replace(s, "= = =", "==="), s = py::replace(s, "= =", "==");
    s = py::replace(s, " \xC2\xB0 ", "\xC2\xB0");  // " ° " -> "°"
    s = py::replace(s, " \n", "\n"), s = py::replace(s, "\n ", "\n");
    s = py::replace(s, " N ", " 1 "), s = py::replace(s, " 's", "'s");
    return s;
}

// The raw test file -> pages, as the EleutherAI/wikitext_document_level loader splits it: a line starts a
// new page when, with "= = =" -> "===" and "= =" -> "==" and stripped, it starts with "= " and ends with " ="
// (a top-level "= Title =" line); pages are their lines joined by "\n"; an all-blank page (the file's
// opening line) is dropped, the last page is always kept.
inline std::vector<std::string> wikitext_pages(std::string_view raw) {
    std::vector<std::string> pages, lines;
    auto flush = [&](bool always) {
        std::string page;
        for (size_t k = 0; k < lines.size(); k++) page += (k ? "\n" : "") + lines[k];
        if (always || !py::strip(page).empty()) pages.push_back(page);
        lines.clear();
    };
    size_t a = 0;
    while (true) {
        size_t b = raw.find('\n', a);
        std::string line(raw.substr(a, b == std::string_view::npos ? std::string_view::npos : b - a));
        std::string r = py::strip(py::replace(py::replace(line, "= = =", "==="), "= =", "=="));
        if (r.size() >= 3 && r.compare(0, 2, "= ") == 0 && r.compare(r.size() - 2, 2, " =") == 0) flush(false);
        lines.push_back(line);
        if (b == std::string_view::npos) break;
        a = b + 1;
    }
    flush(true);
    return pages;
}

// A page is scored detokenised; words (len(re.split(r"\s+", page))) and UTF-8 bytes count the original.
inline EvalDoc wikitext_doc(const std::string& page) {
    EvalDoc d;
    d.text = wikitext_detokenize(page);
    std::vector<uint32_t> c = py::decode(page);
    d.words = 1;
    for (size_t i = 0; i < c.size(); i++)
        if (py::isspace(c[i]) && (i == 0 || !py::isspace(c[i - 1]))) d.words++;
    d.bytes = (int64_t)page.size();
    return d;
}
