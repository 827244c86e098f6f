// test_gdn_chunk_bwd.cpp: (being written: issue 53)
#include <catch2/catch.hpp>
