"""``FileStoreCachePool`` (Energon's name and constructor): a local file cache for cookers.

``FileStoreCachePool`` keeps fetched files in one local folder shared by every worker
process and rank of a machine that names the same ``parent_cache_dir``; a file any of them
fetched is read from there by all (fetched once), within a byte and a file-count limit.

Layout of ``<parent>/energon_lite_cache/`` (mode 0700, refused when another user owns it or
others may write to it): ``data/<h>.bin`` (an entry: a magic, a JSON header with the source
info and the payload's length, then the file's raw bytes; never a pickle, so a planted file
is at worst wrong bytes, never code; ``h`` a hash of the store type and path, the file name
and the method; ``data/`` is ``cache_dir``), ``locks/<h>.lock`` (an empty file whose byte 0
is the fetch lock and byte 1 the pin lock, POSIX record locks), ``locks/usage`` (bytes and
files cached, guarded by a ``flock`` on it, as is eviction) and ``tmp/`` (files being
written, and ``to_cache`` data).

Algorithm. ``get_lazy`` pins the entry (shared lock on byte 1, held until the Lazy is read
or dropped: an entry some process will read is never evicted) and prefetches it on a
background thread: exclusive lock on byte 0 (one fetcher per entry across processes); if
``<h>.bin`` exists it is a hit; otherwise read the data, reserve its size under the pool
lock (evicting least recently used, unpinned entries until it fits; a file that cannot fit
is not cached but handed over in memory), write a temp file and rename it into place.
Every byte on disk was reserved first, so the folder never holds more than the limit.
Within a process, references to the same entry share one prefetch (a refcount).

The cache never costs a sample. Its folders deleted under a running pool (a tmp cleaner)
are made again; an entry that cannot be written (the disk is full) or read back is handed
over from the store in memory instead, with one warning per process; a failed write
removes its temp file and gives its reserved bytes back.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import stat
import struct
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
from energon_lite.epathlib import EPath
from energon_lite.errors import ConfigError
from energon_lite.samples.types import SourceInfo

log = logging.getLogger(__name__)

_FETCH, _PIN = 0, 1  # byte ranges of an entry's lock file
T = TypeVar("T")


class _Pending:
    """One entry's prefetch in this process, shared by its Lazy references."""

    def __init__(self, name: str, lock_fd: int) -> None:
        self.name, self.lock_fd, self.refcount = name, lock_fd, 1
        self.send_to_cache_future: Future[Any] | None = None


