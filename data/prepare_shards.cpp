// prepare_shards: text or JSON Lines in, llm.c-format token shards out (format: see dataloader.h).
//
//   make build/prepare_shards
//   build/prepare_shards -o data/mycorpus/mycorpus books/*.txt               # each file is one document
//   build/prepare_shards --format paragraphs -o data/x/x notes.txt          # blank lines separate documents
//   build/prepare_shards -o data/fw/fineweb --val-tokens 10000000 part*.jsonl  # one {"text": ...} per line
//
// Writes PREFIX_val_000000.bin (the first --val-tokens tokens), then PREFIX_train_000001.bin,
// PREFIX_train_000002.bin, ... of --shard-tokens tokens each (the last one holds the rest). Every document
// is preceded by EOT (50256), so a shard is a plain concatenation and documents may cross shard borders,
// as in llm.c. Documents are tokenized in parallel on every core, but always written in input order, so
// the shards are byte-identical whatever the thread count (but for the random set id in their headers).
//
// A set is replaced whole or not at all: every shard of a set carries the set's random id in its header
// (dataloader.h; llm.c ignores those words), the shards are written as NAME.bin.partial and renamed into place
// only when the input has been read to its end; a failure (a malformed line, a full disk) removes the partial
// files and leaves an earlier set under the same prefix as it was. A prefix that already holds shards is
// refused unless --overwrite is given: then the new shards are renamed in from the last one, the old set's extra
// shards removed, and the validation shard renamed in last, so that whatever moment a kill lands, the files
// under the prefix are the old set, the new set, or a mixture that the trainer refuses (two set ids under one
// prefix, or training shards without their validation shard), never a part of a set it trains on;
// the next run removes the .partial files a killed one left. An input with no text at all is an error; inputs
// must be files or pipes (a directory or a device is refused), and a single document (a whole text file, a
// line, a paragraph) is at most 1 GiB. A UTF-8 byte-order mark at the start of a file is skipped. An input that
// is a pipe, a FIFO or a terminal with nothing to read after 2 s gets one line saying that the tool waits for it
// (a FIFO is opened without waiting for a writer, so the line comes even when none ever opens it). On the
// command line --shard-tokens is at least 65536 (kMinShardTokens, below).
//
// FineWeb sample-10BT, the short route (downloading is up to you; any tool that fetches the parquet
// files from the hub works). Parquet to JSON Lines needs only pyarrow, and the tool reads stdin as "-":
//
//   python3 -c 'import sys, json, pyarrow.parquet as pq
//   for f in sys.argv[1:]:
//     for b in pq.ParquetFile(f).iter_batches(columns=["text"]):
//       for t in b.column(0).to_pylist(): print(json.dumps({"text": t}))' sample/10BT/*.parquet |
//   build/prepare_shards -o data/fineweb10B/fineweb --val-tokens 100000000 -
//
// (.jsonl files, e.g. from datasets' to_json(), are passed directly as arguments). That gives ~100 shards of 100M
// tokens; train with --train 'data/fineweb10B/fineweb_train_*.bin' --val 'data/fineweb10B/fineweb_val_*.bin'.
//
// Everything except main() is tokenizer-agnostic (the encoder is a callback), so the tests include this
// file with PREPARE_SHARDS_NO_MAIN and run the real pipeline with a byte-level stand-in tokenizer.
#include <fcntl.h>
#include <glob.h>
#include <omp.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <future>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <simdjson.h>

#include "dataloader.h"
#include "util/json.h"
#include "util/io.h"
#include "run/cli.h"
#include "text/tokenizer_path.h"
#include "util/fs.h"

// ------------------------------------------------------------------------------------------------------
// JSON Lines: the text field of one line, parsed strictly so that a malformed line is caught, not silently
// mis-tokenized. simdjson's DOM parser (it validates the whole line: grammar, UTF-8, escapes) reads the common
// line; util/json.h (nlohmann/json) reads whatever simdjson does not take as it stands, and writes every error
// message, so the rules and the messages are util/json.h's alone. Why two: on 100 MB of FineWeb-shaped lines (one
// thread, CPU time) the JSON alone reads at ~1.7 GB/s through simdjson and ~160 MB/s through nlohmann, and the
// whole tool with the GPT-2 tokenizer takes 3.1 s and 3.9 s (the hand-written parser before them: 3.5 s).

