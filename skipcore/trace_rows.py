"""A decoded batch as trace rows: one per generated token per batch row, costs by `skipcore.costs`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from skipcore import costs
from skipcore.adapters.base import ModelShapes
from skipcore.schedule import mask_string

if TYPE_CHECKING:
    from skipcore.engine import BatchOutput


def build_trace(
    out: BatchOutput,
    shapes: ModelShapes,
    tokenizer,
    run_id: str,
    first_sample: int = 0,
    batch: int = 0,
    bytes_per_element: int = 4,
) -> pd.DataFrame:
    """Rows for one batch, costs computed from the shapes by the convention in `skipcore.costs`."""
    B, T = out.tokens.shape
    L = shapes.num_layers
    n = np.array([len(s) for s in out.layer_sets])  # n(s) per step actually run
    P = out.prompt_lens.numpy()
    steps = np.arange(T)
    flops = costs.flops_table(shapes, P, np.broadcast_to(n, (B, T)))
    flops_full = costs.flops_table(shapes, P, np.full((B, T), L))
    per_pos = costs.kv_bytes_per_position(shapes, bytes_per_element)
    written = np.cumsum(np.where(steps == 0, 0, n))  # positions written by decode steps 1..s, over layers
    kv = (L * P[:, None] + written[None, :]) * per_pos
    kv_full = L * (P[:, None] + steps[None, :]) * per_pos
    ids = out.tokens.numpy()
    vocab = {int(i): tokenizer.decode([int(i)]) for i in np.unique(ids)}  # decode each distinct id once
    masks = [mask_string(s, L) for s in out.layer_sets]
    return pd.DataFrame(
        {
            "run_id": run_id,
            "sample": np.repeat(np.arange(B) + first_sample, T),
            "step": np.tile(steps, B),
            "position": (P[:, None] + steps[None, :]).ravel(),
            "token_id": ids.ravel(),
            "token": [vocab[int(i)] for i in ids.ravel()],
            "num_layers_run": np.tile(n, B),
            "layer_mask": masks * B,
            "flops": flops.ravel(),
            "flops_full": flops_full.ravel(),
            "kv_cache_bytes": kv.ravel().astype(np.int64),
            "kv_cache_bytes_full": kv_full.ravel().astype(np.int64),
            "step_ms": np.tile(np.asarray(out.step_ms, dtype=float), B),
            "logprob": out.logprobs.numpy().ravel().astype(float),
            "finished": out.finished_before.numpy().ravel(),
            "batch": batch,
            "prompt_len": np.repeat(P, T),
        }
    )
