"""Reading sweep tables for the trade-off page: which columns are quality, which are speedups, and how the
rows split into coloured series. Column names are guessed by pattern so a sweep from another version of
skipcore, or one a user made by hand, still plots; the page lets the user override every guess.

Speculative SkipDecode and transformers' own generate() (with and without its early-exit assistant) are series
of their own. transformers' rows have no trace, so no layer counts (NaN theoretical layer speedups) and no
decode-only timing: where a table mixes them with the loop's rows, `with_measured` adds one measured axis that
takes the decode speedup where it was measured and the end-to-end one elsewhere, and says which per row.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from skipcore import plots

QUALITY_HINTS = ("bleu", "rouge", "chrf", "bertscore", "meteor", "quality", "score", "slot_")
MEASURED_HINTS = ("measured", "wall", "latency", "ms_", "_ms", "tokens_per_s", "throughput")
SERIES_COLUMN = "series"  # added by skipcore.plots.sweep_series
MEASURED = "wall_speedup"  # decode speedup where measured, else end to end (`with_measured`)
MEASURED_OF = "wall_speedup_of"  # which of the two a row's MEASURED is
DECODE, TOTAL = "decode steps", "end to end (generate() is not timed per step)"


def with_series(df: pd.DataFrame) -> pd.DataFrame:
    """`plots.sweep_series` (transformers' generate() plain and with its early-exit assistant apart), and each
    speculative row's draft schedule target as `draft_target` (its `target_speedup` is that of the schedule it
    drafts with, not a speedup it reaches)."""
    out = plots.sweep_series(df)
    if "policy" not in out:
        return out
    policy = out["policy"].astype(str)
    speculative = policy == "speculative"
    if speculative.any() and "target_speedup" in out:
        out["draft_target"] = out["target_speedup"].where(speculative)
    return out


def with_measured(df: pd.DataFrame) -> pd.DataFrame:
    """Where some rows were timed end to end only (transformers' generate(): `wall_speedup_decode` NaN), one
    measured column for every row: `wall_speedup` (and its interval) is the decode speedup where measured, else
    the end-to-end one, and `wall_speedup_of` says which. Other tables are returned as they are."""
    decode, total = "wall_speedup_decode", "wall_speedup_total"
    if decode not in df or total not in df or MEASURED in df:
        return df
    only_total = df[decode].isna() & df[total].notna()
    if not only_total.any():
        return df
    out = df.copy()
    for end in ("", "_lo", "_hi"):
        if f"{decode}{end}" in out and f"{total}{end}" in out:
            out[f"{MEASURED}{end}"] = out[f"{decode}{end}"].where(~only_total, out[f"{total}{end}"])
    out[MEASURED_OF] = np.where(only_total, TOTAL, np.where(out[decode].notna(), DECODE, ""))
    return out


def unplaced(df: pd.DataFrame, x: str, y: str, series: str | None = SERIES_COLUMN) -> str | None:
    """The rows a chart of y against x cannot place (NaN in either), counted per series: 'transformers (2)'."""
    missing = df[df[x].isna() | df[y].isna()]
    if not len(missing):
        return None
    if series and series in missing:
        counts = missing[series].astype(str).value_counts(sort=False)
        return ", ".join(f"{name} ({n})" for name, n in counts.items())
    return f"{len(missing)} rows"


def numeric_columns(df: pd.DataFrame) -> list[str]:
    return [
        c
        for c in df.columns
        if pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])
    ]


def quality_columns(df: pd.DataFrame) -> list[str]:
    """Numeric columns named like a quality metric, BLEU and ROUGE-L first (the paper's E2E metrics)."""
    cols = [c for c in numeric_columns(df) if any(h in c.lower() for h in QUALITY_HINTS)]
    order = {"bleu": 0, "rougel": 1, "rouge_l": 1}
    return sorted(cols, key=lambda c: order.get(c.lower(), 2))


def speedup_columns(df: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(theoretical, measured) speedup columns: names with 'speedup', split by whether they were timed."""
    cols = [c for c in numeric_columns(df) if "speedup" in c.lower()]
    measured = [c for c in cols if any(h in c.lower() for h in MEASURED_HINTS)]
    theoretical = [c for c in cols if c not in measured]
    first = {"layer_speedup": 0, "flops_speedup_decode": 1, "target_speedup": 2}
    return sorted(theoretical, key=lambda c: first.get(c, 3)), measured


def series_columns(df: pd.DataFrame) -> list[str]:
    """Columns that make sensible colours: few distinct values."""
    return [c for c in df.columns if df[c].nunique() <= 12 and not pd.api.types.is_float_dtype(df[c])]


def check_sweep(df: pd.DataFrame) -> str | None:
    """Why a table cannot be drawn as a trade-off, or None when it can."""
    if df.empty:
        return "the sweep has no rows"
    if not quality_columns(df) and not numeric_columns(df):
        return "the sweep has no numeric columns"
    theoretical, measured = speedup_columns(df)
    if not theoretical and not measured:
        return (
            "no speedup column found (expected a numeric column with 'speedup' in its name, such as "
            "layer_speedup)"
        )
    if not quality_columns(df):
        return "no quality column found (expected bleu, rougeL, chrf or another column named like a metric)"
    return None


def static_rows(df: pd.DataFrame) -> pd.DataFrame | None:
    """The static schedules' rows (full depth included), or None when the table does not say its policies."""
    if "policy" not in df:
        return None
    return df[df["policy"].astype(str) == "static"]


def against_static_front(df: pd.DataFrame, x: str, y: str) -> pd.DataFrame | None:
    """The other policies' rows (CALM-DEC, adaptive, speculative, transformers' generate()), each placed against
    the static front of its own model (`skipcore.measure.pareto.front_position`); None when the table has no such or no
    static rows. Rows without x or y (transformers' layer speedups) cannot be placed and are left out."""
    from skipcore.measure.pareto import front_position

    static = static_rows(df)
    if static is None or not len(static) or len(static) == len(df):
        return None
    others = df[(df["policy"].astype(str) != "static") & df[x].notna() & df[y].notna()]
    role = "model_role" if "model_role" in df else None
    groups = others.groupby(role, sort=False) if role else [(None, others)]
    placed = [
        front_position(rows, static[static[role] == key] if role else static, x, y) for key, rows in groups
    ]
    placed = [p for p in placed if len(p)]
    return pd.concat(placed) if placed else None


def models_in(df: pd.DataFrame) -> str:
    """The models a sweep table holds, by name, a baseline model said as the base model: 'skipdecode-opt-e2e and
    opt-e2e-base (base model)'; the model role where the table names no model."""
    from skipcore.plots.tradeoffs import MODEL_COLUMN, with_model_labels

    if df.empty:
        return "no rows"
    names = list(dict.fromkeys(with_model_labels(df)[MODEL_COLUMN].astype(str)))
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def describe(df: pd.DataFrame) -> str:
    """A shipped sweep as its picker lists it: its models, its policies and its size."""
    policies = sorted(df["policy"].astype(str).unique()) if "policy" in df else []
    return f"{models_in(df)}: {', '.join(policies) or 'settings'}, {len(df)} rows"
