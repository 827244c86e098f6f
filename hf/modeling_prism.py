# modeling_prism.py: a Prism model (uniform, Prism head schedules, Xformer width schedules, and per layer K/V heads,
# SwiGLU hidden sizes, attention windows and dropped sub-blocks) as a Hugging Face causal LM in plain PyTorch,
# computing exactly Prism's forward (docs/model.md, "The model exactly"; the fp32 CPU reference is
# ref/reference.h / ref/ops.h):
#   x = [embed(tokens) | 0]                      the residual stream (B, S, D), D = max(d, max w_l)
#   for each layer l (width w = w_l, h = h_l query heads of head_dim w / h, kv = kv_l K/V heads, SwiGLU hidden_l):
#     x[..., :w] += out(attn(rope(qkv(norm(x[..., :w])))))     q (h heads) | k (kv heads) | v (kv heads) rows,
#                                                              heads consecutive; query head j reads K/V head
#                                                              j // (h / kv); key j visible to query i as
#                                                              visible() says (attention_span.h's att_visible);
#                                                              a NoPE layer (layer_rope 0) has no rope
#     x[..., :w] += down(silu(gate) * up),  gate | up = gate_up(norm(x[..., :w]))
#   logits = s * lm_head(norm_f(x[..., :Df])[..., :d])               Df = max(d, w_L); tied: the embedding;
#                                                                    s = mup_base_d / d under muP, else 1
# A layer without attention (layer_kv_heads 0) or without an MLP (layer_hidden_sizes 0) skips that line; a
# NoPE layer (layer_rope 0; absent: every layer rotary) skips rope.
# Coordinates beyond w_l bypass layer l. RoPE rotates the interleaved pairs (2i, 2i+1) of each head by
# position * theta^(-2i / head_dim), angles in float64 as the reference does. Norms and softmax run in fp32
# whatever the weights' dtype. past_key_values / cache hold each layer's kv_l K and V heads (a query group
# reads its K/V head without copying it), so generate() decodes one token per step; a windowed layer keeps its
# whole cache and masks the keys older than its window; a layer without attention caches nothing.
# A gdn layer (layer_mixers) has the Gated DeltaNet mixer in attention's place (PrismGatedDeltaNet below; no RoPE,
# no window) and caches its recurrent state and last conv inputs instead of K and V.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import transformers
from transformers import GenerationMixin, PreTrainedModel
from transformers.cache_utils import Cache, DynamicCache

try:  # transformers 5's cache layer for a recurrent mixer's state (conv inputs and the recurrent state)
    from transformers.cache_utils import DynamicLayer, LinearAttentionLayer as _LinearAttentionLayer
except ImportError:
    _LinearAttentionLayer = None
from transformers.modeling_outputs import CausalLMOutputWithPast

try:
    from .configuration_prism import PrismConfig
except ImportError:  # loaded as a plain module, not from a package
    from configuration_prism import PrismConfig

# The output's cache field and the tying declaration changed names across transformers versions.
_CACHE_FIELD = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"
_TRANSFORMERS_4 = int(transformers.__version__.split(".")[0]) < 5


class PrismNorm(nn.Module):
    """LayerNorm (biased variance) or RMSNorm over the last dimension; eps inside the square root."""

    def __init__(self, width, kind, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))
        self.bias = nn.Parameter(torch.zeros(width)) if kind == "layernorm" else None

    def forward(self, x):
        x32 = x.float()
        if self.bias is not None:
            xc = x32 - x32.mean(-1, keepdim=True)
            y = xc / torch.sqrt((xc * xc).mean(-1, keepdim=True) + self.eps) * self.weight.float() + self.bias.float()
        else:
            y = x32 / torch.sqrt((x32 * x32).mean(-1, keepdim=True) + self.eps) * self.weight.float()
        return y.to(x.dtype)


