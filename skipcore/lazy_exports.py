"""A package's public names imported from their modules on first use (PEP 562), so importing the package (and
building the command line's flags on it) pulls in no torch: one mechanism for every package that re-exports."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: dict
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The package's `__getattr__` and `__dir__`: a name of `exports` (name -> module) is imported the first time
    it is asked for and kept in `namespace` (the package's globals), so later lookups are plain attribute reads."""

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
