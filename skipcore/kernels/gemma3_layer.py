"""A Gemma 3 text decoder layer run for the engine's inference passes on a CPU as transformers' own forward runs it,
op for op, without its module calls.

The ops are `Gemma3DecoderLayer.forward`'s, `Gemma3Attention.forward`'s and `Gemma3MLP.forward`'s, in their order:
the input norm, Q/K/V projected, viewed per head and transposed, then each query and key normed (QK-norm after the
transpose, as Gemma 3 does it), the rotary tables of the layer's type, the cache, the attention with the module's
scaling (`query_pre_attn_scalar`) and sliding window, the output projection, the norm after attention before the
residual sum, and the MLP between its own two norms. Dropout is 0 in eval mode. The attention is the one the pass
hands its layers, else the one the config names, with the arguments the attention module passes it. So the bits
are the module's (tests/kernels/test_lean_layers.py runs every pass both ways); what goes is about fifteen module
calls per layer and, with prepacked weights, an intercepted call for each of the layer's ops.

A layer runs this way only if its classes are the stock ones with plain linears and no hooks (`fits`), in an
inference pass on a CPU (`lean.inference_pass`).
"""

from __future__ import annotations

import sys

import torch
from torch import nn

from skipcore.kernels.attention import attention_of
from skipcore.kernels.lean import forward_of, inference_pass, unhooked
from skipcore.kernels.products import products_of

FAMILY = "transformers.models.gemma3.modeling_gemma3"
NORMS = (
    "input_layernorm",
    "post_attention_layernorm",
    "pre_feedforward_layernorm",
    "post_feedforward_layernorm",
)


def fits(layer: nn.Module) -> bool:
    """Whether `layer` is a stock `Gemma3DecoderLayer` of stock modules and plain linears, with no hooks."""
    family = sys.modules.get(FAMILY)
    if family is None or type(layer) is not family.Gemma3DecoderLayer:
        return False
    attn, mlp = layer.self_attn, layer.mlp
    if type(attn) is not family.Gemma3Attention or type(mlp) is not family.Gemma3MLP:
        return False
    norms = [getattr(layer, n) for n in NORMS] + [attn.q_norm, attn.k_norm]
    if any(type(n) is not family.Gemma3RMSNorm for n in norms):
        return False
    linears = [attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj]
    return all(type(m) is nn.Linear for m in linears) and unhooked(layer)


class DecodeLayer:
    """One stock Gemma 3 decoder layer's forward, for `Adapter.layer_call`."""

    def __init__(self, layer: nn.Module) -> None:
        self.layer = layer
        attn, mlp = layer.self_attn, layer.mlp
        self.attn = attn
        self.qkv = (attn.q_proj, attn.k_proj, attn.v_proj)
        self.o = (attn.o_proj,)
        self.gate_up = (mlp.gate_proj, mlp.up_proj)
        self.down = (mlp.down_proj,)
        self.norms = [getattr(layer, n).forward for n in NORMS]
        self.q_norm, self.k_norm = attn.q_norm.forward, attn.k_norm.forward
        self.act = forward_of(mlp.act_fn)
        family = sys.modules[FAMILY]
        self.rotary = family.apply_rotary_pos_emb
        self.eager = family.eager_attention_forward
        # local and global layers turn by rotary tables of their own: the pass hands both, by layer type
        self.layer_type = attn.config.layer_types[attn.layer_idx]

    def applies(self, device: torch.device) -> bool:
        """Whether a pass on `device` may run here (`lean.inference_pass`)."""
        return inference_pass(self.layer, device)

    def __call__(self, hidden: torch.Tensor, mask: torch.Tensor | None, cache, kwargs: dict) -> torch.Tensor:
        attn, outputs = self.attn, products_of(kwargs)
        input_norm, after_attention, before_mlp, after_mlp = self.norms
        input_shape = hidden.shape[:-1]
        hidden_shape = (*input_shape, -1, attn.head_dim)
        residual = hidden
        x = input_norm(hidden)
        q, k, v = outputs(self.qkv, x)
        q = q.view(hidden_shape).transpose(1, 2)
        k = k.view(hidden_shape).transpose(1, 2)
        v = v.view(hidden_shape).transpose(1, 2)
        q, k = self.q_norm(q), self.k_norm(k)
        cos, sin = kwargs["position_embeddings"][self.layer_type]
        q, k = self.rotary(q, k, cos, sin)
        if cache is not None:
            k, v = cache.update(k, v, attn.layer_idx)
        o, _ = attention_of(kwargs, attn, self.eager)(
            attn,
            q,
            k,
            v,
            mask,
            dropout=0.0,
            scaling=attn.scaling,
            sliding_window=attn.sliding_window,
            position_ids=kwargs.get("position_ids"),
            query_groups=kwargs.get("query_groups"),
        )
        (o,) = outputs(self.o, o.reshape(*input_shape, -1).contiguous())
        hidden = residual + after_attention(o)
        residual = hidden
        gate, up = outputs(self.gate_up, before_mlp(hidden))
        (down,) = outputs(self.down, self.act(gate) * up)
        return residual + after_mlp(down)
