"""What the pages show of speculative SkipDecode (`skipcore.SpeculativePolicy`): its trace read as rounds.

Every token of a speculative trace ran all L layers (the full-depth verification pass made it), so its layer mask
alone says nothing; what differs is whether the token was a kept draft (`drafted`, proposed by a `draft_layers`
pass), the round that produced it, and its share of that round's cost (`layers_spent`, `flops_total`).
"""

from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go

from skipcore import plots

DRAFT_COLOR = "#f58518"

NOTE = (
    "Speculative SkipDecode drafts tokens with the schedule's skip path and verifies them in one full-depth "
    "pass, so under greedy decoding its output is full depth's, token for token. Its layer and FLOPs "
    "speedups are below 1x by construction: every kept token also runs all layers, and the drafts cost extra. "
    "Its gain is in sequential passes: tokens per full-depth pass, and the per-batch layer speedup, which "
    "counts sequential layer passes. Wall-clock time falls only where a pass over several tokens costs about "
    "as much as one (a GPU at small batch)."
)


def is_speculative(trace: pd.DataFrame) -> bool:
    """A trace whose tokens came from draft-and-verify rounds."""
    return {"drafted", "round"} <= set(trace.columns)


def _hover(r, num_layers: int) -> str:
    token = html.escape(repr(r.token), quote=False)
    if r.step == 0:
        origin = "the prefill (full depth)"
    elif bool(r.drafted):
        origin = f"kept draft, proposed by a {int(r.draft_layers)}-layer draft pass"
    else:
        origin = "the full model's own token (its correction, or the bonus after every draft agreed)"
    spent = getattr(r, "flops_total", r.flops)
    ratio = spent / r.flops_full if r.flops_full else 1.0
    return (
        f"step {r.step} · token {token} · round {r.round}<br>{origin}<br>verified at all {num_layers} layers; "
        f"its share of the round: {getattr(r, 'layers_spent', num_layers):.1f} layer passes, {spent:.3g} FLOPs "
        f"({ratio:.2f}x full depth's)<br>log p = {r.logprob:.3f}"
    )


def heatmap(trace: pd.DataFrame, sample: int, title: str | None = None) -> go.Figure:
    """`plots.exit_heatmap` for a speculative trace: every cell ran (the verification), a marker above each
    kept draft, and the round, origin and cost share of each token on hover."""
    rows = plots.sample_rows(trace, sample)
    L = len(str(rows["layer_mask"].iloc[0])) if len(rows) else 0
    fig = plots.mask_heatmap(
        list(rows["layer_mask"]),
        x=list(rows["step"]),
        tick_text=[plots.display_token(t) for t in rows["token"]],
        hover=[_hover(r, L) for r in rows.itertuples()],
        title=title if title is not None else f"Layers per token, sample {sample}",
        x_title="generated token (step); ▼ kept draft",
    )
    if not len(rows):
        return fig
    drafts = rows[rows["drafted"].astype(bool)]
    fig.add_trace(
        go.Scatter(
            x=list(drafts["step"]),
            y=[L - 0.5 + 0.45] * len(drafts),
            mode="markers",
            marker={"symbol": "triangle-down", "size": 8, "color": DRAFT_COLOR},
            name="kept draft",
            showlegend=False,
            text=[
                f"kept draft of round {r.round} ({int(r.draft_layers)}-layer draft pass)"
                for r in drafts.itertuples()
            ],
            hovertemplate="%{text}<extra></extra>",
        )
    )
    fig.update_yaxes(tickvals=list(range(L)) if L <= 32 else None, range=[-0.5, L + 0.1])
    return fig


def rounds(trace: pd.DataFrame) -> pd.DataFrame:
    """One row per (batch, round) shaped like a trace's steps, for the latency figure: a round's time is shared
    by every token it kept, and its layers are its sequential layer passes (the drafts' and the verification's)."""
    keys = ["batch", "round"] if "batch" in trace else ["round"]
    per_round = trace.drop_duplicates(keys).drop(columns="step").rename(columns={"round": "step"})
    if "batch_layers" in per_round:
        per_round["num_layers_run"] = per_round["batch_layers"]
    return per_round


def metrics(summary: dict) -> dict[str, tuple[str, str]]:
    """label -> (value, help) for a speculative run's own numbers."""
    tpp, acc = summary.get("tokens_per_full_pass"), summary.get("draft_acceptance")
    return {
        "Tokens per full-depth pass": (
            "n/a" if tpp is None or tpp != tpp else f"{tpp:.2f}",
            "tokens kept per verification pass of a running row (1 to drafts + 1)",
        ),
        "Drafts accepted": (
            "n/a" if acc is None or acc != acc else f"{acc:.0%}",
            "drafted tokens the full model agreed with",
        ),
        "Layer speedup per batch (sequential passes)": (
            f"{summary['batch_layer_speedup']:.2f}x",
            "L x token steps / the layers of the sequential passes each round ran (drafts and verification)",
        ),
    }
