"""Figures shared by the dashboard and the notebooks: Plotly for schedules and traces, Altair for trade-offs.

Nothing here imports a UI toolkit: every function takes plain data (a Schedule, a trace DataFrame, a sweep
DataFrame) and returns a figure or a frame, so a notebook draws exactly what the dashboard shows.

The theoretical per-step costs are built with the trace's own column names (`num_layers_run`, `flops`,
`kv_cache_bytes`, ...), so one cost figure serves a designed schedule and a measured trace alike.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import altair as alt
import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

import skipcore.measure.costs as costs
from skipcore.adapters.base import ModelShapes
from skipcore.measure.pareto import front_position, pareto_front
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


# -- trace figures ---------------------------------------------------------------------------------------
def display_token(token: str) -> str:
    """A token as a short axis label: whitespace-only tokens made visible, and `<`, `>`, `&` escaped because
    plotly reads labels as HTML (`</s>` would vanish)."""
    text = token.strip() or token.replace("\n", "↵").replace("\t", "⇥").replace(" ", "␣") or "∅"
    return html.escape(text, quote=False)


def sample_rows(trace: pd.DataFrame, sample: int, include_finished: bool = False) -> pd.DataFrame:
    """One batch row's tokens in step order; tokens after its EOS are dropped unless asked for."""
    rows = trace[trace["sample"] == sample].sort_values("step")
    return rows if include_finished else rows[~rows["finished"].astype(bool)]


DRAFT_COLOR = "#f58518"  # kept drafts of a speculative trace


def _token_hover(r, num_layers: int) -> str:
    """A token's hover: its text, the layers that made it, what it cost against full depth (a policy's own work
    included: CALM's heads and propagation, a speculative round's drafts and verified columns) and log p."""
    head = f"step {r.step} · token {html.escape(repr(r.token), quote=False)}"
    if hasattr(r, "drafted"):  # speculative: every kept token was verified at full depth
        if r.step == 0:
            origin = "the prefill (full depth)"
        elif bool(r.drafted):
            origin = f"kept draft, proposed by a {int(r.draft_layers)}-layer draft pass"
        else:
            origin = "the full model's own token (a correction, or the bonus after every draft agreed)"
        layers = f"round {r.round}: {origin}<br>verified at all {num_layers} layers, its share of the round "
        layers += f"{r.layers_spent:.1f} layer passes"
    else:
        layers = f"{r.num_layers_run} layers"
    spent = getattr(r, "flops_total", r.flops)
    confidence = getattr(r, "confidence", float("nan"))
    return (
        f"{head}<br>{layers} · {spent:.3g} FLOPs ({spent / r.flops_full if r.flops_full else 1:.2f}x full "
        f"depth's)<br>log p = {r.logprob:.3f}"
        + ("" if pd.isna(confidence) else f" · confidence {confidence:.3f}")
    )


def exit_heatmap(trace: pd.DataFrame, sample: int, title: str | None = None) -> go.Figure:
    """Tokens (columns, their text on the axis) by layers: which layers produced each token.

    Hover shows the token exactly, its layers, what it cost and its log-probability. In a speculative trace
    every token ran all layers (the verification made it); a marker above the column shows each kept draft.
    """
    rows = sample_rows(trace, sample)
    L = len(str(rows["layer_mask"].iloc[0])) if len(rows) else 0
    speculative = "drafted" in rows
    fig = mask_heatmap(
        list(rows["layer_mask"]),
        x=list(rows["step"]),
        tick_text=[display_token(t) for t in rows["token"]],
        hover=[_token_hover(r, L) for r in rows.itertuples()],
        title=title if title is not None else f"Layers per token, sample {sample}",
        x_title="generated token (step)" + ("; ▼ kept draft" if speculative else ""),
    )
    if speculative and len(rows):
        drafts = rows[rows["drafted"].astype(bool)]
        fig.add_trace(
            go.Scatter(
                x=list(drafts["step"]),
                y=[L - 0.05] * len(drafts),
                mode="markers",
                marker={"symbol": "triangle-down", "size": 8, "color": DRAFT_COLOR},
                name="kept draft",
                showlegend=False,
                text=[
                    f"kept draft of round {r.round} ({int(r.draft_layers)}-layer pass)"
                    for r in drafts.itertuples()
                ],
                hovertemplate="%{text}<extra></extra>",
            )
        )
        fig.update_yaxes(range=[-0.5, L + 0.1])
    return fig


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
    # what a token cost, the policy's own work included where the trace has it (CALM's heads, speculative drafts)
    spent = ("flops_total", "spent") if "flops_total" in steps else ("flops", "schedule")
    for col, name, color, dash in (
        ("flops_full", "full depth", FULL_COLOR, "dash"),
        (*spent, ACTUAL_COLOR, None),
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


def batch_steps(trace: pd.DataFrame) -> pd.DataFrame:
    """One row per step each batch ran, with its time (`step_ms`) and layers: `step` is the batch's step (a
    speculative trace's round, which gives rows several tokens) and `num_layers_run` its layers (`batch_layers`
    where the trace has them: a CALM step's deepest row, a speculative round's sequential passes)."""
    step = "round" if "round" in trace else "step"
    out = trace.drop_duplicates(["batch", step] if "batch" in trace else [step])
    if step == "round":
        out = out.drop(columns="step").rename(columns={"round": "step"})
    if "batch_layers" in out:
        out = out.assign(num_layers_run=out["batch_layers"])
    return out.sort_values("step")


def step_latency_figure(trace: pd.DataFrame, title: str = "Step latency") -> go.Figure:
    """Wall-clock time of each batch step (shared by every row of the batch), one line per batch."""
    group = "batch" if "batch" in trace.columns else None
    per_step = batch_steps(trace)
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
        xaxis_title="round: draft and verify (0 = prefill)"
        if "round" in trace
        else "decode step (0 = prefill)",
        yaxis_title="ms",
        yaxis_rangemode="tozero",
        height=300,
        margin={"l": 50, "r": 20, "t": 50, "b": 40},
    )
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


