"""``ShardFile``: ``pread`` on a shard, local (one system call) or remote (windows with read-ahead).

When a remote read fails for good (``RemoteStorageError``: the retries are spent), the
error propagates and stops the run, naming the object and byte range: the store failed, not
the samples, so they are never skipped as bad ones (docs/safety.md).

A remote ``pread(n, offset)`` that misses the windows already fetched issues one ranged GET
of ``max(n, READAHEAD)`` bytes from ``offset``: the Reader asks for a chunk of consecutive
samples at a time, and the window covers the chunks that follow, so a slice of a shard costs
one or two requests, never one per sample. Windows are kept in a small per-process LRU
(``READAHEAD * WINDOWS`` bytes at most, in the storage session), dropped after a fork with
the rest of the client.
Once a read passes the middle of a window, the next window is fetched by a background
thread (sequential read-ahead, at most two in flight), so a long slice does not wait for
its second request; a failed background fetch is simply done again in the foreground.

A remote ``ShardFile`` carries the object's ``version`` (ETag or Last-Modified) its dataset
pinned at open: every GET is conditional on it (``ops.read_range``), so a shard replaced
mid-run stops the run with ``ObjectChangedError`` naming it instead of serving other bytes.

With a node-local shard cache on (``cache_config.py``), a remote shard of a known version is
read from its checked local entry instead (``shard_cache.py``), fetched whole on first use.
An entry evicted by another process while it is read is let go (its space is freed); the
rest of that pass (until a read goes back to an earlier offset) reads ranged windows.
"""

from __future__ import annotations

import io
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

from energon_lite.errors import DatasetFormatError
from energon_lite.storage import ops, prefetch
from energon_lite.storage.path import RemotePath, StoragePath
from energon_lite.storage.prefetch import process_cache
from energon_lite.storage.session import session
from energon_lite.storage.shard_cache import CachedShard, CorruptEntry, EvictedEntry, ShardCache

logger = logging.getLogger("energon_lite.storage")

READAHEAD = int(os.environ.get("ENERGON_LITE_READAHEAD_BYTES", str(1 << 20)))
WINDOWS = 8


class ShardFile:
    """Random reads of one shard; open it per process (local files hold a descriptor)."""

    def __init__(self, path: StoragePath, version: str = "", crc32: int | None = None) -> None:
        self.path = path
        self.version = version  # a remote object's pinned ETag / Last-Modified ("": none)
        self.crc32 = crc32  # the whole object's, as prepare read it: checked when cached whole
        self._fd: int | None = None
        self._size: int | None = None
        self._cached: CachedShard | None = None
        self._cache: ShardCache | None = None  # the cache _cached came from
        self._cache_checked = False
        self._evicted = False  # its entry was evicted during the current pass
        self._last_offset = 0
        if isinstance(path, Path):
            try:
                self._fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                raise DatasetFormatError(
                    f"{path}: shard is missing (deleted, moved or a dangling link); restore it "
                    "or re-run prepare"
                ) from None
            except OSError as exc:
                raise DatasetFormatError(f"{path}: cannot open shard: {exc.strerror}") from None

    @property
    def size(self) -> int:
        """The shard's length in bytes (a remote one's from the folder listing)."""
        if self._size is None:
            self._size = os.fstat(self._fd).st_size if self._fd is not None else ops.size(self.path)
        return self._size

    def pread(self, size: int, offset: int) -> bytes:
        if self._fd is not None:
            return os.pread(self._fd, size, offset)
        assert isinstance(self.path, RemotePath)  # no descriptor: a remote shard
        if not self._cache_checked or (self._evicted and offset < self._last_offset):
            self._evicted = False  # a new pass over the shard: through the cache again
            self._open_cached()
        self._last_offset = offset
        if self._cached is None:
            return _remote_pread(self.path, size, offset, self.version)
        try:
            return self._cached.pread(size, offset)
        except EvictedEntry:
            # another process needed the room while this shard is read: the rest of this
            # pass reads ranged windows (what a fetch of the whole shard again would cost
            # more than), the next pass goes through the cache again
            self._cached.close()
            self._cached, self._evicted = None, True
            return _remote_pread(self.path, size, offset, self.version)
        except CorruptEntry as exc:  # removed, fetched again, read again: no sample lost
            logger.warning("%s; fetching %s again", exc, self.path)
            assert self._cache is not None  # the cache that opened the entry
            self._cache.discard(self._cached)
            self._cached = None
            self._open_cached()
            if self._cached is None:
                return _remote_pread(self.path, size, offset, self.version)
            try:
                return self._cached.pread(size, offset)
            except CorruptEntry as again:
                raise OSError(
                    f"{again} right after fetching {self.path} again: the disk of the shard "
                    "cache is failing; point ENERGON_LITE_CACHE_DIR elsewhere"
                ) from None

    def _open_cached(self) -> None:
        """Read through the node's shard cache when one is on (see ``shard_cache.py``)."""
        self._cache_checked = True
        cache = self._cache = process_cache()
        assert isinstance(self.path, RemotePath)
        if cache is None or not cache.cacheable(self.version, self.size):
            return
        self._cached = cache.open(self.path, self.version, self.size, self.crc32)
        prefetch.opened((self.path, self.version, self.size, self.crc32))

    def close(self) -> None:
        if self._cached is not None:
            self._cached.close()
            self._cached = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _remote_pread(path: RemotePath, size: int, offset: int, version: str = "") -> bytes:
    windows = session().windows  # a forked worker's session has its own, and its own thread
    for (win_path, start), data in reversed(windows.items()):
        if win_path != path or not start <= offset < start + len(data):
            continue
        windows.move_to_end((win_path, start))
        end = start + len(data)
        if offset + size - start > len(data) // 2:
            _prefetch(path, end, len(data), version)
        if offset + size <= end:
            return data[offset - start : offset + size - start]
        if len(data) < READAHEAD:
            break  # the object ends here; a short read is the caller's to judge
        # the read runs past this window: its tail comes from the next one
        return data[offset - start :] + _remote_pread(path, offset + size - end, end, version)
    window = _take_pending(path, offset, size)
    if window is None:
        window = (offset, ops.read_range(path, offset, offset + max(size, READAHEAD), version))
        _keep(path, *window)
    start, data = window
    return data[offset - start : offset + size - start]


