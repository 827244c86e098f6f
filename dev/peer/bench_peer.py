#!/usr/bin/env python3
# dev/peer/bench_peer.py: Prism against its PyTorch peer (dev/peer/peer_torch.py), alternately, on one machine, so
# that every speed figure is a ratio. Standard library only; the peer runs under --python (a Python with torch).
#
# For each model (PRESET[:HEADS[:WIDTHS]][@BxT], e.g. 124M@4x64, tiny, 124M:prism@16x1024):
#   1. train_prism trains one step at --lr 0 from its seed: model.bin is the initial weights, and its step-1 loss
#      is the loss of those weights on the first batch (--no-shuffle: windows 0 .. B-1 of the first shard);
#   2. export turns that model.bin into the folder the peer loads;
#   3. --repeats times, alternately: train_prism for --steps steps, then the peer for --steps steps, each from the
#      same initial weights on the same tokens, each on the same threads; a run's speed is the median tokens/s of
#      its steps after the first --warmup-steps;
#   4. one line per model: ours and the peer's tokens/s (median [min, max] over the repeats), the ratio ours / peer
#      (median [min, max] over the repeats), the peer's peak memory, and both first-step losses with their difference;
#   5. the machine line (util/machine_load.h's, the same rule): the date, the cores, the load average at the start
#      and the end, wall and CPU time (the runs', children included), and BUSY when other work exceeded 0.5 per core,
#      in which case the figures are not the machine's.
# With --llmc DIR (a folder where llm.c's train_gpt2 was built and its gpt2_124M.bin and data were prepared: not
# part of this repository), its train_gpt2 (B 4, T 64) is run alternately too, against ours at 124M@4x64.
# Exit status 1 when a first-step loss differs by more than --loss-tol (the two computations are not the same, so
# the speed comparison would be worthless), or a run fails.
import argparse
import glob
import json
import os
import resource
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def parse_model(spec):
    """'124M:prism@4x64' -> (preset, heads, widths, B, T); B, T None where the preset's defaults apply."""
    name, _, bt = spec.partition("@")
    parts = name.split(":")
    if len(parts) > 3 or not parts[0]:
        raise SystemExit(f"bench_peer: model '{spec}': expected PRESET[:HEADS[:WIDTHS]][@BxT]")
    B = T = None
    if bt:
        m = re.fullmatch(r"(\d+)x(\d+)", bt)
        if not m:
            raise SystemExit(f"bench_peer: model '{spec}': the batch is BxT, e.g. @4x64")
        B, T = int(m.group(1)), int(m.group(2))
    return parts[0], (parts[1] if len(parts) > 1 else "uniform"), (parts[2] if len(parts) > 2 else "uniform"), B, T


