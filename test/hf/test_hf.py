#!/usr/bin/env python3
"""test/hf/test_hf.py: `make test-hf`. Exports of Prism models loaded in Hugging Face transformers, checked
against our own numbers:

  logits     uniform, Prism, X (the Xformer recipe: RMSNorm, untied, 1/head_dim), lambda, RMSNorm, untied and
             Prism x X models, and the per-layer columns: GQA (2 groups), MQA, a local/global interleave (window 16,
             two local layers to one global, at a sequence of 64), layers without attention (the first among them)
             or without an MLP, OpenELM's layer-wise heads and MLP, NoPE layers (no rotary embedding; alone, and
             with GQA and a local/global interleave), all of them at once on Prism x X, and a muP model (--param
             mup: logits x base_d / d, on X widths):
             AutoModelForCausalLM's fp32 logits against the CPU reference's (build/hf_check logits), relative
             difference max|hf - ref| / max|ref| at most 1e-5 (fp32 sums in another order: measured 6e-7 to 5e-6),
             once in one forward and once decoded token by token through the KV cache (past the window);
             a bf16 export loaded as fp32 against the reference run on the imported (rounded) model.bin;
             a config.json without the per-layer keys older exports lack loads and means what it meant
  round trip save_pretrained of the loaded model, imported back: the same model.bin, byte for byte (every kind
             with a per-layer column, X and muP); and a model fine-tuned for three AdamW steps in PyTorch (Prism, and
             the all-columns model), saved and imported: the reference's logits match its
  tokenizer AutoTokenizer on the export against tokenizer.h's ids of the default corpus' validation documents
  generate   greedy generate() against ./generate --temperature 0: the same text
  gdn        modeling_prism.py's Gated DeltaNet against transformers' own Qwen3-Next PyTorch code (no export needed):
             the gated delta rule, recurrent and chunked, against torch_recurrent_gated_delta_rule and
             torch_chunk_gated_delta_rule (outputs, final state and autograd gradients); one whole layer against
             Qwen3NextGatedDeltaNet with mapped weights (output, gradients of the input and every weight); all fp32,
             relative 1e-5 (docs/huggingface.md states the options matched and the figures); and a hybrid model's
             cached decode, generate() and left padding against its full forward
  visible    modeling_prism.py's visible() against attention_span.h's att_visible (build/hf_check visible) for every
             query, key and window below 24
  peer       dev/peer/peer_torch.py (the PyTorch peer the GPU bundle times) built from the export of every kind with
             a per-layer column: its loss on a batch against transformers' on the same tokens, relative 1e-5
  HFLM       lm-evaluation-harness's own HFLM loglikelihood() of every request of small HellaSwag, WinoGrande,
             PIQA and LAMBADA files (build/prepare_eval on fixtures) against eval_zeroshot's scorer on the same
             requests (build/hf_check requests), |difference| at most 1e-4 nats (fp32 sums of 10 to 60 terms), and
             acc / acc_norm / LAMBADA perplexity recomputed from HFLM's numbers against eval_zeroshot's --json
Exits 1 naming every failed check. A part that cannot run here (lm-eval not importable) prints
"SKIPPED: NEED: why" and counts as skipped, or as failed when NEED is one of the words of $PRISM_REQUIRE (CI's);
with PRISM_TEST_RESULTS set, the counts go to that file for test/summary.sh ("passed N", "failed N", "skipped N",
"failed_case ...", "skipped_case ..."), as the Catch2 binaries' listener writes them.
Run from the repository root (make test-hf builds what it needs).
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

torch.manual_seed(0)
torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()
EOT = 50256
T = 64
FAILED = []
PASSED = []
SKIPPED = []
WORK = tempfile.mkdtemp(prefix="prism_test_hf_")


def check(ok, what):
    print(("  ok    " if ok else "  FAIL  ") + what, flush=True)
    (PASSED if ok else FAILED).append(what)


def skip(need, what):
    """A part that cannot run here: skipped, or failed where $PRISM_REQUIRE names `need`."""
    if need in os.environ.get("PRISM_REQUIRE", "").split():
        check(False, f"{what}: skipped, but PRISM_REQUIRE says this environment has {need}")
    else:
        print(f"SKIPPED: {need}: {what}", flush=True)
        SKIPPED.append(f"{what} (needs {need})")


def write_results():
    path = os.environ.get("PRISM_TEST_RESULTS")
    if not path:
        return
    with open(path, "w") as f:
        f.write(f"passed {len(PASSED)}\nfailed {len(FAILED)}\nskipped {len(SKIPPED)}\n")
        f.writelines(f"failed_case {w}\n" for w in FAILED)
        f.writelines(f"skipped_case {w}\n" for w in SKIPPED)


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise SystemExit(f"test-hf: {' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r.stdout


SMALL = ["--d", "64", "--layers", "6", "--seq-len", str(T)]
KINDS = {
    "uniform": SMALL + ["--heads", "4"],
    "prism": SMALL + ["--heads", "4", "-s", "prism"],
    "x": ["-m", "200M"] + SMALL + ["-w", "x"],
    "lambda": SMALL + ["-w", "lambda", "--heads", "2"],
    "rmsnorm": SMALL + ["--heads", "4", "--norm", "rmsnorm"],
    "untied": SMALL + ["--heads", "4", "--untied"],
    "prism-x": SMALL + ["-w", "x", "-s", "prism", "--heads", "4"],
    "gqa": SMALL + ["--heads", "4", "--kv-heads", "gqa:2"],
    "mqa": SMALL + ["--heads", "4", "--kv-heads", "mqa"],
    "window": SMALL + ["--heads", "4", "--window", "local:16,2:1"],
    "no-attn": SMALL + ["--heads", "4", "--no-attention", "1,4"],
    "no-mlp": SMALL + ["--heads", "4", "--no-mlp", "2,6"],
    "openelm": SMALL + ["--heads", "4", "-s", "openelm", "--mlp", "openelm"],
    "nope": SMALL + ["--heads", "4", "--no-rope", "2,4"],
    # muP (--param mup) on X widths, untied: logits x base_d / d = 0.5 (config.json's mup_base_d), attention 1/head_dim
    "mup": SMALL + ["--heads", "4", "-w", "x", "--untied", "--param", "mup", "--mup-base-d", "32"],
    # Gated DeltaNet layers (2 gdn : 1 attention) over X widths: config.json's layer_mixers, the GDN tensors
    "hybrid": SMALL + ["--heads", "4", "--mixer", "gdn:2:1", "-w", "x"],
    "nope-gqa-window": SMALL + ["--heads", "4", "--no-rope", "2,4", "--kv-heads", "gqa:2", "--window", "local:16,2:1"],
    # every column at once; layer 2's window and the explicit KV-head count of layer 6 (= its heads) are words
    # that only prism_layer_words carries
    "combo": SMALL + ["-w", "x", "-s", "prism", "--heads", "4", "--kv-heads", "1,1,1,1,2,4", "--window", "8x3,0x3",
                      "--no-attention", "2", "--no-mlp", "5", "--mlp", "openelm", "--no-rope", "3,6", "--norm", "rmsnorm",
                      "--untied"],
}
COLUMNS = ["gqa", "mqa", "window", "no-attn", "no-mlp", "openelm", "nope", "nope-gqa-window", "combo"]


def make_kind(name, seed):
    d = os.path.join(WORK, name)
    os.makedirs(d)
    print(run(["build/hf_check", "make-model", d + "/model.bin", "--seed", str(seed), "--step", str(100 + seed)] + KINDS[name]).strip())
    run(["./export", d + "/model.bin", "-o", d + "/hf"])
    return d


def ref_logits(model_bin, tokens):
    path = os.path.join(WORK, "tokens.i32")
    with open(path, "wb") as f:
        f.write(tokens.to(torch.int32).contiguous().numpy().tobytes())
    run(["build/hf_check", "logits", model_bin, path, str(tokens.shape[0]), path + ".out"])
    flat = torch.frombuffer(bytearray(open(path + ".out", "rb").read()), dtype=torch.float32)
    return flat.view(tokens.shape[0], tokens.shape[1], -1)


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def cache_of(out):
    return out.cache if hasattr(out, "cache") else out.past_key_values


def check_logits(name, d):
    model = AutoModelForCausalLM.from_pretrained(d + "/hf", trust_remote_code=True, dtype=torch.float32).eval()
    tokens = torch.randint(0, EOT + 1, (2, T))
    ref = ref_logits(d + "/model.bin", tokens)
    with torch.no_grad():
        full = model(tokens).logits
        half = T // 2
        out = model(tokens[:, :half], use_cache=True)
        steps = [out.logits]
        cache = cache_of(out)
        for t in range(half, T):  # one token at a time through the KV cache
            out = model(tokens[:, t : t + 1], cache=cache, use_cache=True)
            cache = cache_of(out)
            steps.append(out.logits)
        cached = torch.cat(steps, dim=1)
    r_full, r_cached = rel(full, ref), rel(cached, ref)
    check(r_full <= 1e-5 and r_cached <= 1e-5,
          f"logits {name:8s} worst relative difference {r_full:.2e} (one forward), {r_cached:.2e} (KV cache), max |logit| {ref.abs().max():.2f}")
    return model, r_full, r_cached


def check_bf16(name, d):
    run(["./export", d + "/model.bin", "-o", d + "/hf16", "--dtype", "bf16"])
    run(["./import", d + "/hf16", "-o", d + "/rounded.bin"])
    model = AutoModelForCausalLM.from_pretrained(d + "/hf16", trust_remote_code=True, dtype=torch.float32).eval()
    tokens = torch.randint(0, EOT + 1, (1, T))
    with torch.no_grad():
        r = rel(model(tokens).logits, ref_logits(d + "/rounded.bin", tokens))
    size32, size16 = os.path.getsize(d + "/hf/model.safetensors"), os.path.getsize(d + "/hf16/model.safetensors")
    check(r <= 1e-5, f"bf16 {name:8s} export ({size16} bytes, fp32 {size32}) loaded as fp32 vs the reference on its imported model.bin: {r:.2e}")


def check_round_trip(name, d):
    model = AutoModelForCausalLM.from_pretrained(d + "/hf", trust_remote_code=True, dtype=torch.float32)
    model.save_pretrained(d + "/saved")
    run(["./import", d + "/saved", "-o", d + "/saved.bin"])
    same = open(d + "/saved.bin", "rb").read() == open(d + "/model.bin", "rb").read()
    check(same, f"round trip {name:8s} save_pretrained -> import: model.bin identical byte for byte ({os.path.getsize(d + '/model.bin')} bytes)")


def check_old_config(d):
    """An export written before the per-layer columns existed (no layer_kv_heads, layer_windows or layer_rope) still
    loads, means the same model, and imports to the same model.bin."""
    old = d + "/old"
    shutil.copytree(d + "/hf", old)
    config = json.load(open(old + "/config.json"))
    for key in ("layer_kv_heads", "layer_windows", "layer_rope"):
        config.pop(key, None)
    json.dump(config, open(old + "/config.json", "w"), indent=2)
    model = AutoModelForCausalLM.from_pretrained(old, trust_remote_code=True, dtype=torch.float32).eval()
    tokens = torch.randint(0, EOT + 1, (1, T))
    with torch.no_grad():
        r = rel(model(tokens).logits, ref_logits(d + "/model.bin", tokens))
    run(["./import", old, "-o", d + "/old.bin"])
    same = open(d + "/old.bin", "rb").read() == open(d + "/model.bin", "rb").read()
    check(r <= 1e-5 and same, "a config.json without layer_kv_heads, layer_windows and layer_rope (older exports): "
                              f"logits {r:.2e}, import byte-identical: {same}")


def check_visible():
    """modeling_prism.py's visible() is attention_span.h's att_visible: every query, key and window below n."""
    n = 24
    want = run(["build/hf_check", "visible", str(n)]).split()
    sys.path.insert(0, "hf")
    import modeling_prism
    q, k = torch.arange(n)[:, None], torch.arange(n)[None, :]
    got = ["".join("1" if v else "0" for v in modeling_prism.visible(q, k, W).flatten().tolist()) for W in range(n + 1)]
    check(got == want, f"visible  modeling_prism.visible() equals att_visible for queries and keys < {n}, windows 0..{n}")


def gdn_modules():
    """modeling_prism.py and its config, imported from hf/ (the GDN checks need no export)."""
    sys.path.insert(0, "hf")
    import configuration_prism
    import modeling_prism
    return configuration_prism, modeling_prism


class QwenTorchPath:
    """Within it, transformers' Qwen3-Next module runs its own PyTorch functions (the gated delta rule, chunked and
    recurrent, and the causal conv), whatever flash-linear-attention or kernels package is installed: each hub
    wrapper's __wrapped__ is the function in modeling_qwen3_next.py."""

    NAMES = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule", "causal_conv1d_fn", "causal_conv1d_update")

    def __enter__(self):
        import transformers.models.qwen3_next.modeling_qwen3_next as mq
        self.mq, self.saved = mq, {n: getattr(mq, n) for n in self.NAMES}
        for n, f in self.saved.items():
            setattr(mq, n, getattr(f, "__wrapped__", f))
        return mq

    def __exit__(self, *exc):
        for n, f in self.saved.items():
            setattr(self.mq, n, f)


