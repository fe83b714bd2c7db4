"""Figures of schedules: the budget n(s) per step against full depth (one schedule, or several on one plot), and
layer masks as heatmaps (layers by steps, dark where a layer runs), which the trace figures reuse for tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from skipcore.plots.series import series_figure
from skipcore.plots.style import ACTUAL_COLOR, FULL_COLOR, MASK_COLORSCALE, legend_below
from skipcore.schedule import Schedule, mask_string


def budget_figure(
    budgets: Sequence[int], num_layers: int, title: str = "Layer budget per step", color: str = ACTUAL_COLOR
) -> go.Figure:
    """n(s) as a step plot against full depth; step 0 is the prefill and always runs every layer. `color`: the
    schedule's family colour (its mode's; skip by default)."""
    steps = list(range(len(budgets)))
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=steps,
            y=[num_layers] * len(steps),
            mode="lines",
            line={"color": FULL_COLOR, "dash": "dash"},
            name=f"full depth ({num_layers})",
            hoverinfo="skip",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=steps,
            y=list(budgets),
            mode="lines+markers",
            line={"shape": "hv", "color": color, "width": 2},
            marker={"size": 4},
            name="budget n(s)",
            hovertemplate="step %{x}<br>%{y} layers<extra></extra>",
        )
    )
    fig.update_layout(
        title=title,
        xaxis_title="decode step s (0 = prefill)",
        yaxis_title="layers run",
        yaxis_range=[0, num_layers + 0.5],
        margin={"l": 50, "r": 20, "t": 50, "b": 40},
        height=320,
    )
    return legend_below(fig)


def budgets_figure(
    schedules: dict[str, Schedule], max_new_tokens: int, title: str = "Layer budget n(s) by shape"
) -> go.Figure:
    """Several schedules' budgets n(s) on one step plot (all for the same number of layers)."""
    frames = [
        pd.DataFrame({"step": range(max_new_tokens), "layers": sch.budgets(max_new_tokens), "schedule": name})
        for name, sch in schedules.items()
    ]
    fig = series_figure(
        pd.concat(frames, ignore_index=True),
        "step",
        "layers",
        "schedule",
        title,
        "decode step s (0 = prefill)",
    )
    fig.update_traces(line={"shape": "hv"}, marker={"size": 3})
    L = max(sch.num_layers for sch in schedules.values())
    fig.update_layout(yaxis_range=[0, L + 0.5], yaxis_title="layers run")
    return fig


def mask_heatmap(
    masks: Sequence[str],
    x: Sequence[int] | None = None,
    tick_text: Sequence[str] | None = None,
    hover: Sequence[str] | None = None,
    title: str = "",
    x_title: str = "decode step",
) -> go.Figure:
    """Layers (rows, layer 0 at the bottom) by steps or tokens (columns); dark where the layer ran.

    `tick_text` labels the columns (token text); `hover` is one HTML line per column.
    """
    if not masks:
        return go.Figure(layout={"title": title})
    L = len(masks[0])
    x = list(range(len(masks))) if x is None else list(x)
    z = np.array([[int(c) for c in m] for m in masks], dtype=float).T  # (layers, columns)
    text = None
    if hover is not None:
        text = [
            [f"{h}<br>layer {i}: {'ran' if z[i, j] else 'skipped'}" for j, h in enumerate(hover)]
            for i in range(L)
        ]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=x,
            y=list(range(L)),
            zmin=0,
            zmax=1,
            colorscale=MASK_COLORSCALE,
            showscale=False,
            xgap=1,
            ygap=1,
            text=text,
            hovertemplate="%{text}<extra></extra>"
            if text is not None
            else "step %{x}, layer %{y}<extra></extra>",
        )
    )
    xaxis: dict = {"title": x_title}
    bottom = 40
    if tick_text is not None:  # fixed room for the rotated labels: plotly's automargin over-reserves here
        xaxis.update(tickmode="array", tickvals=x, ticktext=list(tick_text), tickangle=-60, automargin=False)
        bottom = 95
    fig.update_layout(
        title=title,
        xaxis=xaxis,
        yaxis={"title": "layer", "dtick": 1 if L <= 32 else None},
        margin={"l": 50, "r": 20, "t": 50, "b": bottom},
        height=max(260, min(620, 90 + 16 * L)) + bottom - 40,
    )
    return fig


def schedule_mask_figure(schedule: Schedule, max_new_tokens: int) -> go.Figure:
    """The layer mask of every step a schedule would run (steps x layers)."""
    sets = schedule.layer_sets(max_new_tokens)
    masks = [mask_string(s, schedule.num_layers) for s in sets]
    hover = [f"step {s}: {len(ls)} layers" for s, ls in enumerate(sets)]
    return mask_heatmap(masks, hover=hover, title=f"Layer mask: {schedule.describe()}")


def masks_figure(schedules: dict[str, Schedule], max_new_tokens: int, title: str = "") -> go.Figure:
    """The layer masks (layers x steps) of several schedules side by side, dark where a layer runs."""
    names = list(schedules)
    fig = make_subplots(
        rows=1, cols=len(names), shared_yaxes=True, subplot_titles=names, horizontal_spacing=0.03
    )
    for k, name in enumerate(names, start=1):
        sets = schedules[name].layer_sets(max_new_tokens)
        L = schedules[name].num_layers
        z = np.zeros((L, len(sets)))
        for s, layers in enumerate(sets):
            z[list(layers), s] = 1
        fig.add_trace(
            go.Heatmap(
                z=z,
                zmin=0,
                zmax=1,
                colorscale=MASK_COLORSCALE,
                showscale=False,
                xgap=1,
                ygap=1,
                hovertemplate="step %{x}, layer %{y}<extra>" + name + "</extra>",
            ),
            row=1,
            col=k,
        )
        fig.update_xaxes(title_text="decode step", row=1, col=k)
    L = max(sch.num_layers for sch in schedules.values())
    fig.update_yaxes(title_text="layer", row=1, col=1)
    fig.update_layout(
        title=title, height=max(260, min(520, 110 + 14 * L)), margin={"l": 50, "r": 20, "t": 70, "b": 40}
    )
    return fig
