"""Files replaced atomically: written beside themselves, then renamed, so a reader (or an interruption) sees the
old file or the new one, never half of one."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call `write` on a temporary path in `path`'s folder, then move it over `path` in one rename."""
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
