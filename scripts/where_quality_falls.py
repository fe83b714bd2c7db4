"""Where a per-target SmolLM2 fine-tune's output leaves the full-depth fine-tune's, read from the shipped sweeps'
per-token traces (no model is run): for each model at its own schedule, the step at which each of the 100 test
outputs first differs from the full-depth fine-tune's output on the same meaning representation, the layers that
step ran, and how sure the model was of the token it wrote there.

    python scripts/where_quality_falls.py [--out results/where_quality_falls.md]

A first divergence is not an error (another wording can score as well), but the full-depth fine-tune writes the
best BLEU (63.9), so where the skipping models leave it is where their BLEU can go.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from tokenizers import Tokenizer

from skipcore.data import load_examples
from skipcore.metrics.slots import mr_slots

SWEEPS = Path("data/sweeps")
REFERENCE = ("smollm2_quality", "smollm2-e2e", 1.0)  # the full-depth fine-tune at full depth
MODELS = [  # (sweep, target its model was trained at)
    ("smollm2_2x_top_quality", 2.0),
    ("smollm2_3x_top_quality", 3.0),
    ("smollm2_4x_top_quality", 4.0),
    ("smollm2_5x_top_quality", 5.0),
]
BUCKETS = [(0, 1), (1, 5), (5, 10), (10, 15), (15, 20), (20, 25), (25, 30), (30, 80)]


def trace_of(sweep: str, target: float, model: str | None = None) -> tuple[pd.DataFrame, pd.Series]:
    table = pd.read_parquet(SWEEPS / f"{sweep}.parquet")
    rows = table[table.target_speedup == target]
    if model is not None:
        rows = rows[rows.model == model]
    row = rows[rows.policy == "static"].iloc[0]
    return pd.read_parquet(SWEEPS / row.trace_path), row


def outputs(trace: pd.DataFrame) -> dict[int, pd.DataFrame]:
    """Each sample's generated steps in order (the step's token, layers run and log-probability)."""
    return {s: g.sort_values("step").reset_index(drop=True) for s, g in trace.groupby("sample")}


def divergences(model: dict[int, pd.DataFrame], reference: dict[int, pd.DataFrame]) -> pd.DataFrame:
    """Per sample, the first step whose token differs from the reference's (None: the same output)."""
    rows = []
    for s, mine in model.items():
        ref = reference[s]
        n = min(len(mine), len(ref))
        same = mine.token_id.to_numpy()[:n] == ref.token_id.to_numpy()[:n]
        first = int(np.argmin(same)) if not same.all() else (None if len(mine) == len(ref) else n)
        if first is None:
            rows.append({"sample": s, "step": None, "layers": None, "p": None, "ref_p": None})
            continue
        at = mine.iloc[min(first, len(mine) - 1)]
        ref_at = ref.iloc[min(first, len(ref) - 1)]
        rows.append(
            {
                "sample": s,
                "step": first,
                "layers": int(at.num_layers_run),
                "p": float(np.exp(at.logprob)),
                "ref_p": float(np.exp(ref_at.logprob)),
            }
        )
    return pd.DataFrame(rows)


def layers_by_step(model: dict[int, pd.DataFrame]) -> dict[tuple[int, int], float]:
    steps = pd.concat(model.values())
    return {b: steps[(steps.step >= b[0]) & (steps.step < b[1])].num_layers_run.mean() for b in BUCKETS}


def texts(model: dict[int, pd.DataFrame], tokenizer: Tokenizer) -> dict[int, list[str]]:
    """Each sample's output as the text after each step (to find the step a string is written at)."""
    out = {}
    for s, g in model.items():
        ids = g.token_id.tolist()
        out[s] = [tokenizer.decode(ids[: i + 1]) for i in range(len(ids))]
    return out


def written_at(prefixes: list[str], value: str) -> int | None:
    """The step at which `value` first appears in the output (None: never)."""
    for i, text in enumerate(prefixes):
        if value in text:
            return i
    return None