def grads(outs, leaves, seed):
    """Gradients of sum(out * r) over outs (r random, the same for both sides) w.r.t. leaves."""
    gen = torch.Generator().manual_seed(seed)
    loss = sum((o * torch.randn(o.shape, generator=gen)).sum() for o in outs)
    return torch.autograd.grad(loss, leaves, retain_graph=True)


def check_gdn_rule():
    """modeling_prism.py's gated delta rule, recurrent and chunked (64), against transformers' Qwen3-Next
    torch_recurrent_gated_delta_rule and torch_chunk_gated_delta_rule (chunk_size 64, use_qk_l2norm_in_kernel=True:
    their l2norm, eps 1e-6, and their 1 / sqrt(head_dim) query scale; ours: l2_normalize then the same scale), with an
    initial state and output_final_state=True: the outputs, the final state, and the gradients (torch.autograd, a
    random cotangent on the output and the state) w.r.t. q, k, v, g, beta and the initial state, in fp32."""
    _, mp = gdn_modules()
    B, S, h, hd = 2, 100, 3, 16  # 100: a whole chunk and a part
    gen = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(B, S, h, hd, generator=gen) for _ in range(3))
    a_log = torch.log(16 * (1 - torch.rand(h, generator=gen)))
    g = -torch.exp(a_log) * torch.nn.functional.softplus(torch.randn(B, S, h, generator=gen) - 4)
    beta = torch.sigmoid(torch.randn(B, S, h, generator=gen))
    state = torch.randn(B, h, hd, hd, generator=gen) * 0.1  # keys by values, as both sides hold it
    inputs = [x.requires_grad_() for x in (q, k, v, g, beta, state)]

    def ours(fn):
        q, k, v, g, beta, state = inputs
        tr = lambda x: x.transpose(1, 2)
        o, M = fn(tr(mp.l2_normalize(q)) / math.sqrt(hd), tr(mp.l2_normalize(k)), tr(v), tr(g), tr(beta), state)
        return tr(o), M

    def theirs(fn):
        q, k, v, g, beta, state = inputs
        return fn(q, k, v, g=g, beta=beta, initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=True)

    with QwenTorchPath() as mq:
        results = {("recurrent", "chunked")[i]: ours(f) for i, f in enumerate((mp.gated_delta_recurrent, mp.gated_delta_chunked))}
        reference = {"recurrent": theirs(mq.torch_recurrent_gated_delta_rule), "chunked": theirs(mq.torch_chunk_gated_delta_rule)}
    for form, mine in results.items():
        for their_form, ref in reference.items():
            r_out = max(rel(a, b) for a, b in zip(mine, ref))
            r_grad = max(rel(a, b) for a, b in zip(grads(mine, inputs, 5), grads(ref, inputs, 5)))
            check(r_out <= 1e-5 and r_grad <= 1e-5,
                  f"gdn rule ours {form:9s} vs transformers' {their_form:9s} (B {B}, T {S}, h {h}, hd {hd}, fp32): "
                  f"output and state {r_out:.1e}, gradients {r_grad:.1e} relative")


