"""Writers for the layouts the loaders read: an E2E CSV (`write_e2e_csv`, read back by `load_e2e_csv`) and a
folder of split files with a README (`write_split_folder`, read by `load_examples(folder, split=...)`).

A file in the folder is replaced atomically (`skipcore.files.atomic_write`): an interruption leaves the old file
or the new one, whole, and no temporary behind.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path

from skipcore.data.example import Example
from skipcore.files import atomic_write

README = "README.md"  # a split folder's description, written last


def write_e2e_csv(examples: Iterable[Example], path: str | Path) -> int:
    """Write the real E2E CSV layout (``mr``, ``ref``; one row per reference); returns the row count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = 0
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, quoting=csv.QUOTE_MINIMAL)
        writer.writerow(["mr", "ref"])
        for example in examples:
            for ref in example.references:
                writer.writerow([example.source, ref])
                rows += 1
    return rows


def write_split_folder(
    folder: str | Path, splits: Mapping[str, Sequence[Example]], readme: str
) -> list[Path]:
    """``{split}.csv`` for each split (E2E CSV) and ``README.md`` holding `readme` in `folder`, each replaced
    atomically, in that order; returns the paths written."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for split, examples in splits.items():
        path = out / f"{split}.csv"
        atomic_write(path, partial(write_e2e_csv, examples))
        written.append(path)
    atomic_write(out / README, lambda tmp: tmp.write_text(readme, encoding="utf-8"))
    return [*written, out / README]
