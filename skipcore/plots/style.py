"""The figures' colours, in one place. A setting family's colour (full depth, skip, exit, middle, CALM-DEC,
adaptive, speculative, transformers' generate()) is THE palette of `skipcore.labels`, beside the setting's label;
the rest here is what only figures need: a mask's (and a lens's) cells, a KV cache's holes, the Pareto front, and
how runs of one family are told apart (`run_styles`: each run in its family's colour, with a dash of its own).
Every figure builder in `skipcore.plots` (and the dashboard's adaptations of them) takes its colours from here; a
test holds them to it.

Blue is SkipDecode's skip mode and nothing else: a layer that ran is dark slate in every mask, whatever the mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from skipcore.errors import visible_controls
from skipcore.labels import COLORS, series_colors

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

FULL_COLOR = COLORS["full"][0]  # full depth, drawn dashed beside what a setting ran
ACTUAL_COLOR = COLORS["skip"][0]  # what a skip schedule ran (another run is drawn in its family's colour)
RAN, SKIPPED = "#3b4252", "#e6e9ef"  # a layer mask's cells: ran (dark slate, no family's hue), skipped
MASK_COLORSCALE = [[0.0, SKIPPED], [0.5, SKIPPED], [0.5, RAN], [1.0, RAN]]
# a lens heatmap's skipped cells: an x on each (their fill alone reads as a gap), on a ground apart from their grey
SKIP_MARK, GROUND = "#7b8394", "white"
DRAFT_COLOR = COLORS["speculative"][0]  # kept drafts of a speculative trace
KV_HOLE = "#d62728"  # a K/V entry read but never written
INK = "black"  # the Pareto front under every series, guide lines (where the prompt ends), outliers' marks
# runs of one family, told apart by their dash (plotly's names), in the order a session first shows them
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
# a run's marker beside its dash: past the dashes, the runs of a family go on apart by their markers
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "cross", "star", "triangle-down")

__all__ = [
    "ACTUAL_COLOR",
    "DASHES",
    "DRAFT_COLOR",
    "FULL_COLOR",
    "INK",
    "KV_HOLE",
    "MASK_COLORSCALE",
    "RAN",
    "SKIPPED",
    "SKIP_MARK",
    "GROUND",
    "RunStyle",
    "family_color",
    "legend_below",
    "run_styles",
    "series_colors",
    "translucent",
]


LEGEND_LINE_PX = 19  # a line of a legend entry, in Plotly's default font
AXIS_BELOW_PX = 50  # an x axis's tick labels and title, under the plot
# the most legend lines a figure grows by; a longer legend scrolls in that height (29 runs compared on a wide screen
# sat three to a row under ~1000 px of blank kept for one a line)
LEGEND_MOST_LINES = 10


def legend_below(fig: go.Figure) -> go.Figure:
    """`fig` with its legend at its foot, under the x axis's title on any screen: placed from the figure's bottom
    (`yref` container), with a bottom margin for the axis and the legend's entries one under another (a phone's
    width; on a wide screen they share a row and leave space) up to `LEGEND_MOST_LINES`, past which the legend
    scrolls in that height, the figure taller by what the margin grew. A legend placed a fraction of the plot's
    height under it hung over the axis's title where the plot was short, or where its entries took more rows.
    Called again after its entries change (the dashboard wraps long names)."""
    lines = sum(
        1 + str(t.name).count("<br>")
        for t in fig.data
        if t.name and t.showlegend is not False and t.type != "heatmap"
    )
    shown = min(lines, LEGEND_MOST_LINES)
    fig.update_layout(
        legend={
            "orientation": "h",
            "yref": "container",
            "y": 0,
            "yanchor": "bottom",
            "x": 0,
            "xanchor": "left",
            "maxheight": LEGEND_LINE_PX * shown + 10 if lines > shown else None,
        }
    )
    margin = fig.layout.margin.b if fig.layout.margin.b is not None else 80
    needed = AXIS_BELOW_PX + LEGEND_LINE_PX * shown + 10
    if needed > margin:
        fig.update_layout(margin_b=needed, height=(fig.layout.height or 450) + needed - margin)
    return fig


def translucent(color: str, alpha: float) -> str:
    """'#1f4e9c', 0.2 -> 'rgba(31,78,156,0.2)': a palette colour as a band's fill."""
    r, g, b = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha:g})"


def family_color(family: str) -> str:
    """A family's colour (`skipcore.labels.run_family`): 'skip' -> the skip hue; an unknown family is full depth's
    grey, never a hue that means something else."""
    return COLORS.get(family, COLORS["full"])[0]


@dataclass(frozen=True)
class RunStyle:
    """How a run is drawn in every figure: its family's colour, and a dash and a marker that tell it from the
    other runs of its family."""

    color: str
    dash: str = "solid"
    symbol: str = "circle"

    def line(self, **more: object) -> dict:
        """A plotly `line` dict: `go.Scatter(line=style.line(shape="hv"))`."""
        return {"color": self.color, "dash": self.dash, **more}


def run_styles(runs: Mapping[str, str], known: Mapping[str, RunStyle] | None = None) -> dict[str, RunStyle]:
    """Each run (its name -> its family, `skipcore.labels.run_family`) in its family's colour, with the first dash
    and marker no other run of that family holds (every dash with a circle first, then with a square, ...). A
    run in `known` (the runs a session has drawn so far) keeps its style, so a run looks the same in every figure
    and on every page, whatever order the runs come in: colour says what kind of run it is (skip, exit, CALM-DEC,
    ..., full depth), never its place in a list."""
    known = dict(known or {})
    out = {}
    for name, family in runs.items():
        style = known.get(name)
        color = family_color(family)
        if style is None or style.color != color:
            taken = {(s.dash, s.symbol) for s in known.values() if s.color == color}
            pairs = [(dash, symbol) for symbol in SYMBOLS for dash in DASHES]  # every dash with circles first
            free = [pair for pair in pairs if pair not in taken]
            style = RunStyle(color, *(free[0] if free else pairs[len(taken) % len(pairs)]))
            known[name] = style
        out[name] = style
    return out


def texts_as_typed(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with every text a chart may show (a legend's series, a tooltip) with its direction controls as their
    code points (`errors.visible_controls`): a file's value U+202E + 'evil' read 'live' in a Vega legend."""
    out = df.copy()
    for column in out.select_dtypes(include=["object", "string"]).columns:
        out[column] = out[column].map(lambda v: visible_controls(v) if isinstance(v, str) else v)
    return out
