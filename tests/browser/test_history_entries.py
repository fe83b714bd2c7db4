"""Browser history in a real browser (the `server` and `browser` of conftest.py): a step the user takes adds
at most the history entries Back needs to undo it. Streamlit's browser side pushes an entry for every change of
the address the server sends; a page sent one per setting it wrote.

A run on a page added two (its mark written into the address, then taken out).
"""

from __future__ import annotations

import re

import pytest

from tests.browser.driving import (
    GENERATE_TIMEOUT_MS,
    UI_TIMEOUT_MS,
    address_of,
    clean,
    goto,
    open_page,
    wait_idle,
)

COMPARE = {"cmp_max_new": "4", "dtype": "bfloat16", "cmp_policies": ["full depth", "skip"]}


def _length(page) -> int:
    """The tab's history entries, once the page has settled (an address change lands after the run's end)."""
    wait_idle(page)
    page.wait_for_timeout(1000)
    wait_idle(page)
    return page.evaluate("history.length")


SMALL_SWEEP = {"to_source": "Run a small sweep here", "to_targets": ["2.0"], "to_modes": ["exit"],
               "to_examples": "2", "to_max_new": "8"}  # fmt: skip
TUNE = {"tune_trials": "2", "tune_rows": "4", "tune_batch": "4", "tune_max_new": "4", "tune_prune": "0"}
KEPT = "Kept as run #"  # a page's line under its result, once it is kept


@pytest.mark.parametrize(
    "path, query, heading, button, done",
    [
        ("generate", {"gen_max_new": "3", "gen_text": "Blue Spice"}, "Generate and trace", "Generate", KEPT),
        ("compare", COMPARE, "Compare policies", "Run all", "Costs"),
        ("lens", {"lens_max_new": "4", "lens_text": "Blue Spice"}, "Layer lens", "Run the lens", "Downloads"),
        ("tradeoffs", SMALL_SWEEP, "Trade-offs", "Run sweep", KEPT),
        ("tune", TUNE, "Tune a schedule", "Run search", KEPT),
    ],
    ids=["generate", "compare", "lens", "tradeoffs", "tune"],
)
def test_a_run_adds_at_most_one_history_entry(fresh, server, path, query, heading, button, done):
    """Back after a run leaves its page in one press more than before it, not two."""
    page = fresh
    open_page(page, server, path, query, heading)
    before = _length(page)
    page.get_by_role("button", name=button, exact=True).click()
    finished = page.get_by_text(done) if done == KEPT else page.get_by_role("heading", name=done, exact=True)
    finished.first.wait_for(timeout=GENERATE_TIMEOUT_MS)
    after = _length(page)
    clean(page, f"{path} after its run")
    assert after - before <= 1, (before, after, page.url)


def test_reopening_a_comparison_adds_at_most_two_history_entries(fresh, server):
    """Reopen on Run history leaves its page in at most two entries, the page opened one press of Back from the
    history: the address it opens names only the settings not at their defaults (each one named there and taken
    out again by Streamlit was an entry of its own: twelve for a comparison)."""
    page = fresh
    # settings of its own: a comparison kept by another test of this server would be shown before this one ran,
    # and leaving the page then stops the run
    open_page(page, server, "compare", {**COMPARE, "cmp_max_new": "5"}, "Compare policies")
    assert not page.get_by_role("heading", name="Costs", exact=True).count()
    page.get_by_role("button", name="Run all", exact=True).click()
    page.get_by_role("heading", name="Costs", exact=True).first.wait_for(timeout=GENERATE_TIMEOUT_MS)
    wait_idle(page)
    goto(page, "Run history")
    before = _length(page)
    page.get_by_role("button", name=re.compile(r"^Reopen run #\d+ on the Compare policies page$")).click()
    page.get_by_role("heading", name="Costs", exact=True).first.wait_for(timeout=UI_TIMEOUT_MS)
    after = _length(page)
    clean(page, "comparison reopened")
    address = address_of(page)
    assert address.get("cmp_max_new") == ["5"] and address.get("dtype") == ["bfloat16"], page.url
    assert after - before <= 2, (before, after, page.url)
