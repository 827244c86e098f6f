# test/inspect.mk: the inspection tools' tests (included by the top Makefile, which builds generate, analyze and
# report; test/test_generate.cpp, test_analyze.cpp and test_report.cpp drive them end to end, and
# test/test_decode_cuda.cpp runs the GPU decoder on the executor).
#   make test-report-browser   only the headless-chromium rendering test

# The GPU decoder's files join the nvcc compile check, and its test (beside the OpenMP reference, so not in the race
# build) gets an address build of its own, which `make test-asan` runs.
NVCC_CHECK_CUH += inspect/decode.cuh inspect/residual.cuh inspect/cuda_decoder.cuh
ifneq ($(NVCC),)
test-nvcc-check: $(patsubst %,$(BUILD)/nvcc_check/%.stamp,inspect/decode.cuh inspect/residual.cuh inspect/cuda_decoder.cuh)
endif

.PHONY: test-asan-decode
test-asan: test-asan-decode
SAN_BUILD += $(BUILD)/test_decode_asan
$(BUILD)/test_decode_asan: $(BUILD)/asan/catch_main.o $(BUILD)/asan/test_decode_cuda.o
	$(CXX) -fopenmp -fsanitize=address,undefined $^ -o $@
test-asan-decode: $(BUILD)/test_decode_asan
	@mkdir -p $(TEST_RESULTS); rm -f $(TEST_RESULTS)/asan_decode.txt
	PRISM_TEST_RESULTS=$(TEST_RESULTS)/asan_decode.txt ASAN_OPTIONS=detect_leaks=1 \
	    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 OMP_NUM_THREADS=2 ./$<

TEST_LDLIBS += -lz -lxml2
# test/xml_lib.h (libxml2; setup.sh installs libxml2-dev): its headers live under include/libxml2.
XML2_CFLAGS := $(shell pkg-config --cflags libxml-2.0 2>/dev/null || echo -I/usr/include/libxml2)
$(BUILD)/test/test_report.o $(BUILD)/test/test_analyze.o: CXXFLAGS += $(XML2_CFLAGS)

.PHONY: test-report-browser
test-report-browser: $(BUILD)/test_prism report
	./$(BUILD)/test_prism "[browser]"

# ptxas: the decoder's kernels (decode attention, the residual add and column copy) for sm_80 and sm_90, no register spills (test/ptxas_check.sh; part of make test).
.PHONY: test-ptxas-decode
TEST_CHECKS += test-ptxas-decode
# From the GPU bundle's build of generate.cu (dev/gpu_bundle.mk: ptxas -v beside the object), the decoder's kernels.
ifneq ($(NVCC),)
$(BUILD)/ptxas_decode.txt: $(BUILD)/gpu-bundle-obj/generate.o test/ptxas_check.sh
	bash test/ptxas_check.sh $<.ptxas.log > $@.all || { cat $@.all; echo "test-ptxas-decode: a kernel spills"; exit 1; }
	@grep -i decode $@.all > $@.tmp || { echo "test-ptxas-decode: no decode kernel in $<.ptxas.log"; exit 1; }
	@mv $@.tmp $@
test-ptxas-decode: $(BUILD)/ptxas_decode.txt
	@echo "test-ptxas-decode: $$(wc -l < $<) kernel builds (sm_80, sm_90), no spills; registers in $<"
else
test-ptxas-decode:
	@echo "test-ptxas-decode: no nvcc found, the decode kernel not checked for register spills"
endif
