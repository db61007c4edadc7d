"""A flavor package's public names, imported on first use.

The dataset-kind registry imports every flavor package (for its ``kind`` module) in each
command that opens data; a package that imported its modules eagerly would load torch, h5py
or PyAV into ``energon-lite info`` on a plain tar folder."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, modules: Mapping[str, tuple[str, ...]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module ``__getattr__`` and ``__dir__`` for ``package`` whose names live in its
    ``modules`` (module name -> the names it exports)."""
    where = {name: module for module, names in modules.items() for name in names}
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value  # the next lookup is a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *where})

    return __getattr__, __dir__
