"""SmolLM2-135M's whole quality-versus-speedup curve in one table, from the per-model sweeps `smollm2_curve.sh` runs.

Each part is one model's sweep at one batch size (its own schedule's rows, quality on the test split and wall clock
paired with its own full depth); the curve is their rows at that batch size (8 in `--parts`, 1 in `--parts-b1`),
each model's role said by what it was trained for: `model` for
a skip-aware fine-tune trained at one schedule (the paper's recipe; on the curve at that schedule only, its own full
depth being what it is timed against), `elastic` for one trained at every target, `baseline` for the full-depth
fine-tune. Trace paths are rewritten relative to the curve's folder. Writes
`--out` (Parquet, with the parts and their digests in its metadata) and a CSV copy beside it, each replaced
atomically, and prints the table the README and docs/results.md quote.

    python scripts/smollm2_curve.py --parts data/sweeps/smollm2_curve_parts \
        --parts-b1 data/sweeps/smollm2_curve_parts_b1 --out data/sweeps/smollm2_curve.parquet
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from skipcore.errors import UserError
from skipcore.evaluate.sweep.store import read_sweep
from skipcore.files import atomic_write, file_digest
from skipcore.models.training_record import read_record

ROOT = Path(__file__).resolve().parents[1]
META_KEY = b"skipcore_curve"
ROLES = {
    "fixed": "model",
    "elastic": "elastic",
    "full": "baseline",
}  # training objective -> role in the curve


def role_of(model_path: str) -> str:
    """The curve's role of a part's model, from its training record."""
    record = read_record(model_path) or {}
    objective = record.get("objective")
    if objective not in ROLES:
        raise UserError(
            f"{model_path} has no skipcore training record with an objective; not a SmolLM2 fine-tune"
        )
    return ROLES[objective]


def curve(parts: dict[Path, int], out: Path) -> pd.DataFrame:
    """Every part's rows at its batch size (`parts`: part -> batch) with its role, traces said relative to `out`'s
    folder; by role, target and batch (8 first)."""
    tables = []
    for part, batch in parts.items():
        rows, _ = read_sweep(part)
        if rows.empty:
            raise UserError(f"{part} has no rows yet: run scripts/smollm2_curve.sh to finish it")
        rows = rows[
            rows["batch_size"] == batch
        ].copy()  # a part stopped and rerun at another batch holds others
        rows["model_role"] = [role_of(p) for p in rows["model_path"]]
        # a model trained at one schedule is on the curve at that schedule; its own full depth, which it was not
        # trained for, is only what its row is timed against (`full_decode_ms_per_step`)
        rows = rows[(rows["model_role"] != "model") | (rows["target_speedup"].fillna(1.0) > 1)]
        rows["trace_path"] = [
            Path(os.path.relpath((part.parent / t).resolve(), out.parent.resolve())).as_posix()
            if isinstance(t, str)
            else t
            for t in rows["trace_path"]
        ]
        tables.append(rows)
    table = pd.concat(tables, ignore_index=True)
    order = {"baseline": 0, "model": 1, "elastic": 2}
    key = (
        table["model_role"].map(order) * 1000
        + table["target_speedup"].fillna(1.0) * 10
        - table["batch_size"] / 8
    )
    return table.iloc[key.argsort(kind="stable")].reset_index(drop=True)


def write(table: pd.DataFrame, parts: dict[Path, int], out: Path) -> None:
    """The curve and its CSV copy, each written beside itself and renamed."""
    meta = {
        "parts": {os.path.relpath(p.resolve(), out.parent.resolve()): file_digest(p) for p in parts},
        "made_by": "scripts/smollm2_curve.py",
    }
    arrow = pa.Table.from_pandas(table, preserve_index=False)
    arrow = arrow.replace_schema_metadata(
        {**(arrow.schema.metadata or {}), META_KEY: json.dumps(meta).encode()}
    )

    def parquet(path: Path) -> None:
        pq.write_table(arrow, path)

    atomic_write(out, parquet)
    atomic_write(out.with_suffix(".csv"), lambda p: table.to_csv(p, index=False))


def summary(table: pd.DataFrame) -> str:
    """The curve as a Markdown table: quality, speedups realised and measured, by batch size."""
    head = (
        "| model | schedule | batch | layer speedup | FLOPs speedup | BLEU | ROUGE-L | names % | landmark % "
        "| measured decode speedup [95%] | measured / FLOPs |"
    )
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for _, r in table.iterrows():
        full = pd.isna(r["target_speedup"]) or r["target_speedup"] == 1
        schedule = "full depth" if full else f"{r['max_layers']}->{r['min_layers']}"
        measured, ratio = "", ""
        if pd.notna(r["wall_speedup_decode"]):
            flag = " (flagged)" if isinstance(r.get("timing_flag"), str) and r["timing_flag"] else ""
            lo, hi = r["wall_speedup_decode_lo"], r["wall_speedup_decode_hi"]
            measured = f"{r['wall_speedup_decode']:.2f}x [{lo:.2f}, {hi:.2f}]{flag}"
            ratio = f"{r['wall_speedup_decode'] / r['batch_flops_speedup_decode']:.2f}"
        lines.append(
            f"| {r['model']} | {schedule} | {r['batch_size']} | {r['layer_speedup']:.2f}x | {r['batch_flops_speedup_decode']:.2f}x "
            f"| {r['bleu']:.1f} | {r['rougeL']:.1f} | {r['slot_name']:.0f} | {r['slot_near']:.0f} "
            f"| {measured} | {ratio} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", type=Path, required=True, help="folder of the per-model sweeps at batch 8")
    p.add_argument("--parts-b1", type=Path, help="folder of the per-model sweeps at batch 1 (optional)")
    p.add_argument("--out", type=Path, required=True, help="the curve's .parquet (a .csv copy beside it)")
    args = p.parse_args(argv)
    try:
        if args.out.suffix != ".parquet":
            raise UserError(f"--out must be a .parquet file, got {args.out}")
        parts = {p: 8 for p in sorted(args.parts.glob("*.parquet"))}
        if not parts:
            raise UserError(
                f"--parts {args.parts} holds no sweep (.parquet): run scripts/smollm2_curve.sh first"
            )
        if args.parts_b1 is not None:
            if not args.parts_b1.is_dir():
                raise UserError(f"--parts-b1 {args.parts_b1} is not a folder")
            parts.update({p: 1 for p in sorted(args.parts_b1.glob("*.parquet"))})
        if args.out.exists():
            kept = pq.read_schema(args.out).metadata or {}
            if META_KEY not in kept:
                raise UserError(f"--out {args.out} exists and is not a curve this script wrote; it is kept")
        table = curve(parts, args.out)
    except UserError as e:
        print(f"smollm2_curve.py: {e}", file=sys.stderr)
        return 2
    write(table, parts, args.out)
    print(summary(table))
    print(f"{len(table)} rows from {len(parts)} sweeps -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
