"""``StorageSession``: everything the storage layer keeps in a process, in one object.

The clients (``clients.py``), the small files and folder listings read once (``ops.py``),
the read-ahead windows (``ranged.py``), the checked spans of cached shards
(``shard_cache.py``), the shard caches and their prefetch threads (``prefetch.py``), the
shard cache chosen for the running chain (``cache_config.py``), the request counters
(``retry.py``), the datasets' metadata (``shards/metadata.py``), the warnings told once per
process (:meth:`StorageSession.tell_once`) and Energon's debug sample logs open in the process
(``worker.py``) hang off the session that ``session()`` returns; no module keeps such state
of its own.

Forks. One hook (``fork_hook.after_in_child_fork_hook``) gives a forked child a session of
its own: new clients (a client's connection pool and event loop are never shared across
``fork``), no read-ahead windows, threads or locks of the parent. What was read and does
not change with the process (small files, listings, dataset metadata, the
counters' values, the chosen shard cache) is carried over, so a DataLoader worker does not
read again what its trainer read. The parent's clients stay referenced, never closed, in
the child: closing one there would take the parent's sockets out of the event loop's epoll
set, which the fork shares.

Tests start afresh with one call: ``reset_session()``.
"""

from __future__ import annotations

import itertools
import os
import random
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from energon_lite.fork_hook import after_in_child_fork_hook

if TYPE_CHECKING:
    from energon_lite.storage.cache_config import ShardCacheConfig
    from energon_lite.storage.path import RemotePath
    from energon_lite.storage.prefetch import Prefetcher

__all__ = ["RetryStats", "ShardCacheScope", "StorageSession", "reset_session", "session"]


@dataclass
class RetryStats:
    """Request counters of this process (a forked worker starts from its parent's values); the
    read-ahead and prefetch threads count too, hence ``add`` under a lock."""

    requests: int = 0
    retries: int = 0
    failures: int = 0
    bytes: int = 0
    cache_hits: int = 0  # shard cache opens served by an entry on disk (shard_cache.py)
    cache_misses: int = 0  # shard cache entries this process fetched
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, name: str, value: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + value)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {k: v for k, v in vars(self).items() if not k.startswith("_")}


class StorageSession:
    """The storage layer's state in one process (see the module doc)."""

    def __init__(self, parent: StorageSession | None = None) -> None:
        self.pid = os.getpid()
        # clients.py: one client per (scheme, options, environment), or per MSC profile
        self.clients: dict[tuple[Any, ...], Any] = {}
        self.inherited: list[Any] = []  # a parent's clients: kept alive, never used
        # ops.py: the threads that bound the requests of clients without an event loop (MSC)
        self.blocking: ThreadPoolExecutor | None = None
        # ops.py: small remote files and folder listings, read once
        self.small: dict[RemotePath, bytes] = {}
        self.listings: dict[RemotePath, dict[str, dict[str, Any]]] = {}
        # ranged.py: read-ahead windows and the background fetches of the next ones
        self.windows: OrderedDict[tuple[RemotePath, int], bytes] = OrderedDict()
        self.pending: dict[tuple[RemotePath, int], Future[bytes]] = {}
        self.readahead: ThreadPoolExecutor | None = None
        # shard_cache.py: spans read (and checked) just now, named by an open entry's token
        self.spans: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self.tokens = itertools.count()
        # prefetch.py: one cache (and prefetch thread) per configuration
        self.prefetchers: dict[ShardCacheConfig, Prefetcher] = {}
        # cache_config.py: the cache of the chain running now (None: the environment's)
        self.chosen: ShardCacheConfig | None = None
        self.announced: set[tuple[str, int] | None] = set()
        self.stats = RetryStats()
        self.jitter = random.Random()  # retry delays (timing only): a child draws its own
        # shards/metadata.py: a prepared dataset's .nv-meta, by root
        self.metadata: dict[Any, Any] = {}
        # warnings given once per process (a forked worker knows what its trainer told)
        self.told: set[Any] = set()
        # worker.py: Energon's debug sample logs open in this process (a forked child opens
        # its own: it never writes through its parent's file objects)
        self.debug_logs: dict[Path, TextIO] = {}
        if parent is not None:
            self._inherit(parent)

    def _inherit(self, parent: StorageSession) -> None:
        """What a forked child keeps of its parent's session (see the module doc)."""
        self.inherited = [*parent.inherited, *parent.clients.values()]
        self.small = dict(parent.small)
        self.listings = {k: dict(v) for k, v in parent.listings.items()}
        self.chosen = parent.chosen
        self.announced = set(parent.announced)
        counts = {k: v for k, v in vars(parent.stats).items() if not k.startswith("_")}
        self.stats = RetryStats(**counts)
        self.metadata = dict(parent.metadata)
        self.told = set(parent.told)

    def tell_once(self, what: Any) -> bool:
        """Whether the warning ``what`` (a hashable that names it) is new to this process;
        it is told from now on."""
        if what in self.told:
            return False
        self.told.add(what)
        return True

    def shard_cache(self, config: ShardCacheConfig | None) -> ShardCacheScope:
        """A reusable ``with`` block in which remote shards go through ``config``'s cache
        (``None``: the one chosen now): a loader's chain runs inside it, so two loaders of one
        process with different caches each read through their own."""
        return ShardCacheScope(config)


class ShardCacheScope:
    """``with scope:`` chooses the scope's shard cache in the process's session and restores
    the one chosen before on leaving (reusable and re-entrant)."""

    def __init__(self, config: ShardCacheConfig | None) -> None:
        self.config = config
        self._before: list[ShardCacheConfig | None] = []

    def __enter__(self) -> None:
        held = session()
        self._before.append(held.chosen)
        if self.config is not None:
            held.chosen = self.config

    def __exit__(self, *exc: object) -> None:
        session().chosen = self._before.pop()


_current: StorageSession | None = None


def session() -> StorageSession:
    """This process's storage session (made on first use)."""
    global _current
    if _current is None:
        _current = StorageSession()
    return _current


def reset_session() -> StorageSession:
    """A fresh session for this process: nothing read, no cache chosen, counters at zero. The
    old session's clients stay referenced (see the module doc)."""
    global _current
    old, _current = _current, StorageSession()
    if old is not None:
        _current.inherited = [*old.inherited, *old.clients.values()]
    return _current


def _in_forked_child() -> None:
    global _current
    if _current is not None:
        _current = StorageSession(_current)


after_in_child_fork_hook(_in_forked_child, make_persistent=True)
