"""Where the dashboard finds the shipped model, data and sweeps: relative to this file, never the CWD,
so `streamlit run app/streamlit_app.py` works from any directory. And how a path a user types is looked at: a path
the system will not answer about is one line saying why (`unreachable`), never a traceback."""

from __future__ import annotations

import math
import os
from pathlib import Path

from app.dashboard.markdown import code
from skipcore.errors import UserError, visible_controls
from skipcore.files import check_path_text, expand_home

APP_DIR = Path(__file__).resolve().parents[1]
REPO_ROOT = APP_DIR.parent
DEFAULT_MODEL_DIR = REPO_ROOT / "data" / "models" / "skipdecode-opt-e2e"
BASE_MODEL_DIR = REPO_ROOT / "data" / "models" / "opt-e2e-base"
DATASET_DIR = REPO_ROOT / "data" / "e2e_synth"
DEFAULT_SWEEP = REPO_ROOT / "data" / "sweeps" / "default.parquet"


def shipped_sweeps() -> list[Path]:
    """The sweeps shipped in data/sweeps/, the default first (`policies_*`: every policy side by side)."""
    others = sorted(p for p in DEFAULT_SWEEP.parent.glob("*.parquet") if p != DEFAULT_SWEEP)
    return [p for p in [DEFAULT_SWEEP, *others] if p.is_file()]


MODEL_ENV = "SKIPCORE_APP_MODEL"  # replaces the shipped default model (tests, demos on another checkpoint)
MAX_TRACE_MB_ENV = "SKIPCORE_APP_MAX_TRACE_MB"  # largest trace or sweep file the pages accept
DEFAULT_MAX_TRACE_MB = 100.0


def default_set_by_user() -> bool:
    """Whether $SKIPCORE_APP_MODEL names the model the app opens on (the user's own), not the shipped one."""
    return bool(os.environ.get(MODEL_ENV, "").strip())


def default_model_dir() -> Path:
    """The model the app opens on: $SKIPCORE_APP_MODEL if set, else the shipped SkipDecode model."""
    if not default_set_by_user():
        return DEFAULT_MODEL_DIR
    env = os.environ[MODEL_ENV].strip()
    try:
        return expand_home(env).resolve()
    except (OSError, RuntimeError, ValueError):  # not resolvable (a loop of links): looked at as given
        return Path(env)


def _limit_mb() -> float:
    try:
        mb = float(os.environ.get(MAX_TRACE_MB_ENV, DEFAULT_MAX_TRACE_MB))
    except ValueError:
        return DEFAULT_MAX_TRACE_MB
    return mb if mb > 0 else DEFAULT_MAX_TRACE_MB


def max_upload_bytes() -> int:
    """Upload limit in bytes (Streamlit's MB are 2**20 bytes), read on every run so tests can lower it."""
    return int(_limit_mb() * 1024 * 1024)


def upload_limit_mb() -> int:
    """The same limit for the upload boxes (whole MB, at least 1), so the box and the page say one number."""
    return max(1, math.ceil(_limit_mb()))


def display_path(path: Path | str) -> str:
    """A path relative to the repository when it lies inside it: shorter, and the same on every machine. A
    direction control in its name shows as its code point (`errors.visible_controls`)."""
    p = Path(path)
    try:
        shown = str(p.resolve().relative_to(REPO_ROOT))
    except ValueError:
        shown = str(p)
    return visible_controls(shown)


SHOWN_CHARS = 80  # a path in a message is cut to about this many characters


def shortened(path: Path | str) -> str:
    """A path as a one-line message shows it: whole, or its start and end around an ellipsis when it is long."""
    text = str(path)
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[: SHOWN_CHARS // 2]}…{text[-SHOWN_CHARS // 3 :]}"


def cannot_look(path: Path | str, error: BaseException) -> str:
    """Why the system would not answer about a path, in one line (no traceback for a path a user typed)."""
    why = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
    return f"cannot look at {code(shortened(path))}: {why}"


def unreachable(text: str) -> str | None:
    """Why the path a user gave cannot even be asked about, in one line; None when it can be, whether or not
    anything is there. First the library's one check of every path a user gives (`skipcore.files.check_path_text`:
    a NUL, a name or a path too long for the file system, said as the command line says it), then the system's
    own answer (a loop of links, a folder that may not be read): `Path.is_file` and its kin raise for these
    instead of answering. A `~user` with no home is the path as written (`expand_home`): nothing there."""
    try:
        os.stat(check_path_text(expand_home(text), "model path"))
    except UserError as e:
        return str(e)
    except (FileNotFoundError, NotADirectoryError):  # nothing there: an answer
        return None
    except (OSError, ValueError) as e:
        return cannot_look(text, e)
    return None
