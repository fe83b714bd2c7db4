"""The figures' colours, in one place. A setting family's colour (full depth, skip, exit, middle, CALM-DEC,
adaptive, speculative, transformers' generate()) is THE palette of `skipcore.labels`, beside the setting's label;
the rest here is what only figures need: a mask's (and a lens's) skipped cells, a KV cache's holes, the Pareto
front. Every figure builder in `skipcore.plots` (and the dashboard's adaptations of them) takes its colours from
here; a test holds them to it.
"""

from __future__ import annotations

from skipcore.labels import COLORS, series_colors

FULL_COLOR = COLORS["full"][0]  # full depth, drawn dashed beside what a setting ran
ACTUAL_COLOR = COLORS["skip"][0]  # what a schedule (SkipDecode's, by default) or a trace ran
RAN, SKIPPED = ACTUAL_COLOR, "#e6e9ef"  # a layer mask's cells
MASK_COLORSCALE = [[0.0, SKIPPED], [0.5, SKIPPED], [0.5, RAN], [1.0, RAN]]
DRAFT_COLOR = COLORS["speculative"][0]  # kept drafts of a speculative trace
KV_HOLE = "#d62728"  # a K/V entry read but never written
INK = "black"  # the Pareto front under every series, guide lines (where the prompt ends)

__all__ = [
    "ACTUAL_COLOR",
    "DRAFT_COLOR",
    "FULL_COLOR",
    "INK",
    "KV_HOLE",
    "MASK_COLORSCALE",
    "RAN",
    "SKIPPED",
    "series_colors",
    "translucent",
]


def translucent(color: str, alpha: float) -> str:
    """'#1f4e9c', 0.2 -> 'rgba(31,78,156,0.2)': a palette colour as a band's fill."""
    r, g, b = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha:g})"
