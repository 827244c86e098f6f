# dev/peer/peer_torch.py: the PyTorch peer of a Prism model, for speed ratios (dev/peer/bench_peer.py, the GPU
# bundle's peer stage). Not part of the trainer: it needs torch and nothing else.
#
# It trains the model Prism would train, from the same weights and on the same tokens:
#   - the configuration and weights of a Prism model.bin, through `export`'s Hugging Face folder (config.json and
#     model.safetensors, read here without the safetensors package);
#   - nanoGPT's shape of model: per layer, x[..., :w] += out(SDPA(rope(qkv(norm(x[..., :w]))))), then
#     x[..., :w] += down(silu(gate) * up) over norm(x[..., :w]); RoPE on interleaved pairs (2i, 2i+1) as Prism's,
#     LayerNorm or RMSNorm, tied or untied head; every per-layer column of config.json (each layer_* list, read
#     by one loop; a column this file does not model is refused): widths (the Xformer's slices of the stream),
#     heads, K/V heads (GQA; 0: no attention), SwiGLU hidden sizes (0: no MLP), windows and NoPE layers
#     (layer_rope 0); attention through F.scaled_dot_product_attention (FlashAttention-2 / cuDNN /
#     memory-efficient on a GPU), a window as a boolean mask of the visibility rule (attention_span.h);
#   - the first B * (T + 1) tokens of a shard as Prism's loader reads them with --no-shuffle (row b is window b:
#     tokens [b T, b T + T + 1)), the same batch every step;
#   - AdamW (torch.optim.AdamW) with Prism's hyper-parameters: decay on matrices (embedding included), never norms;
#     Prism's learning-rate schedule (linear warmup, cosine to final_lr_frac * lr) and global-norm clipping;
#   - fp32 on the CPU, bf16 autocast on a GPU (weights and AdamW state fp32), eager or torch.compile.
# Prints one JSON line: the first step's loss (from the loaded weights, before any update: compare it with
# Prism's step 1), every step's loss, the median step time and tokens/s over the steps after --warmup-steps, and
# the peak memory (GPU: torch.cuda.max_memory_allocated; CPU: the process's peak RSS).
import argparse
import json
import math
import os
import resource
import statistics
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def read_safetensors(path):
    """{name: fp32 tensor} of a safetensors file (8-byte header length, JSON header, raw little-endian data)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > 100 << 20:
            raise SystemExit(f"peer: {path}: header of {n} bytes claimed; not a safetensors file")
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=_DTYPES[info["dtype"]]) if b > a else torch.empty(0)
        out[name] = t.reshape(info["shape"]).float()
    return out


class Norm(nn.Module):
    def __init__(self, width, kind, eps):
        super().__init__()
        self.kind, self.eps = kind, eps
        self.weight = nn.Parameter(torch.ones(width))
        self.bias = nn.Parameter(torch.zeros(width)) if kind == "layernorm" else None

    def forward(self, x):
        if self.kind == "layernorm":  # biased variance, eps inside the square root: F.layer_norm's definition
            return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)
        return F.rms_norm(x, x.shape[-1:], self.weight, self.eps)


def rope_tables(T, head_dim, theta, device):
    """cos, sin (T, head_dim / 2) of position * theta^(-2i / head_dim), in float64 then fp32, as Prism computes them."""
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    freq = torch.pow(torch.tensor(float(theta), dtype=torch.float64), -2.0 * i / head_dim)
    angle = torch.arange(T, dtype=torch.float64)[:, None] * freq
    return torch.cos(angle).float().to(device), torch.sin(angle).float().to(device)


def rope(x, cos, sin):
    """(a, b) -> (a cos - b sin, a sin + b cos) on the interleaved pairs of x (B, h, T, head_dim)."""
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


# The per-layer columns of config.json (export's layer_* lists) this peer models, and each one's value when the
# list is absent (an older export): everything else a layer_* list could say is refused, not ignored.
_COLUMNS = {"layer_widths": None, "layer_heads": None, "layer_kv_heads": "layer_heads",
            "layer_hidden_sizes": None, "layer_windows": 0, "layer_rope": 1}


def layer_columns(cfg):
    """[{column: value}] per layer, from every layer_* list of config.json."""
    L = cfg["num_hidden_layers"]
    lists = {k: v for k, v in cfg.items() if k.startswith("layer_") and isinstance(v, list)}
    unknown = sorted(set(lists) - set(_COLUMNS))
    if unknown:
        raise SystemExit(f"peer: config.json has per-layer columns this peer does not model: {unknown}")
    for k, default in _COLUMNS.items():
        if k not in lists:
            if default is None:
                raise SystemExit(f"peer: config.json has no {k}")
            lists[k] = lists[default] if isinstance(default, str) else [default] * L
        if len(lists[k]) != L:
            raise SystemExit(f"peer: config.json's {k} has {len(lists[k])} entries for {L} layers")
    return [{k: v[l] for k, v in lists.items()} for l in range(L)]


class Block(nn.Module):
    def __init__(self, cfg, col, T, device):
        super().__init__()
        self.w, self.h, self.kv = col["layer_widths"], col["layer_heads"], col["layer_kv_heads"]
        self.hd, self.hidden, self.rope = self.w // self.h, col["layer_hidden_sizes"], bool(col["layer_rope"])
        self.kw = self.kv * self.hd
        self.scale = 1.0 / self.hd if cfg.get("attention_scale") == "1/head_dim" else 1.0 / math.sqrt(self.hd)
        kind, eps = cfg["norm_type"], cfg["norm_eps"]
        if self.kv:  # 0: no attention sub-block
            self.attn_norm = Norm(self.w, kind, eps)
            self.qkv = nn.Linear(self.w, self.w + 2 * self.kw, bias=False)
            self.out = nn.Linear(self.w, self.w, bias=False)
            if self.rope:
                cos, sin = rope_tables(T, self.hd, cfg.get("rope_theta", 10000.0), device)
                self.register_buffer("cos", cos, persistent=False)
                self.register_buffer("sin", sin, persistent=False)
            # key j visible to query i iff i - W < j <= i (attention_span.h's att_visible); None: plain causal
            W, i = col["layer_windows"], torch.arange(T, device=device)
            self.mask = ((i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - W)) if W and W < T else None
        if self.hidden:  # 0: no MLP sub-block
            self.mlp_norm = Norm(self.w, kind, eps)
            self.gate_up = nn.Linear(self.w, 2 * self.hidden, bias=False)
            self.down = nn.Linear(self.hidden, self.w, bias=False)

    def add(self, x, y):  # the layer writes the leading w coordinates of the stream; the rest pass by
        return x + y if self.w == x.shape[-1] else torch.cat((x[..., : self.w] + y, x[..., self.w :]), dim=-1)

    def attention(self, x):
        B, T, _ = x.shape
        q, k, v = self.qkv(self.attn_norm(x[..., : self.w])).split((self.w, self.kw, self.kw), dim=-1)
        q = q.view(B, T, self.h, self.hd).transpose(1, 2)
        k, v = (t.view(B, T, self.kv, self.hd).transpose(1, 2) for t in (k, v))
        if self.rope:
            cos, sin = self.cos[:T].to(q.dtype), self.sin[:T].to(q.dtype)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
        if self.kv < self.h:  # query head j reads K/V head j // (h / kv)
            k, v = (t.repeat_interleave(self.h // self.kv, dim=1) for t in (k, v))
        if self.mask is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask[:T, :T], scale=self.scale)
        return self.out(y.transpose(1, 2).reshape(B, T, self.w))

    def forward(self, x):
        if self.kv:
            x = self.add(x, self.attention(x))
        if self.hidden:
            gate, up = self.gate_up(self.mlp_norm(x[..., : self.w])).split(self.hidden, dim=-1)
            x = self.add(x, self.down(F.silu(gate) * up))
        return x


class Peer(nn.Module):
    def __init__(self, cfg, T, device):
        super().__init__()
        self.d, self.D, self.Df = cfg["hidden_size"], cfg["residual_width"], cfg["final_norm_width"]
        self.tied = cfg.get("tie_word_embeddings", True)
        self.embed = nn.Embedding(cfg["vocab_size"], self.d)
        self.blocks = nn.ModuleList(Block(cfg, col, T, device) for col in layer_columns(cfg))
        self.norm = Norm(self.Df, cfg["norm_type"], cfg["norm_eps"])
        self.head = None if self.tied else nn.Linear(self.d, cfg["vocab_size"], bias=False)

    def load_prism(self, st):
        """Copies export's tensors (hf/hf_config.h names them) into this module; every tensor must be used."""
        names = {"embed.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight",
                 "norm.bias": "model.norm.bias", "head.weight": "lm_head.weight"}
        for l in range(len(self.blocks)):
            for ours, theirs in (("attn_norm", "attn_norm"), ("mlp_norm", "mlp_norm"), ("qkv", "attn.qkv"),
                                 ("out", "attn.out"), ("gate_up", "mlp.gate_up"), ("down", "mlp.down")):
                for p in ("weight", "bias"):
                    names[f"blocks.{l}.{ours}.{p}"] = f"model.layers.{l}.{theirs}.{p}"
        used = set()
        with torch.no_grad():
            for name, p in self.named_parameters():
                src = names[name]
                if src not in st or tuple(st[src].shape) != tuple(p.shape):
                    raise SystemExit(f"peer: {src} missing or of another shape than {tuple(p.shape)}")
                p.copy_(st[src])
                used.add(src)
        left = sorted(set(st) - used)
        if left:
            raise SystemExit(f"peer: export holds tensors this peer does not use: {left[:3]}")

    def forward(self, idx, targets):
        x = self.embed(idx)
        if self.D > self.d:
            x = F.pad(x, (0, self.D - self.d))
        for b in self.blocks:
            x = b(x)
        h = self.norm(x[..., : self.Df])[..., : self.d]
        logits = F.linear(h, self.embed.weight if self.tied else self.head.weight)
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def read_batch(shard, B, T):
    """inputs, targets (B, T) int64: rows are windows 0 .. B-1 of the shard (llm.c's format: 256 int32, uint16)."""
    with open(shard, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        if header[0] != 20240520:
            raise SystemExit(f"peer: {shard} is not a token shard (magic {header[0]})")
        n = B * T + 1
        if header[2] < n:
            raise SystemExit(f"peer: {shard} holds {header[2]} tokens, fewer than B T + 1 = {n}")
        tok = torch.frombuffer(bytearray(f.read(2 * n)), dtype=torch.uint16).long()
    rows = torch.stack([tok[b * T : b * T + T + 1] for b in range(B)])
    return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()


def lr_at(step, total, warmup, lr, final_frac):
    """Prism's schedule (train_step.h lr_at): linear warmup, then cosine to final_frac * lr."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - 1 - warmup))
    lo = final_frac * lr
    return lo + (lr - lo) * 0.5 * (1.0 + math.cos(math.pi * progress))


def peak_memory(device):
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main():
    ap = argparse.ArgumentParser(description="Train a Prism model's PyTorch peer; print one JSON line of figures.")
    ap.add_argument("--hf", required=True, help="export's folder of the model (config.json, model.safetensors)")
    ap.add_argument("--tokens", required=True, help="a token shard; the batch is its first B * T + 1 tokens")
    ap.add_argument("-b", type=int, required=True)
    ap.add_argument("-t", type=int, required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup-steps", type=int, default=2, help="steps left out of the timing (and compile)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--sched-steps", type=int, default=0, help="the run's total steps for the schedule (0: --steps)")
    ap.add_argument("--warmup-frac", type=float, default=0.025)
    ap.add_argument("--final-lr-frac", type=float, default=0.1)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--adam-eps", type=float, default=1e-8)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    with open(os.path.join(a.hf, "config.json")) as f:
        cfg = json.load(f)
    model = Peer(cfg, a.t, device)
    model.load_prism(read_safetensors(os.path.join(a.hf, "model.safetensors")))
    model.to(device)
    matrices = [p for n, p in model.named_parameters() if p.dim() >= 2]
    norms = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": matrices, "weight_decay": a.wd}, {"params": norms, "weight_decay": 0.0}],
                            lr=a.lr, betas=(a.beta1, a.beta2), eps=a.adam_eps, foreach=True)
    step_fn = model
    compile_s = None
    if a.compile:
        step_fn = torch.compile(model)
    x, y = (t.to(device) for t in read_batch(a.tokens, a.b, a.t))
    total = a.sched_steps or a.steps
    warmup = math.floor(a.warmup_frac * total + 0.5)  # Prism's lround
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast("cpu", enabled=False)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    losses, times = [], []
    for step in range(a.steps):
        sync()
        t0 = time.perf_counter()
        with autocast:
            loss = step_fn(x, y)
        loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, warmup, a.lr, a.final_lr_frac)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())  # the step's read-back, as Prism reads its loss back every step
        sync()
        times.append(time.perf_counter() - t0)
        if a.compile and step == 0:
            compile_s = times[0]
    timed = times[a.warmup_steps:] or times
    step_s = statistics.median(timed)
    print(json.dumps({
        "peer": "pytorch", "torch": torch.__version__, "device": str(device),
        "dtype": "bf16 autocast" if device.type == "cuda" else "fp32", "compiled": a.compile,
        "compile_s": compile_s, "B": a.b, "T": a.t, "steps": a.steps, "timed_steps": len(timed),
        "first_loss": losses[0], "losses": losses, "step_ms": 1000 * step_s, "tokens_per_s": a.b * a.t / step_s,
        "peak_memory_bytes": peak_memory(device), "threads": torch.get_num_threads(),
    }))


if __name__ == "__main__":
    main()
