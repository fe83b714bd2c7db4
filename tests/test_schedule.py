"""Schedules: budgets in range and non-increasing, nested layer sets, speedup consistent with the budgets."""

from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skipcore.errors import ScheduleError
from skipcore.schedule import (
    MODES,
    Schedule,
    check_nested,
    layers_for_budget,
    mask_string,
    schedule_for_speedup,
    schedule_from_settings,
)


@st.composite
def schedules(draw):
    L = draw(st.integers(1, 40))
    mode = draw(st.sampled_from(MODES))
    shape = draw(st.sampled_from(["full", "constant", "linear", "power", "step", "custom"]))
    hi = draw(st.integers(1, L))
    lo = draw(st.integers(1, hi))
    # outside skip mode a warmup of 0 or 1 says none (more is refused: the layers it names never run)
    warmup = draw(st.integers(0, lo - 1)) if mode == "skip" else draw(st.integers(0, 1))
    budgets = (
        tuple(
            sorted(
                draw(st.lists(st.integers(warmup + 1 if mode == "skip" else 1, L), min_size=1, max_size=12)),
                reverse=True,
            )
        )
        if shape == "custom"
        else ()
    )
    own_bounds = shape not in ("full", "custom")  # these two set their own max and min
    return Schedule(
        L,
        shape,
        mode,
        hi if own_bounds else None,
        lo if own_bounds else None,
        warmup,
        decay_span=draw(st.none() | st.integers(1, 50)),
        # a shape's own setting only beside it (another shape's is refused)
        alpha=draw(st.floats(0.5, 1.0)) if shape == "power" else 0.9,
        stages=draw(st.integers(2, 6)) if shape == "step" else 4,
        budgets_list=budgets,
    )


@settings(max_examples=300, deadline=None)
@given(schedules(), st.integers(1, 80))
def test_budgets_in_range_and_non_increasing(sch, T):
    b = sch.budgets(T)
    assert len(b) == T and b[0] == sch.num_layers
    assert all(1 <= n <= sch.num_layers for n in b)
    assert all(x >= y for x, y in zip(b[1:], b[2:]))
    if sch.shape not in ("full", "custom"):
        assert all(sch.min_layers <= n <= sch.max_layers for n in b[1:])


@settings(max_examples=300, deadline=None)
@given(schedules(), st.integers(1, 80))
def test_layer_sets_nested_and_sized_by_budget(sch, T):
    sets = sch.layer_sets(T)
    check_nested(sets)  # raises if not
    for n, s in zip(sch.budgets(T), sets):
        assert len(s) == n == len(set(s)) and list(s) == sorted(s)
        assert all(0 <= i < sch.num_layers for i in s)
        if sch.mode == "skip" and n < sch.num_layers:
            assert set(range(min(sch.warmup_layers, n))) <= set(s)
            assert sch.num_layers - 1 in s or n <= sch.warmup_layers


@settings(max_examples=300, deadline=None)
@given(schedules(), st.integers(2, 80))
def test_speedup_consistent_with_budgets(sch, T):
    decode = sch.budgets(T)[1:]
    assert sch.layer_speedup(T) == pytest.approx(sch.num_layers / (sum(decode) / len(decode)))
    assert 1.0 <= sch.layer_speedup(T) <= sch.num_layers


def test_linear_is_the_papers_formula():
    sch = Schedule(24, "linear", "skip", max_layers=20, min_layers=8, warmup_layers=2, decay_span=10)
    for s in range(1, 30):
        assert sch.budget(s, 30) == round(20 - 12 * min(s - 1, 10) / 10)
    assert sch.layers(8) == (0, 1, 18, 19, 20, 21, 22, 23)
    assert Schedule(12, "linear", max_layers=12, min_layers=4).span(64) == 62


def test_modes_map_budgets_to_layers():
    assert layers_for_budget(5, 10, "skip", 2) == (0, 1, 7, 8, 9)
    assert layers_for_budget(5, 10, "exit") == (0, 1, 2, 3, 4)
    assert layers_for_budget(5, 10, "middle") == (0, 1, 2, 8, 9)
    assert mask_string((0, 1, 7, 8, 9), 10) == "1100000111"


