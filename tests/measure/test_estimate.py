"""Time estimates before long work (`skipcore.measure.estimate`): from the model's own timing, growing with the
work, said in words; and what a sweep decodes."""

from __future__ import annotations

import math

import pytest

from skipcore.evaluate import SweepConfig, build_grid
from skipcore.measure.estimate import Decodes, Estimate, estimate_time, sweep_work
from tests.helpers import engine_for


@pytest.fixture(scope="module")
def engine(model_dirs):
    return engine_for(model_dirs)


def test_an_estimate_comes_from_the_models_own_timing_and_grows_with_the_work(engine):
    one = estimate_time(engine, [Decodes(4, 16, 4, prompt_tokens=20)])
    assert one.seconds > 0 and "ms per full-depth decode step" in one.basis and "batch 4" in one.basis
    assert engine.eos_ids.tolist() != [
        -1
    ]  # the timing used a copy of the engine: the engine still stops at EOS
    again = estimate_time(engine, [Decodes(4, 16, 4, prompt_tokens=20)] * 3)  # timed once, then reused
    assert again.seconds == pytest.approx(3 * one.seconds)
    twice = estimate_time(engine, [Decodes(4, 16, 4, prompt_tokens=20, times=2)])
    assert twice.seconds == pytest.approx(2 * one.seconds)
    shallow = estimate_time(engine, [Decodes(4, 16, 4, prompt_tokens=20, depth=1 / 6)])
    assert shallow.seconds < one.seconds  # a step that runs fewer layers is cheaper
    assert estimate_time(engine, []).seconds == 0.0


def test_a_prompt_longer_than_the_model_takes_is_timed_within_its_positions(engine):
    est = estimate_time(engine, [Decodes(1, 4, 1, prompt_tokens=100_000)])
    assert math.isfinite(est.seconds) and est.seconds > 0


@pytest.mark.parametrize(
    ("seconds", "words", "long"),
    [
        (2, "a few seconds", False),
        (31, "about 30 s", True),
        (250, "about 4 min", True),
        (9000, "about 2.5 h", True),
    ],
)
def test_an_estimate_is_said_in_words(seconds, words, long):
    est = Estimate(seconds, "")
    assert (est.words(), est.long) == (words, long)


def test_a_sweeps_work_is_each_setting_then_its_paired_timing():
    cfg = SweepConfig(
        model="m", dataset="d", out="x.parquet", targets=(2.0,), modes=("skip",), batch_sizes=(4,)
    )
    grid = build_grid(cfg)  # full depth, skip 2x, CALM
    work = sweep_work(grid, examples=10, max_new_tokens=8, prompt_tokens=12, repeats=3, timing_limit=4)
    assert len(work) == 3 * len(grid)
    quality = work[::3]
    assert [w.prompts for w in quality] == [10] * len(grid)
    assert [w.depth for w in quality] == [
        1.0 if s.shape == "full" or s.policy != "static" else 0.5 for s in grid
    ]
    timed = [w for w in work if w.times > 1]
    assert all(
        w.prompts == 4 and w.times == 4 for w in timed
    )  # a warm-up and 3 repeats, of the setting and full
    assert sweep_work(grid, 10, 8, 12, repeats=0, timing_limit=4) == quality
