# test/hf.mk: the Hugging Face export's tests (included by the top Makefile, which builds export and import).
#   test/test_hf.cpp (in make test)   the safetensors writer and reader, config.json both ways, the tensor names,
#                                     the tokenizer files against our tokenizer, export -> import byte for byte,
#                                     and the refusals; needs the export and import binaries
#   make test-hf [PYTHON=python3]     loads exports in transformers and compares them with the CPU reference
#                                     (test/hf/test_hf.py): logits, greedy generate(), lm-eval's HFLM against
#                                     eval_zeroshot; skipped with a note when torch / transformers are missing
PYTHON ?= python3
HF_TEST_BUILD := export import generate eval_zeroshot $(BUILD)/prepare_eval $(BUILD)/hf_check

$(BUILD)/hf_check: test/hf/hf_check.cpp $(PRODUCT_H)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS) -lpcre2-8

.PHONY: test-hf
test-hf:
	@if ! $(PYTHON) -c 'import torch, transformers' 2>/dev/null; then \
	    echo "test-hf: skipped: $(PYTHON) cannot import torch and transformers (pip install torch transformers lm-eval accelerate)"; exit 0; fi; \
	 $(MAKE) --no-print-directory $(HF_TEST_BUILD) && OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} $(PYTHON) test/hf/test_hf.py
