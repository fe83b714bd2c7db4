"""Narrow screens in a real browser (the `server` and `browser` of conftest.py): the schedule designer at
800 px with the sidebar open (no metric is cut short, 'La... 2...', and the cost figure's panel titles do not
overlap), and a speculative run's metrics in the trace explorer at 1024 px (no value cut short)."""

from __future__ import annotations

from tests.browser.driving import goto, wait_idle
from tests.helpers import REPO

NARROW = {"width": 800, "height": 1400}
CUT = """els => els.filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.textContent)"""
TITLES = ("FLOPs per decode step", "KV cache after step")


def _boxes_meet(a: dict, b: dict) -> bool:
    return not (
        a["x"] + a["width"] <= b["x"]
        or b["x"] + b["width"] <= a["x"]
        or a["y"] + a["height"] <= b["y"]
        or b["y"] + b["height"] <= a["y"]
    )


def _settled_boxes(tab) -> list[dict | None]:
    """The panel titles' boxes once two reads in a row agree: Plotly draws the figure again while the column
    settles, replacing its text elements, so a box read across a redraw is of an element no longer there."""
    from playwright.sync_api import Error as PlaywrightError

    last = None
    for _ in range(20):
        try:
            boxes = [tab.locator("svg text", has_text=t).first.bounding_box(timeout=2000) for t in TITLES]
        except PlaywrightError:  # detached by a redraw between finding and measuring it
            boxes = None
        if boxes is not None and all(boxes) and boxes == last:
            return boxes
        last = boxes
        tab.wait_for_timeout(250)
    return last or [None, None]


def test_the_designer_at_800_px_cuts_no_metric_and_no_title_meets_another(browser, server):
    context = browser.new_context(viewport=NARROW)
    try:
        tab = context.new_page()
        tab.goto(server)
        tab.get_by_role("heading", name="Schedule designer").wait_for()
        wait_idle(tab)
        assert tab.locator(
            '[data-testid="stSidebar"]'
        ).is_visible()  # the sidebar open: the narrow main column
        metrics = tab.locator('[data-testid="stMetric"]')
        metrics.nth(3).wait_for()  # the row draws its metrics one by one: all four, not the first alone
        assert metrics.count() == 4
        cut = tab.locator('[data-testid="stMetric"] *').evaluate_all(CUT)
        assert not cut, f"cut short: {cut}"
        boxes = _settled_boxes(tab)
        assert all(boxes) and not _boxes_meet(*boxes), boxes
    finally:
        context.close()


def test_a_speculative_runs_metrics_at_1024_px_cut_no_value(browser, server):
    """Two rows of five metrics beside the open sidebar: a KV cache's '65.9 KiB' read '65.9 …'."""
    trace = next((REPO / "data" / "sweeps" / "policies_llama_traces").glob("*.parquet"))
    context = browser.new_context(viewport={"width": 1024, "height": 768})
    try:
        tab = context.new_page()
        tab.goto(server)
        tab.get_by_role("heading", name="Schedule designer").wait_for()
        goto(tab, "Trace explorer")
        tab.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files(str(trace))
        tab.get_by_text("schema OK").wait_for(timeout=60_000)
        wait_idle(tab)
        values = tab.locator('[data-testid="stMetricValue"]')
        assert values.count() >= 5
        cut = tab.locator('[data-testid="stMetricValue"], [data-testid="stMetricValue"] *').evaluate_all(CUT)
        assert not cut, f"cut short: {cut}"
    finally:
        context.close()


def test_the_trade_offs_at_800_px_draw_each_chart_wide_enough_and_cut_no_picker(browser, server):
    """Beside the open sidebar at 800 px, the two trade-off charts drew side by side at about 220 px each, their
    titles, legends and axis titles cut and their drawing past the screen's edge, and the four pickers cut their
    labels: each chart is drawn at 20rem at least (the charts one above the other), the pickers two by two."""
    context = browser.new_context(viewport={"width": 800, "height": 900})
    try:
        tab = context.new_page()
        tab.goto(f"{server}/tradeoffs")
        tab.get_by_role("heading", name="Trade-offs").wait_for()
        wait_idle(tab)
        charts = tab.locator('[data-testid="stVegaLiteChart"]')
        charts.nth(1).wait_for()
        tab.wait_for_timeout(1000)  # the charts lay out to their columns
        widths = [charts.nth(i).bounding_box()["width"] for i in range(charts.count())]
        assert len(widths) == 2 and min(widths) >= 320, widths
        edge = tab.locator('[data-testid="stVegaLiteChart"] svg').evaluate_all(
            "els => Math.max(...els.map(e => e.getBoundingClientRect().right))"
        )
        assert edge <= 800, edge
        cut = tab.locator('[data-testid="stWidgetLabel"] p').evaluate_all(CUT)
        assert not cut, f"cut short: {cut}"
    finally:
        context.close()