def check_gdn_layer():
    """One whole gdn mixer (PrismGatedDeltaNet, from the normed input to after W_o) against transformers'
    Qwen3NextGatedDeltaNet with the same weights: num_k_heads = num_v_heads = h, head_k_dim = head_v_dim = hd, conv
    kernel 4, rms_norm_eps = our norm_eps, hidden_act silu; its in_proj_qkvz rows per head [q k v z], in_proj_ba rows
    per head [b a], from our wqkv (q | k | v, heads consecutive), wz and wba (b | a); no cache, so its chunked rule.
    Outputs, and gradients w.r.t. the input and every weight, fp32."""
    cp, mp = gdn_modules()
    from transformers.models.qwen3_next.configuration_qwen3_next import Qwen3NextConfig
    B, S, h, hd = 2, 100, 4, 8
    w = h * hd
    cfg = cp.PrismConfig(vocab_size=64, hidden_size=w, num_hidden_layers=1, layer_heads=[h], layer_mixers=["gdn"],
                         norm_type="rmsnorm", norm_eps=1e-5)
    torch.manual_seed(12)
    ours = mp.PrismForCausalLM(cfg).model.layers[0].attn.float()
    for p in (ours.qkv.weight, ours.z.weight, ours.ba.weight, ours.out.weight):
        p.data.normal_(0, 0.2)
    ours.out_norm.weight.data.uniform_(0.5, 1.5)
    qcfg = Qwen3NextConfig(hidden_size=w, num_hidden_layers=1, layer_types=["linear_attention"], linear_num_key_heads=h,
                           linear_num_value_heads=h, linear_key_head_dim=hd, linear_value_head_dim=hd,
                           linear_conv_kernel_dim=4, rms_norm_eps=cfg.norm_eps, hidden_act="silu")
    with QwenTorchPath() as mq:
        theirs = mq.Qwen3NextGatedDeltaNet(qcfg, 0).float()
        wq, wk, wv = (x.view(h, hd, w) for x in ours.qkv.weight.detach().split(w))
        b, a = ours.ba.weight.detach().split(h)
        with torch.no_grad():
            theirs.in_proj_qkvz.weight.copy_(torch.stack((wq, wk, wv, ours.z.weight.detach().view(h, hd, w)), 1).reshape(4 * w, w))
            theirs.in_proj_ba.weight.copy_(torch.stack((b, a), 1).reshape(2 * h, w))
            theirs.conv1d.weight.copy_(ours.conv.weight.detach().unsqueeze(1))
            theirs.A_log.copy_(ours.a_log.detach())
            theirs.dt_bias.copy_(ours.dt_bias.detach())
            theirs.norm.weight.copy_(ours.out_norm.weight.detach())
            theirs.out_proj.weight.copy_(ours.out.weight.detach())
        x = torch.randn(B, S, w).requires_grad_()
        y_ours, y_theirs = ours(x), theirs(x)
        g_ours = grads([y_ours], [x] + list(ours.parameters()), 6)
        g_theirs = grads([y_theirs], [x] + list(theirs.parameters()), 6)
    named = lambda m, gs: dict(zip(["input"] + [n for n, _ in m.named_parameters()], gs))
    go, gt = named(ours, g_ours), named(theirs, g_theirs)
    qkvz = gt["in_proj_qkvz.weight"].view(h, 4, hd, w)
    ba = gt["in_proj_ba.weight"].view(h, 2, w)
    pairs = {"input": (go["input"], gt["input"]),
             "wqkv": (go["qkv.weight"], torch.cat([qkvz[:, i].reshape(w, w) for i in range(3)])),
             "wz": (go["z.weight"], qkvz[:, 3].reshape(w, w)),
             "wba": (go["ba.weight"], torch.cat((ba[:, 0], ba[:, 1]))),
             "conv_w": (go["conv.weight"], gt["conv1d.weight"].squeeze(1)),
             "a_log": (go["a_log"], gt["A_log"]), "dt_bias": (go["dt_bias"], gt["dt_bias"]),
             "onorm_w": (go["out_norm.weight"], gt["norm.weight"]), "wo": (go["out.weight"], gt["out_proj.weight"])}
    r_out = rel(y_ours, y_theirs)
    r_grad = {n: rel(a, b) for n, (a, b) in pairs.items()}
    worst = max(r_grad, key=r_grad.get)
    check(r_out <= 1e-5 and r_grad[worst] <= 1e-5,
          f"gdn layer PrismGatedDeltaNet vs transformers' Qwen3NextGatedDeltaNet (T {S}, h {h}, hd {hd}, fp32): output "
          f"{r_out:.1e}, gradients (input and all {len(pairs) - 1} weights) at most {r_grad[worst]:.1e} ({worst})")


