"""Measured speedups a reviewer can trust: paired, interleaved, repeated, with an interval and a sanity flag.

On a shared machine one timing is a sample of the machine's load as much as of the code. So a speedup is measured
against full depth of the same model, batch size and prompts, in alternation (full, setting, full, setting, ...)
after an untimed warm-up of each: a slow spell hits both sides of a pair. The reported value is the median of the
per-pair ratios, with a bootstrap 95% interval of that median; a cold first run (allocations, lazy set-up) is in
the warm-up and cannot move it.

A speedup far outside what the work allows is a measurement problem, not a result: it is flagged
(`plausibility_flag`) and printed as such, never silently reported. Used by the sweep, the bench, `generate
--timing-repeats` and the dashboard.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

# a measured decode speedup above this multiple of the batch layer speedup cannot come from skipping layers
MAX_OVER_LAYER = 1.2
# nor one below this fraction of the FLOPs speedup, from less work
MIN_OVER_FLOPS = 0.5
# fewest paired runs a speedup is reported from unflagged: for n <= 5 pairs the bootstrap interval of the median is
# the range of the n ratios, which holds the true median with probability 1 - 2^(1-n): 0 at one run, a coin toss
# (1/2) at two, 3/4 at three
MIN_PAIRED_RUNS = 3

Measure = Callable[[], Mapping[str, float]]  # one timed run: seconds per named quantity (e.g. decode, total)


@dataclass(frozen=True)
class PairedRatio:
    """reference / candidate time: the median over pairs, its bootstrap 95% interval, and the raw times."""

    median: float
    lo: float
    hi: float
    reference: tuple[float, ...]
    candidate: tuple[float, ...]

    @property
    def runs(self) -> int:
        return len(self.candidate)


def paired_ratio(
    reference: Sequence[float], candidate: Sequence[float], resamples: int = 2000, seed: int = 0
) -> PairedRatio:
    """Median of reference[i] / candidate[i] with a percentile-bootstrap 95% interval (seeded: reproducible)."""
    if len(reference) != len(candidate) or not reference:
        raise ValueError("paired timing needs the same number (>= 1) of reference and candidate runs")
    ref = np.asarray(reference, dtype=float)
    cand = np.asarray(candidate, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(cand > 0, ref / cand, np.nan)
    ratios = ratios[np.isfinite(ratios)]
    if not len(ratios):
        nan = float("nan")
        return PairedRatio(nan, nan, nan, tuple(reference), tuple(candidate))
    rng = np.random.default_rng(seed)
    draws = rng.choice(ratios, size=(resamples, len(ratios)), replace=True)
    medians = np.median(draws, axis=1)
    lo, hi = np.percentile(medians, [2.5, 97.5])
    return PairedRatio(float(np.median(ratios)), float(lo), float(hi), tuple(reference), tuple(candidate))


def time_pairs(
    reference: Measure, candidate: Measure, repeats: int, warmup: int = 1
) -> dict[str, PairedRatio]:
    """Warm up each side `warmup` times (untimed), then run reference, candidate, reference, ... `repeats` times.

    Each call returns seconds per named quantity; the result pairs them name by name.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for _ in range(warmup):
        reference()
        candidate()
    refs: list[Mapping[str, float]] = []
    cands: list[Mapping[str, float]] = []
    for _ in range(repeats):
        refs.append(reference())
        cands.append(candidate())
    return {k: paired_ratio([r[k] for r in refs], [c[k] for c in cands]) for k in refs[0]}


def measure_against_full(
    engine, prompts: Sequence[str], policy, max_new_tokens: int, batch_size: int | None, repeats: int
) -> dict[str, float | int]:
    """Measured speedups of `policy` against full depth with the same engine, prompts and batch size, and their
    `timing_flag` (`plausibility_flag`), bounded by the work the timed runs themselves saved: a sweep times the
    first few of the prompts it scores, whose layer speedup is not the whole set's.

    decode: ms per decode step (the per-step saving); total: seconds for the prompts end to end (longer or
    shorter outputs count). Columns as the sweep writes them.
    """
    timed: list[tuple[dict, float]] = []

    def measure(pol, keep: bool) -> Measure:
        def run() -> dict[str, float]:
            t0 = time.perf_counter()
            res = engine.generate(prompts, pol, max_new_tokens, batch_size=batch_size)
            total = time.perf_counter() - t0
            if keep:
                timed.append((res.summary, total))
            return {"decode": res.summary["decode_ms_per_step"], "total": total}

        return run

    pairs = time_pairs(measure(None, False), measure(policy, True), repeats)
    d = pairs["decode"]
    ran = timed[-1][0]  # the timed runs' own work (one policy on the same prompts: every run's is the same)
    return {
        **_speedup_columns("decode", d),
        **_total_columns(pairs["total"], len(prompts), [s["tokens"] / t for s, t in timed[1:]]),
        "decode_ms_per_step": float(np.median(d.candidate)),
        "full_decode_ms_per_step": float(np.median(d.reference)),
        **_runs_columns("decode_ms_per_step", d),
        "timing_flag": plausibility_flag(
            d.median, ran["batch_layer_speedup"], ran["batch_flops_speedup_decode"], d.runs
        ),
    }


def _speedup_columns(name: str, ratio: PairedRatio) -> dict[str, float]:
    return {
        f"wall_speedup_{name}": ratio.median,
        f"wall_speedup_{name}_lo": ratio.lo,
        f"wall_speedup_{name}_hi": ratio.hi,
    }


