"""What a browser page adds to `skipcore.plots`' figures: a colour key on masks, the tokens a heatmap shows (chosen
with a slider the keyboard moves), one latency band instead of a hundred lines, charts that fit their column (a long
title or legend entry wrapped to a phone's width), PNG/SVG downloads named by the run they show, and each run's
style for the session (`run_styles`: a run drawn on History, Compare, Generate or the Layer lens looks the same on
all of them).

The figures themselves stay in `skipcore.plots` (a notebook draws the same); this only adapts them to a page.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable

import altair as alt
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from app.dashboard.markdown import chart_text
from skipcore import plots
from skipcore.labels import file_stem
from skipcore.plots.style import RunStyle, legend_below, translucent
from skipcore.plots.tradeoffs import series_scale

TOKEN_WINDOW = 40  # token columns shown at once; more are reached with the "Tokens shown" slider
TOKENS_SHOWN = "Tokens shown (steps)"  # that slider's label
MAX_LATENCY_LINES = 8  # more batches than this are drawn as one median line with its 10-90% band
FORMAT_KEY = "figure_format"
FORMATS = ("png", "svg")
STYLES = "run_styles"  # in the session: run name -> its RunStyle, fixed the first time a page draws the run
LINE_CHARACTERS = 40  # of a title or legend entry per line: a 360 px phone's chart (Plotly cuts, not wraps)
LINE_HEIGHT = 20  # pixels a wrapped title's each further line takes from the top margin
SMALL_LINE_CHARACTERS = 52  # of the smaller line under a title that names its run
MARKUP = re.compile(r"</?(br|b|i|em|sup|sub|span|a)\b", re.IGNORECASE)  # Plotly's own tags


# below 1280 px the wide layout's side margins (5rem each) shrink, so a 1024 px screen with the sidebar open gives
# tables and charts 674 px instead of 562 (`data-testid` is Streamlit's stable name for the page's main block),
# and a metric's value is written smaller: in a row of five at 1024 px a KV cache's "65.9 KiB" was cut to "65.9 …"
# and columns in a container keyed `WRAP_WIDE...` (charts side by side) or `WRAP_NARROW...` (a row of pickers) go
# to the next line where they would be narrower than a chart's legend or a picker's label can be read: at 800 px
# with the sidebar open, two trade-off charts cut their titles and legends, four pickers their labels (Streamlit
# itself stacks columns only on a screen under 640 px, whatever the sidebar leaves)
WRAP_WIDE, WRAP_NARROW = "wrap_wide", "wrap_narrow"
PAGE_STYLE = (
    "<style>@media (max-width: 1280px) { [data-testid='stMainBlockContainer'] "
    "{ padding-left: 1.5rem; padding-right: 1.5rem; } [data-testid='stMetricValue'] { font-size: 1.6rem; } }"
    "[data-testid='stCaptionContainer'] { color: inherit; opacity: 0.82; }"  # the text's own ink, a little faded
    f"[class*='st-key-{WRAP_WIDE}'] [data-testid='stHorizontalBlock'], "
    f"[class*='st-key-{WRAP_NARROW}'] [data-testid='stHorizontalBlock'] {{ flex-wrap: wrap; }}"
    f"[class*='st-key-{WRAP_WIDE}'] [data-testid='stColumn'] {{ min-width: min(100%, 20rem); }}"
    f"[class*='st-key-{WRAP_NARROW}'] [data-testid='stColumn'] {{ min-width: min(100%, 11rem); }}"
    "</style>"
)


def page_style() -> None:
    """Narrower side margins on a laptop's screen, and captions dark enough to read (they carry a run's model,
    settings and kept number: Streamlit's grey is 3.9:1 on white, under WCAG's 4.5:1; the body text's ink a little
    faded is about 7:1, in a light or a dark theme alike). A style only: it takes no room on the page."""
    st.html(PAGE_STYLE)


def format_picker() -> None:
    """Sidebar choice of the format the figures' camera button saves (Plotly draws it in the browser)."""
    st.sidebar.radio("Figure downloads", FORMATS, horizontal=True, key=FORMAT_KEY, format_func=str.upper)


def run_styles(runs: dict[str, str]) -> dict[str, RunStyle]:
    """Each run's style (run name -> its family, `skipcore.labels.run_family`) for the whole session: its family's
    colour and, the first time a page draws it, a dash no other run of its family holds (`plots.style.run_styles`)."""
    from skipcore.plots.style import run_styles as styles_of

    known = st.session_state.setdefault(STYLES, {})
    styles = styles_of(runs, known)
    known.update(styles)
    return styles


