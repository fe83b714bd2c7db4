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
from skipcore.evaluate.sweep.settings import WHOLE_NUMBERS
from skipcore.evaluate.tune.settings import METRICS
from skipcore.evaluate.tune.trials import PRUNED
from skipcore.labels import MODEL_ROLE, column_title, role_suffix, setting_label, trial_label
from skipcore.measure.paired_timing import flag_texts, plausibility_flag
from skipcore.measure.pareto import MACHINE

QUALITY_HINTS = ("bleu", "rouge", "chrf", "bertscore", "meteor", "quality", "score", "slot_")
MEASURED_HINTS = ("measured", "wall", "latency", "ms_", "_ms", "tokens_per_s", "throughput")
SERIES_COLUMN = "series"  # added by skipcore.plots.sweep_series
MEASURED = "wall_speedup"  # decode speedup where measured, else end to end (`with_measured`)
MEASURED_OF = "wall_speedup_of"  # which of the two a row's MEASURED is
DECODE, TOTAL = "decode steps", "end to end (generate() is not timed per step)"
COUNTS = ("num_examples",)  # counts the page reads as numbers: said when no finite number (`numbers_only`)


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


def quality_named(column: object) -> bool:
    """Whether a column's name makes it a quality metric's (`QUALITY_HINTS`)."""
    return any(h in str(column).lower() for h in QUALITY_HINTS)


def axis_named(column: object) -> bool:
    """Whether a column's name makes it a chart's axis: a quality metric's or a speedup's."""
    return "speedup" in str(column).lower() or quality_named(column)


