# Prism's build, the one make file. `make` builds the tools, `make run` trains, `make test` builds and runs every
# test. Read top to bottom: the tools found, the products, the tests' binaries, the GPU's checks and bundle, then
# the targets that run them. Every compile writes its own header dependencies (build/deps/), so no rule lists
# headers by hand.

CXX      ?= g++
OPT      ?= -O3 -march=native
# -fno-math-errno: no errno from sqrt (nothing reads it), so a loop with one vectorises (AdamW's); sqrt's value is
# the same, and exp and log stay libm's calls
CXXFLAGS ?= -std=c++17 $(OPT) -fno-math-errno -fopenmp -Wall -Wextra -Wno-unused-parameter -I.
LDLIBS   ?= -fopenmp -lm
BUILD    := build
SHELL    := /bin/bash
# Each compile's header dependencies, one file per target, read back at the end of this file.
DEP       = -MMD -MP -MF $(BUILD)/deps/$(subst /,_,$@).d
# CCACHE=ccache: every compile goes through that compile cache (.ci/run sets it; docs/tests.md). It keeps compiles,
# not links, so every binary is compiled to an object and linked apart. Links call $(CXX) and $(NVCC) themselves.
CCACHE   ?=
CXX_CMD   = $(strip $(CCACHE) $(CXX))
NVCC_CMD  = $(strip $(CCACHE) $(NVCC))
MPICXX_CMD = $(strip $(CCACHE) mpicxx)
# The build's directories, made before any rule writes into them.
$(shell mkdir -p $(addprefix $(BUILD)/,deps engine obj test asan tsan native hf nvcc_check/test))

.PHONY: all run setup data eval-data clean FORCE
all:

# ==== what this machine has ========================================================================================
# nvcc: the CUDA engine is compiled into train_prism, eval_zeroshot and generate when nvcc exists; they pick the GPU
# at run time when one is present, the CPU reference otherwise. CPU_ONLY=1 builds them with g++ alone. GPU_ARCH, the
# compute capabilities built for: those of this machine's GPUs (nvidia-smi's compute_cap, as llm.c does; 8.0 and
# up), else 80 90 (A100, H100, H200). Each gets machine code (sm_XY), and the newest also its PTX (compute_XY),
# which the driver JIT-compiles for any newer GPU (sm_100, sm_120: docs/gpu.md). Warnings are errors in every nvcc
# build. The GPU checks and the bundle (further down) need only nvcc, whatever CPU_ONLY says.
NVCC     ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
BIN_NVCC := $(if $(CPU_ONLY),,$(NVCC))
GPU_ARCH ?= $(or $(if $(BIN_NVCC),$(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | \
            tr -d . | awk '$$1 >= 80' | sort -nu)),80 90)
CUDA_LIB ?= $(abspath $(dir $(NVCC))../lib64)
CUDA_HOME ?= $(if $(NVCC),$(abspath $(dir $(NVCC))..))
# -gencode for machine code of every architecture in $(1) and the PTX of the newest.
newest_arch = $(shell echo $(1) | tr ' ' '\n' | sort -n | tail -1)
gencode = $(foreach a,$(1),-gencode arch=compute_$(a),code=sm_$(a)) \
          -gencode arch=compute_$(call newest_arch,$(1)),code=compute_$(call newest_arch,$(1))
NATIVE_ARCH ?= sm_90

# MPI (data-parallel ranks under mpirun / srun, CPU and GPU): OpenMPI's wrapper `mpicxx --showme`, else
# pkg-config's `ompi`; defines PRISM_MPI. NO_MPI=1 builds without it; a build without MPI refuses to run as
# several ranks (dist/process_group.h).
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

# NCCL (the GPUs' collectives): nccl.h and libnccl in the CUDA toolkit's directories or the system's (Debian:
# libnccl-dev); defines PRISM_NCCL. NO_NCCL=1 builds without it.
NCCL_H := $(if $(NO_NCCL)$(if $(NVCC),,x),,$(firstword $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h \
          /usr/local/include/nccl.h)))
NCCL_LIBDIR := $(if $(NCCL_H),$(patsubst %/,%,$(dir $(firstword $(wildcard $(CUDA_LIB)/libnccl.so \
               /usr/lib/x86_64-linux-gnu/libnccl.so /usr/lib/aarch64-linux-gnu/libnccl.so /usr/local/lib/libnccl.so)))))
NCCL_VERSION := $(if $(NCCL_LIBDIR),$(shell sed -n 's/^\#define NCCL_\(MAJOR\|MINOR\|PATCH\) *\([0-9]*\).*/\2/p' $(NCCL_H) | paste -sd.))
NCCL_CFLAGS := $(if $(NCCL_LIBDIR),-DPRISM_NCCL -I$(dir $(NCCL_H)))
comma := ,
NCCL_LIBS := $(if $(NCCL_LIBDIR),-L$(NCCL_LIBDIR) -lnccl -Wl$(comma)-rpath$(comma)$(NCCL_LIBDIR))
# nvcc takes -I -D -L -l itself; anything else in MPI's flags (-pthread, -Wl,...) goes to the host compiler.
nvcc_host = $(foreach f,$(1),$(if $(filter -I% -D% -L% -l%,$(f)),$(f),-Xcompiler $(f)))

