"""Checkpoints: a model directory any `from_pretrained` reads, plus what it takes to resume or reuse it.

Layout of a checkpoint directory:

- `config.json`, `generation_config.json`, `model.safetensors`, tokenizer files: the model, loadable by
  `skipcore.models.loading.load_model` (and transformers) with no skipcore code at all; for a LoRA run instead
  `adapter_config.json` and `adapter_model.safetensors` (peft's format, naming the base model), which
  `load_model` merges into its base;
- `skipcore_training.json`: the training record (`skipcore.models.training_record`), with the step and
  training time at this save and the files the save wrote; its `generation` entry is what generation reuses
  (`skipcore.models.generation_defaults`);
- resumable checkpoints only: `optimizer.pt`, `scheduler.pt` (state dicts, `torch.save`) and
  `rng_state_<rank>.pt`. They are read with `torch.load(weights_only=True)`: tensors and plain containers
  only, never arbitrary pickled objects.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from skipcore.errors import UserError, first_line
from skipcore.files import parse_json
from skipcore.models.training_record import (
    RECORD_FILE,
    SAVE_STAGING,
    STAGING_MARKER,
    read_record,
    recorded_output_dir,
    with_files,
    write_record,
)

SAVE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
LOG_FILE = "train_log.jsonl"  # in a run's output folder: one JSON object per log line
DEV_LOSS = "dev_loss_"  # a log line's dev loss under one eval schedule: dev_loss_<schedule>
# in a run's output folder: the log of the run an overwrite replaces, kept beside that run's model until the new
# model replaces it (a run stopped before then leaves the old model with its own log)
REPLACED_LOG = "train_log.replaced.jsonl"
CHECKPOINT_DIR = (
    "checkpoints"  # in a run's output folder, where its checkpoints go unless --checkpoint-dir says
)


def save_model(
    model,
    tokenizer,
    out_dir: str | Path,
    record: dict,
    dtype: str = "float32",
    run_files: tuple[str, ...] = (),
    replaces: tuple[str, ...] = (),
) -> Path:
    """Write the model (safetensors, in `dtype`), its tokenizer and its training record into `out_dir`; a peft
    model is saved as its adapter alone. The record lists the files this save wrote, with `run_files` (the run's
    other files in the folder: its log), so that a run replacing this one (`--overwrite`) removes exactly
    those. The files are written into a staging folder first and moved in when all are there; then the files of
    the model this one replaces (`replaces`) that it did not write over go, the record is written, and the staging
    folder goes last: a save stopped anywhere before leaves it there, marked, and the folder is refused as a model
    (`interrupted_save`) until a run replaces it, never read with one run's weights and another's record."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    staging = out / SAVE_STAGING
    start_staging(staging, out)  # one a killed save left is cleared
    if hasattr(model, "peft_config"):
        from skipcore.models.lora import save_adapter

        save_adapter(model, staging, SAVE_DTYPES[dtype] if dtype != "float32" else None)
    else:
        if dtype != "float32":  # small models only; keeps the training weights in float32
            model = copy.deepcopy(model).to(SAVE_DTYPES[dtype])
        model.save_pretrained(staging, safe_serialization=True)
    tokenizer.save_pretrained(staging)
    saved = sorted(p.name for p in staging.iterdir() if p.name != STAGING_MARKER)
    for name in saved:
        os.replace(staging / name, out / name)
    for name in set(replaces) - {*saved, *run_files, RECORD_FILE}:
        (out / name).unlink(missing_ok=True)
    write_record(out, with_files(record, [*saved, *run_files]))
    _readable_as_umask_allows(out, [*saved, RECORD_FILE])
    (staging / STAGING_MARKER).unlink()
    staging.rmdir()
    return out


MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json")
MODEL_SHARD = re.compile(r"model-\d+-of-\d+\.safetensors")  # a model past save_pretrained's shard size


