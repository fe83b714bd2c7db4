"""The training record: `skipcore_training.json`, what a skipcore-trained model (and each of its checkpoints)
says about how it was made. It is built, written and read here and nowhere else; its file name and keys are a
contract (the shipped models in data/models/ carry it).

The sections, in the file's order: `format`; `objective` (full, fixed or elastic); `schedule` (the plan's own
dict); `generation` (how the model decodes by default: the decay span and length it was trained with, and
`speedup_over`, a typical output, over which generation meets a target speedup); `data` (what was read, with
its statistics); `training` (the optimisation settings); `model`; `init` (where the weights started); `lora`;
`environment`; `args` (the run's settings by name, which a resume takes back; local paths absolute); `argv`;
`output_dir` (the run's mark on the checkpoints it writes: only its own are pruned); `resumed_from` (the
checkpoints it continued from) and `resumes` (one entry for each: the step, and every setting, and every value the
data gave, that differs from the run before it, as [before, after]); and, in each saved copy, `state` (the step
and the training time so far) and `files` (what that save and the run wrote into the folder, this file and the
log among them: what `train --overwrite` removes, and nothing else).

The record never says what the run did not do: its settings are the ones it trained with (a resume refuses those
that may not change, and keeps each change of those that may in `resumes`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from skipcore.errors import UserError, quoted
from skipcore.files import atomic_write, parse_json

RECORD_FILE = "skipcore_training.json"
FORMAT = "skipcore-training/1"
STAGING_MARKER = ".skipcore-staging"  # in a staging folder: the output folder of the run writing it
# in a folder a model is saved into: the save's files before they move in; there, marked, until the save is whole
SAVE_STAGING = ".skipcore-save.partial"


def interrupted_save(folder: str | Path) -> bool:
    """Whether a save into `folder` was stopped before it was whole (its marked staging folder is still there): its
    files may be part one model's, part another's, and its record either's."""
    return (Path(folder) / SAVE_STAGING / STAGING_MARKER).is_file()


GENERATION_NOTE = (
    "decode with this decay span (the median target length) and max_new_tokens, and meet target speedups "
    "over speedup_over tokens, a typical output (median target + EOS); the horizon training met its targets "
    "over is schedule.speedup_over"
)


def typical_output_tokens(median_target_tokens: int) -> int:
    """A typical output's length in generated tokens: the median target, then its EOS."""
    return int(median_target_tokens) + 1


def build_record(
    *,
    schedule: dict,
    data: dict,
    training: dict,
    model: dict,
    init: dict,
    lora: dict | None,
    environment: dict,
    args: dict,
    argv: list[str],
    output_dir: Path,
) -> dict:
    """A run's record before its first save. `schedule` is the plan's dict (its kind is the objective, its
    decay span and length the generation defaults); `data` holds the data statistics (`median_target_tokens`).
    """
    over = min(typical_output_tokens(data["median_target_tokens"]), schedule["max_new_tokens"])
    return {
        "objective": schedule["kind"],
        "schedule": schedule,
        "generation": {
            "decay_span": schedule["decay_span"],
            "max_new_tokens": schedule["max_new_tokens"],
            "speedup_over": over,
            "note": GENERATION_NOTE,
        },
        "data": data,
        "training": training,
        "model": model,
        "init": init,
        "lora": lora,
        "environment": environment,
        "args": args,
        "argv": argv,
        "output_dir": str(output_dir.resolve()),
    }


def resumed_record(record: dict, previous: dict, checkpoint: Path, step: int, changes: dict) -> dict:
    """`record` continuing the run `previous` records, from `checkpoint` at `step`: the chain of checkpoints it
    came from, and what changed at each (`changes`: {"settings": {...}, "derived": {...}}, each {name: [before,
    after]})."""
    where = os.path.abspath(checkpoint)  # reads the same from any folder
    return {
        **record,
        "resumed_from": [*previous.get("resumed_from", []), where],
        "resumes": [*(previous.get("resumes") or []), {"from": where, "step": step, **changes}],
    }


def with_state(record: dict, state: dict) -> dict:
    """The record as a save writes it: with the run's state (step, elapsed time) at that save."""
    return {**record, "state": state}


def with_files(record: dict, names: list[str]) -> dict:
    """The record as a save writes it into a folder: with the names of the files of the run there (`files`)."""
    return {**record, "files": sorted(set(names) | {RECORD_FILE})}


def recorded_files(record: dict) -> list[str]:
    """The files a record lists as its run's in its folder (`files`): plain names only (none that leads
    elsewhere); none for a record written before it listed them."""
    names = record.get("files")
    if not isinstance(names, list):
        return []
    return [n for n in names if isinstance(n, str) and n not in ("", ".", "..") and Path(n).name == n]


def write_record(folder: str | Path, record: dict) -> None:
    """Write `record` into `folder`, atomically (a reader never sees half a file)."""
    text = json.dumps({"format": FORMAT, **record}, indent=2, sort_keys=False) + "\n"
    atomic_write(Path(folder) / RECORD_FILE, lambda p: p.write_text(text))


def read_record(folder: str | Path) -> dict | None:
    """The record saved with a model, or None for a model skipcore did not train."""
    path = Path(folder) / RECORD_FILE
    if not path.is_file():
        return None
    try:
        data = parse_json(path.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {path}: {e}") from e
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise UserError(f"{path}: unknown format {quoted(found)} (expected {FORMAT})")
    return data


def recorded_state(record: dict) -> tuple[int, float]:
    """(step, training seconds so far) of the save the record came from; (0, 0.0) for a record without one."""
    state = record.get("state") or {}
    return int(state.get("step", 0)), float(state.get("elapsed_s", 0.0))


def recorded_args(record: dict) -> dict | None:
    """The run's settings by name, as it recorded them; None where the record has none."""
    args = record.get("args")
    return args if isinstance(args, dict) else None


def recorded_output_dir(record: dict) -> Path | None:
    """The output folder of the run that wrote the record (its mark on its checkpoints), resolved."""
    recorded = record.get("output_dir") or (recorded_args(record) or {}).get("out")
    return Path(recorded).resolve() if isinstance(recorded, str) and recorded else None
