"""A sweep's results file: one writer at a time, every row flushed atomically, nothing lost or deleted by mistake.

- One writer: a lock file beside the results (`.<name>.lock`, `skipcore.output_lock`) is taken for the whole
  run; a second sweep on the same file is refused in one line (a lock left by a dead process is taken over).
- Identity: the file records every run-wide setting that changes results (model, lengths, device, timing, and the
  data set by the digest of the rows read: `skipcore.evaluate.identity`); a resumed sweep must match it, or is
  refused in one line naming each difference.
- Atomic: the Parquet record and its CSV copy are written beside themselves and renamed, after every row, so
  an interruption leaves the old or the new table, readable.
- Its own files only: the Parquet record names the digest of the CSV copy it wrote, so a CSV of that name that
  the sweep did not write (a user's `mine.csv` beside `--out mine.parquet`) is refused, never replaced. Each
  trace file names the results file it belongs to (its metadata, and a digest of that path in its name), so two
  sweeps sharing a traces folder never write or delete each other's traces.
- `--overwrite` deletes nothing up front: the new rows replace the table as they come, and only when the run
  has finished are the old run's trace files removed: only those in this sweep's traces folder whose metadata
  names this results file, that no new row points at. The record names them until then, so a run stopped
  before it finished is still cleaned up by the run that finishes it (resumed, or overwritten again). A file
  that is not a sweep's results is never replaced.
- Paths are checked before any work: the traces folder is a folder (or can be made), and is not the results
  file, its CSV copy or its lock.
"""

from __future__ import annotations

import hashlib
import json
import re
from functools import cache
from pathlib import Path

import pandas as pd

from skipcore.errors import UserError, first_line
from skipcore.evaluate.columns import Column, check_columns, number_columns, text_columns
from skipcore.evaluate.identity import differences, differing, said
from skipcore.files import (
    atomic_writes,
    check_companion,
    check_path_text,
    check_utf8_name,
    check_writable_folder,
    expand_home,
    file_digest,
    json_object,
    parquet_writer,
    parse_json,
    read_parquet,
    refuse_special,
)
from skipcore.measure.paired_timing import RUNS_COLUMNS
from skipcore.output_lock import OutputLock

META_KEY = b"skipcore_sweep"
TRACE_META_KEY = "sweep_results"  # in a trace's run metadata: the results file (resolved) that owns it
REPLACED_KEY = "replaced_traces"  # in the record: an --overwrite's old traces, until its run has finished


class NotASweep(UserError):
    """A readable Parquet file that no sweep wrote (a trace, a curve, a user's table)."""


def read_sweep(path: str | Path) -> tuple[pd.DataFrame, dict]:
    """A sweep's rows and its metadata (the identity of the run that made it)."""

    path = Path(path)
    if path.suffix.lower() != ".parquet":
        copy = path.with_suffix(".parquet")
        beside = f": read {copy}, whose copy for spreadsheets it may be" if copy.is_file() else ""
        raise UserError(f"{path}: a sweep's results are read from its .parquet file{beside}")
    try:
        frame, schema_meta = read_parquet(path)
    except (OSError, ValueError) as e:
        raise UserError(f"{path} is not a readable sweep file ({first_line(e)})") from e
    raw = schema_meta.get(META_KEY)
    if raw is None:
        raise NotASweep(f"{path} is not a skipcore sweep's results (its Parquet holds no sweep record)")
    try:
        meta = parse_json(raw)
    except ValueError as e:
        raise UserError(f"{path}: its sweep record cannot be read ({first_line(e)})") from e
    if not isinstance(meta, dict):
        raise UserError(f"{path}: its sweep record is not a JSON object")
    return frame, meta


