"""``CachePool``, the interface cookers see as ``cache``, and ``NoCachePool`` (no caching)."""

from __future__ import annotations

from typing import Any

from energon_lite.cache.file_store import FileStore
from energon_lite.cache.lazy import DirectLazy, Lazy, MockLazy


class CachePool:
    """Fetches files of FileStores for cookers, now (``get``) or later (``get_lazy``)."""

    def get(self, ds: FileStore, fname: str, sample: Any = None) -> Any:
        raise NotImplementedError

    def get_lazy(self, ds: FileStore, fname: str) -> Lazy:
        raise NotImplementedError

    def to_cache(self, data: Any, name: str) -> Lazy:
        raise NotImplementedError

    def close(self) -> None:
        pass


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