def test_power_and_step_shapes():
    p = Schedule(16, "power", "exit", max_layers=16, min_layers=4, alpha=0.8)
    assert [p.budget(s, 20) for s in range(1, 6)] == [max(4, math.floor(16 * 0.8**t)) for t in range(5)]
    st_ = Schedule(12, "step", "exit", max_layers=12, min_layers=3, stages=4, decay_span=8)
    assert sorted(set(st_.budgets(20)[1:]), reverse=True) == [12, 9, 6, 3]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(max_layers=4, min_layers=6), "min_layers .6. is greater than max_layers .4."),
        (dict(max_layers=13), r"max_layers 13 is outside \[1, 12\]"),
        (dict(min_layers=0, max_layers=4), r"min_layers 0 is outside \[1, 12\]"),
        (
            dict(max_layers=8, min_layers=2, warmup_layers=2),
            "warmup_layers .2. must be smaller than min_layers",
        ),
        (dict(shape="custom", budgets_list=(6, 4, 5)), "must not increase, but 4 is followed by 5"),
        (dict(shape="custom", budgets_list=(20, 4)), r"custom budget 20 is outside \[1, 12\]"),
        (
            dict(shape="custom", budgets_list=(12, 1, 1), warmup_layers=1),
            "custom budget 1 leaves no top layer in skip mode: every budget must be above the 1 warm-up",
        ),
        (
            dict(shape="custom", budgets_list=(6, 4, 2), max_layers=12),
            r"max_layers 12 does not fit: custom budgets \[6, 4, 2\] start at 6 and end at 2",
        ),
        (dict(shape="custom", budgets_list=(6, 4, 2), min_layers=1), "min_layers 1 does not fit"),
        (dict(shape="full", max_layers=6), "max_layers 6 does not fit: full depth runs all 12 layers"),
        (dict(shape="zigzag"), "unknown schedule shape 'zigzag'"),
        (dict(mode="random"), "unknown mode 'random'"),
    ],
)
def test_invalid_settings_raise_clear_errors(kwargs, message):
    with pytest.raises(ScheduleError, match=message):
        Schedule(12, **{"shape": "linear", **kwargs})


def test_full_and_custom_take_bounds_that_agree_with_them():
    """A schedule file or table that writes the bounds these shapes imply reads back as the same schedule."""
    custom = Schedule(12, "custom", budgets_list=(6, 4, 2))
    assert Schedule(12, "custom", max_layers=6, min_layers=2, budgets_list=(6, 4, 2)) == custom
    assert Schedule.from_dict(custom.to_dict()) == custom
    assert Schedule(12, "full", max_layers=12, min_layers=12) == Schedule(12, "full")


def test_non_nested_sets_are_refused():
    with pytest.raises(ScheduleError, match="step 2 runs layer 3"):
        check_nested([(0, 1, 2, 3), (0, 1, 2), (0, 3)])


@pytest.mark.parametrize("target", [1.0, 2.0, 3.0, 4.0, 5.0])
def test_schedule_for_speedup_hits_target(target):
    sch = schedule_for_speedup(24, target, 64, warmup_layers=1)
    assert abs(sch.layer_speedup(64) - target) < 0.1 * target
    assert sch.min_layers > sch.warmup_layers


def test_json_round_trip():
    sch = Schedule(12, "custom", "middle", budgets_list=(10, 8, 8, 3))
    assert Schedule.from_dict(sch.to_dict()) == sch
    with pytest.raises(ScheduleError, match="unknown schedule field"):
        Schedule.from_dict({**sch.to_dict(), "bogus": 1})


def test_schedule_for_speedup_decays_from_full_depth_like_the_paper():
    sch = schedule_for_speedup(12, 2.0, 64, decay_span=25)
    assert sch.max_layers == 12 and sch.min_layers < 6  # a decay from the top, not a constant 6 -> 6
    steep = schedule_for_speedup(12, 5.0, 64, decay_span=60)  # unreachable from 12: max is lowered
    assert steep.max_layers < 12 and abs(steep.layer_speedup(64) - 5.0) < 0.25


