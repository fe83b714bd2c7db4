"""Decode attention over grouped KV heads that reads the cache in place.

With a mask (which our left-padded batches and the static cache's unwritten slots always need), `transformers`'
SDPA path copies K and V once per query head of a group (`repeat_kv`) before calling the kernel: at batch 8-64
that copy moves more bytes than the layer's weights. For a single query position the copy is not needed: the
query heads that share a KV head become the "query positions" of one attention over that KV head, and the mask
(the same for every query head) broadcasts over them. The result is the same attention, computed exactly.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

NAME = "skipcore_grouped_sdpa"


def grouped_decode_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """`sdpa_attention_forward`, except one masked query position over grouped KV heads: no K/V copy."""
    groups = getattr(module, "num_key_value_groups", 1)
    B, H, q_len, D = query.shape
    if groups == 1 or q_len != 1 or attention_mask is None or attention_mask.shape[1] != 1 or dropout:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    # query head h uses KV head h // groups (as repeat_kv lays them out): (B, H, 1, D) -> (B, kv_heads, groups, D)
    q = query.reshape(B, H // groups, groups, D)
    out = torch.nn.functional.scaled_dot_product_attention(
        q, key, value, attn_mask=attention_mask, scale=scaling
    )
    return out.reshape(B, 1, H, D), None  # (batch, q_len, heads, head_dim), as the attention modules expect


AttentionInterface.register(NAME, grouped_decode_sdpa)


@contextmanager
def grouped_decode_attention(config) -> Iterator[None]:
    """Route a model's SDPA attention through `grouped_decode_sdpa` for our own forward passes only.

    The model's config is restored on exit, so `generate()` and training see the model exactly as loaded.
    """
    if config._attn_implementation != "sdpa":
        yield
        return
    config._attn_implementation = NAME
    try:
        yield
    finally:
        config._attn_implementation = "sdpa"
