// eval/eval_file.h: the tokenised form of a task, what data/prepare_eval writes and the scorer reads: lm-eval's
// pair encoding of each (context, continuation), the examples as token pools with request ranges, the
// tokenizer fingerprint that ties a file to its vocabulary, and the file itself, saved atomically and loaded
// with every field checked (a bad file is a one-line EvalError naming the file and the fix).
//
// The file's bytes (header fields, records, requests, what each range scores): docs/formats.md's "Eval files"
// (test/test_formats.cpp holds the page to save_eval_file).
//
// Version 1 files (whose checksum left the header out) are still read, with the same checks.
// Does not: build the prompt strings (eval/tasks.h), read raw files (data/prepare_eval.cpp), or score
// (eval/scoring.h). Needs no model: the data tool that writes these files never compiles one.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "eval/tasks.h"
#include "util/io.h"
#include "text/pytext.h"
#include "text/tokenizer.h"

struct EvalRequest {
    int32_t ctx_begin, ctx_end, cont_begin, cont_end, norm_len;
};
struct EvalExample {
    std::vector<int32_t> tokens;  // the pool
    std::vector<EvalRequest> req;
    int32_t gold = -1;
    int64_t words = 0, bytes = 0;
};
struct EvalFile {
    std::string path, task, tokenizer = "gpt2";
    EvalKind kind = EvalKind::Choice;
    bool has_norm = false;
    int32_t V = 0, eot = 0;
    uint64_t fingerprint = 0;
    std::vector<EvalExample> ex;
};

static const int32_t kEvalMagic = 0x4C564550;  // "PEVL"
static const int32_t kEvalVersion = 2;         // written; version 1 is still read

// Identifies a vocabulary: a hash of every token's bytes, in id order.
inline uint64_t tokenizer_fingerprint(const Tokenizer& tok) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < tok.vocab_size(); i++) {
        std::string b = tok.decode(&i, 1);
        uint32_t n = (uint32_t)b.size();
        h = checksum64(&n, 4, h), h = checksum64(b.data(), b.size(), h);
    }
    return h;
}

// lm-eval's pair encoding: trailing white space of the context moves to the continuation; the context is
// encoded alone and the continuation is what enc(ctx + cont) has beyond len(enc(ctx)) tokens. An empty
// context is [EOT].
inline void encode_pair(const Tokenizer& tok, const std::string& ctx_in, const std::string& cont_in,
                        std::vector<int>& ctx, std::vector<int>& cont) {
    ctx.clear(), cont.clear();
    if (ctx_in.empty()) {
        ctx = {tok.eot()}, cont = tok.encode(cont_in);
        return;
    }
    std::string c = py::rstrip(ctx_in);
    std::string k = ctx_in.substr(c.size()) + cont_in;
    ctx = tok.encode(c);
    std::vector<int> whole = tok.encode(c + k);
    if (whole.size() > ctx.size()) cont.assign(whole.begin() + ctx.size(), whole.end());
    if (ctx.empty()) ctx = {tok.eot()};  // a white-space-only context: score as if empty
}

inline EvalExample encode_doc(const Tokenizer& tok, const EvalDoc& d) {
    EvalExample e;
    e.gold = d.gold, e.words = d.words, e.bytes = d.bytes;
    if (d.ctx.empty()) {
        e.tokens = tok.encode(d.text);
        if (e.tokens.empty()) throw EvalError("empty text");
        return e;
    }
    std::vector<int> ctx, cont, prev_ctx;
    int32_t cb = 0, ce = 0;
    for (size_t r = 0; r < d.ctx.size(); r++) {
        encode_pair(tok, d.ctx[r], d.cont[r], ctx, cont);
        if (cont.empty()) throw EvalError("continuation \"" + d.cont[r] + "\" has no tokens");
        if (r == 0 || ctx != prev_ctx) {  // choices share one context range
            cb = (int32_t)e.tokens.size();
            e.tokens.insert(e.tokens.end(), ctx.begin(), ctx.end());
            ce = (int32_t)e.tokens.size();
            prev_ctx = ctx;
        }
        int32_t kb = (int32_t)e.tokens.size();
        e.tokens.insert(e.tokens.end(), cont.begin(), cont.end());
        e.req.push_back({cb, ce, kb, (int32_t)e.tokens.size(), d.norm_len.empty() ? 0 : d.norm_len[r]});
    }
    return e;
}

