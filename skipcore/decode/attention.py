"""Decode attention over grouped KV heads that reads the cache in place.

With a mask (which our left-padded batches and the static cache's unwritten slots always need), `transformers`'
SDPA path copies K and V once per query head of a group (`repeat_kv`) before calling the kernel: at batch 8-64
that copy moves more bytes than the layer's weights. For a single query position the copy is not needed: the
query heads that share a KV head become the "query positions" of one attention over that KV head, and the mask
(the same for every query head) broadcasts over them. The result is the same attention, summed in another order:
in float32 the difference stays far below any token's margin (full depth is token-identical to `generate()` for
every family), but in bfloat16 and float16 it reaches a logit's last bit (Gemma 3 270M parted from `generate()`
at a one-ulp near-tie), so half precision takes `transformers`' own path, K/V copy and all.

A sliding-window layer in `transformers`' own cache holds only its window: a decode step attends over the last
`window` keys. Ours keeps every position and masks those before the window; the masked keys add nothing, but in
bfloat16 SDPA's CPU kernel rounds differently over a longer row of keys, and the tokens part at near-ties. Where
the query is the cache's last column (a dynamic cache's decode step), `keys_from_end` reads the same last `window`
keys `generate()` does, so the two agree bit for bit.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

NAME = "skipcore_grouped_sdpa"
# the same where the query is the last column of the keys (a dynamic cache's decode step)
NAME_AT_END = "skipcore_grouped_sdpa_at_end"


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
    """`sdpa_attention_forward`, except one masked float32 query position over grouped KV heads: no K/V copy."""
    groups = getattr(module, "num_key_value_groups", 1)
    B, H, q_len, D = query.shape
    folds = query.dtype == torch.float32 and groups > 1 and q_len == 1
    if not folds or attention_mask is None or attention_mask.shape[1] != 1 or dropout:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    # query head h uses KV head h // groups (as repeat_kv lays them out): (B, H, 1, D) -> (B, kv_heads, groups, D)
    q = query.reshape(B, H // groups, groups, D)
    out = torch.nn.functional.scaled_dot_product_attention(
        q, key, value, attn_mask=attention_mask, scale=scaling
    )
    return out.reshape(B, 1, H, D), None  # (batch, q_len, heads, head_dim), as the attention modules expect


def keys_from_end(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """`grouped_decode_sdpa` for a query at the keys' last column: a sliding layer's one query reads only the
    last `sliding_window` keys (those it can see), as `transformers`' sliding cache holds them."""
    n = key.shape[2]
    if sliding_window and query.shape[2] == 1 and n > sliding_window:
        key, value = key[:, :, n - sliding_window :], value[:, :, n - sliding_window :]
        # the mask's first n columns are the keys' (where sdpa_attention_forward cuts it)
        if attention_mask is not None:
            attention_mask = attention_mask[..., n - sliding_window : n]
    return grouped_decode_sdpa(
        module, query, key, value, attention_mask, dropout, scaling, sliding_window=sliding_window, **kwargs
    )


AttentionInterface.register(NAME, grouped_decode_sdpa)
AttentionInterface.register(NAME_AT_END, keys_from_end)


@contextmanager
def grouped_decode_attention(config, query_at_end: bool = False) -> Iterator[None]:
    """Route a model's SDPA attention through `grouped_decode_sdpa` for our own forward passes only;
    `query_at_end`: every query is the last column of the keys the cache returns (a dynamic cache's step, not a
    static buffer nor a ragged multi-column pass), so a sliding layer may read its window alone.

    The model's config is restored on exit, so `generate()` and training see the model exactly as loaded.
    """
    if config._attn_implementation != "sdpa":
        yield
        return
    config._attn_implementation = NAME_AT_END if query_at_end else NAME
    try:
        yield
    finally:
        config._attn_implementation = "sdpa"
