// test/shard_test_util.h: what the data loader's and the shard tool's tests share: a temporary directory
// removed with its contents, a shard's tokens, the message a call throws (whole-file reads and writes: test_util.h).
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include <stdlib.h>

#include "test/test_util.h"

// A fresh directory under /tmp, removed with everything in it when the test ends.
struct TempDir {
    std::string path;
    TempDir() {
        char tmpl[] = "/tmp/prism_dataloader_XXXXXX";
        path = mkdtemp(tmpl);
    }
    ~TempDir() { std::filesystem::remove_all(path); }
    std::string operator/(const std::string& name) const { return path + "/" + name; }
};

inline std::vector<uint16_t> shard_tokens(const std::string& path) {
    const std::string b = read_file(path);
    std::vector<uint16_t> t((b.size() - 1024) / 2);
    memcpy(t.data(), b.data() + 1024, t.size() * 2);
    return t;
}

// The error message a callable throws ("" if none).
template <class F> inline std::string error_of(F&& f) {
    try {
        f();
    } catch (const std::runtime_error& e) {
        return e.what();
    }
    return "";
}