inline void save_eval_file(const std::string& path, const EvalFile& f) {
    std::vector<int32_t> p;  // the payload
    int64_t total = 0;
    for (const auto& e : f.ex) {
        p.insert(p.end(), {(int32_t)e.tokens.size(), (int32_t)e.req.size(), e.gold, 0});
        int32_t w[4];
        memcpy(w, &e.words, 8), memcpy(w + 2, &e.bytes, 8);
        p.insert(p.end(), w, w + 4);
        for (const auto& r : e.req) p.insert(p.end(), {r.ctx_begin, r.ctx_end, r.cont_begin, r.cont_end, r.norm_len});
        p.insert(p.end(), e.tokens.begin(), e.tokens.end());
        total += (int64_t)e.tokens.size();
    }
    int32_t h[256] = {0};
    h[0] = kEvalMagic, h[1] = kEvalVersion, h[2] = (int32_t)f.kind, h[3] = f.has_norm, h[4] = f.V, h[5] = f.eot;
    put64(h, 6, (int64_t)f.ex.size());
    put64(h, 8, (int64_t)f.fingerprint);
    put64(h, 10, (int64_t)p.size() * 4);
    put64(h, 14, total);
    strncpy((char*)(h + 16), f.task.c_str(), 63);
    strncpy((char*)(h + 32), f.tokenizer.c_str(), 63);
    Checksum64 sum;  // over the file as written, with the checksum field still zero
    sum.update(h, sizeof h);
    sum.update(p.data(), p.size() * 4);
    put64(h, 12, (int64_t)sum.value());
    try {
        write_atomically(path, {{h, sizeof h}, {p.data(), p.size() * 4}});
    } catch (const IoError& e) {
        throw EvalError(e.what());
    }
}

