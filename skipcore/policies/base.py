"""What a decoding policy is, and the static one: SkipDecode's precomputed, batch-shared schedule."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

if TYPE_CHECKING:
    from skipcore.engine import GenerationResult, SkipEngine
    from skipcore.sampling import Sampling
    from skipcore.schedule import Schedule


class Policy(Protocol):
    """Generates for a list of prompts with an engine's model; `describe` gives its parameters as columns."""

    name: ClassVar[str]

    def generate(
        self,
        engine: SkipEngine,
        prompts: Sequence[str],
        schedule: Schedule | None,
        max_new_tokens: int,
        batch_size: int | None = None,
        sampling: Sampling | None = None,
    ) -> GenerationResult: ...

    def describe(self) -> dict: ...


@dataclass(frozen=True)
class StaticPolicy:
    """The layers of each step are fixed in advance by a schedule (full depth when None)."""

    name: ClassVar[str] = "static"

    def generate(
        self,
        engine: SkipEngine,
        prompts: Sequence[str],
        schedule: Schedule | None,
        max_new_tokens: int,
        batch_size: int | None = None,
        sampling: Sampling | None = None,
    ) -> GenerationResult:
        return engine.generate(prompts, schedule, max_new_tokens, sampling, batch_size, policy=self.name)

    def describe(self) -> dict:
        return {}
