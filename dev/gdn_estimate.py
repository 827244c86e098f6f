#!/usr/bin/env python3
"""dev/gdn_estimate.py: an ESTIMATE, not a measurement, of the Gated DeltaNet kernels at 124M shapes (H100, H200).
Each kernel's FLOPs and HBM bytes, and its roofline time: the larger of FLOPs at the dense bf16 tensor peak and
bytes at the HBM bandwidth. The bundle's gdn stage (run.sh stage 8: bench_gdn) measures them; where they disagree,
the measurement wins.

The figures are run/cost_model.h's gdn_kernel_costs, the one source the cost model (make cost-model, study's
GPU-hours) prices a gdn layer from; this script repeats its formulas to print docs/gpu.md's table, and
test_layer_table.cpp checks that table against the C++. One row per kernel as model.cuh runs a gdn layer (B x T
tokens, h heads of hd, w = h hd); the reads and writes of each are listed beside gdn_kernel_costs:
  gdn_conv_forward, gdn_gates_forward, gdn_norm_forward and their backwards: gdn.cuh's per-row ops
  gdn_chunk_forward, gdn_chunk_backward: the chunked delta rule (reads q, k, v, beta, g; the forward writes o and
  every chunk's starting state, fp32 hd x hd per head, ceil(T / 64) chunks; the backward reads dout and the states
  and writes dq, dk, dv, dbeta, dg)
FLOPs are counted as model_config.h's layer_cost counts the chunked form (h (6 hd^2 + 10 C hd + 2/3 C^2) per token
forward, C = 64, the square products in full: not the executed count), backward twice the forward; the conv's 24 w
per token (gdn_conv_forward; its backward twice that). Bytes: each input read once, each output written once (the ideal; scratch round trips a kernel
may add are not counted). Peaks (datasheet figures, as the cost model's RooflineGpu): dense bf16 989 TFLOP/s on
both; HBM 3.35 TB/s (H100 SXM) and 4.8 TB/s (H200 SXM). mma.sync reaches about 2/3 of the dense peak
(attention_estimate.py), which moves no kernel here off the memory side.
"""

PEAK = 989e12
HBM = {"H100": 3.35e12, "H200": 4.8e12}
B = 16
SHAPES = [(1024, 64), (1024, 128), (4096, 64), (4096, 128)]  # (T, hd) at w 768
WIDTH = 768


def kernel_costs(B, T, h, hd):
    """(name, FLOPs, bytes) of each kernel: run/cost_model.h's gdn_kernel_costs."""
    N, w, C, bf, f4 = B * T, h * hd, min(64, T), 2, 4
    rule = N * h * (6 * hd * hd + 10 * C * hd + 2 / 3 * C * C)
    states, qkv, gates = B * h * -(-T // 64) * hd * hd * f4, 3 * N * w * bf, 2 * N * h * f4
    return [("gdn_conv_forward", 24 * N * w, N * (6 * w * bf + 2 * h * f4)),
            ("gdn_gates_forward", 0, N * 2 * h * bf + gates),
            ("gdn_chunk_forward", rule, qkv + gates + N * w * bf + states),
            ("gdn_norm_forward", 0, N * (3 * w * bf + h * f4)),
            ("gdn_norm_backward", 0, N * (5 * w * bf + h * f4)),
            ("gdn_chunk_backward", 2 * rule, qkv + gates + N * w * bf + states + qkv + gates),
            ("gdn_gates_backward", 0, 2 * gates + 2 * N * 2 * h * bf),
            ("gdn_conv_backward", 48 * N * w, N * (12 * w * bf + 2 * h * f4))]


def roofline_us(flops, nbytes, gpu):
    t_flop, t_mem = flops / PEAK, nbytes / HBM[gpu]
    return max(t_flop, t_mem) * 1e6, "HBM" if t_mem >= t_flop else "tensor"


print(__doc__.split("\n")[0])
print(f"B {B}, width {WIDTH}; ESTIMATES (roofline: max(FLOPs / {PEAK / 1e12:.0f} TFLOP/s, bytes / HBM))")
print()
print("| T | hd | h | kernel | GFLOP | MB | FLOP/byte | H100 us (bound) | H200 us (bound) |")
print("|---|---|---|---|---|---|---|---|---|")
for T, hd in SHAPES:
    h = WIDTH // hd
    total = {"H100": 0.0, "H200": 0.0}
    for name, flops, nbytes in kernel_costs(B, T, h, hd):
        cells = []
        for gpu in ("H100", "H200"):
            us, bound = roofline_us(flops, nbytes, gpu)
            total[gpu] += us
            cells.append(f"{us:.1f} ({bound})")
        print(f"| {T} | {hd} | {h} | {name} | {flops / 1e9:.2f} | {nbytes / 1e6:.1f} | {flops / nbytes:.0f} | "
              f"{cells[0]} | {cells[1]} |")
    print(f"| {T} | {hd} | {h} | mixer kernels, forward + backward | | | | {total['H100']:.1f} | {total['H200']:.1f} |")