class FileStoreCachePool(CachePool):
    """A byte- and count-limited file cache in a folder shared by the processes of a machine.

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
        parent = (
            Path(parent_cache_dir) if parent_cache_dir is not None else Path(tempfile.gettempdir())
        )
        root = private_folder(parent / "energon_lite_cache")
        self.cache_dir, self._locks, self._tmp = root / "data", root / "locks", root / "tmp"
        for folder in (self.cache_dir, self._locks, self._tmp):
            private_folder(folder)
        self.num_workers = num_workers
        self.max_cache_size = int(max_cache_size_gbytes * 1024**3)
        self.max_cache_count = max_cache_count
        self.method = method
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.RLock()
        self._pending: dict[str, _Pending] = {}
        self._executor: ThreadPoolExecutor | None = None
        self._warned = False  # the one warning of this process that the cache is read around

    def __getstate__(self) -> dict[str, Any]:
        return {
            k: v
            for k, v in self.__dict__.items()
            if k not in ("_lock", "_pending", "_executor", "_warned")
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def _check_process(self) -> None:
        if os.getpid() != self._pid:  # forked: threads, locks and fds belong to the parent
            self._reset()

    # public API ---------------------------------------------------------------------------

    def get(self, ds: FileStore, fname: str, sample: Any = None) -> Any:
        """The data of ``fname`` now, through the cache (fetched once per machine)."""
        return self.get_lazy(ds, fname).get(sample)

    def get_lazy(self, ds: FileStore, fname: str) -> FileCacheLazy:
        """Pin the entry and start fetching it in the background."""
        self._check_process()
        name = self._entry_name(ds, fname)
        with self._lock:
            entry = self._pending.get(name)
            if entry is not None:
                entry.refcount += 1
            else:
                entry = _Pending(name, self._open_pinned(name))
                self._pending[name] = entry
                if self._executor is None:
                    self._executor = ThreadPoolExecutor(self.num_workers, "energon-lite-cache")
                entry.send_to_cache_future = self._executor.submit(self._fetch, ds, fname, entry)
        return FileCacheLazy(ds=ds, fname=fname, pool=self, entry=entry)

    def to_cache(self, data: Any, name: str) -> Lazy:
        """Move ``data`` out to the cache folder; the Lazy reads (and removes) it later.

        Only plain data (dicts, lists, tuples, strings, bytes, numbers, booleans, None) is
        written, as msgpack (tuples as a data-only extension, so they come back as tuples):
        anything else (arrays, tensors, objects) stays in memory, as with ``NoCachePool``,
        because writing it would need a pickle, and reading a pickle runs code.
        """
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
        with self._lock:
            if self._executor is not None and os.getpid() == self._pid:
                self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def usage(self) -> tuple[int, int]:
        """``(bytes, files)`` cached now, by every process sharing the folder."""
        with self._pool_locked() as fd:
            return _read_usage(fd)

    # internals ----------------------------------------------------------------------------

    def _entry_name(self, ds: FileStore, fname: str) -> str:
        text = f"{type(ds).__name__}\0{ds.get_path()}\0{fname}\0{self.method}"
        return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()

    def _folders(self) -> None:
        """Make the cache's folders again (deleted under a running pool), as private ones."""
        for folder in (self.cache_dir.parent, self.cache_dir, self._locks, self._tmp):
            private_folder(folder)

    def _write(self, path: Path, blob: bytes) -> None:
        """``_write_atomic`` into the cache, its folders made again once if they vanished."""
        try:
            _write_atomic(path, blob, self._tmp)
        except FileNotFoundError:
            self._folders()
            _write_atomic(path, blob, self._tmp)

    def _read_around(self, exc: OSError) -> None:
        """Log, once per process, that the cache is read around (data handed over in memory)."""
        if not self._warned:
            self._warned = True
            log.warning(
                "%s: cannot write to the cache (%s: %s); reading around it: files are "
                "handed over from their store in memory, uncached, until it can again",
                self.cache_dir.parent, type(exc).__name__, exc,
            )  # fmt: skip

    def _open_pinned(self, name: str) -> int:
        """Open ``<name>.lock`` and hold a shared lock on its pin byte."""
        path = self._locks / f"{name}.lock"
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except FileNotFoundError:  # the folder was deleted: make it again, once
                self._folders()
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.lockf(fd, fcntl.LOCK_SH, 1, _PIN)
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if same:  # not unlinked by an evictor between open and lock
                return fd
            os.close(fd)

    def _fetch(self, ds: FileStore, fname: str, entry: _Pending) -> Any:
        """Background: make ``<name>.bin`` exist; returns None (cached) or the data."""
        name = entry.name
        data_path = self.cache_dir / f"{name}.bin"
        fcntl.lockf(entry.lock_fd, fcntl.LOCK_EX, 1, _FETCH)
        try:
            try:
                os.utime(data_path)  # a hit: recently used
                return None
            except FileNotFoundError:
                pass
            payload: Any = ds._get_raw(fname)  # decoded on read, for both methods
            if not isinstance(payload[0], (bytes, bytearray, memoryview)):
                return payload  # a store that gives no raw bytes: handed over, never pickled
            blob = _encode_entry(bytes(payload[0]), payload[1])
            try:
                if not self._reserve(len(blob), name):
                    return payload  # too large for the cache: hand it over in memory
            except OSError as exc:  # the usage file cannot be written (a full disk)
                self._read_around(exc)
                return payload
            try:
                self._write(data_path, blob)
            except BaseException as exc:
                self._unreserve(len(blob))
                if not isinstance(exc, OSError):
                    raise
                self._read_around(exc)  # a full disk: the sample is not lost
                return payload
            return None
        finally:
            fcntl.lockf(entry.lock_fd, fcntl.LOCK_UN, 1, _FETCH)

    # what a FileCacheLazy asks of its pool -------------------------------------------------

    def wait(self, ds: FileStore, fname: str, entry: _Pending) -> tuple[Any, Any]:
        """``(data, source info)`` of ``entry``'s file once its prefetch is done; the
        reference is released (as by :meth:`release`)."""
        try:
            assert entry.send_to_cache_future is not None
            payload = entry.send_to_cache_future.result()
            if payload is None:
                payload = self._read_entry(ds, fname, self.cache_dir / f"{entry.name}.bin")
            data, source = payload
            return ds._decode_raw(data, fname=fname), source
        finally:
            self.release(entry)

    def _read_entry(self, ds: FileStore, fname: str, path: Path) -> tuple[bytes, Any]:
        """The raw bytes and source of a cached entry; an entry that is not one of ours
        (truncated, or written by something else) is logged and read from the store."""
        try:
            with open(path, "rb") as file:
                blob = file.read()
        except FileNotFoundError:  # deleted after it was fetched (the folder, by a cleaner)
            return ds._get_raw(fname)
        try:
            return _decode_entry(blob)
        except ValueError as exc:
            log.warning("%s: not a cache entry (%s); reading %r from its store", path, exc, fname)
            return ds._get_raw(fname)

    def release(self, entry: _Pending) -> None:
        """Drop one reference to ``entry`` (a Lazy never read); the last one unpins the file."""
        if os.getpid() != self._pid:
            return
        with self._lock:
            entry.refcount -= 1
            if entry.refcount <= 0 and self._pending.get(entry.name) is entry:
                del self._pending[entry.name]
                if entry.send_to_cache_future is not None and not entry.send_to_cache_future.done():
                    entry.send_to_cache_future.add_done_callback(lambda _: os.close(entry.lock_fd))
                else:
                    os.close(entry.lock_fd)  # drops this process's pin

    # space accounting -------------------------------------------------------------------

    def _pool_locked(self) -> _PoolLock:
        if not self._locks.is_dir():  # deleted under the running pool
            self._folders()
        return _PoolLock(self._locks / "usage")

    def _reserve(self, size: int, name: str) -> bool:
        if size > self.max_cache_size:
            return False
        with self._lock, self._pool_locked() as fd:
            used, count = _read_usage(fd)
            if used + size > self.max_cache_size or count + 1 > self.max_cache_count:
                used, count = self._evict(fd, used, count, size, keep=name)
            if used + size > self.max_cache_size or count + 1 > self.max_cache_count:
                return False
            _write_usage(fd, used + size, count + 1)
            return True

    def _unreserve(self, size: int) -> None:
        try:
            with self._pool_locked() as fd:
                used, count = _read_usage(fd)
                _write_usage(fd, max(0, used - size), max(0, count - 1))
        except OSError as exc:  # the usage file went with its folder: counted from 0 again
            log.debug("cache usage not updated: %s", exc)

    def _evict(self, fd: int, used: int, count: int, size: int, keep: str) -> tuple[int, int]:
        """Remove least recently used, unpinned entries until ``size`` more bytes fit."""
        files = []
        for item in os.scandir(self.cache_dir):
            if item.name.endswith(".bin"):
                stat = item.stat()
                files.append((stat.st_mtime_ns, item.name[:-4], stat.st_size))
        files.sort()
        for _, name, nbytes in files:
            if used + size <= self.max_cache_size and count + 1 <= self.max_cache_count:
                break
            if name == keep or name in self._pending:
                continue
            lock_path = self._locks / f"{name}.lock"
            try:
                lock_fd = os.open(lock_path, os.O_RDWR)
            except FileNotFoundError:
                continue
            try:
                fcntl.lockf(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 2, 0)  # unpinned, idle
            except OSError:
                os.close(lock_fd)
                continue
            try:
                (self.cache_dir / f"{name}.bin").unlink(missing_ok=True)
                lock_path.unlink(missing_ok=True)
            finally:
                os.close(lock_fd)
            used, count = max(0, used - nbytes), max(0, count - 1)
        return used, count


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