def check_gdn_cache():
    """A hybrid PrismForCausalLM (gdn, gdn, gdn, attention; random weights): logits decoded through the cache (a
    70-token prefill, 20 tokens one at a time, then 40 at once: the recurrent state and the conv's last inputs, read
    by both forms of the rule) equal the full forward's; greedy generate() equals the full forward's argmax at every
    step; a left-padded row (attention_mask 0) gives its unpadded logits."""
    cp, mp = gdn_modules()
    cfg = cp.PrismConfig(vocab_size=97, hidden_size=32, num_hidden_layers=4, layer_heads=[2, 4, 2, 4],
                         layer_mixers=["gdn", "gdn", "gdn", "attention"], max_position_embeddings=160)
    torch.manual_seed(13)
    model = mp.PrismForCausalLM(cfg).eval()
    tokens = torch.randint(0, 97, (2, 130))
    with torch.no_grad():
        full = model(tokens).logits
        out = model(tokens[:, :70], use_cache=True)
        steps, cache = [out.logits], cache_of(out)
        for a, b in [(t, t + 1) for t in range(70, 90)] + [(90, 130)]:
            out = model(tokens[:, a:b], cache=cache, use_cache=True)
            steps.append(out.logits)
            cache = cache_of(out)
        r_cached = rel(torch.cat(steps, 1), full)
        prompt = tokens[:1, :12]
        gen = model.generate(prompt, max_new_tokens=12, do_sample=False)
        ids = prompt
        for _ in range(12):
            ids = torch.cat((ids, model(ids).logits[:, -1:].argmax(-1)), 1)
        padded = torch.cat((torch.zeros(1, 5, dtype=torch.long), tokens[:1, :40]), 1)
        mask = torch.cat((torch.zeros(1, 5, dtype=torch.long), torch.ones(1, 40, dtype=torch.long)), 1)
        r_pad = rel(model(padded, attention_mask=mask).logits[:, 5:], full[:1, :40])
    check(r_cached <= 1e-5 and torch.equal(gen, ids) and r_pad <= 1e-5,
          f"gdn cache hybrid gdn,gdn,gdn,attention: cached decode vs full forward {r_cached:.1e}; greedy generate() "
          f"{'equals' if torch.equal(gen, ids) else 'DIFFERS FROM'} the full forward's argmax over 12 tokens; left "
          f"padding {r_pad:.1e}")