def design(schedule) -> tuple[str, str]:
    """The designed schedule as the designer's figures say it: its name (the model's and the schedule's words,
    `skipcore.labels.design_label`) and its colour (its mode's family, as a run of it is drawn)."""
    from app.dashboard.models import current_choice
    from skipcore.labels import design_label, run_family
    from skipcore.plots.style import family_color

    name = design_label(current_choice().shown(), schedule)
    return name, family_color(run_family("static", schedule.mode, schedule.to_dict()))


def show(fig: go.Figure, key: str, name: str | None = None, run: str | None = None) -> None:
    """A Plotly figure at its column's width; the camera button saves it as PNG or SVG (sidebar). `run`: the name
    of the run (or design) it shows (`skipcore.labels.run_label`), said under its title and in its file's name, so
    a saved figure says what made it."""
    fmt = st.session_state.get(FORMAT_KEY, "png")
    filename = f"{name or key}_{file_stem(run)}" if run else name or key
    titled(fig, run)
    config = {"toImageButtonOptions": {"format": fmt, "filename": filename, "scale": 2}, "displaylogo": False}
    st.plotly_chart(fig, key=key, config=config, width="stretch")


def titled(fig: go.Figure, run: str | None = None) -> go.Figure:
    """`fig` as a page shows it: its words wrapped to a phone's width (`_wrap_words`), the run it shows named under
    its title in smaller lines (unless the title names it), and the title hung from the figure's top, so its lines
    fill the top margin downward: placed by Plotly at the margin's middle, a title of four lines ran into the plot
    (a 12-layer mask's). The figure grows by what its top margin grew, so the plot keeps its height."""
    said = run if run and run not in (fig.layout.title.text or "") else None  # a title that names it already
    top = fig.layout.margin.t or 50
    _wrap_words(fig)
    if said:  # under the title, in smaller lines, as many as it takes; a name from a file shows as written
        lines = wrapped(chart_text(said), SMALL_LINE_CHARACTERS).split("<br>")
        under = "<br>".join(f"<sup>{line}</sup>" for line in lines)
        title = fig.layout.title.text
        fig.update_layout(
            title_text=f"{title}<br>{under}" if title else under,
            margin_t=(fig.layout.margin.t or 50) + 22 * len(lines),  # room for the name under the title
        )
    if fig.layout.title.text:
        fig.update_layout(title={"yref": "container", "y": 1, "yanchor": "top", "pad": {"t": 12}})
    if fig.layout.height is not None:  # the plot keeps its height: a 12-layer mask's labels ran together
        fig.update_layout(height=fig.layout.height + (fig.layout.margin.t or 50) - top)
    return fig


def wrapped(text: str, width: int = LINE_CHARACTERS) -> str:
    """`text` in lines of at most `width` characters (broken at spaces, Plotly's `<br>`); one with markup of its own
    (a tag, not a "<=" of a policy's rule) is left as it is."""
    if len(text) <= width or MARKUP.search(text):
        return text
    return "<br>".join(textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False))


def _wrap_words(fig: go.Figure) -> None:
    """A figure's title and legend entries wrapped (`wrapped`), the top margin grown by the title's further lines
    and a legend at the figure's foot given room for its entries' (`legend_below`):
    on a phone Plotly cut a run's name where the chart ended, and two runs differing only at the end read alike."""
    for trace in fig.data:
        if trace.name:
            trace.name = wrapped(trace.name)
    if fig.layout.legend.yref == "container":  # a legend at the foot: its room for the entries' lines now
        legend_below(fig)
    title = fig.layout.title.text
    if title and wrapped(title) != title:
        fig.update_layout(title_text=wrapped(title))
        more = wrapped(title).count("<br>")
        fig.update_layout(margin_t=(fig.layout.margin.t or 50) + LINE_HEIGHT * more)


def with_mask_key(fig: go.Figure) -> go.Figure:
    """A colour key on a layer-mask heatmap: dark = the layer ran, light = skipped."""
    fig.update_traces(
        showscale=True,
        colorbar={"tickvals": [0.25, 0.75], "ticktext": ["skipped", "ran"], "thickness": 12, "len": 0.5},
        selector={"type": "heatmap"},
    )
    return fig


def token_range(steps: Iterable[int], key: str, window: int = TOKEN_WINDOW) -> tuple[int, int] | None:
    """Past `window` token columns the labels would overlap: a slider over the steps (widget key `key`) choosing
    the first and the last token drawn, the first `window` to start. Its two thumbs move with the arrow keys (Tab
    to one), where the Plotly range slider it replaced took a mouse. None when every token fits."""
    steps = [int(s) for s in steps]
    first, last = min(steps, default=0), max(steps, default=0)
    if last - first + 1 <= window:
        return None
    low, high = st.slider(
        TOKENS_SHOWN,
        first,
        last,
        (first, first + window - 1),
        key=key,
        help=f"the first and the last generated token drawn; more than about {window} at once crowd their labels",
    )
    return int(low), int(high)


