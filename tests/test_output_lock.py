"""One writer per output (skipcore.output_lock), when two start at the same moment."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import warnings
from pathlib import Path

import pytest

from skipcore.errors import UserError
from skipcore.output_lock import Holder, OutputLock


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


def test_a_lock_makes_its_folders_and_removes_those_still_empty_when_it_goes(tmp_path):
    """A refused run left the folders of its --out behind: the lock makes what it needs and takes back only what it
    made and nothing was written into."""
    (tmp_path / "kept").mkdir()
    lock = OutputLock(tmp_path / "kept" / "a" / "b" / "out.parquet", "sweep")
    lock.take()
    assert lock.path.is_file()
    lock.release()
    assert list(tmp_path.iterdir()) == [tmp_path / "kept"] and not any((tmp_path / "kept").iterdir())

    written = OutputLock(tmp_path / "kept" / "a" / "b" / "out.parquet", "sweep")
    written.take()
    (tmp_path / "kept" / "a" / "b" / "out.parquet").write_text("rows")  # the run's output: it stays
    written.release()
    assert (tmp_path / "kept" / "a" / "b" / "out.parquet").is_file()

    held = OutputLock(tmp_path / "c" / "d" / "out", "tune")
    held.take()
    with pytest.raises(UserError, match="another tune"):
        OutputLock(tmp_path / "c" / "d" / "out", "tune").take()  # refused: removes nothing of the holder's
    assert held.path.is_file()
    held.release()
    assert not (tmp_path / "c").exists()


def test_a_file_or_folder_of_the_locks_name_that_is_no_lock_is_left_alone(tmp_path):
    """A user's file named like the lock was taken for a dead writer's and deleted; a folder was moved aside and the
    run died in a traceback. Neither holds a writer's pid: refused in one line, kept as they were."""
    notes = tmp_path / ".n.parquet.lock"
    notes.write_text("my notes\n")
    with pytest.raises(UserError, match="is in the way of the sweep's lock and is not one"):
        OutputLock(tmp_path / "n.parquet", "sweep").take()
    assert notes.read_text() == "my notes\n"
    folder = tmp_path / ".t.lock"
    folder.mkdir()
    (folder / "file.txt").write_text("precious")
    with pytest.raises(UserError, match="is in the way of the tune's lock"):
        OutputLock(tmp_path / "t", "tune").take()
    assert (folder / "file.txt").read_text() == "precious" and sorted(p.name for p in tmp_path.iterdir()) == [
        ".n.parquet.lock",
        ".t.lock",
    ]


def test_a_lock_let_go_while_it_is_read_is_taken_not_called_a_users_file(tmp_path, monkeypatch):
    """Its holder removed the lock between the check that it is there and the read of its pid: the lock was said
    to be a user's file in the way (54 of 6,000 tries of two writers taking turns)."""
    lock = OutputLock(tmp_path / "o.parquet", "sweep")
    lock.path.write_text("12345")  # a writer holds it ...
    real = OutputLock._holder

    def let_go_while_read(self):
        self.path.unlink(missing_ok=True)  # ... and lets it go just as it is read
        monkeypatch.setattr(OutputLock, "_holder", real)
        return Holder("")

    monkeypatch.setattr(OutputLock, "_holder", let_go_while_read)
    lock.take()
    assert Holder(lock.path.read_text()).pid == os.getpid()
    lock.release()


def test_a_lock_names_the_tool_holding_it_and_a_pid_used_again_is_no_holder(tmp_path):
    """A sweep asked for a tune's live trials lock said 'another sweep is writing'; a lock whose pid a later process
    holds (a container restarted gives its first pids out again: pid 1 is always alive) was refused for ever."""
    import subprocess
    import sys

    out = tmp_path / "trials.parquet"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        started = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        lock = tmp_path / ".trials.parquet.lock"
        lock.write_text(f"{child.pid}\ntune\n{started}\n")  # a live tune's lock
        with pytest.raises(UserError, match=rf"^another tune \(pid {child.pid}\) is writing"):
            OutputLock(out, "sweep").take()
        lock.write_text(f"{child.pid}\ntune\n{int(started) - 1}\n")  # its pid, another process's start
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with OutputLock(out, "sweep"):
                assert lock.read_text().split("\n")[:2] == [str(os.getpid()), "sweep"]
        assert "left by a tune that is no longer running" in str(caught[0].message)
        assert not lock.exists()
    finally:
        child.kill()
        child.wait()
