"""How sure a BLEU gap is: two sweeps' outputs on the same meaning representations, rebuilt from their per-token
traces (no model runs), and the gap between their corpus BLEU with a paired bootstrap over the MRs (the same
resample for both sides), so "within 1 BLEU" comes with an interval.

    python scripts/paired_bleu.py --model SWEEP[:MODE] --reference SWEEP[:MODE] [--split test] [--resamples 1000]

SWEEP is a sweep's .parquet (its traces beside it, as `skipcore sweep` writes them); MODE picks its row ("skip",
"full"; default: its only row, else "skip"). The outputs are scored as the sweep scores them (first line, every
reference of the MR), and each must score what its sweep wrote. Comma lists in --model, --reference and --split
pool pairs (test and dev, say) into one corpus. Prints each side's BLEU, the gap (model minus reference) and its
95% interval, and the share of resamples in which the gap is above -1.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
import sacrebleu
from tokenizers import Tokenizer

from skipcore.data import load_examples
from skipcore.evaluate.sweep.quality import first_line


def sweep_outputs(spec: str) -> tuple[list[list[int]], pd.Series]:
    """A sweep row's generated token ids per sample (up to the row's end), and the row."""
    path, _, mode = spec.partition(":")
    table = pd.read_parquet(path)
    if mode:
        table = table[table["mode"] == mode]
    elif len(table) > 1:
        table = table[table["mode"] == "skip"]
    if len(table) != 1:
        raise SystemExit(f"error: {spec} names {len(table)} sweep rows; add :MODE (skip, full)")
    row = table.iloc[0]
    trace = pd.read_parquet(Path(path).parent / row["trace_path"])
    trace = trace[~trace["finished"]].sort_values(["sample", "step"])
    by_sample = trace.groupby("sample")["token_id"].apply(list)
    return [by_sample.get(s, []) for s in range(int(row["num_examples"]))], row


class SentenceStats:
    """sacrebleu's corpus BLEU (the sweeps' metric, `skipcore.metrics`) as a sum of per-sentence statistics, so a
    resample's BLEU is a sum and one formula, the way sacrebleu's own paired bootstrap computes it."""

    def __init__(self, texts: list[str], references: list[list[str]]) -> None:
        width = max(len(r) for r in references)
        streams = [[r[k] if k < len(r) else None for r in references] for k in range(width)]
        self.bleu = sacrebleu.BLEU()
        self.stats = np.array(self.bleu._extract_corpus_statistics(texts, streams))

    def score(self, pick: np.ndarray | None = None) -> float:
        rows = self.stats if pick is None else self.stats[pick]
        return self.bleu._compute_score_from_stats(rows.sum(0).tolist()).score


def rebuilt(
    spec: str, ids: list[list[int]], row: pd.Series, examples: list, tokenizer: Tokenizer
) -> list[str]:
    """A sweep row's outputs (`sweep_outputs`) as it scored them (first lines), checked to score what it wrote."""
    if len(ids) != len(examples):
        raise SystemExit(f"error: {spec} holds {len(ids)} outputs, its split {len(examples)} MRs")
    texts = [first_line(tokenizer.decode(t)) for t in ids]
    score = SentenceStats(texts, [list(e.references) for e in examples]).score()
    if abs(score - row["bleu"]) > 0.005:
        raise SystemExit(f"error: {spec} rebuilt scores {score:.2f}, its sweep {row['bleu']:.2f}")
    return texts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--model", required=True, help="the sweep (and :MODE) whose gap is measured; a comma list pools"
    )
    p.add_argument(
        "--reference", required=True, help="the sweep (and :MODE) it is held against, one per --model"
    )
    p.add_argument("--dataset", default="data/e2e_synth")
    p.add_argument("--split", default="test", help="each pair's split (a comma list, one per pair)")
    p.add_argument("--tokenizer", default="data/models/smollm2-e2e/tokenizer.json")
    p.add_argument("--resamples", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    models, refs, splits = (v.split(",") for v in (args.model, args.reference, args.split))
    if not len(models) == len(refs) == len(splits):
        raise SystemExit("error: --model, --reference and --split name as many sweeps and splits each")

    tokenizer = Tokenizer.from_file(args.tokenizer)
    model_texts, ref_texts, references = [], [], []
    for model_spec, ref_spec, split in zip(models, refs, splits, strict=True):
        read = {spec: sweep_outputs(spec) for spec in (model_spec, ref_spec)}
        examples = load_examples(args.dataset, split, limit=len(read[ref_spec][0]))
        for side, spec, texts in (("model", model_spec, model_texts), ("reference", ref_spec, ref_texts)):
            ids, row = read[spec]
            texts += rebuilt(spec, ids, row, examples, tokenizer)
            print(
                f"{side} ({split}): {row['model']} {row['mode']} {row['max_layers']}->{row['min_layers']}: BLEU"
                f" {row['bleu']:.2f} as the sweep scored it, {row['layer_speedup']:.2f}x, {len(examples)} MRs"
            )
        references += [list(e.references) for e in examples]
    model, ref = SentenceStats(model_texts, references), SentenceStats(ref_texts, references)
    rng = np.random.default_rng(args.seed)
    gaps = []
    for _ in range(args.resamples):
        pick = rng.integers(0, len(references), len(references))
        gaps.append(model.score(pick) - ref.score(pick))
    lo, hi = np.percentile(gaps, [2.5, 97.5])
    ours, theirs = model.score(), ref.score()
    print(
        f"gap: {ours - theirs:+.2f} BLEU [{lo:+.2f}, {hi:+.2f}] over {len(references)} MRs "
        f"({ours:.2f} against {theirs:.2f}; paired bootstrap over MRs, {args.resamples} resamples); "
        f"above -1 in {np.mean(np.array(gaps) > -1):.0%} of them"
    )


if __name__ == "__main__":
    main()