def check_peer(name, d):
    """The PyTorch peer (dev/peer/peer_torch.py) builds the model from the export's config.json and weights: its
    loss on a batch is transformers' on the same tokens."""
    sys.path.insert(0, "dev/peer")
    import peer_torch
    cfg = json.load(open(d + "/hf/config.json"))
    peer = peer_torch.Peer(cfg, T, torch.device("cpu"))
    peer.load_prism(peer_torch.read_safetensors(d + "/hf/model.safetensors"))
    model = AutoModelForCausalLM.from_pretrained(d + "/hf", trust_remote_code=True, dtype=torch.float32).eval()
    tokens = torch.randint(0, EOT + 1, (2, T + 1))
    x, y = tokens[:, :T], tokens[:, 1:]
    with torch.no_grad():
        ours = peer(x, y).item()
        theirs = torch.nn.functional.cross_entropy(model(x).logits.flatten(0, 1), y.flatten()).item()
    r = abs(ours - theirs) / abs(theirs)
    check(r <= 1e-5, f"peer {name:8s} PyTorch peer's loss {ours:.6f}, transformers' {theirs:.6f}: relative {r:.1e}")


def check_fine_tune(name, d):
    """A model changed in PyTorch (three AdamW steps on its own loss), saved, imported: our reference agrees with it."""
    model = AutoModelForCausalLM.from_pretrained(d + "/hf", trust_remote_code=True, dtype=torch.float32).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, EOT + 1, (2, T))
    losses = []
    for _ in range(3):
        loss = model(tokens, labels=tokens).loss
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval().save_pretrained(d + "/tuned")
    run(["./import", d + "/tuned", "-o", d + "/tuned.bin"])
    with torch.no_grad():
        r = rel(model(tokens).logits, ref_logits(d + "/tuned.bin", tokens))
    changed = open(d + "/tuned.bin", "rb").read() != open(d + "/model.bin", "rb").read()
    check(r <= 1e-5 and changed and losses[-1] < losses[0],
          f"fine-tuned {name:8s} in PyTorch (loss {losses[0]:.4f} -> {losses[-1]:.4f}), saved, imported: reference vs PyTorch logits {r:.2e}")


