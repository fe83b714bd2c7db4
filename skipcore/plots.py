"""Figures shared by the dashboard and the notebooks: Plotly for schedules and traces, Altair for trade-offs.

Nothing here imports a UI toolkit: every function takes plain data (a Schedule, a trace DataFrame, a sweep
DataFrame) and returns a figure or a frame, so a notebook draws exactly what the dashboard shows.

The theoretical per-step costs are built with the trace's own column names (`num_layers_run`, `flops`,
`kv_cache_bytes`, ...), so one cost figure serves a designed schedule and a measured trace alike.
"""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from skipcore import costs
from skipcore.adapters.base import ModelShapes
from skipcore.schedule import Schedule, mask_string

RAN, SKIPPED = "#1f4e9c", "#e6e9ef"
FULL_COLOR, ACTUAL_COLOR = "#9aa0a6", "#1f4e9c"
MASK_COLORSCALE = [[0.0, SKIPPED], [0.5, SKIPPED], [0.5, RAN], [1.0, RAN]]


# -- theoretical costs of a schedule ---------------------------------------------------------------------
def theoretical_steps(
    schedule: Schedule,
    shapes: ModelShapes,
    prompt_len: int,
    max_new_tokens: int,
    bytes_per_element: int = 4,
) -> pd.DataFrame:
    """One row per step for a single prompt of `prompt_len` tokens, costed like a trace (no model run).

    Columns follow the trace schema (`step`, `num_layers_run`, `layer_mask`, `flops`, `flops_full`,
    `kv_cache_bytes`, `kv_cache_bytes_full`) so the cost figures draw a design and a measurement alike.
    """
    L = schedule.num_layers
    sets = schedule.layer_sets(max_new_tokens)
    n = np.array([len(s) for s in sets])
    steps = np.arange(max_new_tokens)
    flops = [costs.prefill_flops(shapes, prompt_len)] + [
        costs.decode_flops(shapes, prompt_len, s, int(n[s])) for s in steps[1:]
    ]
    flops_full = [costs.prefill_flops(shapes, prompt_len)] + [
        costs.decode_flops(shapes, prompt_len, s, L) for s in steps[1:]
    ]
    per_pos = costs.kv_bytes_per_position(shapes, bytes_per_element)
    written = np.cumsum(np.where(steps == 0, 0, n))
    return pd.DataFrame(
        {
            "step": steps,
            "num_layers_run": n,
            "layer_mask": [mask_string(s, L) for s in sets],
            "flops": np.asarray(flops, dtype=float),
            "flops_full": np.asarray(flops_full, dtype=float),
            "kv_cache_bytes": ((L * prompt_len + written) * per_pos).astype(np.int64),
            "kv_cache_bytes_full": (L * (prompt_len + steps) * per_pos).astype(np.int64),
        }
    )


def theoretical_summary(steps: pd.DataFrame, num_layers: int) -> dict[str, float]:
    """Layer and FLOPs speedups (decode only, with prompt) and the KV cache at the last step."""
    decode = steps[steps["step"] >= 1]
    last = steps.iloc[-1]
    kv, kv_full = int(last["kv_cache_bytes"]), int(last["kv_cache_bytes_full"])
    return {
        "layer_speedup": float(num_layers / decode["num_layers_run"].mean()) if len(decode) else 1.0,
        "flops_speedup_decode": _ratio(decode["flops_full"].sum(), decode["flops"].sum()),
        "flops_speedup_with_prompt": _ratio(steps["flops_full"].sum(), steps["flops"].sum()),
        "kv_cache_bytes": kv,
        "kv_cache_bytes_full": kv_full,
        "kv_saved_fraction": 1 - kv / kv_full if kv_full else 0.0,
    }


def _ratio(a: float, b: float) -> float:
    return float(a / b) if b else 1.0


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB': KV caches span bytes (tiny models) to GiB (real ones)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # unreachable; keeps type checkers content


