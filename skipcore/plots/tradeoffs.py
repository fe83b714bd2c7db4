"""Quality against speedup: the trade-off chart (one coloured series per setting family, the Pareto front dashed,
measured speedups with their interval, flagged timings as crosses), theoretical and measured side by side, and
the `series` column a sweep is coloured by. Altair charts: the dashboard fits them to its columns.
"""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import pandas as pd

from skipcore.labels import FULL_DEPTH, MODEL_ROLE, ROLE_WORDS, column_title, role_suffix
from skipcore.measure.paired_timing import flag_texts
from skipcore.measure.pareto import MACHINE, fronts
from skipcore.plots.style import ACTUAL_COLOR, INK, series_colors, texts_as_typed

# Altair refuses to draw a table past 5,000 rows unless told otherwise (MaxRowsError); a sweep's chart draws every
# setting, thousands in a large grid. The limit is lifted where these charts are imported, for the session: the
# user's own transformer is kept where another is enabled.
alt.data_transformers.disable_max_rows()

MODEL_MARKS = (
    "circle",
    "square",
    "triangle-up",
    "diamond",
    "triangle-down",
)  # the model first, base models after
MODEL_COLUMN = "model_label"  # added by `with_model_labels`: a row's model in words, the marker's legend
FAR = 1.5  # a speedup this many times the largest of the others, and beyond Tukey's fence, is an outlier
EDGE = 1.06  # the axis ends this far past the largest value it shows: no point cut in half


def axis_reach(values: pd.Series) -> float | None:
    """The largest value an axis shows when a few values lie far beyond the others (beyond Tukey's fence, Q3 + 1.5
    IQR, and `FAR` times the largest of the rest: CALM at 13x and 27x in a sweep whose other settings reach 8x),
    so they do not squeeze every other point into a corner; None when no value is that far."""
    v = pd.to_numeric(values, errors="coerce").dropna()
    if len(v) < 5:
        return None
    q1, q3 = v.quantile(0.25), v.quantile(0.75)
    fence = q3 + 1.5 * (q3 - q1)
    inside = v[v <= fence]
    if not len(inside):
        return None
    far = v > max(fence, FAR * float(inside.max()))
    return float(v[~far].max()) if far.any() else None


