"""Speedups read off a trace the same way for every policy, so static schedules and CALM share one table.

Two views, because they differ as soon as depth varies per token:

- per token ("theoretical"): over the generated tokens of rows still running (`finished` rows excluded),
  L x tokens / sum of the layers each token's own forward pass ran, and FLOPs full / FLOPs spent. A
  policy's own extra costs (CALM's confidence heads and KV propagation) are in `flops_total` when the trace
  has that column, and count against it.
- per batch: what a batch step actually ran, L x steps / sum of the step's layers (`batch_layers`, else the
  shared `num_layers_run`), and FLOPs full / FLOPs the batch spent on every row (`flops_batch`, else
  `flops`). For a static schedule the two views agree; for CALM a step lasts until its slowest row exits.
"""

from __future__ import annotations

import pandas as pd


def _ratio(a: float, b: float) -> float:
    return float(a / b) if b else 1.0


def trace_speedups(trace: pd.DataFrame, num_layers: int) -> dict:
    """Per-token and per-batch layer and FLOPs speedups, plus decode steps and ms per decode step."""
    decode = trace[trace["step"] >= 1]
    live = decode[~decode["finished"]]
    prompt = trace[trace["step"] == 0]
    cost = "flops_total" if "flops_total" in trace else "flops"
    batch_cost = "flops_batch" if "flops_batch" in trace else "flops"
    batch_layers = "batch_layers" if "batch_layers" in trace else "num_layers_run"
    keys = ["batch", "step"] if "batch" in trace else ["step"]
    steps = decode.drop_duplicates(keys)
    decode_ms = float(steps["step_ms"].sum())
    return {
        "layer_speedup": _ratio(num_layers * len(live), live["num_layers_run"].sum()),
        "layer_speedup_token_mean": float((num_layers / live["num_layers_run"]).mean()) if len(live) else 1.0,
        "flops_speedup_decode": _ratio(live["flops_full"].sum(), live[cost].sum()),
        "flops_speedup_with_prompt": _ratio(
            live["flops_full"].sum() + prompt["flops_full"].sum(), live[cost].sum() + prompt[cost].sum()
        ),
        "batch_layer_speedup": _ratio(num_layers * len(steps), steps[batch_layers].sum()),
        "batch_flops_speedup_decode": _ratio(decode["flops_full"].sum(), decode[batch_cost].sum()),
        "decode_steps": len(steps),
        "decode_ms_per_step": decode_ms / len(steps) if len(steps) else float("nan"),
    }
