"""`skipcore tune`: the fastest schedule that keeps a quality floor, found on held-out data with Optuna.

One idea per module: `settings` (what a tune is asked: `TuneSettings`, each setting with its flag, checked before
any work), `space` (what a trial tries: `Candidate`, drawn by `SearchSpace` from schedules' fields and each policy's
declared parameters), `trials` (scoring a task on a loaded engine, stopping a trial early under the floor, as the
sweep's executors run it), `table` (a tune's rows in the sweep's columns), `study` (the Optuna study in SQLite:
objectives, the floor as a constraint, resuming), `choice` (the front and the chosen setting), `compare` (a setting
against the paper's linear schedule at equal speedup and equal quality), `holdout` (the chosen setting scored
once on a split the search never read), `report` (`report.md`), `folder` (the output folder: its own files only,
atomic), `runner` (`run_tune`), `work` (what a tune decodes, for its time estimate).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from skipcore.lazy_exports import lazy_exports

# public name -> the module that defines it, imported on first use (PEP 562): a command's flags import
# only the modules they are built from, so --help does not pay for torch, transformers and pandas
_EXPORTS: dict[str, str] = {
    "TuneOutcome": "skipcore.evaluate.tune.choice",
    "quality_at": "skipcore.evaluate.tune.compare",
    "speedup_at": "skipcore.evaluate.tune.compare",
    "TuneResult": "skipcore.evaluate.tune.runner",
    "run_tune": "skipcore.evaluate.tune.runner",
    "ABOUT": "skipcore.evaluate.tune.settings",
    "TuneSettings": "skipcore.evaluate.tune.settings",
    "check_settings": "skipcore.evaluate.tune.settings",
    "flag_names": "skipcore.evaluate.tune.settings",
    "tune_flags": "skipcore.evaluate.tune.settings",
    "Candidate": "skipcore.evaluate.tune.space",
    "SearchSpace": "skipcore.evaluate.tune.space",
    "tune_work": "skipcore.evaluate.tune.work",
}

if TYPE_CHECKING:  # what type checkers and the API reference see
    from skipcore.evaluate.tune.choice import TuneOutcome
    from skipcore.evaluate.tune.compare import quality_at, speedup_at
    from skipcore.evaluate.tune.runner import TuneResult, run_tune
    from skipcore.evaluate.tune.settings import ABOUT, TuneSettings, check_settings, flag_names, tune_flags
    from skipcore.evaluate.tune.space import Candidate, SearchSpace
    from skipcore.evaluate.tune.work import tune_work

__all__ = [
    "ABOUT",
    "Candidate",
    "SearchSpace",
    "TuneOutcome",
    "TuneResult",
    "TuneSettings",
    "check_settings",
    "flag_names",
    "quality_at",
    "run_tune",
    "speedup_at",
    "tune_flags",
    "tune_work",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
