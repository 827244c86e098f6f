# Prism: one entry point. `make` builds the tools, `make test` builds and runs every test.
# CPU-only by default; the CUDA engine is added when nvcc is present (see the CUDA section).

CXX      ?= g++
OPT      ?= -O3 -march=native
CXXFLAGS ?= -std=c++17 $(OPT) -fopenmp -Wall -Wextra -Wno-unused-parameter -I.
LDLIBS   ?= -fopenmp -lm
BUILD    := build
SHELL    := /bin/bash

.PHONY: all test clean run
all: train_prism

# The main job on the built-in default: prepare the default corpus if missing, then train tiny on it
# (on the GPU when one is present, else on the CPU). Extra flags: make run ARGS="--steps 100".
run: train_prism
	bash data/get_default.sh
	./train_prism $(ARGS)

# ---- the binaries: CUDA engine when nvcc exists, CPU-only otherwise ------------------------------------
# With nvcc, train_prism and eval_zeroshot are compiled as CUDA (-DPRISM_CUDA) for GPU_ARCH (sm_80 and sm_90 by
# default) and pick the GPU at run time when one is present, the CPU reference otherwise. CPU_ONLY=1 forces the
# g++ build. Warnings are errors in the nvcc build.
NVCC     ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
GPU_ARCH ?= 80 90
CUDA_LIB ?= $(abspath $(dir $(NVCC))../lib64)
NVCCFLAGS = -std=c++17 -O3 -DPRISM_CUDA -I. $(foreach a,$(GPU_ARCH),-gencode arch=compute_$(a),code=sm_$(a)) \
            -Werror all-warnings -Xcompiler "-fopenmp -march=native -Wall -Wextra -Wno-unused-parameter"
NVCC_LDLIBS = -lcublasLt -Xlinker -rpath,$(CUDA_LIB) -Xcompiler -fopenmp -lpcre2-8
BIN_NVCC := $(if $(CPU_ONLY),,$(NVCC))

ifeq ($(BIN_NVCC),)
BIN_DEPS := $(wildcard *.h)
build_bin = $(CXX) $(CXXFLAGS) -x c++ $(1) -x none -o $(2) $(LDLIBS) -lpcre2-8
else
BIN_DEPS := $(wildcard *.h *.cuh)
build_bin = $(BIN_NVCC) $(NVCCFLAGS) -x cu $(1) -o $(2) $(NVCC_LDLIBS)
endif

train_prism: train_prism.cu $(BIN_DEPS)
	$(call build_bin,$<,$@)

# ---- tests -------------------------------------------------------------------------------------------
# Every test/test_*.cpp is one Catch2 translation unit linked into build/test_prism. Each file's own
# extra libraries go in TEST_LDLIBS (added by the fragments included below).
TEST_SRCS := $(wildcard test/test_*.cpp)
TEST_OBJS := $(patsubst test/%.cpp,$(BUILD)/test/%.o,$(TEST_SRCS))
TEST_LDLIBS :=

$(BUILD)/test/%.o: test/%.cpp $(wildcard *.h) $(wildcard test/*.h)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -c $< -o $@

$(BUILD)/test_prism: $(BUILD)/test/catch_main.o $(TEST_OBJS)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS) $(TEST_LDLIBS)

TEST_TARGETS := test-unit
# test_train.cpp drives the train_prism binary end to end, so the binary is built first.
test-unit: $(BUILD)/test_prism train_prism
	@set -o pipefail; OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} ./$(BUILD)/test_prism 2>&1 | tee $(BUILD)/test_unit.log

-include test/*.mk

# Ends with the plain "N passed, N failed" line (Catch2's own summary counts assertions, not test cases).
test: $(TEST_TARGETS)
	@n=$$(grep -o 'in [0-9]* test cases' $(BUILD)/test_unit.log | grep -o '[0-9]*'); \
	 echo "test: $${n:-0} passed, 0 failed"

clean:
	rm -rf $(BUILD) train_prism
