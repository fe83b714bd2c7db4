"""A sweep small enough to run from the trade-off page, through `skipcore.sweep`'s own grid and evaluation.

`skipcore.sweep.run_sweep` loads its model and writes files; the page already holds the model (cached) and
wants a progress bar, so it walks the same grid with `build_grid` and `run_setting` and adds the wall-clock
speedups against full depth the way the sweep does. The rows carry the sweep's column names, so the page
draws them exactly like the shipped sweep.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from skipcore.errors import UserError

Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class SweepSettings:
    targets: tuple[float, ...] = (2.0, 3.0)
    modes: tuple[str, ...] = ("skip", "exit")
    calm_thresholds: tuple[float, ...] = ()
    num_examples: int = 8
    max_new_tokens: int = 32
    batch_size: int = 8
    dataset: str = "data/e2e_synth"
    split: str = "dev"
    decay_span: int | None = None

    def num_runs(self) -> int:
        static = len([t for t in self.targets if t > 1.0]) * len(self.modes)
        return 1 + static + len(self.calm_thresholds)


def _config(model: str, s: SweepSettings):
    from skipcore.sweep import SweepConfig, resolve_lengths

    policies = (*(["static"] if s.modes else []), *(["calm"] if s.calm_thresholds else []))
    cfg = SweepConfig(
        model=model,
        dataset=s.dataset,
        out=Path(tempfile.gettempdir()) / "skipcore-dashboard-sweep.parquet",  # never written
        split=s.split,
        limit=s.num_examples,
        targets=s.targets,
        modes=s.modes,
        batch_sizes=(s.batch_size,),
        policies=policies or ("static",),
        calm_thresholds=s.calm_thresholds,
        max_new_tokens=s.max_new_tokens,
        decay_span=s.decay_span,
        progress=False,
    )
    return resolve_lengths(cfg)  # the model's own defaults, as the CLI sweep uses them (speedup horizon)


def _wall_speedups(row: dict, full: dict) -> dict:
    """As in skipcore.sweep: end-to-end seconds and ms per decode step, against full depth in this run."""
    row["wall_speedup_total"] = full["seconds"] / row["seconds"] if row["seconds"] else float("nan")
    per_step = row["decode_ms_per_step"]
    row["wall_speedup_decode"] = full["decode_ms_per_step"] / per_step if per_step else float("nan")
    return row


def run_small_sweep(
    engine, model: str, settings: SweepSettings, progress: Progress | None = None
) -> pd.DataFrame:
    """One row per setting (full depth first, the timing reference) on the first examples of a split."""
    from skipcore.data import load_examples
    from skipcore.sweep import build_grid, run_setting

    cfg = _config(model, settings)
    examples = load_examples(settings.dataset, split=settings.split, limit=settings.num_examples)
    if not examples:
        raise UserError(f"no examples in {settings.dataset} [{settings.split}]")
    grid = build_grid(cfg)
    if progress:
        progress(0, len(grid), "warming up")
    warm = replace(cfg, max_new_tokens=min(4, cfg.max_new_tokens))  # first calls pay one-off set-up costs
    run_setting(engine, examples[: settings.batch_size], grid[0], warm)
    rows: list[dict] = []
    full: dict | None = None
    for i, s in enumerate(grid):
        if progress:
            progress(i, len(grid), s.label())
        row, _ = run_setting(engine, examples, s, cfg)
        if s.is_full:
            full = row
        setting = {
            "policy": s.policy,
            "shape": s.shape,
            "mode": s.mode,
            "warmup": s.warmup,
            "target_speedup": s.target_speedup,
            "batch_size": s.batch_size,
            "calm_threshold": s.calm_threshold,
        }
        rows.append({**setting, **row})
    if progress:
        progress(len(grid), len(grid), "done")
    assert full is not None  # build_grid puts full depth first
    return pd.DataFrame([_wall_speedups(r, full) for r in rows])