@cache
def row_columns() -> dict[str, Column]:
    """What each column a sweep writes holds (`skipcore.evaluate.columns`): the rows a resume keeps are checked
    against it before any work. Text: the row's identity, its setting's words and where it ran; every row names
    its setting, model and policy. Numbers: the setting's numbers, quality, costs and timings, each missing where
    a row has none (NaN: a policy without a schedule, a sweep not timed). A policy's parameter columns take the
    kind their declaration gives (`sweep_params`). Columns not named here (a tune's own) are not checked."""
    from skipcore.evaluate.sweep.settings import sweep_params

    params = {column: Column("text" if p.kind is str else "number") for column, p in sweep_params().items()}
    return {
        **text_columns("setting_id", "model", "model_role", "policy", required=True),
        **text_columns(
            "shape", "mode", "timing_flag", "device", "dtype", "attention_dtype", "hardware", "host"
        ),
        **text_columns("model_path", "dataset", "split", "trace_path", "sweep_run_id", "created"),
        **text_columns(*RUNS_COLUMNS),  # each side's timed runs, a JSON array (`paired_timing.runs_text`)
        **number_columns("batch_size", required=True),
        **number_columns("warmup", "target_speedup", "max_layers", "min_layers", "schedule_speedup"),
        **params,
        **number_columns("bleu", "rougeL", "chrf", "rouge1", "rouge2", "slot_name", "slot_near", "slot_all"),
        **number_columns("num_examples", "mean_output_tokens", "num_layers", "tokens", "decode_steps"),
        **number_columns(
            "layer_speedup", "layer_speedup_token_mean", "batch_layer_speedup", "mean_layers_run"
        ),
        **number_columns("flops_speedup_decode", "flops_speedup_with_prompt", "batch_flops_speedup_decode"),
        **number_columns("kv_cache_bytes", "kv_cache_bytes_full", "kv_bytes_saved", "kv_saved_fraction"),
        **number_columns("flops_per_token", "draft_acceptance", "tokens_per_full_pass", "same_as_full_depth"),
        **number_columns(
            *(f"wall_speedup_{m}{end}" for m in ("decode", "total") for end in ("", "_lo", "_hi"))
        ),
        **number_columns("timing_runs", "timing_prompts", "decode_ms_per_step", "full_decode_ms_per_step"),
        **number_columns("seconds", "full_seconds", "tokens_per_s"),
        **number_columns("torch_threads", "limit", "max_new_tokens", "decay_span", "speedup_over", "threads"),
    }


def check_kept_rows(path: Path, rows: pd.DataFrame) -> None:
    """Refuse in one line, naming the file and the column, rows a resume would keep (and write again with its new
    ones) that hold a value of the wrong kind: text where numbers belong, as a hand edit leaves it. Found only
    when the file is written again, after the new rows' work, it would lose that work."""
    check_columns(
        path,
        {str(name): rows[name] for name in rows.columns},
        row_columns(),
        "a resumed run keeps its rows as they are: put back the values the run wrote, or choose another --out",
    )


def _csv_text(df: pd.DataFrame) -> str:
    return df.to_csv(index=False)


def kept_after_stop(
    out: Path, before: str | None, again: str, unit: str = "setting", unwritten: str = "nothing written"
) -> str:
    """What a sweep (or a tune's trials table) stopped part way has kept, as its interrupt message says it: the
    rows (`unit`s) in `out` where it wrote there (the file's digest is no longer `before`, the one it had at the
    start, None where there was none), and `again`, the command that resumes them; else that none had finished
    (the file as it was, or `unwritten`: what a writer left where there was no file)."""
    import pyarrow.parquet as pq

    out = expand_home(out)
    try:
        changed = out.is_file() and file_digest(out) != before
        rows = pq.ParquetFile(out).metadata.num_rows if changed else 0
    except (OSError, ValueError):
        return f"{out} holds the {unit}s finished so far: {again} resumes the rest"
    if not changed:
        return (
            f"no {unit} had finished: {out} is as it was"
            if before
            else f"no {unit} had finished: {unwritten}"
        )
    said = f"{rows} {unit}{'s' if rows != 1 else ''}"
    return f"{out} keeps the {said} finished so far: {again} resumes the rest"


def read_own_sweep(out: Path) -> tuple[pd.DataFrame, dict] | None:
    """The results file at `out` with its metadata (None where there is none), refused in one line where it is not
    a sweep's, or where the CSV beside it is not the copy it wrote: what a writer checks before it adds rows to
    them or removes them."""
    csv = out.with_suffix(".csv")
    if not out.exists():
        check_companion(csv, out, True, lambda _: False)  # a CSV with no sweep is not ours
        return None
    try:
        old, meta = read_sweep(out)
    except NotASweep:
        raise UserError(
            f"{out} exists and is not a skipcore sweep's results; it will not be replaced: choose another out",
            field="out",
        ) from None
    digests = tuple(meta.get("csv_sha256") or ())
    header = _csv_text(old.head(0)).strip()
    check_companion(csv, out, True, lambda p: _own_csv(p, digests, header))
    return old, meta


def _own_csv(path: Path, digests: tuple[str, ...], header: str) -> bool:
    """The CSV copy a record wrote: its digest is recorded (a results file from before digests were recorded: the
    CSV starts with the record's own header)."""
    if digests:
        return file_digest(path) in digests
    with path.open(encoding="utf-8", errors="replace") as f:
        return f.readline().strip() == header


# a model's (or adapter's) config, by the key that says it is one: a traces folder holding one is the model's
MODEL_CONFIGS = {"config.json": "model_type", "adapter_config.json": "base_model_name_or_path"}