# -- schedule figures ------------------------------------------------------------------------------------
def budget_figure(budgets: Sequence[int], num_layers: int, title: str = "Layer budget per step") -> go.Figure:
    """n(s) as a step plot against full depth; step 0 is the prefill and always runs every layer."""
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
            line={"shape": "hv", "color": ACTUAL_COLOR, "width": 2},
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
        legend={"orientation": "h", "y": -0.25},
        margin={"l": 50, "r": 20, "t": 50, "b": 40},
        height=320,
    )
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
    if tick_text is not None:
        xaxis.update(tickmode="array", tickvals=x, ticktext=list(tick_text), tickangle=-60)
    fig.update_layout(
        title=title,
        xaxis=xaxis,
        yaxis={"title": "layer", "dtick": 1 if L <= 32 else None},
        margin={"l": 50, "r": 20, "t": 50, "b": 40},
        height=max(260, min(620, 90 + 16 * L)),
    )
    return fig


def schedule_mask_figure(schedule: Schedule, max_new_tokens: int) -> go.Figure:
    """The layer mask of every step a schedule would run (steps x layers)."""
    sets = schedule.layer_sets(max_new_tokens)
    masks = [mask_string(s, schedule.num_layers) for s in sets]
    hover = [f"step {s}: {len(ls)} layers" for s, ls in enumerate(sets)]
    return mask_heatmap(masks, hover=hover, title=f"Layer mask: {schedule.describe()}")


# -- trace figures ---------------------------------------------------------------------------------------
def display_token(token: str) -> str:
    """A token as a short axis label: whitespace-only tokens made visible."""
    if token.strip():
        return token.strip()
    return token.replace("\n", "↵").replace("\t", "⇥").replace(" ", "␣") or "∅"


def sample_rows(trace: pd.DataFrame, sample: int, include_finished: bool = False) -> pd.DataFrame:
    """One batch row's tokens in step order; tokens after its EOS are dropped unless asked for."""
    rows = trace[trace["sample"] == sample].sort_values("step")
    return rows if include_finished else rows[~rows["finished"].astype(bool)]


def exit_heatmap(trace: pd.DataFrame, sample: int, title: str | None = None) -> go.Figure:
    """Tokens (columns, their text on the axis) by layers: which layers produced each token.

    Hover shows the token exactly, its layers, FLOPs and log-probability.
    """
    rows = sample_rows(trace, sample)
    hover = [
        f"step {r.step} · token {r.token!r}<br>{r.num_layers_run} layers · {r.flops:.3g} FLOPs"
        f" ({r.flops_full / r.flops if r.flops else 1:.2f}x fewer than full)<br>log p = {r.logprob:.3f}"
        for r in rows.itertuples()
    ]
    return mask_heatmap(
        list(rows["layer_mask"]),
        x=list(rows["step"]),
        tick_text=[display_token(t) for t in rows["token"]],
        hover=hover,
        title=title if title is not None else f"Layers per token, sample {sample}",
        x_title="generated token (step)",
    )


def cost_figure(steps: pd.DataFrame, title: str = "Compute and KV cache per step") -> go.Figure:
    """FLOPs per decode step and KV-cache bytes after each step, each against full depth.

    Takes one row per step with trace columns: a theoretical frame or one sample of a trace. Step 0 (the
    prefill) is left off the FLOPs panel because it dwarfs every decode step; its cost is in the speedups.
    """
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("FLOPs per decode step", "KV cache after step"),
        horizontal_spacing=0.12,
    )
    decode = steps[steps["step"] >= 1]
    for col, name, color, dash in (
        ("flops_full", "full depth", FULL_COLOR, "dash"),
        ("flops", "schedule", ACTUAL_COLOR, None),
    ):
        fig.add_trace(
            go.Scatter(
                x=decode["step"],
                y=decode[col],
                mode="lines",
                line={"shape": "hv", "color": color, "dash": dash},
                name=name,
                legendgroup=name,
                hovertemplate="step %{x}<br>%{y:.3s} FLOPs<extra>" + name + "</extra>",
            ),
            row=1,
            col=1,
        )
    for col, name, color, dash in (
        ("kv_cache_bytes_full", "full depth", FULL_COLOR, "dash"),
        ("kv_cache_bytes", "schedule", ACTUAL_COLOR, None),
    ):
        fig.add_trace(
            go.Scatter(
                x=steps["step"],
                y=steps[col],
                mode="lines",
                line={"color": color, "dash": dash},
                name=name,
                legendgroup=name,
                showlegend=False,
                hovertemplate="step %{x}<br>%{y:.3s} B<extra>" + name + "</extra>",
            ),
            row=1,
            col=2,
        )
    fig.update_xaxes(title_text="decode step")
    fig.update_yaxes(title_text="FLOPs", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="bytes", rangemode="tozero", row=1, col=2)
    fig.update_layout(
        title=title,
        height=340,
        legend={"orientation": "h", "y": -0.25},
        margin={"l": 50, "r": 20, "t": 70, "b": 40},
    )
    return fig


