// The Catch2 (v2, single header) main for every test binary of the project: compiled once, linked into all.
//
// Also the project's test accounting: a listener that counts passed and failed test cases as Catch2 reports
// them and, when PRISM_TEST_RESULTS names a file, writes them there ("passed N", "failed N", then one
// "failed_case NAME" line per failed case). test/summary.sh adds those files up into the closing line of
// `make test` and `.ci/run`, so the numbers printed are the runner's own, never a literal. A binary that
// crashes writes nothing, and summary.sh counts the missing file as a failure.
#define CATCH_CONFIG_MAIN
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

struct ResultsListener : Catch::TestEventListenerBase {
    using TestEventListenerBase::TestEventListenerBase;
    std::vector<std::string> failed;

    void testCaseEnded(Catch::TestCaseStats const& s) override {
        if (s.totals.testCases.failed > 0) failed.push_back(s.testInfo.name);
    }
    void testRunEnded(Catch::TestRunStats const& s) override {
        const char* path = std::getenv("PRISM_TEST_RESULTS");
        if (!path || !*path) return;
        FILE* f = std::fopen(path, "w");
        if (!f) {
            std::fprintf(stderr, "catch_main: cannot write the results file %s\n", path);
            return;
        }
        std::fprintf(f, "passed %zu\nfailed %zu\n", s.totals.testCases.passed, s.totals.testCases.failed);
        for (const std::string& n : failed) std::fprintf(f, "failed_case %s\n", n.c_str());
        std::fclose(f);
    }
};

}  // namespace

CATCH_REGISTER_LISTENER(ResultsListener)
