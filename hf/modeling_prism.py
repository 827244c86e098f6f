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
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import transformers
from transformers import GenerationMixin, PreTrainedModel
from transformers.cache_utils import Cache, DynamicCache
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
    layer lacks (layer_kv_heads 0: no attention, layer_hidden_sizes 0: no MLP) has no modules and no weights."""

    def __init__(self, config, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.width = config.layer_widths[layer_idx]
        self.window = config.layer_windows[layer_idx]
        if config.layer_kv_heads[layer_idx]:
            self.attn_norm = PrismNorm(self.width, config.norm_type, config.norm_eps)
            self.attn = PrismAttention(config, layer_idx)
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

    def forward(self, x, positions, key_masks, cache):
        if self.attn is not None:
            x = self._add(x, self.attn(self.attn_norm(x[..., : self.width]), positions, key_masks[self.window], cache))
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
        elif isinstance(module, PrismNorm):
            module.weight.fill_(1.0)
            if module.bias is not None:
                module.bias.zero_()


class PrismModel(PrismPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(PrismLayer(config, l) for l in range(config.num_hidden_layers))
        self.first_attention = next((l for l, kv in enumerate(config.layer_kv_heads) if kv), 0)
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
        # A layer without attention leaves its cache layer empty: the length is the first attention layer's.
        past = cache.get_seq_length(self.first_attention) if cache is not None else 0
        if position_ids is None:
            position_ids = (torch.arange(S, device=input_ids.device) + past).expand(B, S)
        # key_masks[W] (B, S, past + S) per window W of a layer: visible() over absolute positions (the cache holds
        # every position, so i and j index it), and no padded key (attention_mask 0)
        q_at = torch.arange(S, device=input_ids.device)[:, None] + past
        k_at = torch.arange(past + S, device=input_ids.device)[None, :]
        pad = attention_mask[:, None, -(past + S):].bool() if attention_mask is not None else None
        key_masks = {}
        for W in set(self.config.layer_windows):
            mask = visible(q_at, k_at, W)[None].expand(B, S, past + S)
            key_masks[W] = mask & pad if pad is not None else mask
        d, D, Df = self.config.hidden_size, self.config.residual_width, self.config.final_norm_width
        x = self.embed_tokens(input_ids)
        if D > d:
            x = F.pad(x, (0, D - d))
        for layer in self.layers:
            x = layer(x, position_ids, key_masks, cache)
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
