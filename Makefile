# Prism: one entry point. `make` builds the tools, `make test` builds and runs every test.
# CPU-only by default; the CUDA engine is added when nvcc is present (see the CUDA section).

CXX      ?= g++
OPT      ?= -O3 -march=native
CXXFLAGS ?= -std=c++17 $(OPT) -fopenmp -Wall -Wextra -Wno-unused-parameter -I.
LDLIBS   ?= -fopenmp -lm
BUILD    := build

.PHONY: all test clean
all: train_prism

train_prism: train_prism.cpp $(wildcard *.h)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS)

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
test-unit: $(BUILD)/test_prism
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} ./$(BUILD)/test_prism

-include test/*.mk

test: $(TEST_TARGETS)

clean:
	rm -rf $(BUILD) train_prism
