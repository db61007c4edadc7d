"""What MDS shards and LitData chunks share: an ``index.json`` per split, an offset table of
samples, and compression.

A folder with its own ``index.json`` is one split, read under any split name (as a JSONL
file is); else the split is ``<folder>/<split>/index.json``. Both files start with
``uint32 count`` and ``count + 1`` ``uint32`` offsets (absolute in the file), each sample's
bytes between two offsets. Rows ``[start, end)`` cost two ``pread`` calls on
an uncompressed file (local, or ranged GETs on object storage). A compressed file (zstd,
gzip, bz2) has no random access: it is decompressed whole, once per process, into the
format's LRU of blocks.
"""

from __future__ import annotations

import bz2
import gzip
import itertools
import json
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from energon_lite.errors import DatasetFormatError
from energon_lite.flavors.tables.format import TableFormat, require
from energon_lite.storage import ShardFile, StoragePath

INDEX = "index.json"
T = TypeVar("T")


def read_index(
    root: StoragePath, split_part: str, what: str, take: Callable[[Any], T]
) -> tuple[StoragePath, str, T]:
    """The ``index.json`` of ``split_part``: its path, the prefix of its files' names under
    ``root`` (``""`` or ``"<split>/"``) and what ``take`` picks from it (a missing key or a
    wrong type raises, naming the file and the ``what`` it is not)."""
    if (root / INDEX).is_file():
        folder = root
    elif (root / split_part / INDEX).is_file():
        folder = root / split_part
    else:
        raise DatasetFormatError(
            f"{root}: neither {INDEX} nor {split_part}/{INDEX} found (split {split_part!r})"
        )
    try:
        value = take(json.loads((folder / INDEX).read_text()))
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise DatasetFormatError(f"{folder / INDEX}: not a {what} index: {exc}") from None
    return folder / INDEX, "" if folder == root else f"{split_part}/", value


def decompress(path: StoragePath, data: bytes, compression: str) -> bytes:
    """``data`` of ``path`` decompressed (``"zstd"``, ``"zstd:7"``, ``"gz"``, ``"bz2"``)."""
    algorithm = compression.split(":", 1)[0]
    try:
        if algorithm == "zstd":
            zstandard = require("zstandard", "formats", f"{path} (zstd)")
            return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(data))
        if algorithm in ("gz", "gzip"):
            return gzip.decompress(data)
        if algorithm == "bz2":
            return bz2.decompress(data)
    except (OSError, ValueError, EOFError) as exc:
        raise DatasetFormatError(f"{path}: cannot decompress ({compression}): {exc}") from None
    if algorithm.startswith("zstd"):  # e.g. zstd error types of their own
        raise DatasetFormatError(f"{path}: cannot decompress {compression}")
    raise DatasetFormatError(
        f"{path}: compression {compression!r} is not read (zstd, gz and bz2 are)"
    )


def sample_bytes(
    table: TableFormat, shard_id: int, start: int, end: int, compression: str | None
) -> list[bytes]:
    """The bytes of samples ``[start, end)`` of an offset-table file."""
    path = table.shard_path(shard_id)
    if compression:
        whole = table.block(
            ("file", shard_id), lambda: decompress(path, _read_all(path), compression)
        )
        return _cut(path, whole[4 * (start + 1) : 4 * (end + 2)], lambda n, o: whole[o : o + n])
    file = table.opened(shard_id, lambda: ShardFile(path))
    return _cut(path, file.pread(4 * (end - start + 1), 4 * (start + 1)), file.pread)


def _read_all(path: StoragePath) -> bytes:
    file = ShardFile(path)
    try:
        return file.pread(file.size, 0)
    finally:
        file.close()


def _cut(path: StoragePath, table: bytes, pread: Any) -> list[bytes]:
    offsets = np.frombuffer(table, dtype="<u4").astype(np.int64)
    if len(offsets) < 2 or np.any(np.diff(offsets) < 0):
        raise DatasetFormatError(f"{path}: its sample offset table is cut short or out of order")
    data = pread(int(offsets[-1] - offsets[0]), int(offsets[0]))
    if len(data) != offsets[-1] - offsets[0]:
        raise DatasetFormatError(f"{path}: shorter than its sample offsets say")
    rel = (offsets - offsets[0]).tolist()
    return [data[a:b] for a, b in itertools.pairwise(rel)]


def split_sizes(path: StoragePath, row: int, data: bytes, fixed: list[int | None]) -> list[bytes]:
    """A sample's fields: a ``uint32`` size for each field without a ``fixed`` size, then the
    fields' bytes one after the other."""
    variable = sum(1 for size in fixed if size is None)
    head = np.frombuffer(data[: 4 * variable], dtype="<u4").tolist()
    sizes, taken = [], iter(head)
    for size in fixed:
        sizes.append(size if size is not None else next(taken))
    position, fields = 4 * variable, []
    for size in sizes:
        fields.append(data[position : position + size])
        position += size
    if position != len(data):
        raise DatasetFormatError(
            f"{path}: sample {row} holds {len(data)} bytes, its field sizes say {position}"
        )
    return fields
