"""A sweep small enough to run from the trade-off page, through the library's own sweep runner.

`skipcore.evaluate.sweep.sweep_rows` evaluates a grid with an engine the page already holds (cached) and reports each
finished row; it writes no file. Measured speedups are paired with full depth and repeated (3 times here, after
a warm-up), with their interval and plausibility flag, exactly as in the shipped sweep, whose column names the
rows carry. Speculative SkipDecode takes part with the first target's schedule as its draft (in the first static
mode, skip when none is chosen); transformers' generate() does not (it needs a Llama model and batch size 1).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from skipcore.errors import UserError

Progress = Callable[[pd.DataFrame], None]  # the grid's progress table, after every change
QUEUED, RUNNING, DONE = "queued", "running…", "done"


@dataclass(frozen=True)
class SweepSettings:
    targets: tuple[float, ...] = (2.0, 3.0)
    modes: tuple[str, ...] = ("skip", "exit")
    # the other policies that run (speculative drafts with the first target's schedule) and their parameters'
    # values by column, as the sweep lists them (`skipcore.evaluate.sweep.SweepConfig.policy_values`)
    policies: tuple[str, ...] = ()
    policy_values: dict[str, tuple] = field(default_factory=dict)
    num_examples: int = 8
    max_new_tokens: int = 32
    batch_size: int = 8
    dataset: str = "data/e2e_synth"
    split: str = "dev"
    decay_span: int | None = None
    repeats: int = 3  # paired timed runs per setting

    def num_runs(self, model: str) -> int:
        from skipcore.evaluate.sweep import build_grid

        return len(build_grid(_config(model, self)))

    def words(self) -> str:
        """The settings in a line (the result says them): each running policy with its parameters' values."""
        from skipcore.labels import counted, sweep_policies
        from skipcore.policies.params import params_of

        parts = [f"targets {', '.join(f'{t:g}x' for t in self.targets) or 'none'}"]
        parts.append(f"modes {', '.join(self.modes) or 'none'}")
        for name in self.policies:
            values = [
                f"{p.title} {'/'.join(f'{v:g}' if isinstance(v, float | int) else str(v) for v in self.policy_values[p.column])}"
                for p in params_of(sweep_policies()[name])
                if p.column in self.policy_values
            ]
            parts.append(f"{name} ({', '.join(values)})")
        parts += [
            counted(self.num_examples, "example"),
            f"max {self.max_new_tokens} new tokens",
            f"batch {self.batch_size}",
        ]
        return ", ".join(parts)


def _config(model: str, s: SweepSettings):
    from skipcore.evaluate.sweep import SweepConfig

    policies = (("static",) if s.modes else ()) + tuple(
        name for name in s.policies if name != "speculative" or s.targets
    )
    return SweepConfig(
        model=model,
        dataset=s.dataset,
        out=Path(tempfile.gettempdir()) / "skipcore-dashboard-sweep.parquet",  # never written
        split=s.split,
        limit=s.num_examples,
        targets=s.targets,
        modes=s.modes or (("skip",) if "speculative" in policies else ()),  # the first mode drafts
        batch_sizes=(s.batch_size,),
        policies=policies or ("static",),
        policy_values=dict(s.policy_values),
        speculative_targets=s.targets[:1],
        max_new_tokens=s.max_new_tokens,
        decay_span=s.decay_span,
        progress=False,
        repeats=s.repeats,
        timing_limit=None,
    )


def sweep_work(engine, model: str, settings: SweepSettings) -> list:
    """What the sweep will decode (`skipcore.measure.estimate.sweep_work`), for its time estimate: its grid over
    the first examples of the split, each setting timed against full depth."""
    from app.dashboard.estimates import prompt_tokens, split_prompts
    from skipcore.evaluate.sweep import build_grid
    from skipcore.measure.estimate import sweep_work as work

    cfg = _config(model, settings)
    prompts = split_prompts(settings.dataset, settings.split, settings.num_examples)
    if not prompts:
        return []
    grid = build_grid(cfg)
    tokens = prompt_tokens(engine, prompts)
    return work(grid, len(prompts), settings.max_new_tokens, tokens, settings.repeats, cfg.timing_limit)


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
    from skipcore.evaluate.sweep import build_grid, check_config, resolve_lengths, sweep_rows
    from skipcore.evaluate.sweep.settings import fit_batches
    from skipcore.models.chat import in_trained_format

    cfg = check_config(resolve_lengths(_config(model, settings)))  # the model's own defaults, as the CLI's
    examples = load_examples(settings.dataset, split=settings.split, limit=settings.num_examples)
    if not examples:
        raise UserError(f"no examples in {settings.dataset} [{settings.split}]")
    # the rows as the model was trained to read them, as the command line's sweep gives them
    examples, _ = in_trained_format(examples, model)
    cfg = fit_batches(cfg, len(examples))  # the page fits its batch to its examples first: said there
    grid = build_grid(cfg)
    rows: list[dict] = []

    def finished(s, row: dict, _result) -> None:
        setting = {k: v for k, v in s.to_dict().items() if k not in ("model", "model_role")}
        rows.append({**setting, **row})
        if progress:
            progress(progress_table(grid, rows, None))

    def started(s) -> None:
        if progress:
            progress(progress_table(grid, rows, len(rows)))

    sweep_rows(engine, examples, grid, cfg, finished, on_start=started)
    return pd.DataFrame(rows)