def step_latency_figure(trace: pd.DataFrame, title: str = "Step latency") -> go.Figure:
    """Wall-clock time of each batch step (shared by every row of the batch), one line per batch."""
    group = "batch" if "batch" in trace.columns else None
    per_step = trace.drop_duplicates([group, "step"] if group else ["step"]).sort_values("step")
    fig = go.Figure()
    for key, rows in per_step.groupby(group) if group else [(0, per_step)]:
        fig.add_trace(
            go.Scatter(
                x=rows["step"],
                y=rows["step_ms"],
                mode="lines+markers",
                marker={"size": 4},
                name=f"batch {key}",
                customdata=rows["num_layers_run"],
                hovertemplate="step %{x}: %{y:.2f} ms<br>%{customdata} layers<extra></extra>",
            )
        )
    fig.update_layout(
        title=title,
        xaxis_title="decode step (0 = prefill)",
        yaxis_title="ms",
        yaxis_rangemode="tozero",
        height=300,
        margin={"l": 50, "r": 20, "t": 50, "b": 40},
    )
    return fig


def sample_steps(trace: pd.DataFrame, sample: int) -> pd.DataFrame:
    """A sample's rows with the trace's cost columns, for `cost_figure`."""
    return sample_rows(trace, sample)


# -- trade-offs ------------------------------------------------------------------------------------------
def pareto_front(df: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """The points no other point beats on both x and y (both higher-is-better), in increasing x.

    Ties on x keep the best y only; NaN rows are ignored.
    """
    pts = df.dropna(subset=[x, y]).sort_values([x, y], ascending=[False, False])
    keep, best_y = [], -np.inf
    for idx, yv in zip(pts.index, pts[y], strict=True):
        if yv > best_y:
            keep.append(idx)
            best_y = yv
    return pts.loc[keep].sort_values(x)


def tradeoff_chart(
    df: pd.DataFrame,
    x: str,
    y: str,
    color: str | None = "policy",
    tooltip: Sequence[str] = (),
    pareto: bool = True,
    title: str = "",
    width: int = 360,
    height: int = 300,
) -> alt.Chart:
    """Quality (y) against speedup (x): one coloured series per policy, the Pareto front drawn dashed."""
    data = df.dropna(subset=[x, y]).copy()
    color_enc = alt.Color(f"{color}:N", title=color) if color and color in data else alt.value(ACTUAL_COLOR)
    tips = [c for c in dict.fromkeys([color, x, y, *tooltip]) if c and c in data]
    base = alt.Chart(data).encode(
        x=alt.X(f"{x}:Q", title=x, scale=alt.Scale(zero=False)),
        y=alt.Y(f"{y}:Q", title=y, scale=alt.Scale(zero=False)),
        color=color_enc,
    )
    lines = base.mark_line(opacity=0.5).encode(order=f"{x}:Q")
    points = base.mark_circle(size=70).encode(tooltip=tips)
    chart = lines + points
    if pareto and len(data):
        front = pareto_front(data, x, y)
        chart = chart + (
            alt.Chart(front)
            .mark_line(color="black", strokeDash=[6, 4], point=alt.OverlayMarkDef(color="black", size=25))
            .encode(x=f"{x}:Q", y=f"{y}:Q", order=f"{x}:Q")
        )
    return chart.properties(title=title or f"{y} vs {x}", width=width, height=height)


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


__all__ = [
    "budget_figure",
    "cost_figure",
    "display_token",
    "exit_heatmap",
    "human_bytes",
    "mask_heatmap",
    "pareto_front",
    "sample_rows",
    "sample_steps",
    "schedule_mask_figure",
    "speedup_comparison_chart",
    "step_latency_figure",
    "theoretical_steps",
    "theoretical_summary",
    "tradeoff_chart",
]
