"""A legend under a figure stays under its x axis's title in a browser at a phone's width and a desktop's: placed a
fraction of the plot's height below it, it hung over the title where the plot was short or its entries took more
rows (the lens's per-layer and agreement charts at 500 px)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import plotly
import plotly.io as pio
import pytest

from app.dashboard.figures import _wrap_words
from skipcore import Schedule
from skipcore.plots import style
from skipcore.plots.lens import layer_summary_figure
from skipcore.plots.schedule import budgets_figure
from skipcore.plots.series import series_figure
from tests.browser.driving import CHROMIUM, CHROMIUM_ARGS

pytestmark = pytest.mark.slow  # Chromium

NAMES = [f"a-model · linear 10->{n} (skip, warmup 1, span 25) · greedy" for n in (2, 3, 4)]
MANY = [f"#{i} a-model · linear 10->{i % 9 + 2} (skip, warmup 1, span 25) · greedy" for i in range(29)]


def _many_runs():
    """29 runs compared, as the run history draws its picks."""
    runs = pd.DataFrame(
        {"x": [1, 2] * len(MANY), "y": [1.0, 2.0] * len(MANY), "run": [n for n in MANY for _ in (1, 2)]}
    )
    return series_figure(runs, "x", "y", color="run")


def _figures() -> dict:
    runs = pd.DataFrame({"x": [1, 2] * 3, "y": [1.0, 2.0] * 3, "run": [n for n in NAMES for _ in range(2)]})
    layers = pd.DataFrame(
        {"layer": range(12), "kl_to_final": np.linspace(4, 0, 12), "residual_cos": np.linspace(0.3, 1, 12)}
    )
    figures = {
        "series": lambda: series_figure(runs, "x", "y", color="run"),
        "budgets": lambda: budgets_figure(
            {n: Schedule(12, "linear", max_layers=12, min_layers=2) for n in NAMES}, 20
        ),
        "per layer": lambda: layer_summary_figure(dict.fromkeys(NAMES, layers), title=NAMES[0]),
        "many runs": _many_runs,
    }
    dashboard = {f"{name}, on the dashboard": make for name, make in figures.items()}
    built = {name: make() for name, make in figures.items()}
    for name, make in dashboard.items():  # its names and title wrapped to a phone's width
        built[name] = make()
        _wrap_words(built[name])
    return built


def _draw(fig, width: int, page, element: str) -> None:
    """`fig` drawn by Plotly's own script in Chromium at `width` px, once its `element` is there."""
    page.set_viewport_size({"width": width, "height": 1200})
    page.set_content("<html><body style='margin:0'><div id=f></div></body></html>")
    page.add_script_tag(path=Path(plotly.__path__[0]) / "package_data" / "plotly.min.js")
    page.evaluate("f => Plotly.newPlot('f', f.data, f.layout)", json.loads(pio.to_json(fig)))
    page.locator(element).first.wait_for(timeout=15_000)


def _overlaps(fig, width: int, page) -> list[str]:
    """The x axes' titles and tick labels the legend's box overlaps, drawn in Chromium at `width` px."""
    _draw(fig, width, page, "g.legend")
    return page.evaluate(
        """() => {
            const legend = document.querySelector('g.legend').getBoundingClientRect();
            return Array.from(document.querySelectorAll('g.g-xtitle text, g.xtick text'))
                .filter(e => { const b = e.getBoundingClientRect(); return b.bottom > legend.top && b.top < legend.bottom
                               && b.right > legend.left && b.left < legend.right; })
                .map(e => e.textContent);
        }"""
    )


def test_a_legend_under_the_plot_stays_under_the_axis_title():
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.is_file():
        pytest.skip("needs Debian's chromium")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page()
            found = {
                (name, width): hit
                for name, fig in _figures().items()
                for width in (360, 500, 1000)
                if (hit := _overlaps(fig, width, page))
            }
        finally:
            browser.close()
    assert not found, found


def test_a_long_legend_scrolls_in_a_few_lines_instead_of_a_blank_under_it():
    """29 runs compared kept a line for each (a phone's width) on any screen: on a wide one they sat three to a row
    above ~1000 px of blank. The figure grows by ten lines at most, the legend scrolls in them (every entry
    there), and on a wide screen its entries fill the figure to its foot."""
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.is_file():
        pytest.skip("needs Debian's chromium")
    fig = _many_runs()
    assert fig.layout.margin.b <= style.AXIS_BELOW_PX + style.LEGEND_LINE_PX * style.LEGEND_MOST_LINES + 10
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page()
            drawn = {}
            for width in (360, 1400):
                _draw(fig, width, page, "g.legend")
                drawn[width] = page.evaluate(
                    """() => {
                        const figure = document.querySelector('svg.main-svg').getBoundingClientRect();
                        const entries = Array.from(document.querySelectorAll('g.legend g.traces'))
                            .map(e => e.getBoundingClientRect().bottom);
                        return {blank: figure.bottom - Math.max(...entries), entries: entries.length,
                                scrolls: !!document.querySelector('g.legend .scrollbar')};
                    }"""
                )
        finally:
            browser.close()
    assert all(d["entries"] == len(MANY) and d["scrolls"] for d in drawn.values()), drawn
    assert drawn[1400]["blank"] < 3 * style.LEGEND_LINE_PX, drawn


def _title_overlaps(fig, width: int, page) -> list[str]:
    """The y axes' tick labels and the plot's top the title's box runs into, and tick labels that run into each
    other, drawn in Chromium at `width` px."""
    _draw(fig, width, page, "g.g-gtitle")
    return page.evaluate(
        """() => {
            const title = document.querySelector('g.g-gtitle').getBoundingClientRect();
            const below = Array.from(document.querySelectorAll('g.ytick text, g.bglayer rect'));
            const hits = below.filter(e => e.getBoundingClientRect().top < title.bottom)
                .map(e => e.textContent || 'plot');
            // the layer labels one above another, apart (the plot shrank as the title grew: they ran together)
            const ticks = Array.from(document.querySelectorAll('g.ytick text')).map(e => e.getBoundingClientRect())
                .sort((a, b) => a.top - b.top);
            ticks.slice(1).forEach((b, i) => { if (b.top < ticks[i].bottom - 1) hits.push('labels run together'); });
            return hits;
        }"""
    )


def test_a_long_title_and_the_run_under_it_stay_above_the_plot():
    """A 12-layer mask's title wrapped to two lines, with the run's name under it in two more, ran into the plot
    and its layer labels: Plotly placed the title at the top margin's middle."""
    from playwright.sync_api import sync_playwright

    from app.dashboard.figures import titled
    from skipcore.plots.schedule import schedule_mask_figure

    if not CHROMIUM.is_file():
        pytest.skip("needs Debian's chromium")
    schedule = Schedule(12, "linear", max_layers=10, min_layers=2)
    run = "skipdecode-opt-e2e · linear 10->2 (skip, warmup 1, span 25)"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page()
            found = {
                width: hit
                for width in (360, 500, 1000)
                if (hit := _title_overlaps(titled(schedule_mask_figure(schedule, 64), run), width, page))
            }
        finally:
            browser.close()
    assert not found, found