# The engine the three GPU-capable products get from this make, in words (the info line), and with MPI or not
# (build/engine/, below).
NVCC_VERSION := $(if $(NVCC),$(shell $(NVCC) --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\),.*/\1/p'))
ENGINE := $(if $(BIN_NVCC),CUDA engine (nvcc $(NVCC_VERSION) for $(GPU_ARCH:%=sm_%) + compute_$(call newest_arch,$(GPU_ARCH)) \
          PTX$(if $(NCCL_CFLAGS), + NCCL $(NCCL_VERSION))),CPU engine (g++))
BIN_KIND := $(ENGINE)$(if $(strip $(MPI_LIBS)), + MPI)

# One line saying what was found (once per make; not for clean, nor for run, which picks its own engine).
ifeq ($(MAKELEVEL)$(filter clean run,$(MAKECMDGOALS)),0)
$(info make: $(ENGINE)$(if $(BIN_NVCC),,$(if $(CPU_ONLY), CPU_ONLY, with no nvcc)); \
$(if $(strip $(MPI_LIBS)),MPI: $(MPI_NAME),no MPI$(if $(NO_MPI), (NO_MPI), install libopenmpi-dev: bash setup.sh))\
$(if $(BIN_NVCC),$(if $(NCCL_CFLAGS),,; no NCCL (one GPU per job; libnccl-dev or the CUDA toolkit's NCCL for more))))
endif

# ==== the products: `make` builds them all ==========================================================================
# The two commands of the README. Each first does whatever set-up is missing (setup.sh: the Debian packages, the
# GPT-2 tokenizer file, the default corpus; a few tenths of a second when all is there), then builds. `make run`
# trains on the built-in default (tiny on the default corpus) and builds only the engine it will use: the CUDA
# engine where a GPU is visible (/dev/nvidia0, or nvidia-smi lists one), else the CPU engine, which compiles in
# seconds where CUDA's takes minutes. Extra flags: make run ARGS="--steps 100".
setup:
	@bash setup.sh
run:
	@bash setup.sh
	@if [ -e /dev/nvidia0 ] || nvidia-smi -L > /dev/null 2>&1; then $(MAKE) --no-print-directory train_prism; \
	 else echo "make run: no GPU visible: train_prism with the CPU engine (make builds the CUDA engine too)"; \
	      $(MAKE) --no-print-directory CPU_ONLY=1 train_prism; fi
	./train_prism $(ARGS)

# util/json.cpp, json::parse (nlohmann's parser, the costliest header of the tree): compiled once per build and
# linked into every binary, instead of in each of the forty sources that include util/json.h. build/json.o has the
# products' flags; the address build and the GPU bundle compile their own.
JSON_O := $(BUILD)/json.o
$(JSON_O): util/json.cpp
	$(CXX_CMD) $(CXXFLAGS) $(DEP) -c $< -o $@

# The library: the sources that the entry points and tools call through a small header (engine.cpp: engine.h's
# make_engine; inspect/sampler.cpp, eval/scorer.cpp: the trainer's samples and evals), compiled apart, so that an
# entry point compiles, and its reader crosses, the interface alone. Each is compiled once per set of flags that a
# binary is built with (one binary, one definition of each inline function: PRISM_MPI and PRISM_CUDA change some):
# build/lib/bin/ (the products' flags), plain/ (the tests' and tools'), executor/ and nompi/ (those train_prism
# builds'), asan/ and tsan/ (the sanitizers'), and the GPU bundle's $(GB_OBJ)/lib/; each kind's objects are one
# archive, $(call lib,KIND), from which a link takes only the objects the binary uses (the race build, which needs
# model/build.o alone, links that object: its other objects would be compiled for nothing).
LIB_SRCS := engine dataloader inspect/sampler eval/scorer model/build run/cli run/defaults run/plan_views run/run \
            run/train_flags
lib = $(if $(filter gb,$(1)),$(GB_OBJ)/lib.a,$(BUILD)/lib/$(1).a)
LIB_KINDS := bin plain executor nompi asan
$(foreach k,$(LIB_KINDS),$(eval $(BUILD)/lib/$(k).a: $(patsubst %,$(BUILD)/lib/$(k)/%.o,$(LIB_SRCS))))
$(patsubst %,$(BUILD)/lib/%.a,$(LIB_KINDS)):
	rm -f $@ && ar rcs $@ $^
$(BUILD)/lib/bin/%.o: %.cpp $(BUILD)/engine/lib
	@mkdir -p $(@D)
	$(CXX_CMD) $(CXXFLAGS) $(BIN_CFLAGS) $(DEP) -c $< -o $@
.SECONDARY: $(BUILD)/engine/lib
$(BUILD)/lib/asan/%.o: %.cpp
	@mkdir -p $(@D)
	$(CXX_CMD) $(SAN_CXXFLAGS) $(DEP) -fopenmp -fsanitize=address,undefined -c $< -o $@
$(BUILD)/lib/tsan/%.o: %.cpp
	@mkdir -p $(@D)
	$(CXX_CMD) $(SAN_CXXFLAGS) $(DEP) -fsanitize=thread -c $< -o $@
$(BUILD)/lib/plain/%.o: %.cpp
	@mkdir -p $(@D)
	$(CXX_CMD) $(CXXFLAGS) $(DEP) -c $< -o $@
$(BUILD)/lib/executor/%.o: %.cpp
	@mkdir -p $(@D)
	$(CXX_CMD) $(EXECUTOR_CXXFLAGS) $(DEP) -c $< -o $@
$(BUILD)/lib/nompi/%.o: %.cpp
	@mkdir -p $(@D)
	$(CXX_CMD) $(NOMPI_CXXFLAGS) $(DEP) -c $< -o $@

# The three GPU-capable products are plain C++ for g++ either way (BIN_CFLAGS, their objects' flags beside CXXFLAGS;
# BIN_LIBS, what they link). A CUDA build defines PRISM_CUDA and links the one CUDA engine object,
# build/cuda_engine.o (cuda_engine.cu: the engine, its kernels and the decoder's, compiled once by nvcc for all
# three; engine.h declares what it defines), the CUDA runtime (static) and cuBLASLt.
CUDA_ENGINE_O := $(BUILD)/cuda_engine.o
ifeq ($(BIN_NVCC),)
BIN_CFLAGS = $(MPI_CFLAGS)
BIN_LIBS = $(LDLIBS) -lpcre2-8 $(MPI_LIBS)
else
NVCCFLAGS = -std=c++17 -O3 -DPRISM_CUDA -I. $(call gencode,$(GPU_ARCH)) -Werror all-warnings \
            -Xcompiler "-fopenmp -march=native -Wall -Wextra -Wno-unused-parameter"
$(CUDA_ENGINE_O): cuda_engine.cu $(BUILD)/engine/cuda_engine
	$(NVCC_CMD) $(NVCCFLAGS) $(DEP) $(call nvcc_host,$(MPI_CFLAGS)) $(NCCL_CFLAGS) -c $< -o $@
BIN_CFLAGS = $(MPI_CFLAGS) $(NCCL_CFLAGS) -DPRISM_CUDA -DPRISM_NVCC_VERSION='"$(NVCC_VERSION)"'
BIN_LIBS = $(LDLIBS) -lpcre2-8 $(MPI_LIBS) $(NCCL_LIBS) -L$(CUDA_LIB) -lcudart_static -lcublasLt \
           -ldl -lrt -lpthread -Wl,-rpath,$(CUDA_LIB)
endif

# build/engine/NAME holds the engine NAME was last built with, rewritten only when this make's differs: a binary
# left by `make run` (CPU) is rebuilt by a later `make` (CUDA), and the other way round, never taken as up to date.
$(BUILD)/engine/%: FORCE
	@[ "$$(cat $@ 2>/dev/null)" = "$(BIN_KIND)" ] || echo "$(BIN_KIND)" > $@

# The run record (run/run_record.h) names the commit a binary was built from: `git describe --always --dirty` at
# build time. build/commit.txt changes only when it does, and build/commit.o, made from it, defines the string the
# record reads: the binaries that record it relink then, and nothing is compiled again.
PRISM_COMMIT := $(shell git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)
$(shell [ "$$(cat $(BUILD)/commit.txt 2>/dev/null)" = "$(PRISM_COMMIT)" ] || echo "$(PRISM_COMMIT)" > $(BUILD)/commit.txt)
COMMIT_O := $(BUILD)/commit.o
$(COMMIT_O): $(BUILD)/commit.txt
	printf 'extern "C" const char prism_commit_text[] = "%s";\n' "$$(sed 's/["\\]/\\&/g' $<)" | $(CXX) -x c++ -c - -o $@

# The trainer, the evaluator and generate run on a GPU when there is one.
$(BUILD)/obj/train_prism.o: train_prism.cu $(BUILD)/engine/train_prism
$(BUILD)/obj/eval_zeroshot.o: eval_zeroshot.cu $(BUILD)/engine/eval_zeroshot
$(BUILD)/obj/generate.o: inspect/generate.cu $(BUILD)/engine/generate
train_prism eval_zeroshot: $(COMMIT_O)
$(addprefix $(BUILD)/obj/,train_prism.o eval_zeroshot.o generate.o):
	$(CXX_CMD) $(CXXFLAGS) $(BIN_CFLAGS) $(DEP) -x c++ -c $< -o $@
train_prism eval_zeroshot generate: %: $(BUILD)/obj/%.o $(JSON_O) $(call lib,bin)
	$(CXX) $(CXXFLAGS) $(filter %.o %.a,$^) -o $@ $(BIN_LIBS)
$(if $(BIN_NVCC),train_prism eval_zeroshot generate: $(CUDA_ENGINE_O))

# analyze runs on the fp32 CPU reference, report reads logs, study runs a grid of train_prism runs, import reads a
# Hugging Face directory: plain C++ on every machine. report, study, import and export compute nothing heavy (they
# parse, check and copy, linear in what they read): -O1, in half of -O3's compile time (report: 19 CPU-s for 34).
$(BUILD)/obj/analyze.o: inspect/analyze.cpp
$(BUILD)/obj/report.o: inspect/report.cpp
$(BUILD)/obj/import.o: hf/import.cpp
$(BUILD)/obj/study.o: studies/study.cpp
$(addprefix $(BUILD)/obj/,report.o study.o import.o export.o): OPT = -O1 -march=native

# export carries hf/*.py inside it (build/hf/hf_python.h, generated from them), so it runs from anywhere.
$(BUILD)/hf/hf_python.h: hf/configuration_prism.py hf/modeling_prism.py
	@mkdir -p $(dir $@)
	@{ echo '// generated from hf/configuration_prism.py and hf/modeling_prism.py by the Makefile'; \
	   printf 'static const char kConfigurationPrismPy[] = R"PRISM_PY('; cat hf/configuration_prism.py; echo ')PRISM_PY";'; \
	   printf 'static const char kModelingPrismPy[] = R"PRISM_PY('; cat hf/modeling_prism.py; echo ')PRISM_PY";'; } > $@
$(BUILD)/obj/export.o: hf/export.cpp $(BUILD)/hf/hf_python.h
$(BUILD)/obj/export.o: CXXFLAGS += -I$(BUILD)/hf

# The data tools compile no model: the tokenizer, the shard format, the eval tasks' rules and file format.
$(BUILD)/obj/prepare_shards.o: data/prepare_shards.cpp
$(BUILD)/obj/prepare_eval.o: data/prepare_eval.cpp

PRODUCTS := train_prism eval_zeroshot generate analyze report export import study $(BUILD)/prepare_shards \
            $(BUILD)/prepare_eval
all: $(PRODUCTS)

data:
	bash data/get_default.sh
eval-data: $(BUILD)/prepare_eval
	bash data/get_eval.sh

# ==== the tests' binaries ===========================================================================================
# Every test/test_*.cpp is one Catch2 translation unit linked into build/test_prism; test/catch_main.cpp's listener
# writes the counts of passed, failed and skipped test cases (test/skip.h) to the file PRISM_TEST_RESULTS names.
TEST_OBJS := $(patsubst test/%.cpp,$(BUILD)/test/%.o,$(wildcard test/test_*.cpp))
# Libraries of the tests alone: zlib (test/png_check.h reads a browser's screenshot), libxml2 (test/xml_lib.h parses
# report's page and every SVG; its headers live under include/libxml2), simdjson (test_prepare_shards.cpp and
# test_fuzz.cpp include prepare_shards' source, whose JSON Lines reader it is).
XML2_CFLAGS := $(shell pkg-config --cflags libxml-2.0 2>/dev/null || echo -I/usr/include/libxml2)
$(BUILD)/test/test_report.o $(BUILD)/test/test_analyze.o: CXXFLAGS += $(XML2_CFLAGS)
# Catch2's main, the biggest compile of the tests and nothing any sanitizer needs to see: one object for
# build/test_prism, the address builds and the GPU bundle's gpu_tests (-O1 for any x86-64 CPU: it only runs tests).
CATCH_MAIN := $(BUILD)/catch_main.o
$(CATCH_MAIN): test/catch_main.cpp
	$(CXX_CMD) -std=c++17 -O1 -I. $(DEP) -c $< -o $@
# The tests that drive the binaries and read what they write compile at -O1, in under half the time of -O3: their
# own code runs briefly (test_eval's and test_hf's, the heaviest, 2 s longer in all than at -O3, for 16 s less
# compiling), and what they run are the products' -O3 builds. They link after the others, since of an inline
# function that both kinds compile out of line the linker keeps the first copy: the -O3 one.
TEST_DRIVERS := $(addprefix $(BUILD)/test/test_,$(addsuffix .o,analyze cli comm dist eval faults hf live lr \
                formats output_rule report checkpoints out_dir stats study study_report train))
$(TEST_DRIVERS): OPT = -O1 -march=native
# The CUDA engine on the executor for test_model_cuda.cpp, test_decode_cuda.cpp and bench_model_cpu: cuda_engine.cu
# compiled once with the tests' flags, the engine's kernels and the decoder's in it; those sources hold the engine
# through cuda_engine_hooks.cuh and compile no kernel. A second object beside build/cuda_engine_executor.o
# (train_prism_executor's, with MPI), since MPI's flags define PRISM_MPI, which changes inline functions of
# dist/process_group.h and comm.cuh that the tests' other objects compile without it (one binary, one definition of
# each). Without PRISM_CUDA, as the tests' sources see engine.h: the products' entry points are left out.
TEST_ENGINE_O := $(BUILD)/test/cuda_engine.o
$(TEST_ENGINE_O): cuda_engine.cu
	$(CXX_CMD) $(CXXFLAGS) $(DEP) -x c++ -c $< -o $@
$(BUILD)/test_prism: $(CATCH_MAIN) $(filter-out $(TEST_DRIVERS),$(TEST_OBJS)) $(TEST_ENGINE_O) $(TEST_DRIVERS) $(JSON_O) \
    $(call lib,plain)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS) -lpcre2-8 -lz -lxml2 -lsimdjson
# The fast tier, build/test_fast (make test-fast): the test files whose tests run inside the test process alone (no
# other binary, no MPI, no browser), linked from the same objects as build/test_prism, for the edit-compile-test
# loop: after an edit to a product header it rebuilds and runs in under a minute on two cores. A test file that
# runs nothing but itself, and quickly, belongs on this list.
# The whole-model and decoder tests on the executor (test_model_cuda, test_decode_cuda) are not on it: they link the
# CUDA engine's object, which an edit to a product header recompiles (18 CPU-s), and build/test_prism runs them.
FAST_TESTS := $(addprefix $(BUILD)/test/test_,$(addsuffix .o,attention dataloader docs executor gdn gdn_kernels \
              executor_seams io kernels layout prepare_shards reference ref_ops schedule tokenizer))
$(BUILD)/test_fast: $(CATCH_MAIN) $(FAST_TESTS) $(JSON_O) $(call lib,plain)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS) -lpcre2-8 -lsimdjson

# The other binaries the tests drive:
#   train_prism_executor  train_prism with the CUDA engine on the CUDA-on-CPU executor (cuda_cpu/), with MPI: the
#                         end-to-end tests drive the GPU code path's command line with it
#   train_prism_nompi     train_prism without MPI, unoptimised: test_dist.cpp runs it as several ranks, which it must
#                         refuse (dist/process_group.h)
#   dp_engine_check       the CUDA engine's data parallelism on the executor, under mpirun (test_dist.cpp); it
#                         compiles the engine itself (mpicxx, -O1, PRISM_MPI even where NO_MPI leaves the other
#                         executor builds without it)
#   comm_mpi_check        comm.cuh's collectives over MPI on the executor, under mpirun (test_comm.cpp)
#   bench_attention_cpu   dev/bench_attention.cpp on the executor: one tiny shape per attention kernel instance
#   bench_gdn_cpu         dev/bench_gdn.cpp on the executor: one tiny shape (the code path and its dumps)
#   bench_model_cpu       dev/bench_model.cpp on the executor: the cost model (make test) and the smoke run; it
#                         links the tests' engine object ($(TEST_ENGINE_O), the same flags)
$(BUILD)/train_prism_executor: $(BUILD)/obj/train_prism_executor.o $(BUILD)/cuda_engine_executor.o $(JSON_O) \
    $(call lib,executor)
	$(CXX) $(CXXFLAGS) $(filter %.o %.a,$^) -o $@ $(LDLIBS) -lpcre2-8 $(MPI_LIBS)
$(BUILD)/obj/train_prism_executor.o: train_prism.cu
$(BUILD)/cuda_engine_executor.o: cuda_engine.cu
# Their flags, and the library's for them (one set per binary: the same inline functions in every object).
EXECUTOR_CXXFLAGS = $(CXXFLAGS) $(MPI_CFLAGS) -DPRISM_CUDA -DPRISM_EXECUTOR
NOMPI_CXXFLAGS = -std=c++17 -O0 -fopenmp -I.
$(BUILD)/obj/train_prism_executor.o $(BUILD)/cuda_engine_executor.o:
	$(CXX_CMD) $(EXECUTOR_CXXFLAGS) $(DEP) -x c++ -c $< -o $@
$(BUILD)/train_prism_nompi: $(BUILD)/obj/train_prism_nompi.o $(JSON_O) $(call lib,nompi)
	$(CXX) $(filter %.o %.a,$^) -o $@ -fopenmp -lm -lpcre2-8
$(BUILD)/obj/train_prism_nompi.o: train_prism.cu
	$(CXX_CMD) $(NOMPI_CXXFLAGS) $(DEP) -x c++ -c $< -o $@
$(BUILD)/dp_engine_check: $(BUILD)/obj/dp_engine_check.o $(call lib,plain)
	mpicxx -fopenmp $^ -o $@
$(BUILD)/obj/dp_engine_check.o: test/dp_engine_check.cpp
	$(MPICXX_CMD) -std=c++17 -O1 -fopenmp -Wall -Wextra -Wno-unused-parameter -DPRISM_MPI -DOMPI_SKIP_MPICXX -I. $(DEP) -c $< -o $@
$(BUILD)/comm_mpi_check: $(BUILD)/obj/comm_mpi_check.o
	mpicxx $< -o $@
$(BUILD)/obj/comm_mpi_check.o: test/comm_mpi_check.cpp
	$(MPICXX_CMD) -std=c++17 -O1 -Wall -Wextra -DPRISM_MPI -DOMPI_SKIP_MPICXX -I. $(DEP) -c $< -o $@
$(BUILD)/obj/bench_attention_cpu.o: dev/bench_attention.cpp
$(BUILD)/obj/bench_gdn_cpu.o: dev/bench_gdn.cpp
$(BUILD)/obj/bench_model_cpu.o: dev/bench_model.cpp
$(BUILD)/bench_model_cpu: $(TEST_ENGINE_O)
# Developers' tools: bench-eval, bench-tokenizer, crosscheck-tokenizer, test-hf, bench_reference, bench_layer_stats
# and roofline. test-build builds every dev/*.cpp tool (DEV_TOOLS), so that each keeps compiling and linking as its
# header says (bench_layer_stats did not, once, and bench_reference's g++ line stopped linking, outside it).
$(BUILD)/obj/bench_eval.o: dev/bench_eval.cpp
$(BUILD)/obj/bench_reference.o: dev/bench_reference.cpp
$(BUILD)/obj/bench_tokenizer.o: dev/bench_tokenizer.cpp
$(BUILD)/obj/tokenizer_crosscheck.o: dev/tokenizer_crosscheck.cpp
$(BUILD)/obj/hf_check.o: test/hf/hf_check.cpp
$(BUILD)/obj/bench_layer_stats.o: dev/bench_layer_stats.cpp
# dev/roofline.cpp: the CPU reference's roofline (the machine's FMA limit and bandwidth, the step's GEMMs and ops).
$(BUILD)/roofline: dev/roofline.cpp $(call lib,plain)
	$(CXX_CMD) $(CXXFLAGS) $(DEP) $< $(filter %.a,$^) -o $@ $(LDLIBS)

# One source, one binary, the products' flags: analyze, report, import, study, export, the data tools, the
# benchmarks and checks above; each source compiled to $(BUILD)/obj/NAME.o, linked with json.o and the library.
ONE_SOURCE := analyze report import study export $(addprefix $(BUILD)/,prepare_shards prepare_eval bench_attention_cpu \
              bench_gdn_cpu bench_model_cpu bench_eval bench_tokenizer tokenizer_crosscheck hf_check bench_layer_stats \
              bench_reference)
analyze report import study export: %: $(BUILD)/obj/%.o $(JSON_O) $(call lib,plain)
$(BUILD)/prepare_shards $(BUILD)/prepare_eval $(BUILD)/bench_attention_cpu $(BUILD)/bench_gdn_cpu $(BUILD)/bench_model_cpu \
$(BUILD)/bench_eval $(BUILD)/bench_tokenizer $(BUILD)/tokenizer_crosscheck $(BUILD)/hf_check $(BUILD)/bench_layer_stats \
$(BUILD)/bench_reference: $(BUILD)/%: \
    $(BUILD)/obj/%.o $(JSON_O) $(call lib,plain)
$(ONE_SOURCE):
	$(CXX) $(CXXFLAGS) $(filter %.o %.a,$^) -o $@ $(LDLIBS) -lpcre2-8
$(foreach b,$(ONE_SOURCE),$(BUILD)/obj/$(notdir $(b)).o):
	$(CXX_CMD) $(CXXFLAGS) $(DEP) -c $< -o $@
# prepare_shards reads JSON Lines through simdjson (util/json.h for what simdjson does not take).
$(BUILD)/prepare_shards: LDLIBS += -lsimdjson

DEV_TOOLS := $(addprefix $(BUILD)/,bench_attention_cpu bench_gdn_cpu bench_model_cpu bench_eval bench_layer_stats \
             bench_reference bench_tokenizer roofline tokenizer_crosscheck)
TEST_BUILD := $(PRODUCTS) $(addprefix $(BUILD)/,test_prism test_fast train_prism_executor train_prism_nompi \
              dp_engine_check comm_mpi_check) $(DEV_TOOLS)

# ---- the sanitizer builds: the kernel tests on the executor's fiber-aware builds ----------------------------------
# KERNEL_TESTS run under AddressSanitizer + UBSan (build/test_kernels_asan) and ThreadSanitizer
# (build/test_kernels_tsan: no OpenMP there, libgomp is not instrumented and its barriers would read as races).
# The whole-model tests, the GPU decoder's and the fuzz loop get address builds of their own (beside the OpenMP
# CPU reference, so not in the race build). -O1: the sanitizers' reports stay readable and the builds quick; -g1:
# their stack traces name each frame's function, file and line, and the debug information of types and variables,
# which no report reads, is not built. The address builds link the tests' Catch2 main (uninstrumented: it needs no
# checking); the race build keeps an instrumented one of its own (-O0), so that ThreadSanitizer sees every access.
# The model and decoder tests link one address build of the CUDA engine, build/asan/cuda_engine.o (cuda_engine.cu
# with the engine's kernels and the decoder's, compiled once for both; their sources compile none).
KERNEL_TESTS := test_executor test_executor_seams test_attention test_kernels test_gdn_kernels test_gdn_chunk \
                test_gdn_chunk_bwd
SAN_CXXFLAGS = -std=c++17 $(SAN_OPT) -g1 -fdebug-prefix-map=$(CURDIR)=. -fno-omit-frame-pointer -Wall -Wextra \
               -Wno-unused-parameter -Wno-unknown-pragmas -I.
SAN_OPT = -O1
$(BUILD)/tsan/catch_main.o: SAN_OPT = -O0
$(BUILD)/asan/%.o: test/%.cpp
	$(CXX_CMD) $(SAN_CXXFLAGS) $(DEP) -fopenmp -fsanitize=address,undefined -c $< -o $@
$(BUILD)/tsan/%.o: test/%.cpp
	$(CXX_CMD) $(SAN_CXXFLAGS) $(DEP) -fsanitize=thread -c $< -o $@

$(BUILD)/test_kernels_asan: $(CATCH_MAIN) $(patsubst %,$(BUILD)/asan/%.o,$(KERNEL_TESTS)) $(call lib,asan)
$(BUILD)/test_model_asan: $(CATCH_MAIN) $(BUILD)/asan/test_model_cuda.o $(BUILD)/asan/cuda_engine.o $(call lib,asan)
$(BUILD)/test_decode_asan: $(CATCH_MAIN) $(BUILD)/asan/test_decode_cuda.o $(BUILD)/asan/cuda_engine.o $(call lib,asan)
$(BUILD)/asan/cuda_engine.o: cuda_engine.cu
	$(CXX_CMD) $(SAN_CXXFLAGS) $(DEP) -fopenmp -fsanitize=address,undefined -x c++ -c $< -o $@
$(BUILD)/test_fuzz_asan: $(CATCH_MAIN) $(BUILD)/asan/test_fuzz.o $(BUILD)/asan/json.o $(call lib,asan)
$(BUILD)/asan/json.o: util/json.cpp
	$(CXX_CMD) $(SAN_CXXFLAGS) $(DEP) -fopenmp -fsanitize=address,undefined -c $< -o $@
ASAN_BINS := $(addprefix $(BUILD)/,test_fuzz_asan test_kernels_asan test_model_asan test_decode_asan)
$(ASAN_BINS):
	$(CXX) -fopenmp -fsanitize=address,undefined $^ -o $@ -lpcre2-8 -lsimdjson
$(BUILD)/test_kernels_tsan: $(patsubst %,$(BUILD)/tsan/%.o,catch_main $(KERNEL_TESTS)) $(BUILD)/lib/tsan/model/build.o
	$(CXX) -fsanitize=thread $^ -o $@
SAN_BUILD := $(ASAN_BINS) $(BUILD)/test_kernels_tsan

# Every object, the test builds' and the sanitizers', from test/<name>.cpp.
$(BUILD)/test/%.o: test/%.cpp
	$(CXX_CMD) $(CXXFLAGS) $(DEP) -c $< -o $@

# ==== the GPU's checks, without a GPU (nvcc only) ===================================================================
# The GPU bundle, build/gpu-bundle/ (at most 48 MiB; docs/gpu.md, "The GPU bundle": how to take it to a GPU machine, what its
# summary means): one folder that answers, in one run of at most 8.5 minutes on a GPU machine with only a driver
# and a CUDA toolkit, everything the project cannot check without a GPU. bin/ (native sm_80 + sm_90 builds with
# compute_90 PTX for newer GPUs, one GPU, no MPI or NCCL: gpu_tests, bench_attention, bench_gdn, bench_model,
# train_prism, eval_zeroshot, generate, gpu_info), export (g++: the peer stage's initial weights), peer/
# (dev/peer/*.py: the PyTorch peer, and gdn_fla.py), wheels/ (flash-linear-attention's fla-core),
# data/ (real-text token shards of data/default/, the tokenizer file), run.sh (dev/gpu_bundle/run.sh: eight stages,
# their summary and logs into the folder it is given), BUILD_INFO. Its host code is for any x86-64-v3 CPU (the
# GPU machine's CPU is another), PCRE2 and the CUDA runtime static.
#
# Its compiles are the project's nvcc checks; no other rule compiles the same sources for the GPU again:
#   - warnings as errors in every one (the kernel files, the test kernels of test/*.cuh, the CUDA engine), and in
#     g++'s compiles of the products' sources, which link the engine's one object (cuda_engine.o);
#   - test-ptxas and test-ptxas-decode read the registers and spills of every kernel (sm_80, sm_90) from the
#     ptxas -v log beside its objects: cuda_engine holds every kernel the engine launches and the decoder's,
#     test_kernels the two the engine does not (residual_forward, copy_columns), test_gdn_kernels, test_gdn_chunk
#     and test_gdn_chunk_bwd the gdn kernels again (the engine launches them too; the table lists each build once);
#   - the CUDA engine is compiled once, cuda_engine.o: the products, gpu_tests and bench_model link it (their
#     sources hold it through engine.h or cuda_engine_hooks.cuh and compile none of its kernels);
#   - test-sass reads the attention kernels' machine code from its bench_attention;
#   - gpu-bundle-check runs its train_prism on this machine's CPU when there is no GPU (the CUDA build's
#     fallback), besides its size, libraries and run.sh's skips.
# Outside it, test-nvcc-check compiles three files alone: comm.cuh with NCCL and MPI (the bundle has neither; the
# products have them, but CI builds the products CPU_ONLY and leaves the GPU's compiles to the bundle), and the
# test kernels (test/*.cuh), which the bundle compiles without -Werror.
GPU_BUNDLE := $(BUILD)/gpu-bundle
GB_OBJ := $(BUILD)/gpu-bundle-obj
GPU_BUNDLE_ARCH ?= 80 90
GPU_BUNDLE_MIB := 48
# One front end (cicc) per architecture, not one PTX for both: CUDA's headers differ by __CUDA_ARCH__ (a bf16
# atomicAdd is one instruction on sm_90, a compare-and-swap loop on sm_80), so sm_90 code from compute_80's PTX
# would be slower code than an H100 should run, though it would save one of the two cicc runs of every compile.
# The newest architecture's PTX is embedded too (compute_90, the same cicc output as sm_90's code): a newer GPU
# (sm_100, sm_120) JIT-compiles it at the first launch, and run.sh's first stage says so.
GB_GENCODE := $(call gencode,$(GPU_BUNDLE_ARCH))
GB_HOST := -fopenmp -march=x86-64-v3 -mtune=generic -Wall -Wextra -Wno-unused-parameter
# PCRE2 as its archive, named by path (nvcc reorders -l flags past any -Bstatic / -Bdynamic around them).
GB_LINK = $(shell $(CXX) -print-file-name=libpcre2-8.a) -lcublasLt -Xlinker -rpath,$(CUDA_LIB) -Xcompiler -fopenmp
GB_BINS := gpu_tests bench_attention bench_gdn bench_model train_prism eval_zeroshot generate gpu_info
# The products are plain C++ (g++, -Werror) linked with one CUDA engine object, $(GB_OBJ)/cuda_engine.o, as `make`
# builds them; the benchmarks, gpu_info and the tests are nvcc's, and gpu_tests and bench_model link the same engine
# object (test_model_cuda, test_decode_cuda and bench_model hold it through cuda_engine_hooks.cuh).
GB_PRODUCTS := train_prism eval_zeroshot generate
GB_TESTS := $(KERNEL_TESTS) test_model_cuda test_decode_cuda
# Real text for the benchmarks and the tiny run: the validation shard whole, the first 1M tokens of the first
# training shard (2 MB; the tiny run reads 51K, the benchmarks wrap windows of up to 64K).
GB_TRAIN_SRC := $(firstword $(wildcard data/default/*_train_*.bin))
GB_TRAIN_TOKENS := 1048576
GB_DATA := $(GPU_BUNDLE)/data/default/$(notdir $(GB_TRAIN_SRC)) \
           $(patsubst data/default/%,$(GPU_BUNDLE)/data/default/%,$(wildcard data/default/*_val_*.bin)) \
           $(GPU_BUNDLE)/data/cache/gpt2.tiktoken
ifneq ($(NVCC),)
$(shell mkdir -p $(GB_OBJ) $(GPU_BUNDLE)/bin $(GPU_BUNDLE)/data/default $(GPU_BUNDLE)/data/cache)
endif
GB_ALLOWED_LIBS := linux-vdso|ld-linux-x86-64|libc|libm|libstdc\+\+|libgcc_s|libgomp|libdl|libpthread|librt|libcublasLt|libcublas

# ptxas -v goes to a log beside each nvcc object (its registers and spills); nvcc's own messages are shown when it
# fails. The test objects are compiled as the kernel tests are written, without -Werror (Catch2 is not nvcc's;
# their kernels, test/*.cuh, are in test-nvcc-check).
$(GB_OBJ)/cuda_engine.o: GB_FLAGS = -Werror all-warnings -DPRISM_CUDA
$(GB_OBJ)/bench_attention.o $(GB_OBJ)/bench_gdn.o $(GB_OBJ)/bench_model.o $(GB_OBJ)/gpu_info.o: GB_FLAGS = -Werror all-warnings
$(GB_OBJ)/cuda_engine.o: cuda_engine.cu
$(GB_OBJ)/train_prism.o: train_prism.cu
$(GB_OBJ)/eval_zeroshot.o: eval_zeroshot.cu
$(GB_OBJ)/generate.o: inspect/generate.cu
$(GB_OBJ)/bench_attention.o: dev/bench_attention.cpp
$(GB_OBJ)/bench_model.o: dev/bench_model.cpp
$(GB_OBJ)/bench_gdn.o: dev/bench_gdn.cpp
$(GB_OBJ)/gpu_info.o: dev/gpu_bundle/gpu_info.cu
$(GB_TESTS:%=$(GB_OBJ)/%.o): $(GB_OBJ)/%.o: test/%.cpp
GB_OBJS := $(patsubst %,$(GB_OBJ)/%.o,cuda_engine bench_attention bench_gdn bench_model gpu_info $(GB_TESTS))
# Device code compressed (--compress-mode=size; the driver decompresses it at load, and the bundle already needs a
# driver as new as its toolkit): bench_attention.o 3.2 MB -> 0.66 MB, the bundle 46.3 -> 25.9 MiB of its 48 (the
# engine's kernels are in five binaries).
$(GB_OBJS):
	$(NVCC_CMD) -std=c++17 -O3 -I. $(GB_GENCODE) --compress-mode=size -Xcompiler "$(GB_HOST)" $(GB_FLAGS) $(DEP) \
	    -Xptxas -v -x cu -c $< -o $@ 2> $@.ptxas.log || { grep -v '^ptxas info' $@.ptxas.log; exit 1; }
GB_CXXFLAGS = -std=c++17 -O3 $(GB_HOST) -Werror -I. -DPRISM_CUDA
$(GB_PRODUCTS:%=$(GB_OBJ)/%.o):
	$(CXX_CMD) $(GB_CXXFLAGS) -DPRISM_NVCC_VERSION='"$(NVCC_VERSION)"' $(DEP) -x c++ -c $< -o $@
$(GB_OBJ)/lib.a: $(patsubst %,$(GB_OBJ)/lib/%.o,$(LIB_SRCS))
	rm -f $@ && ar rcs $@ $^
$(GB_OBJ)/lib/%.o: %.cpp
	@mkdir -p $(@D)
	$(CXX_CMD) $(GB_CXXFLAGS) $(DEP) -c $< -o $@
$(GB_OBJ)/json.o: util/json.cpp
	$(CXX_CMD) -std=c++17 -O3 $(GB_HOST) -I. $(DEP) -c $< -o $@

# Kept, not removed as intermediates: the ptxas checks read their logs, and a rebuild would recompile them.
.SECONDARY: $(GB_OBJS) $(GB_PRODUCTS:%=$(GB_OBJ)/%.o)
$(GPU_BUNDLE)/bin/gpu_tests: $(CATCH_MAIN) $(patsubst %,$(GB_OBJ)/%.o,$(GB_TESTS)) $(GB_OBJ)/cuda_engine.o \
    $(call lib,gb)
	$(NVCC) $(GB_GENCODE) $^ -o $@ $(GB_LINK)
$(GPU_BUNDLE)/bin/%: $(GB_OBJ)/%.o
	$(NVCC) $(GB_GENCODE) $(filter %.o %.a,$^) -o $@ $(GB_LINK)
$(addprefix $(GPU_BUNDLE)/bin/,bench_model $(GB_PRODUCTS)): $(GB_OBJ)/json.o
$(addprefix $(GPU_BUNDLE)/bin/,bench_model $(GB_PRODUCTS)): $(call lib,gb)
$(addprefix $(GPU_BUNDLE)/bin/,bench_model $(GB_PRODUCTS)): $(GB_OBJ)/cuda_engine.o
$(GPU_BUNDLE)/run.sh: dev/gpu_bundle/run.sh
	cp $< $@ && chmod +x $@
# The peer stage: export (plain C++: the initial weights for the PyTorch peer) and the peer's Python (dev/peer/).
GB_PEER := $(patsubst dev/peer/%,$(GPU_BUNDLE)/peer/%,$(wildcard dev/peer/*.py))
$(GPU_BUNDLE)/peer/%.py: dev/peer/%.py
	@mkdir -p $(dir $@)
	cp $< $@
# The gdn stage: gdn_fla.py and flash-linear-attention's fla-core wheel (pure Python: chunk_gated_delta_rule; run.sh
# unpacks it, the GPU machine has no network). The wheel is downloaded once into build/fla-wheels/ by pip (or put
# there by hand: the name below), never committed; its other package, flash-linear-attention (layers and models,
# transformers), is not needed for the op and is not carried. It is pinned by version and by its sha256 (PyPI's
# fla_core-0.6.0-py3-none-any.whl, the file reviewed), so the bundle runs exactly that code on the GPU machine: a
# download that does not match is deleted (only this rule's own folder, build/fla-wheels/download/), a file put
# there by hand that does not match is refused and left alone, and gpu-bundle-check checks the bundle's copy.
FLA_VERSION := 0.6.0
FLA_SHA256 := b0708b70e0b119cd58a0a5146ea56cb175cef6ed969d8ac60267e3e077ce3ebd
FLA_WHEEL := fla_core-$(FLA_VERSION)-py3-none-any.whl
GB_FLA := $(GPU_BUNDLE)/wheels/$(FLA_WHEEL)
fla_sha_ok = echo "$(FLA_SHA256)  $(1)" | sha256sum --check --status
fla_sha_of = $$(sha256sum $(1) | cut -c1-64)
$(BUILD)/fla-wheels/$(FLA_WHEEL):
	@rm -rf $(@D)/download && mkdir -p $(@D)/download
	@python3 -m pip download -q --no-deps --only-binary=:all: -d $(@D)/download fla-core==$(FLA_VERSION) \
	    > $(@D)/pip.log 2>&1 && [ -f $(@D)/download/$(FLA_WHEEL) ] || { rm -rf $(@D)/download; \
	    echo "gpu-bundle: error: cannot download fla-core==$(FLA_VERSION) with pip (offline? see $(@D)/pip.log):" \
	    "put $(FLA_WHEEL) into $(@D)/ by hand, or run make gpu-bundle where pip reaches PyPI"; exit 1; }
	@$(call fla_sha_ok,$(@D)/download/$(FLA_WHEEL)) || { \
	    echo "gpu-bundle: error: pip downloaded a $(FLA_WHEEL) with sha256 $(call fla_sha_of,$(@D)/download/$(FLA_WHEEL))," \
	    "not the pinned $(FLA_SHA256) (FLA_SHA256 in the Makefile): deleted it; find out why PyPI's file changed"; \
	    rm -rf $(@D)/download; exit 1; }
	@mv $(@D)/download/$(FLA_WHEEL) $@ && rmdir $(@D)/download
$(GPU_BUNDLE)/wheels/$(FLA_WHEEL): $(BUILD)/fla-wheels/$(FLA_WHEEL)
	@mkdir -p $(@D)
	@$(call fla_sha_ok,$<) || { echo "gpu-bundle: error: $< has sha256 $(call fla_sha_of,$<), not fla-core" \
	    "$(FLA_VERSION)'s pinned $(FLA_SHA256) (FLA_SHA256 in the Makefile): delete it and run make gpu-bundle" \
	    "where pip reaches PyPI"; exit 1; }
	cp $< $@
$(GPU_BUNDLE)/bin/export: $(GB_OBJ)/export.o $(GB_OBJ)/json.o $(call lib,gb)
	$(CXX) $(GB_HOST) $^ -o $@ $(shell $(CXX) -print-file-name=libpcre2-8.a)
$(GB_OBJ)/export.o: hf/export.cpp $(BUILD)/hf/hf_python.h
	$(CXX_CMD) -std=c++17 -O2 $(GB_HOST) -I. -I$(BUILD)/hf $(DEP) -c $< -o $@
$(GPU_BUNDLE)/BUILD_INFO: $(addprefix $(GPU_BUNDLE)/bin/,$(GB_BINS))
	@echo "commit $$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$$(git diff --quiet HEAD 2>/dev/null || echo ' (with changes)');" \
	    "$$($(NVCC) --version | sed -n 's/.*release \([0-9.]*\),.*/nvcc \1/p'), sm $(GPU_BUNDLE_ARCH) + compute_$(call newest_arch,$(GPU_BUNDLE_ARCH)) PTX;" \
	    "built $$(date -u +%Y-%m-%dT%H:%MZ)" > $@
# Data: real text, a slice of the training shard (its header's count rewritten).
$(GPU_BUNDLE)/data/default/$(notdir $(GB_TRAIN_SRC)): $(GB_TRAIN_SRC)
	@n=$(GB_TRAIN_TOKENS); have=$$(( ($$(stat -c %s $<) - 1024) / 2 )); [ $$have -lt $$n ] && n=$$have; \
	 { head -c 8 $<; printf "$$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $$((n & 255)) $$((n >> 8 & 255)) $$((n >> 16 & 255)) $$((n >> 24 & 255)))"; \
	   tail -c +13 $< | head -c $$((1012 + 2 * n)); } > $@.tmp && mv $@.tmp $@
$(GPU_BUNDLE)/data/default/%: data/default/%
	cp $< $@
$(GPU_BUNDLE)/data/cache/gpt2.tiktoken: data/cache/gpt2.tiktoken
	cp $< $@

# test-nvcc-check: each file alone through nvcc, warnings as errors (compute_80 and compute_90, no machine code):
# comm.cuh with NCCL and MPI (the bundle has neither) and the test kernels the bundle compiles without -Werror
# (gdn.cuh's kernels are the engine's, in cuda_engine.o's -Werror compile).
NVCC_CHECK_CUH := comm.cuh test/executor_kernels.cuh test/attention_naive.cuh
$(BUILD)/nvcc_check/%.o: %
	@printf '#include "%s"\n' $< > $(basename $@).cu
	$(NVCC_CMD) -std=c++17 -I. -Werror all-warnings $(call nvcc_host,$(MPI_CFLAGS)) $(NCCL_CFLAGS) $(DEP) \
	    -gencode arch=compute_80,code=compute_80 -gencode arch=compute_90,code=compute_90 -c $(basename $@).cu -o $@

# Registers and spills, from the bundle's ptxas logs (test/ptxas_check.sh).
$(BUILD)/ptxas.txt: $(GB_OBJ)/cuda_engine.o $(GB_OBJ)/test_kernels.o $(GB_OBJ)/test_gdn_kernels.o \
                    $(GB_OBJ)/test_gdn_chunk.o $(GB_OBJ)/test_gdn_chunk_bwd.o test/ptxas_check.sh
	bash test/ptxas_check.sh $(patsubst %,%.ptxas.log,$(filter %.o,$^)) > $@.all || { cat $@.all; echo "test-ptxas: a kernel spills registers"; exit 1; }
	@awk '!seen[$$0]++' $@.all > $@.tmp && mv $@.tmp $@
$(BUILD)/ptxas_decode.txt: $(GB_OBJ)/cuda_engine.o test/ptxas_check.sh
	bash test/ptxas_check.sh $<.ptxas.log > $@.all || { cat $@.all; echo "test-ptxas-decode: a kernel spills"; exit 1; }
	@grep -i decode $@.all > $@.tmp || { echo "test-ptxas-decode: no decode kernel in $<.ptxas.log"; exit 1; }
	@mv $@.tmp $@

# The same kernel tests, and the benchmarks, built by nvcc for one GPU (NATIVE_ARCH) to run here (needs a GPU).
$(BUILD)/native/%.o: test/%.cpp
	$(NVCC_CMD) -std=c++17 -O2 -arch=$(NATIVE_ARCH) -I. $(DEP) -x cu -c $< -o $@
$(BUILD)/test_kernels_native: $(patsubst %,$(BUILD)/native/%.o,catch_main $(KERNEL_TESTS)) $(call lib,plain)
	$(NVCC) -arch=$(NATIVE_ARCH) $^ -o $@ -lcublasLt
# bench_model links the CUDA engine built for that GPU, build/native/cuda_engine.o.
$(BUILD)/native/cuda_engine.o: cuda_engine.cu
	$(NVCC_CMD) -std=c++17 -O3 -arch=$(NATIVE_ARCH) -I. -Werror all-warnings $(DEP) -Xcompiler -fopenmp -c $< -o $@
$(BUILD)/bench_attention: dev/bench_attention.cpp
$(BUILD)/bench_model: dev/bench_model.cpp $(BUILD)/native/cuda_engine.o $(JSON_O) $(call lib,plain)
$(BUILD)/bench_attention $(BUILD)/bench_model:
	$(NVCC) -std=c++17 -O3 -arch=$(NATIVE_ARCH) -I. -Werror all-warnings $(DEP) -x cu $< -o $@ \
	    $(patsubst %,-Xlinker %,$(filter %.o %.a,$^)) -lcublasLt -lpcre2-8 -Xcompiler -fopenmp

# ==== the checks and tests ==========================================================================================
# `make test` builds first, in parallel (TEST_JOBS, the machine's cores): test-build, the binaries and the GPU's
# compile checks; then runs TEST_TARGETS one after another, so that the tests that time several processes are not
# starved by compilers; then the closing line from the runner's own counts (test/summary.sh: passed, failed and
# skipped, from the results files in build/test-results/). It exits non-zero when any build or test target fails or
# any check failed, naming the failed cases.
#   test-unit              build/test_prism: every Catch2 test (test_train.cpp and others drive the binaries end to end)
#   bench-attention-smoke  dev/bench_attention.cpp on the executor: one tiny shape per attention kernel instance
#   cost-model             the per-kernel roofline cost model of a 124M step, uniform, Prism and X (no GPU needed)
#   gpu-bundle-check       the bundle's size, libraries, its run.sh and train_prism without a GPU (with nvcc)
#   test-sass              the attention kernels' exponentials in the bundle's SASS: one MUFU.EX2 each, no
#                          subnormal range check (test/sass_check.sh; needs cuobjdump and nvdisasm: dev/ci_venv.sh)
# and in the build phase, with nvcc (without it each says SKIPPED, and gpu-bundle-check counts one skip):
#   test-nvcc-check        comm.cuh with NCCL and MPI, and the test kernels, through nvcc (the other kernel
#                          files: the bundle's compiles)
#   test-ptxas             every kernel of the engine (its object holds the decoder's and the gdn kernels too) and
#                          test_kernels' two, for sm_80 and sm_90: fails on any register spill, writes the table to
#                          build/ptxas.txt
#   test-ptxas-decode      the same for the decoder's kernels (decode attention, the residual add, column copy)
# The sanitizers run apart (.ci/run runs them after make test): make test-asan (fuzz loop, kernel, whole-model and
# GPU-decoder tests under AddressSanitizer + UBSan) and make test-race (the kernel tests under ThreadSanitizer;
# the planted missing-__syncthreads race must be reported). make sanitizer-builds builds them in parallel.
TEST_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
TEST_RESULTS := $(BUILD)/test-results
TEST_TARGETS := test-unit bench-attention-smoke cost-model gpu-bundle-check test-sass
NVCC_CHECKS := test-nvcc-check test-ptxas test-ptxas-decode gpu-bundle

.PHONY: test test-build sanitizer-builds $(TEST_TARGETS) $(NVCC_CHECKS) test-asan test-race \
        test-fuzz-asan test-asan-model test-asan-decode
test:
	@bash setup.sh
	@rm -f $(addprefix $(TEST_RESULTS)/,unit.txt bundle.txt sass.txt)
	@$(MAKE) -k -j$(TEST_JOBS) --no-print-directory test-build; b=$$?; \
	 $(MAKE) -k --no-print-directory $(TEST_TARGETS); rc=$$?; \
	 bash test/summary.sh test $(addprefix $(TEST_RESULTS)/,unit.txt bundle.txt sass.txt); s=$$?; \
	 if [ $$b -ne 0 ] || [ $$rc -ne 0 ]; then echo "test: a build or test target failed (see above)"; fi; \
	 exit $$((b || rc || s))
# The GPU's compiles first: they are the build's longest (nvcc, two architectures each), and started last they would
# leave one core waiting on them at the end of a parallel build.
test-build: $(NVCC_CHECKS) $(TEST_BUILD)
sanitizer-builds: $(SAN_BUILD)

test-unit: $(TEST_BUILD)
	@mkdir -p $(TEST_RESULTS); rm -f $(TEST_RESULTS)/unit.txt
	@set -o pipefail; PRISM_TEST_RESULTS=$(TEST_RESULTS)/unit.txt OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} \
	    ./$(BUILD)/test_prism 2>&1 | tee $(BUILD)/test_unit.log
bench-attention-smoke: $(BUILD)/bench_attention_cpu
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} ./$<
cost-model: $(BUILD)/bench_model_cpu
	./$< --cost-model | tee $(BUILD)/cost_model.txt | tail -4

ifneq ($(NVCC),)
gpu-bundle: $(addprefix $(GPU_BUNDLE)/bin/,$(GB_BINS) export) $(GPU_BUNDLE)/run.sh $(GPU_BUNDLE)/BUILD_INFO $(GB_DATA) \
            $(GB_PEER) $(GB_FLA)
	@echo "gpu-bundle: $(GPU_BUNDLE)/ $$(du -sh $(GPU_BUNDLE) | cut -f1): take it to a GPU machine and run bash run.sh OUT (docs/gpu.md)"
gpu-bundle-check: gpu-bundle
	@bash dev/gpu_bundle/check.sh $(GPU_BUNDLE) $(GPU_BUNDLE_MIB) '$(GB_ALLOWED_LIBS)' $(BUILD)/gpu-bundle-check \
	    $(FLA_WHEEL) $(FLA_SHA256); s=$$?; \
	 $(call check_result,bundle,gpu-bundle-check,$$s); exit $$s
test-nvcc-check: $(NVCC_CHECK_CUH:%=$(BUILD)/nvcc_check/%.o)
	@echo "test-nvcc-check: $(NVCC_CHECK_CUH) alone, warnings as errors, $(if $(NCCL_CFLAGS),with,without) NCCL" \
	    "(every other kernel file: the bundle's -Werror compiles)"
test-ptxas: $(BUILD)/ptxas.txt
	@echo "test-ptxas: $$(wc -l < $<) kernel builds (sm_80, sm_90), no spills; registers in $<"
test-ptxas-decode: $(BUILD)/ptxas_decode.txt
	@echo "test-ptxas-decode: $$(wc -l < $<) kernel builds (sm_80, sm_90), no spills; registers in $<"
test-sass: $(GPU_BUNDLE)/bin/bench_attention
	@if command -v cuobjdump > /dev/null && command -v nvdisasm > /dev/null; then \
	    bash test/sass_check.sh $< attention > $(BUILD)/sass.txt; s=$$?; $(call check_result,sass,test-sass,$$s); \
	    if [ $$s -ne 0 ]; then cat $(BUILD)/sass.txt; echo "test-sass: FAILED"; exit 1; fi; \
	    echo "test-sass: every attention kernel's exponentials are one MUFU.EX2 with no range check ($(BUILD)/sass.txt)"; \
	else bash test/skip.sh $(TEST_RESULTS)/sass.txt test-sass cuobjdump \
	    "no cuobjdump / nvdisasm on PATH (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm; dev/ci_venv.sh has them)"; fi
else
# Without nvcc: every GPU check says so; gpu-bundle-check's results file counts them as one skip.
$(NVCC_CHECKS):
	@echo "SKIPPED: $@: no nvcc found (the GPU bundle is not built)"
gpu-bundle-check test-sass:
	@bash test/skip.sh $(TEST_RESULTS)/$(if $(filter test-sass,$@),sass,bundle).txt $@ nvcc "no nvcc found (the GPU bundle is not built)"
endif
# $(call check_result,NAME,CHECK,STATUS): the results file of a make target's one check (STATUS 0: it passed), for
# test/summary.sh.
check_result = mkdir -p $(TEST_RESULTS); if [ $(3) -eq 0 ]; then printf 'passed 1\nfailed 0\nskipped 0\n'; \
    else printf 'passed 0\nfailed 1\nskipped 0\nfailed_case %s\n' '$(2)'; fi > $(TEST_RESULTS)/$(1).txt

# The address builds run one after another (each writes its own results file for test/summary.sh); -k runs all.
test-asan: test-fuzz-asan test-asan-model test-asan-decode $(BUILD)/test_kernels_asan
	$(call run_asan,$(BUILD)/test_kernels_asan,asan)
test-fuzz-asan: $(BUILD)/test_fuzz_asan
	$(call run_asan,$<,fuzz_asan)
test-asan-model: $(BUILD)/test_model_asan
	$(call run_asan,$<,asan_model)
test-asan-decode: $(BUILD)/test_decode_asan
	$(call run_asan,$<,asan_decode)
run_asan = @mkdir -p $(TEST_RESULTS); rm -f $(TEST_RESULTS)/$(2).txt; \
    echo "PRISM_TEST_RESULTS=$(TEST_RESULTS)/$(2).txt ./$(1)"; PRISM_TEST_RESULTS=$(TEST_RESULTS)/$(2).txt \
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 OMP_NUM_THREADS=2 ./$(1)

# The [fork] tests (abort messages) are left out of the race build: TSan forgets the fibers in a forked child.
test-race: $(BUILD)/test_kernels_tsan
	@mkdir -p $(TEST_RESULTS); rm -f $(TEST_RESULTS)/race.txt
	PRISM_TEST_RESULTS=$(TEST_RESULTS)/race.txt TSAN_OPTIONS=halt_on_error=1 ./$< "~[planted_race]~[fork]"
	@TSAN_OPTIONS=halt_on_error=0 ./$< "[planted_race]" > $(BUILD)/planted_race.log 2>&1; \
	if grep -q "ThreadSanitizer: data race" $(BUILD)/planted_race.log && grep -q missing_sync_kernel $(BUILD)/planted_race.log; then \
	    echo "test-race: the planted missing __syncthreads race was reported, as it must be"; \
	else \
	    cat $(BUILD)/planted_race.log; echo "test-race: FAILED: the planted race was not reported"; exit 1; \
	fi

# The fast tier alone: build/test_fast (FAST_TESTS), built on every core like make test's build, then its closing
# line from its own counts.
.PHONY: test-fast
test-fast:
	@bash setup.sh
	@$(MAKE) -j$(TEST_JOBS) --no-print-directory $(BUILD)/test_fast
	@mkdir -p $(TEST_RESULTS); rm -f $(TEST_RESULTS)/fast.txt
	@PRISM_TEST_RESULTS=$(TEST_RESULTS)/fast.txt OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} ./$(BUILD)/test_fast; \
	 bash test/summary.sh test-fast $(TEST_RESULTS)/fast.txt

# One part of the tests at a time (Catch2 tags), on the executor where they concern kernels.
.PHONY: test-attention test-executor test-kernels test-dist test-comm-mpi test-report-browser
run_tag = OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} ./$(BUILD)/test_prism "[$(1)]"
test-attention test-executor test-kernels test-dist test-comm-mpi test-report-browser: $(BUILD)/test_prism
test-attention:
	$(call run_tag,attention)
