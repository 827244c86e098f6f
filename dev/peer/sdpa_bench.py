# dev/peer/sdpa_bench.py: PyTorch's F.scaled_dot_product_attention at the shapes of bench_attention's rows, so each
# row of ours gets a ratio. Reads bench_attention's table (its rows: T hd B h fwd-ms fwd-TF/s bwd-ms bwd-TF/s ...)
# from --ours, times SDPA (causal, bf16, (B, h, T, hd)) forward and backward at the same T, hd, B and h with CUDA
# events (mean of --reps after one warm-up, as bench_attention does), and prints one line per shape:
#   T 4096 hd 128 B 4 h 16: ours fwd 1.234 ms bwd 3.456 ms | SDPA (flash) fwd .. ms bwd .. ms | speed ours/SDPA fwd 0.91x bwd 0.85x
# where speed ours/SDPA = SDPA's time / ours (above 1: ours is faster). The backend is the one SDPA's dispatcher
# picks for these inputs (torch._fused_sdp_choice), named as torch names it. The backward is timed alone: one
# forward, then backward() with the graph kept, --reps times. Needs a GPU; dev only, not part of the trainer.
import argparse
import sys

import torch
import torch.nn.functional as F


def backend_name(q, k, v):
    try:
        choice = torch._fused_sdp_choice(q, k, v, None, 0.0, True)
        names = {int(b): b.name for b in torch.nn.attention.SDPBackend}
        return names.get(int(choice), str(choice)).lower()
    except Exception as e:  # a private helper: say so rather than guess
        return f"unknown ({type(e).__name__})"


def time_ms(fn, reps):
    fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / reps


def ours_rows(path):
    rows = []
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) >= 8 and all(x.isdigit() for x in p[:4]):
                rows.append((int(p[0]), int(p[1]), int(p[2]), int(p[3]), float(p[4]), float(p[6])))
    return rows


def main():
    ap = argparse.ArgumentParser(description="SDPA at bench_attention's shapes, with ratios.")
    ap.add_argument("--ours", required=True, help="bench_attention's output (its table rows)")
    ap.add_argument("--hd", default="64,128,256", help="head_dims to compare (SDPA's flash kernel: up to 256)")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("sdpa_bench: no GPU visible to torch")
        sys.exit(3)
    want = {int(x) for x in a.hd.split(",")}
    rows = [r for r in ours_rows(a.ours) if r[1] in want]
    if not rows:
        print(f"sdpa_bench: no rows of head_dim {sorted(want)} in {a.ours}")
        sys.exit(1)
    print(f"sdpa_bench: torch {torch.__version__}, {torch.cuda.get_device_name()}, causal, bf16")
    for T, hd, B, h, fwd, bwd in rows:
        q, k, v = (torch.randn(B, h, T, hd, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        backend = backend_name(q, k, v)
        f_ms = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), a.reps)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        grad = torch.randn_like(out)
        b_ms = time_ms(lambda: out.backward(grad, retain_graph=True), a.reps)
        print(f"T {T} hd {hd} B {B} h {h}: ours fwd {fwd:.3f} ms bwd {bwd:.3f} ms | SDPA ({backend}) fwd {f_ms:.3f} ms "
              f"bwd {b_ms:.3f} ms | speed ours/SDPA fwd {f_ms / fwd:.2f}x bwd {b_ms / bwd:.2f}x", flush=True)
        del q, k, v, out, grad
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
