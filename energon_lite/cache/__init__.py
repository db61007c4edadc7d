"""Reading files by name for cookers, and caching them locally (Energon's ``cache`` names)."""

from __future__ import annotations

from energon_lite.cache.base import CachePool, Lazy
from energon_lite.cache.file_store import (
    DecodeFileStore,
    FileStore,
    PrimaryFileStore,
    SystemFileStore,
    WebdatasetFileStore,
    add_source_info,
    open_file_store,
    primary_file_store,
)
from energon_lite.cache.lazy import CacheFileLazy, DirectLazy, MockLazy
from energon_lite.cache.no_cache import NoCachePool
from energon_lite.cache.pool import FileCacheLazy, FileStoreCachePool

__all__ = [
    "CacheFileLazy",
    "CachePool",
    "DecodeFileStore",
    "DirectLazy",
    "FileCacheLazy",
    "FileStore",
    "FileStoreCachePool",
    "Lazy",
    "MockLazy",
    "NoCachePool",
    "PrimaryFileStore",
    "SystemFileStore",
    "WebdatasetFileStore",
    "add_source_info",
    "open_file_store",
    "primary_file_store",
]