test-executor:
	$(call run_tag,executor)
test-kernels:
	$(call run_tag,kernels)
test-dist: train_prism $(addprefix $(BUILD)/,train_prism_nompi train_prism_executor dp_engine_check)
	$(call run_tag,dist)
test-comm-mpi: $(BUILD)/comm_mpi_check
	OMP_NUM_THREADS=1 ./$(BUILD)/test_prism "[mpi]"
test-report-browser: report
	$(call run_tag,browser)

# Slurm: a single-node cluster started on loopback, every launch of docs/training.md's Slurm section run under it
# (sbatch of its batch script, the time-limit signal and the requeue, srun -n 2 over PMIx, a killed task, study
# --launcher "srun -n 2"), the cluster stopped (test/slurm/run.sh). setup.sh --slurm installs Debian's Slurm first;
# where it cannot run (not root) every check is SKIPPED by name. Results for test/summary.sh in slurm.txt.
.PHONY: test-slurm
test-slurm:
	@bash setup.sh --deps-only --slurm || echo "test-slurm: Slurm could not be installed (see above)"
	@$(MAKE) --no-print-directory train_prism study
	@bash test/slurm/run.sh $(TEST_RESULTS)/slurm.txt

# The red team (dev/redteam.sh): about 170 cases against the built tools, each one line PASS / FAIL / SKIP: file-system
# oddities, signals at every phase of a run, launchers and rank variables, outputs aimed at inputs, hostile files for
# the live bridge, stops during evals. About 1.5 minutes on two cores (one process at a time, OMP_NUM_THREADS=1);
# .ci/run runs it after the unit tests. Results for test/summary.sh in redteam.txt.
.PHONY: test-redteam
test-redteam: $(PRODUCTS)
	@bash dev/redteam.sh --results $(TEST_RESULTS)/redteam.txt

