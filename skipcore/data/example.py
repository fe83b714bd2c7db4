"""The one record type every loader returns, so training, generation and evaluation agree on it."""

from __future__ import annotations

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
