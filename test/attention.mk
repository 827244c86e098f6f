# test/attention.mk: the flash attention kernels' tests and benchmark (included by the top Makefile).
#   make test                   runs test/test_attention.cpp inside build/test_prism ("[attention]") and
#                               bench-attention-smoke; every attention kernel instance is in test-ptxas's no-spill
#                               check (test/kernels.mk: model.cuh's launchers instantiate them all)
#   make test-attention         only the attention tests, on the CUDA-on-CPU executor
#   make bench-attention        dev/bench_attention.cpp built by nvcc for NATIVE_ARCH and run (needs a GPU):
#                               forward and backward TFLOP/s at T 1024, 2048, 4096 per head_dim (ARGS="...")
#   make bench-attention-smoke  the same program on the executor: one tiny shape per instance, the same table
# test_attention.cpp also joins the sanitizer and native builds, attention.cuh the nvcc -Werror compile check.

KERNEL_TEST_SRCS += test/test_attention.cpp
NVCC_CHECK_CUH += attention.cuh attention_tiles.cuh test/attention_naive.cuh
TEST_TARGETS += bench-attention-smoke
TEST_BUILD += $(BUILD)/bench_attention_cpu

# Headers under test/ that the generic object rules do not list.
ATTENTION_TEST_DEPS := test/attention_naive.cuh test/kernel_test_util.h
$(foreach d,test asan tsan native,$(BUILD)/$(d)/test_attention.o $(BUILD)/$(d)/test_kernels.o): $(ATTENTION_TEST_DEPS)

.PHONY: test-attention bench-attention bench-attention-smoke
test-attention: $(BUILD)/test_prism
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} ./$(BUILD)/test_prism "[attention]"

# ---- dev/bench_attention.cpp ----------------------------------------------------------------------------------
$(BUILD)/bench_attention: dev/bench_attention.cpp attention.cuh cuda_common.cuh reduce.cuh util/mfu.h ref/init.h model_config.h
	@mkdir -p $(BUILD)
	$(NVCC) -std=c++17 -O3 -arch=$(NATIVE_ARCH) -I. -Werror all-warnings -x cu $< -o $@ -Xcompiler -fopenmp
bench-attention: $(BUILD)/bench_attention
	./$< $(ARGS)

$(BUILD)/bench_attention_cpu: dev/bench_attention.cpp $(EXECUTOR_DEPS) util/mfu.h ref/init.h model_config.h
	@mkdir -p $(BUILD)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS)
bench-attention-smoke: $(BUILD)/bench_attention_cpu
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} ./$<
