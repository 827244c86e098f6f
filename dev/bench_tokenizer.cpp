// dev/bench_tokenizer.cpp: single-thread encode throughput of text/tokenizer.h in MB/s on a text file, and
// tiktoken's on the same bytes when python3 can import tiktoken (its encode_ordinary is single-threaded).
//
//   make bench-tokenizer BENCH_TEXT=file.txt
//   (or the binary alone: make build/bench_tokenizer CPU_ONLY=1 && build/bench_tokenizer file.txt
//    data/cache/gpt2.tiktoken; make test builds it, so that it keeps compiling)
// Best of 5 runs after one warm-up, as wall-clock MB/s and as MB per second of the thread's own CPU time (the
// fair number on a busy machine: both sides are measured the same way). With --threads N it also times N threads encoding the same text at once
// (aggregate MB/s), which exercises encode's thread safety.
#include "text/tokenizer.h"
#include "util/machine_load.h"

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <time.h>
#include <vector>

static double thread_cpu_seconds() {
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(int argc, char** argv) {
    const MachineLoad load;  // printed beside the figures: a busy machine's are not the machine's
    std::vector<std::string> pos;
    int threads = 0;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--threads" && i + 1 < argc) threads = atoi(argv[++i]);
        else pos.push_back(a);
    }
    if (pos.size() < 1 || pos.size() > 2) {
        fprintf(stderr, "usage: %s TEXT_FILE [RANKS_FILE=data/cache/gpt2.tiktoken] [--threads N]\n", argv[0]);
        return 2;
    }
    std::string ranks = pos.size() > 1 ? pos[1] : "data/cache/gpt2.tiktoken";
    FILE* f = fopen(pos[0].c_str(), "rb");
    if (!f) {
        fprintf(stderr, "bench_tokenizer: cannot open %s\n", pos[0].c_str());
        return 2;
    }
    std::string text;
    char buf[1 << 16];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, k);
    fclose(f);
    try {
        Tokenizer tok = Tokenizer::load(ranks);
        std::vector<int> out;
        tok.encode(text, out);  // warm-up
        size_t ntok = out.size();
        double best = 1e30, best_cpu = 1e30;
        for (int rep = 0; rep < 5; rep++) {
            out.clear();
            auto t0 = std::chrono::steady_clock::now();
            double c0 = thread_cpu_seconds();
            tok.encode(text, out);
            best_cpu = std::min(best_cpu, thread_cpu_seconds() - c0);
            best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        printf(
            "text/tokenizer.h  single thread: %7.2f MB/s wall, %7.2f MB/s cpu  (%.2f MB, %zu tokens, %.2f "
            "bytes/token)\n",
            text.size() / best / 1e6, text.size() / best_cpu / 1e6, text.size() / 1e6, ntok,
            double(text.size()) / ntok);
        if (threads > 0) {
            std::vector<std::thread> ts;
            std::vector<size_t> counts(threads);
            auto t0 = std::chrono::steady_clock::now();
            for (int t = 0; t < threads; t++)
                ts.emplace_back([&, t] {
                    std::vector<int> o;
                    tok.encode(text, o);
                    counts[t] = o.size();
                });
            for (auto& t : ts) t.join();
            double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            bool same = true;
            for (size_t c : counts) same = same && c == ntok;
            printf("text/tokenizer.h  %2d threads:    %7.2f MB/s aggregate%s\n", threads,
                   threads * text.size() / s / 1e6, same ? "" : "  (TOKEN COUNTS DIFFER BETWEEN THREADS)");
        }
    } catch (const std::exception& e) {
        fprintf(stderr, "%s\n", e.what());
        return 2;
    }
    fflush(stdout);
    // tiktoken on the same bytes (valid UTF-8 only: it takes str), built from the same ranks file.
    std::string cmd =
        "python3 - '" + pos[0] + "' '" + ranks +
        "' 2>/dev/null <<'PY'\n"
        "import sys, time\n"
        "import tiktoken, tiktoken.load, tiktoken_ext.openai_public as pub\n"
        "enc = tiktoken.Encoding(name='gpt2_local', pat_str=pub.r50k_pat_str, "
        "mergeable_ranks=tiktoken.load.load_tiktoken_bpe(sys.argv[2]), special_tokens={'<|endoftext|>': 50256})\n"
        "data = open(sys.argv[1], 'rb').read(); text = data.decode('utf-8', 'replace')\n"
        "enc.encode_ordinary(text); best = best_cpu = 1e30\n"
        "for _ in range(5):\n"
        "    t0 = time.perf_counter(); c0 = time.thread_time(); enc.encode_ordinary(text)\n"
        "    best_cpu = min(best_cpu, time.thread_time() - c0); best = min(best, time.perf_counter() - t0)\n"
        "print(f'tiktoken     single thread: {len(data) / best / 1e6:7.2f} MB/s wall, {len(data) / best_cpu / "
        "1e6:7.2f} MB/s cpu  (tiktoken {tiktoken.__version__}, encode_ordinary)')\n"
        "PY";
    if (system(cmd.c_str()) != 0) printf("tiktoken: not importable by python3 (pip install tiktoken to compare)\n");
    printf("%s\n", load.line().c_str());
    return 0;
}
