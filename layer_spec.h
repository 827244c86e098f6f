// layer_spec.h: one layer's shape, LayerSpec, all a kernel needs of the model description (model_config.h holds the
// rest: the model, its parameter layout, its accounting; model/ how one is built from flags and presets).
// Only width and heads are needed: {w, h} is today's layer (every head its own K and V, the MLP rule's hidden
// size, global attention, both sub-blocks, rotary embeddings, softmax attention as the mixer), so LayerSpec{w, h} and every config written
// before the other columns existed mean what they meant. The other columns: 0 means "the default", resolved by
// the accessors. model/layer_columns.h declares each column once (names, flag, bounds, rule, keys).
#pragma once

struct LayerSpec {
    int width;              // w_l: the layer reads and writes the leading slice [0, w_l) of the residual stream
    int heads;              // h_l: query heads; head_dim = w_l / h_l
    int kv_heads = 0;       // kv_l: K/V heads, each shared by h_l / kv_l query heads (GQA); 0: kv_l = h_l
    int hidden = 0;         // SwiGLU intermediate size; 0: the model's rule (ModelConfig::hidden(w_l))
    int window = 0;         // attention window: key j visible to query i iff i - window < j <= i; 0: global (causal)
    bool attention = true;  // false: no attention sub-block (no ln1, wqkv, wo): Megatron's no-op attention
    bool mlp = true;        // false: no MLP sub-block (no ln2, wfc, wproj)
    bool rope = true;       // false: the layer's attention uses no rotary embedding (NoPE)
    int mixer = 0;          // the token mixer of the attention sub-block: 0 softmax attention, 1 Gated DeltaNet (gdn)
    int head_dim() const { return width / heads; }
    bool gdn() const { return attention && mixer == 1; }      // a Gated DeltaNet mixer (docs/model.md)
    bool softmax() const { return attention && mixer == 0; }  // softmax attention: the KV cache, window and RoPE
    int kv() const { return kv_heads ? kv_heads : heads; }
    int kv_width() const { return kv() * head_dim(); }       // columns of k (and of v)
    int qkv_rows() const { return width + 2 * kv_width(); }  // rows of wqkv: q (w), k (kv_w), v (kv_w)
};
