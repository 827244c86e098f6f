# The data loader's tests (included by the top-level Makefile, which builds build/prepare_shards).

# test_dataloader.cpp includes the tool's source (without main) to run its pipeline with a stand-in tokenizer.
$(BUILD)/test/test_dataloader.o: data/prepare_shards.cpp