# The kernel tests on a real GPU (needs one).
.PHONY: test-executor-native
test-executor-native: $(BUILD)/test_kernels_native
	./$<

# Hugging Face: exports loaded in transformers and compared with the CPU reference (test/hf/test_hf.py): logits,
# greedy generate(), lm-eval's HFLM against eval_zeroshot. Its counts go to build/test-results/hf.txt (.ci/run adds
# them up); without torch / transformers it is one skip (test/skip.sh: a failure where PRISM_REQUIRE names torch).
# .ci/run runs it with PYTHON=/opt/prism-venv/bin/python (dev/ci_venv.sh).
PYTHON ?= python3
.PHONY: test-hf
test-hf:
	@mkdir -p $(TEST_RESULTS); rm -f $(TEST_RESULTS)/hf.txt
	@if ! $(PYTHON) -c 'import torch, transformers' 2>/dev/null; then \
	    bash test/skip.sh $(TEST_RESULTS)/hf.txt test-hf torch \
	        "$(PYTHON) cannot import torch and transformers (pip install torch transformers lm-eval accelerate; dev/ci_venv.sh)"; \
	    exit; fi; \
	 $(MAKE) --no-print-directory export import generate eval_zeroshot $(BUILD)/prepare_eval $(BUILD)/hf_check && \
	 PRISM_TEST_RESULTS=$(TEST_RESULTS)/hf.txt OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} $(PYTHON) test/hf/test_hf.py

