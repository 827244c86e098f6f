# test/kernels.mk: the CUDA model's kernel tests and kernel files (included by the top Makefile).
# test/test_kernels.cpp is in the main test binary (every test/test_*.cpp is); here it also joins the
# sanitizer and native builds, and the kernel files join the nvcc -Werror compile check (test/executor.mk).
#   make test-kernels   only the kernel tests, on the CUDA-on-CPU executor
#   make test-ptxas     every kernel of the model, as compiled for sm_80 and sm_90 with ptxas -v in the GPU
#                       bundle (dev/gpu_bundle.mk): fails on any
#                       register spill, writes the register table to build/ptxas.txt (part of make test; skipped
#                       with a note without nvcc)
#   make cost-model     the per-kernel roofline cost model of a 124M step, uniform, Prism and X (part of make
#                       test: dev/bench_model --cost-model, no GPU needed)
#   make test-asan      also runs the whole-model tests (test/test_model_cuda.cpp) under AddressSanitizer: the
#                       engine's carved buffers, strided matmuls and staging slots (not in the race build: the
#                       CPU reference beside them needs OpenMP, which ThreadSanitizer cannot see into)
#   build/train_prism_executor   train_prism with the CUDA engine on the executor (g++, with MPI): the end-to-end tests
#                       drive the GPU code path's command line with it (--recompute gives the same losses)

KERNEL_TEST_SRCS += test/test_kernels.cpp
MODEL_CUH := vec.cuh reduce.cuh embedding.cuh layernorm.cuh rope.cuh swiglu.cuh attention.cuh \
             classifier.cuh adamw.cuh gradnorm.cuh staging.cuh model.cuh cuda_engine.cuh
NVCC_CHECK_CUH += $(MODEL_CUH)
# executor.mk expands NVCC_CHECK_CUH in test-nvcc-check's prerequisites when it is read, before this file is,
# so the model's files are named here again.
ifneq ($(NVCC),)
test-nvcc-check: $(patsubst %,$(BUILD)/nvcc_check/%.stamp,$(MODEL_CUH))
endif

.PHONY: test-kernels
test-kernels: $(BUILD)/test_prism
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} ./$(BUILD)/test_prism "[kernels]"

# ---- the GPU throughput benchmark (dev/bench_model.cpp) ------------------------------------------------------
#   make bench-model         build with nvcc for NATIVE_ARCH and run it (needs a GPU): tokens/s, MFU, memory,
#                            per-kernel timings for 124M uniform, Prism and X
#   make bench-model-smoke   the same code on the CUDA-on-CPU executor, `tiny` for one step (timings meaningless)
.PHONY: bench-model bench-model-smoke
$(BUILD)/bench_model: dev/bench_model.cpp $(PRODUCT_H) $(CUDA_H)
	@mkdir -p $(BUILD)
	$(NVCC) -std=c++17 -O3 -arch=$(NATIVE_ARCH) -I. -Werror all-warnings -x cu $< -o $@ -lcublasLt -Xcompiler -fopenmp
bench-model: $(BUILD)/bench_model
	./$< $(ARGS)
$(BUILD)/bench_model_cpu: dev/bench_model.cpp $(PRODUCT_H) $(CUDA_H)
	@mkdir -p $(BUILD)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS)
bench-model-smoke: $(BUILD)/bench_model_cpu
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} ./$< --models tiny,tiny:prism,tiny:x -b 1 -t 16 --steps 1 -V 512

.PHONY: cost-model
TEST_TARGETS += cost-model
TEST_BUILD += $(BUILD)/bench_model_cpu
cost-model: $(BUILD)/bench_model_cpu
	./$< --cost-model | tee $(BUILD)/cost_model.txt | tail -4

# ---- ptxas: registers and spills of every kernel ---------------------------------------------------------------
.PHONY: test-ptxas
TEST_CHECKS += test-ptxas
# The registers come from the GPU bundle's builds (dev/gpu_bundle.mk: sm_80 and sm_90, ptxas -v beside each
# object) of dev/bench_model.cpp, which holds every kernel the engine launches, and of test/test_kernels.cpp
# (the kernels the engine does not use, residual_forward and copy_columns): no second compile of them here.
GB_PTXAS_OBJS := $(BUILD)/gpu-bundle-obj/bench_model.o $(BUILD)/gpu-bundle-obj/test_kernels.o
ifneq ($(NVCC),)
$(BUILD)/ptxas.txt: $(GB_PTXAS_OBJS) test/ptxas_check.sh
	bash test/ptxas_check.sh $(GB_PTXAS_OBJS:=.ptxas.log) > $@.all || { cat $@.all; echo "test-ptxas: a kernel spills registers"; exit 1; }
	@awk '!seen[$$0]++' $@.all > $@.tmp && mv $@.tmp $@
test-ptxas: $(BUILD)/ptxas.txt
	@echo "test-ptxas: $$(wc -l < $<) kernel builds (sm_80, sm_90), no spills; registers in $<"
else
test-ptxas:
	@echo "test-ptxas: no nvcc found, kernels not checked for register spills"
endif

# ---- train_prism with the CUDA engine on the executor ------------------------------------------------------------
$(BUILD)/train_prism_executor: train_prism.cu $(PRODUCT_H) $(EXECUTOR_DEPS)
	@mkdir -p $(BUILD)
	$(CXX) $(CXXFLAGS) $(MPI_CFLAGS) -DPRISM_CUDA -DPRISM_EXECUTOR -x c++ $< -x none -o $@ $(LDLIBS) -lpcre2-8 $(MPI_LIBS)
TEST_BUILD += $(BUILD)/train_prism_executor

# ---- the whole model under AddressSanitizer (test-asan runs it too) -----------------------------------------------
.PHONY: test-asan-model
test-asan: test-asan-model
SAN_BUILD += $(BUILD)/test_model_asan
$(BUILD)/test_model_asan: $(BUILD)/asan/catch_main.o $(BUILD)/asan/test_model_cuda.o
	$(CXX) -fopenmp -fsanitize=address,undefined $^ -o $@
test-asan-model: $(BUILD)/test_model_asan
	@mkdir -p $(TEST_RESULTS); rm -f $(TEST_RESULTS)/asan_model.txt
	PRISM_TEST_RESULTS=$(TEST_RESULTS)/asan_model.txt ASAN_OPTIONS=detect_leaks=1 \
	    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 OMP_NUM_THREADS=2 ./$<
