# dev/peer/gdn_fla.py: flash-linear-attention's chunk_gated_delta_rule (Triton; the fla-core wheel the bundle
# carries) beside our chunk kernels (dev/bench_gdn.cpp), in the GPU bundle's gdn stage. Two parts:
#  1. agreement: for each file bench_gdn --dump wrote (DIR/gdn_T*_hd*.bin: our inputs q, k, v, beta, g, dout and our
#     outputs o, dq, dk, dv, dbeta, dg), fla computes the same outputs from the same inputs, and a float64 PyTorch
#     recurrence (S_t = exp(g_t) S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T, o_t = S_t q_t / sqrt(hd), autograd
#     for the gradients) computes them exactly; for each tensor the relative RMS error ||a - b|| / ||b|| of ours
#     against fla and of each against float64. Tolerance TOL = 0.02 on every one: both kernels round each tensor-core
#     operand to bf16 (unit roundoff u = 2^-8, a uniform rounding error of RMS u / sqrt(3) = 0.0023 relative) and
#     an output passes through about 6 such roundings (o) to 10 (the gradients) in chains whose errors add in
#     quadrature: sqrt(10) x 0.0023 = 0.007 for one implementation against float64, sqrt(2) x that = 0.010 between
#     two; TOL is twice that. A larger error is a bug, not rounding.
#  2. speed: fla forward, and forward + backward, at every shape bench_gdn times (T 1024 .. 16384, head_dim 64,
#     128, 256; h = width 768 / hd, B = 16384 tokens / T, inputs drawn as bench_gdn draws them), CUDA events, the
#     mean of --reps after one warm-up (fla's first call at a head_dim compiles and autotunes its Triton kernels:
#     that call is the warm-up's). Shortest T first; a shape that would end after --budget seconds (twice
#     the run time of the previous T at its head_dim, its compile left out) is not run (said so). Each line gives ours / fla speed (fla's ms / ours: above 1, ours is faster) where bench_gdn's log
#     (--ours) has the row.
# Exit status: 0; 1 when a tensor disagrees beyond TOL (or a dump is unreadable); 3 no GPU visible to torch; 4 fla
# cannot be imported (its wheel not on PYTHONPATH, or a dependency, einops, missing); 5 no torch or numpy. Needs
# torch with CUDA and Triton; dev only, not part of the trainer.
import argparse
import glob
import math
import os
import struct
import sys
import time

try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"gdn_fla: python3 cannot import torch and numpy ({e})")
    sys.exit(5)
from sdpa_bench import time_ms  # beside this file in dev/peer/ and the bundle's peer/: CUDA events, one warm-up


TOL = 0.02


