# Prism: one entry point. `make` builds the tools, `make test` builds and runs every test.
# CPU-only by default; the CUDA engine is added when nvcc is present (see the CUDA section).

CXX      ?= g++
OPT      ?= -O3 -march=native
CXXFLAGS ?= -std=c++17 $(OPT) -fopenmp -Wall -Wextra -Wno-unused-parameter -I.
LDLIBS   ?= -fopenmp -lm
BUILD    := build
SHELL    := /bin/bash

.PHONY: all test clean run test-unit
all:

# The two commands of the README. Each first does whatever set-up is missing (setup.sh: the Debian packages,
# the GPT-2 tokenizer file, the default corpus; a few tenths of a second when all is there), then builds.
# `make run` trains on the built-in default (tiny on the default corpus; the GPU when one is present, else the
# CPU). Extra flags: make run ARGS="--steps 100".
.PHONY: setup
setup:
	@bash setup.sh

run:
	@bash setup.sh
	@$(MAKE) --no-print-directory train_prism
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

# ---- MPI and NCCL: found, not assumed ------------------------------------------------------------------
# MPI (data-parallel ranks under mpirun / srun, CPU and GPU): OpenMPI's wrapper `mpicxx --showme`, else
# pkg-config's `ompi`; defines PRISM_MPI. NCCL (the GPUs' collectives, with nvcc only): nccl.h and libnccl in
# the CUDA toolkit's directories or the system's (Debian: libnccl-dev); defines PRISM_NCCL. NO_MPI=1 and
# NO_NCCL=1 build without them. A build without MPI refuses to run as several ranks (dist/process_group.h).
ifeq ($(NO_MPI),)
MPICXX ?= $(shell command -v mpicxx 2>/dev/null)
MPI_CFLAGS := $(if $(MPICXX),$(shell $(MPICXX) --showme:compile 2>/dev/null))
MPI_LIBS := $(if $(MPICXX),$(filter-out -lmpi_cxx,$(shell $(MPICXX) --showme:link 2>/dev/null)))
MPI_NAME := $(if $(MPI_LIBS),$(shell $(MPICXX) --showme:version 2>/dev/null | cut -d' ' -f2-4))
ifeq ($(strip $(MPI_LIBS)),)
MPI_CFLAGS := $(shell pkg-config --cflags ompi 2>/dev/null)
MPI_LIBS := $(shell pkg-config --libs ompi 2>/dev/null)
MPI_NAME := $(if $(MPI_LIBS),Open MPI $(shell pkg-config --modversion ompi 2>/dev/null))
endif
endif
ifneq ($(strip $(MPI_LIBS)),)
MPI_CFLAGS += -DPRISM_MPI -DOMPI_SKIP_MPICXX
endif
CUDA_HOME ?= $(if $(NVCC),$(abspath $(dir $(NVCC))..))
NCCL_H := $(if $(NO_NCCL)$(if $(BIN_NVCC),,x),,$(firstword $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h /usr/local/include/nccl.h)))
NCCL_LIBDIR := $(if $(NCCL_H),$(patsubst %/,%,$(dir $(firstword $(wildcard $(CUDA_LIB)/libnccl.so \
               /usr/lib/x86_64-linux-gnu/libnccl.so /usr/lib/aarch64-linux-gnu/libnccl.so /usr/local/lib/libnccl.so)))))
NCCL_VERSION := $(if $(NCCL_LIBDIR),$(shell sed -n 's/^\#define NCCL_\(MAJOR\|MINOR\|PATCH\) *\([0-9]*\).*/\2/p' $(NCCL_H) | paste -sd.))
NCCL_FLAGS := $(if $(NCCL_LIBDIR),-DPRISM_NCCL -I$(dir $(NCCL_H)) -L$(NCCL_LIBDIR) -lnccl -Xlinker -rpath -Xlinker $(NCCL_LIBDIR))
# nvcc takes -I -D -L -l itself; anything else in MPI's flags (-pthread, -Wl,...) goes to the host compiler.
nvcc_host = $(foreach f,$(1),$(if $(filter -I% -D% -L% -l%,$(f)),$(f),-Xcompiler $(f)))

