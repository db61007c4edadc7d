"""``FileStoreCachePool`` (Energon's name, constructor and behaviour): a staging area on local
disk for files that cookers reference lazily.

``get_lazy(ds, fname)`` starts a background prefetch of the file into this process's cache
folder and returns a ``FileCacheLazy``; references to the same file share one prefetch (a
refcount on the pending entry). ``Lazy.get`` then reads the file from the cache, and the
entry's file is deleted once its last reference was read or dropped: the folder holds only
files some reference still waits for, within a byte and a file-count limit.

Back pressure, as in Energon: a prefetch whose file does not fit waits (on a condition) until
deleted entries make room; a ``get`` of an entry whose prefetch has not started cancels it
and reads the file directly, and a ``get`` of an entry waiting for room stops the wait and
reads directly; when other references still wait for that file, its prefetch is queued
again. ``current_cache_size`` / ``current_cache_count`` are the bytes and files staged now,
and each pending entry knows its ``data_size`` and ``refcount``.

Layout: ``<parent>/energon_lite_cache/`` (mode 0700, refused when another user owns it or
others may write to it) holds one folder per process (``cache_dir``, another one in a forked
child; made, mode 0700, when the process first writes to it and removed when its last file
was deleted), with the raw bytes of each staged file (``method="pickle"`` also keeps raw bytes and
decodes on read: nothing in the folder is ever unpickled) and ``to_cache`` data as msgpack.

The cache never costs a sample: its folder deleted under a running pool (a tmp cleaner) is
made again, and an entry that cannot be written (the disk is full) is read from its store
directly instead, with one warning per process.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
import tempfile
import threading
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, TypeVar

from energon_lite.cache.base import CachePool, Lazy
from energon_lite.cache.file_store import FileStore, add_source_info
from energon_lite.cache.lazy import CacheFileLazy, MockLazy, pack_plain
from energon_lite.cache.no_cache import _Constant
from energon_lite.errors import ConfigError
from energon_lite.storage.private import private_folder as _private_folder

log = logging.getLogger(__name__)

T = TypeVar("T")


class _Pending:
    """One file's prefetch in this process, shared by its Lazy references (Energon's fields)."""

    def __init__(self, ds: FileStore, fname: str) -> None:
        self.ds, self.fname = ds, fname
        self.send_to_cache_future: Future[bool] | None = None
        self.refcount = 1
        self.data_size = 0  # bytes of the file, once read
        self.require_data_now = False  # a reader waits for it: stop waiting for room
        self.cache_path: Path | None = None  # the staged file, once written
        self.source_info: Any = None
        self.uncacheable = False  # not raw bytes, or the disk refused it: read directly


class FileStoreCachePool(CachePool):
    """Prefetches lazily referenced files onto local disk in background threads, within
    ``max_cache_size_gbytes`` and ``max_cache_count``; each file is deleted after its last
    reference was read.

    ``method`` is Energon's: both ``"raw"`` and ``"pickle"`` keep the file's raw bytes and
    decode them on read (decoded objects are never pickled to disk).
    """

    def __init__(
        self,
        *,
        parent_cache_dir: str | os.PathLike[str] | None = None,
        num_workers: int = 8,
        max_cache_size_gbytes: float = 1024,
        max_cache_count: int = 10_000_000,
        method: Literal["raw", "pickle"] = "raw",
    ) -> None:
        if method not in ("raw", "pickle"):
            raise ConfigError(f"FileStoreCachePool(method={method!r}): use 'raw' or 'pickle'")
        if num_workers < 1 or max_cache_count < 1 or max_cache_size_gbytes <= 0:
            raise ConfigError(
                f"FileStoreCachePool: num_workers={num_workers}, max_cache_count="
                f"{max_cache_count}, max_cache_size_gbytes={max_cache_size_gbytes} must be > 0"
            )
        self.parent_cache_dir = (
            Path(parent_cache_dir) if parent_cache_dir is not None else Path(tempfile.gettempdir())
        )
        self._root = private_folder(self.parent_cache_dir / "energon_lite_cache")
        self.num_workers = num_workers
        self.max_cache_size = int(max_cache_size_gbytes * 1024**3)
        self.max_cache_count = max_cache_count
        self.method = method
        self._reset()

    def _reset(self) -> None:
        """This process's state: its own folder, threads, entries and counters."""
        self._pid = os.getpid()
        self.cache_dir = self._root / f"{self._pid}-{secrets.token_hex(8)}"  # made on use
        self._lock = threading.RLock()
        self._cache_space_available = threading.Condition(self._lock)
        self._pending_tasks: dict[tuple[str, str], _Pending] = {}
        self._worker_pool: ThreadPoolExecutor | None = None
        self._shutting_down = False
        self.current_cache_size = 0
        self.current_cache_count = 0
        self._warned = False  # the one warning of this process that the cache is read around

    _VOLATILE = (
        "_lock", "_cache_space_available", "_pending_tasks", "_worker_pool", "_warned",
        "cache_dir", "current_cache_size", "current_cache_count", "_shutting_down", "_pid",
    )  # fmt: skip

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in self._VOLATILE}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def _check_process(self) -> None:
        if os.getpid() != self._pid:  # forked: threads, locks and entries belong to the parent
            self._reset()

    def _executor(self) -> ThreadPoolExecutor:
        if self._worker_pool is None:
            self._worker_pool = ThreadPoolExecutor(self.num_workers, "energon-lite-cache")
        return self._worker_pool

    # public API ---------------------------------------------------------------------------

    def get(self, ds: FileStore, fname: str, sample: Any = None) -> Any:
        """The data of ``fname`` now, read from its store (the cache is for lazy reads)."""
        return ds.get(fname, sample)

    def get_lazy(self, ds: FileStore, fname: str) -> FileCacheLazy:
        """Start prefetching ``fname`` in the background (shared with the other references
        to it) and return a reference to it."""
        self._check_process()
        key = (ds.get_path(), fname)
        with self._lock:
            if self._shutting_down:
                raise RuntimeError("FileStoreCachePool: get_lazy after close()")
            entry = self._pending_tasks.get(key)
            if entry is not None:
                entry.refcount += 1
            else:
                entry = _Pending(ds, fname)
                self._pending_tasks[key] = entry
                entry.send_to_cache_future = self._executor().submit(self._cache_out, entry)
        return FileCacheLazy(ds=ds, fname=fname, pool=self, entry=entry)

    def to_cache(self, data: Any, name: str) -> Lazy:
        """Move ``data`` out to the cache folder; the Lazy reads (and removes) it later.

        Only plain data (dicts, lists, tuples, strings, bytes, numbers, booleans, None) is
        written, as msgpack (tuples as a data-only extension, so they come back as tuples):
        anything else (arrays, tensors, objects) stays in memory, as with ``NoCachePool``,
        because writing it would need a pickle, and reading a pickle runs code.
        """
        self._check_process()
        try:
            blob = pack_plain(data)
        except (TypeError, ValueError, OverflowError):
            return MockLazy(name, _Constant(data))
        path = self.cache_dir / f"{uuid.uuid4().hex}.msgpack"
        try:
            self._write(path, blob)
        except OSError as exc:
            self._read_around(exc)
            return MockLazy(name, _Constant(data))
        return CacheFileLazy(fname=name, pool=self, cache_path=path)

    def close(self) -> None:
        """Stop the prefetches (waiting ones give up) and the threads."""
        if os.getpid() != self._pid:
            return
        with self._lock:
            self._shutting_down = True
            for entry in self._pending_tasks.values():
                if entry.send_to_cache_future is not None:
                    entry.send_to_cache_future.cancel()
            self._cache_space_available.notify_all()
        if self._worker_pool is not None:
            self._worker_pool.shutdown(wait=True)
            self._worker_pool = None
        with self._lock:
            for entry in list(self._pending_tasks.values()):
                self._remove_cached_file(entry)
            self._pending_tasks.clear()
        with contextlib.suppress(OSError):
            self.cache_dir.rmdir()  # empty unless to_cache data is still referenced

    def usage(self) -> tuple[int, int]:
        """``(bytes, files)`` staged now in this process's folder."""
        with self._lock:
            return self.current_cache_size, self.current_cache_count

    # the background prefetch ----------------------------------------------------------------

    def _entry_path(self, entry: _Pending) -> Path:
        text = f"{type(entry.ds).__name__}\0{entry.ds.get_path()}\0{entry.fname}\0{self.method}"
        return self.cache_dir / f"{hashlib.blake2b(text.encode(), digest_size=16).hexdigest()}.bin"

    def _cache_out(self, entry: _Pending) -> bool:
        """Background: stage ``entry``'s file; True once written, False when a reader should
        read it directly (no room and a reader waits, not raw bytes, or a full disk)."""
        with self._lock:
            if self._shutting_down:
                return False
        data, entry.source_info = entry.ds._get_raw(entry.fname)  # decoded on read
        if not isinstance(data, (bytes, bytearray, memoryview)):
            entry.uncacheable = True  # a store that gives no raw bytes: never pickled
            return False
        size = len(data)
        with self._lock:
            entry.data_size = size
            if size > self.max_cache_size:
                entry.uncacheable = True  # could never fit: read directly
                return False
            while (
                self.current_cache_count + 1 > self.max_cache_count
                or self.current_cache_size + size > self.max_cache_size
            ):
                self._cache_space_available.wait()
                if entry.require_data_now or self._shutting_down:
                    return False  # a reader wants it now: it reads directly
            self.current_cache_size += size
            self.current_cache_count += 1
            if self._shutting_down or entry.refcount <= 0:  # nobody waits for it any more
                self._unreserve(size)
                return False
        path = self._entry_path(entry)
        try:
            self._write(path, bytes(data))
        except BaseException as exc:
            with self._lock:
                self._unreserve(size)
            if not isinstance(exc, OSError):
                raise
            entry.uncacheable = True
            self._read_around(exc)  # a full disk: the sample is not lost
            return False
        with self._lock:
            entry.cache_path = path
            if entry.refcount <= 0:  # the last reference went while it was written
                self._remove_cached_file(entry)
        return True

    def _unreserve(self, size: int) -> None:
        """Give back a reservation (the caller holds the lock)."""
        self.current_cache_size -= size
        self.current_cache_count -= 1
        self._cache_space_available.notify_all()

    # what a FileCacheLazy asks of its pool -------------------------------------------------

    def wait(self, ds: FileStore, fname: str, entry: _Pending) -> tuple[Any, Any]:
        """``(data, source info)`` of ``entry``'s file, from the cache once staged, else read
        directly (a prefetch not started is cancelled; one waiting for room stops); the
        reference is released (as by :meth:`release`), which deletes the staged file after
        the last one. Other references still waiting get the prefetch queued again."""
        self._check_process()
        future = entry.send_to_cache_future
        assert future is not None
        cached = False
        result: tuple[Any, Any] | None = None
        with self._lock:
            try:
                if future.cancel():  # never started: read directly
                    try:
                        result = tuple(ds[fname])
                    finally:
                        self._release_locked(entry)
                else:  # running or done: let it finish (or stop waiting for room)
                    entry.require_data_now = True
                    self._cache_space_available.notify_all()
                    self._lock.release()
                    try:
                        cached = future.result()
                        result = self._read_cached(entry) if cached else None
                        if result is None:
                            cached = False
                            result = tuple(ds[fname])
                    finally:
                        self._lock.acquire()
                        entry.require_data_now = False
                        self._release_locked(entry)
            finally:
                if (
                    entry.refcount > 0
                    and not cached
                    and not entry.uncacheable
                    and not self._shutting_down
                ):  # others still wait for the file: stage it again for them
                    entry.send_to_cache_future = self._executor().submit(self._cache_out, entry)
        assert result is not None
        return result

    def _read_cached(self, entry: _Pending) -> tuple[Any, Any] | None:
        """The decoded data and source of a staged entry; None when its file is gone (the
        folder deleted by a cleaner): the caller reads from the store."""
        path = entry.cache_path
        if path is None:
            return None
        try:
            with open(path, "rb") as file:
                raw = file.read()
        except FileNotFoundError:
            return None
        return entry.ds._decode_raw(raw, fname=entry.fname), entry.source_info

    def release(self, entry: _Pending) -> None:
        """Drop one reference to ``entry`` (a Lazy never read); the last one deletes its
        staged file."""
        if os.getpid() != self._pid:
            return
        with self._lock:
            self._release_locked(entry)

    def _release_locked(self, entry: _Pending) -> None:
        entry.refcount -= 1
        if entry.refcount <= 0:
            key = (entry.ds.get_path(), entry.fname)
            if self._pending_tasks.get(key) is entry:
                del self._pending_tasks[key]
            self._remove_cached_file(entry)

    def _remove_cached_file(self, entry: _Pending) -> None:
        """Delete ``entry``'s staged file and give its room back (the caller holds the lock)."""
        if entry.cache_path is None:
            return
        try:
            entry.cache_path.unlink(missing_ok=True)
        except OSError as exc:
            log.debug("%s: not removed: %s", entry.cache_path, exc)
        entry.cache_path = None
        self._unreserve(entry.data_size)
        if self.current_cache_count == 0:  # no folder left behind by each worker of each pass
            with contextlib.suppress(OSError):
                self.cache_dir.rmdir()  # unless to_cache data is still there

    # the folder ---------------------------------------------------------------------------

    def _write(self, path: Path, blob: bytes) -> None:
        """``_write_atomic`` into the cache, its folder made (private) when missing: not
        made yet, removed when its last file went, or deleted by a tmp cleaner."""
        for attempt in range(3):
            try:
                _write_atomic(path, blob)
                return
            except FileNotFoundError:
                if attempt == 2:
                    raise
                private_folder(self._root)
                private_folder(self.cache_dir)

    def _read_around(self, exc: OSError) -> None:
        """Log, once per process, that the cache is read around (data read directly)."""
        if not self._warned:
            self._warned = True
            log.warning(
                "%s: cannot write to the cache (%s: %s); reading around it: files are "
                "read from their store directly, uncached, until it can again",
                self.cache_dir, type(exc).__name__, exc,
            )  # fmt: skip

    def __str__(self) -> str:
        return (
            f"FileStoreCachePool(cache_dir={self.cache_dir}, max_cache_size="
            f"{self.max_cache_size}, max_cache_count={self.max_cache_count}, method="
            f"{self.method}, current_cache_size={self.current_cache_size}, "
            f"current_cache_count={self.current_cache_count})"
        )


