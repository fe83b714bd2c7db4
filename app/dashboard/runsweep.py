"""A sweep small enough to run from the trade-off page, through the library's own sweep runner.

`skipcore.evaluate.sweep_rows` evaluates a grid with an engine the page already holds (cached) and reports each
finished row; it writes no file. Measured speedups are paired with full depth and repeated (3 times here, after
a warm-up), with their interval and plausibility flag, exactly as in the shipped sweep, whose column names the
rows carry. Speculative SkipDecode takes part with the first target's schedule as its draft (in the first static
mode, skip when none is chosen); transformers' generate() does not (it needs a Llama-family model and batch size 1).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from skipcore.errors import UserError

Progress = Callable[[pd.DataFrame], None]  # the grid's progress table, after every change
QUEUED, RUNNING, DONE = "queued", "running…", "done"


@dataclass(frozen=True)
class SweepSettings:
    targets: tuple[float, ...] = (2.0, 3.0)
    modes: tuple[str, ...] = ("skip", "exit")
    calm_thresholds: tuple[float, ...] = ()
    adaptive_thresholds: tuple[float, ...] = ()
    adaptive_drop: int = 2
    adaptive_min_layers: int = 3
    # speculative: one row per value, drafting with the first target's schedule
    draft_tokens: tuple[int, ...] = ()
    num_examples: int = 8
    max_new_tokens: int = 32
    batch_size: int = 8
    dataset: str = "data/e2e_synth"
    split: str = "dev"
    decay_span: int | None = None
    repeats: int = 3  # paired timed runs per setting

    def num_runs(self) -> int:
        static = len([t for t in self.targets if t > 1.0]) * len(self.modes)
        speculative = len(self.draft_tokens) if self.targets else 0
        return 1 + static + len(self.calm_thresholds) + len(self.adaptive_thresholds) + speculative


def _config(model: str, s: SweepSettings):
    from skipcore.evaluate import SweepConfig, resolve_lengths

    chosen = {
        "static": s.modes,
        "calm": s.calm_thresholds,
        "adaptive": s.adaptive_thresholds,
        "speculative": s.draft_tokens if s.targets else (),
    }
    policies = tuple(name for name, values in chosen.items() if values)
    cfg = SweepConfig(
        model=model,
        dataset=s.dataset,
        out=Path(tempfile.gettempdir()) / "skipcore-dashboard-sweep.parquet",  # never written
        split=s.split,
        limit=s.num_examples,
        targets=s.targets,
        modes=s.modes or (("skip",) if "speculative" in policies else ()),  # the first mode drafts
        batch_sizes=(s.batch_size,),
        policies=policies or ("static",),
        calm_thresholds=s.calm_thresholds,
        adaptive_thresholds=s.adaptive_thresholds,
        adaptive_drops=(s.adaptive_drop,),
        adaptive_min_layers=(s.adaptive_min_layers,),
        speculative_targets=s.targets[:1],
        draft_tokens=s.draft_tokens,
        max_new_tokens=s.max_new_tokens,
        decay_span=s.decay_span,
        progress=False,
        repeats=s.repeats,
        timing_limit=None,
    )
    return resolve_lengths(cfg)  # the model's own defaults, as the CLI sweep uses them (speedup horizon)


def progress_table(grid, rows: list[dict], running: int | None) -> pd.DataFrame:
    """One line per setting of the grid: its label, whether it is done (with what it gave), running or queued."""
    from skipcore.labels import column_title, setting_label

    out = []
    for i, s in enumerate(grid):
        row = rows[i] if i < len(rows) else {}
        out.append(
            {
                "setting": setting_label(s),
                "status": DONE if row else RUNNING if i == running else QUEUED,
                column_title("bleu"): row.get("bleu"),
                column_title("layer_speedup"): row.get("layer_speedup"),
                column_title("wall_speedup_decode"): row.get("wall_speedup_decode"),
            }
        )
    return pd.DataFrame(out)


def run_small_sweep(
    engine, model: str, settings: SweepSettings, progress: Progress | None = None
) -> pd.DataFrame:
    """One row per setting (full depth first) on the first examples of a split, each timed against full depth;
    `progress` gets the grid's progress table as each setting starts and ends."""
    from skipcore.data import load_examples
    from skipcore.evaluate import build_grid, check_config, sweep_rows

    cfg = check_config(_config(model, settings))
    examples = load_examples(settings.dataset, split=settings.split, limit=settings.num_examples)
    if not examples:
        raise UserError(f"no examples in {settings.dataset} [{settings.split}]")
    grid = build_grid(cfg)
    rows: list[dict] = []

    def finished(s, row: dict, _result) -> None:
        setting = {
            "policy": s.policy,
            "shape": s.shape,
            "mode": s.mode,
            "warmup": s.warmup,
            "target_speedup": s.target_speedup,
            "batch_size": s.batch_size,
            "calm_threshold": s.calm_threshold,
            "adaptive_threshold": s.adaptive_threshold,
            "adaptive_drop": s.adaptive_drop,
            "adaptive_min_layers": s.adaptive_min_layers,
            "draft_tokens": s.draft_tokens,
            "assistant_exit": s.assistant_exit,
        }
        rows.append({**setting, **row})
        if progress:
            progress(progress_table(grid, rows, None))

    def started(s) -> None:
        if progress:
            progress(progress_table(grid, rows, len(rows)))

    sweep_rows(engine, examples, grid, cfg, finished, on_start=started)
    return pd.DataFrame(rows)
