"""Paired timing with fake clocks: pairing, the interval, the plausibility flag, and a cold first run."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from skipcore.measure.paired_timing import (
    MIN_PAIRED_RUNS,
    measure_against_full,
    paired_ratio,
    plausibility_flag,
    runs_flag,
    time_pairs,
)


def fake(times):
    """A measure whose successive calls take the given seconds (decode and total alike)."""
    it = iter(times)

    def run():
        t = next(it)
        return {"decode": t, "total": 2 * t}

    return run


def test_pairs_are_made_in_alternation_and_warmups_are_dropped():
    calls = []

    def side(name, t):
        def run():
            calls.append(name)
            return {"decode": t}

        return run

    res = time_pairs(side("full", 2.0), side("skip", 1.0), repeats=3, warmup=1)
    assert calls == ["full", "skip"] * 4  # one warm-up pair, then three timed pairs, interleaved
    assert res["decode"].runs == 3 and res["decode"].median == 2.0


def test_a_cold_first_run_does_not_move_the_median():
    # the first call of each side is 50x slow (allocations, lazy set-up): it is the warm-up
    full = fake([100.0, 2.0, 2.1, 1.9, 2.0, 2.05])
    skip = fake([50.0, 1.0, 1.05, 0.95, 1.0, 1.0])
    res = time_pairs(full, skip, repeats=5)
    assert res["decode"].median == pytest.approx(2.0, rel=0.03)
    assert res["total"].median == pytest.approx(2.0, rel=0.03)


def test_pairing_cancels_a_load_that_hits_both_sides():
    # the machine slows down 3x for the last pairs; each pair still shows the 2x speedup
    load = [1, 1, 3, 3, 3]
    full = [2.0 * x for x in load]
    skip = [1.0 * x for x in load]
    r = paired_ratio(full, skip)
    assert r.median == 2.0 and r.lo == 2.0 and r.hi == 2.0


def test_interval_widens_with_noise_and_contains_the_median():
    quiet = paired_ratio([2.0] * 7, [1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0])
    noisy = paired_ratio([2.0] * 7, [0.7, 1.3, 0.8, 1.0, 1.4, 0.6, 1.1])
    assert quiet.lo <= quiet.median <= quiet.hi
    assert noisy.lo <= noisy.median <= noisy.hi
    assert (noisy.hi - noisy.lo) > 5 * (quiet.hi - quiet.lo)


@given(
    st.lists(st.floats(0.01, 100), min_size=1, max_size=12).flatmap(
        lambda ref: st.tuples(
            st.just(ref), st.lists(st.floats(0.01, 100), min_size=len(ref), max_size=len(ref))
        )
    )
)
def test_the_interval_always_brackets_the_median(pair):
    ref, cand = pair
    r = paired_ratio(ref, cand)
    assert r.lo <= r.median + 1e-12 and r.median <= r.hi + 1e-12
    ratios = sorted(a / b for a, b in zip(ref, cand, strict=True))
    assert ratios[0] - 1e-9 <= r.lo and r.hi <= ratios[-1] + 1e-9


def test_the_interval_is_reproducible():
    a = paired_ratio([2, 2.2, 1.9, 2.4], [1, 1.3, 0.9, 1.1])
    b = paired_ratio([2, 2.2, 1.9, 2.4], [1, 1.3, 0.9, 1.1])
    assert (a.lo, a.hi) == (b.lo, b.hi)


@pytest.mark.parametrize(
    "measured, layer, flops, runs, flagged",
    [
        (2.0, 2.0, 1.9, 3, ""),
        (2.45, 2.0, 1.9, 3, "above"),  # > 1.2 x 2.0
        (2.39, 2.0, 1.9, 3, ""),
        (0.9, 2.0, 1.9, 3, "below"),  # < 0.5 x 1.9
        (float("nan"), 2.0, 1.9, 3, "no measurement"),
        (2.0, 2.0, 1.9, 1, "one paired run: a single timing, not a measurement"),  # never reported as one
        # two runs: the interval is their range, which holds the median half the time
        (2.0, 2.0, 1.9, 2, "2 paired runs: the interval is their range, which holds the median only 50%"),
    ],
)
def test_plausibility_flag(measured, layer, flops, runs, flagged):
    flag = plausibility_flag(measured, layer, flops, runs)
    assert (flagged in flag) if flagged else flag == ""


@pytest.mark.parametrize("runs", range(2, 6))
def test_up_to_five_pairs_the_interval_is_the_range_of_the_ratios(runs):
    """Why two runs are flagged: the bootstrap interval of so few pairs is their range, and the range of n draws
    holds the median with probability 1 - 2^(1-n) (a half at two)."""
    ratios = np.random.default_rng(runs).lognormal(0.5, 0.2, runs)
    r = paired_ratio(list(ratios), [1.0] * runs)
    assert (r.lo, r.hi) == pytest.approx((ratios.min(), ratios.max()))
    assert (runs_flag(r.median, runs) != "") == (runs < MIN_PAIRED_RUNS)


def test_mismatched_pairs_are_refused():
    with pytest.raises(ValueError):
        paired_ratio([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        time_pairs(fake(itertools.repeat(1.0)), fake(itertools.repeat(1.0)), repeats=0)


def test_a_flag_says_every_reason_it_has():
    """Two paired runs of an implausible 4.77x at layer speedup 2.00 were flagged for the runs alone: a reader who
    timed it again did not hear that the value itself cannot come from skipping layers."""
    flag = plausibility_flag(4.77, 2.0, 1.9, 2)
    assert (
        flag.startswith("2 paired runs") and "; measured 4.77x is above 1.2x the batch layer speedup" in flag
    )
    assert plausibility_flag(4.77, 2.0, 1.9, 5).startswith("measured 4.77x is above")


class _Ran:
    def __init__(self, **summary) -> None:
        self.summary = summary


class _TimedEngine:
    """An engine whose runs report fixed per-step times and work: full depth 10 ms a step; the policy 4 ms a step
    over the prompts it is given, having run half the layers (2x) on these, whatever it ran on others."""

    def generate(self, prompts, policy=None, max_new_tokens=None, batch_size=None):
        work = {"batch_layer_speedup": 2.0, "batch_flops_speedup_decode": 1.9} if policy else {}
        return _Ran(decode_ms_per_step=4.0 if policy else 10.0, tokens=8, **work)


def test_a_measured_speedup_is_bounded_by_the_work_its_own_runs_saved():
    """2.5x measured where the timed prompts saved 2x of the layers is beyond skipping's reach (above 1.2x), whatever
    the layer speedup over a larger set of prompts (a sweep scores all its prompts and times the first few)."""
    m = measure_against_full(_TimedEngine(), ["a", "b"], object(), 4, 2, 3)
    assert m["wall_speedup_decode"] == pytest.approx(2.5)
    assert "above 1.2x the batch layer speedup (2.00x)" in m["timing_flag"]
