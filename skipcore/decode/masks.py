"""Attention masks for left-padded batches, in the form the model's attention kernel expects."""

from __future__ import annotations

import torch


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
