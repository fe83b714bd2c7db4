"""The test suite leaves the working tree as it found it: Hypothesis keeps its examples and caches outside it (the
README's picture is written by `scripts/readme_screenshot.py` alone: tests/browser/test_readme_screenshot.py)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import REPO


def test_hypothesis_keeps_its_files_outside_the_tree():
    from hypothesis.configuration import storage_directory

    where = storage_directory(intent_to_write=False)
    path = Path(getattr(where, "path", where)).resolve()
    assert REPO.resolve() not in [path, *path.parents], path
