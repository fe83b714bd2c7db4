"""Where a run writes, checked before any work: the output folder (empty, replaced on purpose, or the very run
being resumed) and the checkpoint folder (holding no step-* folder the run did not write). Neither is ever
written through a link that leads out of it. A folder replaced on purpose (`overwrite`) loses the files of the
run it held, known by that run's record and its checkpoints' records, and nothing else: its checkpoints before the
new run writes its own, its model only when the new model is in place (a run that stops on the way leaves the old
model loadable)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from skipcore.errors import UserError
from skipcore.files import check_writable_folder, refuse_links_out
from skipcore.models.training_record import (
    RECORD_FILE,
    read_record,
    recorded_args,
    recorded_files,
    recorded_output_dir,
)
from skipcore.training.checkpoint import (
    CHECKPOINT_DIR,
    LOG_FILE,
    REPLACED_LOG,
    SAVE_STAGING,
    foreign_entries,
    latest_checkpoint,
    own_checkpoint,
    own_log,
    own_staging,
    remove_own,
)


def check_out_dir(
    out: Path,
    overwrite: bool,
    resume_dir: Path | None,
    model: str | None = None,
    ckpt_root: Path | None = None,
) -> None:
    """`out` must be empty, replaced on purpose (`overwrite`), or the very run being resumed: the output
    folder its checkpoint recorded, or the folder holding it as OUT/checkpoints. A run that replaces `out` does not
    start from the model `out` holds or from a checkpoint it clears (`model`, a local folder): it would delete the
    weights it trains."""
    if out.exists() and not out.is_dir():
        raise UserError(f"out {out} is a file", field="out")
    check_writable_folder(out, f"cannot write out {out}", field="out")
    # an overwrite or a resume writes into it: never through a link out of it
    refuse_links_out(out, "out", field="out")
    if not (out.is_dir() and any(out.iterdir())):
        return
    if overwrite:
        if resume_dir is None and model is not None and Path(model).exists():
            _refuse_replacing_the_model(Path(model), out, ckpt_root or out / CHECKPOINT_DIR)
        return
    if resume_dir is None:
        if holds_only_a_log(out, ckpt_root):
            raise UserError(
                f"out {stopped_before_saving(out)}; pass overwrite to start the run again there, or choose another "
                "out",
                field=("out", "overwrite"),
            )
        raise UserError(
            f"out {out} is not empty; pass overwrite (or resume to continue a run)",
            field=("out", "overwrite", "resume"),
        )
    recorded = (recorded_args(read_record(resume_dir) or {}) or {}).get("out")
    own = {resume_dir.resolve().parent.parent} | ({Path(recorded).resolve()} if recorded else set())
    if out.resolve() not in own:
        raise UserError(
            f"out {out} holds another run: the checkpoint {resume_dir} was written for "
            f"{recorded or 'another out'}; continue it in the run's own out, or in an empty folder",
            field=("out", "resume"),
        )


def check_users_files_kept(out: Path, writes: Callable[[str], bool]) -> None:
    """Where a run replaces `out` (`overwrite`): a file there of a name the run writes (`writes`) that the replaced
    run's record does not list is a user's, or another tool's: refused in one line, never written over. A folder
    that holds no run of skipcore's lists nothing."""
    if not out.is_dir():
        return
    record = _record_of(out)
    if record and not recorded_files(record):  # an older record lists none: its run saved what stands there
        return
    own = {*replaced_files(out), *([LOG_FILE] if own_log(out / LOG_FILE) else [])}
    theirs = sorted(
        e.name
        for e in out.iterdir()
        if e.name not in own and writes(e.name) and (e.is_file() or e.is_symlink())
    )
    if theirs:
        more = f" (and {len(theirs) - 1} more: {', '.join(theirs[1:4])}{', ...' if len(theirs) > 4 else ''})"
        raise UserError(
            f"out {out} holds {theirs[0]}{more if len(theirs) > 1 else ''}, which no skipcore run there "
            "recorded as its own, and this run writes a file of that name; overwrite replaces only a run's "
            "own files: move it, or choose another out",
            field=("out", "overwrite"),
        )


def holds_only_a_log(folder: Path, ckpt_root: Path | None = None) -> bool:
    """Whether `folder` is the output folder of a run that stopped before it saved a checkpoint: its log (`own_log`:
    a user's file of that name is not), and at most the checkpoint folder (`ckpt_root`, by default
    FOLDER/checkpoints) it made before its first save."""
    if not folder.is_dir():
        return False
    if ckpt_root is not None and ckpt_root.is_dir() and latest_checkpoint(ckpt_root) is not None:
        return False  # its checkpoints went to a --checkpoint-dir of their own: the log is not all it left
    left = [
        e for e in folder.iterdir() if not _no_checkpoint_yet(e, folder, ckpt_root or folder / CHECKPOINT_DIR)
    ]
    return [e.name for e in left] == [LOG_FILE] and own_log(folder / LOG_FILE)


