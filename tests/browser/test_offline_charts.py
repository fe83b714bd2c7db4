"""An Altair chart shown in a notebook draws in a browser with no network after `plots.charts_offline()`: Altair's
default HTML loaded Vega from cdn.jsdelivr.net, and offline the browser showed only 'Error loading script'."""

from __future__ import annotations

import contextlib

import altair as alt
import pytest

from tests.browser.driving import CHROMIUM, CHROMIUM_ARGS

pytestmark = pytest.mark.slow  # Chromium


def _drawn(html: str) -> tuple[int, str]:
    """(the chart's drawn marks, the page's text) of `html` in Chromium with every request to the network refused."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page()
            page.route("**/*", lambda r: r.abort() if r.request.url.startswith("http") else r.continue_())
            page.set_content(f"<html><body>{html}</body></html>")
            with contextlib.suppress(PlaywrightTimeout):  # nothing drawn: counted as such below
                page.locator("canvas, svg.marks").first.wait_for(timeout=15_000)
            return page.locator("canvas, svg.marks").count(), page.inner_text("body")
        finally:
            browser.close()


def test_a_notebooks_altair_chart_draws_offline():
    from skipcore import plots

    if not CHROMIUM.is_file():
        pytest.skip("needs Debian's chromium")
    chart = (
        alt.Chart(alt.Data(values=[{"a": 1, "b": 2}, {"a": 2, "b": 3}])).mark_point().encode(x="a:Q", y="b:Q")
    )
    active = alt.renderers.active
    try:
        plots.charts_offline()
        bundle = chart._repr_mimebundle_()
        marks, text = _drawn((bundle[0] if isinstance(bundle, tuple) else bundle)["text/html"])
    finally:
        alt.renderers.enable(active)
    assert marks == 1 and "Error loading script" not in text and "b" in text.split()
