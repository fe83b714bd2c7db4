"""Figures of lens tables, shared by the dashboard's "Layer lens" page and the notebooks: the token x layer
heatmap of one read-out statistic (skipped cells marked with an x, the top-k tokens on hover), the per-layer summary and
agreement with full depth. Plain data in, Plotly figures out; no fixed widths, so a figure fits its column."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from skipcore.lens.summary import Agreement
from skipcore.plots.style import GROUND, SKIP_MARK, SKIPPED, legend_below, series_colors
from skipcore.plots.trace import display_token, hover_token

# statistic -> (label, colour scale, zmin, zmax); None leaves the range to the data
STATS: dict[str, tuple[str, str, float | None, float | None]] = {
    "top_prob": ("top-token probability", "Blues", 0.0, 1.0),
    "p_generated": ("p(generated token)", "Blues", 0.0, 1.0),
    "kl_to_final": ("KL(final ‖ read-out), nats", "Reds", 0.0, None),
    "entropy": ("entropy, nats", "Purples", 0.0, None),
    "residual_cos": ("cosine(layer input, output)", "Viridis", None, 1.0),
}
LABEL_LIMIT = 40  # columns beyond this get numeric step ticks (token text stays on hover)


def _topk_text(topk: str) -> str:
    return " · ".join(f"{hover_token(t)} {p:.2f}" for _, t, p in json.loads(topk))


def lens_heatmap(
    table: pd.DataFrame, sample: int, stat: str = "kl_to_final", title: str | None = None
) -> go.Figure:
    """Layers (rows, layer 0 at the bottom) by generated tokens (columns) of one sample, coloured by `stat` where
    the token ran the layer; a layer it skipped is one neutral colour (its read-out only repeats the layer below,
    which its colour would wrongly suggest it computed). Hover: the read-out's top-k."""
    if stat not in STATS:
        raise ValueError(f"unknown lens statistic {stat!r}; choose one of {', '.join(STATS)}")
    label, scale, zmin, zmax = STATS[stat]
    rows = table[table["sample"] == sample].sort_values(["step", "layer"])
    if rows.empty:
        return go.Figure(layout={"title": title or f"no tokens for sample {sample}"})
    steps = sorted(rows["step"].unique())
    L = int(table["layer"].max()) + 1
    grid = rows.pivot(index="layer", columns="step", values=stat).reindex(index=range(L), columns=steps)
    text = {(int(r.layer), int(r.step)): _hover(r) for r in rows.itertuples()}
    hover = [[text.get((i, step), "") for step in steps] for i in range(L)]
    ran = rows.pivot(index="layer", columns="step", values="ran").reindex(index=range(L), columns=steps)
    skipped = ran.eq(False).to_numpy()  # a missing cell (no such step) is not a skip
    values = grid.to_numpy(dtype=float)
    fig = go.Figure(
        go.Heatmap(  # the layers a token ran, coloured by the statistic
            z=np.where(skipped, np.nan, values),
            x=steps,
            y=list(range(L)),
            zmin=zmin,
            zmax=zmax,
            colorscale=scale,
            reversescale=stat == "residual_cos",
            colorbar={"title": {"text": label, "side": "right"}, "thickness": 12},
            xgap=1,
            ygap=1,
            text=hover,
            hovertemplate="%{text}<extra></extra>",
            hoverongaps=False,
        )
    )
    fig.add_trace(
        go.Heatmap(  # the layers it skipped, one neutral colour: their read-out only repeats the layer below
            z=np.where(skipped, 1.0, np.nan),
            x=steps,
            y=list(range(L)),
            zmin=0,
            zmax=1,
            colorscale=[[0.0, SKIPPED], [1.0, SKIPPED]],
            showscale=False,
            xgap=1,
            ygap=1,
            text=hover,
            hovertemplate="%{text}<extra>skipped</extra>",
            hoverongaps=False,
            name="skipped",
        )
    )
    if skipped.any():  # an x on each neutral cell, its legend entry: the fill alone reads as a gap
        layer, column = np.nonzero(skipped)
        fig.add_trace(
            go.Scatter(
                x=[steps[c] for c in column],
                y=layer.tolist(),
                mode="markers",
                marker={
                    "symbol": "x-thin",
                    "size": 7,
                    "color": SKIP_MARK,
                    "line": {"width": 1.5, "color": SKIP_MARK},
                },
                name="skipped (the stream passes unchanged)",
                showlegend=True,
                hoverinfo="skip",
            )
        )
    tokens = rows.drop_duplicates("step").set_index("step")["token"]
    xaxis: dict = {"title": "generated token (step)"}
    bottom = 45
    if len(steps) <= LABEL_LIMIT:
        xaxis.update(
            tickmode="array",
            tickvals=steps,
            ticktext=[display_token(tokens[s]) for s in steps],
            tickangle=-60,
            automargin=False,
        )
        bottom = 95
    fig.update_layout(
        title=title if title is not None else f"{label}, sample {sample}",
        xaxis=xaxis,
        yaxis={"title": "layer", "dtick": 1 if L <= 32 else None},
        legend={"orientation": "h", "y": 1.02, "x": 1, "xanchor": "right", "yanchor": "bottom"},
        plot_bgcolor=GROUND,
        margin={"l": 50, "r": 10, "t": 60, "b": bottom},
        height=max(280, min(640, 100 + 18 * L)) + bottom - 45,
    )
    return fig


