"""One writer per output (skipcore.output_lock), when two start at the same moment."""

from __future__ import annotations

import multiprocessing as mp
import time
import warnings
from pathlib import Path

from skipcore.errors import UserError
from skipcore.output_lock import OutputLock


def _writer(barrier, out: str, said) -> None:
    warnings.simplefilter("ignore")
    lock = OutputLock(Path(out), "sweep")
    barrier.wait()
    try:
        lock.take()
    except UserError:
        said.put("refused")
        return
    said.put("took")
    time.sleep(0.05)  # holding it while the other tries
    lock.release()


def test_two_writers_starting_together_never_both_hold_the_lock(tmp_path):
    """The lock was created empty and its pid written after: a second writer reading it in between took the pid 0
    for a dead holder's, removed the lock and took it too (in most of these races)."""
    ctx = mp.get_context("fork")
    for i in range(30):
        barrier, said = ctx.Barrier(2), ctx.Queue()
        writers = [
            ctx.Process(target=_writer, args=(barrier, str(tmp_path / f"o{i}.parquet"), said)) for _ in "ab"
        ]
        for w in writers:
            w.start()
        for w in writers:
            w.join(timeout=30)
        assert sorted([said.get(timeout=5), said.get(timeout=5)]) == ["refused", "took"], f"race {i}"
    assert not list(tmp_path.glob(".*"))  # every lock, and every writer's own file, gone