def with_token_range(fig: go.Figure, shown: tuple[int, int] | None) -> go.Figure:
    """The figure's token axis over the steps `shown` (`token_range`; None: every token)."""
    if shown is not None:
        fig.update_xaxes(range=[shown[0] - 0.5, shown[1] + 0.5])
    return fig


def with_visible_points(fig: go.Figure) -> go.Figure:
    """Lines of one or two points draw nothing: give every line markers (a 2-token design has one step)."""
    fig.update_traces(mode="lines+markers", marker={"size": 5}, selector={"type": "scatter"})
    return fig


def latency_figure(
    trace: pd.DataFrame, title: str = "Step latency", color: str = plots.ACTUAL_COLOR
) -> go.Figure:
    """`plots.step_latency_figure`, or for many batches their median step time with the 10-90% band, in the run's
    `color`."""
    batches = trace["batch"].nunique() if "batch" in trace else 1
    if batches <= MAX_LATENCY_LINES:
        return plots.step_latency_figure(trace, title=title, color=color)
    per_step = plots.batch_steps(trace)  # a speculative trace's rounds
    q = per_step.groupby("step")["step_ms"].quantile([0.1, 0.5, 0.9]).unstack()
    q = q[q.index >= 1]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(x=q.index, y=q[0.9], mode="lines", line={"width": 0}, showlegend=False, hoverinfo="skip")
    )
    fig.add_trace(
        go.Scatter(
            x=q.index,
            y=q[0.1],
            mode="lines",
            line={"width": 0},
            fill="tonexty",
            fillcolor=translucent(color, 0.2),
            name="10-90% of batches",
            hoverinfo="skip",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=q.index,
            y=q[0.5],
            mode="lines+markers",
            marker={"size": 4},
            line={"color": color},
            name="median",
            hovertemplate="step %{x}: %{y:.2f} ms<extra>median</extra>",
        )
    )
    fig.update_layout(
        title=f"{title}: median of {batches} batches, decode steps",
        xaxis_title="decode step",
        yaxis_title="ms",
        yaxis_rangemode="tozero",
        height=300,
        margin={"l": 50, "r": 20, "t": 50, "b": 40},
    )
    return legend_below(fig)


EDGE_ROOM = 0.05  # the share of an axis left past its largest value, so a point there is drawn whole


def y_domain_from_zero(values: pd.Series) -> tuple[float, float]:
    """A y range shared by charts side by side: from 0 (or below, for negative values) to `EDGE_ROOM` of the whole
    range past the largest value, so a point at the top value is drawn whole, even where every value is close."""
    v = pd.to_numeric(values, errors="coerce").dropna()
    low = min(0.0, float(v.min())) if len(v) else 0.0
    high = max(0.0, float(v.max())) if len(v) else 1.0
    pad = EDGE_ROOM * ((high - low) or 1.0)
    return (low - pad if low < 0 else 0.0), high + pad


def fit_chart(
    chart: alt.LayerChart,
    df: pd.DataFrame,
    color: str | None,
    apart: list[str],
    y_domain: tuple[float, float] | None = None,
) -> alt.LayerChart:  # configured: a top-level chart
    """A `plots.tradeoff_chart` made to fit its column: container width, the palette's colours for the page's
    whole table `df` (a chart drops the rows it cannot place, and the chart beside it must colour every series
    alike; a model and its baseline share a hue, the baseline lighter), no line joining points that differ in
    `apart` (batch sizes), and a y range shared with the chart beside it (from 0)."""
    scale = series_scale(df, color) if color and color in df else None
    for layer in chart.layer:
        enc = layer.encoding
        if y_domain is not None and isinstance(enc.y, alt.Y):
            enc.y.scale = alt.Scale(domain=list(y_domain), zero=True)
        if scale is not None and isinstance(enc.color, alt.Color):
            enc.color.scale = scale
        mark = layer.mark if isinstance(layer.mark, str) else getattr(layer.mark, "type", "")
        if mark == "line" and isinstance(enc.color, alt.Color) and apart:
            layer.encoding.detail = [alt.Detail(f"{c}:N") for c in apart]
    # the legend under the plot, in two columns (on the right it is cut off past ~8 series); the width fits
    # the column and the height grows with the legend
    return chart.properties(
        width="container", autosize={"type": "fit-x", "contains": "padding"}
    ).configure_legend(orient="bottom", columns=2, symbolLimit=0, labelLimit=0)