def run(cmd, env=None, timeout=None, what="", cwd=None):
    r = subprocess.run(cmd, env=env, timeout=timeout, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if r.returncode != 0:
        tail = "\n".join(r.stdout.strip().splitlines()[-3:])
        raise RuntimeError(f"{what or cmd[0]} failed (exit {r.returncode}): {tail}")
    return r.stdout


def log_steps(out_dir):
    """(step, train_loss, tokens_per_s) of each step line of OUT/log.jsonl."""
    rows = []
    with open(os.path.join(out_dir, "log.jsonl")) as f:
        for line in f:
            o = json.loads(line)
            if "step" in o and "train_loss" in o and "tokens_per_s" in o:
                rows.append((o["step"], o["train_loss"], o["tokens_per_s"]))
    return rows


def spread(xs):
    return f"{statistics.median(xs):.4g} [{min(xs):.4g}, {max(xs):.4g}]"


class Bench:
    def __init__(self, a, work):
        self.a, self.work = a, work
        self.env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
        self.shard = a.train or sorted(glob.glob(os.path.join(REPO, "data/default/*_train_*.bin")))[0]

    def ours_cmd(self, model, out, steps, lr):
        preset, heads, widths, B, T = model
        cmd = [self.a.prism, "-m", preset, "-s", heads, "-w", widths, "--no-shuffle", "--train", self.shard,
               "--steps", str(steps), "--val-every", "0", "--sample-every", "0", "-o", out, "--overwrite"]
        if self.a.device == "cpu":
            cmd.append("--cpu")
        if lr is not None:
            cmd += ["--lr", repr(lr)]
        if B:
            cmd += ["-b", str(B), "-t", str(T), "--total-batch", str(B * T)]
        return cmd

    def init(self, model, tag):
        """The initial weights as an export folder, ours' first-step loss, and the run's B, T and lr."""
        out = os.path.join(self.work, f"init_{tag}")
        run(self.ours_cmd(model, out, 1, 0.0), self.env, what="train_prism (initial weights)")
        with open(os.path.join(out, "run.json")) as f:
            plan = json.load(f)["plan"]
        first = log_steps(out)[0][1]
        hf = os.path.join(self.work, f"hf_{tag}")
        run([self.a.export, os.path.join(out, "model.bin"), "-o", hf, "--overwrite"], what="export")
        return hf, first, plan

    def ours(self, model, tag):
        """Median tokens/s of ours over the timed steps, and the run's lr (the model's default unless --lr)."""
        out = os.path.join(self.work, f"ours_{tag}")
        run(self.ours_cmd(model, out, self.a.steps, self.a.lr), self.env, timeout=self.a.timeout, what="train_prism")
        rows = log_steps(out)
        timed = [r[2] for r in rows[self.a.warmup_steps:]] or [r[2] for r in rows]
        with open(os.path.join(out, "run.json")) as f:
            return statistics.median(timed), json.load(f)["plan"]["lr"]

    def peer(self, hf, plan, lr, compiled):
        cmd = [self.a.python, os.path.join(HERE, "peer_torch.py"), "--hf", hf, "--tokens", self.shard,
               "-b", str(plan["B"]), "-t", str(plan["T"]), "--steps", str(self.a.steps),
               "--warmup-steps", str(self.a.warmup_steps), "--lr", repr(lr), "--device", self.a.device,
               "--threads", str(self.a.threads)]
        if compiled:
            cmd.append("--compile")
        out = run(cmd, self.env, timeout=self.a.timeout, what="peer")
        return json.loads(out.strip().splitlines()[-1])

    def llmc(self):
        """llm.c's train_gpt2 (B 4, T 64): median tokens/s of its step lines after the first few."""
        out = run(["./train_gpt2"], self.env, timeout=self.a.timeout, what="llm.c train_gpt2", cwd=self.a.llmc)
        ms = [float(m) for m in re.findall(r"step \d+: train loss [0-9.]+ \(took ([0-9.]+) ms\)", out)]
        if not ms:
            raise RuntimeError("llm.c train_gpt2 printed no step lines")
        ms = ms[self.a.warmup_steps:] or ms
        return 4 * 64 / (statistics.median(ms) / 1000)


class MachineLoad:
    """What the machine was doing while the figures were measured (util/machine_load.h's rule, in Python)."""

    BUSY_PER_CORE = 0.5

    def __init__(self):
        self.load0 = os.getloadavg()[0]
        self.cpu0 = self.cpu()
        self.t0 = time.monotonic()
        self.date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())

    @staticmethod
    def cpu():
        s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime

    def line(self):
        end, wall, cpu, cores = os.getloadavg()[0], time.monotonic() - self.t0, self.cpu() - self.cpu0, os.cpu_count()
        own = cpu / wall if wall > 0 else 0
        others = max(self.load0, end - own) / cores
        busy = others > self.BUSY_PER_CORE
        return (f"machine: {self.date}, {cores} cores, load average {self.load0:.2f} at the start, {end:.2f} at the "
                f"end; {wall:.1f} s wall, {cpu:.1f} s CPU ({own:.2f} cores busy with this work); "
                f"{'BUSY' if busy else 'quiet'} (other work {others:.2f} per core"
                f"{', over 0.5: the speed figures above are not this machine' + chr(39) + 's' if busy else ''})")


