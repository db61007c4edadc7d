"""``SharedFramePool``: a pool's decoded camera frames in shared memory, decoded once for all workers.

The Q-chunking loader decodes every frame of its pool when the pool loads, in one process.
A :class:`FrameCache` decodes lazily but per worker: ``W`` workers hold up to ``W`` copies. This store holds **one** decoded copy of the pool per
rank, in a file under ``/dev/shm`` (tmpfs: the pages are RAM, shared by every process that
maps the file), and every worker of the rank reads it:

* Layout: one byte of "filled" flag per pool frame, then the frames, ``(n_cam, H, W, 3)``
  uint8 each, in pool order (episode by episode). ``H, W`` come from frame 0 of the pool's
  first episode; a frame of another shape is decoded and returned, never stored.
* Filling is lazy and shared: a draw of a frame not yet filled decodes it, writes it into
  the file and sets its flag; every later draw of that frame, in any worker, reads it. Two
  workers that miss the same frame at once both decode it and write the same bytes. The
  file is sparse, so RAM grows only with the frames decoded (at most the decoded pool).
  The flags are written and read through the kernel (``pwrite``/``pread``), whose locking
  orders a flag after the frame's bytes on every CPU; once a process has seen a flag set
  it remembers it and reads the frame with no system call.
* Frames come back as read-only views of the shared pages: nothing can change what another
  draw returns, and batching copies them (as it copies the decode-everything pool's views).
  For a plain ``DataLoader`` (whose ``default_collate`` warns on read-only arrays) they can
  come as writable views of a private copy-on-write mapping of the same pages instead: no
  copy per draw, and a write stays in the writing process (as a write to the forked
  decode-everything pool does). Each frame starts on a page boundary, so a frame's pages
  hold nothing else.
* Files live in a directory made by :class:`SharedPoolDir` in the main process and removed
  when that object is collected or the process exits. A process entering a new pool drops
  its mapping of the previous one and deletes the files of earlier pools: a worker still
  drawing from one keeps its mapping (an unlinked tmpfs file lives while it is mapped), so
  the old pool's RAM goes when the last worker leaves it and at most one full pool plus
  the part of the next one that the leading workers have filled is held. (Keeping a pool
  file until the pool after next held two whole pools through every epoch of an exactly
  resumable loader whose workers prefetch across the epoch boundary.) A lagging worker that
  finds its pool deleted before it opened it rebuilds it (decodes again, same bytes), so
  deletion never changes a transition.
"""

from __future__ import annotations

import mmap
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable
from pathlib import Path

import numpy as np

from energon_lite.errors import ConfigError

_HEADER_ALIGN = max(4096, mmap.ALLOCATIONGRANULARITY)  # mmap offsets must be multiples of it


def _default_root() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _remove_if_owner(path: str, pid: int) -> None:
    if os.getpid() == pid:  # a forked worker's copy never removes its parent's directory
        shutil.rmtree(path, ignore_errors=True)


class SharedPoolDir:
    """A directory for pool files, made in the process that creates this object.

    It is removed when this object is collected or at exit, by the creating process only.
    Pickled (to spawned workers) it keeps pointing at the same directory.
    """

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        root = _default_root() if root is None else os.fspath(root)
        if root is not None and not os.path.isdir(root):
            raise ConfigError(f"shared pool directory root {root!r} is not a directory")
        self.path = Path(tempfile.mkdtemp(prefix="energon_lite_pool_", dir=root))
        self._finalizer = weakref.finalize(self, _remove_if_owner, str(self.path), os.getpid())

    def __getstate__(self) -> dict[str, str]:
        return {"path": str(self.path)}

    def __setstate__(self, state: dict[str, str]) -> None:
        self.path = Path(state["path"])

    def cleanup(self) -> None:
        if hasattr(self, "_finalizer"):
            self._finalizer()


class SharedFramePool:
    """One pool's decoded frames in a shared file (see the module docstring)."""

    def __init__(
        self,
        path: Path,
        episodes: list[int],
        lengths: list[int],
        frame_shape: tuple[int, ...],
    ) -> None:
        self.path = path
        self.frame_shape = tuple(int(s) for s in frame_shape)
        self.frame_bytes = int(np.prod(self.frame_shape))
        self._slot = {int(e): i for i, e in enumerate(episodes)}
        self._first = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        n = int(self._first[-1])
        self._flags_at = 0
        data_at = -(-n // _HEADER_ALIGN) * _HEADER_ALIGN
        stride = -(-self.frame_bytes // _HEADER_ALIGN) * _HEADER_ALIGN  # a frame owns its pages
        size = data_at + n * stride
        self._fd = self._open(size)
        # Mapped from the descriptor, never the path: a worker entering the next pool may
        # unlink this file at any moment, and the descriptor keeps it alive (see the module).
        shared = mmap.mmap(self._fd, n * stride, offset=data_at)
        self._map = np.frombuffer(shared, dtype=np.uint8).reshape(n, stride)
        # the same pages, copy-on-write: writable views whose writes stay in this process
        private = mmap.mmap(self._fd, n * stride, access=mmap.ACCESS_COPY, offset=data_at)
        self._private = np.frombuffer(private, dtype=np.uint8).reshape(n, stride)
        self._seen = np.zeros(n, dtype=bool)  # flags this process has already seen set
        self.hits = self.misses = 0

    def _open(self, size: int) -> int:
        """Open the pool file, creating it (sparse, full size) atomically if it is missing."""
        try:
            return os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            pass
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, size)
            try:
                os.link(tmp, self.path)  # fails if another worker created it first
            except FileExistsError:
                os.close(fd)
                fd = os.open(self.path, os.O_RDWR)
        finally:
            os.unlink(tmp)
        return fd

    def __contains__(self, episode: int) -> bool:
        return int(episode) in self._slot

    @property
    def frames(self) -> int:
        return len(self._seen)

    def get(
        self,
        episode: int,
        frame: int,
        decode: Callable[[], np.ndarray],
        writable: bool = False,
    ) -> np.ndarray:
        """Frame ``frame`` of ``episode`` (a pool member), decoding and storing it on a miss.

        A read-only view of the shared pages; ``writable=True``: a view of this process's
        copy-on-write mapping of them (a write copies the touched pages into this process
        and changes its later reads of that frame, never the pool or another process).
        """
        i = int(self._first[self._slot[int(episode)]]) + int(frame)
        if not self._seen[i]:
            if os.pread(self._fd, 1, self._flags_at + i) == b"\x01":
                self._seen[i] = True
                self.hits += 1
            else:
                self.misses += 1
                decoded = decode()
                if decoded.dtype != np.uint8 or decoded.shape != self.frame_shape:
                    return decoded  # not of the pool's layout: returned, never stored
                self._map[i, : self.frame_bytes] = decoded.reshape(-1)
                os.pwrite(self._fd, b"\x01", self._flags_at + i)
                self._seen[i] = True
        else:
            self.hits += 1
        if writable:
            return self._private[i, : self.frame_bytes].reshape(self.frame_shape)
        view = self._map[i, : self.frame_bytes].reshape(self.frame_shape)
        view.flags.writeable = False
        return view

    def filled(self) -> int:
        """How many frames of the pool are in the file (any process's)."""
        flags = os.pread(self._fd, len(self._seen), self._flags_at)
        return flags.count(1)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        del self._map, self._private  # views handed out keep the pages mapped until they are freed