def _keep(path: RemotePath, start: int, data: bytes) -> None:
    windows = session().windows
    windows[(path, start)] = data
    while len(windows) > WINDOWS:
        windows.popitem(last=False)


def _prefetch(path: RemotePath, start: int, previous: int, version: str) -> None:
    """Fetch the window after a half-read one in the background (sequential read-ahead)."""
    held = session()
    if previous < READAHEAD or (path, start) in held.windows or (path, start) in held.pending:
        return  # the object ended within the last window, or it is on its way
    if len(held.pending) >= 2:
        return
    if held.readahead is None:
        held.readahead = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="energon-lite-readahead"
        )
    held.pending[(path, start)] = held.readahead.submit(
        ops.read_range, path, start, start + READAHEAD, version
    )


def _take_pending(path: RemotePath, offset: int, size: int) -> tuple[int, bytes] | None:
    """The background window that holds ``[offset, offset + size)``, once it arrived."""
    pending = session().pending
    for (win_path, start), future in list(pending.items()):
        if win_path != path or not start <= offset < start + READAHEAD:
            continue
        del pending[(win_path, start)]
        try:
            data = future.result()
        except Exception:  # fetched again in the foreground, with its own retries
            return None
        _keep(path, start, data)
        if offset + size <= start + len(data):
            return start, data
    return None


class RangedFile(io.RawIOBase):
    """A read-only, seekable file over a remote object: each ``read`` is a ``pread`` served
    from the windows above (one ranged GET per window, read-ahead on sequential reads), every
    GET pinned to the object's version at open. For libraries that take a file object
    (h5py, PIL, av): ``h5py.File(RangedFile(path), "r")`` reads an HDF5 file by ranges."""

    def __init__(self, path: RemotePath, version: str | None = None) -> None:
        super().__init__()
        self._shard = ShardFile(path, ops.version(path) if version is None else version)
        self.name = str(path)
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._shard.size}[whence]
        if base + offset < 0:
            raise ValueError(f"{self.name}: negative seek position {base + offset}")
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        size = min(len(view), max(0, self._shard.size - self._pos))
        if size == 0:
            return 0
        data = self._shard.pread(size, self._pos)
        view[: len(data)] = data
        self._pos += len(data)
        return len(data)


def open_binary(path: StoragePath) -> BinaryIO:
    """A seekable binary file object for ``path``: the file itself, or a ``RangedFile``."""
    if isinstance(path, Path):
        return open(path, "rb")
    return RangedFile(path)  # type: ignore[return-value]
