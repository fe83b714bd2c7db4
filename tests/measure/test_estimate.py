"""Time estimates before long work (`skipcore.measure.estimate`): from the model's own timing, growing with the
work, said in words; and what a sweep decodes."""

from __future__ import annotations

import math
import time

import pandas as pd
import pytest

from skipcore.evaluate.sweep import SweepConfig, build_grid
from skipcore.measure.estimate import Decodes, Estimate, duration_words, estimate_time, sweep_work
from tests.helpers import REPO, engine_for


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
    ("seconds", "high", "words", "long"),
    [
        (2, None, "a few seconds", False),
        (0.03, 0.03, "a second", False),  # beside "likely 0.03 s", where "a few seconds" read as more
        (6.2, 6.3, "about 7 s", False),  # said as "up to", beside "likely 6.2-6.3 s": never below it
        (31, None, "about 35 s", True),
        (250, None, "about 5 min", True),
        (9000, None, "about 2.5 h", True),
    ],
)
def test_an_estimate_is_said_in_words(seconds, high, words, long):
    est = Estimate(seconds, "", low=seconds if high else None, high=high)
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


# -- measured after a warm-up, said with its spread, refreshed, corrected by a run ---------------------------
class FakeClock:
    """Seconds since the epoch, moved by hand."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_timing_warms_up_the_very_shapes_it_times(engine, monkeypatch):
    from skipcore.decode.engine import SkipEngine
    from skipcore.measure import estimate

    calls, generate = [], SkipEngine.generate

    def spied(self, prompts, policy=None, max_new_tokens=32, sampling=None, batch_size=None, progress=None):
        calls.append((len(prompts), max_new_tokens, batch_size, policy is None))
        return generate(self, prompts, policy, max_new_tokens, sampling, batch_size, progress)

    monkeypatch.setattr(SkipEngine, "generate", spied)
    monkeypatch.setattr(estimate, "_TIMINGS", type(estimate._TIMINGS)())
    estimate_time(engine, [Decodes(3, 16, 3, prompt_tokens=20)])
    warm, timed = calls[:2], calls[2:]
    assert timed and set(warm) == set(timed)  # the untimed round ran the shapes the timed rounds ran
    assert {c[:3] for c in timed} == {(3, estimate.CALIBRATION_STEPS + 1, 3)}


def test_an_estimate_says_its_spread_and_when_it_was_measured(engine, monkeypatch):
    from skipcore.measure import estimate

    monkeypatch.setattr(estimate, "_TIMINGS", type(estimate._TIMINGS)())
    clock = FakeClock()
    est = estimate_time(engine, [Decodes(4, 16, 4, prompt_tokens=20)], clock=clock)
    assert est.low is not None and est.high is not None and est.low <= est.seconds <= est.high
    assert "middle half" in est.basis and "after a warm-up" in est.basis and "just now" in est.basis
    clock.now += 180
    later = estimate.known_estimate(engine, [Decodes(4, 16, 4, prompt_tokens=20)], clock=clock)
    assert later.seconds == est.seconds and "3 min ago" in later.basis and later.age_s == 180


def test_a_stale_timing_is_measured_again_and_a_fresh_one_is_reused(engine, monkeypatch):
    from skipcore.measure import estimate

    monkeypatch.setattr(estimate, "_TIMINGS", type(estimate._TIMINGS)())
    measured, measure = [], estimate._measure
    monkeypatch.setattr(estimate, "_measure", lambda *a: measured.append(a[1:3]) or measure(*a))
    clock, work = FakeClock(), [Decodes(2, 8, 2, prompt_tokens=12)]
    assert estimate.known_estimate(engine, work, clock=clock) is None  # nothing timed: nothing measured
    assert measured == []
    estimate_time(engine, work, clock=clock)
    clock.now += estimate.MAX_AGE_S - 1
    estimate_time(engine, work, clock=clock)
    assert len(measured) == 1
    clock.now += 2
    estimate_time(engine, work, clock=clock)
    assert len(measured) == 2


def _run_trace(layers: list[int], ms: list[float], batch: int = 2, prompt_len: int = 12) -> pd.DataFrame:
    """A run's trace as `learn_from_run` reads it: `batch` rows per step, step 0 the prefill."""
    rows = [
        {"batch": 0, "sample": r, "step": s, "step_ms": t, "batch_layers": n, "prompt_len": prompt_len}
        for s, (n, t) in enumerate(zip(layers, ms, strict=True))
        for r in range(batch)
    ]
    return pd.DataFrame(rows)


class FakeEngine:
    """What the estimate reads of an engine: its layer count and positions."""

    num_layers = 4
    max_positions = None


def test_a_runs_own_steps_become_the_timing_of_its_shape():
    from skipcore.measure import estimate

    engine, clock = FakeEngine(), FakeClock()
    work = [Decodes(2, 9, 2, prompt_tokens=12)]
    # a skip run: 4, 3, 2 and 1 layers, each layer 2 ms over a 1 ms step
    layers = [4, 4, 4, 3, 3, 2, 2, 1, 1]
    ms = [50.0] + [1.0 + 2.0 * (n - 1) for n in layers[1:]]
    assert estimate.learn_from_run(engine, _run_trace(layers, ms), clock=clock) == 1
    est = estimate.known_estimate(engine, work, clock=clock)
    assert est.seconds == pytest.approx((50.0 + 8 * 7.0) / 1e3)  # the prefill, then 8 full-depth steps
    assert "from the last run's 8 decode steps" in est.basis and "just now" in est.basis
    shallow = estimate.known_estimate(engine, [Decodes(2, 9, 2, 12, depth=0.25)], clock=clock)
    assert shallow.seconds == pytest.approx((50.0 + 8 * 1.0) / 1e3)
    # a later full-depth run twice as slow (the machine got busy): the timing follows it
    estimate.learn_from_run(engine, _run_trace([4] * 5, [100.0] + [14.0] * 4), clock=clock)
    slower = estimate.known_estimate(engine, work, clock=clock)
    assert slower.seconds == pytest.approx((100.0 + 8 * 14.0) / 1e3)
    assert estimate.known_estimate(engine, [Decodes(2, 9, 2, 12, depth=0.25)], clock=clock).seconds == (
        pytest.approx((100.0 + 8 * 2.0) / 1e3)
    )


