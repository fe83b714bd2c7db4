"""A tune's rows in the sweep's columns (`skipcore.evaluate.sweep.runner`: the same names in the same order, so the
Trade-offs page, the notebooks and pandas read a tune's tables as they read a sweep's), with a tune's own after
them: which trial made the row and what became of it (`tune_trial`, `tune_state`), the metric on the rows scored
before a trial may stop (`tune_prefix_quality`), and the whole schedule (`schedule_json`, `alpha`, `stages`;
`decay_span` is the schedule's own)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from skipcore.evaluate.sweep.runner import finish_row
from skipcore.evaluate.tune.space import Candidate
from skipcore.evaluate.tune.trials import NAN, PRUNED, Task

# what a row is (`tune_state`): a finished trial, one stopped early, the floor's full depth, or a held-out row
STATES = ("trial", PRUNED, "reference", "chosen", "paper linear", "full depth")


def schedule_columns(task: Task, num_layers: int, speedup_over: int) -> dict:
    """max_layers, min_layers and schedule_speedup as the sweep fills them: the schedule's own where the budgets
    are a schedule's, else the layers the policy starts and ends at."""
    c = task.candidate
    s = c.schedule
    if s is not None and (c.policy in ("static", "speculative")):
        speed = s.layer_speedup(speedup_over) if s.shape != "full" else 1.0
        return {"max_layers": s.max_layers, "min_layers": s.min_layers, "schedule_speedup": speed}
    values = dict(c.values)
    top = values.get("max_layers") or num_layers
    return {"max_layers": top, "min_layers": values.get("min_layers"), "schedule_speedup": NAN}


def finished_row(
    row: dict, task: Task, key: str, settings, split: str | None, limit: int | None, run_id: str
) -> dict:
    """A scored task's row in the sweep's column order, then the tune's own columns."""
    row = {**row, **schedule_columns(task, int(row["num_layers"]), settings.speedup_over)}
    s = task.candidate.schedule
    run = SimpleNamespace(
        dataset=settings.dataset, split=split, limit=limit, max_new_tokens=settings.max_new_tokens,
        decay_span=s.decay_span if s is not None else None, speedup_over=settings.speedup_over,
        threads=settings.threads, sweep_run_id=run_id,
    )  # fmt: skip
    setting = task.candidate.setting(task.model, task.role, settings.batch_size, settings.speedup_over)
    out = finish_row(row, setting, key, run, "")
    tune = {k: out.pop(k) for k in ("tune_prefix_quality", "tune_state")}
    out.update(
        tune_trial=task.number,
        **tune,
        tune_label=task.candidate.words() or "full depth",
        schedule_json=json.dumps(s.to_dict()) if s is not None else "",
        alpha=s.alpha if s is not None and s.shape == "power" else NAN,
        stages=s.stages if s is not None and s.shape == "step" else NAN,
    )
    return out


def candidate_of(row) -> Candidate:
    """The setting a row scored, back from its columns (a table read from disk holds counts as floats where other
    rows left them empty: each parameter takes its declared type again)."""
    from skipcore.policies import policy_class
    from skipcore.policies.params import params_of
    from skipcore.schedule import Schedule

    schedule = Schedule.from_record(json.loads(row["schedule_json"])) if row.get("schedule_json") else None
    values = []
    for p in params_of(policy_class(row["policy"])):
        value = row.get(p.column)
        if p.sweep is not None and value is not None and value == value:
            values.append((p.name, p.kind(value)))
    return Candidate(row["policy"], schedule, tuple(values))