def names_a_save_writes(model, tokenizer) -> Callable[[str], bool]:
    """Whether `save_model` of `model` and `tokenizer` writes a file of a given name into its folder: the
    adapter's (a peft model) or the model's (its shards by their pattern), the tokenizer's (saved once into a
    temporary folder to list them: each tokenizer class has its own), the record, and the run's log."""
    adapter = hasattr(model, "peft_config")
    if adapter:
        from skipcore.models.lora import CONFIG_FILE, WEIGHTS_FILE

        model_files = {CONFIG_FILE, WEIGHTS_FILE}
    else:
        model_files = set(MODEL_FILES)
    with tempfile.TemporaryDirectory() as folder:
        tokenizer.save_pretrained(folder)
        names = {*model_files, *(p.name for p in Path(folder).iterdir()), RECORD_FILE, LOG_FILE}
    return lambda name: name in names or (not adapter and MODEL_SHARD.fullmatch(name) is not None)


def own_log(path: Path) -> bool:
    """Whether `path` reads as a run's log (`LOG_FILE`): each line a JSON object as the loop writes them (its step
    with the training loss and rate, or with the dev losses), the last one possibly cut short by a kill after at
    least one whole; or nothing yet: a run that stopped before its first log line left it empty. Another tool's
    log with a step, or a user's text, is not one (an overwrite would have deleted it)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return False
    for i, line in enumerate(lines):
        try:
            entry = parse_json(line)
        except ValueError:
            if i and i == len(lines) - 1:
                break
            return False
        if not (isinstance(entry, dict) and _log_line(entry)):
            return False
    return True


def _log_line(entry: dict) -> bool:
    """A line the training loop writes: a step, with its loss and learning rate or with dev losses."""
    step = entry.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        return False
    return {"loss", "lr"} <= entry.keys() or any(str(k).startswith(DEV_LOSS) for k in entry)


def _readable_as_umask_allows(folder: Path, names: list[str]) -> None:
    """safetensors writes its files owner-only (0600); give the files a save wrote the mode any new file gets, so
    a model saved on a shared machine is readable by those the user's umask lets read it."""
    umask = os.umask(0)
    os.umask(umask)
    for name in names:
        path = folder / name
        if path.is_file() and not path.is_symlink():
            path.chmod(0o666 & ~umask)


def save_state(
    ckpt_dir: str | Path, optimizer, scheduler, rank: int, main: bool, log_window: torch.Tensor | None = None
) -> None:
    """Optimizer and LR-scheduler state (the main process; they are identical everywhere), this rank's RNG and its
    loss log's open window (`log_window`: the sum of the losses since the last logged step and their count), so
    that the first loss a resumed run logs averages the same steps an uninterrupted run's does."""
    ckpt = Path(ckpt_dir)
    ckpt.mkdir(parents=True, exist_ok=True)
    if main:
        torch.save(optimizer.state_dict(), ckpt / "optimizer.pt")
        torch.save(scheduler.state_dict(), ckpt / "scheduler.pt")
    state = {"torch": torch.get_rng_state()}
    if log_window is not None:
        state["log_window"] = log_window.detach().to("cpu", torch.float64)
    torch.save(state, ckpt / f"rng_state_{rank}.pt")