def test_two_power_schedules_that_run_other_layers_never_read_alike():
    """`describe` said alpha with 6 significant digits: alpha 0.5 and 0.4999999 read alike and ran other layers."""
    a, b = Schedule(8, "power", "skip", 8, 2, alpha=0.5), Schedule(8, "power", "skip", 8, 2, alpha=0.4999999)
    assert a.layer_sets(5) != b.layer_sets(5) and a.describe() != b.describe()
    assert a.describe() == "power 8->2 (skip, warmup 1, alpha 0.5)"  # the short form where it is exact


def test_schedule_for_speedup_refuses_arguments_of_the_wrong_kind_naming_them():
    """A target given as text, a warmup of None or 1.5 and a negative or NaN tolerance were raw TypeErrors, an error
    blaming max_layers for a warmup of 1.5, or (tolerance -1) a false 'out of reach'."""
    for kw, said in (
        ({"target": "3"}, "target_speedup must be a finite number, got '3'"),
        ({"warmup_layers": None}, "warmup_layers must be a whole number, got None"),
        ({"warmup_layers": 1.5}, "warmup_layers must be a whole number, got 1.5"),
        ({"tolerance": -1}, "tolerance must be >= 0"),
        ({"tolerance": float("nan")}, "tolerance must be a finite number, got nan"),
    ):
        with pytest.raises(ScheduleError, match=re.escape(said)):
            schedule_for_speedup(**{"num_layers": 12, "target": 2.0, "max_new_tokens": 20, **kw})
    assert schedule_for_speedup(12, 2.0, 20, max_layers=10.0).max_layers == 10  # 10.0 from a table: the count


def test_a_target_no_floor_under_a_given_max_comes_near_is_refused_saying_what_that_max_gives():
    """`--target-speedup 3 --max-layers 2` ran 6x labelled 3x, and a sweep's 1.5x, 2x and 3x rows with `--max-layers
    4` ran one 3x schedule: a target far from every floor under the given max is refused, naming what it allows."""
    with pytest.raises(
        ScheduleError, match=re.escape("gives 6.00x over 20 tokens; choose a target of at least 6.00")
    ):
        schedule_for_speedup(12, 3.0, 20, max_layers=2)
    with pytest.raises(
        ScheduleError, match=r"^target_speedup 1.5x does not fit max_layers 4: .* 3.00x to "
    ) as e:
        schedule_for_speedup(12, 1.5, 20, max_layers=4)
    assert e.value.fields == ("target_speedup", "max_layers")
    with pytest.raises(ScheduleError, match=r"constant schedule of at most 3 .*; choose a target near 4.00"):
        schedule_for_speedup(12, 5.0, 20, "constant", max_layers=3)  # between the 4x and 6x it allows
    near = schedule_for_speedup(
        12, 3.0, 20, max_layers=2, nearest=True
    )  # an elastic plan's draw: the closest
    assert (near.max_layers, near.min_layers) == (2, 2)
    fits = schedule_for_speedup(12, 3.0, 20, max_layers=6)  # one within reach keeps its max and meets it
    assert fits.max_layers == 6 and fits.layer_speedup(20) == pytest.approx(3.0, rel=0.1)


def test_a_max_given_alone_runs_the_nearest_fit_to_the_default_target_never_a_refusal():
    """`--max-layers 4` alone (generate, train, adaptive's start, speculative's draft) was refused as "--target-speedup
    2x does not fit --max-layers 4", a target the user never typed: the 2x a parametric shape takes where nothing
    names its floor is the nearest fit under the given max."""
    for m in range(2, 13):  # 1: below the warmup layer and one top layer, refused as before
        for shape in ("linear", "power", "step"):
            got = schedule_from_settings(12, 26, shape, max_layers=m)
            assert got.max_layers == m
            assert got == schedule_for_speedup(12, 2.0, 26, shape, max_layers=m, nearest=True)
    with pytest.raises(ScheduleError, match="target_speedup 2x does not fit max_layers 4"):
        schedule_from_settings(12, 26, "linear", max_layers=4, target_speedup=2.0)  # asked for: refused


