# The data tools and the data loader's tests (included by the top-level Makefile).
#   make build/prepare_shards     text / JSON Lines -> llm.c token shards (see data/prepare_shards.cpp)
#   make data                     the default corpus in data/default/ (runs data/get_default.sh)

$(BUILD)/prepare_shards: data/prepare_shards.cpp dataloader.h json.h tokenizer.h pretokenize.h utf8.h
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS) -lpcre2-8

all: $(BUILD)/prepare_shards

.PHONY: data
data:
	bash data/get_default.sh

# test_dataloader.cpp includes the tool's source (without main) to run its pipeline with a stand-in tokenizer.
$(BUILD)/test/test_dataloader.o: data/prepare_shards.cpp
