// comm_mpi_check.cpp: the executor's comm seam over MPI (make test-comm-mpi; needs mpicxx and mpirun). Each
// rank contributes rank + 1 to a float and a bf16 buffer; after the all-reduce every rank must hold the sum
// world * (world + 1) / 2. Exits non-zero on a wrong sum. Not part of `make test` (MPI start-up is slow).
#include "comm.cuh"

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    Comm comm = comm_init();
    float* x;
    bf16* y;
    cudaCheck(cudaMalloc(&x, 3 * sizeof(float)));
    cudaCheck(cudaMalloc(&y, 3 * sizeof(bf16)));
    for (int i = 0; i < 3; i++) {
        x[i] = (float)(comm.rank + 1) * (i + 1); // device memory is host memory under the executor
        y[i] = bf16((float)(comm.rank + 1));
    }
    comm_all_reduce_sum(comm, x, 3, 0);
    comm_all_reduce_sum(comm, y, 3, 0);
    float want = comm.world * (comm.world + 1) / 2.0f; // small integers: exact in fp32 and bf16
    int bad = 0;
    for (int i = 0; i < 3; i++) bad += x[i] != want * (i + 1) || (float)y[i] != want;
    printf("comm_mpi_check: rank %d of %d: %s\n", comm.rank, comm.world, bad ? "WRONG SUM" : "ok");
    comm_free(comm);
    MPI_Finalize();
    return bad ? 1 : 0;
}