// The string field `field` of a line holding one JSON object. Returns false with the one-line reason in err
// ("invalid JSON: ... at column 12", "missing field \"text\"") when the line is malformed or lacks the field.
inline bool get_string_field(std::string_view line, std::string_view field, std::string& out, std::string& err) {
    // simdjson's DOM takes ~10 bytes of memory per byte of line, kept per thread: longer lines go to util/json.h.
    constexpr size_t kSimdjsonLine = (size_t)1 << 20;
    if (line.size() <= kSimdjsonLine) {
        thread_local simdjson::dom::parser parser = [] {
            simdjson::dom::parser p;
            if (p.allocate(1 << 16, 512)) {
            }  // util/json.h's depth bound, kept as it grows (a failure fails parse)
            return p;
        }();
        simdjson::dom::object o;
        if (parser.parse(line.data(), line.size()).get(o) == simdjson::SUCCESS) {
            std::string_view text;
            bool found = false;
            for (simdjson::dom::key_value_pair kv : o)  // every member: the last of duplicate keys wins, as in Python
                if (kv.key == field) found = kv.value.get(text) == simdjson::SUCCESS;
            // simdjson encodes a lone surrogate escape as its three bytes; util/json.h makes it U+FFFD.
            if (found && first_invalid_utf8((const unsigned char*)text.data(), text.size()) == text.size()) {
                out.assign(text.data(), text.size());
                return true;
            }
        }
    }
    try {
        out = json::str_field(json::parse(line), field);
        return true;
    } catch (const json::Error& e) {
        err = e.what();
        return false;
    }
}

// ------------------------------------------------------------------------------------------------------
// The pipeline: read documents in blocks (one thread) -> tokenize a block on every core -> write in order.

enum class InputFormat { AUTO, TEXT, PARAGRAPHS, LINES, JSONL };

struct PrepareOptions {
    std::vector<std::string> inputs;  // file paths; "-" is stdin
    std::string out_prefix;           // PREFIX of PREFIX_val_000000.bin ...
    InputFormat format = InputFormat::AUTO;
    std::string field = "text";         // JSONL field holding the document
    uint64_t shard_tokens = 100000000;  // tokens per train shard
    uint64_t val_tokens = 0;            // tokens in the val shard; 0 means shard_tokens
    int threads = 0;                    // 0: every core
    bool skip_errors = false;           // --on-error skip
    int progress = -1;                  // -1: a bar when stderr is a TTY, a line every 10 s otherwise; 0: none
    size_t block_bytes = 0;             // input bytes per parallel block; 0: 8 MB per thread (at least 32 MB)
    bool sync = true;                   // fsync each shard before its rename (the tests skip it for speed)
    bool overwrite = false;             // replace an existing set under out_prefix (--overwrite)
};

struct PrepareStats {
    uint64_t documents = 0, tokens = 0, bytes = 0, skipped = 0;
    std::vector<std::string> shards;  // paths written, in order
};

using EncodeFn = std::function<void(std::string_view, std::vector<int>&)>;

