// text/tokenizer_path.h: where the tools find the GPT-2 ranks file without --tokenizer, apart from the tokenizer
// itself, so that a flag table can name the default without the whole of text/tokenizer.h.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <string>

// Where every tool looks for the ranks file without --tokenizer: $PRISM_TOKENIZER, else data/cache/gpt2.tiktoken
// under the current directory, else in the binary's checkout (its directory or the parent), so the tools work
// from any directory. None found: the relative path, and load()'s error says how to get the file.
constexpr const char* kTokenizerHelp = "default: $PRISM_TOKENIZER, else data/cache/gpt2.tiktoken of this checkout";
inline std::string default_tokenizer_path() {
    const char* env = getenv("PRISM_TOKENIZER");
    if (env && *env) return env;
    const std::string rel = "data/cache/gpt2.tiktoken";
    if (access(rel.c_str(), R_OK) == 0) return rel;
    char exe[4096];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        std::string dir(exe, (size_t)n);
        for (int up = 0; up < 2 && dir.rfind('/') != std::string::npos; up++) {
            dir = dir.substr(0, dir.rfind('/'));  // the binary's directory, then its parent
            if (access((dir + "/" + rel).c_str(), R_OK) == 0) return dir + "/" + rel;
        }
    }
    return rel;
}

// The ranks file a tool reads: the one given (--tokenizer), else the default above.
inline std::string tokenizer_path(const std::string& given) { return given.empty() ? default_tokenizer_path() : given; }