def check_tokenizer(d):
    tok = AutoTokenizer.from_pretrained(d + "/hf", trust_remote_code=True)  # the flag only lets it read config.json
    raw = open("data/default/default_val_000000.bin", "rb").read()
    ids = torch.frombuffer(bytearray(raw[1024:]), dtype=torch.int16).to(torch.int64) & 0xFFFF
    ids = ids[:100000].tolist()
    docs, cur = [], []
    for t in ids:
        if t == EOT:
            if cur:
                docs.append(cur)
            cur = []
        else:
            cur.append(t)
    vocab = json.load(open(d + "/hf/vocab.json", encoding="utf-8"))
    byte_of = {}  # our byte alphabet, inverted (hf/hf_tokenizer.h)
    n = 0
    for b in range(256):
        if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF:
            byte_of[chr(b)] = b
        else:
            byte_of[chr(256 + n)] = b
            n += 1
    text_of = {i: bytes(byte_of[c] for c in s) for s, i in vocab.items() if i != EOT}
    tokens = mismatched = 0
    for doc in docs:
        text = b"".join(text_of[t] for t in doc).decode("utf-8", errors="strict")
        tokens += len(doc)
        mine = tok(text).input_ids
        if mine != doc or tok.decode(doc) != text:
            mismatched += 1
    check(mismatched == 0 and tokens > 50000,
          f"tokenizer ({type(tok).__name__}): {len(docs)} documents, {tokens} tokens of the default corpus, {mismatched} differ")
    return tok