namespace prep {

struct Doc {
    std::string text;  // the document, or for JSONL the raw line
    uint32_t file;     // index into inputs
    uint64_t line;     // 1-based line where it starts (0 for whole files)
};

inline InputFormat format_of(const PrepareOptions& o, const std::string& path) {
    if (o.format != InputFormat::AUTO) return o.format;
    auto ends = [&](const char* suf) {
        const size_t n = strlen(suf);
        return path.size() >= n && path.compare(path.size() - n, n, suf) == 0;
    };
    return (ends(".jsonl") || ends(".json") || ends(".ndjson") || path == "-") ? InputFormat::JSONL : InputFormat::TEXT;
}

// Reads documents from the inputs in order, a block at a time. Not thread-safe; one call at a time.
struct Reader {
    const PrepareOptions& o;
    size_t file = 0;
    FILE* f = nullptr;
    uint64_t line = 0;
    char* buf = nullptr;
    size_t cap = 0;
    uint64_t bytes = 0;  // consumed so far
    explicit Reader(const PrepareOptions& opt) : o(opt) {}
    ~Reader() {
        if (f && f != stdin) fclose(f);
        free(buf);
    }
    static constexpr size_t kMaxDocument = (size_t)1 << 30;  // bytes of one document, line or paragraph
    // A pipe, FIFO, socket or terminal with nothing to read for 2 s: one line saying so, then the wait goes on until
    // there is data or the writers are gone (poll, since a read of a FIFO nobody has opened yet would be an EOF).
    static void wait_for_input(int fd, const std::string& name) {
        struct stat st;
        if (fstat(fd, &st) != 0 || !(S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) || isatty(fd))) return;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 2000) != 0) return;
        fprintf(stderr, "prepare_shards: waiting for input on %s (nothing to read yet)\n", name.c_str());
        fflush(stderr);
        while (poll(&p, 1, -1) < 0 && errno == EINTR) {
        }
    }
    bool open_next() {
        if (file >= o.inputs.size()) return false;
        const std::string& p = o.inputs[file];
        if (p == "-") {
            wait_for_input(fileno(stdin), "stdin");
            f = stdin;
        } else {  // without O_NONBLOCK, opening a FIFO would wait for a writer before the line above could be said
            const int fd = open(p.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
            if (fd >= 0) {
                wait_for_input(fd, p);
                fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
            }
            f = fd >= 0 ? fdopen(fd, "rb") : nullptr;
            if (!f && fd >= 0) close(fd);
        }
        if (!f) throw std::runtime_error("cannot open input " + p + ": " + strerror(errno) + "; check the path");
        line = 0;
        return true;
    }
    void too_long(const char* what) const {
        throw std::runtime_error("input " + o.inputs[file] + (line ? ":" + std::to_string(line) : std::string()) +
                                 ": " + what +
                                 " of more than 1 GiB; is it the right file? (split it, or use --format lines or "
                                 "paragraphs)");
    }
    void close_cur() {
        if (f && f != stdin) fclose(f);
        f = nullptr;
        file++;
    }
    // Appends documents until about `want` bytes are read; returns an empty block at the end. A paragraph still
    // open then is read on to its end (its blank line or its file's), so that no document is cut between blocks.
    std::vector<Doc> block(size_t want) {
        std::vector<Doc> docs;
        size_t got = 0;
        std::string para;
        uint64_t para_line = 0;
        while (got < want || !para.empty()) {
            const bool closing = got >= want;  // only the open paragraph's lines are left to read
            if (!f && !open_next()) break;
            const InputFormat fmt = format_of(o, o.inputs[file]);
            if (fmt == InputFormat::TEXT) {  // whole file
                std::string all;
                char tmp[1 << 16];
                size_t n;
                while ((n = fread(tmp, 1, sizeof(tmp), f)) > 0) {
                    all.append(tmp, n);
                    if (all.size() > kMaxDocument) too_long("a document (a whole file in --format text)");
                }
                if (ferror(f)) throw std::runtime_error("cannot read input " + o.inputs[file] + ": " + strerror(errno));
                if (all.compare(0, 3, "\xEF\xBB\xBF") == 0) all.erase(0, 3);  // a UTF-8 byte-order mark is not text
                got += all.size();
                bytes += all.size();
                if (!all.empty()) docs.push_back({std::move(all), (uint32_t)file, 0});
                close_cur();
                continue;
            }
            ssize_t n = getline(&buf, &cap, f);
            if (n < 0) {
                if (ferror(f)) throw std::runtime_error("cannot read input " + o.inputs[file] + ": " + strerror(errno));
                if (!para.empty()) docs.push_back({std::move(para), (uint32_t)file, para_line});
                para.clear();
                close_cur();
                continue;
            }
            line++;
            got += (size_t)n;
            bytes += (size_t)n;
            if ((size_t)n > kMaxDocument && !closing) too_long("a line");  // closing: named as the paragraph, below
            std::string_view l(buf, (size_t)n);
            if (line == 1 && l.substr(0, 3) == "\xEF\xBB\xBF") l.remove_prefix(3);  // a byte-order mark
            if (!l.empty() && l.back() == '\n') l.remove_suffix(1);
            if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
            if (fmt == InputFormat::PARAGRAPHS) {
                if (l.find_first_not_of(" \t") == std::string_view::npos) {  // blank line ends a document
                    if (!para.empty()) docs.push_back({std::move(para), (uint32_t)file, para_line});
                    para.clear();
                } else {
                    if (para.empty()) para_line = line;
                    else para += '\n';
                    para.append(l.data(), l.size());
                    if (para.size() > kMaxDocument) too_long("a paragraph");
                }
                continue;
            }
            if (l.find_first_not_of(" \t") == std::string_view::npos) continue;  // blank lines are not documents
            docs.push_back({std::string(l), (uint32_t)file, line});
        }
        return docs;
    }
};

