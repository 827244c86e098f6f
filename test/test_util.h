// test_util.h: what the end-to-end tests share: running a command and capturing its output and exit status.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

#include <catch2/catch.hpp>

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
