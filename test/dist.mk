# test/dist.mk: data parallelism's test targets (included by the top Makefile).
#   make test-dist   only the data-parallel tests (test/test_dist.cpp: train_prism under mpirun, 1 to 3 ranks, the
#                    CPU engine and the CUDA engine on the executor)
# test_dist.cpp launches a build of train_prism without MPI as several ranks, which must refuse: it is built
# here, unoptimised (it only has to reach the check in dist/process_group.h).

$(BUILD)/train_prism_nompi: train_prism.cu $(PRODUCT_H)
	@mkdir -p $(BUILD)
	$(CXX) -std=c++17 -O0 -fopenmp -I. -x c++ $< -x none -o $@ -fopenmp -lm -lpcre2-8

TEST_BUILD += $(BUILD)/train_prism_nompi

.PHONY: test-dist
test-dist: $(BUILD)/test_prism train_prism $(BUILD)/train_prism_nompi
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} ./$(BUILD)/test_prism "[dist]"

# build/dp_engine_check: the CUDA engine's data parallelism on the executor, run by test_dist.cpp under mpirun with
# 2 and 3 ranks (comm.cuh's collectives over MPI on the executor's host memory).
$(BUILD)/dp_engine_check: test/dp_engine_check.cpp $(PRODUCT_H) $(EXECUTOR_DEPS)
	@mkdir -p $(BUILD)
	mpicxx -std=c++17 -O1 -fopenmp -Wall -Wextra -Wno-unused-parameter -DPRISM_MPI -DOMPI_SKIP_MPICXX -I. $< -o $@
TEST_BUILD += $(BUILD)/dp_engine_check
test-dist: $(BUILD)/dp_engine_check $(BUILD)/train_prism_executor
