"""Each page's last result, kept for the session: one typed record per page, with the settings that made it
(`provenance`) where a page shows them, and one cache of the files the pages' download buttons offer.

A page keeps its result when a run ends (`result.keep()`) and shows the last one kept (`GenerateResult.last()`),
so moving to another page and back keeps it; the Run history page reopens a kept run by keeping it as the Generate
page's result. Nothing else of a result lives in the session.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Self

import pandas as pd
import streamlit as st

from app.dashboard.provenance import Settings

if TYPE_CHECKING:
    from app.dashboard.runstore import Run
    from skipcore.decode.outputs import GenerationResult
    from skipcore.lens import Agreement, LensResult

SLOTS = "page_results"  # in the session: page -> its last result
DOWNLOADS = (
    "page_downloads"  # in the session: (button group, run id, format) -> (bytes, file name, MIME type)
)

Download = tuple[bytes, str, str]  # what a download button offers: the file's bytes, its name, its MIME type


class PageResult:
    """What every page's result does: it is kept in its page's slot, and read back from there."""

    page: ClassVar[str]

    def keep(self) -> None:
        """This becomes its page's last result (the one before it is dropped)."""
        st.session_state.setdefault(SLOTS, {})[self.page] = self

    @classmethod
    def last(cls, session: Any = None) -> Self | None:
        """The page's last result, None before its first run. `session`: another session's state (a test's),
        this session's by default."""
        session = st.session_state if session is None else session
        slots = session.get(SLOTS, {})
        return slots.get(cls.page)


@dataclass(frozen=True)
class GenerateResult(PageResult):
    """The Generate page: the outputs of a batch of prompts and its trace."""

    page: ClassVar[str] = "generate"

    prompts: list[str]
    texts: list[str]
    trace: pd.DataFrame
    metadata: dict
    settings: Settings
    run_id: int | None = None  # its number in the run history, once kept there

    @classmethod
    def reopened(cls, run: Run, trace: pd.DataFrame, metadata: dict) -> GenerateResult:
        """A kept run as the page's result again; a UserError saying why where its record cannot show as one (the
        page reads the schedule that made it, and one output per prompt)."""
        from skipcore.errors import UserError
        from skipcore.schedule import Schedule

        if "schedule" not in run.settings:
            raise UserError("its settings do not name the schedule that made it")
        Schedule.from_dict(run.settings["schedule"][1])  # a ScheduleError says what is wrong with it
        if len(run.prompts) != len(run.texts):
            raise UserError(f"it holds {len(run.prompts)} prompts but {len(run.texts)} outputs")
        return cls(run.prompts, run.texts, trace, metadata, run.settings, run.id)


@dataclass(frozen=True)
class CompareResult(PageResult):
    """The Compare page: each policy's generation of the same prompts, and its scores where references exist."""

    page: ClassVar[str] = "compare"

    prompts: list[str]
    results: dict[str, GenerationResult]  # policy -> what it generated (those that ran)
    errors: dict[str, str]  # policy -> why it did not run
    quality: dict[str, dict] | None  # policy -> BLEU, ROUGE, chrF; None without references
    sampled: bool
    settings: Settings


@dataclass(frozen=True)
class LensComparison(PageResult):
    """The Layer lens page: full depth's read-outs and the schedule's path, and how often they agree."""

    page: ClassVar[str] = "lens"

    prompts: list[str]
    label: str  # the schedule, in words
    tokens: str  # what the schedule's path reads (full depth's output, or its own decode)
    full: LensResult
    path: LensResult
    agreement: Agreement
    settings: Settings


@dataclass(frozen=True)
class SweepResult(PageResult):
    """The Trade-offs page's small sweep: its table of rows."""

    page: ClassVar[str] = "tradeoffs"

    table: pd.DataFrame
    settings: Settings


@dataclass(frozen=True)
class FitResult(PageResult):
    """The designer's fit to a target speedup (its schedule goes into the design's own widgets): what it gave,
    or why no schedule fits."""

    page: ClassVar[str] = "designer"

    note: str | None = None  # what the fit gave, against the target
    why: str | None = None  # why it starts below full depth, where it does
    error: str | None = None  # why no schedule fits


def download(group: str, run_id: str, fmt: str, make: Callable[[], Download]) -> Download:
    """The file a download button offers, made once per run and format. A group (one page's row of buttons)
    keeps one run's files: a new run's drop the last run's."""
    cache = st.session_state.setdefault(DOWNLOADS, {})
    for stale in [k for k in cache if k[0] == group and k[1] != run_id]:
        del cache[stale]
    if (group, run_id, fmt) not in cache:
        cache[(group, run_id, fmt)] = make()
    return cache[(group, run_id, fmt)]
