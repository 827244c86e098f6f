// test/skip.h: PRISM_SKIP(need, why), for a check that cannot run on this machine (a library, a browser, a data
// file it needs is missing). A skip is never a pass:
//   - it prints "SKIPPED: <need>: <why>" (a Catch2 WARN, shown whatever the reporter's verbosity);
//   - catch_main.cpp's listener counts the test case as skipped, not passed, and writes it to the results file
//     ("skipped_case NAME: WHY (needs NEED)"), so test/summary.sh's closing line says "K skipped" and names each;
//   - when `need` is one of the words of $PRISM_REQUIRE (.ci/run lists everything its environment installs), the
//     skip fails the test case instead: an environment that should run the check did not.
// `need` is one word naming what is missing (scipy, tensorboard, wandb, chromium, ...); `why` is streamed, like
// INFO's message. The caller then returns, or leaves out the part that cannot run; a test case may skip more
// than one part (each is listed; the case counts once).
#pragma once

#include <catch2/catch.hpp>

#include <sstream>
#include <string>

namespace prism_test {
// Whether `need` is one of the words of $PRISM_REQUIRE.
bool required(const std::string& need);
// Records a skip of the running test case for the listener (defined in test/catch_main.cpp).
void record_skip(const std::string& need, const std::string& why);
}  // namespace prism_test

#define PRISM_SKIP(need, why)                                                                                          \
    do {                                                                                                               \
        std::ostringstream prism_skip_why_;                                                                            \
        prism_skip_why_ << why;                                                                                        \
        if (prism_test::required(need))                                                                                \
            FAIL("SKIPPED, but PRISM_REQUIRE says this environment has " << (need) << ": " << prism_skip_why_.str());  \
        prism_test::record_skip(need, prism_skip_why_.str());                                                          \
        WARN("SKIPPED: " << (need) << ": " << prism_skip_why_.str());                                                  \
    } while (0)