def _hover(r) -> str:
    """One cell's hover: the token, the layer, the read-out's statistics and its top-k tokens."""
    cos = "" if pd.isna(r.residual_cos) else f" · cos {r.residual_cos:.3f}"
    return (
        f"step {r.step} · token {hover_token(r.token)} · layer {r.layer} "
        f"({'ran' if r.ran else 'skipped'})<br>top {hover_token(r.top_token)} "
        f"{r.top_prob:.3f} · p(generated) {r.p_generated:.3f}<br>KL to final {r.kl_to_final:.3f} · "
        f"entropy {r.entropy:.3f}{cos}<br>{_topk_text(r.topk)}"
    )


def layer_summary_figure(
    summaries: Mapping[str, pd.DataFrame], title: str = "Per layer", colors: Mapping[str, str] | None = None
) -> go.Figure:
    """Mean KL to the final read-out after each layer and mean residual cosine, over the tokens where the layer
    ran (a skipped layer's row repeats the read-out below it), one line per path (`skipcore.lens.layer_summary` frames): layers with cosine near 1 change the stream little. The
    layer axis runs over the model's layers, 0 to L-1, and no further. `colors`: each path's colour (a run's,
    as the page draws it everywhere), else the palette's."""
    fig = make_subplots(
        rows=1,
        cols=2,
        # two short lines each: side by side on a phone's width, one long line ran into the other
        subplot_titles=(
            "mean KL to the final<br>read-out (nats, ran)",
            "mean cosine, layer<br>input to output (ran)",
        ),
        horizontal_spacing=0.12,
    )
    colours = {**series_colors(list(summaries)), **(colors or {})}
    for name, s in summaries.items():
        color = colours[name]
        for col, (y, fmt) in enumerate((("kl_to_final", ".3f"), ("residual_cos", ".4f")), start=1):
            fig.add_trace(
                go.Scatter(
                    x=s["layer"],
                    y=s[y],
                    mode="lines+markers",
                    line={"color": color},
                    name=name,
                    legendgroup=name,
                    showlegend=col == 1,
                    hovertemplate=f"layer %{{x}}<br>%{{y:{fmt}}}<extra>{html.escape(name)}</extra>",
                ),
                row=1,
                col=col,
            )
    last = max((int(s["layer"].max()) for s in summaries.values() if len(s)), default=0)
    fig.update_xaxes(title_text="layer", dtick=1 if last < 32 else None, range=[-0.5, last + 0.5])
    fig.update_layout(
        title=title,
        height=360,
        margin={"l": 50, "r": 10, "t": 90, "b": 40},
    )
    fig.update_annotations(font_size=13)
    return legend_below(fig)


def agreement_figure(
    agreements: Mapping[str, Agreement],
    title: str = "Agreement with full depth",
    colors: Mapping[str, str] | None = None,
) -> go.Figure:
    """Per budget (layers of the token's own pass) and per decode step: the fraction of tokens whose path
    ranks full depth's token first, teacher-forced on full depth's output. `colors`: each path's colour (a
    run's, as the page draws it everywhere), else the palette's."""
    fig = make_subplots(
        rows=1, cols=2, subplot_titles=("per budget", "per decode step"), horizontal_spacing=0.12
    )
    colours = {**series_colors(list(agreements)), **(colors or {})}
    for name, a in agreements.items():
        color = colours[name]
        b = a.by_budget
        fig.add_trace(
            go.Bar(
                x=b["num_layers_run"],
                y=b["agreement"],
                marker_color=color,
                name=name,
                legendgroup=name,
                customdata=np.asarray(b["tokens"]),
                hovertemplate="%{x} layers: %{y:.1%} of %{customdata} tokens<extra>"
                + html.escape(name)
                + "</extra>",
            ),
            row=1,
            col=1,
        )
        s = a.by_step
        fig.add_trace(
            go.Scatter(
                x=s["step"],
                y=s["agreement"],
                mode="lines+markers",
                line={"color": color},
                name=name,
                legendgroup=name,
                showlegend=False,
                customdata=np.stack([s["tokens"], s["mean_layers"]], -1),
                hovertemplate="step %{x}: %{y:.1%} of %{customdata[0]} tokens, %{customdata[1]:.1f} layers"
                "<extra>" + html.escape(name) + "</extra>",
            ),
            row=1,
            col=2,
        )
    fig.update_xaxes(title_text="layers run", dtick=1, row=1, col=1)
    fig.update_xaxes(title_text="decode step", row=1, col=2)
    fig.update_yaxes(tickformat=".0%", range=[0, 1.05])
    fig.update_layout(
        title=title,
        barmode="group",
        height=360,
        margin={"l": 50, "r": 10, "t": 70, "b": 40},
    )
    return legend_below(fig)
