"""The sweep: quality against cost over a grid of settings, each row written at once and a rerun resuming.

One idea per module: `settings` (what a sweep is asked: `SweepConfig` and one cell of its grid, `Setting`),
`grid` (one entry per policy: how its settings are listed, checked, built and evaluated), `rows` (settings
evaluated on a loaded model: `sweep_rows`, with where each row ran), `units` (the unit of work that stays on one
device, and running one in any process), `executors` (where units run: the interface and `InProcessExecutor`),
`ray_executor` (`RayExecutor`: units as Ray tasks, Ray imported only when used), `runner` (`run_sweep`: each row
written at once by this process alone, resumable), `store` (the results file: one writer, rows keyed by setting,
atomic), `quality` (generated text scored against references beside its run's costs, and the sweep's Markdown
tables). The tune (`skipcore.evaluate.tune`) runs its trials on the sweep's units, executors, quality and store.
The names below are the sweep API and the executors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from skipcore.lazy_exports import lazy_exports

# public name -> the module that defines it, imported on first use (PEP 562): a command's flags import
# only the modules they are built from, so --help does not pay for torch, transformers and pandas
_EXPORTS: dict[str, str] = {
    "Failure": "skipcore.evaluate.sweep.executors",
    "GridIncomplete": "skipcore.evaluate.sweep.executors",
    "InProcessExecutor": "skipcore.evaluate.sweep.executors",
    "SweepExecutor": "skipcore.evaluate.sweep.executors",
    "POLICY_GRID": "skipcore.evaluate.sweep.grid",
    "build_grid": "skipcore.evaluate.sweep.grid",
    "policy_for": "skipcore.evaluate.sweep.grid",
    "RayExecutor": "skipcore.evaluate.sweep.ray_executor",
    "evaluate_setting": "skipcore.evaluate.sweep.rows",
    "sweep_rows": "skipcore.evaluate.sweep.rows",
    "run_sweep": "skipcore.evaluate.sweep.runner",
    "Setting": "skipcore.evaluate.sweep.settings",
    "SweepConfig": "skipcore.evaluate.sweep.settings",
    "check_config": "skipcore.evaluate.sweep.settings",
    "resolve_lengths": "skipcore.evaluate.sweep.settings",
    "read_sweep": "skipcore.evaluate.sweep.store",
}

if TYPE_CHECKING:  # what type checkers and the API reference see
    from skipcore.evaluate.sweep.executors import Failure, GridIncomplete, InProcessExecutor, SweepExecutor
    from skipcore.evaluate.sweep.grid import POLICY_GRID, build_grid, policy_for
    from skipcore.evaluate.sweep.ray_executor import RayExecutor
    from skipcore.evaluate.sweep.rows import evaluate_setting, sweep_rows
    from skipcore.evaluate.sweep.runner import run_sweep
    from skipcore.evaluate.sweep.settings import Setting, SweepConfig, check_config, resolve_lengths
    from skipcore.evaluate.sweep.store import read_sweep

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
