"""Recount the FLOPs of a sweep's CALM-DEC rows from their traces, by the cost convention as it stands.

CALM's propagation runs each attention module up to its cache write, which projects Q before K and V: its count
(`skipcore.policies.calm.propagation_flops`) holds all three, where sweeps made before 2026-11-29 counted K and V
alone; and a row that has ended rides through its batch's layers without a head reading it, where they charged it
one in `flops_batch`. Both are exact functions of what a trace records (each token's exit layer, its batch's
layers, whether its row had ended), so the traces are recounted in place and each CALM row's FLOPs speedups (and
its timing flag, which reads the batch's FLOPs speedup) are read off its recounted trace by
`skipcore.measure.summary.summarize`, as the sweep reads them. Quality, layers, KV and timings are untouched.

    python scripts/recount_calm_flops.py data/sweeps/default.parquet data/sweeps/smollm2_quality.parquet
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from skipcore.adapters import shapes_from_config
from skipcore.evaluate.sweep.store import SweepStore, read_sweep
from skipcore.measure import costs
from skipcore.measure.paired_timing import plausibility_flag
from skipcore.measure.summary import summarize
from skipcore.models.loading import load_config
from skipcore.policies.calm import propagation_flops
from skipcore.traces.files import read_trace, write_trace

SUMMARY_COLUMNS = ("flops_speedup_decode", "flops_speedup_with_prompt", "batch_flops_speedup_decode")


def recount_trace(trace, shapes) -> None:
    """The CALM cost columns of `trace`, recounted in place; the old ones are checked to be what the earlier
    convention gives first (a trace that is not is refused, untouched)."""
    L = shapes.num_layers
    decode = (trace["step"] >= 1).to_numpy()
    ended = trace["finished"].to_numpy(dtype=bool)
    above = np.where(decode, L - trace["exit_layer"].to_numpy(), 0)
    batch_above = np.where(decode, L - trace["batch_layers"].to_numpy(), 0)
    kv_only = 2 * shapes.hidden_size * 2 * shapes.num_kv_heads * shapes.head_dim  # the earlier count
    if not np.array_equal(trace["propagation_flops"].to_numpy(), above * kv_only):
        raise SystemExit("a trace's propagation FLOPs are not the earlier convention's: recounted already?")
    per_layer, head = propagation_flops(shapes), costs.head_flops(shapes)
    own = trace["flops"] + trace["confidence_flops"]
    batch_layers = trace["flops_batch"] - trace["confidence_flops"] - batch_above * kv_only
    trace["propagation_flops"] = (above * per_layer).astype(float)
    trace["flops_total"] = own + trace["propagation_flops"]
    trace["flops_batch"] = batch_layers + trace["confidence_flops"] + batch_above * per_layer
    trace["flops_batch"] -= np.where(decode & ended, head, 0)


def recount_sweep(path: Path) -> int:
    rows, meta = read_sweep(path)
    records = rows.to_dict("records")
    changed = 0
    for row in records:
        if row.get("policy") != "calm":
            continue
        trace_file = path.parent / row["trace_path"]
        trace, trace_meta = read_trace(trace_file)
        shapes = shapes_from_config(load_config(row.get("model_path") or row["model"]))
        recount_trace(trace, shapes)
        summary = summarize(trace, shapes.num_layers)
        row.update({k: summary[k] for k in SUMMARY_COLUMNS if k in row})
        if row.get("timing_runs") and math.isfinite(row.get("wall_speedup_decode", math.nan)):
            row["timing_flag"] = plausibility_flag(
                row["wall_speedup_decode"],
                row["batch_layer_speedup"],
                row["batch_flops_speedup_decode"],
                row["timing_runs"],
            )
        write_trace(trace, trace_file, trace_meta, overwrite=True)
        changed += 1
    traces_dir = path.with_name(path.stem + "_traces")
    with SweepStore(path, meta["identity"], False, traces_dir) as store:
        store.rows = records
        store.flush()
    return changed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweeps", nargs="+", type=Path, help="sweep results files (.parquet)")
    for path in parser.parse_args().sweeps:
        print(f"{path}: {recount_sweep(path)} CALM-DEC rows recounted")


if __name__ == "__main__":
    main()
