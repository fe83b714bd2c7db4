"""What a browser page adds to `skipcore.plots`' figures: a colour key on masks, a token window that can be
scrolled, one latency band instead of a hundred lines, charts that fit their column, and PNG/SVG downloads.

The figures themselves stay in `skipcore.plots` (a notebook draws the same); this only adapts them to a page.
"""

from __future__ import annotations

import altair as alt
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from skipcore import plots
from skipcore.plots.style import translucent
from skipcore.plots.tradeoffs import series_scale

TOKEN_WINDOW = 40  # token columns shown at once; more are reached with the range slider
MAX_LATENCY_LINES = 8  # more batches than this are drawn as one median line with its 10-90% band
FORMAT_KEY = "figure_format"
FORMATS = ("png", "svg")


def format_picker() -> None:
    """Sidebar choice of the format the figures' camera button saves (Plotly draws it in the browser)."""
    st.sidebar.radio("Figure downloads", FORMATS, horizontal=True, key=FORMAT_KEY, format_func=str.upper)


def show(fig: go.Figure, key: str, name: str | None = None) -> None:
    """A Plotly figure at its column's width; the camera button saves it as PNG or SVG (sidebar)."""
    fmt = st.session_state.get(FORMAT_KEY, "png")
    config = {
        "toImageButtonOptions": {"format": fmt, "filename": name or key, "scale": 2},
        "displaylogo": False,
    }
    st.plotly_chart(fig, key=key, config=config, width="stretch")


def with_mask_key(fig: go.Figure) -> go.Figure:
    """A colour key on a layer-mask heatmap: dark = the layer ran, light = skipped."""
    fig.update_traces(
        showscale=True,
        colorbar={"tickvals": [0.25, 0.75], "ticktext": ["skipped", "ran"], "thickness": 12, "len": 0.5},
        selector={"type": "heatmap"},
    )
    return fig


def with_token_window(fig: go.Figure, columns: int, window: int = TOKEN_WINDOW) -> go.Figure:
    """Past `window` token columns the labels would overlap: show that many, with a range slider to move."""
    first = 0
    if columns > window:
        fig.update_xaxes(
            range=[first - 0.5, first + window - 0.5], rangeslider={"visible": True, "thickness": 0.08}
        )
        fig.update_layout(height=(fig.layout.height or 400) + 60)
    return fig


def with_visible_points(fig: go.Figure) -> go.Figure:
    """Lines of one or two points draw nothing: give every line markers (a 2-token design has one step)."""
    fig.update_traces(mode="lines+markers", marker={"size": 5}, selector={"type": "scatter"})
    return fig


def latency_figure(trace: pd.DataFrame, title: str = "Step latency") -> go.Figure:
    """`plots.step_latency_figure`, or for many batches their median step time with the 10-90% band."""
    batches = trace["batch"].nunique() if "batch" in trace else 1
    if batches <= MAX_LATENCY_LINES:
        return plots.step_latency_figure(trace, title=title)
    per_step = plots.batch_steps(trace)  # a speculative trace's rounds
    q = per_step.groupby("step")["step_ms"].quantile([0.1, 0.5, 0.9]).unstack()
    q = q[q.index >= 1]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(x=q.index, y=q[0.9], mode="lines", line={"width": 0}, showlegend=False, hoverinfo="skip")
    )
    fig.add_trace(
        go.Scatter(
            x=q.index,
            y=q[0.1],
            mode="lines",
            line={"width": 0},
            fill="tonexty",
            fillcolor=translucent(plots.ACTUAL_COLOR, 0.2),
            name="10-90% of batches",
            hoverinfo="skip",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=q.index,
            y=q[0.5],
            mode="lines+markers",
            marker={"size": 4},
            line={"color": plots.ACTUAL_COLOR},
            name="median",
            hovertemplate="step %{x}: %{y:.2f} ms<extra>median</extra>",
        )
    )
    fig.update_layout(
        title=f"{title}: median of {batches} batches, decode steps",
        xaxis_title="decode step",
        yaxis_title="ms",
        yaxis_rangemode="tozero",
        height=300,
        legend={"orientation": "h", "y": -0.3},
        margin={"l": 50, "r": 20, "t": 50, "b": 40},
    )
    return fig


def fit_chart(
    chart: alt.LayerChart,
    df: pd.DataFrame,
    color: str | None,
    apart: list[str],
    y_domain: tuple[float, float] | None = None,
) -> alt.LayerChart:  # configured: a top-level chart
    """A `plots.tradeoff_chart` made to fit its column: container width, the palette's colours for the page's
    whole table `df` (a chart drops the rows it cannot place, and the chart beside it must colour every series
    alike; a model and its baseline share a hue, the baseline lighter), no line joining points that differ in
    `apart` (batch sizes), and a y range shared with the chart beside it."""
    scale = series_scale(df, color) if color and color in df else None
    for layer in chart.layer:
        enc = layer.encoding
        if y_domain is not None and isinstance(enc.y, alt.Y):
            enc.y.scale = alt.Scale(domain=list(y_domain), zero=False)
        if scale is not None and isinstance(enc.color, alt.Color):
            enc.color.scale = scale
        mark = layer.mark if isinstance(layer.mark, str) else getattr(layer.mark, "type", "")
        if mark == "line" and isinstance(enc.color, alt.Color) and apart:
            layer.encoding.detail = [alt.Detail(f"{c}:N") for c in apart]
    # the legend under the plot, in two columns (on the right it is cut off past ~8 series); the width fits
    # the column and the height grows with the legend
    return chart.properties(
        width="container", autosize={"type": "fit-x", "contains": "padding"}
    ).configure_legend(orient="bottom", columns=2, symbolLimit=0, labelLimit=0)
