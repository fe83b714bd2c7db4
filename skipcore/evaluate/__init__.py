"""Evaluation: quality against cost over grids of settings, and the baselines the paper is compared with.

The pieces, one idea each: `settings` (what a sweep is asked: `SweepConfig` and one cell of its grid, `Setting`),
`grid` (one entry per policy: how its settings are listed, checked, built and evaluated), `runner` (`run_sweep`
and `sweep_rows`: each row evaluated, written at once, resumable), `store` (the results file: one writer, rows
keyed by setting, atomic), `quality` (generated text scored against references beside its run's costs, and the
sweep's Markdown tables), `transformers_baseline` (transformers' own `generate(assistant_early_exit=n)`, the
public baseline), `bench` (wall-clock tokens/s of our paths against `generate()` on random-weight models).
The names below are the sweep API (what `skipcore.sweep` offered before the layout by role).
"""

from skipcore.evaluate.grid import POLICY_GRID, build_grid, policy_for
from skipcore.evaluate.runner import evaluate_setting, run_sweep, sweep_rows
from skipcore.evaluate.settings import Setting, SweepConfig, check_config, resolve_lengths
from skipcore.evaluate.store import read_sweep

__all__ = [
    "POLICY_GRID",
    "Setting",
    "SweepConfig",
    "build_grid",
    "check_config",
    "evaluate_setting",
    "policy_for",
    "read_sweep",
    "resolve_lengths",
    "run_sweep",
    "sweep_rows",
]
