"""Resuming a run: which checkpoint to continue from, the settings it continues with (its own; of those given
again, only how long it trains, its peak learning rate and its bookkeeping may differ, the others are refused),
and what changed since. The restoring of optimizer, scheduler and random state is `checkpoint`'s."""

from __future__ import annotations

import json
import sys
from collections.abc import Collection
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from skipcore.errors import UserError, spoken
from skipcore.models.training_record import read_record, recorded_args
from skipcore.training.checkpoint import CHECKPOINT_DIR, check_resumable, intact_checkpoint, latest_checkpoint
from skipcore.training.examples import DEV_SPLIT, TRAIN_SPLIT
from skipcore.training.folders import holds_only_a_log, stopped_before_saving
from skipcore.training.plan import shape_used
from skipcore.training.settings import (
    MAY_CHANGE,
    NAME_OR_PATH_SETTINGS,
    PATH_SETTINGS,
    THIS_PROCESS,
    TrainSettings,
    as_recorded,
)

RESUME_FILES = (
    "skipcore_training.json",
    "config.json (adapter_config.json for LoRA)",
    "model.safetensors (adapter_model.safetensors)",
    "optimizer.pt",
    "scheduler.pt",
)

# A resumed run is the run it continues. Which of its settings a resume may change:
# - where and how this process runs, not what it trains (`THIS_PROCESS`, beside the settings it names): never taken
#   from the run, free to differ;
# - what may change (`MAY_CHANGE`, beside the settings it names);
# - every other setting (the model and its size, LoRA and whole layers, the data, the schedule and the objective,
#   the optimisation, the seed, mixed precision) is the run's own: another value is refused, naming it. The weights,
#   the optimizer's state and the data order a resume restores were made with them, so a new value would be
#   recorded but not trained.


def _alpha_used(args: dict, alpha: float | None, record: dict) -> float | None:
    """LoRA's alpha as a run used it: unset, 2 x rank (`skipcore.models.lora.LoraSpec`)."""
    return alpha if alpha is not None or not args.get("lora_rank") else 2 * args["lora_rank"]


# settings whose unset value stands for another, compared by the value the run used (from its settings, `args`, or
# what its record says the data gave): given now as the value the run's unset one stood for, a setting is no change
# (the run's own is kept, so the record says none); given otherwise, the refusal names the value the run used
IMPLIED = {
    "lora_alpha": _alpha_used,
    "split": lambda args, split, record: split or TRAIN_SPLIT,
    "eval_split": lambda args, split, record: split or DEV_SPLIT,
    "task": lambda args, task, record: task or (record.get("data") or {}).get("task"),
    "schedule": lambda args, shape, record: shape_used({**args, "schedule": shape}),
    # unset in a run its steps do not set the length of: one pass
    "epochs": lambda args, epochs, record: 1.0 if epochs is None and args.get("steps") is None else epochs,
}


def length_read(args: dict) -> dict:
    """A run's recorded settings as they set its length: epochs beside steps, which an older record kept at their
    default though the steps set the length, are none."""
    if args.get("steps") is not None and args.get("epochs") is not None:
        return {**args, "epochs": None}
    return args


@dataclass(frozen=True)
class Continued:
    """The settings a resumed run trains with, and what they owe to the run it continues."""

    settings: TrainSettings
    taken: tuple[str, ...]  # taken from the run's record (not given now)
    changed: dict[str, tuple[object, object]]  # given now with another value: {name: (the run's, now)}


def resolve_resume(path: str) -> Path:
    """A checkpoint directory, or the newest intact step-* checkpoint inside a folder of them (a newer one
    that an interruption left incomplete is skipped, and said), its state files read (a refused one is one
    line)."""
    p = Path(path)
    if intact_checkpoint(p):
        check_resumable(p)
        return p
    if not p.exists():
        raise UserError(f"resume {path} does not exist", field="resume")
    latest = latest_checkpoint(p) if p.is_dir() else None
    if latest is None:
        # OUT, or its checkpoints folder made before the first save
        run_out = p.parent if p.name == CHECKPOINT_DIR else p
        if holds_only_a_log(run_out):
            raise UserError(
                f"resume {stopped_before_saving(run_out)}; start the run again: drop resume and pass overwrite "
                "(a run that saved to a checkpoint_dir of its own resumes from that folder)",
                field=("resume", "overwrite", "checkpoint_dir"),
            )
        raise UserError(
            f"resume {path} holds no resumable checkpoint (a step-* folder with {', '.join(RESUME_FILES)})",
            field="resume",
        )
    broken = [q.name for q in sorted(p.glob("step-*")) if q.is_dir() and q.name > latest.name]
    if broken:
        print(
            f"warning: {', '.join(broken)} in {p} is incomplete; resuming from {latest.name}", file=sys.stderr
        )
    check_resumable(latest)
    return latest


