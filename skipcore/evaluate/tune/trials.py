"""Scoring what a tune asks for, in whichever process runs it: one `Task` (a trial's candidate, or a row that is no
trial: the floor's full depth, the held-out evaluation's settings) on a loaded engine, as a sweep row.

A trial is pruned on the way: its first `prefix` rows (whole batches, so the batches are those of one pass) are
generated and scored first; a trial whose quality there is under its task's `prune_below` (the floor's
reference on the same rows, minus the allowed drop and a margin) stops with that partial row. Otherwise the rest is
generated and the row covers every row of the split, its costs read off the two parts' joined trace
(`skipcore.measure.summary.summarize`), as one pass would give them.

Tasks travel to the executors of the sweep (`skipcore.evaluate.sweep.executors`, `ray_executor`) as the settings of a
`WorkUnit`; `task_rows` is what such a unit runs, like the sweep's `unit_rows`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from skipcore.evaluate.sweep.quality import prompts_for, score_outputs
from skipcore.evaluate.sweep.rows import where_it_ran
from skipcore.evaluate.sweep.units import EngineCache, Say, WorkUnit
from skipcore.evaluate.tune.space import Candidate

if TYPE_CHECKING:
    from skipcore.decode.engine import SkipEngine
    from skipcore.evaluate.tune.settings import TuneSettings
    from skipcore.models.reference import ModelRef

NAN = float("nan")
PRUNED = "pruned"  # a row's `tune_state` where its trial was stopped early: scored on its first rows only


@dataclass(frozen=True)
class Task:
    """What one row scores. `number` is the Optuna trial's (-1 for a row that is no trial); `state` says what the
    row is (`trial`, `reference`: the floor's full depth, or a held-out row: `chosen`, `paper linear`,
    `full depth`)."""

    number: int
    state: str
    model: str  # a key of the job's refs
    role: str  # the row's model_role: model or reference
    candidate: Candidate
    prune_below: float | None = None

    def label(self) -> str:
        """The task in words, as a sweep's `Setting.label` says a setting (what the executors' failure reports
        name): its trial (or role) and its setting."""
        what = f"trial {self.number}" if self.number >= 0 else self.state
        return f"{what}: {self.candidate.words() or 'full depth'}"


@dataclass(frozen=True)
class TuneJob:
    """What every task of one run shares, sent once to each process that runs tasks (the sweep's `SweepJob`
    shape: the executors read `cfg`, `refs` and `evaluate`)."""

    cfg: TuneSettings
    examples: list
    refs: dict[str, ModelRef]
    evaluate: object  # task_rows, or a caller's own (tests)
    prefix: int = 0  # rows scored before a trial may stop; 0: no stopping early


def prefix_rows(prune_after: int, batch_size: int, rows: int) -> int:
    """Rows a trial is scored on before it may stop: `prune_after` rounded up to whole batches; 0 (never stop)
    where that leaves nothing after it."""
    if prune_after <= 0:
        return 0
    k = -(-prune_after // batch_size) * batch_size
    return k if k < rows else 0


def prune_note(prune_after: int, batch_size: int, rows: int) -> str | None:
    """'note: --prune-after 16 leaves none of the 6 rows searched after it ...' where early stopping was asked for
    (`prune_after` > 0) and the data is too short for it (`prefix_rows` is 0): a search that prunes nothing runs
    every trial over every row, which its user should know before waiting for it."""
    if prune_after <= 0 or prefix_rows(prune_after, batch_size, rows):
        return None
    from skipcore.errors import spoken

    return (
        f"note: {spoken('prune_after')} {prune_after} (in whole batches of {batch_size}) leaves none of the {rows} "
        "rows searched after it: every trial is scored on all of them, none stops early"
    )


def task_rows(
    job: TuneJob, unit: WorkUnit, engines: EngineCache, say: Say | None = None
) -> Iterator[tuple[Task, dict, None]]:
    """The unit's tasks, each as (task, row, None) once scored; its model loaded through `engines`."""
    engine = engines.get(job, unit.model, say)
    info = where_it_ran(engine)
    for task in unit.settings:
        if say is not None:
            say(task.label())
        yield task, {**score_task(engine, job, task), **info}, None


def score_task(engine: SkipEngine, job: TuneJob, task: Task) -> dict:
    """The task's row before its identity columns: quality (the metric on the prefix too, `tune_prefix_quality`),
    costs, and, for `--objective measured`, the decode time against full depth (paired)."""
    from skipcore.evaluate.sweep.grid import untimed
    from skipcore.evaluate.sweep.units import for_model

    cfg, k = job.cfg, job.prefix
    examples, _ = for_model(job.examples, job.refs[task.model])
    policy = task.candidate.build()
    policy.check(engine.num_layers, cfg.max_new_tokens)
    prompts = prompts_for(examples)
    first = engine.generate(
        prompts[:k] if k else prompts, policy, cfg.max_new_tokens, batch_size=cfg.batch_size
    )
    prefix = score_outputs(examples[:k], first.texts, first.token_ids)[cfg.metric] if k else NAN
    stopped = task.prune_below is not None and k and prefix < task.prune_below
    if not k or stopped:
        texts, ids, trace, summary = first.texts, first.token_ids, first.trace, first.summary
    else:
        rest = engine.generate(prompts[k:], policy, cfg.max_new_tokens, batch_size=cfg.batch_size)
        texts, ids = first.texts + rest.texts, first.token_ids + rest.token_ids
        trace, summary = joined(first.trace, rest.trace, k, engine.num_layers)
    scored = examples[: len(texts)]
    row = {**score_outputs(scored, texts, ids), **summary, "same_as_full_depth": NAN}
    row["tune_prefix_quality"] = prefix
    row["tune_state"] = PRUNED if stopped else task.state
    untimed(row)
    if cfg.objective == "measured" and not stopped:
        from skipcore.measure.paired_timing import measure_against_full  # the speedups with their flag

        timed = prompts[: cfg.timing_limit]
        row.update(
            measure_against_full(engine, timed, policy, cfg.max_new_tokens, cfg.batch_size, cfg.repeats)
        )
    return row


def joined(first: pd.DataFrame, rest: pd.DataFrame, k: int, num_layers: int) -> tuple[pd.DataFrame, dict]:
    """Two parts of one call's trace as one (the second's rows and batches numbered on from the first's) and its
    summary."""
    from skipcore.measure.summary import summarize

    rest = rest.assign(sample=rest["sample"] + k)
    if "batch" in rest and "batch" in first:
        rest = rest.assign(batch=rest["batch"] + int(first["batch"].max()) + 1)
    trace = pd.concat([first, rest], ignore_index=True)
    return trace, summarize(trace, num_layers)
