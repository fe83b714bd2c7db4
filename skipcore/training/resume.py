"""Resuming a run: which checkpoint to continue from, the settings it continues with (its own, except those
given again), and what changed since. The restoring of optimizer, scheduler and random state is
`checkpoint`'s."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Collection
from pathlib import Path

from skipcore.errors import UserError
from skipcore.models.training_record import read_record, recorded_args
from skipcore.training.checkpoint import check_resumable, intact_checkpoint, latest_checkpoint
from skipcore.training.settings import TrainSettings, as_recorded

RESUME_FILES = (
    "skipcore_training.json",
    "config.json (adapter_config.json for LoRA)",
    "model.safetensors (adapter_model.safetensors)",
    "optimizer.pt",
    "scheduler.pt",
)

# settings a resumed run does not take from the run it continues: where and how this process runs, not what it
# trains
NOT_RESUMED = ("resume", "out", "overwrite", "no_progress", "device", "threads", "find_unused_parameters")


def resolve_resume(path: str) -> Path:
    """A checkpoint directory, or the newest intact step-* checkpoint inside a folder of them (a newer one
    that an interruption left incomplete is skipped, and said), its state files read (a refused one is one
    line)."""
    p = Path(path)
    if intact_checkpoint(p):
        check_resumable(p)
        return p
    latest = latest_checkpoint(p) if p.is_dir() else None
    if latest is None:
        raise UserError(f"no resumable checkpoint in {path} (a step-* folder with {', '.join(RESUME_FILES)})")
    broken = [q.name for q in sorted(p.glob("step-*")) if q.is_dir() and q.name > latest.name]
    if broken:
        print(
            f"warning: {', '.join(broken)} in {p} is incomplete; resuming from {latest.name}", file=sys.stderr
        )
    check_resumable(latest)
    return latest


def adopt_recorded(
    settings: TrainSettings, resume_dir: Path, given: Collection[str] | None
) -> tuple[TrainSettings, list[str]]:
    """A resume continues its run: every setting not in `given` (those the user set now) takes the value the
    run recorded (its data, schedule, optimisation), so `train --resume OUT/checkpoints --out OUT` alone
    trains the same run on; settings given now override them (and are said as changes). Returns the settings
    and the names of those taken from the record.

    With `given` None (not known which settings the user set) nothing is taken."""
    recorded = recorded_args(read_record(resume_dir) or {})
    if given is None or recorded is None:
        return settings, []
    names = TrainSettings.names()
    taken: dict[str, object] = {}
    for key, value in recorded.items():
        if key in NOT_RESUMED or key in given or key not in names:
            continue
        current = getattr(settings, key)
        if as_recorded(current) == value:
            continue
        # a comma list, recorded as a JSON list, comes back a tuple
        taken[key] = tuple(value) if isinstance(current, tuple) else value
    return dataclasses.replace(settings, **taken), list(taken)


def warn_changes(old: dict, new: dict) -> None:
    """A resumed run should repeat the original command; say each setting that differs between the record it
    continues (`old`) and its own (`new`)."""
    changes = [
        f"{section}.{key}: {_json_normal(before)!r} -> {_json_normal(after)!r}"
        for section in ("schedule", "training", "data")
        for key in sorted(set(old.get(section) or {}) | set(new.get(section) or {}))
        if _json_normal(before := (old.get(section) or {}).get(key))
        != _json_normal(after := (new.get(section) or {}).get(key))
    ]
    if changes:
        print(
            "warning: resuming with changed settings (the new ones apply from here on): "
            + "; ".join(changes),
            file=sys.stderr,
        )


def _json_normal(value: object) -> object:
    return json.loads(json.dumps(value))
