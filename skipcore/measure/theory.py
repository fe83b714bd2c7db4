"""A designed schedule costed like a trace, without running a model: the dashboard's designer and the notebooks
show what a schedule would spend before anything is generated.

Columns follow the trace schema (`step`, `num_layers_run`, `layer_mask`, `flops`, `flops_full`, `kv_cache_bytes`,
`kv_cache_bytes_full`), with the costs of `skipcore.measure.costs`, so one cost figure draws a design and a
measured trace alike. `kv_cache_map` says which K/V entries a run of layer sets writes, and where a later
position would read one that was never written (a hole: what nested sets rule out).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

import skipcore.measure.costs as costs
from skipcore.adapters.base import ModelShapes
from skipcore.measure.summary import spent_ratio
from skipcore.schedule import Schedule, mask_string

# The context a model's head ceiling is listed at where no run is in view (`skipcore models`, the notebooks). The
# ceiling grows with the context, as every layer's attention does while the head stays: a screen showing it beside
# a run's numbers costs it at the longest context those reach, where it bounds them.
CEILING_CONTEXT = 64


def flops_ceiling(
    shapes: ModelShapes, mode: str = "skip", warmup_layers: int = 1, context: int = CEILING_CONTEXT
) -> float:
    """The most FLOPs speedup layer skipping can give this model's decode tokens attending to at most `context`
    positions: full depth over the smallest pass `mode` allows (skip: its warmup layers and a top layer; exit,
    middle: one layer), the LM head always run (`skipcore.measure.costs.head_ceiling`): the largest over the
    contexts up to `context`, so a run's decode FLOPs speedup is at most the ceiling at its longest context."""
    return costs.head_ceiling(shapes, mode, int(warmup_layers or 0), max(1, int(context)))


def theoretical_steps(
    schedule: Schedule,
    shapes: ModelShapes,
    prompt_len: int,
    max_new_tokens: int,
    bytes_per_element: int = 4,
) -> pd.DataFrame:
    """One row per step for a single prompt of `prompt_len` tokens, costed like a trace (no model run).

    Columns follow the trace schema (`step`, `num_layers_run`, `layer_mask`, `flops`, `flops_full`,
    `kv_cache_bytes`, `kv_cache_bytes_full`) so the cost figures draw a design and a measurement alike.
    """
    L = schedule.num_layers
    sets = schedule.layer_sets(max_new_tokens)
    n = np.array([len(s) for s in sets])
    steps = np.arange(max_new_tokens)
    flops = [costs.prefill_flops(shapes, prompt_len)] + [
        costs.decode_flops(shapes, prompt_len, s, sets[s]) for s in steps[1:]
    ]
    flops_full = [costs.prefill_flops(shapes, prompt_len)] + [
        costs.decode_flops(shapes, prompt_len, s, L) for s in steps[1:]
    ]
    per_pos = costs.kv_bytes_per_position(shapes, bytes_per_element)
    written = np.cumsum(np.where(steps == 0, 0, n))
    return pd.DataFrame(
        {
            "step": steps,
            "num_layers_run": n,
            "layer_mask": [mask_string(s, L) for s in sets],
            "flops": np.asarray(flops, dtype=float),
            "flops_full": np.asarray(flops_full, dtype=float),
            "kv_cache_bytes": ((L * prompt_len + written) * per_pos).astype(np.int64),
            "kv_cache_bytes_full": (L * (prompt_len + steps) * per_pos).astype(np.int64),
        }
    )


def theoretical_summary(steps: pd.DataFrame, num_layers: int) -> dict[str, float]:
    """Layer and FLOPs speedups (decode only, with prompt) and the KV cache at the last step; a speedup over no
    decode step (one new token) is NaN, as a measured run's is (`summary.spent_ratio`)."""
    decode = steps[steps["step"] >= 1]
    last = steps.iloc[-1]
    kv, kv_full = int(last["kv_cache_bytes"]), int(last["kv_cache_bytes_full"])
    return {
        "layer_speedup": spent_ratio(num_layers * len(decode), decode["num_layers_run"].sum()),
        "flops_speedup_decode": spent_ratio(decode["flops_full"].sum(), decode["flops"].sum()),
        "flops_speedup_with_prompt": spent_ratio(steps["flops_full"].sum(), steps["flops"].sum()),
        "kv_cache_bytes": kv,
        "kv_cache_bytes_full": kv_full,
        "kv_saved_fraction": 1 - kv / kv_full if kv_full else 0.0,
    }


def kv_cache_map(layer_sets: Sequence[Sequence[int]], prompt_len: int, num_layers: int) -> pd.DataFrame:
    """Which KV entries exist, per layer and position, after feeding the steps of `layer_sets`.

    Step 0 writes positions [0, P) in the layers of its set; step s >= 1 writes position P+s-1 in the layers
    of set s. `state` is 'written', 'skipped' (never written, never read) or 'hole' (never written but read by
    a later position that runs the layer: the KV cache would need a recomputation there).
    """
    T = len(layer_sets)
    cols = prompt_len + T - 1
    written = np.zeros((num_layers, cols), dtype=bool)
    written[list(layer_sets[0]), :prompt_len] = True
    for s in range(1, T):
        written[list(layer_sets[s]), prompt_len + s - 1] = True
    read_later = np.zeros_like(written)  # (layer, position) read by some later position running that layer
    for i in range(num_layers):
        runs = np.flatnonzero(written[i])
        if len(runs):
            read_later[i, : runs.max()] = True
    state = np.where(written, "written", np.where(read_later, "hole", "skipped"))
    layer, pos = np.meshgrid(range(num_layers), range(cols), indexing="ij")
    return pd.DataFrame(
        {
            "layer": layer.ravel(),
            "position": pos.ravel(),
            "step": np.maximum(0, pos.ravel() - prompt_len + 1),
            "state": state.ravel(),
        }
    )


def speedups_by_prompt_length(
    schedule: Schedule, shapes: ModelShapes, prompt_lens: Sequence[int], max_new_tokens: int
) -> pd.DataFrame:
    """Theoretical layer and FLOPs speedups (decode only, with the prompt) for prompts of several lengths."""
    rows = []
    for P in prompt_lens:
        summary = theoretical_summary(
            theoretical_steps(schedule, shapes, int(P), max_new_tokens), schedule.num_layers
        )
        rows.append({"prompt_len": int(P), **summary})
    return pd.DataFrame(rows)
