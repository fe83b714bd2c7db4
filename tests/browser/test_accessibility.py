"""What a keyboard and a screen reader meet in a real browser (the `server` and `browser` of conftest.py), from a
WCAG 2.1 AA audit: every page's headings make an outline with no level skipped (1.3.1; a screen reader's reader
moves by them), and a long trace's heatmap takes its token range from the keyboard (2.1.1; Plotly's range slider
took a mouse only)."""

from __future__ import annotations

import pytest

from skipcore.traces import read_trace, write_trace
from tests.browser.driving import GENERATE_TIMEOUT_MS, SWEEP, goto, open_page, wait_idle
from tests.helpers import REPO

pytestmark = pytest.mark.slow  # a dashboard server and Chromium

# every heading of the page as the DOM orders it, its level, its words, and whether it is in the sidebar
HEADINGS = """() => [...document.querySelectorAll('h1, h2, h3, h4, h5, h6')].map(h => [
    Number(h.tagName[1]), h.textContent.trim(), !!h.closest('[data-testid="stSidebar"]')])"""
OPEN_EXPANDERS = """() => document.querySelectorAll('[data-testid="stExpander"] details:not([open]) > summary')
    .forEach(s => s.click())"""


def skipped_levels(headings: list[tuple[int, str]], top: int) -> list[str]:
    """Each heading more than one level below the heading before it (the first is compared with a heading of
    level `top` - 1: a region whose outline starts at `top`)."""
    bad, before = [], top - 1
    for level, words in headings:
        if level > before + 1:
            bad.append(f"h{level} {words!r} after h{before}")
        before = level
    return bad


def test_skipped_levels_are_found():
    assert skipped_levels([(1, "a"), (3, "b")], 1) == ["h3 'b' after h1"]
    assert skipped_levels([(3, "Model")], 2) == ["h3 'Model' after h1"]  # a sidebar opening on an h3
    assert not skipped_levels([(1, "a"), (2, "b"), (3, "c"), (2, "d"), (1, "e")], 1)


def _run(page, button: str, done: str) -> None:
    page.get_by_role("button", name=button, exact=True).click()
    page.get_by_text(done, exact=False).first.wait_for(timeout=GENERATE_TIMEOUT_MS)
    wait_idle(page)


# page (its h1, address path, settings that keep a run short) and what makes its results appear: a button, and
# the words that appear with the result
PAGES = [
    ("Schedule designer", "", {}, None),
    ("Generate and trace", "generate", {"gen_max_new": "4"}, ("Generate", "Made with")),
    ("Run history", "history", {}, None),  # after a Generate run: the runs compared
    ("Trade-offs", "tradeoffs", {}, None),  # the shipped sweep: its fronts
    (
        "Tune a schedule",
        "tune",
        {"tune_trials": "2", "tune_rows": "4", "tune_batch": "4", "tune_max_new": "4", "tune_prune": "0"},
        ("Run search", "report.md"),
    ),
    (
        "Compare policies",
        "compare",
        {"cmp_policies": ["skip", "calm"], "cmp_max_new": "4"},
        ("Run all", "Layers per token"),
    ),
    ("Trace explorer", "explorer", {}, None),
    ("Layer lens", "lens", {"lens_max_new": "4"}, ("Run the lens", "Downloads")),
]


@pytest.mark.parametrize(("title", "path", "query", "run"), PAGES, ids=[p[1] or "designer" for p in PAGES])
def test_every_pages_headings_skip_no_level(fresh, server, title, path, query, run):
    """The page with its results shown and every expander open (a tune's report.md among them): the main area's
    outline starts at the page's one h1 and never goes down more than a level at once; the sidebar's, beside the
    h1, starts at h2 (it opened on an h3 "Model", and pages went from h1 to h3)."""
    page = fresh
    if path == "history":  # a run to compare
        open_page(page, server, "generate", {"gen_max_new": "4"}, "Generate and trace")
        _run(page, "Generate", "Made with")
        goto(page, title)
    else:
        open_page(page, server, path, query, title)
    if run is not None:
        _run(page, *run)
    page.evaluate(OPEN_EXPANDERS)
    page.wait_for_timeout(500)
    headings = page.evaluate(HEADINGS)
    main = [(level, words) for level, words, aside in headings if not aside]
    side = [(level, words) for level, words, aside in headings if aside]
    assert [words for level, words in main if level == 1] == [title], main  # one h1: the page's title
    assert main[0] == (1, title), main
    skipped = skipped_levels(main, 1) + skipped_levels(side, 2)
    assert not skipped, (title, skipped, headings)
    assert not page.locator('[data-testid="stException"]').count(), "a page showed a traceback"


