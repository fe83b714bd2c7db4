"""One summary of a run, read off its trace: the speedups of the design notes ("Speedups") and KV saved."""

from __future__ import annotations

import pandas as pd


def summarize(trace: pd.DataFrame, num_layers: int) -> dict:
    """Layer and FLOPs speedups (decode only and with the prompt), KV bytes saved, tokens/s."""
    decode = trace[trace["step"] >= 1]
    last = trace.loc[trace.groupby("sample")["step"].idxmax()]
    kv, kv_full = int(last["kv_cache_bytes"].sum()), int(last["kv_cache_bytes_full"].sum())
    per_step = trace.drop_duplicates(["batch", "step"]) if "batch" in trace else trace.drop_duplicates("step")
    seconds = per_step["step_ms"].sum() / 1e3
    decode_seconds = per_step.loc[per_step["step"] >= 1, "step_ms"].sum() / 1e3
    produced = int((~trace["finished"]).sum())
    return {
        "num_layers": num_layers,
        "layer_speedup": float(num_layers / decode["num_layers_run"].mean()) if len(decode) else 1.0,
        "flops_speedup_decode": _ratio(decode["flops_full"].sum(), decode["flops"].sum()),
        "flops_speedup_with_prompt": _ratio(trace["flops_full"].sum(), trace["flops"].sum()),
        "kv_cache_bytes": kv,
        "kv_cache_bytes_full": kv_full,
        "kv_bytes_saved": kv_full - kv,
        "kv_saved_fraction": 1 - kv / kv_full if kv_full else 0.0,
        "tokens": produced,
        "seconds": float(seconds),
        "tokens_per_s": produced / seconds if seconds else float("nan"),
        "decode_seconds": float(decode_seconds),
    }


def _ratio(a: float, b: float) -> float:
    return float(a / b) if b else 1.0