def test_a_constant_schedule_is_its_one_budget_and_says_so():
    """A constant schedule's max is its min: one met by a target speedup read "constant 12->4" and ran 4 layers at
    every step; a max and a min that differ are refused, not dropped; a file written with both reads as its min."""
    fitted = schedule_for_speedup(12, 3.0, 32, "constant")
    assert fitted.max_layers == fitted.min_layers and set(fitted.budgets(32)[1:]) == {fitted.min_layers}
    assert fitted.describe() == f"constant {fitted.min_layers} (skip, warmup 1)"
    with pytest.raises(ScheduleError, match="max_layers 6 and min_layers 4 differ: give one of them"):
        schedule_from_settings(12, 16, "constant", max_layers=6, min_layers=4)
    read = Schedule.from_dict({"num_layers": 12, "shape": "constant", "max_layers": 12, "min_layers": 4})
    assert (read.max_layers, read.min_layers) == (4, 4) and read.budgets(8) == [12] + [4] * 7


def test_a_constant_shape_given_its_budget_runs_it_at_every_step():
    """`--schedule constant --max-layers 8` is 8 layers at every step (it ran a 2x target's 6, labelled
    "constant 12->6"); given no budget at all it is the 2x target's, as the other parametric shapes are."""
    given = schedule_from_settings(12, 16, "constant", max_layers=8)
    assert (given.max_layers, given.min_layers) == (8, 8) and set(given.budgets(16)[1:]) == {8}
    default = schedule_from_settings(12, 16, "constant")
    assert default.layer_speedup(16) == pytest.approx(2.0, rel=0.05)
    faster = schedule_from_settings(12, 16, "constant", max_layers=8, target_speedup=3.0)
    assert faster.layer_speedup(16) > 2.5


def test_a_schedule_record_without_its_depth_is_a_schedule_error():
    """A kept run whose schedule lacked num_layers crashed the dashboard's reopen with a TypeError."""
    with pytest.raises(ScheduleError, match="a schedule must say its num_layers"):
        Schedule.from_dict({"shape": "linear"})


@pytest.mark.parametrize("value", [1e308, 10**400, 10**9 + 1])
def test_a_count_past_any_runs_length_is_refused(value):
    """1e308 in a schedule file is a whole number: it was taken, and a run's label printed its 309 digits."""
    for name in ("stages", "decay_span"):
        with pytest.raises(
            ScheduleError,
            match=f"^{name} must be at most 1,000,000,000 \\(past any run's length\\), got (1,000,000,001|about 10\\^\\d+)$",
        ):
            Schedule.from_dict({"num_layers": 12, "shape": "step", name: value})
    assert Schedule.from_dict({"num_layers": 12, "shape": "step", "decay_span": 10**9}).decay_span == 10**9


def test_a_schedule_files_odd_fields_are_said_plainly_and_a_long_list_in_one_line(tmp_path):
    """'the schedule is for '12' layers but the model has 12' for a count written as text, and an error quoting
    all 5000 budgets of a file (a 12,000-pixel message on the designer)."""
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"num_layers": "12", "shape": "linear", "mode": "skip"}))
    with pytest.raises(ScheduleError, match="num_layers must be a whole number, got '12'$"):
        Schedule.read_json(path, 12)
    budgets = [8] * 5000
    path.write_text(
        json.dumps({"num_layers": 12, "shape": "custom", "budgets_list": budgets, "max_layers": 10})
    )
    with pytest.raises(ScheduleError) as refused:
        Schedule.read_json(path, 12)
    assert (
        "[8, 8, 8, 8, 8, 8, ..., 8, 8] (5000 values)" in str(refused.value) and len(str(refused.value)) < 300
    )


@pytest.mark.parametrize("budgets", [None, 5, {8, 4}, {8: 1, 4: 2}, frozenset({6})])
def test_budgets_that_are_no_list_in_order_are_refused_naming_them(budgets):
    """None or a number failed as Python's "'NoneType' object is not iterable"; a set or a dict was taken in
    whatever order it iterates."""
    with pytest.raises(
        ScheduleError, match=r"^budgets_list must be a list of whole numbers, n\(1\), n\(2\)"
    ) as e:
        Schedule(12, "custom", budgets_list=budgets)
    assert e.value.field == "budgets_list"


