// test_comm.cpp: the collectives seam (comm.cuh: all-reduce, reduce, all-gather) across real processes:
// build/comm_mpi_check run under mpirun with 2 and 3 ranks (3: an odd count, so nothing may assume pairs). The
// Makefile builds the program before test_prism runs; OpenMPI comes from setup.sh. mpirun gets --oversubscribe
// (CI has 2 cores) and --allow-run-as-root (CI runs as root); OMP_NUM_THREADS=1 because idle OpenMP teams on an
// oversubscribed machine spin and starve the other ranks.
#include <catch2/catch.hpp>

#include <string>

#include "test/test_util.h"

namespace {
int count_of(const std::string& s, const std::string& what) {
    int n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) n++;
    return n;
}
}  // namespace

TEST_CASE("all-reduce, reduce and all-gather over 2 and 3 MPI ranks give every rank what it should hold", "[mpi]") {
    for (int ranks : {2, 3}) {
        Result r = sh("OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root -np " + std::to_string(ranks) +
                      " build/comm_mpi_check");
        INFO(r.out);
        CHECK(r.rc == 0);
        CHECK(count_of(r.out, "of " + std::to_string(ranks) + ": ok") == ranks);
        CHECK(count_of(r.out, "WRONG RESULT") == 0);
    }
}
