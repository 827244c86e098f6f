# dev/gpu_bundle.mk: the GPU bundle (included at the end of the top Makefile). One folder that answers, in one
# run of at most 8 minutes on a GPU machine with only a driver and a CUDA toolkit, everything the project cannot
# check without a GPU (docs/gpu.md, "The GPU bundle": how to take it there, what its summary means).
#   make gpu-bundle         build/gpu-bundle/ (at most 48 MiB): bin/ (native sm_80 + sm_90 builds, one GPU, no MPI
#                           or NCCL: gpu_tests, bench_attention, bench_model, train_prism, eval_zeroshot, generate,
#                           gpu_info), data/ (real-text token shards of data/default/, the tokenizer file), run.sh
#                           (dev/gpu_bundle/run.sh: six stages, their summary and logs into the folder it is given),
#                           BUILD_INFO. Needs nvcc; no GPU.
#   make gpu-bundle-check   part of make test: builds the bundle, checks its size, that ldd of every binary finds
#                           only libc, libm, libstdc++, libgcc_s, libgomp, the loader's and the CUDA toolkit's own
#                           libraries (cuBLASLt; the runtime is linked statically, PCRE2 too), and that run.sh on a
#                           machine without a GPU prints every stage's "skipped: no GPU" and exits 0 within seconds
#   make test-sass          the attention kernels' exponentials in the bundle's SASS: one MUFU.EX2 each, no
#                           subnormal range check (test/sass_check.sh; needs cuobjdump, skipped with a note without)
# The bundle's binaries differ from the top Makefile's in flags, so none of its objects can be reused here: host
# code for any x86-64-v3 CPU (not -march=native: the GPU machine's CPU is another), no MPI, PCRE2 static. What is
# shared is the other way round: test-ptxas and test-ptxas-decode (test/kernels.mk, test/inspect.mk) read the
# registers and spills of every kernel from the bundle's own ptxas -v output (bench_model holds every kernel of
# the model, generate the decoder's) instead of compiling all of them a second time.