# ==== benchmarks and developers' tools ==============================================================================
#   make bench-attention        forward and backward TFLOP/s at T 1024, 2048, 4096 per head_dim, on a GPU (ARGS="...")
#   make bench-model            tokens/s, MFU, memory, per-kernel timings for 124M uniform, Prism and X, on a GPU
#   make bench-model-smoke      the same code on the executor, `tiny` for one step (timings meaningless)
#   make bench-eval             items per second per task, tiny model, CPU
#   make bench-tokenizer [BENCH_TEXT=file]   single-thread encode MB/s (ours, and tiktoken's if importable)
#   make crosscheck-tokenizer   text/tokenizer.h vs tiktoken gpt2 on >= 1 MB (needs pip install tiktoken)
# The tokenizer's need the ranks file: bash data/get_tokenizer.sh (or PRISM_TOKENIZER=path).
PRISM_TOKENIZER ?= data/cache/gpt2.tiktoken
BENCH_TEXT ?= $(BUILD)/crosscheck/english.bin
.PHONY: bench-attention bench-model bench-model-smoke bench-eval bench-tokenizer crosscheck-tokenizer
bench-attention: $(BUILD)/bench_attention
	./$< $(ARGS)
bench-model: $(BUILD)/bench_model
	./$< $(ARGS)
