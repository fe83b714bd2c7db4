"""Loaders for the formats a researcher has on disk, all returning ``list[Example]``.

References are grouped per source (first-seen order kept), because the metrics score each prediction
against every reference of its source. Malformed input raises :class:`DataFormatError` naming the file and
line, so a bad row in a million-line file can be found without a debugger.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from skipcore.data.example import Example, lone_surrogate_said
from skipcore.data.prompts import TASKS
from skipcore.errors import UserError, not_utf8, quoted
from skipcore.files import KeysTwice, parse_json
from skipcore.shipped import shipped_elsewhere


class DataFormatError(UserError, ValueError):
    """A data file or data set that cannot be read as the expected format; the message names the line. It is about
    the data set setting (`dataset`, unless raised about another), so a front end says which of its settings named
    the file (`--dataset`)."""

    def __init__(self, *args: object, field: str | tuple[str, ...] | None = "dataset") -> None:
        super().__init__(*args, field=field)


class DataFileNotFoundError(DataFormatError, FileNotFoundError):
    """A data path that does not exist."""


# Column conventions of the public data sets, tried in order: (source column, target column).
FIELD_CONVENTIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "cnn_dm": (("article", "highlights"),),
    "tldr": (("content", "summary"), ("prompt", "label")),  # webis/tldr-17, openai_summarize_tldr
    "e2e": (("meaning_representation", "human_reference"), ("mr", "ref")),
    "generic": (("source", "target"),),
}

# Hub data sets that need a configuration name to load.
_DEFAULT_CONFIGS = {"cnn_dailymail": "3.0.0", "abisee/cnn_dailymail": "3.0.0"}


def _group(pairs: Iterable[tuple[str, list[str]]], task: str) -> list[Example]:
    """One Example per distinct source, references concatenated in first-seen order."""
    grouped: dict[str, list[str]] = {}
    for source, refs in pairs:
        grouped.setdefault(source, []).extend(refs)
    return [Example(source, tuple(refs), task) for source, refs in grouped.items()]


def _check_task(task: str) -> None:
    if task not in TASKS:
        raise DataFormatError(
            f"unknown task {quoted(task)}; expected one of {', '.join(TASKS)}", field="task"
        )


def _require_file(path: Path) -> None:
    if not path.exists():
        raise DataFileNotFoundError(f"{path}: no such file")
    if not path.is_file():
        raise DataFormatError(f"{path}: not a file")


def _not_text(path: Path, err: UnicodeDecodeError) -> DataFormatError:
    """What a dataset file that is not UTF-8 text is told."""
    return DataFormatError(f"{path}: {not_utf8(err)}")


def load_e2e_csv(path: str | Path, task: str = "e2e") -> list[Example]:
    """Read an E2E CSV (``mr``, ``ref`` columns, one row per reference) into one Example per MR."""
    path = Path(path)
    _check_task(task)
    _require_file(path)
    try:
        return _read_e2e_csv(path, task)
    except UnicodeDecodeError as err:
        raise _not_text(path, err) from None


def _read_e2e_csv(path: Path, task: str) -> list[Example]:
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # a long source (an article) is a field, not an error
    with path.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle)
        try:
            header = next(reader)
        except StopIteration:
            raise DataFormatError(
                f"{path}: empty file, expected a header with columns 'mr' and 'ref'"
            ) from None
        except csv.Error as err:
            raise DataFormatError(f"{path} line {reader.line_num}: {err}") from None
        columns = [name.strip().lower() for name in header]  # the real test set spells it 'MR'
        for column in ("mr", "ref"):
            if column not in columns:
                raise DataFormatError(f"{path}: missing column {column!r} (header: {', '.join(header)})")
            if columns.count(column) > 1:  # which one is meant cannot be told
                raise DataFormatError(
                    f"{path}: the column {column!r} appears {columns.count(column)} times (header: "
                    f"{', '.join(header)}); keep one"
                )
        mr_col, ref_col = columns.index("mr"), columns.index("ref")
        pairs = []
        try:
            for row in reader:
                if len(row) <= 1 and not "".join(row).strip():
                    continue  # a blank line (one of commas and spaces has cells: empty ones, refused below)
                if len(row) != len(header):
                    raise DataFormatError(
                        f"{path} line {reader.line_num}: {len(row)} field{'s' * (len(row) != 1)}, the header has "
                        f"{len(header)}"
                    )
                if [cell.strip().lower() for cell in row] == columns:  # `cat a.csv b.csv`: b's header
                    raise DataFormatError(
                        f"{path} line {reader.line_num}: the header again ({','.join(row)}), read as a pair of "
                        "its names: files joined with their headers? keep the first header only"
                    )
                mr, ref = row[mr_col].strip(), row[ref_col].strip()
                for column, value in (("mr", mr), ("ref", ref)):
                    if not value:
                        raise DataFormatError(f"{path} line {reader.line_num}: empty {column!r}")
                pairs.append((mr, [ref]))
        except csv.Error as err:
            raise DataFormatError(f"{path} line {reader.line_num}: {err}") from None
    return _group(pairs, task)


def _targets(value: Any, where: str, field: str) -> list[str]:
    """A target is one string or a non-empty list of strings."""
    refs = [value] if isinstance(value, str) else value
    if refs == []:
        raise DataFormatError(f"{where}: {field!r} is an empty list: give at least one reference")
    if not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
        raise DataFormatError(f"{where}: {field!r} must be a string or a list of strings")
    refs = [r.strip() for r in refs]
    if not all(refs):
        raise DataFormatError(f"{where}: empty {field!r}")
    for ref in refs:
        _refuse_surrogate(ref, where, field)
    return refs


def _refuse_surrogate(text: str, where: str, field: str) -> None:
    """Refused where `text` holds a lone surrogate (a JSON escape such as `\\ud800`, half a UTF-16 pair)."""
    if (said := lone_surrogate_said(text, field)) is not None:
        raise DataFormatError(f"{where}: {said}")


def load_jsonl(
    path: str | Path, source_field: str = "source", target_field: str = "target", task: str = "generic"
) -> list[Example]:
    """Read one JSON object per line; the target may be a string or a list of strings."""
    path = Path(path)
    _check_task(task)
    _require_file(path)
    try:
        return _read_jsonl(path, source_field, target_field, task)
    except UnicodeDecodeError as err:
        raise _not_text(path, err) from None


def _read_jsonl(path: Path, source_field: str, target_field: str, task: str) -> list[Example]:
    pairs = []
    # a byte-order mark, as a CSV may start with, is read past
    with path.open(encoding="utf-8-sig") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path} line {number}"
            twice = KeysTwice()
            try:
                record = parse_json(line, object_pairs_hook=twice)
            except json.JSONDecodeError as err:
                raise DataFormatError(f"{where}: invalid JSON ({err.msg})") from None
            if not isinstance(record, dict):
                raise DataFormatError(f"{where}: expected a JSON object, got {type(record).__name__}")
            read_twice = [field for field in (source_field, target_field) if field in twice.top]
            if read_twice:  # which one is meant cannot be told, as of a CSV's column named twice
                raise DataFormatError(f"{where}: the key {read_twice[0]!r} appears more than once; keep one")
            for field in (source_field, target_field):
                if field not in record:
                    raise DataFormatError(f"{where}: missing field {field!r}")
            source = record[source_field]
            if not isinstance(source, str) or not source.strip():
                raise DataFormatError(f"{where}: {source_field!r} must be a non-empty string")
            _refuse_surrogate(source, where, source_field)
            pairs.append((source.strip(), _targets(record[target_field], where, target_field)))
    return _group(pairs, task)


def _detect_fields(columns: list[str], task: str | None, where: str) -> tuple[str, str, str]:
    """Find (task, source column, target column) from the known conventions and the columns present."""
    tasks = [task] if task else list(FIELD_CONVENTIONS)
    for candidate in tasks:
        for source, target in FIELD_CONVENTIONS.get(candidate, ()):
            if source in columns and target in columns:
                return candidate, source, target
    known = "; ".join(f"{s}->{t}" for t in tasks for s, t in FIELD_CONVENTIONS.get(t, ()))
    raise DataFormatError(
        f"{where}: no known source/target columns (columns: {', '.join(columns)}; expected {known}); "
        "rename the columns to one of these pairs (or, from Python, pass load_examples source_field and "
        "target_field)"
    )


def _strip_tldr_suffix(text: str) -> str:
    """openai_summarize_tldr prompts end in 'TL;DR:', which our own tldr prompt adds again."""
    text = text.rstrip()
    return text.removesuffix("TL;DR:").rstrip()


def _open_hf_dataset(name_or_dir: str | Path, split: str | None, config: str | None) -> tuple[Any, str]:
    """Load a Dataset (not a DatasetDict) from disk or the hub; returns it with a printable name."""
    try:
        import datasets
    except ImportError as err:
        raise DataFormatError(f"{name_or_dir}: loading it needs the 'datasets' package ({err})") from None

    path = Path(name_or_dir)
    if path.is_dir():
        # a DatasetDict's split is read alone: one empty split made every other unreadable ("no rows" for all)
        splits = _saved_splits(path)
        if splits is not None:
            _check_split(name_or_dir, splits, split)
            path = path / split
        try:
            loaded = datasets.load_from_disk(str(path))
        except (FileNotFoundError, ValueError) as err:
            raise DataFormatError(f"{path}: not a data set saved with save_to_disk ({err})") from None
        except IndexError:  # datasets' own reading of a data set saved with no rows
            raise DataFormatError(
                f"{path}: a data set with no rows (or not one saved with save_to_disk)"
            ) from None
        if splits is not None:
            return loaded, f"{name_or_dir} [{split}]"
    else:
        name = str(name_or_dir)
        # Offline, unknown name, missing config: the hub raises many types, and all mean the same to a user.
        try:
            loaded = datasets.load_dataset(name, config or _DEFAULT_CONFIGS.get(name), split=split)
        except Exception as err:  # noqa: BLE001
            message = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise DataFormatError(
                f"{name}: not a local file or directory, and loading it from the hub failed ({message})"
            ) from None
    if isinstance(loaded, datasets.DatasetDict):
        _check_split(name_or_dir, list(loaded), split)
        return loaded[split], f"{name_or_dir} [{split}]"
    return loaded, str(name_or_dir)


def load_hf_dataset(
    name_or_dir: str | Path,
    split: str | None = None,
    task: str | None = None,
    source_field: str | None = None,
    target_field: str | None = None,
    config: str | None = None,
    limit: int | None = None,
) -> list[Example]:
    """Load a Hugging Face data set saved with ``save_to_disk`` or, where the network allows, from the hub.

    Columns follow the task's public convention (CNN-DM ``article``->``highlights``; TL;DR
    ``content``->``summary`` or ``prompt``->``label``); ``task=None`` detects the task from the columns.
    """
    if task is not None:
        _check_task(task)
    dataset, where = _open_hf_dataset(name_or_dir, split, config)
    columns = list(dataset.column_names)
    if source_field or target_field:
        if not (source_field and target_field):
            raise DataFormatError(f"{where}: give both source_field and target_field")
        for field in (source_field, target_field):
            if field not in columns:
                raise DataFormatError(f"{where}: missing column {field!r} (columns: {', '.join(columns)})")
        task = task or "generic"
    else:
        task, source_field, target_field = _detect_fields(columns, task, where)
    dataset = dataset.select_columns([source_field, target_field])
    examples = _group(_hf_pairs(dataset, source_field, target_field, task, where), task)
    return examples if limit is None else examples[:limit]  # sources, as a file's limit counts them


def _hf_pairs(
    dataset: Any, source_field: str, target_field: str, task: str, where: str
) -> Iterator[tuple[str, list[str]]]:
    row = 0
    for batch in dataset.iter(batch_size=1000):
        for source, target in zip(batch[source_field], batch[target_field], strict=True):
            row_where = f"{where} row {row}"
            row += 1
            if not isinstance(source, str) or not source.strip():
                raise DataFormatError(f"{row_where}: empty {source_field!r}")
            if task == "tldr":
                source = _strip_tldr_suffix(source)
            yield source.strip(), _targets(target, row_where, target_field)


def _check_split(name_or_dir: str | Path, splits: list[str], split: str | None) -> None:
    """A data set of several splits is read by one of them, named."""
    if split is None or split not in splits:
        raise DataFormatError(
            f"{name_or_dir}: choose a split, one of {', '.join(splits)} (got {quoted(split)})", field="split"
        )


def _saved_splits(folder: Path) -> list[str] | None:
    """The splits a DatasetDict saved in `folder` names (its `dataset_dict.json`), each a folder of its own; None
    where the folder holds no such list (one Dataset, or a file `datasets` itself will say is not one)."""
    try:
        splits = json.loads((folder / "dataset_dict.json").read_text(encoding="utf-8"))["splits"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(splits, list) or not all(isinstance(x, str) and (folder / x).is_dir() for x in splits):
        return None
    return splits


_FILE_SUFFIXES = (".csv", ".jsonl")
# What marks a folder written by `datasets`' save_to_disk: a DatasetDict, or a single Dataset.
_HF_MARKERS = ("dataset_dict.json", "state.json", "dataset_info.json")

DATASET_FORMATS = (
    "a .csv file in the E2E format (columns mr, ref, one row per reference; the rows of one MR make one "
    'source); a .jsonl file of {"source": ..., "target": ...} objects (target: a string or a list of '
    "references); "
    "a folder holding {split}.csv or {split}.jsonl files (like data/e2e_synth: train, dev, test); a folder "
    "written by datasets' save_to_disk (columns article/highlights, content/summary, prompt/label, "
    "meaning_representation/human_reference, mr/ref or source/target); or a Hugging Face hub name where "
    "there is network or a local cache"
)


def is_single_file(path_or_name: str | Path) -> bool:
    """Whether a data source is one file (.csv, .jsonl), or a folder holding one data set saved by `datasets`
    (not a DatasetDict, nor split files), which has no splits to choose from."""
    path = Path(path_or_name)
    if path.is_dir():
        return (
            (path / "state.json").is_file()
            and not (path / "dataset_dict.json").is_file()
            and not any(p.suffix.lower() in _FILE_SUFFIXES for p in path.iterdir())
        )
    return path.is_file() or (not path.exists() and path.suffix.lower() in _FILE_SUFFIXES)


def _is_hf_folder(path: Path) -> bool:
    return any((path / marker).is_file() for marker in _HF_MARKERS)


def _split_file(folder: Path, split: str | None) -> Path | None:
    """The {split}.csv or {split}.jsonl in a folder of split files, None for a datasets folder; else one
    line naming the file looked for, the split files the folder does hold and the formats a folder can be."""
    if split is not None:
        found = [
            folder / f"{split}{suffix}"
            for suffix in _FILE_SUFFIXES
            if (folder / f"{split}{suffix}").is_file()
        ]
        if len(found) > 1:  # which one is meant cannot be told
            raise DataFormatError(
                f"{folder}: both {' and '.join(p.name for p in found)} hold the split {split!r}; keep one"
            )
        if found:
            return found[0]
    if _is_hf_folder(folder):
        return None
    present = sorted(p.name for p in folder.iterdir() if p.suffix.lower() in _FILE_SUFFIXES)
    has = f"it holds {', '.join(present)}" if present else "it holds no .csv or .jsonl file"
    looked = f"no {split}.csv or {split}.jsonl" if split is not None else "no split was chosen"
    # about the split first (the folder is there; the split named is not in it), the words "split" kept out of
    # the rest of the line: a front end says the setting by its own name at its first mention
    raise DataFileNotFoundError(
        f"{folder}: {looked} ({has}); a data folder holds a .csv or .jsonl file for each of its splits, or is a "
        f"datasets folder written by save_to_disk ({' or '.join(_HF_MARKERS)})",
        field=("split", "dataset"),
    )


def load_examples(
    path_or_name: str | Path,
    split: str | None = None,
    task: str | None = None,
    source_field: str | None = None,
    target_field: str | None = None,
    limit: int | None = None,
    split_setting: str = "split",
) -> list[Example]:
    """Load any supported data source, chosen by what the path is.

    - ``*.csv``: E2E CSV; ``*.jsonl``: JSON lines (``split`` does not apply: one file is one split);
    - a directory holding ``{split}.csv`` or ``{split}.jsonl`` (like ``data/e2e_synth``): that file;
    - a directory written by ``datasets``' ``save_to_disk``: that data set (and its ``split``);
    - anything else that does not exist: a Hugging Face hub name (needs network or a local cache).

    ``limit`` keeps the first examples only, for quick runs. ``split_setting``: the setting that named ``split``
    (a second split beside the main one: ``eval_split``), the one a refusal about the split is then about.
    """
    try:
        return _load_examples(path_or_name, split, task, source_field, target_field, limit)
    except DataFormatError as error:
        error.fields = tuple(split_setting if f == "split" else f for f in error.fields)
        raise


def _load_examples(
    path_or_name: str | Path,
    split: str | None,
    task: str | None,
    source_field: str | None,
    target_field: str | None,
    limit: int | None,
) -> list[Example]:
    path = Path(path_or_name)
    # `data/e2e_synth` typed in another folder: said, not tried on the hub (30 s of retries offline)
    if elsewhere := shipped_elsewhere(str(path_or_name)):
        raise DataFileNotFoundError(f"{path}: no such file or directory{elsewhere}", field="dataset")
    if path.is_dir():
        path = _split_file(path, split) or path
    suffix = path.suffix.lower()
    if path.is_dir():
        examples = load_hf_dataset(path, split, task, source_field, target_field, limit=limit)
    elif suffix == ".csv":
        examples = load_e2e_csv(path, task or "e2e")
    elif suffix == ".jsonl":
        fields = {"source_field": source_field or "source", "target_field": target_field or "target"}
        examples = load_jsonl(path, task=task or "generic", **fields)
    elif path.exists():
        raise DataFormatError(
            f"{path}: unsupported file type (expected .csv, .jsonl or a data set directory)"
        )
    elif suffix in (*_FILE_SUFFIXES, ".json") or str(path_or_name).startswith((".", "/", "~")):
        raise DataFileNotFoundError(f"{path}: no such file or directory", field="dataset")
    else:
        examples = load_hf_dataset(str(path_or_name), split, task, source_field, target_field, limit=limit)
    return examples if limit is None else examples[:limit]