def stopped_before_saving(folder: Path) -> str:
    """What a folder `holds_only_a_log` is said to be, wherever a run is pointed at it (as its out, or to resume).
    Its words name no setting: a front end calling the settings by its flags leaves them as they are."""
    return f"{folder} holds only the log of a run that stopped before it saved a checkpoint: nothing to continue from"


def _no_checkpoint_yet(entry: Path, out: Path, ckpt_root: Path) -> bool:
    """Whether `entry` is the run's checkpoint folder (`ckpt_root`), made in `out` before it saved a checkpoint:
    empty, or holding only the staging folder of the first checkpoint an interruption stopped."""
    if entry != ckpt_root or not entry.is_dir() or entry.is_symlink():
        return False
    return all(own_staging(e, out) for e in entry.iterdir())


def check_checkpoint_dir(ckpt_root: Path, out: Path, save_every: int) -> None:
    """Where step-* checkpoints go: a folder (or one that can be made), with no link out of it, holding no
    step-* folder this run did not write (pruning and publishing would replace or delete it)."""
    if not save_every:
        return
    if ckpt_root.exists() and not ckpt_root.is_dir():
        raise UserError(f"checkpoint_dir {ckpt_root} is a file", field="checkpoint_dir")
    check_writable_folder(ckpt_root, f"cannot write checkpoints to {ckpt_root}")
    refuse_links_out(ckpt_root, "checkpoint_dir", field="checkpoint_dir")
    foreign = foreign_entries(ckpt_root, out)
    if foreign:
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        written_for = _recorded_out(foreign[0])
        # a run's checkpoints: of a folder moved or copied since, or of another run
        if written_for is not None:
            raise UserError(
                f"checkpoint_dir {ckpt_root} holds {foreign[0].name}{more}, written for out {written_for}, "
                f"not {out}: a checkpoint keeps the output folder it was written for (a moved or copied run's "
                "too); resume it into a new, empty out, or choose an empty checkpoint_dir",
                field=("checkpoint_dir", "out"),
            )
        raise UserError(
            f"checkpoint_dir {ckpt_root} holds {foreign[0].name}{more}, which this run did not write; "
            "checkpoints replace and prune step-* folders there, so choose an empty folder (or move it)",
            field="checkpoint_dir",
        )


def clear_replaced_run(out: Path, ckpt_root: Path, resume_dir: Path | None) -> None:
    """Before a run writes into `out` with `overwrite`: remove the checkpoints of the run it replaces (those
    whose records name `out`, in this run's checkpoint folder and in the replaced run's where it lies inside
    `out`), which the new run's checkpoints would otherwise be pruned, resumed or replaced among. A checkpoint
    of another run stays; the replaced run's model stays until the new one replaces it (`replaced_files`), and so
    does its log, moved to `REPLACED_LOG` (the new run's log takes its name at once; `drop_replaced_log` removes it
    once the new model is saved). A resume of the very run `out` holds replaces nothing."""
    if not out.is_dir() or out.is_symlink():
        return
    if resume_dir is not None and _recorded_out(resume_dir) == out.resolve():
        return
    for root, own in _replaced_checkpoints(out, ckpt_root).items():
        for entry in own:
            remove_own(entry, out)
        if own and _inside(root, out) and root.resolve() != out.resolve() and not any(root.iterdir()):
            root.rmdir()  # the checkpoint folder the replaced run made in `out`, left empty
    if own_staging(out / SAVE_STAGING, out):
        remove_own(out / SAVE_STAGING, out)
    _keep_replaced_log(out)


def _keep_replaced_log(out: Path) -> None:
    """The replaced run's log moved aside to `REPLACED_LOG`, where that run left a model for it to go with. An
    earlier overwrite that stopped before its save left that model's log there already: it stays, and the log
    beside it (the stopped run's, which kept nothing) is replaced by the new run's. A file of that name that is no
    log is left alone."""
    log, kept = out / LOG_FILE, out / REPLACED_LOG
    if kept.exists() or kept.is_symlink():
        return
    model = [n for n in replaced_files(out) if n not in (LOG_FILE, RECORD_FILE)]
    if model and log.is_file() and not log.is_symlink() and own_log(log):
        log.replace(kept)


