# The data loader's and the shard tool's tests (included by the top-level Makefile, which builds
# build/prepare_shards).

# test_prepare_shards.cpp includes the tool's source (without main) to run its pipeline with a stand-in tokenizer,
# and so links the tool's JSON Lines reader, simdjson.
$(BUILD)/test/test_prepare_shards.o: data/prepare_shards.cpp
TEST_LDLIBS += -lsimdjson
