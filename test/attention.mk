# test/attention.mk: the flash attention kernels' tests, register check and benchmark (included by the top Makefile).
#   make test                   runs test/test_attention.cpp inside build/test_prism ("[attention]"), plus
#                               test-attention-ptxas: every attention kernel instance compiled for sm_80 and sm_90
#                               with -Xptxas -v, failing on any register spill or stack frame (skipped, with a
#                               note, without nvcc), and bench-attention-smoke
#   make test-attention         only the attention tests, on the CUDA-on-CPU executor
#   make bench-attention        dev/bench_attention.cpp built by nvcc for NATIVE_ARCH and run (needs a GPU):
#                               forward and backward TFLOP/s at T 1024, 2048, 4096 per head_dim (ARGS="...")
#   make bench-attention-smoke  the same program on the executor: one tiny shape per instance, the same table
# test_attention.cpp also joins the sanitizer and native builds, attention.cuh the nvcc -Werror compile check.

KERNEL_TEST_SRCS += test/test_attention.cpp
NVCC_CHECK_CUH += attention.cuh test/attention_naive.cuh
TEST_TARGETS += test-attention-ptxas bench-attention-smoke

# Headers under test/ that the generic object rules do not list.
ATTENTION_TEST_DEPS := test/attention_naive.cuh test/kernel_test_util.h
$(foreach d,test asan tsan native,$(BUILD)/$(d)/test_attention.o $(BUILD)/$(d)/test_kernels.o): $(ATTENTION_TEST_DEPS)

.PHONY: test-attention test-attention-ptxas bench-attention bench-attention-smoke
test-attention: $(BUILD)/test_prism
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} ./$(BUILD)/test_prism "[attention]"

# ---- no register spills: ptxas's report per instance, one compile per arch (parallel under make -j2) -----------
ATTENTION_PTXAS_ARCHS := 80 90
ATTENTION_PTXAS_LOGS := $(patsubst %,$(BUILD)/attention_ptxas/sm_%.log,$(ATTENTION_PTXAS_ARCHS))
$(BUILD)/attention_ptxas/sm_%.log: test/attention_ptxas.cu attention.cuh cuda_common.cuh reduce.cuh
	@mkdir -p $(dir $@)
	@echo "nvcc -Xptxas -v -arch=sm_$* test/attention_ptxas.cu"
	@$(NVCC) -std=c++17 -O3 -DPRISM_CUDA -I. -Werror all-warnings -Xptxas -v \
	    -gencode arch=compute_$*,code=sm_$* -c $< -o $(basename $@).o 2> $@.tmp || { cat $@.tmp; exit 1; }
	@mv $@.tmp $@

ifneq ($(NVCC),)
test-attention-ptxas: $(ATTENTION_PTXAS_LOGS)
	@bash test/attention_ptxas.sh $^
else
test-attention-ptxas:
	@echo "test-attention-ptxas: no nvcc found, attention kernels not checked for register spills"
endif

# ---- dev/bench_attention.cpp ----------------------------------------------------------------------------------
$(BUILD)/bench_attention: dev/bench_attention.cpp attention.cuh cuda_common.cuh reduce.cuh mfu.h ref_init.h schedule.h
	@mkdir -p $(BUILD)
	$(NVCC) -std=c++17 -O3 -arch=$(NATIVE_ARCH) -I. -Werror all-warnings -x cu $< -o $@ -Xcompiler -fopenmp
bench-attention: $(BUILD)/bench_attention
	./$< $(ARGS)

$(BUILD)/bench_attention_cpu: dev/bench_attention.cpp $(EXECUTOR_DEPS) mfu.h ref_init.h schedule.h
	@mkdir -p $(BUILD)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS)
bench-attention-smoke: $(BUILD)/bench_attention_cpu
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} ./$<
