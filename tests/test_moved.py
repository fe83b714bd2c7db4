"""Old module paths keep working for one release: the same module object as the new path, with a
DeprecationWarning that names the new path."""

from __future__ import annotations

import importlib
import sys

import pytest

from skipcore._moved import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_gives_the_new_module_and_warns(old):
    new = importlib.import_module(MOVED[old])
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {MOVED[old]}"):
        moved = importlib.import_module(old)
    assert moved is new
    assert moved.__spec__.name == MOVED[old]  # the module keeps its own identity


def test_old_from_imports_and_attribute_access_work():
    old = "skipcore.summary"
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning):
        from skipcore.summary import summarize  # the old path, on purpose
    from skipcore.measure.summary import summarize as new

    assert summarize is new


def test_the_warning_points_at_the_importing_line():
    sys.modules.pop("skipcore.pareto", None)
    with pytest.warns(DeprecationWarning) as caught:
        import skipcore.pareto  # noqa: F401
    assert caught[0].filename == __file__


def test_names_that_never_existed_still_fail():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("skipcore.no_such_module")
