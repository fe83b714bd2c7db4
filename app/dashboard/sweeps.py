"""Reading sweep tables for the trade-off page: which columns are quality, which are speedups, and how the
rows split into coloured series. Column names are guessed by pattern so a sweep from another version of
skipcore, or one a user made by hand, still plots; the page lets the user override every guess."""

from __future__ import annotations

import pandas as pd

QUALITY_HINTS = ("bleu", "rouge", "chrf", "bertscore", "meteor", "quality", "score")
MEASURED_HINTS = ("measured", "wall", "latency", "ms_", "_ms", "tokens_per_s", "throughput")
SERIES_COLUMN = "series"  # added by skipcore.plots.sweep_series


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
    """The dynamic policies' rows (CALM-DEC, adaptive), each placed against the static front of its own model
    (`skipcore.pareto.front_position`); None when the table has no dynamic or no static rows."""
    from skipcore.pareto import front_position

    static = static_rows(df)
    if static is None or not len(static) or len(static) == len(df):
        return None
    role = "model_role" if "model_role" in df else None
    groups = df.groupby(role, sort=False) if role else [(None, df)]
    placed = [
        front_position(
            rows[rows["policy"] != "static"], static[static[role] == key] if role else static, x, y
        )
        for key, rows in groups
    ]
    placed = [p for p in placed if len(p)]
    return pd.concat(placed) if placed else None
