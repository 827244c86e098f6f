# test/eval.mk: zero-shot evaluation's test and benchmark targets (included by the top Makefile; the top Makefile
# builds eval_zeroshot and build/prepare_eval, which test/test_eval.cpp drives end to end).
#   make bench-eval            items per second per task, tiny model, CPU (dev/bench_eval.cpp)

$(BUILD)/bench_eval: dev/bench_eval.cpp $(PRODUCT_H)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS) -lpcre2-8

.PHONY: bench-eval
bench-eval: $(BUILD)/bench_eval
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} ./$(BUILD)/bench_eval