// Reads and checks every field; model_V > 0 also checks the file was tokenised for the model's vocabulary.
inline EvalFile load_eval_file(const std::string& path, int model_V = 0) {
    std::vector<unsigned char> buf;
    try {
        buf = read_file_bytes(path, "eval file");
    } catch (const IoError& e) {  // a missing file: say how to make it; a directory or a FIFO: say what it is
        throw EvalError(std::string(e.what()) +
                        (access(path.c_str(), F_OK) != 0 ? "; build it with data/get_eval.sh" : ""));
    }
    auto bad = [&](const std::string& why) { return EvalError("eval file " + path + ": " + why); };
    if (buf.size() < 1024) throw bad("truncated (" + std::to_string(buf.size()) + " bytes, the header needs 1024)");
    const int32_t* h = (const int32_t*)buf.data();
    if (h[0] != kEvalMagic) throw bad("not a Prism eval file (bad magic); build it with data/prepare_eval");
    const int version = h[1];
    if (version != 1 && version != 2)
        throw bad("version " + std::to_string(version) + ", this build reads 1 and 2; rebuild it");
    int64_t n = get64(h, 6), bytes = get64(h, 10);
    if (bytes < 0 || bytes % 4) throw bad("corrupt header: payload of " + std::to_string(bytes) + " bytes");
    if ((int64_t)buf.size() != 1024 + bytes)
        throw bad(std::string((int64_t)buf.size() < 1024 + bytes ? "truncated: " : "trailing bytes: ") +
                  std::to_string(buf.size()) + " bytes, expected " + std::to_string(1024 + bytes));
    uint64_t sum = checksum64(buf.data() + 1024, (size_t)bytes);
    if (version == 2) {
        Checksum64 c;
        int32_t z[256];
        memcpy(z, h, sizeof z);
        put64(z, 12, 0);
        c.update(z, sizeof z);
        c.update(buf.data() + 1024, (size_t)bytes);
        sum = c.value();
    }
    if (sum != (uint64_t)get64(h, 12)) throw bad("checksum mismatch: the file is corrupt");
    // A record is at least 8 header words and one token: a count beyond that is a corrupt header, never an
    // allocation attempt.
    if (n < 0 || n > bytes / 36)
        throw bad("corrupt header: " + std::to_string(n) + " examples cannot fit in a payload of " +
                  std::to_string(bytes) + " bytes");
    for (int at : {16, 32}) {  // the names: NUL-terminated within their 64 bytes, zero after the NUL
        const char* name = (const char*)(h + at);
        for (size_t i = strnlen(name, 64); i < 64; i++)
            if (name[i] != 0)
                throw bad("corrupt header: the " + std::string(at == 16 ? "task" : "tokenizer") + " name");
    }
    for (int i = 48; i < 256; i++)
        if (h[i] != 0) throw bad("corrupt header: word " + std::to_string(i) + " is not 0");
    EvalFile f;
    f.path = path;
    f.task.assign((const char*)(h + 16), strnlen((const char*)(h + 16), 64));
    f.tokenizer.assign((const char*)(h + 32), strnlen((const char*)(h + 32), 64));
    if (h[2] < 0 || h[2] > 2) throw bad("unknown kind " + std::to_string(h[2]));
    if (h[3] != 0 && h[3] != 1) throw bad("corrupt header: acc_norm flag " + std::to_string(h[3]));
    f.kind = (EvalKind)h[2], f.has_norm = h[3] != 0, f.V = h[4], f.eot = h[5];
    f.fingerprint = (uint64_t)get64(h, 8);
    if (f.V <= 0 || f.eot < 0 || f.eot >= f.V) throw bad("corrupt header (V or EOT)");
    if (model_V > 0 && f.V != model_V)
        throw bad("tokenised for a vocabulary of " + std::to_string(f.V) + " (tokenizer '" + printable(f.tokenizer) +
                  "') but the model has V = " + std::to_string(model_V) + "; rebuild it with the model's tokenizer");
    const int32_t* p = (const int32_t*)(buf.data() + 1024);
    const int64_t np = bytes / 4;
    int64_t at = 0;
    f.ex.resize((size_t)n);
    for (int64_t i = 0; i < n; i++) {
        auto rec = [&](const std::string& why) { return bad("example " + std::to_string(i) + ": " + why); };
        if (at + 8 > np) throw rec("truncated record");
        EvalExample& e = f.ex[i];
        int32_t nt = p[at], nr = p[at + 1];
        e.gold = p[at + 2];
        memcpy(&e.words, p + at + 4, 8), memcpy(&e.bytes, p + at + 6, 8);
        at += 8;
        if (nt <= 0 || nr < 0 || at + 5 * (int64_t)nr + nt > np || p[at - 5] != 0 || e.words < 0 || e.bytes < 0)
            throw rec("corrupt sizes");
        if (e.gold < -1 || e.gold >= std::max(nr, 1)) throw rec("gold index out of range");
        if ((f.kind == EvalKind::Rolling) != (nr == 0) || (f.kind == EvalKind::Target && nr != 1))
            throw rec("request count does not fit the task kind");
        for (int32_t r = 0; r < nr; r++, at += 5) {
            EvalRequest q{p[at], p[at + 1], p[at + 2], p[at + 3], p[at + 4]};
            if (q.ctx_begin < 0 || q.ctx_begin >= q.ctx_end || q.ctx_end > nt || q.cont_begin < 0 ||
                q.cont_begin >= q.cont_end || q.cont_end > nt || q.norm_len < 0)
                throw rec("request " + std::to_string(r) + " has a bad token range");
            e.req.push_back(q);
        }
        e.tokens.assign(p + at, p + at + nt);
        at += nt;
        for (int32_t t : e.tokens)
            if (t < 0 || t >= f.V) throw rec("token " + std::to_string(t) + " outside [0, V)");
    }
    if (at != np) throw bad("payload has " + std::to_string(np - at) + " words after the last record");
    int64_t total = 0;
    for (const auto& e : f.ex) total += (int64_t)e.tokens.size();
    if (total != get64(h, 14))
        throw bad("corrupt header: " + std::to_string(get64(h, 14)) + " tokens in all, the records hold " +
                  std::to_string(total));
    return f;
}
