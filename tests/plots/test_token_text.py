"""A token's text on a figure: its axis label short enough to stay clear of the axis title, its hover exact where
short and by its ends where long, so a trace with a token of megabytes (made by hand) draws a figure a browser can
take, the same on the explorer's heatmap and the lens's."""

from __future__ import annotations

import html

import pytest

from skipcore import SkipEngine, load_model, plots
from skipcore.lens.run import layer_lens
from skipcore.plots.lens import lens_heatmap
from skipcore.plots.trace import HOVER_KEEP, TICK_CHARACTERS
from tests.helpers import REPO

PROMPT = ["MR: name[The Eagle], eatType[pub]\nText:"]
LONG = "<" + "x" * 1_000_000 + "end>"


@pytest.fixture(scope="module")
def engine() -> SkipEngine:
    return SkipEngine(
        *load_model(str(REPO / "data/models/skipdecode-opt-e2e"), device="cpu", dtype="float32")
    )


def test_axis_labels_are_cut_and_hovers_keep_a_long_tokens_ends(engine):
    trace = engine.generate(PROMPT, None, 6).trace.copy()
    trace.loc[trace.index[0], "token"] = LONG
    trace.loc[trace.index[1], "token"] = "alert(1)</script>"
    fig = plots.exit_heatmap(trace, 0)
    ticks = [html.unescape(t) for t in fig.layout.xaxis.ticktext]
    assert all(len(t) <= TICK_CHARACTERS for t in ticks), ticks
    assert ticks[1] == "alert(1)</s…"
    hover = fig.data[0].text[0][0]
    assert "&lt;" + "x" * (HOVER_KEEP - 1) + "...x" in hover and "xend&gt;" in hover
    assert len(fig.to_json()) < 200_000  # every layer's cell held the whole token: 12 MB here


def test_the_lens_hover_keeps_a_long_tokens_ends(engine):
    table = layer_lens(engine, PROMPT, None, 4).table.copy()
    table["token"] = table["token"].astype(object)
    table.loc[table["step"] == 0, "token"] = LONG
    fig = lens_heatmap(table, 0)
    assert "xend&gt;" in str(fig.data[0].text) and len(fig.to_json()) < 200_000
    assert all(len(html.unescape(t)) <= TICK_CHARACTERS for t in fig.layout.xaxis.ticktext)


def test_a_direction_control_in_a_token_shows_as_its_code_point_on_the_axis_and_in_the_hover(engine):
    """An uploaded trace's token of U+202E and 'evil' read 'live' on the heatmap's axis: the override turned the label
    backwards. It shows as '⟨U+202E⟩evil' there (the lens's axis labels are the same function's), and its hover
    says it escaped."""
    trace = engine.generate(PROMPT, None, 4).trace.copy()
    trace.loc[trace.index[0], "token"] = "\u202eevil"
    fig = plots.exit_heatmap(trace, 0)
    assert html.unescape(fig.layout.xaxis.ticktext[0]) == "⟨U+202E⟩evil"
    assert not any("\u202a" <= c <= "\u202e" for t in fig.layout.xaxis.ticktext for c in t)
    assert "\\u202e" in fig.data[0].text[0][0]  # the hover: the token's repr
    assert plots.display_token("\u2067x\u2069") == "⟨U+2067⟩x⟨U+2069⟩"
