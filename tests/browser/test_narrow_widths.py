"""At a tablet's and a phone's width in Chromium: a table of texts (Compare's outputs, eight columns) keeps each column
readable and scrolls sideways in its own box, where every word was broken letter by letter in a ~35 px column; a
trace's metrics wrap and its download buttons fit, where labels and values were cut short (the `server` and
`browser` of conftest.py)."""

from __future__ import annotations

import pytest

from app.dashboard.markdown import texts_table
from tests.browser.driving import CHROMIUM, CHROMIUM_ARGS, wait_idle
from tests.helpers import REPO

pytestmark = pytest.mark.slow  # Chromium

OUTPUT = "The Eagle is a coffee shop serving French food near the riverside."
POLICIES = ["full depth", "skip", "exit", "middle", "calm", "adaptive", "speculative"]


def _cells(width: int) -> dict:
    """The outputs table drawn at `width` px: its narrowest cell, its box's and its table's widths, and whether the
    page itself is wider than the screen."""
    from playwright.sync_api import sync_playwright

    table = {"prompt": ["MR: name[The Eagle], eatType[coffee shop]"], **{p: [OUTPUT] for p in POLICIES}}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": width, "height": 800})
            page.set_content(
                f"<html><body style='margin:0;padding:0 16px'>{texts_table(table)}</body></html>"
            )
            return page.evaluate(
                """() => { const box = document.querySelector('table.skipcore-texts').parentElement;
                    const cells = [...document.querySelectorAll('.skipcore-texts th, .skipcore-texts td')];
                    return {narrowest: Math.min(...cells.map(c => c.getBoundingClientRect().width)),
                            box: box.clientWidth, table: box.scrollWidth,
                            page_wider: document.documentElement.scrollWidth > window.innerWidth}; }"""
            )
        finally:
            browser.close()


@pytest.mark.parametrize("width", [360, 500])
def test_a_table_of_eight_texts_scrolls_in_its_box_at_a_phones_width(width):
    if not CHROMIUM.is_file():
        pytest.skip("needs Debian's chromium")
    drawn = _cells(width)
    assert drawn["narrowest"] >= 100, drawn  # about 14 characters a line, no word broken letter by letter
    assert drawn["table"] > drawn["box"], drawn  # the rest reached by scrolling the table's own box
    assert not drawn["page_wider"], drawn  # not the page: its other content stays where it is


CUT = """els => els.filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.textContent)"""
SHOWN_WHOLE = (
    '[data-testid="stMetric"] *, [data-testid="stDownloadButton"] button, [data-testid="stDownloadButton"] p'
)


@pytest.mark.parametrize("width", [768, 360])
def test_a_traces_metrics_cut_no_word_at_a_tablets_or_a_phones_width(browser, server, width):
    """The trace explorer's metrics were five fixed columns ('Tokens / s (one r…', '… with the pro…' at 768 px);
    no download button's words are cut either."""
    trace = next((REPO / "data" / "sweeps" / "policies_llama_traces").glob("*.parquet"))
    context = browser.new_context(viewport={"width": width, "height": 1400})
    try:
        tab = context.new_page()
        tab.goto(f"{server}/explorer")  # a phone's sidebar is closed: opened from its address
        tab.get_by_role("heading", name="Trace explorer").wait_for(timeout=60_000)
        wait_idle(tab)
        tab.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files(str(trace))
        tab.get_by_text("schema OK").wait_for(timeout=60_000)
        tab.locator('[data-testid="stMetricValue"]').nth(4).wait_for(timeout=60_000)
        wait_idle(tab)
        cut = tab.locator(SHOWN_WHOLE).evaluate_all(CUT)
        assert not cut, f"cut short at {width} px: {cut}"
    finally:
        context.close()