# One line saying what was found (once per make, not for clean).
ifeq ($(MAKELEVEL)$(filter clean,$(MAKECMDGOALS)),0)
$(info make: $(if $(BIN_NVCC),nvcc $(shell $(NVCC) --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\),.*/\1/p') for $(GPU_ARCH:%=sm_%),no nvcc$(if $(CPU_ONLY), (CPU_ONLY)): CPU only); \
$(if $(strip $(MPI_LIBS)),MPI: $(MPI_NAME),no MPI$(if $(NO_MPI), (NO_MPI), install libopenmpi-dev: bash setup.sh)); \
$(if $(BIN_NVCC),$(if $(NCCL_FLAGS),NCCL $(NCCL_VERSION),no NCCL (one GPU per job; libnccl-dev or the CUDA toolkit's NCCL for more)),no NCCL (CPU build)))
endif

# ---- the product binaries: `make` builds them all ------------------------------------------------------
# Headers by folder (see the README's layout): the root is the training step, each folder one side concern.
PRODUCT_H := $(wildcard *.h ref/*.h run/*.h dist/*.h text/*.h eval/*.h inspect/*.h util/*.h hf/*.h studies/*.h)
CUDA_H    := $(wildcard *.cuh inspect/*.cuh cuda_cpu/*.h)
ifeq ($(BIN_NVCC),)
BIN_DEPS := $(PRODUCT_H)
build_bin = $(CXX) $(CXXFLAGS) $(MPI_CFLAGS) -x c++ $(1) -x none -o $(2) $(LDLIBS) -lpcre2-8 $(MPI_LIBS)
else
BIN_DEPS := $(PRODUCT_H) $(CUDA_H)
build_bin = $(BIN_NVCC) $(NVCCFLAGS) $(call nvcc_host,$(MPI_CFLAGS)) -x cu $(1) -o $(2) $(NVCC_LDLIBS) \
            $(call nvcc_host,$(MPI_LIBS)) $(NCCL_FLAGS)
endif

# The trainer, the evaluator and generate run on a GPU when there is one (nvcc builds them when present).
train_prism: train_prism.cu $(BIN_DEPS)
	$(call build_bin,$<,$@)
eval_zeroshot: eval_zeroshot.cu $(BIN_DEPS)
	$(call build_bin,$<,$@)
generate: inspect/generate.cu $(BIN_DEPS)
	$(call build_bin,$<,$@)

# analyze runs on the fp32 CPU reference and report reads logs: plain C++ on every machine.
analyze: inspect/analyze.cpp $(PRODUCT_H)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS)
report: inspect/report.cpp $(PRODUCT_H)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS)

# The data tools compile no model: the tokenizer, the shard format, the eval tasks' rules and file format.
TEXT_H := $(wildcard text/*.h util/*.h) errors.h run/cli.h model_config.h schedules.h
$(BUILD)/prepare_shards: data/prepare_shards.cpp dataloader.h run/stop_signal.h $(TEXT_H)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS) -lpcre2-8
$(BUILD)/prepare_eval: data/prepare_eval.cpp eval/eval_file.h eval/tasks.h $(TEXT_H)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS) -lpcre2-8

# export and import: model.bin <-> a Hugging Face directory (hf/); plain C++, they read and write files, never an
# engine. export carries hf/*.py inside it (build/hf/hf_python.h, generated from them), so it runs from anywhere.
$(BUILD)/hf/hf_python.h: hf/configuration_prism.py hf/modeling_prism.py
	@mkdir -p $(dir $@)
	@{ echo '// generated from hf/configuration_prism.py and hf/modeling_prism.py by the Makefile'; \
	   printf 'static const char kConfigurationPrismPy[] = R"PRISM_PY('; cat hf/configuration_prism.py; echo ')PRISM_PY";'; \
	   printf 'static const char kModelingPrismPy[] = R"PRISM_PY('; cat hf/modeling_prism.py; echo ')PRISM_PY";'; } > $@
export: hf/export.cpp $(PRODUCT_H) $(BUILD)/hf/hf_python.h
	$(CXX) $(CXXFLAGS) -I$(BUILD)/hf $< -o $@ $(LDLIBS) -lpcre2-8
import: hf/import.cpp $(PRODUCT_H)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS)

# study: a grid of configurations x seeds of train_prism runs (studies/study.cpp); plain C++ on every machine.
study: studies/study.cpp $(PRODUCT_H)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS)

# The run record (run/run_record.h) names the commit a binary was built from: `git describe --always --dirty` at
# build time. build/commit.txt changes only when it does, so the binaries that record it rebuild then and only then.
PRISM_COMMIT := $(shell git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)
$(shell mkdir -p $(BUILD); [ "$$(cat $(BUILD)/commit.txt 2>/dev/null)" = "$(PRISM_COMMIT)" ] || echo "$(PRISM_COMMIT)" > $(BUILD)/commit.txt)
train_prism eval_zeroshot: $(BUILD)/commit.txt
train_prism eval_zeroshot: CXXFLAGS += -DPRISM_COMMIT='"$(PRISM_COMMIT)"'
train_prism eval_zeroshot: NVCCFLAGS += -DPRISM_COMMIT='"$(PRISM_COMMIT)"'

PRODUCTS := train_prism eval_zeroshot generate analyze report export import study $(BUILD)/prepare_shards \
            $(BUILD)/prepare_eval
all: $(PRODUCTS)

.PHONY: data eval-data
data:
	bash data/get_default.sh
eval-data: $(BUILD)/prepare_eval
	bash data/get_eval.sh

# ---- tests -------------------------------------------------------------------------------------------
# Every test/test_*.cpp is one Catch2 translation unit linked into build/test_prism. Each file's own
# extra libraries go in TEST_LDLIBS (added by the fragments included below).
TEST_SRCS := $(wildcard test/test_*.cpp)
TEST_OBJS := $(patsubst test/%.cpp,$(BUILD)/test/%.o,$(TEST_SRCS))
TEST_LDLIBS :=

$(BUILD)/test/%.o: test/%.cpp $(PRODUCT_H) $(wildcard test/*.h)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -c $< -o $@

$(BUILD)/test_prism: $(BUILD)/test/catch_main.o $(TEST_OBJS)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS) $(TEST_LDLIBS)

# `make test` builds first, in parallel (TEST_JOBS, the machine's cores), then runs the test targets one after
# another, so that the tests that time several processes are not starved by compilers. test/*.mk add to:
#   TEST_TARGETS  what runs (serially)
#   TEST_BUILD    the binaries those targets run (test-unit depends on all of them)
#   TEST_CHECKS   compile-only checks (nvcc, ptxas), part of the parallel build phase
#   SAN_BUILD     the sanitizer binaries of test-asan and test-race (`make sanitizer-builds` builds them in parallel)
TEST_TARGETS := test-unit
TEST_BUILD := $(BUILD)/test_prism $(PRODUCTS)
TEST_CHECKS :=
SAN_BUILD :=
TEST_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
TEST_RESULTS := $(BUILD)/test-results
-include test/*.mk

# test_train.cpp and others drive the binaries end to end, so they are all built first. The listener in
# test/catch_main.cpp writes Catch2's counts of passed and failed test cases to the results file.
test-unit: $(TEST_BUILD)
	@mkdir -p $(TEST_RESULTS); rm -f $(TEST_RESULTS)/unit.txt
	@set -o pipefail; PRISM_TEST_RESULTS=$(TEST_RESULTS)/unit.txt OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} \
	    ./$(BUILD)/test_prism 2>&1 | tee $(BUILD)/test_unit.log

.PHONY: test-build sanitizer-builds
test-build: $(TEST_BUILD) $(TEST_CHECKS)
sanitizer-builds: $(SAN_BUILD)

# Set-up first (see `run`), then the parallel build with the compile checks, then every test target one at a
# time, then the closing line from the runner's own counts (test/summary.sh). Exits non-zero when any build or
# test target fails or any test case failed, naming the failed cases.
test:
	@bash setup.sh
	@rm -f $(TEST_RESULTS)/unit.txt
	@$(MAKE) -k -j$(TEST_JOBS) --no-print-directory test-build; b=$$?; \
	 $(MAKE) -k --no-print-directory $(TEST_TARGETS); rc=$$?; \
	 bash test/summary.sh test $(TEST_RESULTS)/unit.txt; s=$$?; \
	 if [ $$b -ne 0 ] || [ $$rc -ne 0 ]; then echo "test: a build or test target failed (see above)"; fi; \
	 exit $$((b || rc || s))

clean:
	rm -rf $(BUILD) $(filter-out $(BUILD)/%,$(PRODUCTS))

# ---- the GPU bundle: make gpu-bundle, make gpu-bundle-check (see the file) ----------------------------------
include dev/gpu_bundle.mk
