#!/usr/bin/env python3
"""dev/attention_estimate.py: an ESTIMATE, not a measurement, of the flash attention kernels' (attention.cuh)
throughput on an H100 / H200 SXM, from the kernels' own per-warp instruction and byte counts. Run it to
compare with `make bench-attention` on a GPU (dev/gpu_check.sh); where they disagree, the measurement wins.

Model. Each kernel repeats one unit of work per warp (forward and dQ: one key tile for the warp's rows; dK/dV:
one query block for the warp's 16 keys). A unit uses each SM resource for (count / rate) SM clocks; with enough
warps resident the unit costs the largest of those (the bottleneck), and the kernels reach a fraction of that
bound (latency, barriers, causal imbalance, tails): 0.55-0.75 is assumed, the range printed. Rates per SM per
clock (GH100: 132 SMs, ~1.755 GHz sustained): mma.sync m16n8k16 bf16 at an assumed 2/3 of the wgmma peak
(4096 FLOP/clk) -> 0.65 mma; shared memory 128 B; MUFU ex2 16; FP32 pipe 128 lane-ops; issue 4 warp
instructions; L2 -> SM 5.5 TB/s / 132 / 1.755 GHz ~ 24 B (tiles streamed from L2, reused across blocks).
Counted FLOPs as the benchmark counts them: forward 4 T^2 hd / 2 per head, backward 2.5 x; the backward
executes 7/5 of what it counts (the dQ pass recomputes S and dP), so its counted rate is 5/7 of the executed.
"""

SMS, CLOCK = 132, 1.755e9
MMA_PER_CLK, SMEM_B, MUFU, FP32, ISSUE, L2_B = 4096 * (2 / 3) / 4096, 128, 16, 128, 4, 5.5e12 / SMS / CLOCK
EFF = (0.55, 0.75)

# (HD, BR, BC, NW, MW) per instance, as in attention.cuh
FWD = {64: (64, 128, 64, 4, 2), 128: (128, 128, 32, 4, 2), 256: (256, 64, 32, 4, 1)}
DQ = {64: (64, 128, 32, 4, 2), 128: (128, 128, 32, 4, 2), 256: (256, 64, 32, 4, 1)}
DKV = {64: (64, 64, 64, 4, 2), 128: (128, 64, 64, 4, 2), 256: (256, 32, 64, 8, 1)}


def bound(mma, ldm, smem_w, exp, fp32_thread, instr, l2):
    """SM clocks per unit for each resource; returns (clocks at the bottleneck, its name)."""
    t = {"mma": mma / MMA_PER_CLK, "smem": (ldm * 512 + smem_w) / SMEM_B, "mufu": exp / MUFU,
         "fp32": fp32_thread * 32 / FP32, "issue": instr / ISSUE, "L2": l2 / L2_B}
    k = max(t, key=t.get)
    return t[k], k, t


def forward(hd):
    HD, BR, BC, NW, MW = FWD[min(x for x in FWD if x >= hd)]
    hdp, nk = -(-hd // 16) * 16, -(-hd // 16)
    mma = MW * (nk * BC // 8 + BC // 16 * hdp // 8)
    ldm = nk * (MW + BC // 16) + BC // 16 * hdp // 16
    vals = MW * BC // 2                          # S values per thread
    fp32 = 5 * vals + MW * hdp // 2 + vals // 2  # scale, max, sub, exp range, sum; O rescale; bf16 packs
    exp = 32 * vals
    instr = mma + ldm + fp32 + exp // 32 + 40
    smem_w = 2 * BC * hdp * 2 / NW               # this warp's share of the K, V tile copies
    l2 = smem_w                                   # ... which come from L2
    return mma * 4096, bound(mma, ldm, smem_w, exp, fp32, instr, l2)


def dq(hd):
    HD, BR, BC, NW, MW = DQ[min(x for x in DQ if x >= hd)]
    hdp, nk = -(-hd // 16) * 16, -(-hd // 16)
    mma = MW * (2 * nk * BC // 8 + BC // 16 * hdp // 8)
    ldm = nk * (2 * MW + 2 * BC // 16) + BC // 16 * hdp // 16
    vals = MW * BC // 2
    fp32 = 5 * vals + vals // 2
    exp = 32 * vals
    instr = mma + ldm + fp32 + exp // 32 + 40
    smem_w = 2 * BC * hdp * 2 / NW
    return mma * 4096, bound(mma, ldm, smem_w, exp, fp32, instr, smem_w)


def dkv(hd):
    HD, BR, BC, NW, MW = DKV[min(x for x in DKV if x >= hd)]
    hdp, nk = -(-hd // 16) * 16, -(-hd // 16)
    KG = BC // (16 * MW)
    QS = NW // KG
    BRW, HDW = BR // QS, min(HD // QS, hdp)
    mma = MW * (2 * nk * BRW // 8 + 2 * BR // 16 * HDW // 8)
    ldm = nk * (2 * MW + 2 * BRW / 16) + BR // 16 * (2 * MW + 2 * HDW // 16)
    vals = MW * BRW // 2
    fp32 = 6 * vals + vals // 2
    exp = 32 * vals
    instr = mma + ldm + fp32 + exp // 32 + 40
    smem_w = 2 * BR * hdp * 2 / NW + MW * 16 * BRW * 2 * 2  # Q, dO tile copies; P^T, dS^T stores
    return mma * 4096, bound(mma, ldm, smem_w, exp, fp32, instr, 2 * BR * hdp * 2 / NW)


def rate(flops, b):
    return flops / b[0] * SMS * CLOCK / 1e12  # TFLOP/s at the bottleneck


print(__doc__.split("\n")[0])
print("%4s | %-34s | %-34s | %-30s" % ("hd", "forward: bound TF/s (bottleneck)", "dQ, dK/dV: bound TF/s executed",
                                      "ESTIMATE counted TF/s fwd / bwd"))
for hd in (64, 72, 128, 256):
    ff, fb = forward(hd)
    qf, qb = dq(hd)
    kf, kb = dkv(hd)
    f = rate(ff, fb)
    # backward: executed work splits 3:4 between the dQ and dK/dV kernels (S, dP, dQ vs S, dP, dV, dK)
    b_exec = 7 / (3 / rate(qf, qb) + 4 / rate(kf, kb))
    b = b_exec * 5 / 7
    print("%4d | %6.0f (%-5s)                     | %6.0f (%-5s), %6.0f (%-5s)       | %3.0f-%3.0f / %3.0f-%3.0f" %
          (hd, f, fb[1], rate(qf, qb), qb[1], rate(kf, kb), kb[1], EFF[0] * f, EFF[1] * f, EFF[0] * b, EFF[1] * b))
