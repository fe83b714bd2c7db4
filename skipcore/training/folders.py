"""Where a run writes, checked before any work: the output folder (empty, replaced on purpose, or the very run
being resumed) and the checkpoint folder (holding no step-* folder the run did not write). Neither is ever
written through a link that leads out of it."""

from __future__ import annotations

from pathlib import Path

from skipcore.errors import UserError
from skipcore.files import check_writable_folder, refuse_links_out
from skipcore.models.training_record import read_record, recorded_args
from skipcore.training.checkpoint import foreign_entries


def check_out_dir(out: Path, overwrite: bool, resume_dir: Path | None) -> None:
    """`out` must be empty, replaced on purpose (`overwrite`), or the very run being resumed: the output
    folder its checkpoint recorded, or the folder holding it as OUT/checkpoints."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file")
    check_writable_folder(out, f"cannot write --out {out}")
    refuse_links_out(out, "--out")  # an overwrite or a resume writes into it: never through a link out of it
    if not (out.is_dir() and any(out.iterdir())) or overwrite:
        return
    if resume_dir is None:
        raise UserError(f"--out {out} is not empty; pass --overwrite (or --resume to continue a run)")
    recorded = (recorded_args(read_record(resume_dir) or {}) or {}).get("out")
    own = {resume_dir.resolve().parent.parent} | ({Path(recorded).resolve()} if recorded else set())
    if out.resolve() not in own:
        raise UserError(
            f"--out {out} holds another run: the checkpoint {resume_dir} was written for "
            f"{recorded or 'another --out'}; resume into the run's own --out, or into an empty folder"
        )


def check_checkpoint_dir(ckpt_root: Path, out: Path, save_every: int) -> None:
    """Where step-* checkpoints go: a folder (or one that can be made), with no link out of it, holding no
    step-* folder this run did not write (pruning and publishing would replace or delete it)."""
    if not save_every:
        return
    if ckpt_root.exists() and not ckpt_root.is_dir():
        raise UserError(f"--checkpoint-dir {ckpt_root} is a file")
    check_writable_folder(ckpt_root, f"cannot write checkpoints to {ckpt_root}")
    refuse_links_out(ckpt_root, "--checkpoint-dir")
    foreign = foreign_entries(ckpt_root, out)
    if foreign:
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        raise UserError(
            f"--checkpoint-dir {ckpt_root} holds {foreign[0].name}{more}, which this run did not write; "
            "checkpoints replace and prune step-* folders there, so choose an empty folder (or move it)"
        )
