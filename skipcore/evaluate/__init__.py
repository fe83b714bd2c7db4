"""Evaluation: quality against cost over grids of settings, and the baselines the paper is compared with.

The pieces, one idea each: `settings` (what a sweep is asked: `SweepConfig` and one cell of its grid, `Setting`),
`grid` (one entry per policy: how its settings are listed, checked, built and evaluated), `rows` (settings
evaluated on a loaded model: `sweep_rows`, with where each row ran), `units` (the unit of work that stays on one
device, and running one in any process), `executors` (where units run: the interface and `InProcessExecutor`),
`ray_executor` (`RayExecutor`: units as Ray tasks, Ray imported only when used), `runner` (`run_sweep`: each row
written at once by this process alone, resumable), `store` (the results file: one writer, rows keyed by setting,
atomic), `quality` (generated text scored against references beside its run's costs, and the sweep's Markdown
tables), `transformers_baseline` (transformers' own `generate(assistant_early_exit=n)`, the public baseline),
`bench_plan` (what a bench run times, checked before any model is built), `bench` (wall-clock tokens/s of our
paths against `generate()`, paired with full depth), `bench_results` (the bench's results file and table, written
after every setting), `bench_summary` (a results file in a few lines, and the GPU plan's targets).
The names below are the sweep API and the executors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from skipcore.lazy_exports import lazy_exports

# public name -> the module that defines it, imported on first use (PEP 562): a command's flags import
# only the modules they are built from, so --help does not pay for torch, transformers and pandas
_EXPORTS: dict[str, str] = {
    "Failure": "skipcore.evaluate.executors",
    "GridIncomplete": "skipcore.evaluate.executors",
    "InProcessExecutor": "skipcore.evaluate.executors",
    "SweepExecutor": "skipcore.evaluate.executors",
    "POLICY_GRID": "skipcore.evaluate.grid",
    "build_grid": "skipcore.evaluate.grid",
    "policy_for": "skipcore.evaluate.grid",
    "RayExecutor": "skipcore.evaluate.ray_executor",
    "evaluate_setting": "skipcore.evaluate.rows",
    "sweep_rows": "skipcore.evaluate.rows",
    "run_sweep": "skipcore.evaluate.runner",
    "Setting": "skipcore.evaluate.settings",
    "SweepConfig": "skipcore.evaluate.settings",
    "check_config": "skipcore.evaluate.settings",
    "resolve_lengths": "skipcore.evaluate.settings",
    "read_sweep": "skipcore.evaluate.store",
}

if TYPE_CHECKING:  # what type checkers and the API reference see
    from skipcore.evaluate.executors import Failure, GridIncomplete, InProcessExecutor, SweepExecutor
    from skipcore.evaluate.grid import POLICY_GRID, build_grid, policy_for
    from skipcore.evaluate.ray_executor import RayExecutor
    from skipcore.evaluate.rows import evaluate_setting, sweep_rows
    from skipcore.evaluate.runner import run_sweep
    from skipcore.evaluate.settings import Setting, SweepConfig, check_config, resolve_lengths
    from skipcore.evaluate.store import read_sweep

__all__ = [
    "POLICY_GRID",
    "Failure",
    "GridIncomplete",
    "InProcessExecutor",
    "RayExecutor",
    "Setting",
    "SweepConfig",
    "SweepExecutor",
    "build_grid",
    "check_config",
    "evaluate_setting",
    "policy_for",
    "read_sweep",
    "resolve_lengths",
    "run_sweep",
    "sweep_rows",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
