"""The dashboard's run history on disk: every long result a page made (a Generate run, a small sweep, a comparison
of policies, a lens run, and any other kind a page adds) with the settings that made it, its tables as Parquet
files and an index of runs in SQLite (the standard library's `sqlite3`: a file format other tools read,
transactions, no server), so runs survive a reload and a restart, and can be listed, reopened, compared and deleted
one by one.

A run is one row of the index (`RunRecord` in, `Run` out): its kind (`page`, the page that made it and reopens
it), its label, its settings in words and in full, the page's own settings as the page held them (`inputs`, what
reopening restores), a summary, prompts and texts where it has them, any other JSON it needs (`data`), and its
tables (`tables`: part -> frame and metadata), each written to a Parquet file of its own. A new kind of run is
one more record of this shape: nothing here knows the kinds.

The folder is the dashboard's own: `$SKIPCORE_APP_RUNS`, by default `skipcore/dashboard-runs` under
`$XDG_DATA_HOME` (`~/.local/share`). A marker file says the dashboard made it; a folder that holds other files and
no marker is refused, never written into. Only files the index names are ever deleted, and only inside the
folder's `traces/` (every run's tables, a Generate run's trace among them), never through a symlink. A run's files
are written (atomically) before its row is committed, so the index never names a missing file; a file without a
row (an interrupted run) is left alone.

Rows are read one by one: a row that is damaged (hand-edited, written by another tool), one of whose files is gone
or names a file outside `traces/` is still listed, with why it cannot be reopened (`Run.problem`), and can be
deleted; it never hides the others. An index written before runs had `files`, `inputs` and `data` gains them
(empty) the first time it is opened.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from skipcore.errors import UserError
from skipcore.files import expand_home, home_folder

RUNS_ENV = "SKIPCORE_APP_RUNS"
MARKER = ".skipcore-dashboard-runs"  # in the folder: the dashboard made it
INDEX = "runs.sqlite"
TRACES = "traces"  # every run's tables
TRACE = "trace"  # the part that is a run's per-token trace (kept in the `trace_file` column, read as a trace)
SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created TEXT NOT NULL,
    page TEXT NOT NULL,       -- the kind of run: the page that made it and reopens it
    label TEXT NOT NULL,
    settings TEXT NOT NULL,   -- JSON: setting -> [in words, in full] (app.dashboard.provenance)
    summary TEXT NOT NULL,    -- JSON: a few numbers the history lists (skipcore.summarize of a trace)
    num_layers INTEGER NOT NULL,
    prompts TEXT NOT NULL,    -- JSON list
    texts TEXT NOT NULL,      -- JSON list
    trace_file TEXT NOT NULL, -- its trace: a file name in traces/ ('' for a run without one)
    files TEXT NOT NULL DEFAULT '{}',  -- JSON: its other tables, part -> a file name in traces/
    inputs TEXT NOT NULL DEFAULT '{}', -- JSON: the page's settings as it held them (widget key -> value)
    data TEXT NOT NULL DEFAULT '{}'    -- JSON: the rest of what the page shows
)
"""
ADDED = {"files": "'{}'", "inputs": "'{}'", "data": "'{}'"}  # columns an older index lacks, and their value


def default_root() -> Path:
    """Where the run history lives: $SKIPCORE_APP_RUNS, else skipcore/dashboard-runs under $XDG_DATA_HOME."""
    env = os.environ.get(RUNS_ENV, "").strip()
    if env:
        return expand_home(env)
    base = os.environ.get("XDG_DATA_HOME") or home_folder(RUNS_ENV) / ".local" / "share"
    return expand_home(base) / "skipcore" / "dashboard-runs"


Table = tuple[pd.DataFrame, dict]  # a frame and the metadata that travels with it


@dataclass(frozen=True)
class RunRecord:
    """A run to keep: its kind (the page that made it), the settings that made it and what it gave."""

    page: str
    label: str  # what it ran, in words
    settings: dict  # setting -> [in words, in full] (app.dashboard.provenance)
    num_layers: int
    tables: dict[str, Table] = field(default_factory=dict)  # part -> its frame and metadata; TRACE: the trace
    summary: dict = field(default_factory=dict)  # numbers the history lists (skipcore.summarize of a trace)
    prompts: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    inputs: dict = field(default_factory=dict)  # the page's settings as it held them: reopening restores them
    data: dict = field(default_factory=dict)  # the rest of what the page shows (JSON)