class _PoolLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = -1

    def __enter__(self) -> int:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self.fd

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def _read_usage(fd: int) -> tuple[int, int]:
    raw = os.pread(fd, 16, 0)
    return struct.unpack("<QQ", raw) if len(raw) == 16 else (0, 0)


def _write_usage(fd: int, used: int, count: int) -> None:
    os.pwrite(fd, struct.pack("<QQ", used, count), 0)


_MAGIC = b"ELCACHE1"
_MAX_HEADER = 1 << 20


def _encode_entry(data: bytes, source: Any) -> bytes:
    """``magic, u32 header length, JSON header, data``: plain data only, never a pickle."""
    info = None
    if isinstance(source, SourceInfo):
        info = {
            "dataset_path": str(source.dataset_path),
            # an EPath comes back as one; a store of your own may name its path as a string
            "epath": isinstance(source.dataset_path, EPath),
            "index": source.index,
            "shard_name": source.shard_name,
            "file_names": list(source.file_names),
        }
    header = json.dumps({"size": len(data), "source": info}).encode()
    return _MAGIC + struct.pack("<I", len(header)) + header + data


def _decode_entry(blob: bytes) -> tuple[bytes, SourceInfo | None]:
    if not blob.startswith(_MAGIC) or len(blob) < len(_MAGIC) + 4:
        raise ValueError("no entry magic")
    start = len(_MAGIC) + 4
    (length,) = struct.unpack_from("<I", blob, len(_MAGIC))
    if length > _MAX_HEADER or start + length > len(blob):
        raise ValueError(f"header length {length} out of range")
    try:
        header = json.loads(blob[start : start + length])
        data = blob[start + length :]
        if not isinstance(header, dict) or header.get("size") != len(data):
            raise ValueError("size does not match the data")
        info = header.get("source")
        if info is None:
            return data, None
        source = SourceInfo(
            dataset_path=EPath(str(info["dataset_path"]))
            if info.get("epath")
            else str(info["dataset_path"]),
            index=info["index"]
            if info["index"] is None or isinstance(info["index"], (int, str))
            else str(info["index"]),
            shard_name=None if info["shard_name"] is None else str(info["shard_name"]),
            file_names=tuple(str(name) for name in info["file_names"]),
        )
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"bad header: {exc}") from None
    return data, source