def read_dump(path, dev):
    """The arrays of one bench_gdn --dump file, as (B, T, h, hd) / (B, T, h) tensors on dev."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:8] != b"PRISMGDN" or len(raw) < 24:
        raise ValueError(f"{path}: not a bench_gdn dump (no PRISMGDN header)")
    B, T, h, hd = struct.unpack("<4i", raw[8:24])
    at = 24
    out = {}

    def take(name, dtype, shape):
        nonlocal at
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        if at + n > len(raw):
            raise ValueError(f"{path}: ends inside {name} (truncated?)")
        a = np.frombuffer(raw, dtype=dtype, count=n // np.dtype(dtype).itemsize, offset=at).reshape(shape)
        t = torch.from_numpy(a.copy()).to(dev)
        out[name] = t.view(torch.bfloat16) if dtype == np.int16 else t
        at += n

    for name in ("q", "k", "v"):
        take(name, np.int16, (B, T, h, hd))
    take("beta", np.float32, (B, T, h))
    take("g", np.float32, (B, T, h))
    take("dout", np.int16, (B, T, h, hd))
    take("o", np.int16, (B, T, h, hd))
    for name in ("dq", "dk", "dv"):
        take(name, np.int16, (B, T, h, hd))
    take("dbeta", np.float32, (B, T, h))
    take("dg", np.float32, (B, T, h))
    if at != len(raw):
        raise ValueError(f"{path}: {len(raw) - at} bytes after the last array (another layout?)")
    return (B, T, h, hd), out


def recurrence64(q, k, v, beta, g):
    """o (B, T, h, hd) of the gated delta rule, float64, one row at a time (S: value rows by key columns)."""
    B, T, h, hd = q.shape
    S = torch.zeros(B, h, hd, hd, dtype=torch.float64, device=q.device)
    outs = []
    for t in range(T):
        kt, vt, qt = k[:, t], v[:, t], q[:, t]  # (B, h, hd)
        bt, dt = beta[:, t, :, None], torch.exp(g[:, t])[:, :, None, None]
        S = dt * S
        Sk = torch.einsum("bhrx,bhx->bhr", S, kt)
        S = S + torch.einsum("bhr,bhx->bhrx", bt * (vt - Sk), kt)
        outs.append(torch.einsum("bhrx,bhx->bhr", S, qt) / math.sqrt(hd))
    return torch.stack(outs, dim=1)


def rel(a, b):
    a, b = a.double(), b.double()
    return (torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b).clamp_min(1e-30)).item()


def fla_outputs(chunk, x):
    """fla's o and gradients on the dump's inputs (leaves of their own dtype), dout its upstream gradient."""
    leaves = {n: x[n].clone().requires_grad_(True) for n in ("q", "k", "v", "beta", "g")}
    hd = x["q"].shape[-1]
    o, _ = chunk(leaves["q"], leaves["k"], leaves["v"], leaves["g"], leaves["beta"], scale=1 / math.sqrt(hd))
    o.backward(x["dout"])
    return o.detach(), {"d" + n: t.grad for n, t in leaves.items()}


def reference_outputs(x):
    leaves = {n: x[n].double().requires_grad_(True) for n in ("q", "k", "v", "beta", "g")}
    o = recurrence64(leaves["q"], leaves["k"], leaves["v"], leaves["beta"], leaves["g"])
    o.backward(x["dout"].double())
    return o.detach(), {"d" + n: t.grad for n, t in leaves.items()}


def agreement(chunk, paths, dev):
    ok, worst = True, (0.0, "")
    for path in paths:
        try:
            (B, T, h, hd), x = read_dump(path, dev)
        except (OSError, ValueError) as e:
            print(f"agree {os.path.basename(path)}: FAILED: {e}")
            ok = False
            continue
        fo, fg = fla_outputs(chunk, x)
        ro, rg = reference_outputs(x)
        parts = []
        for name, ours, fla, ref in [("o", x["o"], fo, ro)] + [(n, x[n], fg[n], rg[n]) for n in
                                                                 ("dq", "dk", "dv", "dbeta", "dg")]:
            e = (rel(ours, fla), rel(ours, ref), rel(fla, ref))
            bad = e[0] > TOL or e[1] > TOL
            ok = ok and not bad
            if max(e[0], e[1]) > worst[0]:
                worst = (max(e[0], e[1]), f"{name} at T {T} hd {hd}")
            parts.append(f"{name} {e[0]:.4f}/{e[1]:.4f}/{e[2]:.4f}{' FAILED' if bad else ''}")
        print(f"agree B {B} T {T} h {h} hd {hd} (rel RMS ours-fla/ours-f64/fla-f64, tol {TOL}): " + "; ".join(parts))
    return ok, worst


def ours_rows(path):
    """bench_gdn's table: (T, hd) -> (B, h, ours fwd + bwd ms, ours fwd ms)."""
    rows = {}
    if path and os.path.exists(path):
        with open(path) as f:
            for line in f:
                p = line.split()
                if len(p) >= 11 and all(s.isdigit() for s in p[:4]):
                    rows[(int(p[0]), int(p[1]))] = (int(p[2]), int(p[3]), float(p[4]) + float(p[5]), float(p[4]))
    return rows


