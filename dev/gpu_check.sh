#!/usr/bin/env bash
# dev/gpu_check.sh: what a GPU machine must confirm, in one run of a few minutes (sized for 6 on an H100/H200, so
# a 15-minute session has room for the machine's start and one rerun):
#   1. the kernel and whole-model tests, and the executor's own tests, built by nvcc and run natively
#   2. the throughput benchmark (dev/bench_model.cpp) for 124M uniform, Prism and X at B 16, T 1024: tokens/s,
#      MFU and memory of the trainer's own step, and every op's measured time next to its roofline time
#      (run/cost_model.h) as the fraction of the roofline it reaches; the summary keeps the three models' lines
#      and Prism's tokens/s as a fraction of uniform's (target >= 0.97); then the flash attention benchmark
#      (dev/bench_attention.cpp): forward and backward TFLOP/s at T 1024 and 4096, head_dim 64, 72, 128, 256
#   3. a 200-step `tiny` run on the GPU next to the same run on the CPU reference (needs data/default/;
#      skipped with a note when it is missing, e.g. on a machine without network)
# and prints a summary. Usage: bash dev/gpu_check.sh   (NATIVE_ARCH=sm_80 for an A100; default sm_90)
set -uo pipefail
cd "$(dirname "$0")/.."
ARCH=${NATIVE_ARCH:-sm_90}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
OUT=build/gpu_check
mkdir -p "$OUT"
summary=()
note() { summary+=("$1"); echo "== $1"; }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'

# 1. tests, natively: one nvcc per file, in parallel
srcs="test/catch_main.cpp test/test_kernels.cpp test/test_attention.cpp test/test_model_cuda.cpp test/test_executor.cpp test/test_executor_seams.cpp"
t0=$(date +%s)
pids=()
for s in $srcs; do
    o="$OUT/$(basename "${s%.cpp}").o"
    "$NVCC" -std=c++17 -O2 -arch="$ARCH" -I. -x cu -Xcompiler -fopenmp -c "$s" -o "$o" > "$o.log" 2>&1 &
    pids+=($!)
done
# the attention benchmark builds alongside (waited for in section 2)
make -s build/bench_attention NATIVE_ARCH="$ARCH" > "$OUT/bench_attention_build.log" 2>&1 &
att_pid=$!
build_ok=1
for p in "${pids[@]}"; do wait "$p" || build_ok=0; done
if [ $build_ok = 1 ] && "$NVCC" -arch="$ARCH" $OUT/*.o -o "$OUT/gpu_tests" -lcublasLt -Xcompiler -fopenmp > "$OUT/link.log" 2>&1; then
    note "tests built in $(( $(date +%s) - t0 )) s"
    if OMP_NUM_THREADS=4 "$OUT/gpu_tests" -d yes > "$OUT/tests.log" 2>&1; then
        note "GPU tests: PASS ($(grep -E 'passed' "$OUT/tests.log" | tail -1))"
    else
        tail -40 "$OUT/tests.log"
        note "GPU tests: FAIL (see $OUT/tests.log)"
    fi
else
    cat $OUT/*.log | head -40
    note "GPU tests: BUILD FAILED"
fi

# 2. benchmark: the per-op tables go to the log, the measured lines to the summary
if make -s build/bench_model NATIVE_ARCH="$ARCH" > "$OUT/bench_build.log" 2>&1; then
    timeout 300 ./build/bench_model -b 16 -t 1024 --steps 10 --models 124M,124M:prism,124M:x | tee "$OUT/bench.log"
    for m in 124M 124M:prism 124M:x; do
        line=$(grep -E "^$m +measured" "$OUT/bench.log")
        note "bench ${line:-$m: no result (see $OUT/bench.log)}"
    done
    u=$(grep -E '^124M +measured' "$OUT/bench.log" | grep -oE '[0-9]+ tok/s' | awk '{print $1}')
    p=$(grep -E '^124M:prism +measured' "$OUT/bench.log" | grep -oE '[0-9]+ tok/s' | awk '{print $1}')
    if [ -n "$u" ] && [ -n "$p" ]; then
        note "Prism / uniform tokens/s: $(awk -v p="$p" -v u="$u" 'BEGIN { printf "%.3f", p / u }') (target >= 0.97)"
    fi
else
    tail -20 "$OUT/bench_build.log"
    note "benchmark: BUILD FAILED"
fi

# 2b. flash attention, causal: TFLOP/s counted as FlashAttention does (the full table: ./build/bench_attention)
if wait "$att_pid"; then
    timeout 120 ./build/bench_attention --T 1024,4096 --hd 64,72,128,256 | tee "$OUT/bench_attention.log"
    att_rc=${PIPESTATUS[0]}
    row() { awk -v T="$1" -v hd="$2" '$1 == T && $2 == hd { printf "fwd %s bwd %s TF/s", $6, $8 }' "$OUT/bench_attention.log"; }
    note "attention (rc $att_rc) T 4096: hd 64 $(row 4096 64), hd 128 $(row 4096 128), hd 256 $(row 4096 256)"
else
    tail -20 "$OUT/bench_attention_build.log"
    note "attention benchmark: BUILD FAILED"
fi

# 3. 200 tiny steps, GPU vs CPU reference
if [ -d data/default ] && ls data/default/*train*.bin > /dev/null 2>&1; then
    if make -s train_prism > "$OUT/train_build.log" 2>&1; then
        timeout 90 ./train_prism --steps 200 -o "$OUT/tiny_gpu" > "$OUT/tiny_gpu.log" 2>&1
        timeout 150 ./train_prism --steps 200 --cpu -o "$OUT/tiny_cpu" > "$OUT/tiny_cpu.log" 2>&1
        g=$(grep -oE 'step +200/200 \| loss [0-9.]+' "$OUT/tiny_gpu.log" | awk '{print $NF}')
        c=$(grep -oE 'step +200/200 \| loss [0-9.]+' "$OUT/tiny_cpu.log" | awk '{print $NF}')
        if [ -n "$g" ] && [ -n "$c" ]; then
            # bf16 training follows the fp32 curve to within a few hundredths of a nat after 200 steps
            ok=$(awk -v g="$g" -v c="$c" 'BEGIN { d = g - c; if (d < 0) d = -d; print (d <= 0.1) ? "PASS" : "FAIL" }')
            note "tiny 200 steps: GPU loss $g, CPU loss $c: $ok"
        else
            note "tiny 200 steps: no final loss found (see $OUT/tiny_*.log)"
        fi
    else
        note "tiny 200 steps: train_prism BUILD FAILED (see $OUT/train_build.log)"
    fi
else
    note "tiny 200 steps: skipped (no data/default/; run data/get_default.sh where there is network)"
fi

echo
echo "==== gpu_check summary ===="
printf '%s\n' "${summary[@]}"