def _long_trace(tmp_path) -> str:
    """One row of a shipped sweep's trace that generated more tokens than a heatmap shows at once (the window of
    `figures.TOKEN_WINDOW`), as a file of its own."""
    from app.dashboard.figures import TOKEN_WINDOW

    for path in sorted((REPO / "data" / "sweeps" / "default_traces").glob("*.parquet")):
        trace, meta = read_trace(path)
        live = trace[~trace["finished"].astype(bool)].groupby("sample").size()
        if live.max() > TOKEN_WINDOW + 10:
            out = tmp_path / "long.parquet"
            write_trace(trace[trace["sample"] == live.idxmax()], out, meta)
            return str(out)
    pytest.skip(f"no shipped trace has a row of more than {TOKEN_WINDOW + 10} tokens")


def _token_axis(page) -> list[float]:
    """The heatmap's token axis as the browser draws it: [first, last] in steps, each end half a step out."""
    return page.evaluate(
        "() => document.querySelector('.st-key-explorer_heatmap .js-plotly-plot').layout.xaxis.range"
    )


def test_a_long_heatmaps_tokens_are_chosen_from_the_keyboard(fresh, server, tmp_path):
    """Tab from the sample picker reaches the "Tokens shown" slider's thumbs; the arrow keys move them, and the
    heatmap draws the tokens they choose."""
    if not SWEEP.is_file():
        pytest.skip("no shipped sweep")
    from app.dashboard.figures import TOKEN_WINDOW, TOKENS_SHOWN

    page = fresh
    open_page(page, server, "explorer", {"explorer_source": "Upload a file"}, "Trace explorer")
    page.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files(_long_trace(tmp_path))
    page.get_by_text("schema OK").wait_for()
    wait_idle(page)
    slider = page.locator('[data-testid="stSlider"]', has_text=TOKENS_SHOWN)
    slider.wait_for(timeout=15_000)
    page.locator(".st-key-explorer_heatmap .js-plotly-plot").wait_for()
    assert _token_axis(page) == [-0.5, TOKEN_WINDOW - 0.5]
    start = slider.get_by_role("slider", name=f"{TOKENS_SHOWN} — start")
    end = slider.get_by_role("slider", name=f"{TOKENS_SHOWN} — end")
    page.get_by_role("combobox", name="Sample (batch row)").focus()
    for _ in range(6):  # the keyboard's way there: Tab, past the slider's help button
        page.keyboard.press("Tab")
        if start.evaluate("e => e === document.activeElement"):
            break
    assert start.evaluate("e => e === document.activeElement"), "Tab never reached the slider"
    for _ in range(5):
        page.keyboard.press("ArrowRight")
    page.keyboard.press("Tab")  # to the other thumb
    assert end.evaluate("e => e === document.activeElement")
    for _ in range(10):
        page.keyboard.press("ArrowRight")
    wait_idle(page)
    deadline = 30
    while _token_axis(page) != [4.5, TOKEN_WINDOW + 9.5] and deadline:  # drawn after the rerun
        page.wait_for_timeout(250)
        deadline -= 1
    assert _token_axis(page) == [4.5, TOKEN_WINDOW + 9.5]
    assert (start.input_value(), end.input_value()) == ("5", str(TOKEN_WINDOW + 9))
    assert not page.locator('[data-testid="stException"]').count(), "a page showed a traceback"