def drop_replaced_log(out: Path) -> None:
    """Once a run's model is saved in `out`: the log of the model it replaced (`REPLACED_LOG`) goes with that
    model, whichever run of the overwrite saved it (the one that started it, or a resume of it). A file of that
    name that is no run's log, or a link, is left alone."""
    kept = out / REPLACED_LOG
    if kept.is_file() and not kept.is_symlink() and own_log(kept):
        kept.unlink()


def _replaced_checkpoints(out: Path, ckpt_root: Path) -> dict[Path, list[Path]]:
    """The checkpoints (and staging folders) of the run `out` holds that an overwrite of it removes, by the folder
    they lie in: this run's checkpoint folder, and the replaced run's where it lies inside `out`."""
    replaced_root = Path((recorded_args(_record_of(out)) or {}).get("checkpoint_dir") or out / CHECKPOINT_DIR)
    # an older record's relative path is relative to a folder it does not name: not looked for
    roots = (
        [ckpt_root, replaced_root]
        if replaced_root.is_absolute() and _inside(replaced_root, out)
        else [ckpt_root]
    )
    return {  # step-* folders, as pruning and resuming know checkpoints: a user's copy of one by another name stays
        root: [
            e
            for e in sorted(root.iterdir())
            if (e.name.startswith("step-") and own_checkpoint(e, out)) or own_staging(e, out)
        ]
        for root in dict.fromkeys(roots)
        if root.is_dir() and not root.is_symlink()
    }


def _refuse_replacing_the_model(model: Path, out: Path, ckpt_root: Path) -> None:
    """A run that replaces `out` does not start from what the overwrite removes: the model `out` holds, one of
    the replaced run's checkpoints, or the base model of the LoRA adapter it starts from (the base lost, the new
    adapter names itself as its base and neither loads). A model elsewhere inside `out` or the checkpoint folder
    stays, and may start it."""
    starts = [(model, f"model {model}")]
    base = _local_base(model)
    if base is not None:
        starts.append((base, f"model {model} is a LoRA adapter on {base}, and that base"))
    replaced = _replaced_checkpoints(out, ckpt_root)  # read once: each checkpoint's record
    for start, said in starts:
        if start.resolve() == out.resolve():
            raise UserError(
                f"{said} is the out folder, which overwrite replaces: the run would delete the weights it "
                "starts from; write to another out (or copy them elsewhere first)",
                field=("model", "out", "overwrite"),
            )
        for root, own in replaced.items():
            for entry in own:
                if _inside(start, entry):
                    where = f"out's {root}" if _inside(root, out) else f"checkpoint_dir {root}"
                    raise UserError(
                        f"{said} is a checkpoint of the run in out {out} (in {where}), which overwrite removes: "
                        "the run would delete the weights it starts from; write to another out (or copy the "
                        "checkpoint elsewhere first)",
                        field=("model", "out", "overwrite", "checkpoint_dir"),
                    )


def _local_base(model: Path) -> Path | None:
    """The local folder a LoRA adapter folder names as its base, or None (not an adapter, a hub id, unreadable:
    what loading it says)."""
    from skipcore.errors import ModelError
    from skipcore.models.lora import base_name, is_adapter_folder

    if not is_adapter_folder(model):
        return None
    try:
        base = Path(base_name(model))
    except ModelError:
        return None
    return base if base.exists() else None


def replaced_files(out: Path) -> list[str]:
    """The files of the model a save into `out` replaces: those the record standing there lists (model or
    adapter, tokenizer, record, log), so that a new full model does not stand beside an old adapter, which is
    what `--model OUT` would load. A file it does not list stays."""
    record = _record_of(out) if out.is_dir() else {}
    return [
        name
        for name in recorded_files(record) or _saved_before_files_were_listed(record)
        if (out / name).is_file() and not (out / name).is_symlink()
    ]


def _saved_before_files_were_listed(record: dict) -> list[str]:
    """What a run whose record predates `files` saved, as its record tells: a LoRA run its adapter, another its
    model's weights and config (the file names the savers write), with the record and the log."""
    if not record:
        return []
    from skipcore.models.lora import CONFIG_FILE, WEIGHTS_FILE

    model = (
        [CONFIG_FILE, WEIGHTS_FILE]
        if record.get("lora")
        else ["config.json", "generation_config.json", "model.safetensors"]
    )
    return [*model, RECORD_FILE, LOG_FILE]


def _inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def _record_of(folder: Path) -> dict:
    try:
        return read_record(folder) or {}
    except UserError:  # a file of that name skipcore did not write lists nothing
        return {}


def _recorded_out(folder: Path) -> Path | None:
    return recorded_output_dir(_record_of(folder))