def continue_run(settings: TrainSettings, resume_dir: Path, given: Collection[str]) -> Continued:
    """The settings of a run resumed from `resume_dir`: a setting not in `given` (those the user set now) takes the
    value the run recorded, so `train --resume OUT/checkpoints --out OUT` alone trains the same
    run on. A setting given now with another value is applied where it may change (`MAY_CHANGE`), and refused,
    before any work, where it may not (the first named, the others listed). A checkpoint with no recorded
    settings continues with the settings as given."""
    record = read_record(resume_dir) or {}
    recorded = recorded_args(record)
    if recorded is None:
        return Continued(settings, (), {})
    recorded = length_read(recorded)
    given = set(given)
    # steps set the resumed run's length (the run's, or given now): it reads no epochs, so none is taken from the
    # run; a run its epochs set, extended by steps, is said to leave them
    by_steps = (settings.steps if "steps" in given else recorded.get("steps")) is not None
    taken: dict[str, object] = {}
    changed: dict[str, tuple[object, object]] = {}
    refused: list[tuple[str, object, object]] = []
    restated: dict[str, object] = {}  # given now as the value the run's unset one stood for
    for name in TrainSettings.names():
        if name in THIS_PROCESS or name not in recorded:
            continue
        now, then = getattr(settings, name), recorded[name]
        if name in given and name in IMPLIED:  # left unset, a setting has the value the run used
            implied = IMPLIED[name]
            used_now, used_then = implied(asdict(settings), now, record), implied(recorded, then, record)
            if same_setting(name, used_now, used_then):
                if not same_setting(name, now, then):
                    restated[name] = then
                continue
            now, then = used_now, used_then
        if same_setting(name, now, then):
            continue
        if name == "epochs" and name not in given and by_steps:
            changed[name] = (then, None)
            continue
        if name not in given:
            taken[name] = tuple(then) if isinstance(now, tuple) and isinstance(then, list) else then
        elif name in MAY_CHANGE:
            changed[name] = (then, now)
        else:
            refused.append((name, now, then))
    if refused:
        name, now, then = refused[0]
        others = [n for n, _, _ in refused[1:]]
        also = f" (so do{'es' * (len(others) == 1)} {', '.join(others)})" if others else ""
        raise UserError(
            f"{name} {shown(now)} differs from the run's {shown(then)}{also}; a resumed run keeps its settings",
            field=tuple(n for n, _, _ in refused),
        )
    return Continued(replace(settings, **restated, **taken), tuple(taken), changed)


def same_setting(name: str, now: object, then: object) -> bool:
    """Whether a setting's value now is the one the run recorded (`then`): a path spelled another way (relative,
    or as an older record kept it) is the same path."""
    if as_recorded(now) == then:
        return True
    if name in PATH_SETTINGS + NAME_OR_PATH_SETTINGS and isinstance(now, str) and isinstance(then, str):
        return as_recorded(now, name) == as_recorded(then, name)
    return False


def shown(value: object) -> str:
    """A setting's value as a message says it: a list comma-separated, no value as `none`."""
    if value is None:
        return "none"
    if isinstance(value, list | tuple):
        return ",".join(map(str, value)) or "none"
    return str(value)


def setting_changes(old_args: dict | None, new_args: dict) -> dict[str, list]:
    """Every recorded setting whose value differs between the run's record and the resumed run's own, as the
    record's `resumes` keeps them ({name: [before, after]}); `resume` itself is `resumed_from`'s."""
    old_args = length_read(old_args or {})
    return {
        name: [old_args.get(name), value]
        for name, value in new_args.items()
        if name not in ("resume", "command")
        and name in old_args
        and _json_normal(old_args[name]) != _json_normal(value)
    }


def derived_changes(old: dict, new: dict) -> dict[str, list]:
    """What the same settings derive differently now (the data read again, and the schedule made from its
    statistics): {"section.key": [before, after]}. The dev data's entry follows the dev-loss settings, which
    `setting_changes` says; the data set's path spelled another way is no change."""
    changes = {}
    for section in ("schedule", "data"):
        before, after = old.get(section) or {}, new.get(section) or {}
        for key in sorted(set(before) | set(after)):
            then, now = before.get(key), after.get(key)
            if key == "dev" or _json_normal(then) == _json_normal(now):
                continue
            if (section, key) == ("data", "dataset") and same_setting("dataset", now, then):
                continue
            changes[f"{section}.{key}"] = [then, now]
    return changes


def say_resumed(resume_dir: Path, continued: Continued, derived: dict[str, list]) -> None:
    """One line each: the settings taken from the run, those given now that apply from here on, and what the data
    gives differently now."""
    if continued.taken:
        flags = [spoken(name) for name in continued.taken]
        listed = ", ".join(flags[:8]) + (f" and {len(flags) - 8} more" if len(flags) > 8 else "")
        print(f"note: resuming {resume_dir} with its run's own {listed}", file=sys.stderr)
    if continued.changed:
        said = ", ".join(
            f"{spoken(name)} {shown(now)} (the run's {shown(then)})"
            for name, (then, now) in continued.changed.items()
        )
        print(f"note: resuming with {said}, from the resumed step on", file=sys.stderr)
    if derived:
        said = "; ".join(f"{key}: {before!r} -> {after!r}" for key, (before, after) in derived.items())
        print(
            f"warning: the data reads differently than when the run began (applies from here on): {said}",
            file=sys.stderr,
        )


def _json_normal(value: object) -> object:
    return json.loads(json.dumps(value))
