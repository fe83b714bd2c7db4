"""The one record type every loader returns, so training, generation and evaluation agree on it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Example:
    """One source with all of its human references.

    References are grouped per source (E2E has several per meaning representation) because the metrics
    score a prediction against all of them at once; training uses each (source, reference) pair.
    """

    source: str
    references: tuple[str, ...]
    task: str = "generic"

    def __post_init__(self) -> None:
        # Accept any sequence for convenience but store a tuple so the record stays hashable.
        if not isinstance(self.references, tuple):
            object.__setattr__(self, "references", tuple(self.references))


def lone_surrogate_said(text: str, key: str) -> str | None:
    """Why `text` (the value of `key`) cannot be read where it holds a lone surrogate (JSON's `\\ud800` escape
    reads as one): half of a UTF-16 pair, no character, which no UTF-8 writer, tokenizer or digest can take. None
    where it holds none; a reader refuses it where it names the file and line."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        half = text[e.start : e.end].encode("unicode_escape").decode()
        return (
            f"{key!r} holds the escape {half}, half of a UTF-16 pair and no character; give the whole pair or the "
            "character itself"
        )
    return None


def rows_digest(examples: Sequence[Example]) -> str:
    """A data set's identity by what was read from it: SHA-256 over every example's task, source and references,
    in order. A resumable run records it with its results, so a resume that reads other rows (another file at the
    same path typed from another folder, a file edited in place, another split or limit) is told from one that
    reads the same rows wherever they lie."""
    h = hashlib.sha256()
    for e in examples:
        h.update(json.dumps([e.task, e.source, list(e.references)], ensure_ascii=False).encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()
