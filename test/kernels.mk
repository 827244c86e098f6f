# test/kernels.mk: the CUDA model's kernel tests and kernel files (included by the top Makefile).
# test/test_kernels.cpp is in the main test binary (every test/test_*.cpp is); here it also joins the
# sanitizer and native builds, and the kernel files join the nvcc -Werror compile check (test/executor.mk).
#   make test-kernels   only the kernel tests, on the CUDA-on-CPU executor

KERNEL_TEST_SRCS += test/test_kernels.cpp
MODEL_CUH := reduce.cuh embedding.cuh layernorm.cuh residual.cuh rope.cuh swiglu.cuh attention.cuh classifier.cuh \
             adamw.cuh gradnorm.cuh model.cuh
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
$(BUILD)/bench_model: dev/bench_model.cpp $(wildcard *.h *.cuh)
	@mkdir -p $(BUILD)
	$(NVCC) -std=c++17 -O3 -arch=$(NATIVE_ARCH) -I. -Werror all-warnings -x cu $< -o $@ -lcublasLt -Xcompiler -fopenmp
bench-model: $(BUILD)/bench_model
	./$< $(ARGS)
$(BUILD)/bench_model_cpu: dev/bench_model.cpp $(wildcard *.h *.cuh)
	@mkdir -p $(BUILD)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS)
bench-model-smoke: $(BUILD)/bench_model_cpu
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} ./$< --models tiny,tiny:prism,tiny:x -b 1 -t 16 --steps 1 -V 512
