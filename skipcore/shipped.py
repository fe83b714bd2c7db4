"""Where the shipped default model and corpus are, wherever skipcore is run from.

The defaults are paths inside the repository (`data/...`). Run from the repository they are found as given; from
elsewhere with an editable install (`pip install -e .`) they are found beside the package. A wheel does not carry
`data/` (tens of MB of models and sweeps): then the path stays as given and the error that follows names it.
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]  # skipcore/shipped.py -> the repository


def shipped_path(relative: str) -> str:
    """`relative` if it exists from here, else the same path in the repository skipcore was installed from."""
    if Path(relative).exists():
        return relative
    beside = REPO_ROOT / relative
    return str(beside) if beside.exists() else relative


def shipped_elsewhere(name: str) -> str:
    """'; the shipped one is REPO/name' where `name` is missing here but is a path in the repository skipcore was
    installed from (`data/e2e_synth` typed in another folder), else ''. The defaults are found there without a
    word (`shipped_path`); a path the user typed is theirs to change, so it is said, not swapped."""
    if Path(name).is_absolute() or Path(name).exists():
        return ""
    beside = REPO_ROOT / name
    return f"; skipcore's shipped one is {beside}" if beside.exists() else ""