def _model_config(folder: Path) -> str | None:
    """The name of the model config `folder` holds, if any (a config.json of another tool's is not one)."""
    for name, key in MODEL_CONFIGS.items():
        if key in (json_object(folder / name) or {}):
            return name
    return None


class SweepStore:
    """The rows written so far (Parquet is the record; the CSV is a copy). Use as a context manager."""

    def __init__(
        self, out: Path, identity: dict, overwrite: bool, traces_dir: Path, writer: str = "sweep"
    ) -> None:
        """`writer`: the tool writing the rows, as its lock's messages name it (a tune writes its trials here)."""
        if out.suffix.lower() != ".parquet":
            raise UserError(
                f"out must be a .parquet file (a .csv with the same stem is written too), got {out}",
                field="out",
            )
        out, traces_dir = expand_home(out), expand_home(traces_dir)
        self.out, self.csv, self.identity, self.writer = out, out.with_suffix(".csv"), identity, writer
        self.overwrite, self.traces_dir = overwrite, traces_dir
        # one lock for the names that share one CSV copy (x.parquet and x.PARQUET)
        self.lock = OutputLock(out.with_suffix(".parquet"), writer)
        self.rows: list[dict] = []
        self.old_traces: list[str] = []
        self.csv_digests: tuple[str, ...] = ()  # the CSV copy this record wrote last (and the one before)
        self._check_paths()

    def _check_paths(self) -> None:
        """Every path the sweep writes, checked before any work."""
        check_path_text(self.out, "out", field="out")
        check_path_text(self.traces_dir, "traces_dir", field="traces_dir")
        for path, name in (
            (self.out, "out"),
            (self.traces_dir, "traces_dir"),
        ):  # written by pyarrow, recorded
            check_utf8_name(path, name, field=name)
        if self.out.is_dir():
            raise UserError(f"out {self.out} is a folder; name the results .parquet file", field="out")
        refuse_special(self.out)
        check_writable_folder(self.out.parent, f"cannot write {self.out}")
        tdir = self.traces_dir
        if tdir.exists() and not tdir.is_dir():
            raise UserError(
                f"the traces folder {tdir} (traces_dir; by default beside out, named after it) is a file; move it "
                "or name a folder for the per-setting traces",
                field=("traces_dir", "out"),
            )
        model_file = _model_config(tdir) if tdir.is_dir() else None
        if model_file is not None:  # a model's folder (--traces-dir given the --model): no place for traces
            raise UserError(
                f"traces_dir {tdir} holds a model ({model_file}); name a folder of the sweep's own for its "
                "per-setting traces",
                field="traces_dir",
            )
        mine = {p.resolve(): p for p in (self.out, self.csv, self.lock.path)}
        if tdir.resolve() in mine:
            raise UserError(
                f"traces_dir {tdir} is the sweep's own {mine[tdir.resolve()].name}; name another folder",
                field="traces_dir",
            )
        check_writable_folder(tdir, f"cannot write traces to {tdir}")

    # -- one writer ----------------------------------------------------------------------------------------------
    def __enter__(self) -> SweepStore:
        self.lock.take_then(self._load)
        return self

    def __exit__(self, *exc) -> None:
        self.lock.release()

    # -- resume or replace ----------------------------------------------------------------------------------------
    def _load(self) -> None:
        found = read_own_sweep(self.out)
        if found is None:
            return
        old, meta = found
        # a tune's trials are no sweep's results, whatever --overwrite says: replaced, the tune could not go on
        written_by = meta.get("writer") or ("tune" if "tune_trial" in old.columns else "sweep")
        if written_by != self.writer:
            kind = "trials" if written_by == "tune" else "results"
            raise UserError(
                f"{self.out} holds a {written_by}'s {kind}; a {self.writer} does not add to them or replace them: "
                "choose another out",
                field="out",
            )
        self.csv_digests = tuple(meta.get("csv_sha256") or ())
        # the traces of a run an earlier --overwrite replaced, if it stopped before it finished
        pending = [str(p) for p in meta.get(REPLACED_KEY) or () if isinstance(p, str)]
        if self.overwrite:
            listed = [str(p) for p in old.get("trace_path", pd.Series(dtype=str)).dropna()]
            self.old_traces = list(dict.fromkeys(pending + listed))
            return
        theirs = meta.get("identity", {})
        if differences(theirs, self.identity):
            raise UserError(
                f"{self.out} holds a sweep made with other settings: {said(theirs, self.identity, most=99)}; pass "
                "overwrite to replace it or choose another out",
                field=("out", "overwrite", *differing(theirs, self.identity)),
            )
        check_kept_rows(self.out, old)
        self.rows = old.to_dict("records")
        self.old_traces = pending

    def traces_gone_note(self) -> str:
        """'; the traces of N kept settings are gone (...)' where kept rows name trace files no longer there (a
        traces folder deleted between runs): their numbers stand, but what the rows point at does not; '' else."""
        gone = [
            r["trace_path"]
            for r in self.rows
            if isinstance(r.get("trace_path"), str)
            and r["trace_path"]
            and not (self.out.parent / r["trace_path"]).is_file()
        ]
        if not gone:
            return ""
        return (
            f"; the traces of {len(gone)} kept setting{'s' * (len(gone) != 1)} are gone (first: {gone[0]}): their "
            "rows keep their numbers; --overwrite runs every setting again"
        )

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
        """The Parquet record (naming the digest of the CSV about to be written, and the previous one, so an
        interruption between the two renames leaves a CSV the record still knows), then the CSV copy."""
        import pyarrow as pa

        df = self.frame()
        text = _csv_text(df)
        digest = hashlib.sha256(text.encode()).hexdigest()
        self.csv_digests = (digest, *self.csv_digests[:1])
        table = pa.Table.from_pandas(df, preserve_index=False)
        record = {"identity": self.identity, "csv_sha256": list(self.csv_digests), "writer": self.writer}
        if self.old_traces:  # until the run finishes, so a resumed or repeated run still removes them
            record[REPLACED_KEY] = self.old_traces
        meta = {**(table.schema.metadata or {}), META_KEY: json.dumps(record).encode()}
        table = table.replace_schema_metadata(meta)
        # both written to their temporary files first, then renamed: a stop (Ctrl-C, SIGTERM) while the CSV was
        # written left the first flush's Parquet file without any CSV beside it
        try:
            atomic_writes(
                [
                    (self.out, parquet_writer(table)),
                    (self.csv, lambda p: p.write_bytes(text.encode())),
                ]
            )
        except OSError as e:
            raise UserError(f"cannot write {self.out}: {e.strerror or e}") from e

    # -- traces -----------------------------------------------------------------------------------------------------
    def trace_file(self, setting_id: str) -> Path:
        """Where a setting's trace goes: its id and a digest of this results file's path, so sweeps sharing a
        traces folder never write over each other's traces."""
        return self.traces_dir / f"{setting_id}-{self._owner()}.parquet"

    def _owner(self) -> str:
        return hashlib.sha256(str(self.out.resolve()).encode()).hexdigest()[:8]

    def trace_marker(self) -> dict:
        """What a trace's run metadata records of the sweep that owns it."""
        return {TRACE_META_KEY: str(self.out.resolve())}

    def _owns_trace(self, path: Path) -> bool:
        import pyarrow.parquet as pq

        from skipcore.traces.files import META_KEY as TRACE_KEY

        try:
            raw = (pq.read_schema(path).metadata or {}).get(TRACE_KEY)
            meta = parse_json(raw) if raw else {}
        except (OSError, ValueError):
            return False
        return isinstance(meta, dict) and meta.get(TRACE_META_KEY) == str(self.out.resolve())

    def _clear_unrecorded(self, keep: set[Path]) -> None:
        """From this sweep's traces folder: its own traces that no row names (a stop between a trace's write and
        its row's; a rerun under other settings would never name them) and the temporary files of its trace
        writes that a kill cut short (`files.atomic_writes`' names, of this results file's traces). Nothing of
        another sweep's or a user's: a trace is this file's by its name's digest and its metadata."""
        if not self.traces_dir.is_dir() or self.traces_dir.is_symlink():
            return
        own = f"-{self._owner()}"
        cut_short = re.compile(rf"^\.[0-9a-f]+{own}\.[0-9a-f]{{16}}\.tmp\.parquet$")
        for path in self.traces_dir.iterdir():
            if path.is_symlink() or not path.is_file():
                continue
            if cut_short.match(path.name) or (
                path.name.endswith(f"{own}.parquet") and path.resolve() not in keep and self._owns_trace(path)
            ):
                path.unlink(missing_ok=True)

    def finish(self) -> None:
        """After a complete run: with --overwrite (or resuming one that stopped), the table is the new run's
        alone (written even when empty) and the old run's traces that no new row uses are removed: from this
        sweep's traces folder only, and only those whose metadata names this results file. The record names them
        until then. Either way, what a stop left of this results file's own trace writes goes
        (`_clear_unrecorded`)."""
        keep = {(self.out.parent / r["trace_path"]).resolve() for r in self.rows if r.get("trace_path")}
        self._clear_unrecorded(keep)
        if not (self.overwrite or self.old_traces):
            return
        folder = self.traces_dir.resolve()
        for rel in self.old_traces:
            path = (self.out.parent / rel).resolve()
            if path.parent == folder and path not in keep and path.is_file() and self._owns_trace(path):
                path.unlink(missing_ok=True)
        self.old_traces = []
        self.flush()