def rope_cos_sin(positions, head_dim, theta, dtype):
    """cos, sin (B, 1, S, head_dim / 2) of angle position * theta^(-2i / head_dim), computed in float64."""
    i = torch.arange(head_dim // 2, dtype=torch.float64, device=positions.device)
    freq = torch.pow(torch.tensor(float(theta), dtype=torch.float64, device=positions.device), -2.0 * i / head_dim)
    angle = positions.to(torch.float64)[:, None, :, None] * freq
    return torch.cos(angle).to(dtype), torch.sin(angle).to(dtype)


def visible(q_at, k_at, window):
    """Which keys a query sees, attention_span.h's att_visible: key j is visible to query i iff i - W < j <= i
    (W = 0: j <= i, plain causal). q_at, k_at: positions that broadcast against each other."""
    causal = k_at <= q_at
    return causal & (k_at > q_at - window) if window else causal


def rope(x, cos, sin):
    """Rotate the interleaved pairs (2i, 2i+1) of x (B, h, S, head_dim): (a, b) -> (a cos - b sin, a sin + b cos)."""
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


class PrismAttention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.width = config.layer_widths[layer_idx]
        self.heads = config.layer_heads[layer_idx]
        self.kv_heads = config.layer_kv_heads[layer_idx]
        self.head_dim = self.width // self.heads
        self.kv_width = self.kv_heads * self.head_dim
        self.scale = 1.0 / self.head_dim if config.attention_scale == "1/head_dim" else 1.0 / math.sqrt(self.head_dim)
        self.theta = config.rope_theta
        layer_rope = getattr(config, "layer_rope", None)  # absent (an older export): every layer rotary
        self.rope = bool(layer_rope[layer_idx]) if layer_rope is not None else True
        self.qkv = nn.Linear(self.width, self.width + 2 * self.kv_width, bias=False)
        self.out = nn.Linear(self.width, self.width, bias=False)

    def forward(self, x, positions, key_mask, cache):
        B, S, _ = x.shape
        q, k, v = self.qkv(x).split((self.width, self.kv_width, self.kv_width), dim=-1)
        q = q.view(B, S, self.heads, self.head_dim).transpose(1, 2)
        k, v = (t.view(B, S, self.kv_heads, self.head_dim).transpose(1, 2) for t in (k, v))
        if self.rope:
            cos, sin = rope_cos_sin(positions, self.head_dim, self.theta, q.dtype)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)
        # Each K/V head serves a group of h / kv consecutive query heads: (B, kv, group, S, head_dim) against
        # (B, kv, 1, S_total, head_dim), broadcast rather than copied per query head.
        g = self.heads // self.kv_heads
        qg = q.float().view(B, self.kv_heads, g, S, self.head_dim)
        scores = (qg @ k.float()[:, :, None].transpose(-1, -2)) * self.scale  # (B, kv, g, S, S_total)
        scores = scores.masked_fill(~key_mask[:, None, None], torch.finfo(torch.float32).min)
        p = torch.softmax(scores, dim=-1).to(v.dtype)
        y = (p @ v[:, :, None]).view(B, self.heads, S, self.head_dim).transpose(1, 2).reshape(B, S, self.width)
        return self.out(y)


def l2_normalize(x, eps=1e-6):
    """x / sqrt(sum(x^2) + eps) over the last dimension (the GDN layer's q and k, per head)."""
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


def gated_delta_recurrent(q, k, v, g, beta, state=None):
    """The gated delta rule one token at a time (the oracle). q, k (B, h, S, dk), v (B, h, S, dv), g and beta (B, h, S),
    all fp32; q already scaled by 1 / sqrt(dk); state M (B, h, dk, dv) is S_t transposed (keys by values), zeros
    when None. Per token: M <- exp(g) M;  u = beta (v - M^T k);  M <- M + k u^T;  o = M^T q.
    Returns o (B, h, S, dv) and the final M."""
    B, h, S, dk = k.shape
    M = state if state is not None else q.new_zeros(B, h, dk, v.shape[-1])
    out = []
    for t in range(S):
        M = M * torch.exp(g[:, :, t])[..., None, None]
        kt = k[:, :, t]
        u = beta[:, :, t, None] * (v[:, :, t] - (kt[..., None] * M).sum(-2))
        M = M + kt[..., None] * u[..., None, :]
        out.append((q[:, :, t, :, None] * M).sum(-2))
    return torch.stack(out, dim=2), M