def landmark_table(
    reference: dict[int, pd.DataFrame], models: dict[str, dict[int, pd.DataFrame]]
) -> list[str]:
    """The `near` slot (a landmark's proper name, copied from the MR) by where the reference writes it: how many
    of those outputs each model keeps it in, and the layers its schedule runs at that step."""
    sources = [e.source for e in load_examples("data/e2e_synth", "test", limit=len(reference))]
    tokenizer = Tokenizer.from_file("data/models/smollm2-e2e/tokenizer.json")
    ref_text = texts(reference, tokenizer)
    spans = [(0, 15), (15, 25), (25, 80)]
    counts = {span: [] for span in spans}
    for s, source in enumerate(sources):
        near = mr_slots(source).get("near")
        at = written_at(ref_text[s], near) if near else None
        if at is not None:
            counts[next(sp for sp in spans if sp[0] <= at < sp[1])].append(s)
    lines = [
        "",
        "The landmark (`near[...]`, a proper name copied from the MR) by the step at which the reference finishes "
        "writing it: how many of those outputs each model writes it in, and the mean layers its schedule runs at "
        "those steps.",
        "",
        "| reference writes it at step | outputs | " + " | ".join(models) + " |",
        "| --- | --- | " + " | ".join("---" for _ in models) + " |",
    ]
    for span, samples in counts.items():
        cells = []
        for model in models.values():
            kept = 0
            for s in samples:
                ids = model[s].token_id.tolist()
                kept += mr_slots(sources[s])["near"] in tokenizer.decode(ids)
            steps = pd.concat(model.values())
            layers = steps[(steps.step >= span[0]) & (steps.step < span[1])].num_layers_run.mean()
            cells.append(f"{kept} ({layers:.1f} layers)")
        lines.append(f"| {span[0]}-{span[1] - 1} | {len(samples)} | " + " | ".join(cells) + " |")
    return lines


def report() -> str:
    ref_trace, ref_row = trace_of(REFERENCE[0], REFERENCE[2], REFERENCE[1])
    reference = outputs(ref_trace)
    ref_len = np.median([len(g) for g in reference.values()])
    lines = [
        "# Where the per-target SmolLM2 fine-tunes leave the full-depth fine-tune",
        "",
        f"Reference: `{ref_row.model}` at full depth ({ref_row.bleu:.1f} BLEU; median output {ref_len:.0f} "
        "tokens with its EOS). Each model at the schedule it was trained at, greedy, the 100 test MRs of "
        "`data/e2e_synth` (the shipped sweeps' traces). Made by `python scripts/where_quality_falls.py`.",
        "",
        "| model (target) | BLEU | realised | same output | first divergence: median step | "
        "layers run there (median) | p of its token there (median) | the reference's p there (median) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    by_bucket, models = {}, {"full depth (reference)": reference}
    for sweep, target in MODELS:
        trace, row = trace_of(sweep, target)
        model = outputs(trace)
        models[f"{target:g}x"] = model
        d = divergences(model, reference)
        moved = d.dropna(subset=["step"])
        lines.append(
            f"| {row.model} ({target:g}x) | {row.bleu:.1f} | {row.layer_speedup:.2f}x | "
            f"{len(d) - len(moved)} of {len(d)} | {moved.step.median():.0f} | {moved.layers.median():.0f} | "
            f"{moved.p.median():.2f} | {moved.ref_p.median():.2f} |"
        )
        counts = pd.cut(moved.step, [b[0] for b in BUCKETS] + [BUCKETS[-1][1]], right=False)
        by_bucket[f"{target:g}x"] = (counts.value_counts(sort=False).tolist(), layers_by_step(model))
    lines += [
        "",
        "First divergences by step (how many of the 100 outputs first leave the reference in each span of steps), "
        "and the mean layers a step in that span runs:",
        "",
        "| steps | " + " | ".join(f"{k}: first divergences / mean layers" for k in by_bucket) + " |",
        "| --- | " + " | ".join("---" for _ in by_bucket) + " |",
    ]
    for i, b in enumerate(BUCKETS):
        cells = [f"{n[i]} / {layers[b]:.1f}" for n, layers in by_bucket.values()]
        lines.append(f"| {b[0]}-{b[1] - 1} | " + " | ".join(cells) + " |")
    lines += landmark_table(reference, models)
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("results/where_quality_falls.md"))
    args = parser.parse_args()
    text = report()
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(args.out)
    print(text)


if __name__ == "__main__":
    main()