class FileCacheLazy(Lazy[T]):
    """A background prefetch into a ``FileStoreCachePool``; ``get`` waits for it."""

    pool: FileStoreCachePool

    def __init__(
        self, *, ds: FileStore, fname: str, pool: FileStoreCachePool, entry: _Pending
    ) -> None:
        super().__init__(ds=ds, fname=fname, pool=pool)
        self.entry = entry
        self._data: tuple[Any, Any] | None = None

    def get(self, sample: Any = None) -> T:
        if self._data is None:
            assert self.ds is not None
            self._data = self.pool.wait(self.ds, self.fname, self.entry)
        add_source_info(sample, self._data[1])
        return self._data[0]

    def __del__(self) -> None:
        if getattr(self, "_data", None) is None and hasattr(self, "entry"):
            self.pool.release(self.entry)


def private_folder(path: Path) -> Path:
    """``path`` (resolved), created with mode 0700 if missing; refused when another user
    owns it or others may write to it (``storage/private.py``)."""
    return _private_folder(
        path, "pass FileStoreCachePool(parent_cache_dir=...) a folder of your own"
    )


def _write_atomic(path: Path, blob: bytes) -> None:
    """Write ``blob`` to a temp file beside ``path``, then rename it; a failed write (a full
    disk) removes its temp file, which would otherwise keep the disk full."""
    tmp = path.with_name(f".{path.name}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as file:
            file.write(blob)
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink(missing_ok=True)
        except OSError as exc:
            log.debug("%s: not removed: %s", tmp, exc)
        raise
