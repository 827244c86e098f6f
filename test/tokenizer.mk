# test/tokenizer.mk: text/tokenizer.h's link flags and its dev tools (included by the top Makefile).
#   make bench-tokenizer [BENCH_TEXT=file]   single-thread encode MB/s (ours, and tiktoken's if importable)
#   make crosscheck-tokenizer                 text/tokenizer.h vs tiktoken gpt2 on >= 1 MB (needs pip install tiktoken)
# Both need the ranks file: bash data/get_tokenizer.sh (or PRISM_TOKENIZER=path).
TEST_LDLIBS += -lpcre2-8

PRISM_TOKENIZER ?= data/cache/gpt2.tiktoken
BENCH_TEXT ?= $(BUILD)/crosscheck/english.bin

$(BUILD)/bench_tokenizer: dev/bench_tokenizer.cpp $(TEXT_H)
	@mkdir -p $(BUILD)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS) -lpcre2-8

$(BUILD)/tokenizer_crosscheck: dev/tokenizer_crosscheck.cpp $(TEXT_H)
	@mkdir -p $(BUILD)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS) -lpcre2-8

.PHONY: bench-tokenizer crosscheck-tokenizer
bench-tokenizer: $(BUILD)/bench_tokenizer
	@test -f $(BENCH_TEXT) || python3 dev/tiktoken_crosscheck.py --ranks $(PRISM_TOKENIZER) --no-codepoints
	./$(BUILD)/bench_tokenizer $(BENCH_TEXT) $(PRISM_TOKENIZER)

crosscheck-tokenizer: $(BUILD)/tokenizer_crosscheck
	python3 dev/tiktoken_crosscheck.py --ranks $(PRISM_TOKENIZER) --out $(BUILD)/crosscheck
	./$(BUILD)/tokenizer_crosscheck $(PRISM_TOKENIZER) $(BUILD)/crosscheck