# a sweep row's columns of each side's timed runs (`_runs_columns`): per decode step and whole, the setting's and
# full depth's
RUNS_COLUMNS = tuple(
    f"{side}{name}_runs" for name in ("decode_ms_per_step", "seconds") for side in ("", "full_")
)


def runs_text(times: Sequence[float]) -> str:
    """A side's timed runs in their order as a JSON array (the same text in a Parquet and a CSV table; each float
    written so it reads back equal): a median and its interval recomputed from them (`paired_ratio`) are the
    file's own."""
    return json.dumps([float(t) for t in times])


def _runs_columns(name: str, ratio: PairedRatio) -> dict[str, str]:
    """Each side's timed runs (`runs_text`), the warm-up left out: `<name>_runs` the setting's, `full_<name>_runs`
    full depth's."""
    return {f"{name}_runs": runs_text(ratio.candidate), f"full_{name}_runs": runs_text(ratio.reference)}


def _total_columns(
    total: PairedRatio, prompts: int, tokens_per_s: list[float]
) -> dict[str, float | int | str]:
    """The end-to-end columns every timed row has; `tokens_per_s` of the timed runs, the warm-up left out."""
    return {
        **_speedup_columns("total", total),
        **_runs_columns("seconds", total),
        "timing_runs": total.runs,
        "timing_prompts": prompts,
        "seconds": float(np.median(total.candidate)),
        "full_seconds": float(np.median(total.reference)),
        "tokens_per_s": float(np.median(tokens_per_s)),
    }


def measure_total_against_full(
    engine, prompts: Sequence[str], run: Callable[[], tuple[float, int]], max_new_tokens: int, repeats: int
) -> dict[str, float | int]:
    """End-to-end speedup of a generator outside the loop (transformers' own `generate()`, which decodes one prompt
    at a time) against full depth of the same engine at batch size 1, paired as `measure_against_full`; `run()`
    generates the prompts and returns (seconds, tokens). No decode-only time: it cannot be taken apart."""
    tokens_per_s: list[float] = []

    def reference() -> dict[str, float]:
        t0 = time.perf_counter()
        engine.generate(prompts, None, max_new_tokens, batch_size=1)
        return {"total": time.perf_counter() - t0}

    def candidate() -> dict[str, float]:
        seconds, tokens = run()
        tokens_per_s.append(tokens / seconds)
        return {"total": seconds}

    total = time_pairs(reference, candidate, repeats)["total"]
    return _total_columns(total, len(prompts), tokens_per_s[1:])  # [0] is the warm-up


def runs_flag(measured: float, runs: int) -> str:
    """Empty, or why a measured speedup is no measurement whatever work it saved: none was taken, or fewer than
    `MIN_PAIRED_RUNS` paired runs (one is a single timing, whose interval is a point; two give an interval, their
    range, that misses the median half the time). The flag of a speedup with no theory to hold it to (speculative
    rounds, other engines)."""
    if not math.isfinite(measured):
        return "no measurement"
    if runs < 2:
        return "one paired run: a single timing, not a measurement (its interval is a point); time it again"
    if runs < MIN_PAIRED_RUNS:
        return (
            f"{runs} paired runs: the interval is their range, which holds the median only "
            f"{1 - 2.0 ** (1 - runs):.0%} of the time; time it with {MIN_PAIRED_RUNS} or more"
        )
    return ""


def plausibility_flag(measured: float, batch_layer_speedup: float, flops_speedup: float, runs: int) -> str:
    """Empty, or every reason a measured decode speedup is not to be taken as one, joined by '; ': too few paired
    runs (`runs_flag`), and a value implausible for the work it saved (design notes, "Timing"). A reader who
    times again for the first reason must hear of the second too."""
    said = runs_flag(measured, runs)
    if not math.isfinite(measured):
        return said
    reasons = [said] if said else []
    if measured > MAX_OVER_LAYER * batch_layer_speedup:
        reasons.append(
            f"measured {measured:.2f}x is above {MAX_OVER_LAYER}x the batch layer speedup "
            f"({batch_layer_speedup:.2f}x): skipping layers cannot save that much"
        )
    if measured < MIN_OVER_FLOPS * flops_speedup:
        reasons.append(
            f"measured {measured:.2f}x is below {MIN_OVER_FLOPS}x the FLOPs speedup ({flops_speedup:.2f}x): "
            "the timing is dominated by something other than the saved work"
        )
    return "; ".join(reasons)


def flag_texts(flags: pd.Series) -> pd.Series:
    """A sweep's `timing_flag` column as text, '' where no flag was raised. A table that flagged nothing may come
    back from Parquet or CSV as an all-NaN float column, which `fillna("")` must not be given."""
    return flags.astype("string").fillna("")


def flagged_timings(rows: pd.DataFrame, speedup: str) -> np.ndarray:
    """Where a row's `speedup` cannot be believed: a measured one (a `wall_speedup*` column) whose timing was
    flagged (`timing_flag`: faster than the work allows, or far slower). Such a row is on no front and chosen by
    no tune, and is crossed out wherever it is drawn."""
    if not speedup.startswith("wall_speedup") or "timing_flag" not in rows:
        return np.zeros(len(rows), dtype=bool)
    return flag_texts(rows["timing_flag"]).ne("").to_numpy()


def describe(ratio: PairedRatio, what: str = "decode speedup") -> str:
    """'1.93x [1.85, 2.01] decode speedup, median of 5 paired runs' (for summaries and logs)."""
    return f"{ratio.median:.2f}x [{ratio.lo:.2f}, {ratio.hi:.2f}] {what}, median of {ratio.runs} paired runs"