def check_generate(name, d, model, tok):
    prompt = "And God said"
    ours = run(["./generate", d + "/model.bin", "--prompt", prompt, "--temperature", "0", "--tokens", "24", "--cpu"])
    ours = ours[:-1] if ours.endswith("\n") else ours
    ids = torch.tensor([[EOT] + tok(prompt).input_ids])
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=24, do_sample=False, eos_token_id=EOT, pad_token_id=EOT)
    theirs = prompt + tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    check(ours == theirs, f"generate {name:8s} greedy, {out.shape[1] - ids.shape[1]} tokens: {'same text ' + repr(theirs[len(prompt):][:48]) if ours == theirs else 'ours ' + repr(ours) + ' theirs ' + repr(theirs)}")


FIXTURES = {
    "hellaswag": ("hellaswag_val.jsonl", [
        {"ind": 1, "activity_label": "Baking bread", "ctx_a": "[header] How to bake bread [title] Mix the flour.",
         "ctx_b": "tHEN YOU knead", "endings": ["the dough for ten minutes.", "a cat.", "sit down now.", "eat."], "label": 0},
        {"ind": 2, "activity_label": "Ice fishing", "ctx_a": "A man sits on the ice.", "ctx_b": "he",
         "endings": ["drops a line into the hole.", "flies away.", "sings to the fish.", "eats the chair."], "label": 0},
        {"ind": 3, "activity_label": "Long story", "ctx_a": " ".join(["And the LORD spake unto Moses, saying,"] * 12),
         "ctx_b": "then", "endings": ["he went up the mountain.", "the people rested."], "label": 1},
    ]),
    "winogrande": ("dev.jsonl", [
        {"qID": "a", "sentence": "Sarah lent Maria her car because _'s car was broken.", "option1": "Sarah", "option2": "Maria", "answer": "2"},
        {"qID": "b", "sentence": "The trophy did not fit in the suitcase because the _ was too big.", "option1": "trophy",
         "option2": "suitcase", "answer": "1"},
    ]),
    "piqa": ("valid.jsonl", [{"goal": "How do I open a jar?", "sol1": "Twist the lid.", "sol2": "Sing to it."},
                             {"goal": "Keep bread fresh", "sol1": "Wrap it.", "sol2": "Leave it in the rain."}]),
    "lambada": ("lambada_test.jsonl", [{"text": "the cat sat on the mat"}, {"text": "In the beginning God created the heaven and the earth"},
                                      {"text": "To be, or not to be, that is the question"}]),
}


