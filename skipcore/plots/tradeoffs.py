"""Quality against speedup: the trade-off chart (one coloured series per setting family, the Pareto front dashed,
measured speedups with their interval, flagged timings as crosses), theoretical and measured side by side, and
the `series` column a sweep is coloured by. Altair charts: the dashboard fits them to its columns.
"""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import numpy as np
import pandas as pd

from skipcore.measure.paired_timing import flag_texts
from skipcore.measure.pareto import pareto_front
from skipcore.plots.style import ACTUAL_COLOR, INK, series_colors


def tradeoff_chart(
    df: pd.DataFrame,
    x: str,
    y: str,
    color: str | None = "policy",
    tooltip: Sequence[str] = (),
    pareto: bool = True,
    title: str = "",
    width: int = 420,
    height: int = 320,
    front_rows: pd.DataFrame | None = None,
) -> alt.Chart:
    """Quality (y) against speedup (x): one coloured series per policy, the Pareto front drawn dashed.

    The front is that of every row, or of `front_rows` (e.g. the static schedules, to see whether a dynamic
    policy such as adaptive SkipDecode lies above them). A measured speedup with its interval (`<x>_lo`,
    `<x>_hi` columns, as the sweep writes them) gets horizontal error bars; a point whose timing was flagged as
    implausible (`timing_flag`) is drawn as a cross, not a dot.
    """
    data = df.dropna(subset=[x, y]).copy()
    if color and color in data:
        color_enc = alt.Color(f"{color}:N", title=color, scale=series_scale(data, color))
    else:
        color_enc = alt.value(ACTUAL_COLOR)
    lo, hi = f"{x}_lo", f"{x}_hi"
    interval = lo in data and hi in data and data[[lo, hi]].notna().any().any()
    flagged = x.startswith("wall_speedup") and "timing_flag" in data
    if flagged:
        data["timing"] = np.where(flag_texts(data["timing_flag"]) != "", "flagged", "ok")
    tips = [
        c for c in dict.fromkeys([color, x, *([lo, hi] if interval else []), y, *tooltip]) if c and c in data
    ] + (["timing_flag"] if flagged else [])
    base = alt.Chart(data).encode(
        x=alt.X(f"{x}:Q", title=x, scale=alt.Scale(zero=False)),
        y=alt.Y(f"{y}:Q", title=y, scale=alt.Scale(zero=False)),
        color=color_enc,
    )
    layers = []
    if pareto and len(data):  # under the series, so it never hides a point
        front = pareto_front(data if front_rows is None else front_rows, x, y)
        layers.append(
            alt.Chart(front)
            .mark_line(
                color=INK,
                strokeDash=[6, 4],
                strokeWidth=1.5,
                opacity=0.8,
                point=alt.OverlayMarkDef(filled=False, color=INK, size=180),  # rings: a 1-point front
            )
            .encode(x=f"{x}:Q", y=f"{y}:Q", order=f"{x}:Q")
        )
    layers.append(base.mark_line(opacity=0.6).encode(order=f"{x}:Q"))
    if interval:
        layers.append(base.mark_rule(strokeWidth=2, opacity=0.7).encode(x=f"{lo}:Q", x2=f"{hi}:Q"))
    if flagged:
        shape = alt.Shape(
            "timing:N", title="timing", scale=alt.Scale(domain=["ok", "flagged"], range=["circle", "cross"])
        )
        layers.append(base.mark_point(size=90, filled=True, opacity=1).encode(shape=shape, tooltip=tips))
    else:
        layers.append(base.mark_circle(size=80, opacity=1).encode(tooltip=tips))
    chart = alt.layer(*layers)
    return chart.properties(title=title or f"{y} vs {x}", width=width, height=height)


def series_scale(data: pd.DataFrame, color: str) -> alt.Scale:
    """The colour of each value of `data[color]` from the palette (`skipcore.labels.series_colors`): a sweep's
    series by its family, a baseline model's rows ('skip · baseline') in the lighter shade of the model's. Charts
    drawn side by side from one table share it, so a series keeps its colour where a chart cannot place it."""
    keyed = data[data[color].notna()]
    roles = keyed["model_role"].astype(str).tolist() if color == "series" and "model_role" in keyed else None
    colours = series_colors(keyed[color].tolist(), roles)
    domain = sorted(colours, key=str)
    return alt.Scale(domain=domain, range=[colours[v] for v in domain])


def speedup_comparison_chart(
    df: pd.DataFrame,
    y: str,
    theoretical: str,
    measured: str | None,
    color: str | None = "policy",
    tooltip: Sequence[str] = (),
) -> alt.HConcatChart | alt.LayerChart:
    """The same quality against theoretical and against measured speedup, side by side on one y scale."""
    left = tradeoff_chart(df, theoretical, y, color, tooltip, title=f"{y} vs theoretical ({theoretical})")
    if not measured or measured not in df or df[measured].isna().all():
        return left
    right = tradeoff_chart(df, measured, y, color, tooltip, title=f"{y} vs measured ({measured})")
    return alt.hconcat(left, right).resolve_scale(y="shared")


def sweep_series(df: pd.DataFrame) -> pd.DataFrame:
    """A sweep with a `series` column for colouring: a static schedule's mode ('full' at full depth), else the
    policy ('transformers early exit' for generate() with its assistant); the shape when the static schedules use several ('skip · power'); the model role when a baseline
    model is in the table ('skip · baseline'). The dashboard and the notebooks colour sweeps with this."""
    out = df.copy()
    policy = out["policy"].astype(str) if "policy" in out else pd.Series("static", index=out.index)
    mode = out["mode"].astype(str) if "mode" in out else pd.Series("none", index=out.index)
    shape = out["shape"].astype(str) if "shape" in out else pd.Series("", index=out.index)
    series = policy.where(policy != "static", mode.where(shape != "full", "full"))
    series = series.where(series != "none", policy)
    shaped = (policy == "static") & ~shape.isin(["full", "", "None", "nan"]) & (series != "full")
    if shape[shaped].nunique() > 1:
        series = series.where(~shaped, series + " · " + shape)
    if "assistant_exit" in out:  # transformers' generate() with its early-exit assistant, apart from plain
        assisted = (policy == "transformers") & out["assistant_exit"].notna()
        series = series.where(~assisted, "transformers early exit")
    if "model_role" in out and out["model_role"].nunique() > 1:
        series = series + np.where(
            out["model_role"].astype(str) == "model", "", " · " + out["model_role"].astype(str)
        )
    out["series"] = series
    return out
