"""``ShardCache``: remote shard bytes kept on local disk, one folder for every process of a node.

Entries. An entry is a whole object, named by a hash of its identity: the URL (with the S3
endpoint), the version its dataset pinned at open (ETag, else Last-Modified) and its size.
A changed object has another identity, so it is never served from an old entry; an object
with no version is not cached at all. ``<id>.data`` holds the bytes and ``<id>.crc`` a CRC-32
of each 1 MiB block. Reads check every block the first time an open entry reads it, so a
corrupt, truncated or half-deleted entry is removed and fetched again, never a lost sample.
The span read to check a block serves the reads that follow inside it (the last ``SPANS``
spans of a process are kept, in its storage session), so checking costs no second read of the
bytes.

Concurrency. A fetch writes ``<id>.data.tmp-<pid>`` and renames it into place after the
``.crc`` (atomic: readers see a whole entry or none); 256 lock files (``.locks/``, by the
id's first byte) make the processes of a node fetch each object once, and ``.lock`` guards
the byte count: before a fetch, under that lock, the folder is summed (temporary files of
live processes count at their final size) and the least recently used entries are removed
until the new one fits. An entry's modification time is its last use (touched when opened
and, while it is read, at most once a second), so entries being read are evicted last. A reader holds its entry's descriptor, so a read under way when its entry is evicted
completes; the next read sees the entry gone (no links left) and closes it, so an evicted
entry's space is freed (``ranged.ShardFile`` reads the rest of that pass remotely). An object larger than the limit is read
without the cache.

Trust. Whoever writes the folder chooses what every worker reads, so the folder is made with
mode 0700 and refused when another user owns it or others may write to it
(``private.private_folder``, checked when the cache is first used); temporaries and lock
files are created without following links (``private.create_new``), so a link planted at
their names is removed, never written through.

Limit. A fetch in flight counts at its final size and cannot be evicted; when the entries
that can be evicted do not free enough room beside the fetches in flight, the object is read
without the cache (ranged GETs) rather than overrunning the limit. A folder deleted while an
entry is fetched (a clean-up of the node) is made again and the entry fetched again, once.

Fetching an entry costs ``ceil(size / FETCH_CHUNK)`` ranged GETs (``ops.read_range``: retried,
bounded in time, conditional on the pinned version); a failure removes the temporary file
and propagates (the run stops naming the object, as without a cache).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from energon_lite.errors import DatasetFormatError
from energon_lite.storage import ops
from energon_lite.storage.path import RemotePath
from energon_lite.storage.private import create_new, private_folder, write_new
from energon_lite.storage.session import session
from energon_lite.storage.stale import is_stale_temporary

if TYPE_CHECKING:
    import numpy as np

BLOCK = 1 << 20  # bytes per checksum
FETCH_CHUNK = 16 << 20  # bytes per GET while filling an entry
SPANS = 4  # checked spans a process keeps: a read verifies a span and serves the next ones
TOUCH_EVERY = 1.0  # seconds between two marks of an entry being read (its mtime)
logger = logging.getLogger("energon_lite.storage")


class CorruptEntry(Exception):
    """A cached entry whose bytes do not match its checksums (removed; fetch it again)."""


class EvictedEntry(Exception):
    """An open entry another process evicted: reopen it (its disk space is freed on close)."""


def identity(path: RemotePath, version: str, size: int) -> str:
    endpoint = path.storage_options.get("endpoint_url") or (
        os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL", "")
        if path.scheme == "s3"
        else ""
    )
    return f"{endpoint}|{path}|{version}|{size}"


class CachedShard:
    """An open, checked entry: ``pread`` verifies each block the first time it is read."""

    def __init__(self, fd: int, crcs: np.ndarray, size: int, where: Path) -> None:
        import numpy as np  # here, not at import: `energon-lite --help` loads storage/

        self.fd, self.crcs, self.size, self.where = fd, crcs, size, where
        self._checked = np.zeros(len(crcs), dtype=bool)
        self._touched = time.monotonic()
        self._spans = session().spans  # of this process (a forked child has its own)
        self._token = next(session().tokens)  # names its spans (an id() could be reused)

    def pread(self, size: int, offset: int) -> bytes:
        end = min(offset + size, self.size)
        if end <= offset:
            return b""
        if os.fstat(self.fd).st_nlink == 0:  # evicted: let go of it, or it holds its space
            raise EvictedEntry(str(self.where))
        now = time.monotonic()
        if now - self._touched > TOUCH_EVERY:  # in use: the most recently used, for LRU
            with contextlib.suppress(OSError):
                os.utime(self.fd)
            self._touched = now
        first, last = offset // BLOCK, (end - 1) // BLOCK
        for (entry, start), span in reversed(self._spans.items()):
            if entry == self._token and start <= offset and end <= start + len(span):
                return span[offset - start : end - start]  # read (and checked) just now
        if self._checked[first : last + 1].all():
            return os.pread(self.fd, end - offset, offset)
        start = first * BLOCK
        span = os.pread(self.fd, min((last + 1) * BLOCK, self.size) - start, start)
        for block in range(first, last + 1):
            if self._checked[block]:
                continue
            piece = span[(block - first) * BLOCK : (block - first + 1) * BLOCK]
            expected = min(BLOCK, self.size - block * BLOCK)
            if len(piece) != expected or zlib.crc32(piece) != int(self.crcs[block]):
                raise CorruptEntry(f"{self.where}: block {block} does not match its checksum")
            self._checked[block] = True
        self._spans[(self._token, start)] = span  # the next chunks of a sequential read are in it
        while len(self._spans) > SPANS:
            self._spans.popitem(last=False)
        return span[offset - start : end - start]

    def close(self) -> None:
        for key in [k for k in self._spans if k[0] == self._token]:
            del self._spans[key]
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class ShardCache:
    """The cache in ``folder``: at most ``limit`` bytes of entries (see the module doc)."""

    def __init__(self, folder: Path, limit: int) -> None:
        self.folder, self.limit = folder, limit
        self.fetched = 0  # entries this process fetched (tests and benchmarks read it)
        self._trusted = False  # the folder passed private_folder in this process

    def _check_folder(self) -> None:
        if not self._trusted:
            private_folder(self.folder, _HINT)
            self._trusted = True

    def _paths(self, path: RemotePath, version: str, size: int) -> tuple[Path, Path, Path]:
        name = hashlib.sha256(identity(path, version, size).encode()).hexdigest()[:40]
        lock = self.folder / ".locks" / name[:2]
        return self.folder / f"{name}.data", self.folder / f"{name}.crc", lock

    def cacheable(self, version: str, size: int) -> bool:
        return bool(version) and 0 < size <= self.limit

    def open(
        self, path: RemotePath, version: str, size: int, crc32: int | None = None
    ) -> CachedShard | None:
        """The entry of the object, fetched first unless another process did; ``None``
        where fetches in flight leave no room for it (read it without the cache).
        ``crc32``: the whole object's as prepare read it, checked when it is fetched."""
        self._check_folder()
        data, crc, lock = self._paths(path, version, size)
        entry = self._open_existing(data, crc, size)
        if entry is not None:
            session().stats.add("cache_hits")
            return entry
        for attempt in (1, 2):
            try:
                with _locked(lock):
                    entry = self._open_existing(data, crc, size)
                    if entry is not None:  # another process fetched it meanwhile
                        session().stats.add("cache_hits")
                        return entry
                    session().stats.add("cache_misses")
                    return self._fetch(path, version, size, data, crc, crc32)
            except FileNotFoundError as exc:  # the folder went away under the fetch
                if attempt == 2:
                    raise OSError(
                        f"the shard cache folder {self.folder} disappeared twice while "
                        f"{path} was fetched into it ({exc}); point ENERGON_LITE_CACHE_DIR at "
                        "a folder nothing cleans up during the run"
                    ) from None
                logger.warning(
                    "shard cache folder %s disappeared while %s was fetched; fetching again",
                    self.folder,
                    path,
                )
                self._trusted = False
                self._check_folder()
        raise AssertionError("unreachable")

    def has(self, path: RemotePath, version: str, size: int) -> bool:
        return self._paths(path, version, size)[0].exists()

    def discard(self, entry: CachedShard) -> None:
        """Remove a corrupt entry (it is fetched again by the next ``open``)."""
        entry.close()
        for p in (entry.where, entry.where.with_suffix(".crc")):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()

    def _open_existing(self, data: Path, crc: Path, size: int) -> CachedShard | None:
        try:
            fd = os.open(data, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            import numpy as np

            crcs = np.frombuffer(crc.read_bytes(), dtype="<u4")
            if os.fstat(fd).st_size != size or len(crcs) != -(-size // BLOCK):
                raise CorruptEntry(f"{data}: size or checksum list does not match the object")
        except (FileNotFoundError, CorruptEntry):
            os.close(fd)  # evicted between the two opens, or damaged: fetch again
            with contextlib.suppress(FileNotFoundError):
                data.unlink()
            return None
        with contextlib.suppress(OSError):
            os.utime(fd)  # last use, for LRU
        return CachedShard(fd, crcs, size, data)

    def _fetch(
        self,
        path: RemotePath,
        version: str,
        size: int,
        data: Path,
        crc: Path,
        expected: int | None = None,
    ) -> CachedShard | None:
        tmp = data.with_name(f"{data.name}.tmp-{os.getpid()}")
        with self._accounting():
            if not self._make_room(size):
                return None
            fd = create_new(tmp, os.O_RDWR, 0o644)
            os.ftruncate(fd, size)  # counted at its final size by other processes' sums
        try:
            import numpy as np

            crcs = np.zeros(-(-size // BLOCK), dtype="<u4")
            whole = 0
            for start in range(0, size, FETCH_CHUNK):
                chunk = ops.read_range(path, start, min(start + FETCH_CHUNK, size), version)
                os.pwrite(fd, chunk, start)
                for at in range(0, len(chunk), BLOCK):
                    crcs[(start + at) // BLOCK] = zlib.crc32(chunk[at : at + BLOCK])
                if expected is not None:
                    whole = zlib.crc32(chunk, whole)
            if expected is not None and whole != expected:
                raise DatasetFormatError(
                    f"{path}: shard changed since prepare: the CRC-32 of its {size} bytes is "
                    f"{whole:08x}, prepare read {expected:08x}; re-run prepare"
                )
            write_new(crc, crcs.tobytes())
            os.replace(tmp, data)
        except BaseException as exc:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise OSError(
                    exc.errno,
                    f"cannot keep {path} in the shard cache ({exc.strerror}): free space "
                    "there, lower ENERGON_LITE_CACHE_LIMIT or point ENERGON_LITE_CACHE_DIR "
                    "at a folder with room",
                    str(self.folder),
                ) from None
            raise
        self.fetched += 1
        entry = CachedShard(fd, crcs, size, data)
        entry._checked[:] = True  # written from the bytes just checked by the GETs
        return entry

    @contextlib.contextmanager
    def _accounting(self) -> Iterator[None]:
        with _locked(self.folder / ".lock"):
            yield

    def usage(self) -> int:
        """Bytes the entries and live temporary files take (as counted for the limit)."""
        return sum(size for _, size, _ in self._scan())

    def _scan(self) -> list[tuple[float, int, Path]]:
        """``(last use, size, path)`` of every entry; stale temporary files are removed."""
        found: list[tuple[float, int, Path]] = []
        with os.scandir(self.folder) as entries:
            for item in entries:
                name = item.name
                if ".tmp-" in name:
                    if is_stale_temporary(name):
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(item.path)
                        continue
                elif not name.endswith(".data"):
                    continue
                try:
                    stat = item.stat()
                except FileNotFoundError:
                    continue
                used = float("inf") if ".tmp-" in name else stat.st_mtime
                found.append((used, stat.st_size, Path(item.path)))
        return found

    def _make_room(self, size: int) -> bool:
        """Evict the least recently used entries until ``size`` more bytes fit; False when
        the fetches in flight (never evicted) leave too little room even so."""
        entries = self._scan()
        total = sum(s for _, s, _ in entries)
        for _, entry_size, path in sorted(entries, key=lambda e: e[0]):
            if total + size <= self.limit or _is_tmp(path):
                break
            for p in (path, path.with_suffix(".crc")):
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
            total -= entry_size
        return total + size <= self.limit


_HINT = "point ENERGON_LITE_CACHE_DIR at a folder of your own"


def _is_tmp(path: Path) -> bool:
    return ".tmp-" in path.name


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)  # a link: ELOOP
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock
