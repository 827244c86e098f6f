# test/eval.mk: zero-shot evaluation's targets (included by the top Makefile).
#   make build/prepare_eval    official raw eval files -> tokenised eval files (data/prepare_eval.cpp)
#   make eval_zeroshot         checkpoint -> HellaSwag / PIQA / ARC-Easy / WinoGrande / LAMBADA / WikiText table
#   make eval-data             download the official files and convert them into data/eval/ (data/get_eval.sh)
#   make bench-eval            items per second per task, tiny model, CPU (dev/bench_eval.cpp)
# test/test_eval.cpp drives both binaries end to end, so test-unit builds them first.

# The data tool compiles no model: the task rules, the file format and the tokenizer, nothing of eval.h's scorer.
$(BUILD)/prepare_eval: data/prepare_eval.cpp eval_file.h eval_tasks.h pytext.h io.h json.h tokenizer.h pretokenize.h utf8.h
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS) -lpcre2-8

eval_zeroshot: eval_zeroshot.cu $(BIN_DEPS)
	$(call build_bin,$<,$@)

$(BUILD)/bench_eval: dev/bench_eval.cpp $(wildcard *.h)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS) -lpcre2-8

all: $(BUILD)/prepare_eval eval_zeroshot

TEST_BUILD += $(BUILD)/prepare_eval eval_zeroshot

.PHONY: eval-data bench-eval
eval-data: $(BUILD)/prepare_eval
	bash data/get_eval.sh

bench-eval: $(BUILD)/bench_eval
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} ./$(BUILD)/bench_eval