// The shards of a set already under `prefix` (PREFIX_val_*.bin, PREFIX_train_*.bin); `suffix` ".partial"
// finds the files a killed run left behind instead.
inline std::vector<std::string> existing_shards(const std::string& prefix, const std::string& suffix = "") {
    std::vector<std::string> out;
    for (const char* kind : {"_val_", "_train_"}) {
        glob_t g;
        if (glob((prefix + kind + "*.bin" + suffix).c_str(), 0, nullptr, &g) == 0)
            for (size_t i = 0; i < g.gl_pathc; i++) out.push_back(g.gl_pathv[i]);
        globfree(&g);
    }
    return out;
}

inline std::string shard_path(const std::string& prefix, size_t index) {
    char num[32];
    snprintf(num, sizeof(num), "%06zu", index);
    return prefix + (index == 0 ? "_val_" : "_train_") + num + ".bin";
}

inline std::string human(double x) {
    char b[32];
    if (x >= 1e9) snprintf(b, sizeof(b), "%.2fB", x / 1e9);
    else if (x >= 1e6) snprintf(b, sizeof(b), "%.2fM", x / 1e6);
    else if (x >= 1e3) snprintf(b, sizeof(b), "%.1fk", x / 1e3);
    else snprintf(b, sizeof(b), "%.0f", x);
    return b;
}

// The options' own checks and every input's: it exists and is a file or a pipe. Returns the inputs' total size,
// for the percentage (0, unknown, when one is stdin).
inline uint64_t check_inputs(const PrepareOptions& o, uint64_t val_tokens) {
    if (o.inputs.empty()) throw std::runtime_error("no input files; pass text or .jsonl files (or - for stdin)");
    if (o.out_prefix.empty()) throw std::runtime_error("no output prefix; pass -o DIR/NAME");
    if (o.shard_tokens == 0 || o.shard_tokens > (uint64_t)INT32_MAX)
        throw std::runtime_error("--shard-tokens must be between 1 and 2147483647");
    if (val_tokens > (uint64_t)INT32_MAX) throw std::runtime_error("--val-tokens must be at most 2147483647");
    uint64_t total_bytes = 0;
    for (const std::string& p : o.inputs) {
        struct stat st;
        if (p == "-") return 0;
        if (stat(p.c_str(), &st) != 0)
            throw std::runtime_error("cannot open input " + p + ": " + strerror(errno) + "; check the path");
        if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode))
            throw std::runtime_error("input " + p + " is " + file_kind(st.st_mode) +
                                     ", not a file or a pipe; pass text or .jsonl files (or - for stdin)");
        total_bytes += (uint64_t)st.st_size;
    }
    return total_bytes;
}

