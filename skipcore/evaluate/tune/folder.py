"""A tune's output folder: what it writes there, and the rules that keep everything else safe.

- Its record (`tune.json`) names the settings of the study the folder holds (its identity, with the digest of the
  rows searched: `skipcore.evaluate.identity`) and every file the tune wrote with the digest it wrote it with. A
  rerun with the same identity resumes; another identity is refused in one line, or with `overwrite` the recorded
  files (and only those) are removed, once every check below has passed: a refused run removes nothing.
- Its own files only: a file of a name the tune writes that the record does not name (a user's `report.md`), or
  that changed since the tune wrote it, is refused before any work, never replaced. Other files in the folder are
  left alone. The sweep-format tables keep their own rules (`skipcore.evaluate.sweep.store`).
- Atomic: every file is written beside itself and renamed (`skipcore.files.atomic_write`); the record names a
  text file's new digest before the write and takes it as the file's after, so a tune stopped in between knows
  the file as its own either way.
- One writer: a lock beside the folder (`skipcore.output_lock`), and never a write through a link out of it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from skipcore.errors import UserError
from skipcore.evaluate.identity import differences, differing, said
from skipcore.evaluate.sweep.store import read_own_sweep
from skipcore.files import (
    atomic_write,
    check_path_text,
    check_utf8_name,
    check_writable_folder,
    file_digest,
    parse_json,
    refuse_links_out,
)
from skipcore.output_lock import OutputLock
from skipcore.traces.files import json_plain

RECORD = "tune.json"
# in the record: each text file being written and its digest, named before the write and dropped after it
WRITING = "writing"
STUDY = "study.db"  # Optuna's SQLite storage: changes as it runs, so named in the record without a digest
TRIALS = "trials.parquet"
EVALUATION = "evaluation.parquet"
FRONT = "front.csv"
BEST = "best_schedule.json"
REPORT = "report.md"
TEXT_FILES = (FRONT, BEST, REPORT)  # written whole at the end of a run, each with its digest in the record
# the sweep-format tables and their CSV copies (their own store checks them), and the study
TABLES = (TRIALS, "trials.csv", EVALUATION, "evaluation.csv")
TRIALS_TRACES, EVALUATION_TRACES = "trials_traces", "evaluation_traces"  # the tables' traces folders
TRACES = (TRIALS_TRACES, EVALUATION_TRACES)
KIND = "skipcore tune"


class TuneFolder:
    """`out`, checked and held for one run: `with TuneFolder(out, identity, overwrite) as folder:`."""

    def __init__(self, out: Path, identity: dict, overwrite: bool) -> None:
        self.out = check_path_text(out, "out", field="out")
        check_utf8_name(self.out, "out", field="out")  # its tables are pyarrow's
        self.identity, self.overwrite = identity, overwrite
        self.lock = OutputLock(self.out, "tune")
        self.record: dict = {"kind": KIND, "identity": identity, "files": {}}
        self.resumed = False
        if self.out.exists() and not self.out.is_dir():
            raise UserError(f"out {self.out} is a file; name a folder for the tune", field="out")
        check_writable_folder(self.out, f"cannot write out {self.out}", field="out")

    def path(self, name: str) -> Path:
        return self.out / name

    def __enter__(self) -> TuneFolder:
        self.lock.take_then(self._take)
        return self

    def __exit__(self, *exc) -> None:
        self.lock.release()

    def _take(self) -> None:
        """Every check first, then (with `overwrite`, for a study of other settings) its files removed: a refused
        run removes nothing."""
        refuse_links_out(self.out, "out", field="out")
        old = self._read_record()
        recorded = (old or {}).get("identity", {})
        replacing = old is not None and bool(differences(recorded, self.identity))
        if replacing and not self.overwrite and self._holds_scores():
            raise UserError(
                f"out {self.out} holds a tune of other settings: {said(recorded, self.identity)}; pass "
                "overwrite to replace its files or choose another out",
                field=("out", "overwrite", *differing(recorded, self.identity)),
            )
        known, writing = (old or {}).get("files", {}), (old or {}).get(WRITING) or {}
        self._check_files(known, writing)
        if replacing:
            self._remove(old)
        elif old is not None:
            self.record["files"] = dict(known)
            self.record[WRITING] = dict(writing)  # a file still being written stays known (stopped twice)
            self.resumed = True
        self.out.mkdir(parents=True, exist_ok=True)
        self.remember(STUDY)
        self._write_record()

    def _check_files(self, known: dict, writing: dict) -> None:
        """Each file of a name the tune writes is one the record names, unchanged since it was written (or the
        one it was writing when it stopped: `WRITING`; the tables by their own rules: `read_own_sweep`), and the
        traces folders are folders."""
        for name in (STUDY, *TABLES, *TEXT_FILES):
            p = self.path(name)
            if not (p.exists() or p.is_symlink()):
                continue
            unnamed = name not in known and name not in writing and name not in TABLES
            if p.is_symlink() or p.is_dir() or unnamed:
                raise self._not_ours(name)
            digests = _recorded(name, known, writing) - {""}  # "": named without one (the study)
            if digests and file_digest(p) not in digests:
                raise UserError(
                    f"{p} changed since the tune wrote it; it will not be replaced: move it or choose another out",
                    field="out",
                )
        for name in (TRIALS, EVALUATION):
            read_own_sweep(self.path(name))
        for name in TRACES:
            if self.path(name).exists() and not self.path(name).is_dir():
                raise self._not_ours(name)

    def _holds_scores(self) -> bool:
        """The folder's study scored something (a row in its tables, or a run's results): a study a refused or failed
        run left before its first score (a model that would not load, a prompt too long) holds nothing to keep, and
        a corrected rerun of other settings replaces it without --overwrite."""
        if any(self.path(name).exists() for name in TEXT_FILES):  # a run's results, written at its end
            return True
        for name in (TRIALS, EVALUATION):
            found = read_own_sweep(self.path(name))
            if found is not None and len(found[0]):
                return True
        return False

    def _not_ours(self, name: str) -> UserError:
        return UserError(
            f"out {self.out} holds {name}, which this tune did not write; it will not be replaced: move it or "
            "choose another out",
            field="out",
        )

    def _read_record(self) -> dict | None:
        p = self.path(RECORD)
        if not p.exists():
            return None
        try:
            record = parse_json(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise UserError(f"{p} is not a tune's record ({e}); it will not be replaced", field="out") from e
        if not isinstance(record, dict) or record.get("kind") != KIND:
            raise UserError(f"{p} was not written by skipcore tune; it will not be replaced", field="out")
        return record

    def _remove(self, old: dict) -> None:
        """A replaced study's files: those its record names (a text file only as it was written), no other."""
        files, writing = old.get("files") or {}, old.get(WRITING) or {}
        for name in {**files, **writing}:
            p = self.path(name)
            ours = name in (STUDY, *TABLES, *TEXT_FILES) and p.is_file() and not p.is_symlink()
            digests = _recorded(name, files, writing)  # "": a file named without a digest
            if ours and ("" in digests or file_digest(p) in digests):
                p.unlink()

    # -- writing --------------------------------------------------------------------------------------------------
    def remember(self, name: str, digest: str = "") -> None:
        self.record["files"][name] = digest

    def write_text(self, name: str, text: str) -> Path:
        """One of the tune's text files, atomically, recorded with its digest."""
        p, data = self.path(name), text.encode("utf-8")
        digest = hashlib.sha256(data).hexdigest()
        writing = self.record.setdefault(WRITING, {})
        writing[name] = digest  # named before the write: a run stopped in between knows the file as its own
        self._write_record()
        _write_bytes(p, data)
        self.remember(name, digest)
        del writing[name]
        self._write_record()
        return p

    def write_json(self, name: str, value: dict) -> Path:
        return self.write_text(name, _json_text(value))

    def note(self, **values) -> None:
        """Add what the run found (floor, chosen setting) to the record."""
        self.record.update(values)
        self._write_record()

    def _write_record(self) -> None:
        _write_bytes(self.path(RECORD), _json_text(self.record).encode("utf-8"))


def _json_text(value: dict) -> str:
    """`value` as JSON any reader takes: a number that is not finite (a floor's prefix quality where no trial
    stops early: NaN) as null, NumPy's values as Python's (`json_plain`)."""
    return json.dumps(json_plain(value), indent=2, allow_nan=False, default=str) + "\n"


def _recorded(name: str, files: dict, writing: dict) -> set[str]:
    """The digests a record holds for `name`: as written, and as being written when the tune stopped."""
    return {files.get(name), writing.get(name)} - {None}


def _write_bytes(path: Path, data: bytes) -> None:
    """`data` to `path` atomically; a full disk or a folder made read-only meanwhile said in one line."""
    try:
        atomic_write(path, lambda tmp: tmp.write_bytes(data))
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}") from e
