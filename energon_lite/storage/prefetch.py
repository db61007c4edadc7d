"""This process's shard caches (``process_cache``) and their prefetch of a worker's next shards.

``prefetch(items)`` replaces the process's list of shards to fetch ahead with ``items``
(``(path, version, size)`` in the order the worker will read them; the Reader passes the
shards of its next slices). One background thread fetches them into the cache, in order,
while the bytes fetched ahead and not yet opened stay within the configured prefetch bytes;
opening an entry (``opened``) frees its share. A failed prefetch is dropped silently: the
foreground read fetches the object again, with its own retries and its error if it fails.
Nothing here is loader state: a restored run recomputes its plan and prefetches again. Each
``ShardCacheConfig`` has its own ``Prefetcher`` (cache, queue, budget, thread) in the storage
session, so two loaders of one process with different caches never mix their plans.
"""

from __future__ import annotations

import logging
import threading

from energon_lite.storage.cache_config import current
from energon_lite.storage.path import RemotePath
from energon_lite.storage.session import session
from energon_lite.storage.shard_cache import ShardCache

logger = logging.getLogger("energon_lite.storage")
Item = tuple[RemotePath, str, int, "int | None"]  # path, version, size, whole CRC-32


class Prefetcher:
    """One shard cache of this process and the thread that fills it ahead of a worker's
    reads (held by the storage session, one per ``ShardCacheConfig``)."""

    def __init__(self, cache: ShardCache, budget: int) -> None:
        self.cache, self.budget = cache, budget
        self.lock = threading.Condition()
        self.queue: list[Item] = []
        self.ahead: dict[Item, int] = {}  # fetched ahead, not opened yet
        self.failed: set[Item] = set()
        self.thread: threading.Thread | None = None

    def plan(self, items: list[Item]) -> None:
        """Fetch ``items`` ahead of use, bounded in bytes (see the module doc)."""
        if self.budget <= 0:
            return
        cache = self.cache
        wanted = [it for it in items if cache.cacheable(it[1], it[2]) and it not in self.failed]
        with self.lock:
            keep = set(items)  # what the plan no longer names will not be opened soon
            for item in [it for it in self.ahead if it not in keep]:
                del self.ahead[item]
            self.queue[:] = [it for it in wanted if it not in self.ahead]
            if self.thread is None:
                self.thread = threading.Thread(
                    target=self._run, name="energon-lite-prefetch", daemon=True
                )
                self.thread.start()
            self.lock.notify_all()

    def opened(self, item: Item) -> None:
        with self.lock:
            if self.ahead.pop(item, None) is not None:
                self.lock.notify_all()

    def _run(self) -> None:
        while True:
            with self.lock:
                item = None
                while item is None:
                    if self.queue:
                        used = sum(self.ahead.values())
                        if not used or used + self.queue[0][2] <= self.budget:
                            item = self.queue.pop(0)  # (one larger than the budget goes alone)
                        else:
                            self.lock.wait(timeout=1)
                    elif not self.lock.wait(timeout=60) and not self.queue:
                        self.thread = None  # idle for a minute; the next plan starts another
                        return
                self.ahead[item] = item[2]
            path, version, size, crc32 = item
            try:
                if not self.cache.has(path, version, size):
                    entry = self.cache.open(path, version, size, crc32)
                    if entry is not None:  # None: no room beside the fetches in flight
                        entry.close()
            except Exception as exc:  # the foreground fetches it again, with its own error
                logger.debug("prefetch of %s failed: %s", path, exc)
                with self.lock:
                    self.ahead.pop(item, None)
                    self.failed.add(item)


def _prefetcher() -> Prefetcher | None:
    """The cache (and its prefetcher) of the chain running now, made on first use."""
    config = current()
    if config is None:
        return None
    held = session().prefetchers  # a forked worker's session starts with none
    found = held.get(config)
    if found is None:
        folder, limit, prefetch_bytes = config.resolved()
        found = held[config] = Prefetcher(ShardCache(folder, limit), prefetch_bytes)
    return found


def process_cache() -> ShardCache | None:
    """The cache this process reads remote shards through now (None: off)."""
    found = _prefetcher()
    return None if found is None else found.cache


def prefetch(items: list[Item]) -> None:
    """Fetch ``items`` ahead of use, bounded in bytes (see the module doc)."""
    found = _prefetcher()
    if found is not None:
        found.plan(items)


def opened(item: Item) -> None:
    """The foreground opened ``item``: it no longer counts as fetched ahead."""
    found = _prefetcher()
    if found is not None:
        found.opened(item)
