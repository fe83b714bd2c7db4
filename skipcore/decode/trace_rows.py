"""A decoded batch as trace rows: one per generated token per batch row, costs by `skipcore.measure.costs`.

The same for every policy: a token's own pass is the first `row_layers` of the layer set of the step that produced
it (`BatchOutput.token_steps`), and its input position holds K/V in `kv_layers` layers (more than its own pass
when a policy propagates skipped layers). `step_ms` and `batch_layers` are that step's.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

import skipcore.measure.costs as costs
from skipcore.adapters.base import ModelShapes
from skipcore.decode.outputs import BatchOutput
from skipcore.schedule import mask_string


def build_trace(
    out: BatchOutput,
    shapes: ModelShapes,
    tokenizer,
    run_id: str,
    first_sample: int = 0,
    batch: int = 0,
    bytes_per_element: int = 4,
) -> pd.DataFrame:
    """Rows for one batch in the common schema (design notes, "Trace schema"), plus `batch`, `prompt_len`
    and `batch_layers` (the layers the whole batch ran at that step)."""
    B, T = out.tokens.shape
    L = shapes.num_layers
    n = out.row_layers.numpy()
    P = out.prompt_lens.numpy()
    steps = np.arange(T)
    rounds = out.token_steps().numpy()  # the batch step that produced each token
    flops = costs.flops_table(shapes, P, n, lambda r, s: out.layer_sets[rounds[r, s]])
    flops_full = costs.flops_table(shapes, P, np.full((B, T), L))
    per_pos = costs.kv_bytes_per_position(shapes, bytes_per_element)
    written = np.cumsum(np.where(steps == 0, 0, out.kv_layers.numpy()), axis=1)  # decode steps 1..s
    kv = (L * P[:, None] + written) * per_pos
    kv_full = L * (P[:, None] + steps[None, :]) * per_pos
    ids = out.tokens.numpy()
    vocab = {int(i): tokenizer.decode([int(i)]) for i in np.unique(ids)}  # decode each distinct id once
    rounds = rounds.ravel()
    masks: dict[tuple[int, int], str] = {}
    for s, k in {(int(s), int(k)) for s, k in zip(rounds, n.ravel(), strict=True)}:
        masks[s, k] = mask_string(out.layer_sets[s][:k], L)
    # a row that has ended generates no token (its pad is no pick of the model's): no log-probability
    logprob = np.where(out.finished_before.numpy(), np.nan, out.logprobs.numpy().astype(float))
    return pd.DataFrame(
        {
            "run_id": run_id,
            "sample": np.repeat(np.arange(B) + first_sample, T),
            "step": np.tile(steps, B),
            "position": (P[:, None] + steps[None, :]).ravel(),
            "token_id": ids.ravel(),
            "token": [vocab[int(i)] for i in ids.ravel()],
            "num_layers_run": n.ravel(),
            "layer_mask": [masks[int(s), int(k)] for s, k in zip(rounds, n.ravel(), strict=True)],
            "flops": flops.ravel(),
            "flops_full": flops_full.ravel(),
            "kv_cache_bytes": kv.ravel().astype(np.int64),
            "kv_cache_bytes_full": kv_full.ravel().astype(np.int64),
            "step_ms": np.asarray(out.step_ms, dtype=float)[rounds],
            "logprob": logprob.ravel(),
            "finished": out.finished_before.numpy().ravel(),
            "batch": batch,
            "prompt_len": np.repeat(P, T),
            "batch_layers": np.array([len(s) for s in out.layer_sets])[rounds],
        }
    )