@dataclass(frozen=True)
class Run:
    """One kept run, as the index lists it (its tables are read on demand)."""

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
    files: dict = field(default_factory=dict)  # its other tables: part -> file name
    inputs: dict = field(default_factory=dict)
    data: dict = field(default_factory=dict)
    problem: str | None = None  # why it cannot be reopened (its row damaged, a file gone), or None

    @property
    def made_utc(self) -> str:
        """When it was made, month to minute in UTC ('11-30 01:21'), as the run history lists it."""
        return self.created[5:16].replace("T", " ")

    @property
    def parts(self) -> dict[str, str]:
        """Every table the run keeps: part -> file name (its trace under TRACE)."""
        return {**({TRACE: self.trace_file} if self.trace_file else {}), **self.files}


def _is_settings(value: object) -> bool:
    """setting -> [in words, in full], as `provenance` writes them."""
    return isinstance(value, dict) and all(
        isinstance(v, list) and len(v) == 2 and isinstance(v[0], str) for v in value.values()
    )


def _is_texts(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _is_files(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


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
    "trace_file": (str, lambda v: isinstance(v, str)),
    "files": (json.loads, _is_files),
    "inputs": (json.loads, lambda v: isinstance(v, dict)),
    "data": (json.loads, lambda v: isinstance(v, dict)),
}
# what a field that cannot be read reads as (a text field: "?"; a file name: "", which names no file)
DAMAGED = {"settings": {}, "summary": {}, "num_layers": 0, "prompts": [], "texts": [], "trace_file": ""}
DAMAGED.update(files={}, inputs={}, data={})


def _run(row: tuple) -> Run:
    """One row of the index as a run; a field that cannot be read is left empty and named in `problem`, so the
    run is still listed (and can be deleted)."""
    run_id, *values = row
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
    problem = f"its record is damaged ({', '.join(bad)} cannot be read)" if bad else None
    return Run(int(run_id), problem=problem, **fields)


def _finite(value: object) -> object:
    """JSON has no NaN: a missing number (NaN, inf) is stored as null, at any depth."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _json(value: object) -> str:
    return json.dumps(_finite(value), default=str, allow_nan=False)


def _write_table(frame: pd.DataFrame, path: Path, metadata: dict) -> None:
    """A table as Parquet with its metadata in the schema (as `skipcore.write_trace` writes a trace), atomically."""
    import pyarrow as pa

    from skipcore.files import write_parquet
    from skipcore.traces.files import META_KEY

    table = pa.Table.from_pandas(frame, preserve_index=False)
    table = table.replace_schema_metadata(
        {**(table.schema.metadata or {}), META_KEY: _json(metadata).encode()}
    )
    write_parquet(table, path)


def _parquet_framed_file(path: Path) -> bool:
    """Whether a Parquet file begins and ends as every whole one does (its magic bytes): a file cut short is said
    in the listing, at the cost of reading 8 bytes, not when its run is reopened (damage inside the file is said
    then). A file of another kind is not judged here."""
    from skipcore.files import parquet_framed

    if path.suffix != ".parquet":
        return True
    with path.open("rb") as f:
        return parquet_framed(f)


def _read_table(path: Path) -> Table:
    from skipcore.files import read_parquet
    from skipcore.traces.files import META_KEY

    try:
        frame, schema_meta = read_parquet(path)
        raw = schema_meta.get(META_KEY)
        return frame, json.loads(raw) if raw else {}
    except (OSError, ValueError) as e:
        raise UserError(f"{path.name} cannot be read: {str(e).splitlines()[0]}") from e


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

    def _could_keep(self) -> None:
        """Refuse, as keeping a run would, a folder no run can be kept in: it, or the nearest of its parents that
        exists, is not a folder (a reading makes nothing: `_ready` makes the folder when the first run is kept)."""
        here = self.root
        while not here.exists() and here != here.parent:
            here = here.parent
        if not here.is_dir():
            raise UserError(
                f"cannot keep runs in {self.root}: {here} is a file, not a folder; set {RUNS_ENV}"
            )

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        self._ready()
        try:
            with closing(sqlite3.connect(self.root / INDEX, timeout=10)) as db:
                db.execute(SCHEMA)
                have = {row[1] for row in db.execute("PRAGMA table_info(runs)")}
                for column, empty in ADDED.items():
                    if column not in have:  # an index written before runs had it
                        db.execute(f"ALTER TABLE runs ADD COLUMN {column} TEXT NOT NULL DEFAULT {empty}")
                with db:  # one transaction: committed on success, rolled back on error
                    yield db
        except sqlite3.DatabaseError as e:
            raise UserError(f"the run history index {self.root / INDEX} cannot be used: {e}") from e

    # -- runs ------------------------------------------------------------------------------------------------
    def add(self, run: RunRecord) -> int:
        """Keep a run: each of its tables written first (atomically), then its row committed; returns its id."""
        self._ready()
        stem = f"run-{uuid.uuid4().hex[:12]}"
        names = {part: f"{stem}-{i}.parquet" for i, part in enumerate(run.tables)}
        names = {**names, **({TRACE: f"{stem}.parquet"} if TRACE in run.tables else {})}
        written = []
        try:
            for part, (frame, metadata) in run.tables.items():
                path = self.root / TRACES / names[part]
                if part == TRACE:
                    from skipcore.traces import write_trace

                    write_trace(frame, path, metadata)
                else:
                    _write_table(frame, path, metadata)
                written.append(path)
            row = (
                datetime.now(timezone.utc).isoformat(timespec="seconds"),
                run.page,
                run.label,
                _json(run.settings),
                _json(run.summary),
                int(run.num_layers),
                _json(list(run.prompts)),
                _json(list(run.texts)),
                names.get(TRACE, ""),
                _json({part: name for part, name in names.items() if part != TRACE}),
                _json(run.inputs),
                _json(run.data),
            )
            with self._db() as db:
                cur = db.execute(
                    f"INSERT INTO runs ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(row))})", row
                )
                return int(cur.lastrowid)
        except BaseException:
            for path in written:
                path.unlink(missing_ok=True)  # our own files, which no row names
            raise

    def runs(self, page: str | None = None) -> list[Run]:
        """Every kept run (of one `page` where given: read alone), newest first."""
        if page is not None:
            return self._rows("WHERE page = ? ORDER BY id DESC", (page,))
        return self._rows("ORDER BY id DESC")

    def get(self, run_id: int) -> Run:
        """One kept run, read alone (a page comparing many picked runs reads each so: not the whole index each)."""
        found = self._rows("WHERE id = ?", (run_id,))
        if not found:
            raise UserError(f"run #{run_id} is not in the run history (deleted?)")
        return found[0]

    def _rows(self, clause: str, args: tuple = ()) -> list[Run]:
        if not (self.root / INDEX).is_file():
            self._could_keep()  # no runs yet, or none can ever be kept: said, not an empty history
            return []
        with self._db() as db:
            rows = db.execute(f"SELECT id, {', '.join(COLUMNS)} FROM runs {clause}", args).fetchall()
        return [self._checked(_run(row)) for row in rows]

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
        """The run, with why it cannot be reopened where one of its files is not the store's own, or is gone."""
        if run.problem is not None:
            return run
        for name in run.parts.values():
            path = self._own_trace(name)
            if path is None:
                return replace(run, problem=f"its file {name!r} is not a file of the run history")
            try:
                there = path.is_file()
                whole = not there or _parquet_framed_file(path)
            except OSError as e:
                return replace(run, problem=f"its file {name} cannot be read: {e.strerror or e}")
            if not there:
                return replace(run, problem=f"its file {name} is missing")
            if not whole:
                return replace(
                    run,
                    problem=f"its file {name} is cut short or damaged (no Parquet marker at its start or end)",
                )
        return run

    def table(self, run_id: int, part: str) -> Table:
        """One of a kept run's tables and its metadata (its trace, read and checked as one, under TRACE); a
        UserError saying why where the run cannot be reopened."""
        run = self.get(run_id)
        if run.problem is not None:
            raise UserError(f"run #{run_id}: {run.problem}")
        if part not in run.parts:
            raise UserError(f"run #{run_id} keeps no {part}")
        path = self.root / TRACES / run.parts[part]
        if part == TRACE:
            from skipcore.traces import read_trace

            return read_trace(path)
        return _read_table(path)

    def trace(self, run_id: int) -> Table:
        """A kept run's trace and its metadata."""
        return self.table(run_id, TRACE)

    def delete(self, run_id: int) -> None:
        """Remove one run: its row, then the files its row names where they are the store's own and no other
        row names them (a row naming anything else goes alone; nothing outside traces/ is ever deleted; a
        hand-edited row naming another run's file leaves that run whole)."""
        run, runs = self.get(run_id), self.runs()
        others = {name for r in runs if r.id != run_id for name in r.parts.values()}
        names = [name for name in run.parts.values() if name not in others]
        paths = [p for p in map(self._own_trace, names) if p is not None]
        with self._db() as db:
            db.execute("DELETE FROM runs WHERE id = ?", (run_id,))
        for path in paths:
            try:
                path.unlink(missing_ok=True)
            except OSError as e:
                raise UserError(
                    f"run #{run_id} is deleted, but not its file {path}: {e.strerror or e}"
                ) from e