// The output's checks: its directory is writable, no shard this run would replace or remove is one of its inputs
// (the one output rule, util/fs.h), and a set already there is replaced only with --overwrite. Removes the .partial
// files a killed run left; returns the set already under the prefix.
inline std::vector<std::string> check_output(const PrepareOptions& o) {
    const size_t slash = o.out_prefix.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : o.out_prefix.substr(0, slash);
    if (access(dir.c_str(), W_OK) != 0)
        throw std::runtime_error("output directory " + dir +
                                 " does not exist or is not writable; create it (mkdir -p " + dir + ") or fix -o");
    const std::vector<std::string> old_set = existing_shards(o.out_prefix),
                                   partial = existing_shards(o.out_prefix, ".partial");
    std::vector<ReadPath> inputs;
    for (const std::string& p : o.inputs)
        if (p != "-") inputs.push_back({p, "the input"});
    for (const std::vector<std::string>* replaced : {&old_set, &partial})
        for (const std::string& p : *replaced) check_output_path(p, "-o " + o.out_prefix + ":", inputs);
    if (!old_set.empty() && !o.overwrite)
        throw std::runtime_error(o.out_prefix + " already holds a shard set (" + std::to_string(old_set.size()) +
                                 " files, e.g. " + old_set.front() +
                                 "); pass --overwrite to replace it, or another -o");
    for (const std::string& p : partial) unlink(p.c_str());
    return old_set;
}

// The shards of the new set, filled in order: the validation shard (val_tokens) first, then training shards of
// --shard-tokens. A full shard is written (and fsync'ed, which can take seconds) as NAME.bin.partial on a background
// thread while the next one fills; at most one write is in flight, so at most two shards are in memory.
struct ShardWriter {
    const PrepareOptions& o;
    const uint64_t val_tokens;
    const uint64_t set_id = random_id();  // in every shard's header: the trainer refuses a mixture of two sets
    std::vector<std::string> paths;       // the shards begun, in order
    std::vector<uint16_t> shard;
    std::future<void> writing;
    ShardWriter(const PrepareOptions& opt, uint64_t val) : o(opt), val_tokens(val) {
        shard.reserve((size_t)std::min<uint64_t>(val_tokens, 1u << 26));
    }
    uint64_t capacity() const { return paths.empty() ? val_tokens : o.shard_tokens; }
    void flush() {
        if (writing.valid()) writing.get();  // rethrows a failed write
        const std::string path = shard_path(o.out_prefix, paths.size());
        writing = std::async(std::launch::async, [path, sync = o.sync, id = set_id, full = std::move(shard)] {
            write_shard(path + ".partial", full.data(), full.size(), sync, id);  // renamed to `path` when whole
        });
        paths.push_back(path);
        shard = std::vector<uint16_t>();
        shard.reserve((size_t)std::min<uint64_t>(o.shard_tokens, 1u << 26));
    }
    void push(const int* t, size_t n) {
        while (n > 0) {
            const size_t take = (size_t)std::min<uint64_t>(n, capacity() - shard.size());
            for (size_t k = 0; k < take; k++) shard.push_back((uint16_t)t[k]);
            t += take;
            n -= take;
            if (shard.size() == capacity()) flush();
        }
    }
    void finish() {
        if (!shard.empty()) flush();
        writing.get();
    }
    // After a failure: no partial file left behind, and the old set as it was.
    void abandon() {
        if (writing.valid()) try {
                writing.get();
            } catch (...) {
            }
        for (const std::string& p : paths) unlink((p + ".partial").c_str());
    }
    // The new set is complete: its shards are renamed over their names from the last to the second, the old set's
    // extra shards go, and the validation shard (index 0) comes last. So until that last rename the old set's
    // index 0 (or, into an empty prefix, no validation shard at all) stands beside the new shards: a kill anywhere
    // leaves two set ids under the prefix, which the trainer refuses, never a part of either set that looks whole.
    // (Renamed in index order, a kill could leave the new set's first shards over a smaller old set, all one id.)
    void commit(const std::vector<std::string>& old_set) const {
        auto rename_in = [](const std::string& p) {
            if (rename((p + ".partial").c_str(), p.c_str()) != 0)
                throw std::runtime_error("cannot rename " + p + ".partial to " + p + ": " + strerror(errno));
        };
        for (size_t i = paths.size(); i-- > 1;) rename_in(paths[i]);
        for (const std::string& p : old_set)
            if (std::find(paths.begin(), paths.end(), p) == paths.end()) unlink(p.c_str());
        rename_in(paths[0]);
    }
};