def main():
    ap = argparse.ArgumentParser(description="Prism vs its PyTorch peer, alternately: ratios of tokens/s.")
    ap.add_argument("--models", default="124M@4x64,tiny", help="comma-separated PRESET[:HEADS[:WIDTHS]][@BxT]")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=6, help="steps per run (the first --warmup-steps are not timed)")
    ap.add_argument("--warmup-steps", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (ours on the GPU, the peer under bf16 autocast)")
    ap.add_argument("--arms", default="eager", help="the peer's modes: eager, compiled (torch.compile), or both")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for both (default: every core)")
    ap.add_argument("--lr", type=float, default=None, help="peak lr for both (default: Prism's for the model)")
    ap.add_argument("--loss-tol", type=float, default=None,
                    help="largest first-step loss difference (default 1e-3 on the CPU, fp32; 0.05 on a GPU, bf16)")
    ap.add_argument("--prism", default=os.path.join(REPO, "train_prism"))
    ap.add_argument("--export", default=os.path.join(REPO, "export"))
    ap.add_argument("--python", default=sys.executable, help="a Python with torch, for the peer")
    ap.add_argument("--train", default=None, help="the token shard (default: the first of data/default/)")
    ap.add_argument("--llmc", default=None, help="folder of a built llm.c (train_gpt2 and its files), optional")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    ap.add_argument("--keep", default=None, help="keep the runs in this folder (default: a temporary one, removed)")
    a = ap.parse_args()
    if not set(a.arms.split(",")) <= {"eager", "compiled"}:
        raise SystemExit(f"bench_peer: --arms '{a.arms}': the arms are eager and compiled")
    tol = a.loss_tol if a.loss_tol is not None else (1e-3 if a.device == "cpu" else 0.05)
    for exe in (a.prism, a.export):
        if not os.access(exe, os.X_OK):
            raise SystemExit(f"bench_peer: {exe} not found: build it first (make train_prism export)")
    work = a.keep or tempfile.mkdtemp(prefix="prism-peer.")
    os.makedirs(work, exist_ok=True)
    b = Bench(a, work)
    load = MachineLoad()
    bad = False
    print(f"bench_peer: {a.device}, {a.threads} threads, {a.repeats} alternating repeats of {a.steps} steps "
          f"({a.warmup_steps} untimed), tokens {os.path.relpath(b.shard)}")
    try:
        for i, spec in enumerate(a.models.split(",")):
            model = parse_model(spec)
            tag = f"{i}_{model[0]}"
            hf, first_ours, plan = b.init(model, tag)
            arms = [(k, k == "compiled") for k in a.arms.split(",")]
            ours_tps, peer_tps = [], {k: [] for k, _ in arms}
            peer_last = {}
            for r in range(a.repeats):
                tps, lr = b.ours(model, tag)
                ours_tps.append(tps)
                for k, c in arms:
                    p = b.peer(hf, plan, lr, c)
                    peer_tps[k].append(p["tokens_per_s"])
                    peer_last[k] = p
            for k, _ in arms:
                p = peer_last[k]
                ratios = [o / q for o, q in zip(ours_tps, peer_tps[k])]
                diff = abs(p["first_loss"] - first_ours)
                ok = diff <= tol
                bad |= not ok
                print(f"{spec} B {plan['B']} T {plan['T']}: ours {spread(ours_tps)} tok/s | PyTorch {k} "
                      f"{spread(peer_tps[k])} tok/s, peak {p['peak_memory_bytes'] / 2**20:.0f} MiB | "
                      f"first-step loss ours {first_ours:.5f} PyTorch {p['first_loss']:.5f} "
                      f"(|diff| {diff:.2e}{'' if ok else f' > {tol}: NOT THE SAME COMPUTATION'}) | "
                      f"ours / PyTorch {k} {spread(ratios)}", flush=True)
            if model[0] == "124M" and plan["B"] == 4 and plan["T"] == 64 and a.llmc:
                l = [b.llmc() for _ in range(a.repeats)]
                print(f"{spec}: llm.c train_gpt2 {spread(l)} tok/s | ours / llm.c "
                      f"{statistics.median(ours_tps) / statistics.median(l):.3g}", flush=True)
        if not a.llmc:
            print("llm.c: not measured (give --llmc DIR, a folder where train_gpt2 was built and prepared)")
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"bench_peer: error: {e}")
        bad = True
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(load.line(), flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
