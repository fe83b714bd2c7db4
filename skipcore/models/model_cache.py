"""Where converted models live, and whether a cached copy can be used: the cache folders of
`skipcore.models.gguf` (read from and written to there), with what a conversion records of its files and the
checks made of them.

A copy is a folder under `SKIPCORE_CACHE` (default `~/.cache/skipcore`) holding skipcore's record
(`skipcore_source.json`): what it was made from and every file's size and digest (the weights' header's), so a
folder cut short or edited is known from a few `stat` calls, a header read and its small files' digests, never
by loading it. A folder
is made under a staging name, locked while its conversion runs, and renamed into place; this module says how,
and finds the staging folders that a killed conversion left (its lock free: no live process holds it).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from skipcore.errors import ModelError
from skipcore.files import check_path_text, expand_home, file_digest, home_folder, parse_json
from skipcore.models.catalog import RealModel
from skipcore.models.safetensors_header import header_digest, safetensors_problem

MARKER = "skipcore_source.json"  # written inside the staging folder last: a folder with it is skipcore's own
CONVERTING = ".skipcore_converting"  # in a staging folder, locked while the conversion that made it runs
REPLACED = ".skipcore_replaced"  # an old copy, moved into the new one as that takes its place, then removed
STAGING = ".partial"  # how a staging folder's name ends (beside its target, so the rename stays on one disk)


def cache_root() -> Path:
    """Where skipcore keeps what it derives from installed files (converted models): $SKIPCORE_CACHE, else
    skipcore under $XDG_CACHE_HOME or ~/.cache; a path no file can have is refused in one line naming the variable
    (asked about, it raised an OSError: a traceback from `skipcore models`)."""
    env = os.environ.get("SKIPCORE_CACHE")
    if env:
        return check_path_text(expand_home(env), "SKIPCORE_CACHE", ModelError)
    base = os.environ.get("XDG_CACHE_HOME") or home_folder("SKIPCORE_CACHE", ModelError) / ".cache"
    return check_path_text(expand_home(base) / "skipcore", "the model cache", ModelError)


def models_cache() -> Path:
    return cache_root() / "models"


def cached_folder_for_file(path: Path) -> Path:
    """The cache folder of a user's GGUF file: its name plus a hash of where it is. One folder per file: an
    edited or replaced file (its size or time changed, `source_stamp`) is converted anew into the same folder.
    """
    ident = str(path.resolve()).encode()
    return models_cache() / f"{path.stem}-{hashlib.sha256(ident).hexdigest()[:12]}"


def cached_folder_for_model(model: RealModel) -> Path:
    return models_cache() / f"{model.name}-{model.version}"


def source_stamp(path: Path) -> dict:
    """What a cached copy of a user's GGUF file records of it, to know when the file has changed since."""
    st = path.stat()
    return {"path": str(path.resolve()), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


@dataclass(frozen=True)
class CacheStatus:
    """What a cache folder holds: `ready` (skipcore's own copy, whole), `absent`, `foreign` (a folder skipcore
    did not make), `stale` (made from an earlier version of the file) or `damaged` (its files are not those
    the conversion recorded); `why` says it in words."""

    state: Literal["ready", "absent", "foreign", "stale", "damaged"]
    why: str = ""

    @property
    def ready(self) -> bool:
        return self.state == "ready"


def cache_status(folder: Path, source: Path | None = None) -> CacheStatus:
    """The state of the cache folder `folder` of the GGUF file `source` (None for a catalog model, whose
    folder is named by its package's version), from its record and its files' sizes and headers (no tensor is
    read)."""
    if not folder.exists():
        return CacheStatus("absent")
    if not (folder / MARKER).is_file():
        return CacheStatus(
            "foreign", f"{folder} exists but is not a complete skipcore model cache (no {MARKER})"
        )
    try:
        record = parse_json((folder / MARKER).read_text())
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        return CacheStatus("damaged", f"its record {MARKER} is unreadable: {e}")
    if source is not None:
        try:
            changed = record.get("source") != source_stamp(source)
        except OSError:
            changed = True
        if changed:
            return CacheStatus("stale", f"{source} has changed since it was converted")
    problem = _files_problem(folder, record.get("files"))
    return CacheStatus("damaged", problem) if problem else CacheStatus("ready")


def is_complete(folder: Path, source: Path | None = None) -> bool:
    return cache_status(folder, source).ready


def files_record(folder: Path) -> dict:
    """Every file of a finished conversion by name: its size, and a weights file's header digest or any other
    file's whole digest (a config or tokenizer is a few MB at most, and an edit that keeps its size, a digit of
    `rope_theta`, changes the tokens)."""
    files = {}
    for path in sorted(p for p in folder.iterdir() if p.is_file() and p.name not in (MARKER, CONVERTING)):
        files[path.name] = {"bytes": path.stat().st_size}
        if path.suffix == ".safetensors":
            files[path.name]["header_sha256"] = header_digest(path)
        else:
            files[path.name]["sha256"] = file_digest(path)
    return files


def _files_problem(folder: Path, files: object) -> str | None:
    """What differs from the conversion's record of its files (`files_record`); for a record older than that,
    what the weights' own headers say is wrong with them. None when nothing is."""
    if not isinstance(files, dict):
        if not (folder / "config.json").is_file():
            return "config.json is missing"
        weights = sorted(folder.glob("*.safetensors"))
        if not weights:
            return "it holds no weights file"
        problems = [f"{w.name}: {p}" for w in weights if (p := safetensors_problem(w))]
        return problems[0] if problems else None
    for name, recorded in files.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        try:
            size, want = path.stat().st_size, int(recorded["bytes"])
            if size != want:
                return f"{name} holds {size:,} bytes, {want:,} when it was converted"
            if "header_sha256" in recorded and header_digest(path) != recorded["header_sha256"]:
                return f"{name} has another header than the one it was converted with"
            # a record written before digests were kept: its sizes alone
            if "sha256" in recorded and file_digest(path) != recorded["sha256"]:
                return f"{name} was edited since it was converted (its bytes differ)"
        except (OSError, ValueError, TypeError, KeyError) as e:
            return f"{name}: {e}"
    return None


@contextmanager
def staging_folder(target: Path) -> Iterator[Path]:
    """A new folder beside `target` that this conversion writes into, locked while it runs (so that another
    process knows it is not abandoned) and removed afterwards unless it became `target`."""
    root = target.parent
    # the way on: another folder, by the variable that chose this one (or that would choose another)
    way = "set SKIPCORE_CACHE to another folder" if os.environ.get("SKIPCORE_CACHE") else "set SKIPCORE_CACHE"
    try:
        root.mkdir(parents=True, exist_ok=True)
        staging = root / f".{target.name}.{secrets.token_hex(6)}{STAGING}"
        staging.mkdir()  # the modes any new folder gets (the umask's), unlike a temporary folder's 0700
    except OSError as e:
        raise ModelError(f"cannot write the model cache {root}: {e.strerror}; {way}") from e
    try:
        lock = _hold(staging)
    except OSError as e:
        remove(staging)
        raise ModelError(f"cannot write the model cache {root}: {e.strerror}; {way}") from e
    try:
        yield staging
    finally:
        remove(staging)  # our own staging folder only (gone already where it took its place)
        lock.close()


def _hold(staging: Path):
    """Lock the staging folder's CONVERTING file for as long as the returned file stays open: taken under
    another name and renamed, so nobody sees the file unlocked."""
    taking = staging / f"{CONVERTING}.new"
    f = open(taking, "w")  # noqa: SIM115 (held open by the caller while the conversion runs)
    try:
        import fcntl

        fcntl.flock(f, fcntl.LOCK_EX)
    except (ImportError, OSError):
        pass  # no advisory locks here: such a folder is then never taken for abandoned
    os.rename(taking, staging / CONVERTING)
    return f


def remove_abandoned_staging(root: Path) -> None:
    """Remove the staging folders in `root` that a conversion made (its CONVERTING file inside) and that no
    live process holds: a killed conversion's leftovers. Everything else is left alone."""
    try:
        import fcntl

        entries = [p for p in root.iterdir() if p.name.startswith(".") and p.name.endswith(STAGING)]
    except (ImportError, OSError):
        return
    for folder in entries:
        if folder.is_symlink() or not (folder / CONVERTING).is_file():
            continue
        try:  # opened, never created: a file gone means its folder is about to take its place
            fd = os.open(folder / CONVERTING, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held by its conversion for as long as that runs
            remove(folder)
        except OSError:
            pass  # still converting
        finally:
            os.close(fd)


def put_in_place(staging: Path, target: Path) -> None:
    """Rename the finished `staging` to `target`, moving the tool's own old copy there (stale or damaged: the
    caller checked it is skipcore's) out of the way first and removing it after."""
    (staging / CONVERTING).unlink()
    if target.exists() or target.is_symlink():
        with contextlib.suppress(FileNotFoundError):  # another process moved it first
            os.rename(target, staging / REPLACED)
    try:
        os.rename(staging, target)
    except OSError as e:
        if not is_complete(target):  # not another process that finished first
            raise ModelError(f"cannot put the converted copy in place at {target}: {e.strerror or e}") from e
        return
    remove(target / REPLACED)


def give_default_modes(folder: Path) -> None:
    """The modes any new file gets (the umask's, as `folder`'s own were given), instead of the 0600 a
    temporary file is written with."""
    mode = stat.S_IMODE(folder.stat().st_mode) & 0o666
    for path in folder.iterdir():
        if path.is_file() and not path.is_symlink():
            path.chmod(mode)


def remove(path: Path) -> None:
    if path.is_symlink():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path, ignore_errors=True)
