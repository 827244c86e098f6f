# test/fuzz.mk: the fuzz loop of test/test_fuzz.cpp (mutated shards, checkpoints, state and eval files, JSON
# lines through their loaders). It is in build/test_prism like every test, so `make test` runs it; here it also
# gets an address build of its own (AddressSanitizer + UBSan, the flags of test/executor.mk's), which
# `make test-asan` builds and runs before the kernel tests.
#   make test-fuzz-asan   only the fuzz loop, address build

# test_fuzz.cpp includes prepare_shards' source (without main) for its JSON Lines reader, which uses simdjson.
$(BUILD)/test/test_fuzz.o $(BUILD)/asan/test_fuzz.o: data/prepare_shards.cpp
$(BUILD)/test_fuzz_asan: $(BUILD)/asan/catch_main.o $(BUILD)/asan/test_fuzz.o
	$(CXX) -fopenmp -fsanitize=address,undefined $^ -o $@ -lpcre2-8 -lsimdjson

.PHONY: test-fuzz-asan
test-fuzz-asan: $(BUILD)/test_fuzz_asan
	@mkdir -p $(TEST_RESULTS); rm -f $(TEST_RESULTS)/fuzz_asan.txt
	PRISM_TEST_RESULTS=$(TEST_RESULTS)/fuzz_asan.txt ASAN_OPTIONS=detect_leaks=1 \
	    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 OMP_NUM_THREADS=2 ./$<

test-asan: test-fuzz-asan
SAN_BUILD += $(BUILD)/test_fuzz_asan
