"""Figures of time: the wall-clock time of each batch step (one line per batch), from a trace's `step_ms`."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from skipcore.measure.summary import batch_step_rows, own_or
from skipcore.plots.style import ACTUAL_COLOR, DASHES
from skipcore.plots.trace import one_run


def batch_steps(trace: pd.DataFrame) -> pd.DataFrame:
    """One row per step each batch ran, with its time (`step_ms`) and layers: `step` is the batch's step (a
    speculative trace's round, which gives rows several tokens) and `num_layers_run` its layers (`batch_layers`
    where the trace has them: a CALM step's deepest row, a speculative round's sequential passes)."""
    out = batch_step_rows(trace)
    out = out.drop(columns=[c for c in ("step", "round") if c in out]).rename(columns={"batch_step": "step"})
    out = out.assign(num_layers_run=own_or(out, "batch_layers", "num_layers_run"))
    return out.sort_values("step")


# the most steps whose axis ticks each one (Plotly's own ticks put 0.5, 1.5 on a short run's axis of whole steps)
WHOLE_TICKS_UP_TO = 12


def step_latency_figure(
    trace: pd.DataFrame, title: str = "Step latency", color: str = ACTUAL_COLOR
) -> go.Figure:
    """Wall-clock time of each batch step (shared by every row of the batch), one line per batch, all in the run's
    `color` (its family's; batches are told apart by their dash and named on hover, never by another family's
    hue)."""
    one_run(trace, "a step latency figure")
    group = "batch" if "batch" in trace.columns else None
    per_step = batch_steps(trace)
    fig = go.Figure()
    batches = list(per_step.groupby(group)) if group else [(0, per_step)]
    for i, (key, rows) in enumerate(batches):
        fig.add_trace(
            go.Scatter(
                x=rows["step"],
                y=rows["step_ms"],
                mode="lines+markers",
                line={"color": color, "dash": DASHES[i % len(DASHES)]},
                marker={"size": 4, "color": color},
                name=f"batch {key}",
                customdata=rows["num_layers_run"],
                hovertemplate="step %{x}: %{y:.2f} ms<br>%{customdata} layers<extra>"
                + f"batch {key}</extra>",
            )
        )
    fig.update_layout(
        title=title,
        xaxis_title="round: draft and verify (0 = prefill)"
        if "round" in trace
        else "decode step (0 = prefill)",
        yaxis_title="ms",
        yaxis_rangemode="tozero",
        height=300,
        margin={"l": 50, "r": 20, "t": 50, "b": 40},
    )
    if len(per_step) and per_step["step"].max() <= WHOLE_TICKS_UP_TO:  # a short run's axis: whole steps only
        fig.update_xaxes(dtick=1)
    # One run on a shared machine has outliers; the axis stops at 4x the typical step (the prefill and the
    # spikes beyond it are cut off and said in the title), so the schedule's own shape stays readable.
    decode = per_step[per_step["step"] >= 1]["step_ms"]
    if len(decode):
        top = 4 * float(decode.quantile(0.9))
        cut = int((per_step["step_ms"] > top).sum())
        if cut:
            fig.update_yaxes(range=[0, top])
            fig.update_layout(
                title=f"{title} ({cut} step{'s' if cut > 1 else ''} above {top:.1f} ms not shown)"
            )
    return fig
