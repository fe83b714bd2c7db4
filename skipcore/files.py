"""How a tool writes its files, so that nothing of the user's is replaced by mistake: a file is replaced
atomically (written beside itself, then renamed, so a reader or an interruption sees the old file or the new one,
never half of one); an output path is checked before any work (not a folder, not replaced unasked, in a writable
folder); a file written beside an output (a sidecar, a table's CSV copy) is replaced only when the tool knows it
as its own; and a tool never writes through a symbolic link that leads out of its output folder.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from skipcore.errors import UserError


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call `write` on a temporary path in `path`'s folder, then move it over `path` in one rename (a link at
    `path` is replaced, never written through)."""
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes: how a tool recognises a companion file it wrote (recorded beside the output)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_output_file(path: Path, overwrite: bool, flag: str = "--overwrite") -> Path:
    """Refuse, before any work, an output file path that is a folder, exists without `overwrite`, or lies in a
    place that cannot be written (a file where a folder should be, a folder without write permission)."""
    if path.is_dir():
        raise UserError(f"{path} is a folder; name a file to write")
    if path.exists() and not overwrite:
        raise UserError(f"{path} exists; pass {flag} or choose another path")
    check_writable_folder(path.parent if str(path.parent) else Path("."), f"cannot write {path}")
    return path


def check_output_path(path: str | Path | None, overwrite: bool, suffixes: tuple[str, ...]) -> Path | None:
    """Refuse, before any work is done, an output path of an unknown format (by its suffixes: `.csv.zip` too),
    that is a folder, that cannot be written or that would be overwritten unasked; None stays None."""
    if path is None:
        return None
    p = Path(path)
    if not any(p.name.lower().endswith(s) and len(p.name) > len(s) for s in suffixes):
        raise UserError(f"unknown output format {p.name!r}; use one of {', '.join(suffixes)}")
    return check_output_file(p, overwrite)


def check_writable_folder(folder: Path, what: str) -> None:
    """The nearest existing folder at or above `folder` must be a writable folder (it is created later)."""
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise UserError(f"{what}: {probe} is a file, not a folder")
    if not os.access(probe, os.W_OK):
        raise UserError(f"{what}: {probe} is not writable")


def check_companion(companion: Path, main: Path, overwrite: bool, ours: Callable[[Path], bool]) -> None:
    """A file a tool writes beside `main` (a sidecar, a CSV copy) may be replaced only with `overwrite` and only
    when `ours(companion)` knows it as the tool's own; a user's file of that name is refused in one line."""
    if not companion.exists() and not companion.is_symlink():
        return
    if companion.is_dir():
        raise UserError(
            f"{companion} is a folder, and {main} writes a file there; move it or choose another path"
        )
    if not overwrite:
        raise UserError(
            f"{companion} exists (written beside {main.name}); pass --overwrite or choose another path"
        )
    if companion.is_symlink() or not ours(companion):
        raise UserError(
            f"{companion} exists and is not one {main.name} wrote: it will not be replaced; move it or choose "
            "another path"
        )


def links_leading_out(folder: Path) -> list[Path]:
    """Entries under `folder` (at any depth, links not followed) that are symbolic links to a place outside it:
    a tool writing there would write through them into someone else's files."""
    if not folder.is_dir():
        return []
    root = folder.resolve()
    found = []
    for here, dirs, files in os.walk(folder):
        for name in (*dirs, *files):
            entry = Path(here) / name
            if entry.is_symlink():
                target = entry.resolve()
                if target != root and root not in target.parents:
                    found.append(entry)
    return sorted(found)


def refuse_links_out(folder: Path, flag: str) -> None:
    """One line naming the first link that leads out of `folder` (`flag` is the option that named the folder)."""
    links = links_leading_out(folder)
    if links:
        more = f" (and {len(links) - 1} more)" if len(links) > 1 else ""
        raise UserError(
            f"{flag} {folder}: {links[0]} is a link to {links[0].resolve()}, outside the folder{more}; a tool never "
            "writes through a link out of its folder: remove the link or choose another folder"
        )
