"""``NoCachePool``: the ``cache`` cookers see when the loader has no cache pool (no caching)."""

from __future__ import annotations

from typing import Any

from energon_lite.cache.base import CachePool, Lazy
from energon_lite.cache.file_store import FileStore
from energon_lite.cache.lazy import DirectLazy, MockLazy


class NoCachePool(CachePool):
    """Reads straight from the store; ``get_lazy`` defers the read to ``get``."""

    def get(self, ds: FileStore, fname: str, sample: Any = None) -> Any:
        return ds.get(fname, sample)

    def get_lazy(self, ds: FileStore, fname: str) -> DirectLazy:
        return DirectLazy(ds=ds, fname=fname, pool=self)

    def to_cache(self, data: Any, name: str) -> Lazy:
        return MockLazy(name, _Constant(data))


class _Constant:
    def __init__(self, value: Any) -> None:
        self.value = value

    def __call__(self, _: str) -> Any:
        return self.value
