"""Where a sweep's units of work run: the executor interface, what a unit that failed for good leaves behind, and
`InProcessExecutor` (this process, units in grid order, each model loaded once: the loop the sweep always had).

An executor only runs units and hands each finished row to the runner, which alone writes the results file
(`skipcore.evaluate.sweep.runner`), so a rerun skips rows already there wherever they were made. The other
executor is `skipcore.evaluate.sweep.ray_executor.RayExecutor` (tasks on a Ray cluster; Ray is imported only when
it runs).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from skipcore.errors import UserError
from skipcore.evaluate.sweep.rows import RowCallback
from skipcore.evaluate.sweep.settings import Setting, SweepConfig
from skipcore.evaluate.sweep.units import EngineCache, Say, SweepJob, WorkUnit

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Failure:
    """A unit that failed for good (its retries spent): the settings it left without a row, and why."""

    unit: WorkUnit
    unwritten: tuple[Setting, ...]  # in run order: the first is the one that was running
    reason: str  # one line: the error's type and first line
    tries: int
    where: str = ""  # the node it last ran on, where known

    def line(self) -> str:
        at, rest = self.unwritten[0].label(), len(self.unwritten) - 1
        more = (
            f" (and {rest} more setting{'s' if rest > 1 else ''} of its group, not written)" if rest else ""
        )
        on = f" on {self.where}" if self.where else ""
        tries = f"after {self.tries} tr{'ies' if self.tries > 1 else 'y'}"
        return f"setting '{at}' failed {tries}{on}: {self.reason}{more}"


class GridIncomplete(Exception):
    """Some units failed for good; every other row was written. `frame` holds the rows of the results file, which
    the message names only where it was written (where every setting failed, there is none)."""

    def __init__(self, failures: list[Failure], frame: pd.DataFrame, out) -> None:
        self.failures, self.frame = failures, frame
        missing = sum(len(f.unwritten) for f in failures)
        first = failures[0].unwritten[0].label()
        written = (
            f"the other {len(frame)} rows are in {out}"
            if len(frame) and Path(out).is_file()
            else "no row was written"
        )
        super().__init__(
            f"{missing} setting{'s' if missing > 1 else ''} of the grid failed for good, not written ('{first}'"
            f"{' and others' if missing > 1 else ''}); {written}; rerun the same sweep to run only the missing ones"
        )


FailureCallback = Callable[[Failure], None]


class SweepExecutor(Protocol):
    """Runs a sweep's units, handing each finished row to `on_row` (which writes it) as it comes."""

    def check(self, cfg: SweepConfig) -> None:
        """Refuse, in one line and before any work, what this executor cannot run."""

    def run(
        self,
        job: SweepJob,
        units: list[WorkUnit],
        on_row: RowCallback,
        say: Say | None = None,
        on_failure: FailureCallback | None = None,
    ) -> list[Failure]:
        """Run every unit; return those that failed for good (the others' rows all went to `on_row`)."""


@dataclass
class InProcessExecutor:
    """Units in grid order in this process, each model loaded once (the last one is kept for the next unit).

    An error stops the sweep (the rows already written stay); `engines` may hold a model already loaded (the
    dashboard's: `EngineCache.keep`), which is then not loaded again.
    """

    engines: EngineCache = field(default_factory=EngineCache)

    def check(self, cfg: SweepConfig) -> None:
        """The run's device is this machine's: there, or refused in one line."""
        from skipcore.models.loading import resolve_device

        try:
            resolve_device(cfg.device)
        except UserError as e:
            raise UserError(str(e), field="device") from e

    def run(
        self,
        job: SweepJob,
        units: list[WorkUnit],
        on_row: RowCallback,
        say: Say | None = None,
        on_failure: FailureCallback | None = None,
    ) -> list[Failure]:
        for unit in units:
            for s, row, result in job.evaluate(job, unit, self.engines, say):
                on_row(s, row, result)
        return []
