// util/number_text.h: a double as the shortest text that reads back as the same double, for the run record and
// the flags it re-applies (a value written and read again is the value that was used).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

// The shortest of %.15g, %.16g, %.17g that reads back as x: 0.003 stays 0.003, and every double round-trips.
inline std::string exact_number(double x) {
    char b[40];
    for (int p = 15; p <= 17; p++) {
        snprintf(b, sizeof b, "%.*g", p, x);
        if (std::strtod(b, nullptr) == x) break;
    }
    return b;
}
