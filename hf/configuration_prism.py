# configuration_prism.py: PrismConfig, the Hugging Face config of a Prism model (written next to it by Prism's
# `export`). Every number the forward depends on is here: d (hidden_size), the per-layer widths w_l, heads h_l,
# K/V heads (layer_kv_heads: GQA when below h_l, 0 for a layer without attention), SwiGLU hidden sizes
# (layer_hidden_sizes: 0 for a layer without an MLP), attention windows (layer_windows: key j visible to query i
# iff i - W < j <= i, 0 for global), rotary embeddings (layer_rope: 1 rotary, 0 NoPE) and the token mixer
# (layer_mixers: "attention" softmax attention, "gdn" Gated DeltaNet), one list per column of
# Prism's layer table (model/layer_columns.h's config.json keys; LAYER_LISTS below), the residual stream width
# D = max(d, max w_l), the final-norm width
# Df = max(d, w_L), V, T, the norm kind and eps, tied embeddings, the attention scale, RoPE theta and muP's base width
# mup_base_d (0 or absent: no muP; else the logits are multiplied by mup_base_d / hidden_size). The per-layer
# lists are Prism's own keys rather than transformers' num_key_value_heads / intermediate_size / sliding_window,
# which transformers reads as one number for every layer (a DynamicCache built from the config would turn a
# sliding_window list into sliding-window cache layers). The rest of model.bin's header (h_base, the MLP rule,
# init_width_scale, the training step, the run id, the layer table's own words) rides along so that Prism's
# `import` writes model.bin back unchanged. A config without layer_kv_heads, layer_windows or layer_rope (an older
# export) means every head its own K and V, global attention and rotary embeddings, as it did; one without
# layer_mixers, softmax attention in every layer. A gdn layer has as many K/V heads as heads, window 0 and
# rotary embeddings on (it uses none: NoPE means nothing to it), and a layer without attention has no gdn.
import math

try:
    from transformers import PreTrainedConfig
except ImportError:  # transformers 4
    from transformers import PretrainedConfig as PreTrainedConfig


def swiglu_hidden(width, mlp_ratio, mlp_multiple):
    """Prism's rule: the nearest multiple of mlp_multiple to mlp_ratio * width (halves away from zero), at least one."""
    q = max(1, mlp_multiple)
    x = mlp_ratio * width / q
    return max(q, q * int(math.floor(x + 0.5)))


# The per-layer lists (model/layer_columns.h's config.json keys, in its order), each with its value for a layer when the
# list is absent: fn(config, layer).
LAYER_LISTS = (
    ("layer_widths", lambda c, l: c.hidden_size),
    ("layer_heads", lambda c, l: c.num_attention_heads),
    ("layer_kv_heads", lambda c, l: c.layer_heads[l]),
    ("layer_hidden_sizes", lambda c, l: swiglu_hidden(c.layer_widths[l], c.mlp_ratio, c.mlp_multiple)),
    ("layer_windows", lambda c, l: 0),
    ("layer_rope", lambda c, l: 1),
    ("layer_mixers", lambda c, l: "attention"),
)
MIXERS = ("attention", "gdn")