def load_state(ckpt_dir: str | Path, optimizer, scheduler, rank: int) -> torch.Tensor | None:
    """Restore what `save_state` wrote; returns this rank's loss log window (None where the checkpoint has none:
    written before it kept one, or by fewer processes). A rank with no RNG file of its own (more processes now)
    keeps its seed. A file that is damaged, or holds Python objects beyond tensors (weights_only refuses them;
    nothing in it runs), is one line naming it."""
    ckpt = Path(ckpt_dir)
    for name in ("optimizer.pt", "scheduler.pt"):
        if not (ckpt / name).is_file():
            raise UserError(f"{ckpt} is not a resumable checkpoint: {name} is missing")
    optimizer_state, scheduler_state = (_load_state_file(ckpt / n) for n in ("optimizer.pt", "scheduler.pt"))
    try:
        optimizer.load_state_dict(optimizer_state)
        scheduler.load_state_dict(scheduler_state)
    except (RuntimeError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise UserError(f"cannot restore the optimizer from {ckpt}: {first_line(e)}") from e
    rng = ckpt / f"rng_state_{rank}.pt"
    if not rng.is_file():
        return None
    state = _load_state_file(rng)
    if not isinstance(state, dict) or not isinstance(state.get("torch"), torch.Tensor):
        raise UserError(f"cannot restore the random state from {rng}: it holds no 'torch' generator state")
    torch.set_rng_state(state["torch"])
    window = state.get("log_window")
    return window if isinstance(window, torch.Tensor) and window.shape == (2,) else None


def _load_state_file(path: Path):
    """A `torch.save`d state, tensors and plain containers only (`weights_only`): a file holding anything else is
    refused in one line, and nothing in it runs."""
    from skipcore.models.loading import BROKEN_FILE_ERRORS, broken_file_reason

    try:
        return torch.load(path, weights_only=True)
    except (*BROKEN_FILE_ERRORS, KeyError) as e:
        reason = broken_file_reason(e)
        if "weights_only" in reason:
            reason = (
                "it holds Python objects beyond tensors and plain containers, which skipcore does not unpickle "
                "(weights_only; nothing in it ran): it is not a state skipcore saved"
            )
        raise UserError(f"cannot resume from {path}: {reason}") from e


def check_resumable(ckpt_dir: str | Path) -> None:
    """Read every state file a resume restores (optimizer, scheduler, each rank's RNG), before any work: a damaged
    or refused one is said before the run writes anything."""
    ckpt = Path(ckpt_dir)
    for path in [ckpt / "optimizer.pt", ckpt / "scheduler.pt", *sorted(ckpt.glob("rng_state_*.pt"))]:
        if path.is_file():
            _load_state_file(path)


def checkpoint_name(step: int) -> str:
    return f"step-{step:07d}"


def prune_checkpoints(ckpt_root: str | Path, keep: int, out_dir: str | Path) -> None:
    """Delete all but the newest `keep` resumable checkpoints of the run writing `out_dir` (keep <= 0 keeps them
    all). A folder the run did not write (another run's, or a user's `step-0000001/`) is never touched."""
    if keep <= 0:
        return
    root = Path(ckpt_root)
    leftovers = [p for p in sorted(root.glob(".step-*" + REMOVING)) if own_staging(p, out_dir)]
    for old in leftovers + own_checkpoints(root, out_dir)[:-keep]:
        with contextlib.suppress(OSError, UserError):  # one that cannot be removed stays: the run goes on
            remove_own(old, out_dir)


class CheckpointTrail:
    """The resumable checkpoints a run leaves, the last good one always among them. A checkpoint's weights are
    first tried by the next step's loss: until then it is pending, and the older ones it would prune stay; a
    finite loss makes it the last good one (the older ones are pruned then); a loss that is not finite means its
    weights are broken, and it is removed (`drop_broken`: a later `--resume OUT/checkpoints` must not pick it).
    The checkpoint a run resumed from is pending at first, but never removed. Deletions are the main process's."""

    def __init__(self, root: Path, keep: int, out_dir: Path, main: bool, resumed_from: Path | None) -> None:
        self.root, self.keep, self.out_dir, self.main = root, keep, out_dir, main
        self.good: Path | None = None  # the newest checkpoint whose weights gave a finite loss
        self.pending: Path | None = resumed_from  # the newest, its weights not tried yet
        self.pending_is_ours = False

    def saved(self, ckpt: Path) -> None:
        self.pending, self.pending_is_ours = ckpt, True

    def loss_was_finite(self) -> None:
        if self.pending is None:
            return
        self.good, self.pending = self.pending, None
        if self.main and self.pending_is_ours:
            prune_checkpoints(self.root, self.keep, self.out_dir)

    def finish(self) -> None:
        """The run ended: its last checkpoint stays, and the older ones are pruned as usual."""
        if self.main and self.pending is not None and self.pending_is_ours:
            prune_checkpoints(self.root, self.keep, self.out_dir)

    def drop_broken(self) -> Path | None:
        """The pending checkpoint, whose weights gave a non-finite loss, removed if this run wrote it (the one it
        resumed from stays); None where every checkpoint's weights were tried."""
        if (
            self.pending is not None
            and self.pending_is_ours
            and self.main
            and own_checkpoint(self.pending, self.out_dir)
        ):
            remove_own(self.pending, self.out_dir)
        return self.pending


def own_checkpoint(ckpt: str | Path, out_dir: str | Path) -> bool:
    """A checkpoint of the run writing `out_dir`: intact and naming that output folder in its record (the
    marker a run leaves in each checkpoint it writes)."""
    ckpt = Path(ckpt)
    if ckpt.is_symlink() or not ckpt.is_dir() or not intact_checkpoint(ckpt):
        return False
    return _recorded_out(ckpt) == Path(out_dir).resolve()


def own_checkpoints(ckpt_root: str | Path, out_dir: str | Path) -> list[Path]:
    """The resumable checkpoints in `ckpt_root` of the run writing `out_dir` (`own_checkpoint`), oldest first."""
    return sorted(p for p in Path(ckpt_root).glob("step-*") if own_checkpoint(p, out_dir))


def _recorded_out(folder: Path) -> Path | None:
    try:
        record = read_record(folder) or {}
    except UserError:  # a record skipcore cannot read is no mark of this run's
        return None
    return recorded_output_dir(record)


def foreign_entries(ckpt_root: str | Path, out_dir: str | Path) -> list[Path]:
    """What in a checkpoint folder this run would write over or prune but did not write: `step-*` folders (and
    their staging folders) that are not its own checkpoints."""
    root = Path(ckpt_root)
    if not root.is_dir():
        return []

    def foreign(p: Path) -> bool:
        if p.name.startswith("step-"):  # this run's, intact or not (a resume passes over an incomplete one)
            return not (own_checkpoint(p, out_dir) or _ours_incomplete(p, out_dir))
        return staging_name(p) and not own_staging(p, out_dir)

    return [p for p in sorted(root.iterdir()) if foreign(p)]


def _ours_incomplete(ckpt: Path, out_dir: str | Path) -> bool:
    """A step-* folder whose record names `out_dir` but that is not intact (a file of it emptied or lost)."""
    return ckpt.is_dir() and not ckpt.is_symlink() and _recorded_out(ckpt) == Path(out_dir).resolve()


def staging_name(path: Path) -> bool:
    """Whether `path` bears a staging folder's name: a checkpoint's (`.step-*.partial`, written or being removed)
    or a save's (`SAVE_STAGING`). No other folder is ever taken for one, empty or not."""
    return path.name == SAVE_STAGING or (path.name.startswith(".step-") and path.name.endswith(".partial"))


def own_staging(staging: Path, out_dir: str | Path) -> bool:
    """A folder of a staging name (`staging_name`) that the run writing `out_dir` began, or one of that name
    holding nothing (`vacant_staging`: a run killed between making it and marking it, or between emptying and
    removing it), which anyone may clear: nothing in it is lost."""
    if not staging_name(staging) or staging.is_symlink() or not staging.is_dir():
        return False
    if vacant_staging(staging):
        return True
    try:
        recorded = Path((staging / STAGING_MARKER).read_text().strip()).resolve()
    except OSError:
        return False
    return recorded == Path(out_dir).resolve()


def vacant_staging(staging: Path) -> bool:
    """A folder holding nothing but, at most, an empty staging marker (its write cut short)."""
    try:
        entries = list(staging.iterdir())
    except OSError:  # unreadable: not known to be empty
        return False
    return not entries or (
        len(entries) == 1
        and entries[0].name == STAGING_MARKER
        and entries[0].is_file()
        and entries[0].stat().st_size == 0
    )


def intact_checkpoint(ckpt: str | Path) -> bool:
    """Whether a checkpoint holds everything a resume reads (record, config, weights, optimizer and
    scheduler), none of it empty."""
    ckpt = Path(ckpt)

    def present(name: str) -> bool:
        return (ckpt / name).is_file() and (ckpt / name).stat().st_size > 0

    weights = any(
        present(f) for f in ("model.safetensors", "model.safetensors.index.json", "adapter_model.safetensors")
    )
    config = "adapter_config.json" if present("adapter_config.json") else "config.json"
    return weights and all(present(f) for f in (RECORD_FILE, config, "optimizer.pt", "scheduler.pt"))


def latest_checkpoint(ckpt_root: str | Path) -> Path | None:
    """The newest intact step-* checkpoint (one an interruption left incomplete is passed over)."""
    found = sorted(p for p in Path(ckpt_root).glob("step-*") if p.is_dir() and intact_checkpoint(p))
    return found[-1] if found else None


REMOVING = ".removing.partial"  # a checkpoint of this run on its way out: `.step-NNNNNNN.removing.partial`


def staging_dir(target: str | Path) -> Path:
    """Where a checkpoint is written before it is renamed to `target` (not a step-* name: never resumed from)."""
    target = Path(target)
    return target.with_name(f".{target.name}.partial")


def start_staging(staging: Path, out_dir: str | Path) -> None:
    """An empty staging folder marked as this run's: one an interruption of this run left is cleared first; one
    that is not this run's is refused (never deleted)."""
    if staging.exists() or staging.is_symlink():
        if not own_staging(staging, out_dir):
            raise UserError(
                f"{staging} is not a checkpoint this run started; it will not be deleted: move it"
            )
        remove_own(staging, out_dir)
    staging.mkdir(parents=True)
    (staging / STAGING_MARKER).write_text(str(Path(out_dir).resolve()))


def publish_checkpoint(staging: Path, target: Path, out_dir: str | Path) -> None:
    """Rename a fully written checkpoint into place, replacing an older one of the same step of this run (a folder
    of that name that is not this run's checkpoint is refused, never deleted). The staging marker goes with it and
    is removed after: a kill at any point leaves a staging folder marked as this run's, or this run's checkpoint
    (a marker left in it is harmless)."""
    if target.exists() or target.is_symlink():
        if not (own_checkpoint(target, out_dir) or _ours_incomplete(target, out_dir)):
            raise UserError(f"{target} is not a checkpoint of this run; it will not be replaced: move it")
        remove_own(target, out_dir)
    staging.rename(target)
    (target / STAGING_MARKER).unlink(missing_ok=True)


def remove_own(folder: Path, out_dir: str | Path) -> None:
    """Delete a checkpoint or staging folder of the run writing `out_dir` so that a kill at any moment leaves what
    a resume, a prune and an overwrite still know as this run's: a checkpoint is marked and renamed to a staging
    name first (`.step-NNNNNNN.removing.partial`), and a staging folder is emptied with its marker last, when
    it is vacant (a step-* folder deleted file by file and cut short would lack its record: not this run's, and in
    the way of --resume and --overwrite)."""
    if not staging_name(folder):
        doomed = folder.with_name(f".{folder.name}{REMOVING}")
        if doomed.exists() or doomed.is_symlink():
            if not own_staging(doomed, out_dir):
                raise UserError(f"{doomed} is not a folder this run made; it will not be deleted: move it")
            _empty_then_remove(doomed)
        (folder / STAGING_MARKER).write_text(str(Path(out_dir).resolve()))
        folder = folder.rename(doomed)
    _empty_then_remove(folder)


def _empty_then_remove(staging: Path) -> None:
    for entry in staging.iterdir():
        if entry.name == STAGING_MARKER:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    (staging / STAGING_MARKER).unlink(missing_ok=True)
    staging.rmdir()
