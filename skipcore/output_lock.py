"""One writer per output: a lock file holding the writer's pid, its tool and when its process started, taken before
anything is written and removed when the run ends. A second run on the same output is refused in one line; a lock
left by a process that is no longer running (its pid gone, or held by a process that started at another time) is
taken over (with a warning). The folders the lock needs are made with it, and those it made are removed when it
goes if they are still empty: a refused run leaves no folder behind. Used by `sweep` (beside its results file),
`bench` (beside its results file), `train` and `tune` (beside their --out folders)."""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable
from pathlib import Path

from skipcore.errors import SkipcoreWarning, UserError


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    except (OverflowError, ValueError):  # not a pid at all
        return False
    return True


def _started(pid: int) -> str:
    """When process `pid` started, in clock ticks since boot (Linux's /proc/PID/stat, field 22), '' where this
    system does not say: with the pid it names a process, as a pid alone does not once the pid is used again (a
    container's restart gives its first pids out again)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return ""
    fields = stat[stat.rfind(")") + 2 :].split()  # after the command's name, which may hold spaces
    return fields[19] if len(fields) > 19 else ""


class Holder:
    """What a lock says of the run holding it: its pid, its tool, and when its process started (the last two
    may be missing from a lock written without them)."""

    def __init__(self, text: str) -> None:
        lines = text.split("\n")
        try:
            self.pid = int(lines[0].strip() or 0)
        except ValueError:
            self.pid = 0
        self.what = lines[1].strip() if len(lines) > 1 else ""
        self.started = lines[2].strip() if len(lines) > 2 else ""

    @staticmethod
    def text_of(what: str) -> str:
        pid = os.getpid()
        return f"{pid}\n{what}\n{_started(pid)}\n"

    def running(self) -> bool:
        """Whether the process that wrote the lock still runs: its pid is alive and, where the lock says when it
        started, that process is the one now holding the pid."""
        if not _alive(self.pid):
            return False
        now = _started(self.pid)
        return not (self.started and now and now != self.started)


def lock_path(output: Path) -> Path:
    """The lock beside an output file or folder: `.<name>.lock`."""
    return output.with_name(f".{output.name}.lock")


class OutputLock:
    """`with OutputLock(out, "sweep"):` holds `.<out name>.lock` for the block (`what` names the tool in messages)."""

    def __init__(self, output: Path, what: str) -> None:
        self.output, self.what, self.path = output, what, lock_path(output)
        self.made: list[Path] = []  # the folders `take` made for the lock, deepest first

    def _make_folders(self) -> None:
        folder = self.path.parent
        while not folder.exists() and not folder.is_symlink():
            self.made.append(folder)
            folder = folder.parent
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            self._remove_made()
            raise UserError(f"cannot write {self.output}: {e.strerror or e}") from None

    def _remove_made(self) -> None:
        """Remove the folders this lock made that nothing has been written into since."""
        for folder in self.made:
            try:
                folder.rmdir()
            except OSError:  # something is in it now (the run's output): it and its parents stay
                break
        self.made = []

    def __enter__(self) -> OutputLock:
        self.take()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def take(self) -> None:
        self._make_folders()
        try:
            self._take()
        except BaseException:
            self._remove_made()
            raise

    def _take(self) -> None:
        for _ in range(2):
            try:
                if self._create():
                    return
            except OSError as e:
                raise UserError(f"cannot write {self.output}: {e.strerror or e} ({self.path})") from None
            holder = self._holder()
            pid = holder.pid
            if not os.path.lexists(self.path):
                continue  # let go meanwhile (before or while it was read): try again
            if self.path.is_symlink() or not self.path.is_file() or not pid:  # a user's file or folder: kept
                raise UserError(
                    f"{self.path} is in the way of the {self.what}'s lock and is not one (no writer's pid in it): "
                    f"move it, or choose another --out"
                ) from None
            what = (
                holder.what or self.what
            )  # the tool that holds it (a tune's trials table, asked by a sweep)
            if holder.running():
                raise UserError(
                    f"another {what} (pid {pid}) is writing {self.output}; wait for it to finish or choose "
                    f"another --out (remove {self.path} only if no such {what} is running)"
                ) from None
            self._take_over(pid)
            warnings.warn(
                f"taking over {self.path}, left by a {what} that is no longer running",
                SkipcoreWarning,
                stacklevel=3,
            )
        raise UserError(f"cannot take the lock {self.path}; another {self.what} is starting on {self.output}")

    def _create(self) -> bool:
        """Make the lock holding this pid, whole, or find one there (False). The pid is written to a file of this
        process's own first and linked into place, so no reader ever sees a lock without its pid (read as a
        dead holder's, it was taken over by a second writer while the first went on)."""
        own = self.path.with_name(f"{self.path.name}.{os.getpid()}")
        own.write_text(Holder.text_of(self.what))
        try:
            os.link(own, self.path)
            return True
        except FileExistsError:
            return False
        finally:
            own.unlink(missing_ok=True)

    def _take_over(self, pid: int) -> None:
        """Remove a lock whose holder `pid` is gone: moved aside first, so that where two writers take over at once
        only one removes it, and a lock taken afresh meanwhile (another pid) is put back, and refused."""
        aside = self.path.with_name(f"{self.path.name}.{os.getpid()}.stale")
        try:
            os.replace(self.path, aside)
        except FileNotFoundError:  # another writer moved it first
            return
        except OSError as e:  # a folder, or a place this user cannot change
            raise UserError(f"cannot take the lock {self.path}: {e.strerror or e}") from None
        try:
            holder = Holder(aside.read_text()).pid
        except (OSError, ValueError):
            holder = 0
        if holder != pid:  # not the dead holder's: a writer that took it meanwhile keeps it
            with contextlib.suppress(FileExistsError):
                os.link(aside, self.path)
            aside.unlink(missing_ok=True)
            raise UserError(
                f"cannot take the lock {self.path}; another {self.what} is starting on {self.output}"
            )
        aside.unlink(missing_ok=True)

    def take_then(self, setup: Callable[[], object]) -> None:
        """Take the lock, then run `setup` under it (reading what the output holds already); a refusal there lets
        the lock go, so a run stopped before any work leaves no lock behind."""
        self.take()
        try:
            setup()
        except BaseException:
            self.release()
            raise

    def _holder(self) -> Holder:
        try:
            return Holder(self.path.read_text())
        except (OSError, ValueError):
            return Holder("")

    def release(self) -> None:
        """Remove the lock if this process holds it (never another's), then the folders it made if still empty."""
        if self._holder().pid == os.getpid():
            self.path.unlink(missing_ok=True)
        self._remove_made()
