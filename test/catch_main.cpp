// The Catch2 (v2, single header) main for every test binary of the project: compiled once, linked into all.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
