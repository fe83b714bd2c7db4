"""Figures of a trace: which layers produced each generated token (the exit heatmap, token text on the axis and
the token, its layers, cost and log-probability on hover), and the helpers that pick a row and show a token.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from skipcore.errors import UserError, quoted, visible_controls
from skipcore.measure.summary import refuse_repeated_tokens
from skipcore.plots.schedule import mask_heatmap
from skipcore.plots.style import DRAFT_COLOR

if TYPE_CHECKING:
    from pandas.core.groupby import DataFrameGroupBy


# an axis label's most characters: a longer token's label, at -60 degrees, ran into the axis title (its whole text
# is on hover)
TICK_CHARACTERS = 12
# the characters a token's hover keeps at each end: a token of megabytes (a hand-made trace) made a figure past
# the browser's message limit, its text in every layer's cell
HOVER_KEEP = 100


def display_token(token: str) -> str:
    """A token as a short axis label: whitespace-only tokens made visible, a long one cut (`TICK_CHARACTERS`), a
    direction control shown as its code point (`errors.visible_controls`), and `<`, `>`, `&` escaped because plotly
    reads labels as HTML (`</s>` would vanish)."""
    text = token.strip() or token.replace("\n", "↵").replace("\t", "⇥").replace(" ", "␣") or "∅"
    if len(text) > TICK_CHARACTERS:
        text = text[: TICK_CHARACTERS - 1] + "…"
    return html.escape(visible_controls(text), quote=False)


def hover_token(token: str) -> str:
    """A token as a hover shows it: exactly (its `repr`: whitespace and escapes visible), a long one by its ends
    (`errors.quoted`), escaped for plotly's HTML."""
    return html.escape(quoted(str(token), keep=HOVER_KEEP), quote=False)


def _in_step_order(rows: pd.DataFrame, include_finished: bool) -> pd.DataFrame:
    """Rows in step order (rows of one step kept in the trace's order), those after EOS dropped unless asked for."""
    rows = rows.sort_values("step", kind="stable")
    return rows if include_finished else rows[~rows["finished"].astype(bool)]


def one_run(trace: pd.DataFrame, what: str) -> None:
    """Refuse a trace of several runs (`run_id`: traces concatenated) where `what` draws one run: each numbers its
    samples and steps from 0, so their tokens would interleave as one sample's."""
    if "run_id" in trace and (runs := trace["run_id"].nunique()) > 1:
        raise UserError(
            f"the trace holds {runs} runs: {what} draws one run's rows (trace[trace['run_id'] == ...])",
            field="trace",
        )


def sample_rows(trace: pd.DataFrame, sample: int, include_finished: bool = False) -> pd.DataFrame:
    """One batch row's tokens in step order; tokens after its EOS are dropped unless asked for."""
    one_run(trace, "a sample's tokens")
    rows = trace["sample"] == sample
    if not rows.any():
        raise UserError(
            f"the trace has no sample {sample} (its samples: {_spans(trace['sample'])})", field="sample"
        )
    refuse_repeated_tokens(trace[rows])
    return _in_step_order(trace[rows], include_finished)


def _spans(samples: pd.Series) -> str:
    """A trace's sample numbers in words: '0-7', or the first few where they have gaps."""
    values = sorted(samples.unique().tolist())
    if values and values[-1] - values[0] + 1 == len(values):
        return f"{values[0]}-{values[-1]}" if len(values) > 1 else str(values[0])
    return ", ".join(map(str, values[:8])) + (", ..." if len(values) > 8 else "")


def rows_by_sample(trace: pd.DataFrame, include_finished: bool = False) -> DataFrameGroupBy:
    """Every batch row's tokens, grouped by sample (in sample order), each group what `sample_rows` gives for it:
    one sort of the trace for all of them, where a `sample_rows` call a sample filters the whole trace each time
    (samples x rows: minutes for a million-row trace of 20,000 samples)."""
    one_run(trace, "each sample's tokens")
    refuse_repeated_tokens(trace)
    return _in_step_order(trace, include_finished).groupby("sample", sort=True)