// Progress on stderr: mode 2 a bar redrawn every 0.2 s (a terminal), 1 a plain line every 10 s, 0 none.
struct Progress {
    using clock = std::chrono::steady_clock;
    int mode;
    uint64_t total_bytes;  // 0: unknown (no percentage)
    clock::time_point t0 = clock::now(), last = t0;
    void report(const PrepareStats& st, bool final) const {
        const double secs = std::chrono::duration<double>(clock::now() - t0).count();
        const double mbs = st.bytes / 1e6 / std::max(secs, 1e-9);
        char line[256];
        if (mode == 2) {
            const double frac = total_bytes ? std::min(1.0, (double)st.bytes / total_bytes) : 0.0;
            char bar[48] = "";
            if (total_bytes) {
                char fill[31];
                for (int k = 0; k < 30; k++) fill[k] = k < (int)(frac * 30) ? '#' : '.';
                fill[30] = 0;
                snprintf(bar, sizeof(bar), "[%s] %5.1f%% ", fill, 100 * frac);
            }
            snprintf(line, sizeof(line), "\r%s%7.1f MB/s %9s tokens %7.1f s", bar, mbs,
                     human((double)st.tokens).c_str(), secs);
            fputs(line, stderr);
            if (final) fputc('\n', stderr);
        } else {
            snprintf(line, sizeof(line), "prepare_shards: %.1f MB read, %.1f MB/s, %s tokens, %.1f s\n", st.bytes / 1e6,
                     mbs, human((double)st.tokens).c_str(), secs);
            fputs(line, stderr);
        }
        fflush(stderr);
    }
    void tick(const PrepareStats& st) {
        const auto now = clock::now();
        if (mode && std::chrono::duration<double>(now - last).count() >= (mode == 2 ? 0.2 : 10.0)) {
            report(st, false);
            last = now;
        }
    }
};

// A block's documents tokenized on every core, each preceded by EOT; errs[d] is the reason a JSONL line is malformed.
inline void tokenize_block(const PrepareOptions& o, const std::vector<Doc>& docs, const EncodeFn& encode, int eot,
                           int threads, std::vector<std::vector<int>>& toks, std::vector<std::string>& errs) {
    toks.assign(docs.size(), {});
    errs.assign(docs.size(), {});
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (size_t d = 0; d < docs.size(); d++) {
        toks[d].push_back(eot);
        if (format_of(o, o.inputs[docs[d].file]) == InputFormat::JSONL) {
            std::string text;
            if (!get_string_field(docs[d].text, o.field, text, errs[d])) continue;
            encode(text, toks[d]);
        } else {
            encode(docs[d].text, toks[d]);
        }
    }
}

}  // namespace prep

inline PrepareStats prepare_shards(const PrepareOptions& o, const EncodeFn& encode, int eot) {
    const uint64_t val_tokens = o.val_tokens ? o.val_tokens : o.shard_tokens;
    const uint64_t total_bytes = prep::check_inputs(o, val_tokens);
    const int threads = o.threads > 0 ? o.threads : omp_get_max_threads();
    const size_t block_bytes =
        o.block_bytes ? o.block_bytes : std::max<size_t>(32u << 20, (size_t)threads * (8u << 20));
    const std::vector<std::string> old_set = prep::check_output(o);
    prep::Progress progress{o.progress < 0 ? (isatty(fileno(stderr)) ? 2 : 1) : o.progress, total_bytes};
    PrepareStats st;
    prep::ShardWriter out(o, val_tokens);
    try {
        prep::Reader reader(o);
        std::vector<prep::Doc> docs = reader.block(block_bytes);
        std::vector<std::vector<int>> toks;
        std::vector<std::string> errs;
        while (!docs.empty()) {
            // Read the next block while this one is tokenized.
            std::future<std::vector<prep::Doc>> next =
                std::async(std::launch::async, [&] { return reader.block(block_bytes); });
            prep::tokenize_block(o, docs, encode, eot, threads, toks, errs);
            // Written strictly in input order: this is what makes the output independent of the thread count.
            for (size_t d = 0; d < docs.size(); d++) {
                if (!errs[d].empty()) {
                    const std::string where = o.inputs[docs[d].file] + ":" + std::to_string(docs[d].line);
                    if (!o.skip_errors) {
                        next.wait();
                        throw std::runtime_error(where + ": " + errs[d] +
                                                 "; fix or remove the line, or re-run with --on-error skip");
                    }
                    if (progress.mode == 2) fputc('\n', stderr);
                    fprintf(stderr, "%s: skipped a malformed JSON line (%s)\n", where.c_str(), errs[d].c_str());
                    st.skipped++;
                    continue;
                }
                for (int t : toks[d])
                    if (t < 0 || t > 65535)
                        throw std::runtime_error("token id " + std::to_string(t) +
                                                 " does not fit the uint16 shard format; "
                                                 "use a tokenizer with at most 65536 tokens");
                out.push(toks[d].data(), toks[d].size());
                st.documents++;
                st.tokens += toks[d].size();
            }
            docs = next.get();
            st.bytes = reader.bytes;
            progress.tick(st);
        }
        if (st.tokens == 0)
            throw std::runtime_error("the input holds no text (empty files or blank lines only); no shards written");
        out.finish();
        st.bytes = reader.bytes;
    } catch (...) {
        out.abandon();
        throw;
    }
    out.commit(old_set);
    st.shards = out.paths;
    if (progress.mode) progress.report(st, true);
    return st;
}

