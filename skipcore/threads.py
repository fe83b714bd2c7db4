"""How many CPU threads torch may be given: a count this machine can start, checked in one place for every tool."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from skipcore.errors import UserError

# more threads than this per core only wait for the cores (and OpenMP fails to start 99999)
THREADS_PER_CORE = 4


def check_threads(threads: int | None, name: str = "--threads", field: str | None = None) -> None:
    """Refuse a thread count below 1 or above `THREADS_PER_CORE` per core of this machine, in one line; None is
    torch's own choice."""
    if threads is None:
        return
    most = THREADS_PER_CORE * (os.cpu_count() or 1)
    if not 1 <= threads <= most:
        raise UserError(
            f"{name} must be between 1 and {most} ({THREADS_PER_CORE} per core of this machine's "
            f"{os.cpu_count() or 1}), got {threads}",
            field=field,
        )


P = ParamSpec("P")
R = TypeVar("R")


def keeps_torch_threads(run: Callable[P, R]) -> Callable[P, R]:
    """`run` with torch's CPU thread count put back after it, however it ends: a run that sets its own (a sweep's,
    a search's `threads`) left a notebook's every later call at that count. Only where torch is loaded already:
    the wrapper imports nothing (a command's `--help` stays instant)."""

    @functools.wraps(run)
    def kept(*args: P.args, **kwargs: P.kwargs) -> R:
        torch = sys.modules.get("torch")
        before = torch.get_num_threads() if torch is not None else None
        try:
            return run(*args, **kwargs)
        finally:
            if torch is not None:
                torch.set_num_threads(before)

    return kept