GPU_BUNDLE := $(BUILD)/gpu-bundle
GB_OBJ := $(BUILD)/gpu-bundle-obj
GPU_BUNDLE_ARCH ?= 80 90
GPU_BUNDLE_MIB := 48
GB_GENCODE := $(foreach a,$(GPU_BUNDLE_ARCH),-gencode arch=compute_$(a),code=sm_$(a))
GB_HOST := -fopenmp -march=x86-64-v3 -mtune=generic -Wall -Wextra -Wno-unused-parameter
GB_NVCC = $(NVCC) -std=c++17 -O3 -I. $(GB_GENCODE) -Xcompiler "$(GB_HOST)"
# PCRE2 as its archive, named by path (nvcc reorders -l flags past any -Bstatic / -Bdynamic around them).
GB_PCRE2_A := $(shell $(CXX) -print-file-name=libpcre2-8.a)
GB_LINK = $(GB_PCRE2_A) -lcublasLt -Xlinker -rpath,$(CUDA_LIB) -Xcompiler -fopenmp
GB_BINS := gpu_tests bench_attention bench_model train_prism eval_zeroshot generate gpu_info
GB_TEST_SRCS := $(sort $(KERNEL_TEST_SRCS) test/test_model_cuda.cpp test/test_decode_cuda.cpp)
GB_TEST_OBJS := $(patsubst test/%.cpp,$(GB_OBJ)/%.o,$(GB_TEST_SRCS))
GB_DEPS := $(PRODUCT_H) $(CUDA_H) $(wildcard test/*.h test/*.cuh)
# Real text for the benchmarks and the tiny run: the validation shard whole, the first 1M tokens of the first
# training shard (2 MB; the tiny run reads 51K, the benchmarks wrap windows of up to 64K).
GB_TRAIN_SRC := $(firstword $(wildcard data/default/*_train_*.bin))
GB_TRAIN_TOKENS := 1048576
GB_DATA := $(GPU_BUNDLE)/data/default/$(notdir $(GB_TRAIN_SRC)) \
           $(patsubst data/default/%,$(GPU_BUNDLE)/data/default/%,$(wildcard data/default/*_val_*.bin)) \
           $(GPU_BUNDLE)/data/cache/gpt2.tiktoken

.PHONY: gpu-bundle gpu-bundle-check test-sass
ifneq ($(NVCC),)
# Built in make test's parallel phase (the top Makefile's test-build, whose prerequisites were read before this
# file), checked in its serial one.
TEST_CHECKS += gpu-bundle test-sass
test-build: gpu-bundle test-sass
TEST_TARGETS += gpu-bundle-check
gpu-bundle: $(addprefix $(GPU_BUNDLE)/bin/,$(GB_BINS)) $(GPU_BUNDLE)/run.sh $(GPU_BUNDLE)/BUILD_INFO $(GB_DATA)
	@echo "gpu-bundle: $(GPU_BUNDLE)/ $$(du -sh $(GPU_BUNDLE) | cut -f1): take it to a GPU machine and run bash run.sh OUT (docs/gpu.md)"

# ---- objects and binaries ----------------------------------------------------------------------------------
# ptxas -v goes to a log beside each object (its registers and spills, read by test-ptxas); nvcc's own messages
# are shown when it fails.
gb_compile = $(GB_NVCC) -Xptxas -v $(2) -c $(1) -o $@ 2> $@.ptxas.log || { grep -v '^ptxas info' $@.ptxas.log; exit 1; }
$(GB_OBJ)/catch_main.o: test/catch_main.cpp
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O1 -march=x86-64-v3 -mtune=generic -I. -c $< -o $@
$(GB_OBJ)/%.o: test/%.cpp $(GB_DEPS)
	@mkdir -p $(dir $@)
	$(call gb_compile,$<,-x cu)
$(GB_OBJ)/bench_attention.o: dev/bench_attention.cpp $(GB_DEPS)
	@mkdir -p $(dir $@)
	$(call gb_compile,$<,-x cu -Werror all-warnings)
$(GB_OBJ)/bench_model.o: dev/bench_model.cpp $(GB_DEPS)
	@mkdir -p $(dir $@)
	$(call gb_compile,$<,-x cu -Werror all-warnings)
$(GB_OBJ)/%.o: %.cu $(GB_DEPS)
	@mkdir -p $(dir $@)
	$(call gb_compile,$<,-x cu -Werror all-warnings -DPRISM_CUDA)
$(GB_OBJ)/generate.o: inspect/generate.cu $(GB_DEPS)
	@mkdir -p $(dir $@)
	$(call gb_compile,$<,-x cu -Werror all-warnings -DPRISM_CUDA)
$(GB_OBJ)/gpu_info.o: dev/gpu_bundle/gpu_info.cu
	@mkdir -p $(dir $@)
	$(call gb_compile,$<,-x cu -Werror all-warnings)

# Kept, not removed as intermediates: test-ptxas reads their ptxas logs, and a rebuild would recompile them.
.SECONDARY: $(GB_OBJ)/catch_main.o $(GB_TEST_OBJS) $(patsubst %,$(GB_OBJ)/%.o,$(filter-out gpu_tests,$(GB_BINS)))
$(GPU_BUNDLE)/bin/gpu_tests: $(GB_OBJ)/catch_main.o $(GB_TEST_OBJS)
	@mkdir -p $(dir $@)
	$(NVCC) $(GB_GENCODE) $^ -o $@ $(GB_LINK)
$(GPU_BUNDLE)/bin/%: $(GB_OBJ)/%.o
	@mkdir -p $(dir $@)
	$(NVCC) $(GB_GENCODE) $< -o $@ $(GB_LINK)

$(GPU_BUNDLE)/run.sh: dev/gpu_bundle/run.sh
	@mkdir -p $(dir $@)
	cp $< $@ && chmod +x $@
$(GPU_BUNDLE)/BUILD_INFO: $(addprefix $(GPU_BUNDLE)/bin/,$(GB_BINS))
	@echo "commit $$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$$(git diff --quiet HEAD 2>/dev/null || echo ' (with changes)');" \
	    "$$($(NVCC) --version | sed -n 's/.*release \([0-9.]*\),.*/nvcc \1/p'), sm $(GPU_BUNDLE_ARCH);" \
	    "built $$(date -u +%Y-%m-%dT%H:%MZ)" > $@

# ---- data: real text, a slice of the training shard (its header's count rewritten) -------------------------------
$(GPU_BUNDLE)/data/default/$(notdir $(GB_TRAIN_SRC)): $(GB_TRAIN_SRC)
	@mkdir -p $(dir $@)
	@n=$(GB_TRAIN_TOKENS); have=$$(( ($$(stat -c %s $<) - 1024) / 2 )); [ $$have -lt $$n ] && n=$$have; \
	 { head -c 8 $<; printf "$$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $$((n & 255)) $$((n >> 8 & 255)) $$((n >> 16 & 255)) $$((n >> 24 & 255)))"; \
	   tail -c +13 $< | head -c $$((1012 + 2 * n)); } > $@.tmp && mv $@.tmp $@
$(GPU_BUNDLE)/data/default/%: data/default/%
	@mkdir -p $(dir $@)
	cp $< $@
$(GPU_BUNDLE)/data/cache/gpt2.tiktoken: data/cache/gpt2.tiktoken
	@mkdir -p $(dir $@)
	cp $< $@

# ---- the check ---------------------------------------------------------------------------------------------
GB_ALLOWED_LIBS := linux-vdso|ld-linux-x86-64|libc|libm|libstdc\+\+|libgcc_s|libgomp|libdl|libpthread|librt|libcublasLt|libcublas
gpu-bundle-check: gpu-bundle
	@bash dev/gpu_bundle/check.sh $(GPU_BUNDLE) $(GPU_BUNDLE_MIB) '$(GB_ALLOWED_LIBS)' $(BUILD)/gpu-bundle-check

test-sass: $(GPU_BUNDLE)/bin/bench_attention
	@if command -v cuobjdump > /dev/null && command -v nvdisasm > /dev/null; then \
	    bash test/sass_check.sh $< attention > $(BUILD)/sass.txt || { cat $(BUILD)/sass.txt; echo "test-sass: FAILED"; exit 1; }; \
	    echo "test-sass: every attention kernel's exponentials are one MUFU.EX2 with no range check ($(BUILD)/sass.txt)"; \
	else echo "test-sass: no cuobjdump / nvdisasm (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm): not checked"; fi
else
gpu-bundle gpu-bundle-check test-sass:
	@echo "$@: no nvcc found: the GPU bundle is not built"
endif