def gated_delta_chunked(q, k, v, g, beta, state=None, chunk=64):
    """The same rule in chunks of `chunk` tokens (the WY / UT form). Inside a chunk starting from state M0, with
    G_i the cumulative log-decay up to its token i and u_j the value token j writes (the recurrence's u):
      u_j = beta_j v_j - beta_j e^{G_j} k_j^T M0 - sum_{s<j} beta_j e^{G_j - G_s} (k_j . k_s) u_s,
    so (I + A) U = beta V - (beta e^G K) M0 with A strictly lower triangular, solved by forward substitution;
      o_i = e^{G_i} q_i^T M0 + sum_{j<=i} e^{G_i - G_j} (q_i . k_j) u_j,   M_C = e^{G_C} M0 + sum_j e^{G_C - G_j} k_j u_j^T.
    The sequence is padded with k = v = beta = g = 0 to whole chunks (a padded token changes neither the outputs
    before it nor the state). Same arguments and results as gated_delta_recurrent."""
    B, h, S, dk = k.shape
    dv = v.shape[-1]
    n = -(-S // chunk)
    pad = n * chunk - S
    q, k, v = (F.pad(x, (0, 0, 0, pad)).view(B, h, n, chunk, -1) for x in (q, k, v))
    g, beta = (F.pad(x, (0, pad)).view(B, h, n, chunk) for x in (g, beta))
    G = g.cumsum(-1)  # (B, h, n, C)
    lower = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    # decay[i, j] = e^{G_i - G_j} for j <= i, 0 above the diagonal (masked before the exp: no overflow)
    decay = torch.exp((G[..., :, None] - G[..., None, :]).masked_fill(~lower, float("-inf")))
    eye = torch.eye(chunk, dtype=q.dtype, device=q.device)
    A = (beta[..., None] * (k @ k.transpose(-1, -2)) * decay).tril(-1)
    solve = lambda rhs: torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True)
    U0 = solve(beta[..., None] * v)  # beta V's part of U
    W = solve((beta * torch.exp(G))[..., None] * k)  # U = U0 - W M0
    QK = (q @ k.transpose(-1, -2)) * decay
    q_in = torch.exp(G)[..., None] * q  # e^{G_i} q_i
    k_out = torch.exp(G[..., -1:] - G)[..., None] * k  # e^{G_C - G_j} k_j
    M = state if state is not None else q.new_zeros(B, h, dk, dv)
    out = []
    for c in range(n):
        U = U0[:, :, c] - W[:, :, c] @ M
        out.append(q_in[:, :, c] @ M + QK[:, :, c] @ U)
        M = torch.exp(G[:, :, c, -1])[..., None, None] * M + k_out[:, :, c].transpose(-1, -2) @ U
    return torch.cat(out, dim=2)[:, :, :S], M


