"""A tune's Optuna study: two objectives (quality and speedup, both maximised) under one constraint (quality at
least the floor), kept in an SQLite file so that a rerun resumes it.

Quality is told up to the floor: above it, more quality is worth nothing to the question asked (the fastest setting
at or above the floor), so among the settings that meet the floor the sampler seeks speed, and among those that do
not, quality. The trials table keeps every setting's own quality.

The sampler is Optuna's TPE (multi-objective, with the floor as a constraint: `Trial.set_constraint`), seeded for each
draw from the settings' seed and the trials done, so a resumed study draws what the uninterrupted one would have. Multi-
objective studies cannot report intermediate values, so a trial stopped early is told as PRUNED with its gap to
the floor on the rows it was scored on; the sampler counts it infeasible. A trial left running by a run that
stopped (Ctrl-C, a crash) is marked failed when the study is opened again and its point asked again first, so
nothing of the search is lost; where its row had been written, the new trial takes that row without scoring again.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator
from pathlib import Path

import optuna
import sqlalchemy.exc
from optuna.trial import TrialState

from skipcore.errors import UserError, first_line
from skipcore.evaluate.tune.trials import PRUNED

STUDY_NAME = "skipcore-tune"
DIRECTIONS = ("maximize", "maximize")  # quality, speedup
GAP = "floor_gap"  # a trial's constraint: the floor minus its quality (> 0: under the floor, infeasible)
DONE = (TrialState.COMPLETE, TrialState.PRUNED)  # the trials a study's size counts


@contextlib.contextmanager
def storage_said(path: Path) -> Iterator[None]:
    """Optuna's storage failures inside the block (a full disk, a database another program locked or broke) as one
    line naming the study's file and the database's own words."""
    try:
        yield
    except (optuna.exceptions.StorageInternalError, sqlalchemy.exc.SQLAlchemyError) as e:
        root: BaseException = e
        while root.__cause__ is not None or root.__context__ is not None:
            root = root.__cause__ or root.__context__
        said = first_line(root)
        raise UserError(f"cannot write the study {path}: {said}") from e


def open_study(path: Path, seed: int, trials: int) -> optuna.Study:
    """The study in `path` (created, or loaded to resume), with a sampler seeded past the trials it holds."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        storage=f"sqlite:///{path}", study_name=STUDY_NAME, directions=list(DIRECTIONS), load_if_exists=True
    )
    if list(study.directions) != [optuna.study.StudyDirection.MAXIMIZE] * 2:
        raise UserError(f"{path} holds another kind of study; it will not be used", field="out")
    study.sampler = _sampler(seed, trials, 0, 0, 0, 0)
    return study


def _sampler(
    seed: int, trials: int, done: int, pending: int, refused: int, attempt: int
) -> optuna.samplers.BaseSampler:
    """TPE seeded for one draw: from the study's seed, the trials done, those asked and not yet told (a batch
    run side by side), the trials refused so far (`refused`: a failed trial does not move `done`, and TPE does not
    learn from it, so without it the next draw would be the same point, forever) and the draws refused in this
    ask. TPE keeps no state but its generator, so a draw is a function of the trials told and these numbers: a
    study stopped and run again draws what it would have drawn run whole (a sampler seeded once per run starts its
    generator over at every resume)."""
    import numpy as np

    key = np.random.SeedSequence([seed, done, pending, refused, attempt]).generate_state(1)[0]
    with warnings.catch_warnings():  # multivariate TPE (the schedule's knobs move together) is "experimental"
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(
            seed=int(key), n_startup_trials=max(3, min(10, trials // 4)), multivariate=True, group=True
        )


def done(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=DONE))


def refused(study: optuna.Study) -> int:
    """The trials told failed for a reason of their own (`refused`: a point no policy runs, a row with no number
    to tell, a setting that failed on a worker), not those a stopped run left running."""
    return sum("refused" in t.user_attrs for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)))


def settle_stopped(study: optuna.Study) -> int:
    """Trials a stopped run left running: failed, and their points asked again first. Returns how many."""
    stale = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    for t in stale:
        study.tell(t.number, state=TrialState.FAIL)
        study.enqueue_trial(t.params, user_attrs={"asked_again_for": t.number})
    return len(stale)


def ask(study: optuna.Study, suggest, check, seed: int | None = None, trials: int = 0, tries: int = 20):
    """A new trial and its candidate (`suggest(trial)`), one that `check` accepts: a point no policy can run
    (a value its own check refuses) is told failed and another asked. With `seed`, each draw's sampler is seeded
    by what the study holds (`_sampler`, TPE for a search of `trials`), so a resumed study goes on as the
    uninterrupted one would; without, the study's own sampler draws."""
    pending = len(study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))
    before = refused(study)
    for attempt in range(tries):
        if seed is not None:
            study.sampler = _sampler(seed, trials, done(study), pending, before, attempt)
        trial = study.ask()
        try:
            candidate = suggest(trial)
            check(candidate)
            return trial, candidate
        except UserError as e:
            trial.set_user_attr("refused", str(e))
            study.tell(trial, state=TrialState.FAIL)
    raise UserError(f"the search drew {tries} settings in a row that cannot run; narrow the search space")


def tell(
    study: optuna.Study, trial, row: dict, metric: str, speedup: str, floor: float, prefix_floor: float
) -> TrialState:
    """A scored row to the study: a finished trial's quality and speedup, or a stopped one as pruned; its gap to
    the floor (on the rows it was scored on) for the sampler's constraint. A row with no finite number to tell (a
    measured speedup that could not be timed) is told failed, `refused` saying why. Returns the state told."""
    stopped = row["tune_state"] == PRUNED
    quality = float(row["tune_prefix_quality"] if stopped else row[metric])
    trial.set_user_attr("key", row["setting_id"])
    trial.set_user_attr("label", row["tune_label"])
    values = [quality] if stopped else [quality, float(row[speedup])]
    if not all(math.isfinite(v) for v in values):
        said = metric if not math.isfinite(quality) else speedup
        trial.set_user_attr("refused", f"no {said} for this setting")
        study.tell(trial, state=TrialState.FAIL)
        return TrialState.FAIL
    trial.set_constraint(GAP, (prefix_floor if stopped else floor) - quality)
    if stopped:
        study.tell(trial, state=TrialState.PRUNED)
        return TrialState.PRUNED
    study.tell(trial, [min(quality, floor), values[1]])  # quality counts up to the floor
    return TrialState.COMPLETE


def seed_with(study: optuna.Study, points: list[dict]) -> None:
    """Start a new study from known points (the schedule a model was trained at, where it was trained at one; the
    paper's linear schedule at a few targets)."""
    if study.get_trials(deepcopy=False):
        return
    for params in points:
        study.enqueue_trial(params, user_attrs={"seeded": "known schedule"})


def seconds_spent(study: optuna.Study) -> float:
    """The time the study's trials took, all runs together. A trial a stopped run left running is not counted: it
    was told failed only when the next run began (`settle_stopped`), so its span holds the time between the runs."""
    trials = study.get_trials(deepcopy=False)
    stopped = {t.user_attrs.get("asked_again_for") for t in trials}
    spent = 0.0
    for t in trials:
        if t.number in stopped:
            continue
        if t.datetime_start is not None and t.datetime_complete is not None:
            spent += (t.datetime_complete - t.datetime_start).total_seconds()
    return spent
