"""The dashboard's run history on disk: every Generate run's trace (Parquet, written by `skipcore.write_trace`) and an
index of runs in SQLite (the standard library's `sqlite3`: a file format other tools read, transactions, no
server), so runs survive a reload and a restart, and can be listed, reopened, compared and deleted one by one.

The folder is the dashboard's own: `$SKIPCORE_APP_RUNS`, by default `skipcore/dashboard-runs` under
`$XDG_DATA_HOME` (`~/.local/share`). A marker file says the dashboard made it; a folder that holds other files and
no marker is refused, never written into. Only files the index names are ever deleted, and only inside the
folder's `traces/`, never through a symlink. A trace is written (atomically) before its row is committed, so the
index never names a missing file; a file without a row (an interrupted run) is left alone.

Rows are read one by one: a row that is damaged (hand-edited, written by another tool), whose trace is gone or
names a file outside `traces/` is still listed, with why it cannot be reopened (`Run.problem`), and can be deleted;
it never hides the others.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from skipcore.errors import UserError

RUNS_ENV = "SKIPCORE_APP_RUNS"
MARKER = ".skipcore-dashboard-runs"  # in the folder: the dashboard made it
INDEX = "runs.sqlite"
TRACES = "traces"
SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created TEXT NOT NULL,
    page TEXT NOT NULL,
    label TEXT NOT NULL,
    settings TEXT NOT NULL,   -- JSON: setting -> [in words, in full] (app.dashboard.provenance)
    summary TEXT NOT NULL,    -- JSON: skipcore.summarize of the trace
    num_layers INTEGER NOT NULL,
    prompts TEXT NOT NULL,    -- JSON list
    texts TEXT NOT NULL,      -- JSON list
    trace_file TEXT NOT NULL  -- a file name in traces/
)
"""


def default_root() -> Path:
    """Where the run history lives: $SKIPCORE_APP_RUNS, else skipcore/dashboard-runs under $XDG_DATA_HOME."""
    env = os.environ.get(RUNS_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base).expanduser() / "skipcore" / "dashboard-runs"


@dataclass(frozen=True)
class RunRecord:
    """A run to keep: the page that made it, the settings that made it and what it gave."""

    page: str
    label: str  # its schedule, in words
    settings: dict  # setting -> [in words, in full] (app.dashboard.provenance)
    trace: pd.DataFrame
    metadata: dict
    prompts: list[str]
    texts: list[str]
    summary: dict  # skipcore.summarize of the trace
    num_layers: int


@dataclass(frozen=True)
class Run:
    """One kept run, as the index lists it (its trace is read on demand)."""

    id: int
    created: str
    page: str
    label: str
    settings: dict
    summary: dict
    num_layers: int
    prompts: list[str]
    texts: list[str]
    trace_file: str
    problem: str | None = None  # why it cannot be reopened (its row damaged, its trace gone), or None


def _is_settings(value: object) -> bool:
    """setting -> [in words, in full], as `provenance` writes them."""
    return isinstance(value, dict) and all(
        isinstance(v, list) and len(v) == 2 and isinstance(v[0], str) for v in value.values()
    )