def with_model_labels(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with `model_label`: the row's model by name ('skipdecode-opt-e2e'), a baseline model marked as the base
    model ('opt-e2e-base (base model)'); where the table names no model, the role in words."""
    out = df.copy()
    roles = out["model_role"].astype(str) if "model_role" in out else pd.Series(MODEL_ROLE, index=out.index)
    names = out["model"].astype(str) if "model" in out else pd.Series("", index=out.index)
    words = roles.map(lambda r: ROLE_WORDS.get(r, r))
    named = names.where(words == "", names + " (" + words + ")")
    out[MODEL_COLUMN] = named.where(names != "", words.where(words != "", "model"))
    return out


def model_scale(data: pd.DataFrame, marks: tuple = MODEL_MARKS) -> alt.Scale:
    """One marker per model: the model's rows as circles, each baseline model's with its own shape (or, given
    `marks`, its own line dashes)."""
    first = (
        data.sort_values("model_role", key=lambda r: r.astype(str) != MODEL_ROLE)
        if "model_role" in data
        else data
    )
    labels = list(dict.fromkeys(first[MODEL_COLUMN].astype(str)))
    return alt.Scale(domain=labels, range=[marks[i % len(marks)] for i in range(len(labels))])


# each model's line: the model's solid, a baseline model's dashed (its colour is its family's, a shade apart)
MODEL_DASHES = ([1, 0], [6, 3], [2, 2], [8, 3, 2, 3])


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
    policy such as adaptive SkipDecode lies above them). Where the table has several models (a skip-aware model and
    its base model), each model has its own marker and line dash, both in the legend "model". A measured speedup
    with its interval (`<x>_lo`, `<x>_hi` columns, as the sweep writes them) gets horizontal error bars; a point
    whose timing was flagged as implausible (`timing_flag`) is crossed out. Axes, legends and tooltips say each
    column in words (`labels.column_title`). Both axes start at 0; speedups far beyond the others (`axis_reach`)
    are drawn at the axis's end as a marked triangle with their value, said in the subtitle, instead of stretching
    the axis.
    """
    data = texts_as_typed(with_model_labels(df.dropna(subset=[x, y])))
    if color and color in data:
        data[color] = series_values(data[color])
        color_enc = alt.Color(f"{color}:N", title=column_title(color), scale=series_scale(data, color))
    else:
        color_enc = alt.value(ACTUAL_COLOR)
    lo, hi = f"{x}_lo", f"{x}_hi"
    interval = lo in data and hi in data and data[[lo, hi]].notna().any().any()
    flagged = x.startswith("wall_speedup") and "timing_flag" in data
    if flagged:
        data["timing_flag"] = flag_texts(data["timing_flag"])
    models = data[MODEL_COLUMN].nunique() > 1
    fields = [color, MODEL_COLUMN if models else None, x, *([lo, hi] if interval else []), y, *tooltip]
    fields += ["timing_flag"] if flagged else []
    tips = [alt.Tooltip(c, title=column_title(c)) for c in dict.fromkeys(fields) if c and c in data]
    reach = axis_reach(data[x])
    ends = [data[x].max(), *([data[hi].max()] if interval else [])]
    top = EDGE * (reach if reach is not None else float(pd.Series(ends).max() if len(data) else 1.0))
    base = alt.Chart(data).encode(
        x=alt.X(f"{x}:Q", title=column_title(x), scale=alt.Scale(domain=[0, top], nice=False)),
        y=alt.Y(f"{y}:Q", title=column_title(y), scale=alt.Scale(zero=True)),
        color=color_enc,
    )
    layers = []
    if pareto and len(data):  # under the series, so it never hides a point
        front = fronts(data if front_rows is None else front_rows, x, y)
        if front["machine"].nunique() > 1:  # said in the title, and each point names its machine
            title = f"{title or f'{column_title(y)} vs {column_title(x)}'} (measured on {front['machine'].nunique()} machines: a front each)"
            tips += (
                [alt.Tooltip(MACHINE, title=column_title(MACHINE))]
                if MACHINE in data and MACHINE not in fields
                else []
            )
        layers.append(
            alt.Chart(front)
            .mark_line(
                clip=True,
                color=INK,
                strokeDash=[6, 4],
                strokeWidth=1.5,
                opacity=0.8,
                point=alt.OverlayMarkDef(filled=False, color=INK, size=180),  # rings: a 1-point front
            )
            .encode(x=f"{x}:Q", y=f"{y}:Q", order=f"{x}:Q", detail="machine:N")
        )
    dashes = (  # titled as the markers are: one legend "model" shows each model's marker and dash
        {
            "strokeDash": alt.StrokeDash(
                f"{MODEL_COLUMN}:N", scale=model_scale(data, MODEL_DASHES), title="model"
            )
        }
        if models
        else {}
    )
    layers.append(base.mark_line(opacity=0.6, clip=True).encode(order=f"{x}:Q", **dashes))
    if interval:
        layers.append(base.mark_rule(strokeWidth=2, opacity=0.7, clip=True).encode(x=f"{lo}:Q", x2=f"{hi}:Q"))
    shape = (
        alt.Shape(
            f"{MODEL_COLUMN}:N",
            title="model",
            scale=model_scale(data),
            legend=alt.Legend(
                orient="top", direction="horizontal", columns=1, labelLimit=0
            ),  # above, one name a line: room for long names at a phone's width
        )
        if models
        else alt.value("circle")
    )
    points = base if reach is None else base.transform_filter(alt.datum[x] <= reach)
    layers.append(points.mark_point(size=80, filled=True, opacity=1).encode(shape=shape, tooltip=tips))
    subtitle = None
    if reach is not None:  # the far points, at the axis's end, marked and valued (stacked where they meet)
        far = data[data[x] > reach].sort_values([y, x])
        values = ", ".join(f"{v:.1f}x" for v in sorted(far[x]))
        subtitle = f"▶ at the right edge: {len(far)} far beyond the rest ({values}), not to scale"
        far = far.assign(at_edge=top * 0.985, far_value=[f"{v:.1f}x" for v in far[x]])
        at_edge = alt.X("at_edge:Q", title=column_title(x), scale=alt.Scale(domain=[0, top], nice=False))
        marked = alt.Chart(far).encode(x=at_edge, y=alt.Y(f"{y}:Q"))
        layers.append(
            marked.mark_point(shape="triangle-right", size=200, filled=True, opacity=1).encode(
                color=color_enc, tooltip=tips
            )
        )
        for i in range(min(len(far), 6)):  # each value above its triangle, stacked where triangles meet
            layers.append(
                alt.Chart(far.iloc[[i]])
                .mark_text(align="right", dx=-12, dy=-12 - 13 * i, fontSize=11, color=INK)
                .encode(x=at_edge, y=alt.Y(f"{y}:Q"), text="far_value:N")
            )
    if flagged and data["timing_flag"].ne("").any():  # crossed out, over the point, with the reason on hover
        cross = {"shape": alt.value("cross"), "color": alt.value(INK), "tooltip": tips}
        crossed = points.transform_filter(alt.datum.timing_flag != "")  # a far one: at the edge, below
        layers.append(crossed.mark_point(size=220, filled=False, strokeWidth=2).encode(**cross))
        if reach is not None and far["timing_flag"].ne("").any():
            layers.append(
                marked.transform_filter(alt.datum.timing_flag != "")
                .mark_point(size=220, filled=False, strokeWidth=2)
                .encode(**cross)
            )
    chart = alt.layer(*layers)
    title = title or f"{column_title(y)} vs {column_title(x)}"
    return chart.properties(
        title=alt.TitleParams(title, subtitle=subtitle) if subtitle else title, width=width, height=height
    )


NO_SERIES = "(none)"  # the series of the rows with no value in the colour's column


def series_values(values: pd.Series) -> pd.Series:
    """A colour column's values, a row without one as `NO_SERIES`: a series of its own, where Vega-Lite drew
    nothing for a value outside the scale's domain (CALM's measure left every other policy's rows off the chart)."""
    return values.astype(object).where(values.notna(), NO_SERIES)


def series_scale(data: pd.DataFrame, color: str) -> alt.Scale:
    """The colour of each value of `data[color]` from the palette (`skipcore.labels.series_colors`): a sweep's
    series by its family, a baseline model's rows ('skip · base model') in the lighter shade of the model's, the
    rows without a value as `NO_SERIES`. Charts drawn side by side from one table share it, so a series keeps its
    colour where a chart cannot place it."""
    roles = data["model_role"].astype(str).tolist() if color == "series" and "model_role" in data else None
    colours = series_colors(series_values(data[color]).tolist(), roles)
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
    left = tradeoff_chart(df, theoretical, y, color, tooltip)
    if not measured or measured not in df or df[measured].isna().all():
        return left
    right = tradeoff_chart(df, measured, y, color, tooltip)
    return alt.hconcat(left, right).resolve_scale(y="shared")


def sweep_series(df: pd.DataFrame) -> pd.DataFrame:
    """A sweep with a `series` column for colouring: a static schedule's mode ('full depth' at full depth), else the
    policy ('transformers early exit' for generate() with its assistant); the shape when the static schedules use several ('skip · power'); the base model's rows when one
    is in the table ('skip · base model'). The dashboard and the notebooks colour sweeps with this."""
    out = df.copy()
    policy = out["policy"].astype(str) if "policy" in out else pd.Series("static", index=out.index)
    mode = out["mode"].astype(str) if "mode" in out else pd.Series("none", index=out.index)
    shape = out["shape"].astype(str) if "shape" in out else pd.Series("", index=out.index)
    series = policy.where(policy != "static", mode.where((shape != "full") & (mode != "full"), FULL_DEPTH))
    series = series.where(series != "none", policy)
    shaped = (policy == "static") & ~shape.isin(["full", "", "None", "nan"]) & (series != FULL_DEPTH)
    if shape[shaped].nunique() > 1:
        series = series.where(~shaped, series + " · " + shape)
    if "assistant_exit" in out:  # transformers' generate() with its early-exit assistant, apart from plain
        assisted = (policy == "transformers") & out["assistant_exit"].notna()
        series = series.where(~assisted, "transformers early exit")
    if "model_role" in out and out["model_role"].nunique() > 1:
        series = series + out["model_role"].map(role_suffix)
    out["series"] = series
    return out
