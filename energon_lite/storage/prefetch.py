"""This process's shard cache (``process_cache``) and its prefetch of a worker's next shards.

``prefetch(items)`` replaces the process's list of shards to fetch ahead with ``items``
(``(path, version, size)`` in the order the worker will read them; the Reader passes the
shards of its next slices). One background thread fetches them into the cache, in order,
while the bytes fetched ahead and not yet opened stay within the configured prefetch bytes;
opening an entry (``opened``) frees its share. A failed prefetch is dropped silently: the
foreground read fetches the object again, with its own retries and its error if it fails.
Nothing here is loader state: a restored run recomputes its plan and prefetches again.
"""

from __future__ import annotations

import logging
import os
import threading

from energon_lite.storage.cache_config import ShardCacheConfig, current
from energon_lite.storage.path import RemotePath
from energon_lite.storage.shard_cache import ShardCache

logger = logging.getLogger("energon_lite.storage")
Item = tuple[RemotePath, str, int, "int | None"]  # path, version, size, whole CRC-32

_pid = os.getpid()
_caches: dict[ShardCacheConfig, tuple[ShardCache, int]] = {}
_lock = threading.Condition()
_queue: list[Item] = []
_ahead: dict[Item, int] = {}  # fetched ahead, not opened yet
_budget = 0
_thread: threading.Thread | None = None
_failed: set[Item] = set()


def _after_fork() -> None:
    global _pid, _thread, _budget, _lock
    if os.getpid() != _pid:  # a forked worker: its own thread, queue and lock
        _lock = threading.Condition()  # the parent's thread may have held the old one
        _caches.clear()
        _queue.clear()
        _ahead.clear()
        _failed.clear()
        _thread, _pid, _budget = None, os.getpid(), 0


os.register_at_fork(after_in_child=_after_fork)


def process_cache() -> ShardCache | None:
    """The cache this process reads remote shards through (None: off)."""
    config = current()
    if config is None:
        return None
    _after_fork()
    found = _caches.get(config)
    if found is None:
        folder, limit, prefetch_bytes = config.resolved()
        found = _caches[config] = (ShardCache(folder, limit), prefetch_bytes)
    return found[0]


def prefetch(items: list[Item]) -> None:
    """Fetch ``items`` ahead of use, bounded in bytes (see the module doc)."""
    global _thread, _budget
    cache = process_cache()
    config = current()
    if cache is None or config is None:
        return
    _budget = _caches[config][1]
    if _budget <= 0:
        return
    wanted = [it for it in items if cache.cacheable(it[1], it[2]) and it not in _failed]
    with _lock:
        keep = set(items)  # what the plan no longer names will not be opened soon
        for item in [it for it in _ahead if it not in keep]:
            del _ahead[item]
        _queue[:] = [it for it in wanted if it not in _ahead]
        if _thread is None:
            _thread = threading.Thread(
                target=_run, args=(cache,), name="energon-lite-prefetch", daemon=True
            )
            _thread.start()
        _lock.notify_all()


def opened(item: Item) -> None:
    """The foreground opened ``item``: it no longer counts as fetched ahead."""
    with _lock:
        if _ahead.pop(item, None) is not None:
            _lock.notify_all()


def _run(cache: ShardCache) -> None:
    global _thread
    while True:
        with _lock:
            item = None
            while item is None:
                if _queue:
                    used = sum(_ahead.values())
                    if not used or used + _queue[0][2] <= _budget:
                        item = _queue.pop(0)  # (one object larger than the budget goes alone)
                    else:
                        _lock.wait(timeout=1)
                elif not _lock.wait(timeout=60) and not _queue:
                    _thread = None  # idle for a minute; the next prefetch starts another
                    return
            _ahead[item] = item[2]
        path, version, size, crc32 = item
        try:
            if not cache.has(path, version, size):
                entry = cache.open(path, version, size, crc32)
                if entry is not None:  # None: no room beside the fetches in flight
                    entry.close()
        except Exception as exc:  # the foreground fetches it again, with its own error
            logger.debug("prefetch of %s failed: %s", path, exc)
            with _lock:
                _ahead.pop(item, None)
                _failed.add(item)
