"""data/sweeps/README.md's column table names every column of every shipped sweep, so a reader of the shipped files
never meets a column nothing describes."""

from __future__ import annotations

import re

import pyarrow.parquet as pq

from tests.helpers import REPO

SWEEPS = REPO / "data/sweeps"


def described_columns() -> set[str]:
    """The names in the first cell of each row of the README's column table; `_lo`, `_hi` after a name are that
    name's suffixed columns."""
    table = (SWEEPS / "README.md").read_text().split("\n## Columns\n", 1)[1]
    named: set[str] = set()
    for line in table.splitlines():
        if not line.startswith("| `"):
            continue
        last = ""
        for name in re.findall(r"`([^`]+)`", line.split("|")[1]):
            last = last if name.startswith("_") else name
            named.add(last + name if name.startswith("_") else name)
    return named


def test_every_column_of_the_shipped_sweeps_is_described():
    described = described_columns()
    assert {"setting_id", "wall_speedup_decode_lo", "attention_dtype"} <= described
    sweeps = sorted(SWEEPS.glob("*.parquet"))
    assert len(sweeps) > 10
    unnamed = {f.name: sorted(set(pq.read_schema(f).names) - described) for f in sweeps}
    assert not {k: v for k, v in unnamed.items() if v}, unnamed
