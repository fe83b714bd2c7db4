"""What a resumable run (a sweep's results file, a tune's study) records of its inputs, and how a resume is held to
it: the run-wide settings that change its numbers, and the data set by what it holds (`DATA`: the digest of the rows
read, `skipcore.data.rows_digest`), not by the path as typed. A resume whose identity differs is refused in one
line that names each difference, the data sets both by path and by content."""

from __future__ import annotations

from collections.abc import Sequence

from skipcore.data import Example, rows_digest

DATA = "data_sha256"  # the rows a run read, by content
# settings an identity names only where they differ from this (so files made before they existed say the same)
IMPLIED = {"attention_dtype": "model"}
MISSING = "<missing>"


def with_data(identity: dict, examples: Sequence[Example]) -> dict:
    """`identity` with the digest of the rows the run reads."""
    return {**identity, DATA: rows_digest(examples)}


def differences(recorded: dict, now: dict) -> list[tuple[str, object, object]]:
    """(setting, its recorded value, this run's) for every setting either identity names that differs; one that
    only one names takes its implied value (`IMPLIED`), else is missing."""
    names = list(now) + [k for k in recorded if k not in now]
    out = []
    for name in names:
        then, value = (ident.get(name, IMPLIED.get(name, MISSING)) for ident in (recorded, now))
        if then != value:
            out.append((name, then, value))
    return out


def said(recorded: dict, now: dict, most: int = 4) -> str:
    """The differences in words (the first `most`): `name='then' (not 'now')`, the data sets by path and digest."""
    words = []
    for name, then, value in differences(recorded, now)[:most]:
        if name == DATA:
            words.append(_data_said(recorded, now, then, value))
        else:
            words.append(f"{name}={then!r} (not {value!r})")
    return ", ".join(words)


def _data_said(recorded: dict, now: dict, then: object, value: object) -> str:
    if then == MISSING:
        return f"the rows of {recorded.get('dataset')!r} it read were not recorded by content (an older run)"
    return (
        f"other rows: it read {recorded.get('dataset')!r} with rows sha256 {str(then)[:12]}, this run reads "
        f"{now.get('dataset')!r} with rows sha256 {str(value)[:12]}"
    )
