"""``TableFormat``: what a table format's reader gives ``TableSource``, and the parts they share.

A format lists one split's files (``shard_names``) with their row ``counts`` and byte
``sizes`` from its own metadata, says what each column holds (``types``: the decoder's
``types``, ``"auto"`` for media bytes, ``""`` for values already decoded) and reads rows
``[start, end)`` of a file as dicts. Decoded blocks (a Parquet row group, an MDS shard's
decompressed bytes) stay in a small per-process LRU; open files are per process too, so a
format pickled into a worker opens its own.
"""

from __future__ import annotations

import importlib
import os
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

from energon_lite.errors import ConfigError, DatasetFormatError, short_repr
from energon_lite.storage import StoragePath

FORMATS = ("arrow", "litdata", "mds", "parquet")  # module names in this package
BLOCKS_KEPT = 8  # decoded blocks per process (row groups, decompressed shards)

T = TypeVar("T")


class TableFormat:
    """Base of the four readers: the per-process block cache and open-file bookkeeping."""

    name = ""

    def __init__(self, root: StoragePath, split_part: str) -> None:
        self.root = root
        self.split_part = split_part
        self.shard_names: list[str] = []
        self.counts: list[int] = []
        self.sizes: list[int] = []
        self.types: dict[str, str] = {}
        self._pid = os.getpid()
        self._blocks: OrderedDict[Any, Any] = OrderedDict()
        self._open: dict[int, Any] = {}

    def read_rows(self, shard_id: int, start: int, end: int) -> list[dict[str, Any]]:
        raise NotImplementedError

    def _fresh(self) -> None:
        """Forget a parent process's blocks and files (after a fork)."""
        if os.getpid() != self._pid:
            self._pid = os.getpid()
            self._blocks = OrderedDict()
            self._open = {}

    def block(self, key: Any, make: Callable[[], T]) -> T:
        """The decoded block ``key`` of this process, made on first use (LRU)."""
        self._fresh()
        if key in self._blocks:
            self._blocks.move_to_end(key)
            return self._blocks[key]
        value = make()
        self._blocks[key] = value
        while len(self._blocks) > BLOCKS_KEPT:
            self._blocks.popitem(last=False)
        return value

    def opened(self, shard_id: int, make: Callable[[], T]) -> T:
        """The open file of ``shard_id`` in this process."""
        self._fresh()
        if shard_id not in self._open:
            self._open[shard_id] = make()
        return self._open[shard_id]

    def shard_path(self, shard_id: int) -> StoragePath:
        return self.root / self.shard_names[shard_id]

    def close(self) -> None:
        if os.getpid() == self._pid:
            for handle in self._open.values():
                close = getattr(handle, "close", None)
                if close is not None:
                    close()
        self._open, self._blocks = {}, OrderedDict()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_blocks": OrderedDict(), "_open": {}}


def open_format(name: str, root: StoragePath, split_part: str) -> TableFormat:
    """The reader of format ``name`` (a module of this package) for one split."""
    if name not in FORMATS:
        raise ConfigError(f"unknown table format {name!r}; known: {list(FORMATS)}")
    module = importlib.import_module(f"energon_lite.flavors.tables.{name}")
    return module.FORMAT(root, split_part)


def require(module: str, extra: str, what: str) -> Any:
    """Import an optional dependency, or say which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(
            f"{what} needs the {module} package; pip install 'energon-lite[{extra}]'"
        ) from None


def pick_split(where: StoragePath, found: dict[str, list[str]], split_part: str) -> list[str]:
    """The files of ``split_part`` among the splits ``found`` (split -> files)."""
    if split_part in found:
        return found[split_part]
    if not found:
        raise DatasetFormatError(f"{where}: no data files found")
    raise DatasetFormatError(f"{where}: no split {short_repr(split_part)}; it has {sorted(found)}")