class PrismConfig(PreTrainedConfig):
    model_type = "prism"
    keys_to_ignore_at_inference = ["past_key_values", "cache"]

    def __init__(self, vocab_size=50257, hidden_size=128, num_hidden_layers=6, layer_widths=None, layer_heads=None,
                 layer_kv_heads=None, layer_hidden_sizes=None, layer_windows=None, layer_rope=None, layer_mixers=None,
                 residual_width=None, final_norm_width=None, max_position_embeddings=128, norm_type="layernorm",
                 norm_eps=1e-5, tie_word_embeddings=True, attention_scale="1/sqrt(head_dim)", rope_theta=10000.0,
                 rope_interleaved=True, num_attention_heads=4, mlp_ratio=8.0 / 3.0, mlp_multiple=32,
                 init_width_scale=False, mup_base_d=0, prism_step=0, prism_run_id=None, prism_layer_words=None, use_cache=True,
                 **kwargs):
        L = num_hidden_layers
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = L
        self.num_attention_heads = num_attention_heads
        self.mlp_ratio = mlp_ratio
        self.mlp_multiple = mlp_multiple
        given = dict(layer_widths=layer_widths, layer_heads=layer_heads, layer_kv_heads=layer_kv_heads,
                     layer_hidden_sizes=layer_hidden_sizes, layer_windows=layer_windows, layer_rope=layer_rope,
                     layer_mixers=layer_mixers)
        for key, default in LAYER_LISTS:  # in order: a default may read the lists before it
            value = given[key]
            setattr(self, key, list(value) if value is not None else [default(self, l) for l in range(L)])
        self.residual_width = residual_width if residual_width is not None else max([hidden_size] + self.layer_widths)
        self.final_norm_width = final_norm_width if final_norm_width is not None else max(hidden_size, self.layer_widths[-1])
        self.max_position_embeddings = max_position_embeddings
        self.norm_type = norm_type
        self.norm_eps = norm_eps
        self.attention_scale = attention_scale
        self.rope_theta = rope_theta
        self.rope_interleaved = rope_interleaved
        self.init_width_scale = init_width_scale
        self.mup_base_d = mup_base_d  # muP's base width (0: standard); the logits are multiplied by it / hidden_size
        self.prism_step = prism_step
        self.prism_run_id = prism_run_id  # model.bin's run id (16 hex digits), so import writes the same file
        self.prism_layer_words = prism_layer_words  # model.bin's [kv_heads, hidden, window] words, when needed
        self.use_cache = use_cache
        self._check()
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)

    def _check(self):
        L = self.num_hidden_layers
        for key, _ in LAYER_LISTS:
            if len(getattr(self, key)) != L:
                raise ValueError(f"PrismConfig: {key} has {len(getattr(self, key))} entries, num_hidden_layers is {L}")
        for l, (w, h, kv, hid, win, rope, mixer) in enumerate(zip(*(getattr(self, key) for key, _ in LAYER_LISTS))):
            at = f"PrismConfig: layer {l}"
            if mixer not in MIXERS:
                raise ValueError(f"{at}: layer_mixers {mixer!r} must be one of {', '.join(MIXERS)}")
            if mixer == "gdn" and (not kv or kv != h or win or not rope):
                raise ValueError(f"{at} is gdn: it needs attention (layer_kv_heads > 0) with layer_kv_heads = layer_heads "
                                 f"({h}), layer_windows 0 and layer_rope 1, not {kv}, {win}, {rope}")
            if w % h or (mixer == "attention" and (w // h) % 2):
                raise ValueError(f"{at}: {h} heads must divide width {w} (into an even head_dim, for RoPE pairs, "
                                 "in an attention layer)")
            if kv < 0 or (kv and h % kv):
                raise ValueError(f"{at}: layer_kv_heads {kv} must divide layer_heads {h} (0: no attention)")
            if hid < 0 or win < 0 or (win and not kv):
                raise ValueError(f"{at}: hidden size {hid} and window {win} must be >= 0, window 0 without attention")
            if not kv and not hid:
                raise ValueError(f"{at} has neither attention (layer_kv_heads 0) nor an MLP (layer_hidden_sizes 0)")
            if rope not in (0, 1) or (not rope and not kv):
                raise ValueError(f"{at}: layer_rope {rope} must be 1 (rotary) or 0 (NoPE, a layer with attention)")
        if self.residual_width != max([self.hidden_size] + self.layer_widths):
            raise ValueError("PrismConfig: residual_width must be max(hidden_size, layer_widths)")
        if self.final_norm_width != max(self.hidden_size, self.layer_widths[-1]):
            raise ValueError("PrismConfig: final_norm_width must be max(hidden_size, last layer width)")
        if self.norm_type not in ("layernorm", "rmsnorm"):
            raise ValueError(f"PrismConfig: norm_type must be layernorm or rmsnorm, not {self.norm_type!r}")
        if self.attention_scale not in ("1/sqrt(head_dim)", "1/head_dim"):
            raise ValueError(f"PrismConfig: attention_scale must be '1/sqrt(head_dim)' or '1/head_dim', not {self.attention_scale!r}")
        if not isinstance(self.mup_base_d, int) or self.mup_base_d < 0:
            raise ValueError(f"PrismConfig: mup_base_d must be an integer >= 0 (0: no muP), not {self.mup_base_d!r}")
        if not self.rope_interleaved:
            raise ValueError("PrismConfig: Prism's RoPE rotates interleaved pairs (2i, 2i+1); rope_interleaved must be true")