def numbers_only(df: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """The table with every cell of an axis's column (`axis_named`) or of a count the page reads (`COUNTS`) that
    is no finite number, or in a speedup's column (`speedup_ratio`) is not above 0, made missing, and which cells
    they were ('1 in bleu (inf), 2 in layer_speedup (-1.2, -3.0: not above 0)'), or None where there were none.
    A chart cannot place such a point: the browser's chart library fails on an infinite one, one text cell makes
    its whole column text (no axis), and a speedup not above 0 (a ratio of times or counts never is) turns its
    axis backwards. An infinite count of examples is no count the page can say or compare. Missing values are
    left off the chart and said, as any missing value is."""
    said, out = [], df.copy()
    read = [c for c in df.columns if axis_named(c) or c in COUNTS]
    for column in [c for c in read if not pd.api.types.is_bool_dtype(df[c])]:
        values = pd.to_numeric(df[column], errors="coerce").astype(float)
        text = values.isna() & df[column].notna()
        quoted = ", ".join(map(repr, df[column][text].unique()[:2]))  # the file's own text, as written
        if values.isna().all():  # no number at all: no axis; a column of text said, an empty one is no news
            if text.any():
                said.append(f"all {int(text.sum())} in {column} ({quoted})")
            continue
        infinite = np.isinf(values)
        below = (values <= 0) & ~infinite if speedup_ratio(column) else pd.Series(False, index=values.index)
        if text.any():
            said.append(f"{int(text.sum())} in {column} ({quoted})")
        if infinite.any():
            said.append(f"{int(infinite.sum())} in {column} (inf)")
        if below.any():
            shown = ", ".join(f"{v:g}" for v in values[below].unique()[:2])
            said.append(
                f"{int(below.sum())} in {column} ({shown}{', …' if below.sum() > 2 else ''}: not above 0)"
            )
        if text.any() or infinite.any() or below.any():
            out[column] = values.where(~infinite & ~below)
    return (out, ", ".join(said)) if said else (df, None)


PERCENTS = (*METRICS, "slot_near")  # skipcore's own scores: percentages, 0 to 100
# at most the model's depth
LAYER_SPEEDUPS = ("layer_speedup", "batch_layer_speedup", "layer_speedup_token_mean")
TIMED = ("wall_speedup_decode", "batch_layer_speedup", "batch_flops_speedup_decode", "timing_runs")


def impossible(df: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """The table with every cell no run can make made missing, and which they were, or None where there were
    none: a score of skipcore's own (`PERCENTS`) outside 0 to 100, a layer speedup above the row's `num_layers`
    (each token runs one layer at least). A file edited by hand or made by another tool drew them on the front."""
    said, out = [], df.copy()
    depth = pd.to_numeric(df["num_layers"], errors="coerce") if "num_layers" in df else None
    for column in [c for c in df.columns if c in PERCENTS or (c in LAYER_SPEEDUPS and depth is not None)]:
        values = pd.to_numeric(df[column], errors="coerce").astype(float)
        if column in PERCENTS:
            bad, why = (values < 0) | (values > 100), "a score is 0 to 100"
        else:
            bad, why = values > depth, "above the model's layers (num_layers): a token runs one at least"
        if bad.any():
            seen = values[bad].unique()
            shown = ", ".join(f"{v:g}" for v in seen[:2])
            said.append(f"{int(bad.sum())} in {column} ({shown}{', …' if len(seen) > 2 else ''}: {why})")
            out[column] = values.where(~bad)
    return (out, ", ".join(said)) if said else (df, None)


def flagged_here(df: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The table with each measured decode speedup the file did not flag held to the sweep's own rule
    (`plausibility_flag`: too few paired runs, or faster or slower than the work it saved allows), and how many
    the rule flags that the file had not. A file edited by hand or made by another tool is drawn with its own
    flags, which may say nothing."""
    if not set(TIMED) <= set(df.columns):
        return df, 0
    numbers = {c: pd.to_numeric(df[c], errors="coerce").astype(float) for c in TIMED}
    given = flag_texts(df["timing_flag"]) if "timing_flag" in df else pd.Series("", index=df.index)
    found = pd.Series(
        [
            plausibility_flag(m, layers, flops, int(runs))
            if np.isfinite([m, layers, flops, runs]).all()
            else ""
            for m, layers, flops, runs in zip(*numbers.values(), strict=True)
        ],
        index=df.index,
        dtype="string",
    )
    new = given.eq("") & found.ne("")
    if not new.any():
        return df, 0
    out = df.copy()
    out["timing_flag"] = given.where(~new, found)
    return out, int(new.sum())


def speedup_ratio(column: str) -> bool:
    """Whether `column` is a speedup (a ratio, above 0 by its nature), not a count that names one (`speedup_over`)."""
    return "speedup" in str(column).lower() and column not in WHOLE_NUMBERS


def empty_metrics(df: pd.DataFrame) -> list[str]:
    """The quality metrics (a sweep's own, not a tune's first-rows score) whose cells are all empty: kept in the
    file, but with nothing to draw, so the chart opens on another metric. An empty measured speedup is said by the
    page's note on timing instead (a sweep run with no timing leaves them all empty)."""
    return [
        c for c in df.columns if quality_named(c) and not str(c).startswith("tune_") and df[c].isna().all()
    ]


def without_repeats(df: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The table with each row that repeats an earlier one in every column left out, and how many were: a file
    joined to itself (two sweeps' tables concatenated, one of them twice) would draw each such setting twice over
    itself and count it twice in the tables; two measurements of one setting differ in their timings, so they
    stay. Cells are compared as text (a JSON file's lists and objects cannot be hashed)."""
    repeats = df.astype(str).duplicated().to_numpy()
    return (df[~repeats], int(repeats.sum())) if repeats.any() else (df, 0)


def without_stopped_trials(df: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """A tune's trials table (`trials.parquet`, which this page reads as a sweep) without its trials stopped early,
    and how many they were: such a trial was scored on its first rows only, so its quality is not comparable with
    the others' and would stand on their front (the Tune page draws them hollow, on no front)."""
    if "tune_state" not in df:
        return df, 0
    stopped = df["tune_state"].astype("string").eq(PRUNED).fillna(False).to_numpy()
    return df[~stopped], int(stopped.sum())


def example_counts(df: pd.DataFrame) -> list[int]:
    """The numbers of examples the rows were scored on (`num_examples`, each a finite number: `numbers_only` first),
    where more than one: rows scored on different examples have qualities that are not comparable (a table joined
    from sweeps of different limits)."""
    if "num_examples" not in df:
        return []
    counts = sorted({int(n) for n in pd.to_numeric(df["num_examples"], errors="coerce").dropna() if n >= 1})
    return counts if len(counts) > 1 else []


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
    """Columns of numbers that can be drawn: numeric, not flags, and holding at least one value (a column whose
    cells are all empty has nothing to place on an axis)."""
    return [
        c
        for c in df.columns
        if pd.api.types.is_numeric_dtype(df[c])
        and not pd.api.types.is_bool_dtype(df[c])
        and df[c].notna().any()
    ]


def quality_columns(df: pd.DataFrame) -> list[str]:
    """Numeric columns named like a quality metric, BLEU and ROUGE-L first (the paper's E2E metrics)."""
    cols = [c for c in numeric_columns(df) if quality_named(c)]
    order = {"bleu": 0, "rougel": 1, "rouge_l": 1}
    return sorted(cols, key=lambda c: order.get(c.lower(), 2))


def speedup_columns(df: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(theoretical, measured) speedup columns: names with 'speedup', split by whether they were timed; a sweep's
    count that names a speedup is none (`speedup_over`: the tokens a target speedup is met over)."""
    cols = [c for c in numeric_columns(df) if speedup_ratio(c)]
    measured = [c for c in cols if any(h in c.lower() for h in MEASURED_HINTS)]
    theoretical = [c for c in cols if c not in measured]
    first = {"layer_speedup": 0, "flops_speedup_decode": 1, "target_speedup": 2}
    return sorted(theoretical, key=lambda c: first.get(c, 3)), measured


def series_columns(df: pd.DataFrame) -> list[str]:
    """Columns that make sensible colours: the sweep's series (policy or mode, a base model's said: each a fixed
    hue of the palette, however many there are) first, then any column of few distinct values."""
    few = [c for c in df.columns if df[c].nunique() <= 12 and not pd.api.types.is_float_dtype(df[c])]
    return [*([SERIES_COLUMN] if SERIES_COLUMN in df else []), *(c for c in few if c != SERIES_COLUMN)]


def check_sweep(df: pd.DataFrame) -> str | None:
    """Why a table cannot be drawn as a trade-off, or None when it can."""
    if df.empty:
        return "the sweep has no rows"
    if "batch_size" in df:
        given = df["batch_size"].dropna()
        sizes = pd.to_numeric(given, errors="coerce")
        # a count past 2**53 is no whole number a float holds: a hand-edited table's, never a sweep's
        odd = given[sizes.isna() | (sizes % 1 != 0) | (sizes < 1) | (sizes > 2**53)]
        if len(odd):
            return f"its batch_size column holds values that are not batch sizes ({odd.iloc[0]})"
        if "num_examples" in df:  # a sweep's batch is at most the rows it scores (fitted down, and named so)
            examples = pd.to_numeric(df.loc[given.index, "num_examples"], errors="coerce")
            over = sizes > examples
            if over.any():
                i = over.idxmax()
                return (
                    f"a row of its runs batches of {sizes[i]:.0f} over {examples[i]:.0f} examples "
                    "(batch_size, num_examples): a sweep's batch is at most the examples it scores"
                )
    if not quality_columns(df) and not numeric_columns(df):
        return "the sweep has no numeric columns"
    theoretical, measured = speedup_columns(df)
    if not theoretical and not measured:
        return (
            "no speedup column with values found (expected a numeric column with 'speedup' in its name, such as "
            "layer_speedup)"
        )
    if not quality_columns(df):
        return (
            "no quality column with values found (expected bleu, rougeL, chrf or another column named like a "
            "metric)"
        )
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


# -- tables that fit a 1024 px screen ------------------------------------------------------------------------
SETTING, INTERVAL, POSITION = "setting", "95% interval", "vs front"


def table_view(rows: pd.DataFrame, x: str, y: str, kind: str = "front") -> tuple[pd.DataFrame, list[str]]:
    """Rows of a front (`kind` "front" or "measured") or of the dynamic policies placed against the static front
    ("dynamic") as the page shows them, narrow enough for a 1024 px screen: each row's setting in words (a base
    model's said), its speedup `x` next to its quality `y`, then only what the kind adds: a measured front its
    interval (one column, 'lo-hi'), the flag and the machine where rows have them; the dynamic policies the
    front's quality at that speed and where each lies against it. Returns the rows with those columns added and
    the columns to show, in order; every other column stays in the data (the download, the tests) unshown."""
    out = rows.copy()
    roles = out["model_role"] if "model_role" in out else pd.Series(MODEL_ROLE, index=out.index)
    words = [
        _setting_words(r) + role_suffix(role) for (_, r), role in zip(out.iterrows(), roles, strict=True)
    ]
    out.insert(0, SETTING, words)
    shown = [SETTING, x, y]
    if kind == "measured":
        lo, hi = f"{x}_lo", f"{x}_hi"
        if lo in out and hi in out and out[[lo, hi]].notna().any().any():
            out[INTERVAL] = [
                f"{a:.2f}-{b:.2f}x" if pd.notna(a) and pd.notna(b) else "" for a, b in zip(out[lo], out[hi])
            ]
            shown.insert(2, INTERVAL)
        if "timing_flag" in out and flag_texts(out["timing_flag"]).ne("").any():
            out["timing_flag"] = flag_texts(out["timing_flag"])
            shown.append("timing_flag")
        if MACHINE in out and out[MACHINE].nunique() > 1:
            shown.append(MACHINE)
    if kind == "dynamic" and "front_position" in out:
        gaps = out["vs_front"] if "vs_front" in out else pd.Series(float("nan"), index=out.index)
        out[POSITION] = [
            f"{where} ({gap:+.1f})" if pd.notna(gap) else str(where)
            for where, gap in zip(out["front_position"], gaps, strict=True)
        ]
        shown += [f"front_{y}", POSITION]
    return out, [c for c in shown if c in out]


def _setting_words(row: pd.Series) -> str:
    """A row's setting in words: a tune's trial by its trial and the tune's words, any other row by its setting (a
    table joined from a tune's and a sweep's has both)."""
    trial = row.get("tune_trial")
    if trial is not None and trial == trial and "tune_label" in row:
        return trial_label(trial, row["tune_label"], row.get("model"))
    return setting_label(row)


def short_header(column: str, x: str, y: str) -> str:
    """A shown column's header, short enough for its narrow column (its full title is the header's tooltip)."""
    if column == x:
        return "measured" if any(h in x.lower() for h in MEASURED_HINTS) else "speedup"
    if column == f"front_{y}":
        return f"front {column_title(y)}"
    return {"timing_flag": "flag", MACHINE: "machine"}.get(column, column_title(column))


# the charts' marks for a table of several models (`plots.tradeoff_chart`), as the legend "model" shows them
MODEL_WORDS = (
    " Each model has its own marker and line (the legend *model*): the model's circles on a solid line, each base "
    "model's own marker on a line dashed in its series' colour."
)


def colour_words(df: pd.DataFrame, color: str | None) -> str:
    """What the charts' colours and markers show, for the caption under them (`color`: the series column)."""
    models = "model_role" in df and df["model_role"].nunique() > 1
    if color == SERIES_COLUMN:
        said = (
            "Colour: the policy, or a static schedule's mode, one fixed hue each (full depth grey), the same on "
            "every page."
        )
        if models:
            said += " A base model's rows are the lighter shade of the same hue."
        return said + (MODEL_WORDS if models else "")
    said = f"Colour: {column_title(color)}, one hue per value (the legend)." if color else "One colour."
    return said + (MODEL_WORDS if models else "")


def no_measured_chart(df: pd.DataFrame, column: str | None, measured: list[str]) -> str | None:
    """Why the measured chart is not drawn, or None where it is (or where a measured column with timings exists
    and none was chosen). `column`: the measured axis chosen; `measured`: the table's measured columns."""
    timed = [c for c in measured if df[c].notna().any()]
    if column is not None and df[column].notna().any() or column is None and timed:
        return None
    if "timing_runs" in df and pd.to_numeric(df["timing_runs"], errors="coerce").fillna(0).eq(0).all():
        why = (
            "this sweep was run without timing (`timing_runs` is 0 on every row: `--repeats 0`, quality only); "
            "a sweep run with `--repeats N` times each setting against full depth"
        )
    elif not measured:
        why = "this table has no measured speedup column (a wall-clock speedup, such as wall_speedup_decode)"
    else:
        why = f"no row here has a {column_title(column or measured[0])}"
    if timed and column is not None:
        why += f"; {', '.join(column_title(c) for c in timed)} has timings: choose it as the measured speedup"
    return why + "."