def test_budgets_in_order_are_taken_from_any_sequence():
    import numpy as np

    for budgets in ([8, 4], (8, 4), range(8, 3, -4), np.array([8, 4])):
        assert Schedule(12, "custom", budgets_list=budgets).budgets_list == (8, 4)


@pytest.mark.parametrize(
    ("kwargs", "said", "fields"),
    [
        (
            {"shape": "linear", "min_layers": 3, "budgets_list": (5, 4)},
            "budgets_list belongs to shape custom; this Schedule's is shape linear",
            ("budgets_list", "shape"),
        ),
        (
            {"shape": "linear", "min_layers": 3, "alpha": 0.5},
            "alpha belongs to shape power; this Schedule's is shape linear",
            ("alpha", "shape"),
        ),
        (
            {"shape": "power", "min_layers": 3, "stages": 3},
            "stages belongs to shape step; this Schedule's is shape power",
            ("stages", "shape"),
        ),
        (
            {"shape": "linear", "mode": "exit", "min_layers": 2, "warmup_layers": 7},
            "warmup_layers are the layers a skip-mode schedule always runs; this Schedule's is mode exit",
            ("warmup_layers", "mode"),
        ),
    ],
)
def test_a_setting_the_schedule_does_not_read_is_refused_as_the_command_line_refuses_it(kwargs, said, fields):
    """Another shape's setting or warmup layers outside skip mode were kept: schedules that run the same layers
    compared unequal and hashed apart."""
    with pytest.raises(ScheduleError, match=re.escape(said)) as e:
        Schedule(12, **kwargs)
    assert e.value.fields == fields


def test_schedule_for_speedup_refuses_budgets_it_does_not_read():
    with pytest.raises(ScheduleError, match="budgets_list belongs to shape custom"):
        schedule_for_speedup(12, 3, 26, budgets_list=(4,))


def test_settings_every_schedule_reads_or_that_say_none_are_kept():
    """The decay span with any shape (training saves it for generation), a full-depth schedule's mode and warmup
    (the adaptive policy takes them from it), and 0 or 1 warmup layers outside skip mode (none)."""
    assert Schedule(12, "constant", "skip", 4, 4, decay_span=5).decay_span == 5
    assert Schedule(12, "full", "skip", warmup_layers=3).warmup_layers == 3
    assert Schedule(12, "full", "exit").mode == "exit"
    assert Schedule(12, "linear", "exit", min_layers=2, warmup_layers=0).warmup_layers == 0
    assert schedule_for_speedup(12, 3, 26, mode="middle", warmup_layers=0).mode == "middle"


def test_a_step_schedule_of_one_stage_is_refused_as_the_constant_it_runs():
    """stages=1 described itself as 'step 12->4 (..., 1 stages, ...)' but ran 4 at every step after the prefill."""
    with pytest.raises(
        ScheduleError, match="at least 2 stages, got stages 1: one stage runs min_layers"
    ) as e:
        Schedule(12, "step", min_layers=4, stages=1)
    assert e.value.fields == ("stages", "shape")
    with pytest.raises(ScheduleError, match="at least 2 stages"):
        schedule_for_speedup(12, 3, 26, shape="step", stages=1)
    two = Schedule(12, "step", min_layers=4, stages=2, decay_span=10)
    assert two.budgets(13)[1:] == [12] * 5 + [4] * 7 and "2 stages" in two.describe()


def test_a_record_with_settings_its_shape_does_not_read_opens_as_the_schedule_it_ran():
    """Schedules refuse another shape's setting (alpha beside linear) and warmup layers outside skip mode; a run
    history, trace or table written before that (the designer kept a power shape's alpha beside a linear one) must
    still open: its schedule ran the same layers without them."""
    old = {"num_layers": 12, "shape": "linear", "mode": "exit", "max_layers": 10, "min_layers": 2,
           "warmup_layers": 3, "alpha": 0.7, "stages": 6, "budgets_list": [9, 8]}  # fmt: skip
    with pytest.raises(ScheduleError):
        Schedule.from_dict(old)
    opened = Schedule.from_record(old)
    plain = Schedule(12, "linear", "exit", max_layers=10, min_layers=2)
    assert opened == plain and opened.layer_sets(30) == plain.layer_sets(30)
    power = {**old, "shape": "power", "mode": "skip", "min_layers": 4}  # its own settings kept
    assert Schedule.from_record(power) == Schedule.from_dict({**power, "stages": 4, "budgets_list": []})
    assert Schedule.from_record(power).alpha == 0.7 and Schedule.from_record(power).warmup_layers == 3


