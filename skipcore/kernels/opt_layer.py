"""An OPT decoder layer run for the engine's inference passes on a CPU as transformers' own forward runs it, op for
op, without its module calls (the paper's family, and the shipped default model's).

The ops are `OPTDecoderLayer.forward`'s and `OPTAttention.forward`'s, in their order: the layer norm before
attention (or after it, OPT-350m's `do_layer_norm_before=False`), the query scaled after its projection and the
attention called with scaling 1.0 (OPT keeps that order for its bits), the residual sums, the MLP over the rows
flattened to two dimensions, the activation module's forward. Dropout is the identity in eval mode, so it is left
out. The attention is the one the pass hands its layers, else the one the config names, with the arguments the
attention module passes it. So the bits are the module's (tests/kernels/test_lean_layers.py runs every pass both
ways, float32 and bfloat16, eager and SDPA); what goes is nine module calls per layer and, with prepacked weights,
an intercepted call per linear (`PassProducts.outputs`: Q, K and V as one product).

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

FAMILY = "transformers.models.opt.modeling_opt"


def fits(layer: nn.Module) -> bool:
    """Whether `layer` is a stock `OPTDecoderLayer` of stock modules and plain linears, with no hooks."""
    family = sys.modules.get(FAMILY)
    if family is None or type(layer) is not family.OPTDecoderLayer:
        return False
    attn = layer.self_attn
    if type(attn) is not family.OPTAttention:
        return False
    if any(type(n) is not nn.LayerNorm for n in (layer.self_attn_layer_norm, layer.final_layer_norm)):
        return False
    linears = [attn.q_proj, attn.k_proj, attn.v_proj, attn.out_proj, layer.fc1, layer.fc2]
    return all(type(m) is nn.Linear for m in linears) and unhooked(layer)


class DecodeLayer:
    """One stock OPT decoder layer's forward, for `Adapter.layer_call`."""

    def __init__(self, layer: nn.Module) -> None:
        self.layer = layer
        attn = layer.self_attn
        self.attn = attn
        self.qkv = (attn.q_proj, attn.k_proj, attn.v_proj)
        self.out = (attn.out_proj,)
        self.fc1, self.fc2 = (layer.fc1,), (layer.fc2,)
        self.act = forward_of(layer.activation_fn)
        self.norm_before = layer.do_layer_norm_before
        self.eager = sys.modules[FAMILY].eager_attention_forward

    def applies(self, device: torch.device) -> bool:
        """Whether a pass on `device` may run here (`lean.inference_pass`)."""
        return inference_pass(self.layer, device)

    def __call__(self, hidden: torch.Tensor, mask: torch.Tensor | None, cache, kwargs: dict) -> torch.Tensor:
        layer, attn, outputs = self.layer, self.attn, products_of(kwargs)
        attn_norm, final_norm = layer.self_attn_layer_norm, layer.final_layer_norm
        residual = hidden
        x = attn_norm.forward(hidden) if self.norm_before else hidden
        bsz, tgt_len, _ = x.size()
        q, k, v = outputs(self.qkv, x)
        heads = (bsz, -1, attn.num_heads, attn.head_dim)
        q = (q * attn.scaling).view(heads).transpose(1, 2)
        k, v = k.view(heads).transpose(1, 2), v.view(heads).transpose(1, 2)
        if cache is not None:
            k, v = cache.update(k, v, attn.layer_idx)
        o, _ = attention_of(kwargs, attn, self.eager)(
            attn,
            q,
            k,
            v,
            mask,
            dropout=0.0,
            scaling=1.0,
            position_ids=kwargs.get("position_ids"),
            query_groups=kwargs.get("query_groups"),
        )
        (o,) = outputs(self.out, o.reshape(bsz, tgt_len, -1).contiguous())
        hidden = residual + o
        if not self.norm_before:
            hidden = attn_norm.forward(hidden)
        shape = hidden.shape
        hidden = hidden.reshape(-1, hidden.size(-1))
        residual = hidden
        x = final_norm.forward(hidden) if self.norm_before else hidden
        (x,) = outputs(self.fc1, x)
        (x,) = outputs(self.fc2, self.act(x))
        hidden = (residual + x).view(shape)
        return hidden if self.norm_before else final_norm.forward(hidden)
