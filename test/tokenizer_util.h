// test/tokenizer_util.h: GPT-2's tokenizer for the tests that need real token ids (test_tokenizer.cpp, test_eval.cpp,
// test_hf.cpp): loaded once from text/tokenizer_path.h's path ($PRISM_TOKENIZER, else data/cache/gpt2.tiktoken); a
// missing ranks file fails every test that needs it, naming the fix.
#pragma once

#include <unistd.h>

#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include "text/tokenizer.h"
#include "text/tokenizer_path.h"

inline const Tokenizer& gpt2() {
    static std::unique_ptr<Tokenizer> tok;
    if (!tok) {
        const std::string p = default_tokenizer_path();
        if (access(p.c_str(), R_OK) != 0)
            FAIL("GPT-2 ranks file " << p << " not found: run `bash data/get_tokenizer.sh` (or set PRISM_TOKENIZER)");
        tok = std::make_unique<Tokenizer>(Tokenizer::load(p));
    }
    return *tok;
}
