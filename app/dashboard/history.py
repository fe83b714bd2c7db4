"""Kept runs side by side: each run's mean layers per decode step overlaid on one figure with full depth always
drawn, and a table of the speedups each run's own trace gives. The runs come from `runstore`, which keeps them."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from skipcore import plots
from skipcore.labels import column_title
from skipcore.plots.style import series_colors


def layers_per_step(trace: pd.DataFrame) -> pd.DataFrame:
    """Mean layers run at each step, over the rows still running."""
    live = trace[~trace["finished"].astype(bool)]
    return live.groupby("step")["num_layers_run"].mean().reset_index()


def entry(name: str, trace: pd.DataFrame, summary: dict, num_layers: int) -> dict:
    """One run as the figure and the table take it."""
    return {"run": name, "steps": layers_per_step(trace), "summary": summary, "num_layers": num_layers}


TABLE_KEYS = ("layer_speedup", "batch_layer_speedup", "flops_speedup_decode", "kv_saved_fraction", "tokens")


def table(chosen: list[dict]) -> pd.DataFrame:
    """Full depth first, then each run: the speedups its own trace gives (columns in words)."""
    full = {
        "run": "full depth",
        **dict.fromkeys(TABLE_KEYS[:3], 1.0),
        "kv_saved_fraction": 0.0,
        "tokens": None,
    }
    rows = [full, *({"run": r["run"], **{k: r["summary"].get(k) for k in TABLE_KEYS}} for r in chosen)]
    return pd.DataFrame(rows).rename(columns=column_title)


def figure(chosen: list[dict]) -> go.Figure:
    """Mean layers run per decode step of each chosen run, against full depth (dashed)."""
    L = max(r["num_layers"] for r in chosen)
    last = max(int(r["steps"]["step"].max()) for r in chosen)
    fig = go.Figure(
        go.Scatter(
            x=[0, last],
            y=[L, L],
            mode="lines",
            name=f"full depth ({L})",
            line={"color": plots.FULL_COLOR, "dash": "dash"},
        )
    )
    colours = series_colors([r["run"] for r in chosen])
    for r in chosen:
        fig.add_trace(
            go.Scatter(
                x=r["steps"]["step"],
                y=r["steps"]["num_layers_run"],
                mode="lines+markers",
                marker={"size": 4, "color": colours[r["run"]]},
                line={"shape": "hv", "color": colours[r["run"]]},
                name=r["run"],
            )
        )
    fig.update_layout(
        title="Layers run per step",
        xaxis_title="decode step (0 = prefill)",
        yaxis_title="mean layers run (rows still running)",
        yaxis_range=[0, L + 0.5],
        legend={"orientation": "h", "y": -0.3},
        height=360,
        margin={"l": 50, "r": 20, "t": 50, "b": 40},
    )
    return fig
