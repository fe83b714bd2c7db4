"""Figures of costs: FLOPs per decode step and KV-cache bytes after each step against full depth (a designed
schedule's, from `skipcore.measure.theory`, or one row of a trace), and the KV cache's entries per layer and
position (written, skipped, holes).
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from skipcore.errors import UserError
from skipcore.measure.summary import own_or
from skipcore.plots.style import ACTUAL_COLOR, FULL_COLOR, INK, KV_HOLE, RAN, SKIPPED, legend_below


def cost_figure(
    steps: pd.DataFrame, title: str = "Compute and KV cache per step", color: str = ACTUAL_COLOR
) -> go.Figure:
    """FLOPs per decode step and KV-cache bytes after each step, each against full depth; what the run spent in
    `color` (its family's: a skip schedule's blue by default).

    Takes one row per step with trace columns: a theoretical frame or one sample of a trace (`sample_rows`);
    rows of several samples or runs are refused, and a row's steps after its EOS are left off (not its work, as
    in the speedups). Step 0 (the prefill) is left off the FLOPs panel because it dwarfs every decode step; its
    cost is in the speedups.
    """
    if "finished" in steps:
        steps = steps[~steps["finished"].astype(bool)]
    if steps["step"].duplicated().any():
        raise UserError(
            "cost_figure draws one row per step, and these rows repeat steps (several samples or runs): pass one "
            "sample's, plots.sample_rows(trace, sample)",
            field="steps",
        )
    # one above the other, sharing the step axis: side by side, the two titles overlapped in a narrow column
    fig = make_subplots(
        rows=2,
        cols=1,
        subplot_titles=("FLOPs per decode step", "KV cache after step"),
        shared_xaxes=True,
        vertical_spacing=0.16,
    )
    decode = steps[steps["step"] >= 1]
    # what a token cost, the policy's own work included where the trace has it (CALM's heads, speculative drafts)
    own = "flops_total" in steps and steps["flops_total"].notna().any()
    spent = "spent" if own else "schedule"  # the run's line, in both panels
    for y, name, hue, dash in (
        (decode["flops_full"], "full depth", FULL_COLOR, "dash"),
        (own_or(decode, "flops_total", "flops"), spent, color, None),
    ):
        fig.add_trace(
            go.Scatter(
                x=decode["step"],
                y=y,
                mode="lines",
                line={"shape": "hv", "color": hue, "dash": dash},
                name=name,
                legendgroup=name,
                hovertemplate="step %{x}<br>%{y:.3s} FLOPs<extra>" + name + "</extra>",
            ),
            row=1,
            col=1,
        )
    for col, name, hue, dash in (
        ("kv_cache_bytes_full", "full depth", FULL_COLOR, "dash"),
        ("kv_cache_bytes", spent, color, None),
    ):
        fig.add_trace(
            go.Scatter(
                x=steps["step"],
                y=steps[col],
                mode="lines",
                line={"color": hue, "dash": dash},
                name=name,
                legendgroup=name,
                showlegend=False,
                hovertemplate="step %{x}<br>%{y:.3s} B<extra>" + name + "</extra>",
            ),
            row=2,
            col=1,
        )
    fig.update_xaxes(title_text="decode step", row=2, col=1)
    fig.update_yaxes(title_text="FLOPs", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="bytes", rangemode="tozero", row=2, col=1)
    fig.update_layout(
        title=title,
        height=480,
        margin={"l": 50, "r": 20, "t": 70, "b": 40},
    )
    return legend_below(fig)


def kv_cache_figure(cache_map: pd.DataFrame, prompt_len: int, title: str = "KV cache entries") -> go.Figure:
    """`kv_cache_map` as a heatmap: written (dark), skipped (light), holes (red); prompt left of the line."""
    code = {"skipped": 0.0, "written": 1.0, "hole": 2.0}
    z = cache_map.pivot(index="layer", columns="position", values="state").replace(code).astype(float)
    scale = [[0, SKIPPED], [1 / 3, SKIPPED], [1 / 3, RAN], [2 / 3, RAN], [2 / 3, KV_HOLE], [1, KV_HOLE]]
    text = cache_map.pivot(index="layer", columns="position", values="state").to_numpy()
    fig = go.Figure(
        go.Heatmap(
            z=z.to_numpy(),
            x=list(z.columns),
            y=list(z.index),
            zmin=0,
            zmax=2,
            colorscale=scale,
            showscale=False,
            xgap=1,
            ygap=1,
            text=text,
            hovertemplate="position %{x}, layer %{y}: %{text}<extra></extra>",
        )
    )
    fig.add_vline(x=prompt_len - 0.5, line={"color": INK, "dash": "dot"})
    holes = int((cache_map["state"] == "hole").sum())
    fig.update_layout(
        title=title + (f" ({holes} hole{'s' if holes > 1 else ''})" if holes else " (no holes)"),
        xaxis_title="position (prompt left of the dotted line)",
        yaxis_title="layer",
        height=max(240, min(520, 100 + 16 * len(z))),
        margin={"l": 50, "r": 20, "t": 50, "b": 40},
    )
    return fig