def test_older_records_of_full_depth_and_one_stage_steps_open():
    """Full depth recorded in exit mode with 3 warmup layers (the designer kept the skip mode's slider), and a step
    of one stage (the designer's slider started at 1), which ran min_layers at every step."""
    full = Schedule.from_record({"num_layers": 12, "shape": "full", "mode": "exit", "warmup_layers": 3})
    assert full.budgets(8) == [12] * 8
    step = {"num_layers": 12, "shape": "step", "mode": "skip", "max_layers": 10, "min_layers": 4, "stages": 1}
    with pytest.raises(ScheduleError, match="at least 2"):
        Schedule.from_dict(step)
    assert Schedule.from_record(step).budgets(8) == [12] + [4] * 7


def test_a_custom_schedule_says_a_held_budget_by_its_count():
    """A custom schedule with a long held tail was written out budget by budget: every title and label it named
    ran twenty lines of '3, 3, 3'. Runs of three or more are counted, and schedules that differ still read apart."""
    tail = Schedule(12, "custom", "exit", budgets_list=(11, 11, 11, *[3] * 300))
    assert tail.describe() == "custom [11×3, 3×300] (exit)"
    assert Schedule(12, "custom", "exit", budgets_list=(11, 11, 11, *[3] * 301)).describe() != tail.describe()
    assert (
        Schedule(12, "custom", "exit", budgets_list=(11, 11, 3, 3)).describe()
        == "custom [11, 11, 3, 3] (exit)"
    )


def test_a_held_budget_keeps_its_count_in_a_file_name():
    """'custom [12×3, 2]' became the file name of 'custom [12, 3, 2]': '12×3' is '12x3' there."""
    from skipcore.labels import file_stem

    held, listed = (
        Schedule(12, "custom", "exit", budgets_list=b).describe() for b in ((12, 12, 12, 2), (12, 3, 2))
    )
    assert file_stem(held) == "custom-12x3-2-exit" and file_stem(held) != file_stem(listed)


def test_warmup_layers_at_full_depth_outside_skip_mode_are_refused_by_the_mode():
    """A Schedule reads warmup layers at full depth (in skip mode): outside it they are refused for the mode, by the
    constructor's own fields (it said "no effect at full depth ... set target_speedup", no field of a Schedule)."""
    with pytest.raises(
        ScheduleError, match="warmup_layers are the layers a skip-mode schedule always runs"
    ) as e:
        Schedule(4, shape="full", mode="exit", warmup_layers=2)
    assert e.value.fields == ("warmup_layers", "mode")


def test_a_misspelt_keyword_of_the_fit_is_said_by_the_fit():
    """schedule_for_speedup(..., decayspan=25) surfaced as Schedule.__init__'s TypeError, naming a function the
    caller never called; a field the fit sets itself (min_layers, the floor it searches) was a duplicate argument."""
    from skipcore.errors import ArgumentTypeError

    for word in ("decayspan", "min_layers"):
        with pytest.raises(
            ArgumentTypeError, match=f"^schedule_for_speedup takes no keyword argument '{word}'; "
        ) as e:
            schedule_for_speedup(12, 3.0, 26, **{word: 3})
        assert "decay_span, alpha, stages" in str(e.value) and e.value.fields == (word,)
    assert schedule_for_speedup(12, 3.0, 26, decay_span=25).decay_span == 25


def test_a_target_over_one_token_says_there_is_no_decode_step_to_skip():
    """`schedule_for_speedup(12, 2.0, 1)` said 2x was out of reach as "12 layers at the lowest budget at every step
    give 1.00x": one token has no decode step, its pass is the prompt's at full depth. 1x still fits."""
    with pytest.raises(ScheduleError, match="needs decode steps: one new token comes from the prompt's pass"):
        schedule_for_speedup(12, 2.0, 1)
    assert schedule_for_speedup(12, 1.0, 1).layer_speedup(1) == 1.0
