"""The cache interfaces cookers see (Energon's names): ``CachePool``, what a cooker gets as
``cache``, and ``Lazy``, a reference to data it does not need yet.

The implementations: ``NoCachePool`` (no caching, :mod:`energon_lite.cache.no_cache`),
``FileStoreCachePool`` and its ``FileCacheLazy`` (Energon's staging area for lazily
referenced files, :mod:`energon_lite.cache.pool`), and the other Lazy kinds
(:mod:`energon_lite.cache.lazy`).
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from energon_lite.cache.file_store import FileStore

T = TypeVar("T")


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


class Lazy(Generic[T]):
    """A reference to ``fname`` of ``ds``, fetched by ``get``."""

    def __init__(self, *, ds: FileStore | None, fname: str, pool: CachePool | None) -> None:
        self.ds, self.fname, self.pool = ds, fname, pool

    def get(self, sample: Any = None) -> T:
        """The data now; adds its source to ``sample``'s ``__sources__``."""
        raise NotImplementedError

    def __hash__(self) -> int:
        return hash((id(self.ds), self.fname))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Lazy) and self.ds is other.ds and self.fname == other.fname

    def __repr__(self) -> str:
        return f"{type(self).__name__}(fname={self.fname!r}, ds={self.ds})"
