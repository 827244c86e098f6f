// comm_mpi_check.cpp: the executor's comm seam over real MPI ranks (run by test/test_comm.cpp under mpirun with
// 2 and 3 ranks). Every rank fills buffers with values that depend on its rank and on the element, runs each
// collective, and checks every element against what it computes itself: all-reduce of fp32, double and bf16;
// reduce to every root in turn (the sum lands on the root; nothing is promised elsewhere); in-place all-gather of
// fp32 and bf16 chunks. A seam that dropped a rank, reduced only the first element, averaged instead of summing,
// reduced to the wrong root, gathered into the wrong place or left the buffer as it was fails here. Prints one
// line per rank and exits non-zero on any wrong element.
#include "comm.cuh"

namespace {
// Rank r's contribution to element i: small integers and halves, exact in fp32 and (for i < 8) in bf16.
float contribution(int r, int i) { return (float)((r + 1) * (i + 1)) + (r % 2 ? 0.5f : 0.0f); }
float want_sum(int world, int i) {
    float s = 0;
    for (int r = 0; r < world; r++) s += contribution(r, i);
    return s;
}
template <class T> T* device(size_t n) {
    T* p;
    cudaCheck(cudaMalloc(&p, n * sizeof(T)));
    return p;
}
}  // namespace

int main(int argc, char** argv) {
    Dist dist;
    dist.start(&argc, &argv, "comm_mpi_check");
    Comm comm = comm_init(dist);
    const int n = 37, nb = 8, R = comm.rank, W = comm.world;
    float* x = device<float>(n);
    double* xd = device<double>(n);
    bf16* y = device<bf16>(nb);
    for (int i = 0; i < n; i++) x[i] = contribution(R, i), xd[i] = contribution(R, i);  // device memory is host memory
    for (int i = 0; i < nb; i++) y[i] = bf16(contribution(R, i));
    comm_all_reduce_sum(comm, x, n, 0);
    comm_all_reduce_sum(comm, xd, n, 0);
    comm_all_reduce_sum(comm, y, nb, 0);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        bad += x[i] != want_sum(W, i) || xd[i] != (double)want_sum(W, i);
        if (i < nb) bad += (float)y[i] != want_sum(W, i);
    }
    // reduce: each root in turn receives the sum of elements [root, root + 5) in place
    for (int root = 0; root < W; root++) {
        for (int i = 0; i < n; i++) x[i] = contribution(R, i);
        comm_group_start(comm);
        comm_reduce_sum(comm, x + root, 5, root, 0);
        comm_group_end(comm);
        if (R == root)
            for (int i = root; i < root + 5; i++) bad += x[i] != want_sum(W, i);
        for (int i = 0; i < root; i++) bad += x[i] != contribution(R, i);  // outside the range: untouched
    }
    // all-gather in place: rank r owns [r c, (r + 1) c)
    const int c = 3;
    float* g = device<float>((size_t)W * c);
    bf16* gb = device<bf16>((size_t)W * c);
    for (int i = 0; i < W * c; i++) g[i] = i / c == R ? contribution(R, i) : -1.0f, gb[i] = bf16(g[i]);
    comm_all_gather(comm, g, c, 0);
    comm_all_gather(comm, gb, c, 0);
    for (int i = 0; i < W * c; i++)
        bad += g[i] != contribution(i / c, i) || (float)gb[i] != (float)bf16(contribution(i / c, i));
    printf("comm_mpi_check: rank %d of %d: %s\n", R, W, bad ? "WRONG RESULT" : "ok");
    comm_free(comm);
    dist.finish();
    return bad ? 1 : 0;
}