bench-model-smoke: $(BUILD)/bench_model_cpu
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} ./$< --models tiny,tiny:prism,tiny:x -b 1 -t 16 --steps 1 -V 512
bench-eval: $(BUILD)/bench_eval
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} ./$<
bench-tokenizer: $(BUILD)/bench_tokenizer
	@test -f $(BENCH_TEXT) || python3 dev/tiktoken_crosscheck.py --ranks $(PRISM_TOKENIZER) --no-codepoints
	./$< $(BENCH_TEXT) $(PRISM_TOKENIZER)
crosscheck-tokenizer: $(BUILD)/tokenizer_crosscheck
	python3 dev/tiktoken_crosscheck.py --ranks $(PRISM_TOKENIZER) --out $(BUILD)/crosscheck
	./$< $(PRISM_TOKENIZER) $(BUILD)/crosscheck

# ==== formatting and cleaning =======================================================================================
# make format-check: every tracked C++ and CUDA file as .clang-format writes it (clang-format --dry-run); lists
# the files that differ. `clang-format -i FILE` formats one.
.PHONY: format-check
format-check:
	@command -v clang-format > /dev/null || { echo "format-check: no clang-format (apt-get install clang-format)"; exit 1; }
	@files=$$(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh'); n=$$(echo "$$files" | wc -w); \
	 bad=$$(for f in $$files; do clang-format --dry-run -Werror "$$f" > /dev/null 2>&1 || echo "$$f"; done); \
	 if [ -z "$$bad" ]; then echo "format-check: the $$n C++ and CUDA files are as .clang-format writes them"; exit 0; fi; \
	 echo "$$bad" | sed 's/^/format-check: not formatted: /'; \
	 echo "format-check: FAILED: $$(echo "$$bad" | wc -l) of $$n files differ from .clang-format (clang-format -i FILE)"; exit 1

clean:
	rm -rf $(BUILD) $(filter-out $(BUILD)/%,$(PRODUCTS))

-include $(wildcard $(BUILD)/deps/*.d)