// ------------------------------------------------------------------------------------------------------
// Command line

inline uint64_t parse_count(const std::string& flag, const std::string& v) {
    char* end = nullptr;
    errno = 0;
    const double x = strtod(v.c_str(), &end);  // accepts 100000000 as well as 1e8
    if (errno || end == v.c_str() || *end || x < 1 || x > 9.2e18 || x != (double)(uint64_t)x)
        throw std::runtime_error(flag + " needs a positive whole number, got '" + v + "'");
    return (uint64_t)x;
}

struct PrepareCli {
    PrepareOptions o;
    std::string tokenizer_path;  // empty: default_tokenizer_path()
    std::string format = "auto", on_error = "stop";
};

// The command line (run/cli.h): flags, help, the INPUT files as positional arguments.
inline Command prepare_command(PrepareCli& c) {
    PrepareOptions& o = c.o;
    auto count = [](const char* name, const std::string& help, std::function<void(uint64_t)> set) {
        return make_flag(
            name, "N", help, [name, set](const std::string& v) { set(parse_count(name, v)); }, FlagKind::Int, 1,
            9.2e18);
    };
    Command cmd(
        "prepare_shards", "[options] -o PREFIX INPUT...",
        "Tokenizes INPUT files (GPT-2 BPE) into llm.c token shards PREFIX_val_000000.bin, "
        "PREFIX_train_000001.bin, ...",
        {path_flag("-o, --out", "PREFIX", "output path prefix, e.g. data/mydata/mydata (its directory must exist)",
                   o.out_prefix),
         choice_flag("--format", "F",
                     "auto (default: .jsonl/.json/.ndjson and - are jsonl, the rest text),\n"
                     "text (a file is one document), paragraphs (blank lines separate documents),\n"
                     "lines (each line is a document), jsonl (one JSON object per line)",
                     c.format, {"auto", "text", "paragraphs", "lines", "jsonl"})
             .then([&c] {
                 const std::string& f = c.format;
                 c.o.format = f == "auto"         ? InputFormat::AUTO
                              : f == "text"       ? InputFormat::TEXT
                              : f == "paragraphs" ? InputFormat::PARAGRAPHS
                              : f == "lines"      ? InputFormat::LINES
                                                  : InputFormat::JSONL;
             }),
         text_flag("--field", "NAME", "JSON field holding the text (default: {default})", o.field),
         count("--shard-tokens", "tokens per train shard (default: 100000000)",
               [&o](uint64_t n) { o.shard_tokens = n; }),
         count("--val-tokens", "tokens in the validation shard, the first one (default: --shard-tokens)",
               [&o](uint64_t n) { o.val_tokens = n; }),
         path_flag("--tokenizer", "PATH",
                   std::string("gpt2.tiktoken or a dir with encoder.json + vocab.bpe\n(") + kTokenizerHelp + ")",
                   c.tokenizer_path),
         count("--threads", "tokenizer threads (default: every core)",
               [&o](uint64_t n) { o.threads = (int)std::min<uint64_t>(n, 4096); }),
         choice_flag("--on-error", "skip|stop",
                     "on a malformed JSON line: report it and skip it, or stop "
                     "(default: stop, exit 1)",
                     c.on_error, {"skip", "stop"})
             .then([&c] { c.o.skip_errors = c.on_error == "skip"; }),
         switch_flag("--overwrite", "replace the shard set already under PREFIX (without it, that is an error)",
                     o.overwrite),
         switch_flag("--quiet", "no progress output", o.progress, 0)});
    cmd.epilog = "INPUT may be - for stdin (read as jsonl unless --format says otherwise).";
    cmd.max_positional = (size_t)-1;
    return cmd;
}

