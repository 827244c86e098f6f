// test_gdn_chunk.cpp: (being written: issue 53)
#include <catch2/catch.hpp>
