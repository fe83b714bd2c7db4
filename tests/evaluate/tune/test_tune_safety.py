"""A tune from Python holds what the command line holds: a measured speedup flagged implausible is never chosen, a
trial that failed for good on a worker is said in one line, and `TuneSettings` checks its lists and keeps a
resumed study to one attention dtype."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from skipcore.errors import UserError
from skipcore.evaluate.sweep.executors import Failure, GridIncomplete
from skipcore.evaluate.sweep.units import WorkUnit
from skipcore.evaluate.tune import TuneSettings, check_settings, run_tune
from skipcore.evaluate.tune.choice import outcome
from skipcore.evaluate.tune.space import full_depth
from skipcore.evaluate.tune.trials import Task
from tests.helpers import write_csv


def trial_row(label: str, bleu: float, measured: float, flag: str = "", state: str = "trial") -> dict:
    return {"tune_state": state, "tune_label": label, "tune_trial": 0, "bleu": bleu, "layer_speedup": 1.2,
            "wall_speedup_decode": measured, "timing_flag": flag}  # fmt: skip


def test_a_flagged_timing_is_never_chosen():
    table = pd.DataFrame(
        [
            trial_row("full depth", 50.0, 1.0, state="reference"),
            trial_row(
                "too fast", 49.0, 1.88, "measured decode speedup 1.88x is above 1.2x its layer speedup"
            ),
            trial_row("plausible", 49.0, 1.1),
        ]
    )
    o = outcome(table, "bleu", "wall_speedup_decode", 45.0, 50.0, True)
    assert o.chosen["tune_label"] == "plausible"
    assert "too fast" not in set(o.front["tune_label"])


def test_a_trial_that_failed_for_good_is_said_in_one_line():
    task = Task(3, "trial", "m", "model", full_depth(4))
    failure = Failure(WorkUnit("m", 2, (task,)), (task,), "WorkerCrashedError: the worker died", 1)
    line = failure.line()
    assert "trial 3" in line and "WorkerCrashedError" in line and "after 1 try" in line
    assert "trial 3" in str(GridIncomplete([failure], pd.DataFrame(), "trials.parquet"))


@pytest.fixture
def base(model_dirs, tmp_path) -> dict:
    data = write_csv(tmp_path / "mine.csv", 4)
    return dict(model=str(model_dirs["opt"]), dataset=str(data), out=tmp_path / "tune", limit=4, batch_size=2,
                prune_after=0, max_new_tokens=4, trials=1, device="cpu", dtype="float32", progress=False)  # fmt: skip


@pytest.mark.parametrize(
    ("given", "want"),
    [
        ({"policies": "static"}, {"policies": ("static",)}),
        ({"policies": "static,adaptive"}, {"policies": ("static", "adaptive")}),
        ({"warmups": "1,2"}, {"warmups": (1, 2)}),
        ({"warmups": [2]}, {"warmups": (2,)}),
        ({"baseline_targets": "2"}, {"baseline_targets": (2.0,)}),
    ],
)
def test_a_list_setting_takes_what_its_flag_takes(base, given, want):
    s = check_settings(TuneSettings(**{**base, **given}))
    assert {k: getattr(s, k) for k in want} == want


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"warmups": "1,x"}, "warmups"),
        ({"warmups": (1.5,)}, "warmups"),
        ({"shapes": ("linear", 3)}, "shapes"),
        ({"baseline_targets": ("x",)}, "baseline_targets"),
        ({"modes": ""}, "modes"),
    ],
)
def test_a_list_setting_of_the_wrong_kind_is_one_line(base, given, said):
    with pytest.raises(UserError) as e:
        check_settings(TuneSettings(**{**base, **given}))
    assert e.value.field == said and said in str(e.value)


def test_a_study_keeps_one_attention_dtype(base):
    first = run_tune(TuneSettings(**base, attention_dtype="float32"))
    assert math.isfinite(first.outcome.floor)
    with pytest.raises(UserError, match="attention_dtype='float32' \\(not 'model'\\)"):
        run_tune(TuneSettings(**base))


@pytest.mark.parametrize("objective", ["layer", "flops", "measured"])
def test_a_repeat_count_below_one_is_refused_whatever_the_objective(base, objective):
    """repeats=-1 was accepted (and recorded nowhere) unless the objective was measured."""
    with pytest.raises(UserError, match=r"repeats must be a whole number >= \d+, got -1") as e:
        check_settings(TuneSettings(**{**base, "objective": objective, "repeats": -1}))
    assert e.value.field == "repeats"


def test_no_warmups_for_skip_mode_is_said_as_empty(base):
    """warmups=() said 'choose warmups below 11', as if the values were too high."""
    with pytest.raises(UserError, match=r"^warmups is empty: choose at least one") as e:
        check_settings(TuneSettings(**{**base, "warmups": ()}))
    assert e.value.field == "warmups"
    assert check_settings(TuneSettings(**{**base, "modes": ("exit",), "warmups": ()})).warmups == ()


def test_a_batch_size_its_rows_cannot_fill_runs_as_the_batch_they_fill_and_is_said(base, tmp_path):
    """Trials at batch 8 on 4 rows ran one batch of 4 and were recorded and reported as batch 8: they run, and are
    recorded, as the one batch of 4, said in a warning."""
    from skipcore.errors import SkipcoreWarning
    from skipcore.evaluate.sweep import read_sweep

    with pytest.warns(
        SkipcoreWarning, match="batch_size 8 is more than the 4 rows searched .limit 4.: they run as one"
    ):
        run_tune(TuneSettings(**{**base, "batch_size": 8}))
    trials, _ = read_sweep(base["out"] / "trials.parquet")
    assert set(trials["batch_size"]) == {4}