# -- trade-offs ------------------------------------------------------------------------------------------
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
    policy such as adaptive SkipDecode lies above them). A measured speedup with its interval (`<x>_lo`,
    `<x>_hi` columns, as the sweep writes them) gets horizontal error bars; a point whose timing was flagged as
    implausible (`timing_flag`) is drawn as a cross, not a dot.
    """
    data = df.dropna(subset=[x, y]).copy()
    if color and color in data:
        color_enc = alt.Color(f"{color}:N", title=color, scale=alt.Scale(scheme="tableau10"))
    else:
        color_enc = alt.value(ACTUAL_COLOR)
    lo, hi = f"{x}_lo", f"{x}_hi"
    interval = lo in data and hi in data and data[[lo, hi]].notna().any().any()
    flagged = x.startswith("wall_speedup") and "timing_flag" in data
    if flagged:
        data["timing"] = np.where(data["timing_flag"].fillna("").astype(str) != "", "flagged", "ok")
    tips = [
        c for c in dict.fromkeys([color, x, *([lo, hi] if interval else []), y, *tooltip]) if c and c in data
    ] + (["timing_flag"] if flagged else [])
    base = alt.Chart(data).encode(
        x=alt.X(f"{x}:Q", title=x, scale=alt.Scale(zero=False)),
        y=alt.Y(f"{y}:Q", title=y, scale=alt.Scale(zero=False)),
        color=color_enc,
    )
    layers = []
    if pareto and len(data):  # under the series, so it never hides a point
        front = pareto_front(data if front_rows is None else front_rows, x, y)
        layers.append(
            alt.Chart(front)
            .mark_line(
                color="black",
                strokeDash=[6, 4],
                strokeWidth=1.5,
                opacity=0.8,
                point=alt.OverlayMarkDef(filled=False, color="black", size=180),  # rings: a 1-point front
            )
            .encode(x=f"{x}:Q", y=f"{y}:Q", order=f"{x}:Q")
        )
    layers.append(base.mark_line(opacity=0.6).encode(order=f"{x}:Q"))
    if interval:
        layers.append(base.mark_rule(strokeWidth=2, opacity=0.7).encode(x=f"{lo}:Q", x2=f"{hi}:Q"))
    if flagged:
        shape = alt.Shape(
            "timing:N", title="timing", scale=alt.Scale(domain=["ok", "flagged"], range=["circle", "cross"])
        )
        layers.append(base.mark_point(size=90, filled=True, opacity=1).encode(shape=shape, tooltip=tips))
    else:
        layers.append(base.mark_circle(size=80, opacity=1).encode(tooltip=tips))
    chart = alt.layer(*layers)
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


# -- figures the notebooks use: several schedules at once, the KV cache map, sweeps -------------------------
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
    groups = df.groupby(color, sort=False) if color else [(y, df)]
    for name, rows in groups:
        rows = rows.sort_values(x)
        fig.add_trace(
            go.Scatter(
                x=rows[x],
                y=rows[y],
                mode="lines+markers" if markers else "lines",
                marker={"size": 5},
                name=str(name),
                hovertemplate=f"{x} %{{x}}<br>{y} %{{y:.4g}}<extra>{name}</extra>",
            )
        )
    fig.update_layout(
        title=title,
        xaxis_title=x_title or x,
        yaxis_title=y_title or y,
        xaxis_type="log" if log_x else None,
        legend={"orientation": "h", "y": -0.25},
        margin={"l": 50, "r": 20, "t": 50, "b": 40},
        height=height,
    )
    return fig


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


KV_HOLE = "#d62728"


def kv_cache_map(layer_sets: Sequence[Sequence[int]], prompt_len: int, num_layers: int) -> pd.DataFrame:
    """Which KV entries exist, per layer and position, after feeding the steps of `layer_sets`.

    Step 0 writes positions [0, P) in the layers of its set; step s >= 1 writes position P+s-1 in the layers
    of set s. `state` is 'written', 'skipped' (never written, never read) or 'hole' (never written but read by
    a later position that runs the layer: the KV cache would need a recomputation there).
    """
    T = len(layer_sets)
    cols = prompt_len + T - 1
    written = np.zeros((num_layers, cols), dtype=bool)
    written[list(layer_sets[0]), :prompt_len] = True
    for s in range(1, T):
        written[list(layer_sets[s]), prompt_len + s - 1] = True
    read_later = np.zeros_like(written)  # (layer, position) read by some later position running that layer
    for i in range(num_layers):
        runs = np.flatnonzero(written[i])
        if len(runs):
            read_later[i, : runs.max()] = True
    state = np.where(written, "written", np.where(read_later, "hole", "skipped"))
    layer, pos = np.meshgrid(range(num_layers), range(cols), indexing="ij")
    return pd.DataFrame(
        {
            "layer": layer.ravel(),
            "position": pos.ravel(),
            "step": np.maximum(0, pos.ravel() - prompt_len + 1),
            "state": state.ravel(),
        }
    )


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
    fig.add_vline(x=prompt_len - 0.5, line={"color": "black", "dash": "dot"})
    holes = int((cache_map["state"] == "hole").sum())
    fig.update_layout(
        title=title + (f" ({holes} holes)" if holes else " (no holes)"),
        xaxis_title="position (prompt left of the dotted line)",
        yaxis_title="layer",
        height=max(240, min(520, 100 + 16 * len(z))),
        margin={"l": 50, "r": 20, "t": 50, "b": 40},
    )
    return fig


def speedups_by_prompt_length(
    schedule: Schedule, shapes: ModelShapes, prompt_lens: Sequence[int], max_new_tokens: int
) -> pd.DataFrame:
    """Theoretical layer and FLOPs speedups (decode only, with the prompt) for prompts of several lengths."""
    rows = []
    for P in prompt_lens:
        summary = theoretical_summary(
            theoretical_steps(schedule, shapes, int(P), max_new_tokens), schedule.num_layers
        )
        rows.append({"prompt_len": int(P), **summary})
    return pd.DataFrame(rows)


def sweep_series(df: pd.DataFrame) -> pd.DataFrame:
    """A sweep with a `series` column for colouring: a static schedule's mode ('full' at full depth), else the
    policy ('transformers early exit' for generate() with its assistant); the shape when the static schedules use several ('skip · power'); the model role when a baseline
    model is in the table ('skip · baseline'). The dashboard and the notebooks colour sweeps with this."""
    out = df.copy()
    policy = out["policy"].astype(str) if "policy" in out else pd.Series("static", index=out.index)
    mode = out["mode"].astype(str) if "mode" in out else pd.Series("none", index=out.index)
    shape = out["shape"].astype(str) if "shape" in out else pd.Series("", index=out.index)
    series = policy.where(policy != "static", mode.where(shape != "full", "full"))
    series = series.where(series != "none", policy)
    shaped = (policy == "static") & ~shape.isin(["full", "", "None", "nan"]) & (series != "full")
    if shape[shaped].nunique() > 1:
        series = series.where(~shaped, series + " · " + shape)
    if "assistant_exit" in out:  # transformers' generate() with its early-exit assistant, apart from plain
        assisted = (policy == "transformers") & out["assistant_exit"].notna()
        series = series.where(~assisted, "transformers early exit")
    if "model_role" in out and out["model_role"].nunique() > 1:
        series = series + np.where(
            out["model_role"].astype(str) == "model", "", " · " + out["model_role"].astype(str)
        )
    out["series"] = series
    return out


__all__ = [
    "batch_steps",
    "budget_figure",
    "budgets_figure",
    "cost_figure",
    "display_token",
    "exit_heatmap",
    "front_position",
    "human_bytes",
    "kv_cache_figure",
    "kv_cache_map",
    "mask_heatmap",
    "masks_figure",
    "pareto_front",
    "sample_rows",
    "schedule_mask_figure",
    "series_figure",
    "speedup_comparison_chart",
    "speedups_by_prompt_length",
    "step_latency_figure",
    "sweep_series",
    "theoretical_steps",
    "theoretical_summary",
    "tradeoff_chart",
]
