"""A Llama-family decoder layer (Llama, Mistral, Qwen2, Qwen3) run for the engine's inference passes on a CPU as
transformers' own forward runs it, op for op, without its module calls.

A decode step at batch 1 reads each weight once with one row, so whatever is not a product is time the step
pays in full. The layer's ops here are transformers' own, in its order: its norms' and activation's forwards, the
family's rotary function, the attention function the pass hands it (the engine's decode attention), else the one
the config names with the arguments the attention module passes it, the residual sums as the layer writes them. So the
bits are the module's; what goes is a dozen module calls per layer and, where the weights are prepacked
(`PackedLinears`), a forward closure per linear: a unit (Q/K/V, gate/up) is one call that returns its members'
outputs.

A layer runs this way only if its classes are the stock ones, named below (a patched or wrapped layer, a LoRA
adapter left unmerged, another family keep transformers' module), it has no hooks, it is in eval mode, and the
pass is on a CPU without autograd: training and the GPU path (whose steps CUDA graphs replay without the Python)
see the modules as loaded. What a family's layer does is transformers' (pinned in requirements.txt): the tests
run every family through both paths and compare tokens and log-probabilities bit for bit, so a release that
changed a layer's ops would fail them before it ran here.
"""

from __future__ import annotations

import sys

import torch
from torch import nn

from skipcore.kernels.attention import attention_of
from skipcore.kernels.lean import forward_of, inference_pass, unhooked
from skipcore.kernels.products import products_of

# the stock decoder layers, by family prefix, with where their attention module finds its sliding window:
# "module" its own attribute, "config" the config's, None it passes none
WINDOWS: dict[str, str | None] = {
    "transformers.models.llama.modeling_llama.Llama": None,
    "transformers.models.mistral.modeling_mistral.Mistral": "config",
    "transformers.models.qwen2.modeling_qwen2.Qwen2": "module",
    "transformers.models.qwen3.modeling_qwen3.Qwen3": "module",
}


def family_prefix(layer: nn.Module) -> str | None:
    """`transformers.models.llama.modeling_llama.Llama` for a stock `LlamaDecoderLayer`; None for another class."""
    cls = type(layer)
    if not cls.__name__.endswith("DecoderLayer"):
        return None
    prefix = f"{cls.__module__}.{cls.__name__.removesuffix('DecoderLayer')}"
    return prefix if prefix in WINDOWS else None


def fits(layer: nn.Module) -> bool:
    """Whether `layer` is a stock decoder layer of a family above, built of its family's own modules and plain
    linears, with no hooks on any of them."""
    prefix = family_prefix(layer)
    if prefix is None:
        return False
    family = sys.modules[type(layer).__module__]
    name = type(layer).__name__.removesuffix("DecoderLayer")
    attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
    stock = [
        (attn, f"{name}Attention"),
        (mlp, f"{name}MLP"),
        (getattr(layer, "input_layernorm", None), f"{name}RMSNorm"),
        (getattr(layer, "post_attention_layernorm", None), f"{name}RMSNorm"),
    ]
    if any(type(m) is not getattr(family, cls, None) for m, cls in stock):
        return False
    linears = [attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj]
    return all(type(m) is nn.Linear for m in linears) and unhooked(layer)


class DecodeLayer:
    """One stock Llama-family decoder layer's forward, for `Adapter.layer_call`."""

    def __init__(self, layer: nn.Module) -> None:
        self.layer = layer
        attn, mlp = layer.self_attn, layer.mlp
        self.attn = attn
        self.qkv = (attn.q_proj, attn.k_proj, attn.v_proj)
        self.o = (attn.o_proj,)
        self.gate_up = (mlp.gate_proj, mlp.up_proj)
        self.down = (mlp.down_proj,)
        self.qk_norms = (attn.q_norm, attn.k_norm) if hasattr(attn, "q_norm") else None  # Qwen3
        self.act = forward_of(mlp.act_fn)  # transformers' activation module's forward, as for the norms
        family = sys.modules[type(layer).__module__]
        self.rotary = family.apply_rotary_pos_emb
        self.eager = family.eager_attention_forward
        window_from = WINDOWS[family_prefix(layer)]
        # the sliding window the attention module passes its attention function (Llama passes none)
        self.window = (
            {}
            if window_from is None
            else {
                "sliding_window": attn.sliding_window
                if window_from == "module"
                else getattr(attn.config, "sliding_window", None)
            }
        )

    def applies(self, device: torch.device) -> bool:
        """Whether a pass on `device` may run here (`lean.inference_pass`)."""
        return inference_pass(self.layer, device)

    def __call__(self, hidden: torch.Tensor, mask: torch.Tensor | None, cache, kwargs: dict) -> torch.Tensor:
        layer, attn, outputs = self.layer, self.attn, products_of(kwargs)
        input_shape = hidden.shape[:-1]
        hidden_shape = (*input_shape, -1, attn.head_dim)
        x = layer.input_layernorm.forward(hidden)
        q, k, v = outputs(self.qkv, x)
        q, k, v = q.view(hidden_shape), k.view(hidden_shape), v.view(hidden_shape)
        if self.qk_norms is not None:
            q, k = self.qk_norms[0].forward(q), self.qk_norms[1].forward(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        cos, sin = kwargs["position_embeddings"]
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
            **self.window,
            position_ids=None,
            use_cache=False,
            query_groups=kwargs.get("query_groups"),
        )
        (o,) = outputs(self.o, o.reshape(*input_shape, -1).contiguous())
        hidden = hidden + o
        x = layer.post_attention_layernorm.forward(hidden)
        gate, up = outputs(self.gate_up, x)
        (down,) = outputs(self.down, self.act(gate) * up)
        return hidden + down
