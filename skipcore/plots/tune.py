"""A tune's trials on the quality-against-speedup plane: each scored trial in its family's colour (the palette of
`skipcore.labels`: a static schedule's mode, or the policy), the trials stopped early as hollow marks at their
quality on the rows they were scored on, the floor as a dashed rule, the Pareto front as a line and the chosen
setting as a large diamond. An Altair chart, drawn again as each trial finishes (the dashboard's Tune page) or once
from a tune's `trials.parquet` (the notebooks)."""

from __future__ import annotations

import altair as alt
import pandas as pd

from skipcore.evaluate.tune.choice import candidates, reference_is_model
from skipcore.evaluate.tune.trials import PRUNED
from skipcore.labels import COLORS, column_title, run_family, trial_label
from skipcore.measure.paired_timing import flag_texts, flagged_timings
from skipcore.measure.pareto import pareto_front
from skipcore.plots.style import INK, texts_as_typed

STOPPED = "stopped early"  # the legend's name for a pruned trial


def tune_points(trials: pd.DataFrame, metric: str, speedup: str) -> pd.DataFrame:
    """One point per row of a tune's trials table (its index kept): `quality` (a stopped trial's on the rows it was
    scored on), `speed`, `family` (its colour's name, or 'stopped early'), `what` (its label, with its trial) and
    `flag` (why its measured speedup cannot be believed, '' where it can)."""
    rows = trials[trials["tune_state"].isin(["trial", PRUNED, "reference"])]
    stopped = rows["tune_state"] == PRUNED
    families = [
        STOPPED if s else run_family(p, m, {"shape": sh})
        for s, p, m, sh in zip(stopped, rows["policy"], rows["mode"], rows["shape"], strict=True)
    ]
    scored_on = rows["num_examples"] if "num_examples" in rows else pd.Series(float("nan"), index=rows.index)
    what = [
        _setting_words(n, label, model, s, k)
        for n, label, model, s, k in zip(
            rows["tune_trial"], rows["tune_label"], rows["model"], stopped, scored_on, strict=True
        )
    ]
    flags = (
        flag_texts(rows["timing_flag"]).where(flagged_timings(rows, speedup), "")
        if "timing_flag" in rows
        else ""
    )
    return pd.DataFrame(
        {
            "quality": rows["tune_prefix_quality"].where(stopped, rows[metric]).astype(float),
            "speed": rows[speedup].astype(float),
            "family": families,
            "what": what,
            "state": rows["tune_state"].to_numpy(),
            "flag": flags,
        },
        index=rows.index,
    )


def _setting_words(trial: int, label: str, model: str, stopped: bool, scored_on: float) -> str:
    """A point's setting in words: its trial and label (full depth: its model), and for a trial stopped early, that
    its quality is on its first rows only (how many, where the table says)."""
    what = trial_label(trial, label, model)
    if not stopped:
        return what
    return (
        f"{what} (stopped: quality on its first {int(scored_on)} rows)"
        if scored_on == scored_on
        else f"{what} (stopped early)"
    )


def tune_chart(
    trials: pd.DataFrame,
    metric: str = "bleu",
    speedup: str = "layer_speedup",
    floor: float | None = None,
    chosen: str | None = None,
    width: int = 520,
    height: int = 340,
) -> alt.LayerChart:
    """The trials so far (`trials`: a tune's trials table, or the rows written so far), the floor, the front and
    the chosen setting (its `setting_id`). The front is the one the tune's report and `front.csv` give (its
    `candidates`: finished trials, the model's own full depth, no flagged timing); a flagged timing is crossed out,
    its reason on hover; full depth of another model (the floor's reference) is drawn, but is no setting of this
    one, so it is on no front and not counted in the title; a trial without both numbers is not drawn, and the title
    says how many."""
    points = texts_as_typed(tune_points(trials, metric, speedup))
    families = list(dict.fromkeys(points["family"]))
    # a stopped trial: full depth's grey, hollow
    colors = [COLORS.get(f, COLORS["full"])[0] for f in families]
    # 1.5, not 1.500000 (one trial's axis has one value to label); "~r", not "~g": ticks 10 apart read 60, not 6e+1
    axis = alt.Axis(format="~r")
    x = alt.X("speed:Q", title=column_title(speedup), scale=alt.Scale(zero=False), axis=axis)
    y = alt.Y("quality:Q", title=column_title(metric), scale=alt.Scale(zero=False), axis=axis)
    tips = [alt.Tooltip("what:N", title="setting"), alt.Tooltip("quality:Q", format=".2f"),
            alt.Tooltip("speed:Q", format=".2f")]  # fmt: skip
    crossed = points["flag"] != ""
    if crossed.any():
        tips.append(alt.Tooltip("flag:N", title="timing flagged"))
    color = alt.Color("family:N", title="family", scale=alt.Scale(domain=families, range=colors))
    stopped = points["family"] == STOPPED
    # a layer only where it has points (Vega warns of an empty layer's infinite extent in the browser's console),
    # the finished trials' always: a chart of no trial yet is still a chart
    layers = [
        alt.Chart(points[part]).mark_point(size=size, filled=filled).encode(x, y, color, tooltip=tips)
        for part, size, filled in ((stopped, 60, False), (~stopped, 70, True))
        if part.any() or filled
    ]
    eligible = points.loc[candidates(trials, metric, speedup).index]
    if len(eligible) > 1:
        front = pareto_front(eligible, "speed", "quality")
        layers.insert(0, alt.Chart(front).mark_line(color=INK, strokeDash=[4, 3]).encode(x, y))
    if crossed.any():  # over the point, as the Trade-offs page crosses out a flagged timing
        cross = alt.Chart(points[crossed]).mark_point(size=220, filled=False, strokeWidth=2)
        layers.append(cross.encode(x, y, shape=alt.value("cross"), color=alt.value(INK), tooltip=tips))
    if floor is not None:
        rule = pd.DataFrame({"quality": [floor], "said": [f"floor {floor:.2f}"]})
        layers.append(alt.Chart(rule).mark_rule(color=INK, strokeDash=[2, 2]).encode(y=y, tooltip="said:N"))
    if chosen is not None and "setting_id" in trials:
        picked = points[(trials.loc[points.index, "setting_id"] == chosen).to_numpy()]
        star = alt.Chart(picked).mark_point(shape="diamond", size=320, filled=False, strokeWidth=2, color=INK)
        layers.append(star.encode(x, y, tooltip=tips))
    ours = points if reference_is_model(trials) else points[points["state"] != "reference"]
    placed = int((ours["quality"].notna() & ours["speed"].notna()).sum())
    title = f"{placed} setting{'' if placed == 1 else 's'} scored: {column_title(metric)} against {column_title(speedup)}"
    if placed < len(ours):  # Vega draws no point without both numbers: say so rather than count it
        title += f" ({len(ours) - placed} more without a number, not drawn)"
    return alt.layer(*layers).properties(width=width, height=height, title=title)
