// test_util.h: what every test that runs a binary or handles files shares: running a command and capturing its
// output and exit status, a whole file read (through util/fs.h's checked read) and written, a substring check.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include <catch2/catch.hpp>

#include "util/fs.h"

struct Result {
    int rc;           // exit status, -1 if the command did not exit normally
    std::string out;  // stdout and stderr together
};

inline Result sh(const std::string& cmd) {
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    REQUIRE(p);
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    int st = pclose(p);
    return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

inline bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

// The whole of a file, "" when there is none (util/fs.h's read: a FIFO, a device or a directory is an error, never a
// read that waits).
inline std::string read_file(const std::string& path) {
    return access(path.c_str(), F_OK) == 0 ? read_file_text(path, "file") : "";
}

// `bytes` as the whole of the file at path (a plain write: a test's fixture, not util/io.h's fsync'd one).
inline void write_file(const std::string& path, const std::string& bytes) {
    FILE* f = fopen(path.c_str(), "wb");
    REQUIRE(f);
    REQUIRE(fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
    REQUIRE(fclose(f) == 0);
}
