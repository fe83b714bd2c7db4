"""Forward passes through chosen layers, and the masks they attend with: `forward_step`, the cached pass the
decode loop runs at every step (and a static decoder captures), and `skip_forward`, the uncached pass where every
column runs its own layer set (the training forward under a skip schedule, and the reference the cached loop is
checked against); `attention_mask` and `column_mask`, additive masks for left-padded and ragged batches.

With nested sets, the columns that run layer i are a prefix of the sequence (the prompt plus the steps whose
set still holds i). So layer i simply runs on that prefix while later columns ride the residual stream
unchanged: the same computation the loop does incrementally, done all at once without a cache.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from skipcore.adapters import Adapter, positions_from_mask
from skipcore.decode.cache import SkipKVCache
from skipcore.schedule import check_nested


def attention_mask(key_mask: torch.Tensor, q_len: int, dtype: torch.dtype) -> torch.Tensor:
    """A (batch, 1, q_len, keys) mask: causal, padding keys hidden, queries at the last q_len columns.

    A padding query is allowed to see itself so no row is empty (an all-masked SDPA row gives NaN, which
    would leak into the cache); real queries never see padding, so their values are unaffected.
    It is additive (0 or the dtype's minimum), the form eager attention adds and SDPA's kernels take: a bool
    mask would be turned into this again by SDPA in every layer, two extra kernels per layer per step.
    """
    keys = key_mask.shape[1]
    if q_len == 1:
        allowed = key_mask[:, None, None, :].bool()
    else:
        k_pos = torch.arange(keys, device=key_mask.device)
        q_pos = k_pos[keys - q_len :, None]
        allowed = ((k_pos <= q_pos) & key_mask[:, None, :].bool()) | (k_pos == q_pos)
        allowed = allowed[:, None]
    return _additive(allowed, dtype)


def column_mask(
    key_mask: torch.Tensor, starts: torch.Tensor, offset: int, q_len: int, width: int, dtype: torch.dtype
) -> torch.Tensor:
    """A (batch, 1, q_len, width) additive mask for q_len new columns per row that sit at columns
    `starts + offset ...` of each row's own cache (rows of a ragged batch stand at different columns).

    Query j of row r sees the row's committed columns before `starts[r]` (where `key_mask` holds real tokens) and
    the columns from `starts[r]` up to and including its own, `starts[r] + offset + j`: a multi-token step's earlier
    columns (drafted tokens) and itself, never a column left over from a rejected draft beyond it.
    """
    cols = torch.arange(width, device=key_mask.device)
    own = (starts[:, None] + offset + torch.arange(q_len, device=key_mask.device))[:, :, None]  # (B, q, 1)
    start = starts[:, None, None]
    committed = key_mask[:, None, :width].bool() & (cols < start)
    allowed = committed | ((cols >= start) & (cols <= own))
    return _additive(allowed[:, None], dtype)


def _additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """0 where allowed, the dtype's minimum elsewhere (the form both attention kernels take)."""
    zero = torch.zeros((), dtype=dtype, device=allowed.device)
    return zero.masked_fill(~allowed, torch.finfo(dtype).min)


def step_args(adapter: Adapter, cache: SkipKVCache) -> dict:
    """The layer arguments of a one-column step (`Adapter.pass_args`): its attention over a static buffer's every
    column (the unwritten ones masked), or a dynamic cache's keys up to its last column, and its products. Full
    depth's step, CALM's exit step and the lens's replay all run through them, so a step's bits do not depend on
    which of them runs it, and each reads a float32 cache (`--attention-dtype float32`) as the others do."""
    return adapter.pass_args("buffer" if cache.static else "end")


def forward_step(
    adapter: Adapter,
    input_ids: torch.Tensor,
    positions: torch.Tensor,
    key_mask: torch.Tensor,
    layers: Sequence[int],
    cache: SkipKVCache,
) -> torch.Tensor:
    """One cached forward pass of (B, q) `input_ids` through `layers` only; returns the last column's logits.

    Each layer's mask is cut to its cache buffer: a no-op when the cache returns just the positions written
    (they always fit the key mask), and, for a static cache, the whole preallocated buffer it returns.
    """
    args = step_args(adapter, cache)
    h = adapter.embed(input_ids, positions, args)
    # in the attention's dtype (the cache's), made once a step rather than cast in every layer
    mask = attention_mask(key_mask, input_ids.shape[1], cache.dtype)
    kw = {**adapter.layer_kwargs(positions, h.dtype), **args}
    for i in layers:
        h = adapter.run_layer(i, h, mask[..., : cache.capacity(i)], cache, kw)
    return adapter.head(h[:, -1], kw)


def column_layer_sets(
    prompt_cols: int, num_cols: int, step_sets: Sequence[Sequence[int]]
) -> list[tuple[int, ...]]:
    """The set each column runs: prompt columns run step 0's set; column P+s-1 feeds step s (held at the last)."""
    last = len(step_sets) - 1
    return [
        tuple(step_sets[0 if c < prompt_cols else min(c - prompt_cols + 1, last)]) for c in range(num_cols)
    ]


def skip_forward(
    adapter: Adapter,
    input_ids: torch.Tensor,
    attn: torch.Tensor,
    col_sets: Sequence[Sequence[int]],
) -> torch.Tensor:
    """Logits for every column of left-padded `input_ids` (B, C), column c running layers `col_sets[c]`."""
    check_nested(col_sets)
    B, C = input_ids.shape
    runs = torch.zeros(adapter.shapes.num_layers, dtype=torch.long)
    for layers in col_sets:
        runs[list(layers)] += 1  # nested sets: layer i runs on columns [0, runs[i])
    adapter.prepare(C)
    positions = positions_from_mask(attn)
    h = adapter.embed(input_ids, positions)
    for i, c in enumerate(runs.tolist()):
        if c == 0:
            continue
        mask = attention_mask(attn[:, :c], c, h.dtype)
        kw = adapter.layer_kwargs(positions[:, :c], h.dtype)
        out = adapter.run_layer(i, h[:, :c], mask, None, kw)
        h = out if c == C else torch.cat([out, h[:, c:]], dim=1)
    return adapter.head(h)
