"""Lazy references to data a cooker does not need yet (Energon's names).

A cooker can return ``cache.get_lazy(store, name)`` in a sample instead of the data; a later
hook (``pack_selected_samples``, ``postencode_sample``) calls ``.get(sample)`` once it knows
the sample is used. ``DirectLazy`` reads on ``get``; ``MockLazy`` wraps a function;
``CacheFileLazy`` holds data moved out to the cache by ``to_cache``. ``Lazy`` itself is in
:mod:`energon_lite.cache.base`; ``FileCacheLazy``, prefetched into the local cache in the
background, lives with its ``FileStoreCachePool`` (:mod:`energon_lite.cache.pool`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgpack

from energon_lite.cache.base import CachePool, Lazy
from energon_lite.cache.file_store import FileStore, add_source_info

T = TypeVar("T")


_TUPLE = 1  # msgpack extension code of a tuple: its items, packed the same way


def _pack_ext(value: Any) -> msgpack.ExtType:
    if isinstance(value, tuple):
        return msgpack.ExtType(_TUPLE, pack_plain(list(value)))
    raise TypeError(f"not plain data: {type(value).__name__}")


def _unpack_ext(code: int, data: bytes) -> Any:
    if code == _TUPLE:
        return tuple(unpack_plain(data))
    raise ValueError(f"unknown msgpack extension {code}")


def pack_plain(value: Any) -> bytes:
    """msgpack of plain data, tuples kept as tuples; TypeError for anything else (an array,
    a tensor, an object: what only a pickle could store)."""
    return msgpack.packb(value, use_bin_type=True, strict_types=True, default=_pack_ext)


def unpack_plain(data: bytes) -> Any:
    """What :func:`pack_plain` wrote (data only: no code runs while reading)."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_unpack_ext)


class DirectLazy(Lazy[T]):
    """Not lazy at all: reads ``ds[fname]`` on the first ``get``."""

    def __init__(self, *, ds: FileStore, fname: str, pool: CachePool | None = None) -> None:
        super().__init__(ds=ds, fname=fname, pool=pool)
        self._data: tuple[Any, Any] | None = None

    def get(self, sample: Any = None) -> T:
        if self._data is None:
            assert self.ds is not None
            self._data = self.ds[self.fname]
        add_source_info(sample, self._data[1])
        return self._data[0]


class MockLazy(Lazy[T]):
    """A Lazy whose data comes from ``get_fn(fname)`` (no source info)."""

    def __init__(self, fname: str, get_fn: Callable[[str], T]) -> None:
        super().__init__(ds=None, fname=fname, pool=None)
        self.get_fn = get_fn

    def get(self, sample: Any = None) -> T:
        return self.get_fn(self.fname)

    def __hash__(self) -> int:
        return hash((self.fname, self.get_fn))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, MockLazy)
            and self.fname == other.fname
            and self.get_fn == other.get_fn
        )


class CacheFileLazy(Lazy[T]):
    """Plain data written (as msgpack) into a cache file by ``to_cache``; the file is
    removed when read."""

    def __init__(self, *, fname: str, pool: CachePool, cache_path: Path) -> None:
        super().__init__(ds=None, fname=fname, pool=pool)
        self.cache_path: Path | None = cache_path
        self._data: Any = None

    def get(self, sample: Any = None) -> T:
        if self.cache_path is not None:
            with open(self.cache_path, "rb") as file:
                self._data = unpack_plain(file.read())
            os.unlink(self.cache_path)
            self.cache_path = None
        return self._data

    def __del__(self) -> None:
        path = getattr(self, "cache_path", None)
        if path is not None:
            path.unlink(missing_ok=True)
