"""One rule for a count wherever a setting takes one: Python's int, NumPy's integers and a float with nothing after
the point (a JSON writer's 12.0, a table column's with gaps) are the count, kept as Python's int; 2.5, text and a
bool are refused as no whole number. Schedules, sweeps and policies took 12.0 or refused it, each in its own way."""

from __future__ import annotations

import math
import re
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from skipcore.decode.sampling import Sampling
from skipcore.errors import UserError
from skipcore.evaluate.tune.settings import TuneSettings, check_settings
from skipcore.plain_numbers import is_whole, python_number, whole_number
from skipcore.policies import AdaptivePolicy, CalmPolicy, SpeculativePolicy
from skipcore.schedule import Schedule, schedule_for_speedup

WHOLE = (3, np.int64(3), np.int32(3), 3.0, np.float64(3.0), np.float32(3.0), np.array(3), np.array(3.0))
NOT_WHOLE = (2.5, np.float64(2.5), True, np.bool_(True), "3", None, math.inf, math.nan)


@given(st.integers(-(2**70), 2**70))
def test_a_whole_number_of_any_type_is_pythons_int(n):
    for value in (n, float(n), np.int64(n) if abs(n) < 2**62 else n):
        got = whole_number(value)
        assert type(got) is int and got == int(float(n) if isinstance(value, float) else n) and is_whole(got)


@given(st.floats(allow_nan=True, allow_infinity=True).filter(lambda x: not float(x).is_integer()))
def test_a_number_with_a_fraction_stays_a_float_and_is_no_count(x):
    got = whole_number(np.float64(x))
    assert type(got) is float and not is_whole(got) and (got == x or math.isnan(x))


def test_other_kinds_are_left_for_the_callers_check():
    for value in (True, "3", None, b"3", [3]):
        assert whole_number(value) is value and not is_whole(value)
    assert whole_number(Fraction(6, 2)) == 3 and python_number(Fraction(1, 2)) == 0.5


def counts_read(value) -> dict[str, object]:
    """The count `value` as each setting that takes one keeps it."""
    sched = Schedule(12, "linear", "skip", max_layers=value * 2, min_layers=value, decay_span=value)
    return {
        "Schedule": sched.min_layers,
        "Schedule.from_dict": Schedule.from_dict({**sched.to_dict(), "min_layers": value}).min_layers,
        "custom budgets": Schedule(12, "custom", "skip", budgets_list=[value * 2, value]).budgets_list[1],
        "schedule_for_speedup": 3
        * (schedule_for_speedup(12, 1.5, value * 10) == schedule_for_speedup(12, 1.5, 30)),
        "CalmPolicy.min_layers": CalmPolicy(threshold=0.5, min_layers=value).min_layers,
        "SpeculativePolicy.draft_tokens": SpeculativePolicy(sched, draft_tokens=value).draft_tokens,
        "AdaptivePolicy.warmup_layers": AdaptivePolicy(
            min_layers=5, threshold=0.5, warmup_layers=value
        ).warmup_layers,
        "Sampling.top_k": Sampling(do_sample=True, top_k=value).top_k,
        "Sampling.seed": Sampling(do_sample=True, seed=value).seed,
    }


@pytest.mark.parametrize("value", WHOLE, ids=repr)
def test_every_setting_takes_a_whole_number_of_any_type_as_its_count(value):
    read = counts_read(value)
    assert read == dict.fromkeys(read, 3)
    assert all(type(v) is int for v in read.values()), read


@pytest.mark.parametrize("value", [2.5, True, "3"], ids=repr)
def test_every_setting_refuses_another_kind_as_no_whole_number(value):
    sched = Schedule(12, "linear", "skip", max_layers=8, min_layers=3)
    for name, make in {
        "min_layers": lambda: Schedule(12, "linear", "skip", max_layers=8, min_layers=value),
        "budgets": lambda: Schedule(12, "custom", "skip", budgets_list=[8, value]),
        "max_new_tokens": lambda: schedule_for_speedup(12, 1.5, max_new_tokens=value),
        "draft_tokens": lambda: SpeculativePolicy(sched, draft_tokens=value),
        "warmup_layers": lambda: AdaptivePolicy(min_layers=5, threshold=0.5, warmup_layers=value),
        "top_k": lambda: Sampling(do_sample=True, top_k=value),
    }.items():
        with pytest.raises(UserError, match=f"{name} must .*whole number"):
            make()


def test_a_tune_takes_the_counts_a_sweep_and_a_schedule_take(tmp_path):
    """A tune refused `trials=2.0`, which a sweep's `limit` and a schedule's counts take."""
    s = check_settings(
        TuneSettings(out=tmp_path / "o", trials=2.0, batch_size=np.float64(4.0), warmups=[1.0, 2])
    )
    assert (s.trials, s.batch_size, s.warmups) == (2, 4, (1, 2)) and type(s.trials) is int
    assert {type(w) for w in s.warmups} == {int}
    for kw, said in (({"trials": 2.5}, "trials must be a whole number >= 1, got 2.5"),
                     ({"warmups": [1.5]}, "warmups must be whole numbers, got 1.5")):  # fmt: skip
        with pytest.raises(UserError, match=said):
            check_settings(TuneSettings(out=tmp_path / "o", **kw))


def test_a_generate_call_takes_a_whole_float_as_its_counts():
    """`generate(prompts, None, 16.0)` was refused ('max_new_tokens must be a whole number, got float 16.0') where
    every setting of the library took it."""
    from skipcore import SkipEngine, load_model
    from skipcore.errors import ArgumentTypeError
    from tests.helpers import REPO

    engine = SkipEngine(*load_model(str(REPO / "data/models/skipdecode-opt-e2e"), device="cpu"))
    prompts = ["name[Aromi], food[Chinese]", "name[Blue Spice]"]
    plain = engine.generate(prompts, None, 4, batch_size=2).token_ids
    assert engine.generate(prompts, None, 4.0, batch_size=np.float64(2.0)).token_ids == plain
    with pytest.raises(ArgumentTypeError, match="max_new_tokens must be a whole number, got float 4.5"):
        engine.generate(prompts, None, 4.5)


def test_a_zero_d_array_is_its_number_and_an_array_of_one_is_not():
    """`schedule_for_speedup(12, np.array(3.0), 20)` said "target_speedup must be a finite number, got array(3.)": a
    0-d array (as indexing or reducing an array may give) is its number, as NumPy's scalar is; an array of one value
    is a list, refused; a switch reads a 0-d bool array alike (`python_bool`)."""
    from skipcore.plain_numbers import python_bool

    assert schedule_for_speedup(12, np.array(3.0), 20) == schedule_for_speedup(12, 3.0, 20)
    with pytest.raises(UserError, match=re.escape("target_speedup must be a finite number, got array([3.])")):
        schedule_for_speedup(12, np.array([3.0]), 20)
    assert type(python_number(np.array(2.5))) is float and python_number(np.array(True)).shape == ()
    assert python_bool(np.array(True)) is True and isinstance(python_bool(np.array([True])), np.ndarray)
