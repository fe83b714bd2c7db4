"""A sweep's results file: one writer at a time, every row flushed atomically, nothing lost or deleted by mistake.

- One writer: a lock file beside the results (`.<name>.lock`, holding the writer's pid) is taken for the whole
  run; a second sweep on the same file is refused in one line (a lock left by a dead process is taken over).
- Identity: the file records every run-wide setting that changes results (model, data, lengths, device,
  timing); a resumed sweep must match it, or is refused in one line naming each difference.
- Atomic: the Parquet record and its CSV copy are written beside themselves and renamed, after every row, so
  an interruption leaves the old or the new table, readable.
- `--overwrite` deletes nothing up front: the new rows replace the table as they come, and only when the run
  has finished are the old run's trace files removed, and only those inside this sweep's traces folder, named
  as the sweep names them, that no new row points at. A file that is not a sweep's results is never replaced.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from pathlib import Path

import pandas as pd

from skipcore.errors import UserError
from skipcore.files import atomic_write

META_KEY = b"skipcore_sweep"
TRACE_NAME = re.compile(r"[0-9a-f]{16}\.parquet")  # `<setting id>.parquet`, the only names a sweep writes


def read_sweep(path: str | Path) -> tuple[pd.DataFrame, dict]:
    """A sweep's rows and its metadata (the identity of the run that made it)."""
    import pyarrow.parquet as pq

    path = Path(path)
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as e:
        raise UserError(f"{path} is not a readable sweep file ({str(e).splitlines()[0]})") from e
    raw = (table.schema.metadata or {}).get(META_KEY)
    if raw is None:
        raise UserError(
            f"{path} exists and is not a skipcore sweep's results; it will not be replaced: choose another --out"
        )
    return table.to_pandas(), json.loads(raw)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


class SweepStore:
    """The rows written so far (Parquet is the record; the CSV is a copy). Use as a context manager."""

    def __init__(self, out: Path, identity: dict, overwrite: bool, traces_dir: Path) -> None:
        if out.suffix.lower() != ".parquet":
            raise UserError(
                f"--out must be a .parquet file (a .csv with the same stem is written too), got {out}"
            )
        self.out, self.csv, self.identity = out, out.with_suffix(".csv"), identity
        self.overwrite, self.traces_dir = overwrite, traces_dir
        self.lock = out.with_name(f".{out.name}.lock")
        self.rows: list[dict] = []
        self.old_traces: list[str] = []
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"cannot write {out}: {e.strerror or e}") from e
        if not os.access(out.parent, os.W_OK):
            raise UserError(f"cannot write {out}: {out.parent} is not writable")

    # -- one writer ----------------------------------------------------------------------------------------------
    def __enter__(self) -> SweepStore:
        self._take_lock()
        try:
            self._load()
        except BaseException:
            self._release_lock()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._release_lock()

    def _take_lock(self) -> None:
        for _ in range(2):
            try:
                fd = os.open(self.lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                try:
                    pid = int(self.lock.read_text().strip() or 0)
                except (OSError, ValueError):
                    pid = 0
                if pid and _alive(pid):
                    raise UserError(
                        f"another sweep (pid {pid}) is writing {self.out}; wait for it to finish or choose "
                        f"another --out (remove {self.lock} only if no such sweep is running)"
                    ) from None
                warnings.warn(
                    f"taking over {self.lock}, left by a sweep that is no longer running", stacklevel=3
                )
                self.lock.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w") as f:
                f.write(str(os.getpid()))
            return
        raise UserError(f"cannot take the lock {self.lock}; another sweep is starting on {self.out}")

    def _release_lock(self) -> None:
        try:
            if self.lock.read_text().strip() == str(os.getpid()):
                self.lock.unlink()
        except OSError:
            pass

    # -- resume or replace ----------------------------------------------------------------------------------------
    def _load(self) -> None:
        if not self.out.exists():
            return
        old, meta = read_sweep(self.out)
        if self.overwrite:
            self.old_traces = [str(p) for p in old.get("trace_path", pd.Series(dtype=str)).dropna()]
            return
        theirs = meta.get("identity", {})
        diff = [k for k in self.identity if theirs.get(k, "<missing>") != self.identity[k]]
        if diff:
            said = ", ".join(f"{k}={theirs.get(k, '<missing>')!r} (not {self.identity[k]!r})" for k in diff)
            raise UserError(
                f"{self.out} holds a sweep made with other settings: {said}; pass --overwrite to replace it "
                "or choose another --out"
            )
        self.rows = old.to_dict("records")

    @property
    def done(self) -> set[str]:
        return {r["setting_id"] for r in self.rows}

    def add(self, row: dict) -> None:
        self.rows.append(row)
        self.flush()

    def reorder(self, order: list[str]) -> None:
        """Rows in the order of `order`'s setting ids (a grid's run order; rows it does not name after them, as
        they were), rewritten only where that moves a row: executors that run units side by side hand rows back
        as they finish."""
        rank = {sid: i for i, sid in enumerate(order)}
        rows = sorted(self.rows, key=lambda r: rank.get(r["setting_id"], len(rank)))
        if [r["setting_id"] for r in rows] != [r["setting_id"] for r in self.rows]:
            self.rows = rows
            self.flush()

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)

    def flush(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        df = self.frame()
        table = pa.Table.from_pandas(df, preserve_index=False)
        meta = {**(table.schema.metadata or {}), META_KEY: json.dumps({"identity": self.identity}).encode()}
        table = table.replace_schema_metadata(meta)
        try:
            atomic_write(self.out, lambda p: pq.write_table(table, p))
            atomic_write(self.csv, lambda p: df.to_csv(p, index=False))
        except OSError as e:
            raise UserError(f"cannot write {self.out}: {e.strerror or e}") from e

    def finish(self) -> None:
        """After a complete run: with --overwrite, the table is the new run's alone (written even when empty)
        and the old run's traces that no new row uses are removed, from this sweep's traces folder only."""
        if not self.overwrite:
            return
        self.flush()
        keep = {(self.out.parent / r["trace_path"]).resolve() for r in self.rows if r.get("trace_path")}
        folder = self.traces_dir.resolve()
        for rel in self.old_traces:
            path = (self.out.parent / rel).resolve()
            if path.parent == folder and TRACE_NAME.fullmatch(path.name) and path not in keep:
                path.unlink(missing_ok=True)