def make_eval_files():
    raw, ev = os.path.join(WORK, "raw"), os.path.join(WORK, "eval")
    os.makedirs(raw), os.makedirs(ev)
    for task, (name, rows) in FIXTURES.items():
        with open(os.path.join(raw, name), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        extra = []
        if task == "piqa":
            with open(os.path.join(raw, "labels.lst"), "w") as f:
                f.write("0\n0\n")
            extra = [os.path.join(raw, "labels.lst")]
        run(["build/prepare_eval", task, os.path.join(raw, name)] + extra + ["-o", os.path.join(ev, task + ".bin")])
    return ev


def same(a, b, n):
    """Two accuracies over n examples count the same examples (eval_zeroshot's JSON has 10 digits)."""
    return round(a * n) == round(b * n)


def check_hflm(name, d, ev):
    try:
        from lm_eval.api.instance import Instance
        from lm_eval.models.huggingface import HFLM
    except ImportError as e:
        skip("lm-eval", f"HFLM {name}: lm-eval's HFLM cannot be imported ({e}; pip install lm-eval accelerate)")
        return
    lm = HFLM(pretrained=d + "/hf", trust_remote_code=True, batch_size=1, device="cpu", dtype="float32")
    r = run(["./eval_zeroshot", d + "/model.bin", "--cpu", "--data", ev, "--tasks", ",".join(FIXTURES), "--json", d + "/r.json"])
    zs = {x["task"]: x for x in json.load(open(d + "/r.json"))["results"]}
    worst = 0.0
    n = 0
    for task in FIXTURES:
        reqs = [json.loads(line) for line in run(["build/hf_check", "requests", d + "/model.bin", os.path.join(ev, task + ".bin")]).splitlines()]
        inst = [Instance(request_type="loglikelihood", doc={}, arguments=("" if q["context_ids"] == [EOT] else q["context"], q["continuation"]),
                         idx=i) for i, q in enumerate(reqs)]
        res = lm.loglikelihood(inst, disable_tqdm=True)
        for q, (ll, greedy) in zip(reqs, res):
            worst = max(worst, abs(ll - q["ll"]))
            q["hf_ll"], q["hf_greedy"] = ll, greedy
        n += len(reqs)
        # the task's metrics from HFLM's numbers, as eval/scoring.h computes them from its own
        by_ex = {}
        for q in reqs:
            by_ex.setdefault(q["example"], []).append(q)
        if task == "lambada":
            ll_sum = sum(q["hf_ll"] for q in reqs)
            ppl = torch.exp(torch.tensor(-ll_sum / len(reqs), dtype=torch.float64)).item()
            acc = sum(q["hf_greedy"] for q in reqs) / len(reqs)
            check(abs(ppl - zs[task]["perplexity"]) <= 1e-4 * ppl and same(acc, zs[task]["acc"], len(reqs)),
                  f"HFLM {name:8s} lambada: perplexity {ppl:.6f} vs eval_zeroshot {zs[task]['perplexity']:.6f}, acc {acc:.3f} vs {zs[task]['acc']:.3f}")
        else:
            pick = lambda qs, key: max(range(len(qs)), key=lambda i: (key(qs[i]), -i))  # the first of equal scores
            acc = sum(pick(qs, lambda q: q["hf_ll"]) == qs[0]["gold"] for qs in by_ex.values()) / len(by_ex)
            msg = f"HFLM {name:8s} {task}: acc {acc:.3f} vs eval_zeroshot {zs[task]['acc']:.3f}"
            ok = same(acc, zs[task]["acc"], len(by_ex))
            if "acc_norm" in zs[task]:
                accn = sum(pick(qs, lambda q: q["hf_ll"] / q["norm_len"]) == qs[0]["gold"] for qs in by_ex.values()) / len(by_ex)
                msg += f", acc_norm {accn:.3f} vs {zs[task]['acc_norm']:.3f}"
                ok = ok and same(accn, zs[task]["acc_norm"], len(by_ex))
            check(ok, msg)
    check(worst <= 1e-4, f"HFLM {name:8s} loglikelihood of {n} requests vs eval_zeroshot's scorer: worst |difference| {worst:.2e} nats")


def main():
    t0 = time.time()
    print(f"test-hf: torch {torch.__version__}, transformers {transformers.__version__}, in {WORK}")
    check_visible()
    check_gdn_rule()
    check_gdn_layer()
    check_gdn_cache()
    dirs = {name: make_kind(name, seed) for seed, name in enumerate(KINDS, start=1)}
    models = {}
    for name, d in dirs.items():
        models[name], _, _ = check_logits(name, d)
    for name in ("x", "combo"):
        check_bf16(name, dirs[name])
    for name in ["x", "mup", "hybrid"] + COLUMNS:
        check_round_trip(name, dirs[name])
    check_old_config(dirs["uniform"])
    for name in ("prism", "combo"):
        check_fine_tune(name, dirs[name])
    tok = check_tokenizer(dirs["uniform"])
    for name in ["uniform", "prism", "x", "lambda", "mup", "hybrid"] + COLUMNS:
        check_generate(name, dirs[name], models[name], tok)
    for name in ["uniform", "x"] + COLUMNS:
        check_peer(name, dirs[name])
    ev = make_eval_files()
    for name in ("prism", "x"):
        check_hflm(name, dirs[name], ev)
    shutil.rmtree(WORK)
    print(f"test-hf: {len(PASSED)} passed, {len(FAILED)} failed, {len(SKIPPED)} skipped ({time.time() - t0:.0f} s)")
    for f in FAILED:
        print("  failed: " + f)
    write_results()
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