def private_folder(path: Path) -> Path:
    """``path`` (resolved), created with mode 0700 if missing; refused when another user
    owns it or others may write to it, since whoever writes a cache folder chooses what every
    worker reads from it."""
    path = Path(path)
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=False)
        os.chmod(path, 0o700)  # the umask may have narrowed it further; never wider
    except FileExistsError:
        pass
    resolved = path.resolve()
    info = os.stat(resolved)
    if not stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"cache folder {resolved} is not a folder; remove it or choose another")
    if info.st_uid != os.getuid():
        raise ConfigError(
            f"cache folder {resolved} is owned by uid {info.st_uid}, not by this user "
            f"(uid {os.getuid()}): another user could plant entries there; remove it or "
            "pass FileStoreCachePool(parent_cache_dir=...) a folder of your own"
        )
    if info.st_mode & 0o022:
        raise ConfigError(
            f"cache folder {resolved} has mode {stat.S_IMODE(info.st_mode):04o}: others may "
            f"write to it and plant entries; run `chmod 700 {resolved}` or choose another folder"
        )
    return resolved


def _write_atomic(path: Path, blob: bytes, tmp_dir: Path) -> None:
    """Write ``blob`` to a temp file, then rename it to ``path``; a failed write (a full
    disk) removes its temp file, which would otherwise keep the disk full."""
    tmp = tmp_dir / f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp"
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
