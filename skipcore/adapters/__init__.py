"""Adapters per model family, chosen by the config's `model_type`.

- base.py: what the engine needs from a family (embed, layers, head, shapes) and the sliding-window mask
- opt.py, gpt2.py, llama.py, gemma3.py: one small adapter per family
- `check_config`: what a supported family's config may not have (a rotary scaling chosen per pass, bidirectional
  attention)

The arithmetic the adapters call (the LM head's blocked product, prepacked bfloat16 linears, the Llama family's
lean layer, the decode attention) lives in `skipcore.kernels`, below them.
"""

from __future__ import annotations

from torch import nn

from skipcore.adapters.base import (
    UNWINDOWED_TYPES,
    Adapter,
    ModelShapes,
    fused_copy_bytes,
    max_positions,
    positions_from_mask,
)
from skipcore.adapters.gemma3 import Gemma3Adapter
from skipcore.adapters.gpt2 import GPT2Adapter
from skipcore.adapters.llama import LlamaAdapter
from skipcore.adapters.opt import OPTAdapter
from skipcore.errors import ArgumentTypeError, UserError

ADAPTERS: dict[str, type[Adapter]] = {
    "opt": OPTAdapter,
    "gpt2": GPT2Adapter,
    "llama": LlamaAdapter,
    "mistral": LlamaAdapter,
    "qwen2": LlamaAdapter,
    "qwen3": LlamaAdapter,
    "gemma3_text": Gemma3Adapter,
}
SUPPORTED = tuple(ADAPTERS)


def check_supported(model_type: str) -> None:
    if model_type not in ADAPTERS:
        raise UserError(
            f"unsupported architecture {model_type!r}; supported model types: {', '.join(SUPPORTED)}"
        )


# rotary types whose frequencies follow the length of each pass (transformers picks longrope's short or long factors
# per forward), where the engine computes every position's rotation once: its tokens would not be generate()'s
PER_PASS_ROPE = ("longrope",)


def check_config(config) -> None:
    """Refuse in one line a config the engine cannot run exactly: a family without an adapter, a rotary type whose
    frequencies change with each pass's length (`PER_PASS_ROPE`), an odd rotary head size (rotary turns pairs of a
    head's values: transformers' own forward fails on one, mid-decode), or bidirectional attention (an embedding
    model's, which decodes nothing causally), a sliding window in a family whose attention reads none
    (`UNWINDOWED_TYPES`), or sliding layers (`layer_types`) with no window to slide."""
    check_supported(config.model_type)
    params = getattr(config, "rope_parameters", None) or {}
    nested = [v for v in params.values() if isinstance(v, dict)] if "rope_type" not in params else [params]
    per_pass = sorted({p.get("rope_type") for p in nested} & set(PER_PASS_ROPE))
    if per_pass:
        raise UserError(
            f"rope type {per_pass[0]!r} is not supported: its frequencies change with the length of each pass, "
            "where skipcore computes each position's rotation once, so its tokens would not be generate()'s"
        )
    if getattr(config, "rope_parameters", None) is not None:  # the rotary families' configs
        heads = getattr(config, "num_attention_heads", None) or 1
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        if head_dim % 2:
            raise UserError(
                f"head_dim {head_dim} is odd: rotary position embeddings turn a head's values in pairs, so a "
                "rotary model's head size is even (transformers' own forward fails on this config too)"
            )
    window = getattr(config, "sliding_window", None)
    if window and config.model_type in UNWINDOWED_TYPES:
        raise UserError(
            f"sliding_window {window} is set in a config of type {config.model_type!r}, whose attention reads no "
            "window while transformers' cache drops keys past it, so generate() and the model's own forward give "
            "different tokens; remove sliding_window from the config"
        )
    types = getattr(config, "layer_types", None) or ()
    sliding = [i for i, t in enumerate(types) if t == "sliding_attention"]
    if sliding and not (window and getattr(config, "use_sliding_window", True)):
        shown = sliding if len(sliding) <= 8 else [*sliding[:6], "...", sliding[-1]]
        layers = ", ".join(map(str, shown)) + (f" ({len(sliding)} layers)" if len(sliding) > 8 else "")
        raise UserError(
            f"layer_types marks layer{'s' if len(sliding) > 1 else ''} {layers} sliding_attention, but the "
            "config sets no sliding_window (or use_sliding_window is false), so those layers have no window; "
            "transformers' own forward fails on this config too: set sliding_window, or mark them full_attention"
        )
    if getattr(config, "use_bidirectional_attention", False):
        raise UserError(
            "bidirectional attention (use_bidirectional_attention, an embedding model's) is not supported: "
            "skipcore decodes causally"
        )


def shapes_from_config(config) -> ModelShapes:
    """The cost model's sizes for a config of a supported family, without loading any weights."""
    if not isinstance(getattr(config, "model_type", None), str):
        raise ArgumentTypeError(
            f"config must be a model's config (transformers' AutoConfig.from_pretrained, model.config), got "
            f"{type(config).__name__}",
            field="config",
        )
    check_supported(config.model_type)
    return ADAPTERS[config.model_type].shapes_from_config(config)


def adapter_for(model: nn.Module) -> Adapter:
    check_supported(model.config.model_type)
    return ADAPTERS[model.config.model_type](model)


__all__ = [
    "ADAPTERS",
    "SUPPORTED",
    "Adapter",
    "ModelShapes",
    "adapter_for",
    "check_supported",
    "fused_copy_bytes",
    "max_positions",
    "positions_from_mask",
    "shapes_from_config",
]