// argv[1..] -> options (the tests' entry); throws a one-line error for anything it does not understand.
inline PrepareCli parse_prepare_cli(const std::vector<std::string>& args) {
    PrepareCli c;
    Command cmd = prepare_command(c);
    std::vector<std::string> a = args;
    a.insert(a.begin(), "prepare_shards");
    std::vector<char*> argv;
    for (std::string& x : a) argv.push_back(&x[0]);
    c.o.inputs = parse_command(cmd, (int)argv.size(), argv.data()).positional;
    return c;
}

// The smallest --shard-tokens the command line takes: 65536 tokens, a 128 KB shard. Every shard is a file that is
// written, fsync'd and renamed, so below that the files multiply for nothing (--shard-tokens 1 wrote ~20k files
// a minute) and a shard holds less than one batch of the smaller presets (the loader skips such shards); the
// default is 100M. The pipeline itself (prepare_shards above) takes any size, which its tests use.
constexpr uint64_t kMinShardTokens = 65536;

// The checks of a parsed command line that are not about one flag's syntax.
inline void check_prepare_cli(const PrepareCli& c) {
    if (c.o.shard_tokens < kMinShardTokens)
        throw std::runtime_error("--shard-tokens " + std::to_string(c.o.shard_tokens) + " is below " +
                                 std::to_string(kMinShardTokens) + ": such small shards only multiply files; pass " +
                                 std::to_string(kMinShardTokens) + " or more (default 100000000)");
}

#ifndef PREPARE_SHARDS_NO_MAIN
#include "text/tokenizer.h"

int main(int argc, char** argv) {
    PrepareCli cli;
    Command cmd = prepare_command(cli);
    return command_main(cmd, argc, argv, "lower --threads or --shard-tokens", [&](const Parsed& p) {
        PrepareOptions& o = cli.o;
        o.inputs = p.positional;
        check_prepare_cli(cli);
        std::string tokenizer_path = cli.tokenizer_path;
        if (o.out_prefix.empty()) throw std::runtime_error("no output prefix; pass -o DIR/NAME (see --help)");
        if (o.inputs.empty())
            throw std::runtime_error("no input files; pass text or .jsonl files, or - for stdin (see --help)");
        if (tokenizer_path.empty()) tokenizer_path = default_tokenizer_path();
        const Tokenizer tok = Tokenizer::load(tokenizer_path);
        if (tok.vocab_size() > 65536)
            throw std::runtime_error("tokenizer " + tokenizer_path + " has " + std::to_string(tok.vocab_size()) +
                                     " tokens; uint16 shards hold at most 65536");
        const PrepareStats st = prepare_shards(
            o, [&](std::string_view text, std::vector<int>& out) { tok.encode(text, out); }, tok.eot());
        fprintf(stderr, "prepare_shards: %llu documents, %llu tokens (%.1f MB of input) -> %zu shards: %s",
                (unsigned long long)st.documents, (unsigned long long)st.tokens, st.bytes / 1e6, st.shards.size(),
                st.shards.front().c_str());
        if (st.shards.size() > 1) fprintf(stderr, " .. %s", st.shards.back().c_str());
        fputc('\n', stderr);
        if (st.skipped)
            fprintf(stderr, "prepare_shards: skipped %llu malformed lines\n", (unsigned long long)st.skipped);
        if (st.shards.size() == 1)
            fprintf(stderr,
                    "prepare_shards: warning: every token went into the validation shard; lower --val-tokens\n");
        return 0;
    });
}
#endif  // PREPARE_SHARDS_NO_MAIN