class PrismGatedDeltaNet(nn.Module):
    """The Gated DeltaNet mixer of a gdn layer (docs/model.md; ref/gdn.h), h heads of head_dim hd = w / h for keys and
    values. From the normed input xn (B, S, w): p = qkv(xn) (channels q | k | v, heads consecutive in each);
    u = silu(causal depthwise conv of p over time, kernel 4, no bias); q, k L2-normalised per head (eps 1e-6);
    beta = sigmoid(ba(xn)[:h]), g = -exp(a_log) softplus(ba(xn)[h:] + dt_bias); the gated delta rule per head
    (o = S q / sqrt(hd)); y = out(out_norm.weight * rmsnorm(o per head) * silu(z(xn))), the norm's weight shared by
    the heads and its eps the model's norm_eps. With a cache, the layer keeps each sequence's recurrent state (h, hd,
    hd) and the conv's last 3 inputs, so a decode step costs the same at any position. A padded token
    (attention_mask 0: left padding) enters the conv and the rule as zeros, as a sequence start does, so it changes
    nothing."""

    KERNEL = 4

    def __init__(self, config, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.width = w = config.layer_widths[layer_idx]
        self.heads = h = config.layer_heads[layer_idx]
        self.head_dim = w // h
        self.eps = config.norm_eps
        self.chunk = 64
        self.qkv = nn.Linear(w, 3 * w, bias=False)
        self.conv = nn.Module()
        self.conv.weight = nn.Parameter(torch.empty(3 * w, self.KERNEL))  # conv_w[ch][k]: PyTorch's weight[ch, 0, k]
        self.z = nn.Linear(w, w, bias=False)
        self.ba = nn.Linear(w, 2 * h, bias=False)
        self.a_log = nn.Parameter(torch.zeros(h))
        self.dt_bias = nn.Parameter(torch.zeros(h))
        self.out_norm = nn.Module()
        self.out_norm.weight = nn.Parameter(torch.ones(self.head_dim))
        self.out = nn.Linear(w, w, bias=False)

    def conv_silu(self, p, tail):
        """silu of the causal depthwise conv of p (B, S, 3w) over time after `tail` (B, 3w, K - 1: the inputs before
        it; zeros at a sequence start); and the new tail."""
        x = torch.cat((tail, p.transpose(1, 2)), dim=-1)
        c = F.conv1d(x, self.conv.weight.to(x.dtype).unsqueeze(1), groups=x.shape[1])
        return F.silu(c.transpose(1, 2)), x[..., -(self.KERNEL - 1) :]

    def rule(self, q, k, v, g, beta, state):
        """The delta rule on (B, S, h, hd) inputs: token by token for one token (a decode step), else chunked."""
        q, k, v, g, beta = (t.transpose(1, 2) for t in (q, k, v, g, beta))
        if q.shape[2] == 1:
            o, state = gated_delta_recurrent(q, k, v, g, beta, state)
        else:
            o, state = gated_delta_chunked(q, k, v, g, beta, state, self.chunk)
        return o.transpose(1, 2), state

    def forward(self, xn, pad=None, cache=None):
        B, S, w = xn.shape
        h, hd = self.heads, self.head_dim
        p = self.qkv(xn)
        if pad is not None:
            p = p * pad[..., None].to(p.dtype)
        slot = _GdnSlot(cache, self.layer_idx) if cache is not None else None
        tail, state = slot.get() if slot is not None else (None, None)
        if tail is None:
            tail = p.new_zeros(B, 3 * w, self.KERNEL - 1)
        u, tail = self.conv_silu(p, tail)
        q, k, v = u.float().view(B, S, 3, h, hd).unbind(2)
        q = l2_normalize(q) / math.sqrt(hd)
        k = l2_normalize(k)
        beta_in, a_in = self.ba(xn).float().split(h, dim=-1)
        beta = torch.sigmoid(beta_in)
        g = -torch.exp(self.a_log.float()) * F.softplus(a_in + self.dt_bias.float())
        o, state = self.rule(q, k, v, g, beta, state)  # (B, S, h, hd) fp32
        if slot is not None:
            slot.set(tail, state)
        o = o * torch.rsqrt((o * o).mean(-1, keepdim=True) + self.eps) * self.out_norm.weight.float()
        y = o * F.silu(self.z(xn).float().view(B, S, h, hd))
        return self.out(y.reshape(B, S, w).to(xn.dtype))


class _GdnSlot:
    """A gdn layer's decoding state in a Cache: transformers' LinearAttentionLayer at the layer's index where this
    transformers has it (so beam search reorders it and reset clears it), else an attribute of the cache."""

    def __init__(self, cache, layer_idx):
        self.cache, self.l = cache, layer_idx
        if _LinearAttentionLayer is not None:
            layers = cache.layers
            while len(layers) <= layer_idx:
                layers.append(DynamicLayer())
            if not isinstance(layers[layer_idx], _LinearAttentionLayer):
                layers[layer_idx] = _LinearAttentionLayer()
        elif not hasattr(cache, "prism_gdn"):
            cache.prism_gdn = {}

    def get(self):
        if _LinearAttentionLayer is not None:
            return self.cache.get_conv_state(self.l), self.cache.get_recurrent_state(self.l)
        return self.cache.prism_gdn.get(self.l, (None, None))

    def set(self, tail, state):
        if _LinearAttentionLayer is not None:
            self.cache.update_conv_state(tail, self.l)  # a tail of exactly K - 1 inputs: it is what the layer keeps
            self.cache.update_recurrent_state(state, self.l)
        else:
            self.cache.prism_gdn[self.l] = (tail, state)


class PrismMLP(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        w, self.hidden = config.layer_widths[layer_idx], config.layer_hidden_sizes[layer_idx]
        self.gate_up = nn.Linear(w, 2 * self.hidden, bias=False)
        self.down = nn.Linear(self.hidden, w, bias=False)

    def forward(self, x):
        gate, up = self.gate_up(x).split(self.hidden, dim=-1)
        return self.down(F.silu(gate) * up)


class PrismLayer(nn.Module):
    """Reads and writes the leading slice [0, w_l) of the residual stream; the rest passes by. A sub-block the
    layer lacks (layer_kv_heads 0: no attention, layer_hidden_sizes 0: no MLP) has no modules and no weights. The
    attention sub-block's mixer (attn) is softmax attention, or Gated DeltaNet where layer_mixers says gdn."""

    def __init__(self, config, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.width = config.layer_widths[layer_idx]
        self.window = config.layer_windows[layer_idx]
        self.gdn = config.layer_mixers[layer_idx] == "gdn"
        if config.layer_kv_heads[layer_idx]:
            self.attn_norm = PrismNorm(self.width, config.norm_type, config.norm_eps)
            self.attn = (PrismGatedDeltaNet if self.gdn else PrismAttention)(config, layer_idx)
        else:
            self.attn = None
        if config.layer_hidden_sizes[layer_idx]:
            self.mlp_norm = PrismNorm(self.width, config.norm_type, config.norm_eps)
            self.mlp = PrismMLP(config, layer_idx)
        else:
            self.mlp = None

    def _add(self, x, y):
        if self.width == x.shape[-1]:
            return x + y
        return torch.cat((x[..., : self.width] + y, x[..., self.width :]), dim=-1)

    def forward(self, x, positions, key_masks, pad, cache):
        if self.attn is not None:
            xn = self.attn_norm(x[..., : self.width])
            y = self.attn(xn, pad, cache) if self.gdn else self.attn(xn, positions, key_masks[self.window], cache)
            x = self._add(x, y)
        if self.mlp is not None:
            x = self._add(x, self.mlp(self.mlp_norm(x[..., : self.width])))
        return x


class PrismPreTrainedModel(PreTrainedModel):
    config_class = PrismConfig
    base_model_prefix = "model"
    _no_split_modules = ["PrismLayer"]
    _supports_cache_class = True  # transformers 4.4x: give the forward a Cache object

    @torch.no_grad()
    def _init_weights(self, module):
        # GPT-2 style, as Prism initialises (without the residual projections' 1 / sqrt(2 L), which the loaded weights replace)
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.normal_(0.0, 0.02)
        elif isinstance(module, PrismGatedDeltaNet):  # docs/model.md's GDN init (flash-linear-attention's)
            module.conv.weight.uniform_(-0.5, 0.5)
            module.a_log.copy_(torch.log(16 * (1 - torch.rand_like(module.a_log))))  # A uniform in (0, 16]
            dt = torch.exp(torch.rand_like(module.dt_bias) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
            dt = dt.clamp(min=1e-4)
            module.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))
            module.out_norm.weight.fill_(1.0)
        elif isinstance(module, PrismNorm):
            module.weight.fill_(1.0)
            if module.bias is not None:
                module.bias.zero_()


class PrismModel(PrismPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(PrismLayer(config, l) for l in range(config.num_hidden_layers))
        # the first layer whose cache holds keys and values (softmax attention), None without one
        self.first_attention = next(
            (l for l, (kv, m) in enumerate(zip(config.layer_kv_heads, config.layer_mixers)) if kv and m == "attention"),
            None)
        self.norm = PrismNorm(config.final_norm_width, config.norm_type, config.norm_eps)
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def forward(self, input_ids, attention_mask=None, position_ids=None, cache=None, use_cache=False):
        """The final norm's output over [0, d): (B, S, d); and the cache."""
        B, S = input_ids.shape
        if use_cache and cache is None:
            cache = DynamicCache()
        # A layer without softmax attention keeps no keys: the length is the first attention layer's (positions and
        # masks matter to attention layers alone).
        past = cache.get_seq_length(self.first_attention) if cache is not None and self.first_attention is not None else 0
        if position_ids is None:
            position_ids = (torch.arange(S, device=input_ids.device) + past).expand(B, S)
        # key_masks[W] (B, S, past + S) per window W of a layer: visible() over absolute positions (the cache holds
        # every position, so i and j index it), and no padded key (attention_mask 0)
        q_at = torch.arange(S, device=input_ids.device)[:, None] + past
        k_at = torch.arange(past + S, device=input_ids.device)[None, :]
        pad = attention_mask[:, None, -(past + S):].bool() if attention_mask is not None else None
        pad_now = pad[:, 0, -S:] if pad is not None else None  # the new tokens' (a gdn layer zeroes padded ones)
        key_masks = {}
        for W in set(self.config.layer_windows):
            mask = visible(q_at, k_at, W)[None].expand(B, S, past + S)
            key_masks[W] = mask & pad if pad is not None else mask
        d, D, Df = self.config.hidden_size, self.config.residual_width, self.config.final_norm_width
        x = self.embed_tokens(input_ids)
        if D > d:
            x = F.pad(x, (0, D - d))
        for layer in self.layers:
            x = layer(x, position_ids, key_masks, pad_now, cache)
        return self.norm(x[..., :Df])[..., :d], cache


class PrismForCausalLM(PrismPreTrainedModel, GenerationMixin):
    _tied_weights_keys = ["lm_head.weight"] if _TRANSFORMERS_4 else {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config):
        super().__init__(config)
        self.model = PrismModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def set_input_embeddings(self, value):
        self.model.embed_tokens = value

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, value):
        self.lm_head = value

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None, cache=None,
                labels=None, use_cache=None, logits_to_keep=0, return_dict=None, **kwargs):
        cache = cache if cache is not None else past_key_values
        if cache is not None and not isinstance(cache, Cache):  # the legacy tuple of (K, V) per layer
            cache = DynamicCache.from_legacy_cache(cache)
        use_cache = use_cache if use_cache is not None else (cache is not None or self.config.use_cache)
        h, cache = self.model(input_ids, attention_mask, position_ids, cache, use_cache)
        if logits_to_keep:
            h = h[:, -logits_to_keep:]
        logits = self.lm_head(h)
        if self.config.mup_base_d:  # muP's output multiplier base_d / d (Prism's ModelConfig::logit_scale)
            logits = logits * (self.config.mup_base_d / self.config.hidden_size)
        loss = None
        if labels is not None:  # next-token cross-entropy, labels aligned with input_ids (-100: ignored)
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten().to(logits.device),
                                   ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits, **{_CACHE_FIELD: cache if use_cache else None})
