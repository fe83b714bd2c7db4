"""Time estimates on the pages (Streamlit's AppTest): a page answers without timing the model, a button times it
(after a warm-up of the shapes it times) and says the estimate with its spread and age, and a run's own steps time
the next run like it."""

from __future__ import annotations

import pytest

from skipcore.measure import estimate
from tests.helpers import assert_clean, by_key, open_app

MEASURE = "Measure the time"
SMALL_SWEEP = "Run a small sweep here"


@pytest.fixture
def probes(monkeypatch) -> list:
    """The batch shapes the pages time the model at (`estimate._measure`), counted; no timing kept from earlier
    tests (the engine is cached for the process)."""
    monkeypatch.setattr(estimate, "_TIMINGS", type(estimate._TIMINGS)())
    calls, measure = [], estimate._measure

    def counted(*args):
        calls.append(args[1:3])
        return measure(*args)

    monkeypatch.setattr(estimate, "_measure", counted)
    return calls


def _open(page: str):
    at = open_app(page)
    if page == "tradeoffs":
        by_key(at.radio, "to_source").set_value(SMALL_SWEEP).run()
    return at


@pytest.mark.parametrize("page", ["generate", "compare", "lens", "tune", "tradeoffs"])
def test_a_page_opens_without_timing_the_model(model_dir, probes, page):
    at = _open(page)
    assert_clean(at)
    assert probes == []  # nothing measured while the page opens
    assert MEASURE in [b.label for b in at.button]
    said = next(c.value for c in at.caption if c.value.startswith(":material/timer: Not measured yet"))
    # a run that times its own steps for the next estimate (Generate's, Compare's) is promised as one; a search,
    # a sweep and the lens time none, so only the button is
    assert ("times its own steps" in said) == (page in ("generate", "compare")), said


def test_the_button_times_the_model_and_says_the_estimate_with_its_spread_and_age(model_dir, probes):
    at = _open("tune")
    by_key(at.button, "time Run search").click().run()
    assert_clean(at)
    assert len(probes) >= 1
    said = next(c.value for c in [*at.caption, *at.info] if "Up to" in c.value or "will take" in c.value)
    assert "middle half" in said and "after a warm-up of the same shapes" in said and "just now" in said
    at.run()
    assert MEASURE not in [b.label for b in at.button]  # measured: no button until the timing is stale
    assert len(probes) == len(set(probes))  # a fresh timing is not measured again


def test_a_generate_run_times_the_next_run_like_it(model_dir, probes):
    at = _open("generate")
    by_key(at.button, "gen_run").click().run()
    assert_clean(at)
    at.run()
    assert probes == []  # the run's own steps, not a probe
    timings = [t for per_engine in estimate._TIMINGS.values() for t in per_engine.values()]
    assert timings and {t.source for t in timings} == {"run"}
    assert MEASURE not in [b.label for b in at.button]  # the page's estimate now rests on the run


def test_a_comparison_times_the_next_comparison(model_dir, probes):
    at = _open("compare")
    by_key(at.multiselect, "cmp_policies").set_value(["full depth", "skip"]).run()
    assert MEASURE in [b.label for b in at.button]
    by_key(at.button, "cmp_run").click().run()
    assert_clean(at)
    at.run()
    assert probes == []  # the runs' own steps, not a probe
    assert MEASURE not in [b.label for b in at.button]


def test_generate_announces_the_designed_schedule_not_full_depth(model_dir, probes, monkeypatch):
    from app.dashboard import estimates

    asked, known = [], estimates.known_estimate
    monkeypatch.setattr(
        estimates, "known_estimate", lambda engine, work: asked.append(work) or known(engine, work)
    )
    at = _open("generate")  # a skip-aware model opens on a skip schedule
    assert_clean(at)
    (job,) = asked[-1]
    assert 0 < job.depth < 1  # its decode steps run the designed budgets' share of the layers
