"""The session's run history: every Generate run's summary and per-step layers, overlaid on one figure with
full depth always drawn, so schedules tried one after another can be compared."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from skipcore import plots, summarize
from skipcore.plots.style import series_colors

KEY = "run_history"
MAX_RUNS = 12


def record(label: str, trace: pd.DataFrame, num_layers: int) -> None:
    """Keep one run: its summary and its mean layers per step over the rows still running."""
    live = trace[~trace["finished"].astype(bool)]
    per_step = live.groupby("step")["num_layers_run"].mean().reset_index()
    runs = st.session_state.setdefault(KEY, [])
    runs.append(
        {
            "run": f"{len(runs) + 1}: {label}",
            "summary": summarize(trace, num_layers),
            "steps": per_step,
            "num_layers": num_layers,
        }
    )
    del runs[:-MAX_RUNS]


def runs() -> list[dict]:
    return st.session_state.get(KEY, [])


def table(chosen: list[dict]) -> pd.DataFrame:
    """Full depth first, then each run: the speedups its own trace gives."""
    keys = ("layer_speedup", "batch_layer_speedup", "flops_speedup_decode", "kv_saved_fraction", "tokens")
    full = {"run": "full depth", **dict.fromkeys(keys[:3], 1.0), "kv_saved_fraction": 0.0, "tokens": None}
    return pd.DataFrame([full, *({"run": r["run"], **{k: r["summary"][k] for k in keys}} for r in chosen)])


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
        title="Layers run per step, runs of this session",
        xaxis_title="decode step (0 = prefill)",
        yaxis_title="mean layers run (rows still running)",
        yaxis_range=[0, L + 0.5],
        legend={"orientation": "h", "y": -0.3},
        height=360,
        margin={"l": 50, "r": 20, "t": 50, "b": 40},
    )
    return fig
