"""Figures save from Python, offline: `skipcore.plots.export.save_figure` writes a Plotly figure (kaleido driving a
Chromium) and an Altair chart (vl-convert) as PNG and SVG files that are what they say, at the size drawn."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pandas as pd
import pytest

from skipcore import Schedule, plots
from skipcore.errors import UserError
from skipcore.plots.export import figure_bytes, save_figure

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_MAGIC
    return struct.unpack(">II", data[16:24])  # the IHDR chunk: width, height


def sweep() -> pd.DataFrame:
    return plots.sweep_series(
        pd.DataFrame(
            {
                "policy": ["static"] * 3,
                "mode": ["full", "skip", "skip"],
                "shape": ["full", "linear", "linear"],
                "layer_speedup": [1.0, 2.0, 3.0],
                "bleu": [60.0, 59.0, 55.0],
            }
        )
    )


def test_an_altair_chart_saves_as_png_and_svg(tmp_path):
    chart = plots.tradeoff_chart(sweep(), "layer_speedup", "bleu", "series", width=300, height=200)
    png = save_figure(chart, tmp_path / "tradeoff.png", scale=2)
    width, height = png_size(png.read_bytes())
    assert width >= 2 * 300 and height >= 2 * 200  # the plot area at scale 2, plus axes and legend
    svg = save_figure(chart, tmp_path / "tradeoff.svg").read_text()
    assert svg.lstrip().startswith("<svg") and "layer speedup" in svg  # its axis title, in words
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "tradeoff.png",
        "tradeoff.svg",
    ]  # nothing left beside


@pytest.mark.slow
@pytest.mark.skipif(
    not (shutil.which("chromium") or shutil.which("google-chrome") or Path("/usr/bin/chromium").exists()),
    reason="kaleido needs a Chromium (apt-get install chromium)",
)
def test_a_plotly_figure_saves_as_png_and_svg(tmp_path):
    fig = plots.budget_figure(Schedule(12, "linear", "skip", 12, 4, 1).budgets(24), 12)
    fig.update_layout(width=500, height=300)
    width, height = png_size(save_figure(fig, tmp_path / "budget.png", scale=2).read_bytes())
    assert (width, height) == (1000, 600)
    svg = save_figure(fig, tmp_path / "budget.svg").read_text()
    assert "<svg" in svg[:200] and "layers" in svg


def test_bad_requests_are_one_line(tmp_path):
    chart = plots.tradeoff_chart(sweep(), "layer_speedup", "bleu", "series")
    with pytest.raises(UserError, match=r"\.png or \.svg"):
        save_figure(chart, tmp_path / "chart.pdf")
    with pytest.raises(UserError, match="does not exist"):
        save_figure(chart, tmp_path / "missing" / "chart.png")
    with pytest.raises(UserError, match="Plotly figure or an Altair chart"):
        figure_bytes({"data": []})
    assert not list(tmp_path.iterdir())


def test_charts_offline_draws_altair_without_the_network():
    """Altair's default HTML loads Vega from cdn.jsdelivr.net (requirejs, then script tags): offline, a notebook's
    chart showed only 'Error loading script'. After `charts_offline` the chart carries its script."""
    import re

    import altair as alt

    from skipcore import plots

    chart = alt.Chart(alt.Data(values=[{"a": 1}])).mark_point().encode(x="a:Q")
    network = re.compile(r"<script[^>]*\bsrc=[\"']https?://|requirejs\.config|cdn\.jsdelivr")
    active = alt.renderers.active
    try:
        plots.charts_offline()
        bundle = chart._repr_mimebundle_()
        html = (bundle[0] if isinstance(bundle, tuple) else bundle)["text/html"]
        assert not network.search(html) and "vegaEmbed" in html and '"a": 1' in html
    finally:
        alt.renderers.enable(active)