def _token_hover(r, num_layers: int) -> str:
    """A token's hover: its text, the layers that made it, what it cost against full depth (a policy's own work
    included: CALM's heads and propagation, a speculative round's drafts and verified columns) and log p."""
    head = f"step {r.step} · token {hover_token(r.token)}"
    if not pd.isna(
        getattr(r, "drafted", float("nan"))
    ):  # speculative: every kept token verified at full depth
        if r.step == 0:
            origin = "the prefill (full depth)"
        elif bool(r.drafted):
            origin = f"kept draft, proposed by a {int(r.draft_layers)}-layer draft pass"
        else:
            origin = "the full model's own token (a correction, or the bonus after every draft agreed)"
        layers = f"round {int(r.round)}: {origin}<br>verified at all {num_layers} layers, "
        layers += f"its share of the round {r.layers_spent:.1f} layer passes"
    else:
        layers = f"{r.num_layers_run} layers"
    spent = getattr(r, "flops_total", float("nan"))
    spent = (
        r.flops if pd.isna(spent) else spent
    )  # a run without its own costs, concatenated with one with them
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
    speculative = "drafted" in rows and rows["drafted"].notna().any()
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
                    f"kept draft of round {int(r.round)} ({int(r.draft_layers)}-layer pass)"
                    for r in drafts.itertuples()
                ],
                hovertemplate="%{text}<extra></extra>",
            )
        )
        # room above the top layer for the draft markers, ticked at layers only (0..L-1, no tick at L)
        fig.update_yaxes(range=[-0.5, L + 0.1], tickmode="array", tickvals=layer_ticks(L))
    return fig


def layer_ticks(num_layers: int) -> list[int]:
    """A layer axis's ticks: every layer up to 32, else every 5th (10th, ...) one; never the count itself."""
    step = 1 if num_layers <= 32 else 5 * math.ceil(num_layers / 40)
    return list(range(0, num_layers, step))


def stacked_exit_heatmap(traces: Mapping[str, pd.DataFrame], sample: int, title: str = "") -> go.Figure:
    """One exit heatmap per trace (one per policy), stacked full width with their token axes linked: zooming or
    panning one moves them all. Each panel keeps its own tokens' text, since policies generate different tokens."""
    panels = {name: exit_heatmap(trace, sample, title=name) for name, trace in traces.items()}
    if not panels:
        return go.Figure(layout={"title": title})
    heights = [int(p.layout.height or 300) for p in panels.values()]  # each with room for its rotated labels
    total = sum(heights)
    fig = make_subplots(
        rows=len(panels),
        cols=1,
        row_heights=heights,
        vertical_spacing=min(110 / total, 0.9 / max(1, len(panels) - 1)) if len(panels) > 1 else 0.0,
        subplot_titles=list(panels),
    )
    for i, panel in enumerate(panels.values(), start=1):
        for trace in panel.data:
            fig.add_trace(trace, row=i, col=1)
        xaxis, yaxis = panel.layout.xaxis, panel.layout.yaxis
        fig.update_xaxes(
            tickmode=xaxis.tickmode,
            tickvals=xaxis.tickvals,
            ticktext=xaxis.ticktext,
            tickangle=xaxis.tickangle,
            matches="x" if i > 1 else None,
            row=i,
            col=1,
        )
        fig.update_yaxes(
            title_text="layer",
            dtick=yaxis.dtick,
            range=yaxis.range,
            tickmode=yaxis.tickmode,
            tickvals=yaxis.tickvals,
            row=i,
            col=1,
        )
    keys = [
        p.layout.xaxis.title.text for p in panels.values()
    ]  # a speculative panel's names its draft marker
    fig.update_xaxes(title_text=max(keys, key=len), row=len(panels), col=1)
    fig.update_layout(
        title=title, height=total + 40, margin={"l": 50, "r": 20, "t": 60 if title else 40, "b": 95}
    )
    return fig
