# test/executor.mk: the CUDA-on-CPU executor's targets (included by the top Makefile).
#   make test                  runs test/test_executor*.cpp inside build/test_prism (test-unit), plus
#                              test-nvcc-check: every kernel .cuh compiled by nvcc (front end, compute_80 and
#                              compute_90) with warnings as errors (skipped, with a note, when there is no nvcc)
#   make test-executor         only the executor's and the seams' tests, on the executor
#   make test-asan             kernel tests under AddressSanitizer + UBSan (fiber-aware): must be clean
#   make test-race             kernel tests under ThreadSanitizer (fiber API): must be clean, and the planted
#                              missing-__syncthreads race must be reported
#   make test-executor-native  the same kernel tests built by nvcc and run on a real GPU (needs one)
#   make test-comm-mpi         only the MPI tests (the comm seam over 2 and 3 ranks); part of make test
# Kernel tests elsewhere join the sanitizer and native builds with KERNEL_TEST_SRCS += test/test_<name>.cpp, and
# their kernel files join the nvcc check with NVCC_CHECK_CUH += <name>.cuh.

KERNEL_TEST_SRCS += test/test_executor.cpp test/test_executor_seams.cpp
NVCC_CHECK_CUH += cuda_common.cuh matmul.cuh comm.cuh test/executor_kernels.cuh
EXECUTOR_DEPS := $(CUDA_H) test/executor_kernels.cuh

NVCC ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
NATIVE_ARCH ?= sm_90
SAN_OPT = -O1
SAN_CXXFLAGS = -std=c++17 $(SAN_OPT) -g -fno-omit-frame-pointer -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas -I.

# Catch2's main is big and needs no checking: compile it fast.
$(BUILD)/asan/catch_main.o $(BUILD)/tsan/catch_main.o: SAN_OPT = -O0

# Any test object may include kernel headers: rebuild when they change.
$(TEST_OBJS): $(EXECUTOR_DEPS)

.PHONY: test-executor test-nvcc-check test-asan test-race test-executor-native
TEST_CHECKS += test-nvcc-check

test-executor: $(BUILD)/test_prism
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} ./$(BUILD)/test_prism "[executor]"

# ---- nvcc compile-only check ------------------------------------------------------------------------------
# Each kernel file alone, through nvcc's front end for compute_80 and compute_90 (PTX, no SASS: the machine code
# and its registers are test-ptxas's, and the binaries'), warnings as errors.
$(BUILD)/nvcc_check/%.stamp: % $(EXECUTOR_DEPS)
	@mkdir -p $(dir $@)
	@printf '#include "%s"\n' $< > $(basename $@).cu
	$(NVCC) -std=c++17 -I. -Werror all-warnings -gencode arch=compute_80,code=compute_80 \
	    -gencode arch=compute_90,code=compute_90 -c $(basename $@).cu -o $(basename $@).o
	@touch $@

ifneq ($(NVCC),)
test-nvcc-check: $(patsubst %,$(BUILD)/nvcc_check/%.stamp,$(NVCC_CHECK_CUH))
else
test-nvcc-check:
	@echo "test-nvcc-check: no nvcc found, kernel files not compile-checked for the GPU"
endif

# ---- sanitizer builds ---------------------------------------------------------------------------------------
.SECONDEXPANSION:
$(BUILD)/asan/%.o: test/%.cpp $(EXECUTOR_DEPS) $(PRODUCT_H)
	@mkdir -p $(dir $@)
	$(CXX) $(SAN_CXXFLAGS) -fopenmp -fsanitize=address,undefined -c $< -o $@
$(BUILD)/test_kernels_asan: $(BUILD)/asan/catch_main.o $$(patsubst test/%.cpp,$(BUILD)/asan/%.o,$$(KERNEL_TEST_SRCS))
	$(CXX) -fopenmp -fsanitize=address,undefined $^ -o $@

# No OpenMP in the race build: libgomp is not instrumented and its barriers would read as races. The [fork]
# tests (abort messages) are left out of it: TSan forgets the fibers in a forked child.
$(BUILD)/tsan/%.o: test/%.cpp $(EXECUTOR_DEPS) $(PRODUCT_H)
	@mkdir -p $(dir $@)
	$(CXX) $(SAN_CXXFLAGS) -fsanitize=thread -c $< -o $@
$(BUILD)/test_kernels_tsan: $(BUILD)/tsan/catch_main.o $$(patsubst test/%.cpp,$(BUILD)/tsan/%.o,$$(KERNEL_TEST_SRCS))
	$(CXX) -fsanitize=thread $^ -o $@

SAN_BUILD += $(BUILD)/test_kernels_asan $(BUILD)/test_kernels_tsan
test-asan: $(BUILD)/test_kernels_asan
	@mkdir -p $(TEST_RESULTS); rm -f $(TEST_RESULTS)/asan.txt
	PRISM_TEST_RESULTS=$(TEST_RESULTS)/asan.txt ASAN_OPTIONS=detect_leaks=1 \
	    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 OMP_NUM_THREADS=2 ./$<

test-race: $(BUILD)/test_kernels_tsan
	@mkdir -p $(TEST_RESULTS); rm -f $(TEST_RESULTS)/race.txt
	PRISM_TEST_RESULTS=$(TEST_RESULTS)/race.txt TSAN_OPTIONS=halt_on_error=1 ./$< "~[planted_race]~[fork]"
	@TSAN_OPTIONS=halt_on_error=0 ./$< "[planted_race]" > $(BUILD)/planted_race.log 2>&1; \
	if grep -q "ThreadSanitizer: data race" $(BUILD)/planted_race.log && grep -q missing_sync_kernel $(BUILD)/planted_race.log; then \
	    echo "test-race: the planted missing __syncthreads race was reported, as it must be"; \
	else \
	    cat $(BUILD)/planted_race.log; echo "test-race: FAILED: the planted race was not reported"; exit 1; \
	fi

# ---- the same tests on a real GPU -----------------------------------------------------------------------------
$(BUILD)/native/%.o: test/%.cpp $(EXECUTOR_DEPS)
	@mkdir -p $(dir $@)
	$(NVCC) -std=c++17 -O2 -arch=$(NATIVE_ARCH) -I. -x cu -c $< -o $@
$(BUILD)/test_kernels_native: $(BUILD)/native/catch_main.o $$(patsubst test/%.cpp,$(BUILD)/native/%.o,$$(KERNEL_TEST_SRCS))
	$(NVCC) -arch=$(NATIVE_ARCH) $^ -o $@ -lcublasLt

test-executor-native: $(BUILD)/test_kernels_native
	./$<

# ---- the comm seam over MPI --------------------------------------------------------------------------------
# build/comm_mpi_check is run under mpirun by test/test_comm.cpp (in make test), with 2 and 3 ranks.
$(BUILD)/comm_mpi_check: test/comm_mpi_check.cpp comm.cuh dist/process_group.h dist/watchdog.h $(EXECUTOR_DEPS)
	@mkdir -p $(BUILD)
	mpicxx -std=c++17 -O1 -Wall -Wextra -DPRISM_MPI -DOMPI_SKIP_MPICXX -I. $< -o $@
TEST_BUILD += $(BUILD)/comm_mpi_check
.PHONY: test-comm-mpi
test-comm-mpi: $(BUILD)/test_prism $(BUILD)/comm_mpi_check
	OMP_NUM_THREADS=1 ./$(BUILD)/test_prism "[mpi]"