def _is_texts(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


# each column of a row -> (how it is read from the index, what it must then be)
COLUMNS = {
    "created": (str, lambda v: isinstance(v, str)),
    "page": (str, lambda v: isinstance(v, str)),
    "label": (str, lambda v: isinstance(v, str)),
    "settings": (json.loads, _is_settings),
    "summary": (json.loads, lambda v: isinstance(v, dict)),
    "num_layers": (int, lambda v: isinstance(v, int) and v >= 1),
    "prompts": (json.loads, _is_texts),
    "texts": (json.loads, _is_texts),
}
# what a field that cannot be read reads as (a text field: "?")
DAMAGED = {"settings": {}, "summary": {}, "num_layers": 0, "prompts": [], "texts": []}


def _run(row: tuple) -> Run:
    """One row of the index as a run; a field that cannot be read is left empty and named in `problem`, so the
    run is still listed (and can be deleted)."""
    run_id, *values, trace_file = row
    fields, bad = {}, []
    for (name, (read, valid)), raw in zip(COLUMNS.items(), values, strict=True):
        try:
            value = read(raw) if isinstance(raw, str | int) else None
        except (ValueError, TypeError, RecursionError):  # RecursionError: JSON nested past Python's limit
            value = None
        if not valid(value):
            bad.append(name)
            value = DAMAGED.get(name, "?")
        fields[name] = value
    if not isinstance(trace_file, str):
        bad.append("trace_file")
        trace_file = ""  # names no file: nothing is read or deleted for it
    problem = f"its record is damaged ({', '.join(bad)} cannot be read)" if bad else None
    return Run(int(run_id), trace_file=trace_file, problem=problem, **fields)


def _finite(value: object) -> object:
    """JSON has no NaN: a summary's missing numbers (NaN) are stored as null."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


class RunStore:
    """The run history in one folder the dashboard owns."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()

    # -- the folder ------------------------------------------------------------------------------------------
    def _ready(self) -> None:
        """Make the folder (and its marker) if it is new; refuse one that is not the dashboard's."""
        root, traces = self.root, self.root / TRACES
        try:
            if root.is_symlink() or traces.is_symlink():
                raise UserError(f"{root}: the run history's folder must not be a symlink; set {RUNS_ENV}")
            if root.exists() and not (root / MARKER).is_file() and any(root.iterdir()):
                raise UserError(
                    f"{root} holds files the dashboard did not write (no {MARKER}); set {RUNS_ENV} to a new folder"
                )
            traces.mkdir(parents=True, exist_ok=True)
            if not (root / MARKER).is_file():
                (root / MARKER).write_text(
                    json.dumps({"made_by": "skipcore dashboard", "index": INDEX}) + "\n"
                )
        except OSError as e:
            raise UserError(f"cannot keep runs in {root}: {e.strerror or e}; set {RUNS_ENV}") from e

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        self._ready()
        try:
            with closing(sqlite3.connect(self.root / INDEX, timeout=10)) as db:
                db.execute(SCHEMA)
                with db:  # one transaction: committed on success, rolled back on error
                    yield db
        except sqlite3.DatabaseError as e:
            raise UserError(f"the run history index {self.root / INDEX} cannot be used: {e}") from e

    # -- runs ------------------------------------------------------------------------------------------------
    def add(self, run: RunRecord) -> int:
        """Keep a run: its trace written first (atomically), then its row committed; returns the run's id."""
        from skipcore.traces import write_trace

        self._ready()
        name = f"run-{uuid.uuid4().hex[:12]}.parquet"
        path = self.root / TRACES / name
        write_trace(run.trace, path, run.metadata)
        row = (
            datetime.now(timezone.utc).isoformat(timespec="seconds"),
            run.page,
            run.label,
            json.dumps(run.settings),
            json.dumps({k: _finite(v) for k, v in run.summary.items()}),
            int(run.num_layers),
            json.dumps(list(run.prompts)),
            json.dumps(list(run.texts)),
            name,
        )
        try:
            with self._db() as db:
                cur = db.execute(
                    "INSERT INTO runs (created, page, label, settings, summary, num_layers, prompts, texts, "
                    "trace_file) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    row,
                )
                return int(cur.lastrowid)
        except BaseException:
            path.unlink(missing_ok=True)  # our own file, which no row names
            raise

    def runs(self) -> list[Run]:
        """Every kept run, newest first."""
        if not (self.root / INDEX).is_file():
            return []
        with self._db() as db:
            rows = db.execute(
                "SELECT id, created, page, label, settings, summary, num_layers, prompts, texts, trace_file "
                "FROM runs ORDER BY id DESC"
            ).fetchall()
        return [self._checked(_run(row)) for row in rows]

    def get(self, run_id: int) -> Run:
        found = [r for r in self.runs() if r.id == run_id]
        if not found:
            raise UserError(f"run #{run_id} is not in the run history (deleted?)")
        return found[0]

    def _own_trace(self, name: str) -> Path | None:
        """The trace file a row names, where it is the store's own: a plain name in traces/, not a symlink; None
        for anything else (a path out of the folder, a link, a name the system refuses)."""
        if not name or name in (".", "..") or Path(name).name != name or any(c in name for c in "\\\0"):
            return None
        path = self.root / TRACES / name
        try:
            return None if path.is_symlink() else path
        except OSError:  # a name too long for the file system names nothing of ours
            return None

    def _checked(self, run: Run) -> Run:
        """The run, with why it cannot be reopened where its trace is not the store's own file, or is gone."""
        if run.problem is not None:
            return run
        path = self._own_trace(run.trace_file)
        if path is None:
            return replace(run, problem=f"its trace {run.trace_file!r} is not a file of the run history")
        try:
            there = path.is_file()
        except OSError as e:
            return replace(run, problem=f"its trace file {run.trace_file} cannot be read: {e.strerror or e}")
        return run if there else replace(run, problem=f"its trace file {run.trace_file} is missing")

    def trace(self, run_id: int) -> tuple[pd.DataFrame, dict]:
        """A kept run's trace and its metadata; a UserError saying why where the run cannot be reopened."""
        from skipcore.traces import read_trace

        run = self.get(run_id)
        if run.problem is not None:
            raise UserError(f"run #{run_id}: {run.problem}")
        return read_trace(self.root / TRACES / run.trace_file)

    def delete(self, run_id: int) -> None:
        """Remove one run: its row, then the trace file its row names where that file is the store's own (a row
        naming anything else goes alone; nothing outside traces/ is ever deleted)."""
        run = self.get(run_id)
        path = self._own_trace(run.trace_file)
        with self._db() as db:
            db.execute("DELETE FROM runs WHERE id = ?", (run_id,))
        if path is None:
            return
        try:
            path.unlink(missing_ok=True)
        except OSError as e:
            raise UserError(f"run #{run_id} is deleted, but not its trace {path}: {e.strerror or e}") from e