def speed(chunk, Ts, hds, width, tokens, reps, budget, ours, dev, t0):
    ratios, last = {}, {}  # last: the seconds the previous shape of each head_dim ran (its compile left out)
    for T in Ts:
        for hd in hds:
            B, h = max(1, tokens // T), max(1, width // hd)
            if time.time() - t0 + 2 * last.get(hd, 0.0) > budget:  # T doubles: about twice the last one's time
                print(f"speed T {T} hd {hd} B {B} h {h}: not run (it would end past the {budget:.0f} s budget)")
                continue
            gen = torch.Generator(device=dev).manual_seed(T * 31 + hd)
            q = torch.nn.functional.normalize(torch.randn(B, T, h, hd, device=dev, generator=gen), dim=-1)
            k = torch.nn.functional.normalize(torch.randn(B, T, h, hd, device=dev, generator=gen), dim=-1)
            q, k = q.bfloat16().requires_grad_(True), k.bfloat16().requires_grad_(True)
            v = (0.5 * torch.randn(B, T, h, hd, device=dev, generator=gen)).bfloat16().requires_grad_(True)
            beta = torch.sigmoid(torch.randn(B, T, h, device=dev, generator=gen)).requires_grad_(True)
            g = (-0.3 * torch.rand(B, T, h, device=dev, generator=gen)).requires_grad_(True)
            do = (0.5 * torch.randn(B, T, h, hd, device=dev, generator=gen)).bfloat16()
            scale = 1 / math.sqrt(hd)

            def fwd():
                with torch.no_grad():
                    chunk(q, k, v, g, beta, scale=scale)

            def fwd_bwd():
                o, _ = chunk(q, k, v, g, beta, scale=scale)
                o.backward(do)

            f, fb = time_ms(fwd, reps), time_ms(fwd_bwd, reps)
            last[hd] = (reps + 1) * (f + fb) / 1e3 + 0.5  # its timed runs and warm-ups, and the inputs' set-up
            line = f"speed T {T} hd {hd} B {B} h {h}: fla fwd {f:.3f} ms fwd+bwd {fb:.3f} ms"
            if (T, hd) in ours:
                ob, of = ours[(T, hd)][2], ours[(T, hd)][3]
                ratios[(T, hd)] = fb / ob
                line += (f" | ours fwd {of:.3f} ms fwd+bwd {ob:.3f} ms"
                         f" | speed ours/fla fwd {f / of:.2f}x fwd+bwd {fb / ob:.2f}x")
            print(line, flush=True)
    return ratios


def main():
    ap = argparse.ArgumentParser(description="fla's chunk_gated_delta_rule beside bench_gdn: agreement and speed.")
    ap.add_argument("--ours", default="", help="bench_gdn's output (its table rows), for the ratios")
    ap.add_argument("--dumps", default="", help="the folder of bench_gdn --dump's files, for the agreement")
    ap.add_argument("--T", default="1024,2048,4096,8192,16384")
    ap.add_argument("--hd", default="64,128,256")
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--budget", type=float, default=1e9, help="seconds; later shapes are not run")
    a = ap.parse_args()
    t0 = time.time()
    if not torch.cuda.is_available():
        print("gdn_fla: no GPU visible to torch")
        sys.exit(3)
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as chunk
        import fla
    except ImportError as e:
        print(f"gdn_fla: error: cannot import flash-linear-attention ({e}); the bundle's run.sh unpacks "
              "wheels/fla_core-*.whl onto PYTHONPATH (einops must be installed)")
        sys.exit(4)
    dev = torch.device("cuda")
    print(f"fla {fla.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    paths = sorted(glob.glob(os.path.join(a.dumps, "gdn_T*_hd*.bin"))) if a.dumps else []
    ok, worst = agreement(chunk, paths, dev) if paths else (True, (0.0, ""))
    if not paths:
        print("agree: no bench_gdn dumps (--dumps): not checked")
    Ts, hds = [int(x) for x in a.T.split(",")], [int(x) for x in a.hd.split(",")]
    ratios = speed(chunk, Ts, hds, a.width, a.tokens, a.reps, a.budget, ours_rows(a.ours), dev, t0)
    agree = ("not checked" if not paths else
             f"{'PASS' if ok else 'FAILED'} (worst rel RMS {worst[0]:.4f}, {worst[1]}; tol {TOL})")
    at = max((T for T, _ in ratios), default=None)
    sp = "; ".join(f"hd {hd} {ratios[(at, hd)]:.2f}x" for hd in hds if (at, hd) in ratios) if at else "n/a"
    print(f"summary: agreement {agree}; speed ours/fla fwd+bwd at T {at}: {sp}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
