"""Old module paths, kept working for one release: `import skipcore.engine` gives the module that now lives at
`skipcore.decode.engine` (the same object) and warns once with the new path.

One table and one import hook, instead of a shim file per old module at the package root, which would hide the
layout the move introduced. Only names in `MOVED` are handled; every other import goes its usual way. A module
that was split in the move maps to the package that re-exports its public names (`skipcore.trace` ->
`skipcore.traces`, `skipcore.sweep` -> `skipcore.evaluate`).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Sequence

# old module path -> its home since the layout by role (remove these in the release after)
MOVED: dict[str, str] = {
    "skipcore.attention": "skipcore.decode.attention",
    "skipcore.bench": "skipcore.evaluate.bench",
    "skipcore.cache": "skipcore.decode.cache",
    "skipcore.costs": "skipcore.measure.costs",
    "skipcore.cursor": "skipcore.decode.cursor",
    "skipcore.early_exit_assistant": "skipcore.evaluate.transformers_baseline",
    "skipcore.engine": "skipcore.decode.engine",
    "skipcore.forward": "skipcore.decode.forward",
    "skipcore.generation_defaults": "skipcore.models.generation_defaults",
    "skipcore.lens.plots": "skipcore.plots.lens",
    "skipcore.loading": "skipcore.models.loading",
    "skipcore.masks": "skipcore.decode.masks",
    "skipcore.outputs": "skipcore.decode.outputs",
    "skipcore.paired_timing": "skipcore.measure.paired_timing",
    "skipcore.pareto": "skipcore.measure.pareto",
    "skipcore.quality": "skipcore.evaluate.quality",
    "skipcore.random_models": "skipcore.models.random_models",
    "skipcore.sampling": "skipcore.decode.sampling",
    "skipcore.shipped": "skipcore.models.shipped",
    "skipcore.static_step": "skipcore.decode.static_step",
    "skipcore.summary": "skipcore.measure.summary",
    "skipcore.sweep": "skipcore.evaluate",
    "skipcore.sweep_store": "skipcore.evaluate.store",
    "skipcore.testing": "skipcore.models.testing",
    "skipcore.timing": "skipcore.decode.timing",
    "skipcore.trace": "skipcore.traces",
    "skipcore.trace_rows": "skipcore.decode.trace_rows",
}


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module path and loads it as the module at its new path."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        new = MOVED[spec.name]
        warnings.warn(
            f"{spec.name} moved to {new}; import it from there (the old path goes in the next release)",
            DeprecationWarning,
            stacklevel=_callers_level(),
        )
        module = importlib.import_module(new)
        # importlib stamps the old name's spec on the module it is handed; exec_module gives it back its own
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        alias = module.__spec__
        if alias is not None and alias.loader_state is not None:
            module.__spec__ = alias.loader_state


def _callers_level() -> int:
    """The `stacklevel` that makes the warning name the line importing the old path (where Python shows
    deprecations: scripts, notebooks, tests): `warnings` itself passes over importlib's bootstrap frames, so
    only `importlib.import_module` stands between `create_module` and that line."""
    level, frame = 1, sys._getframe(2)
    while frame is not None:
        if not ("importlib" in frame.f_code.co_filename and "_bootstrap" in frame.f_code.co_filename):
            level += 1
            if frame.f_globals.get("__name__") != "importlib":
                break
        frame = frame.f_back
    return level


def install() -> None:
    """Put the finder first on `sys.meta_path` (once), ahead of the path finder that no longer finds the old
    files."""
    if not any(isinstance(f, MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())
