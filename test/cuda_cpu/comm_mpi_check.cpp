// comm_mpi_check.cpp: the executor's comm seam over real MPI ranks (run by test/test_comm.cpp under mpirun
// with 2 and 3 ranks). Every rank fills a float and a bf16 buffer with values that depend on its rank and on
// the element, all-reduces them, and checks every element against the sum over ranks it computes itself: a
// seam that dropped a rank, reduced only the first element, averaged instead of summing, or left the buffer
// as it was fails here. Prints one line per rank and exits non-zero on any wrong element.
#include "comm.cuh"

namespace {
// Rank r's contribution to element i: small integers and halves, exact in fp32 and (for i < 8) in bf16.
float contribution(int r, int i) { return (float)((r + 1) * (i + 1)) + (r % 2 ? 0.5f : 0.0f); }
}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    Comm comm = comm_init();
    const int n = 37, nb = 8;
    float* x;
    bf16* y;
    cudaCheck(cudaMalloc(&x, n * sizeof(float)));
    cudaCheck(cudaMalloc(&y, nb * sizeof(bf16)));
    for (int i = 0; i < n; i++) x[i] = contribution(comm.rank, i);  // device memory is host memory here
    for (int i = 0; i < nb; i++) y[i] = bf16(contribution(comm.rank, i));
    comm_all_reduce_sum(comm, x, n, 0);
    comm_all_reduce_sum(comm, y, nb, 0);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        float want = 0;
        for (int r = 0; r < comm.world; r++) want += contribution(r, i);
        bad += x[i] != want;
        if (i < nb) bad += (float)y[i] != want;
    }
    printf("comm_mpi_check: rank %d of %d: %s\n", comm.rank, comm.world, bad ? "WRONG SUM" : "ok");
    comm_free(comm);
    MPI_Finalize();
    return bad ? 1 : 0;
}
