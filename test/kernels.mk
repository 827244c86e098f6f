# test/kernels.mk: the CUDA model's kernel tests and kernel files (included by the top Makefile).
# test/test_kernels.cpp is in the main test binary (every test/test_*.cpp is); here it also joins the
# sanitizer and native builds, and the kernel files join the nvcc -Werror compile check (test/executor.mk).
#   make test-kernels   only the kernel tests, on the CUDA-on-CPU executor

KERNEL_TEST_SRCS += test/test_kernels.cpp
NVCC_CHECK_CUH += reduce.cuh embedding.cuh layernorm.cuh residual.cuh rope.cuh swiglu.cuh attention.cuh \
                  classifier.cuh adamw.cuh gradnorm.cuh model.cuh

.PHONY: test-kernels
test-kernels: $(BUILD)/test_prism
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} ./$(BUILD)/test_prism "[kernels]"