def test_a_slow_first_decode_step_does_not_tilt_what_a_run_teaches():
    """A schedule runs full depth only on its first decode step, which pays the run's one-off set-up: that one
    slow step must not make full depth look several times dearer and one layer free."""
    from skipcore.measure import estimate

    class Twelve(FakeEngine):
        num_layers = 12

    engine, clock = Twelve(), FakeClock()
    layers = [12, 12, 10, 10, 9, 9, 8, 8, 7, 7, 6, 6, 5, 5, 4, 4, 3]
    ms = [20.0, 10.0] + [0.4 + 0.1 * n for n in layers[2:]]  # the prefill, the slow first step, then a line
    estimate.learn_from_run(engine, _run_trace(layers, ms), clock=clock)
    full = estimate.known_estimate(engine, [Decodes(2, 2, 2, 12)], clock=clock).seconds * 1e3 - 20.0
    shallow = estimate.known_estimate(engine, [Decodes(2, 2, 2, 12, depth=1 / 12)], clock=clock).seconds * 1e3
    assert full == pytest.approx(0.4 + 0.1 * 12)
    assert shallow - 20.0 == pytest.approx(0.4 + 0.1)


def test_steps_timed_on_a_busy_machine_never_make_one_layer_free():
    """Noisy steps whose line crosses zero above one layer said '0.0 ms at one layer' and a full depth dearer than
    any step the run took; such steps are read in proportion to their layers instead."""
    from skipcore.measure import estimate

    class Twelve(FakeEngine):
        num_layers = 12

    engine, clock = Twelve(), FakeClock()
    layers = [12, 10, 10, 8, 8, 6, 6, 4, 4, 2, 2]
    ms = [20.0, 600.0, 700.0, 650.0, 500.0, 90.0, 80.0, 75.0, 70.0, 60.0, 76.0]  # a busy machine's steps
    estimate.learn_from_run(engine, _run_trace(layers, ms), clock=clock)
    timing = next(iter(estimate._known(engine).values()))
    assert 0 < timing.shallow_ms < min(ms[1:]) and timing.full_ms <= max(ms[1:]) * 12 / 10


def test_a_run_with_no_decode_step_teaches_nothing():
    from skipcore.measure import estimate

    engine = FakeEngine()
    assert estimate.learn_from_run(engine, _run_trace([4], [50.0])) == 0
    assert estimate.known_estimate(engine, [Decodes(2, 9, 2, prompt_tokens=12)]) is None


DEFAULT_MODEL = REPO / "data" / "models" / "skipdecode-opt-e2e"


def test_an_estimate_holds_against_the_run_it_announces_on_the_default_model():
    """The figure said before a run, against the wall time of that very run, in this process: within 2x (the
    estimate is an upper bound only for rows that stop early; these run every step). Three pairs, each estimate
    measured anew just before its run; the median ratio is held, so one noisy run on a busy machine is not."""
    from skipcore import SkipEngine, load_model
    from skipcore.data import format_prompt, load_examples
    from skipcore.measure import estimate

    if not (DEFAULT_MODEL / "config.json").is_file():
        pytest.skip("the shipped default model is missing (scripts/train_default.sh makes it)")
    engine = SkipEngine(*load_model(str(DEFAULT_MODEL)))
    examples = load_examples(REPO / "data" / "e2e_synth", split="dev", limit=8)
    prompts = [format_prompt(e.task, e.source) for e in examples]
    tokens = round(sum(len(engine.tokenizer(p)["input_ids"]) for p in prompts) / len(prompts))
    work, clock, ratios = [Decodes(len(prompts), 16, 4, prompt_tokens=tokens)], FakeClock(), []
    for _ in range(3):
        clock.now += estimate.MAX_AGE_S + 1  # stale: measured again
        announced = estimate_time(engine, work, clock=clock)
        assert announced.low <= announced.seconds <= announced.high  # said with its spread
        started = time.perf_counter()
        run = engine.generate(prompts, None, 16, batch_size=4)
        ratios.append((time.perf_counter() - started) / announced.seconds)
        assert run.trace["step"].nunique() == 16  # no batch ended early: the run is the work announced
    assert 0.5 <= sorted(ratios)[1] <= 2.0, ratios


@pytest.mark.parametrize(
    ("low", "high", "said"),
    [
        (0.123, 0.31, "0.12-0.31 s"),
        (3.14, 5.8, "3.1-5.8 s"),
        (31, 52, "31-52 s"),
        (150, 260, "2.5-4.3 min"),
        (9000, 12000, "2.5-3.3 h"),
        (0.031, 0.034, "0.03 s"),  # both ends alike: one figure ("0.03-0.03 s")
        (40.2, 40.4, "40 s"),
    ],
)
def test_an_estimates_spread_is_said_in_words(low, high, said):
    assert Estimate((low + high) / 2, "", low=low, high=high).spread_words() == said
    assert Estimate(1.0, "").spread_words() == ""  # no spread known: none said


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(0.423, "0.42 s"), (7.31, "7.3 s"), (48.4, "48 s"), (210, "3.5 min"), (7560, "2.1 h")],
)
def test_a_measured_duration_is_said_in_the_unit_its_size_reads_in(seconds, said):
    assert duration_words(seconds) == said
