"""Lines of a long-format table, one per value of a column, in the house style of the other figures: training
loss per run, speedups by prompt length, several schedules' budgets.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from skipcore.plots.style import legend_below, series_colors


def series_figure(
    df: pd.DataFrame,
    x: str,
    y: str,
    color: str | None = None,
    title: str = "",
    x_title: str | None = None,
    y_title: str | None = None,
    log_x: bool = False,
    markers: bool = True,
    height: int = 320,
) -> go.Figure:
    """One line per value of `color` (long format), in the house style of the other figures."""
    fig = go.Figure()
    groups = list(df.groupby(color, sort=False)) if color else [(y, df)]
    colours = series_colors([name for name, _ in groups])
    for name, rows in groups:
        rows = rows.sort_values(x)
        fig.add_trace(
            go.Scatter(
                x=rows[x],
                y=rows[y],
                mode="lines+markers" if markers else "lines",
                line={"color": colours[name]},
                marker={"size": 5, "color": colours[name]},
                name=str(name),
                hovertemplate=f"{x} %{{x}}<br>{y} %{{y:.4g}}<extra>{name}</extra>",
            )
        )
    fig.update_layout(
        title=title,
        xaxis_title=x_title or x,
        yaxis_title=y_title or y,
        xaxis_type="log" if log_x else None,
        margin={"l": 50, "r": 20, "t": 50, "b": 40},
        height=height,
    )
    return legend_below(fig)
