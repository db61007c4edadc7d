"""Where dataset files live: local folders, S3 (``s3://``), Azure (``az://``), GCS (``gs://``),
MSC profiles (``msc://``), HTTP.

The dataset code names files with ``as_path(...)`` (a ``pathlib.Path`` or a ``RemotePath``)
and reads them through ``ops`` and ``ShardFile``; nothing above the dataset (the Reader, the
stages, the loader) knows where the bytes come from. What the layer keeps in a process
(clients, caches, threads) is one ``StorageSession``, reached through ``session()``; a forked
child gets its own, and ``reset_session()`` starts afresh. See docs/remote.md.
"""

from __future__ import annotations

from energon_lite.storage.cache_config import ShardCacheConfig
from energon_lite.storage.path import (
    RemotePath,
    StoragePath,
    as_path,
    is_remote,
    is_url,
    local_only,
)
from energon_lite.storage.ranged import RangedFile, ShardFile, open_binary
from energon_lite.storage.retry import STATS, scrub
from energon_lite.storage.session import StorageSession, reset_session, session

__all__ = [
    "STATS",
    "RangedFile",
    "RemotePath",
    "ShardCacheConfig",
    "ShardFile",
    "StoragePath",
    "StorageSession",
    "as_path",
    "is_remote",
    "is_url",
    "local_only",
    "open_binary",
    "reset_session",
    "scrub",
    "session",
]
