// The Catch2 (v2, single header) main for every test binary of the project: compiled once, linked into all.
//
// Also the project's test accounting: a listener that counts the test cases that passed, failed and were skipped
// (test/skip.h's PRISM_SKIP: a case that skipped a part and failed nothing) as Catch2 reports them and, when
// PRISM_TEST_RESULTS names a file, writes them there ("passed N", "failed N", "skipped N", then one
// "failed_case NAME" line per failed case and one "skipped_case NAME: WHY (needs NEED)" line per skip).
// test/summary.sh adds those files up into the closing line of `make test` and `.ci/run`, so the numbers printed
// are the runner's own, never a literal. A binary that crashes writes nothing, and summary.sh counts the missing
// file as a failure.
#define CATCH_CONFIG_MAIN
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "test/skip.h"

namespace {

// The skips of the running test case (record_skip), taken by the listener when the case ends.
std::vector<std::string>& current_skips() {
    static std::vector<std::string> s;
    return s;
}

struct ResultsListener : Catch::TestEventListenerBase {
    using TestEventListenerBase::TestEventListenerBase;
    std::vector<std::string> failed, skipped;
    size_t n_passed = 0, n_failed = 0, n_skipped = 0;

    void testCaseStarting(Catch::TestCaseInfo const&) override { current_skips().clear(); }
    void testCaseEnded(Catch::TestCaseStats const& s) override {
        std::vector<std::string>& skips = current_skips();
        if (s.totals.testCases.failed > 0) {
            n_failed++;
            failed.push_back(s.testInfo.name);
        } else if (!skips.empty()) {
            n_skipped++;
            for (const std::string& w : skips) skipped.push_back(s.testInfo.name + ": " + w);
        } else {
            n_passed += s.totals.testCases.passed;
        }
        skips.clear();
    }
    void testRunEnded(Catch::TestRunStats const&) override {
        const char* path = std::getenv("PRISM_TEST_RESULTS");
        if (!path || !*path) return;
        FILE* f = std::fopen(path, "w");
        if (!f) {
            std::fprintf(stderr, "catch_main: cannot write the results file %s\n", path);
            return;
        }
        std::fprintf(f, "passed %zu\nfailed %zu\nskipped %zu\n", n_passed, n_failed, n_skipped);
        for (const std::string& n : failed) std::fprintf(f, "failed_case %s\n", n.c_str());
        for (const std::string& n : skipped) std::fprintf(f, "skipped_case %s\n", n.c_str());
        std::fclose(f);
    }
};

}  // namespace

namespace prism_test {

bool required(const std::string& need) {
    const char* r = std::getenv("PRISM_REQUIRE");
    std::istringstream words(r ? r : "");
    for (std::string w; words >> w;)
        if (w == need) return true;
    return false;
}

void record_skip(const std::string& need, const std::string& why) {
    std::string line = why + " (needs " + need + ")";
    for (const std::string& s : current_skips())
        if (s == line) return;  // the same skip again, in another run of the case's sections
    current_skips().push_back(line);
}

}  // namespace prism_test

CATCH_REGISTER_LISTENER(ResultsListener)
