"""``dss://NAME@VERSION/...``: Energon's dataset-service paths, read from the local cache
those datasets are synced into. ``dss://charts@v0/images/0.jpg`` is
``$NVDATASET_CACHE_DIR/charts/v0/images/0.jpg`` (the variable is read when a path is
resolved; it may name a local folder or a remote URL). Nothing talks to the service itself.
"""

from __future__ import annotations

import os
from pathlib import PurePosixPath

from energon_lite.errors import ConfigError

PREFIX = "dss://"
CACHE_ENV = "NVDATASET_CACHE_DIR"


class DssPathError(ConfigError, AssertionError):
    """A ``dss://`` path without ``@VERSION`` (an ``AssertionError`` too, as Energon raises)."""


def is_dss(value: object) -> bool:
    return isinstance(value, str) and value.lower().startswith(PREFIX)


def split_dss(url: str) -> tuple[str, str, str]:
    """``(name, version, inner path)`` of ``dss://NAME@VERSION/inner``; ``..`` and ``.`` in
    the inner path are resolved and may not climb above the dataset."""
    rest = url[len(PREFIX) :]
    dataset, _, inner = rest.partition("/")
    name, at, version = dataset.rpartition("@")
    if not at:
        raise DssPathError(
            f"{url!r}: DSS paths must include a dataset version separated by '@' "
            "(dss://NAME@VERSION/...)"
        )
    if not name or not version:
        raise DssPathError(f"{url!r}: DSS paths must include non-empty dataset name and version")
    parts: list[str] = []
    for part in PurePosixPath("/" + inner).parts[1:]:
        if part == "..":
            if not parts:
                raise ConfigError(f"{url!r}: the path climbs above the dataset")
            parts.pop()
        elif part != ".":
            parts.append(part)
    return name, version, "/".join(parts)


def dss_cache(override: str | None = None) -> str:
    """The cache folder or URL: ``override`` when given, else ``$NVDATASET_CACHE_DIR``."""
    cache = override if override is not None else os.environ.get(CACHE_ENV)
    if not cache:
        raise ConfigError(
            f"dss:// paths are read from the local dataset cache: set {CACHE_ENV} to the "
            "folder (or URL) the datasets are synced into"
        )
    return cache.rstrip("/")


def dss_target(url: str, cache: str | None = None) -> str:
    """Where ``dss://NAME@VERSION/inner`` lies: ``<cache>/NAME/VERSION/inner``."""
    name, version, inner = split_dss(url)
    return "/".join(p for p in (dss_cache(cache), name, version, inner) if p)
