"""A few open ``AVDecoder``s per process, reused between the samples of one video file.

Opening a video costs a demuxer open (the container index read and parsed, the streams
probed) and a codec open. A loader that reads several clips of one file in turn (a table
listing many clips of one long video, a small set of videos read every epoch) pays that once
per file instead of once per sample, and a clip that starts after the previous one, with no
keyframe in between, continues decoding from where the previous one stopped. The frames are
those of a fresh decoder: the decoder seeks whenever it cannot continue exactly.

A file is keyed by its path together with its size, modification time and inode, so a file
replaced on disk is opened afresh. The cache belongs to one process: a forked child starts
with an empty one (the parent's open files share their read offsets with the child).
"""

from __future__ import annotations

import os
from collections import OrderedDict

from energon_lite.av.decoder import AVDecoder
from energon_lite.errors import ConfigError

_Key = tuple[str, int, int, int]


class DecoderCache:
    """Up to ``capacity`` open decoders of local files, the least recently used dropped
    (and closed) first."""

    def __init__(self, capacity: int = 2) -> None:
        if capacity < 1:
            raise ConfigError(f"DecoderCache({capacity=}) must hold at least one decoder")
        self.capacity = capacity
        self._pid = os.getpid()
        self._decoders: OrderedDict[_Key, AVDecoder] = OrderedDict()

    def decoder(self, path: str) -> AVDecoder:
        """The open decoder of the file at ``path`` (opened now if not held; a missing file
        raises ``FileNotFoundError``)."""
        self._forget_after_fork()
        info = os.stat(path)
        key = (os.fspath(path), info.st_size, info.st_mtime_ns, info.st_ino)
        found = self._decoders.get(key)
        if found is not None:
            self._decoders.move_to_end(key)
            return found
        for held in [k for k in self._decoders if k[0] == key[0]]:  # an older version
            self._decoders.pop(held).close()
        decoder = self._decoders[key] = AVDecoder(key[0])
        while len(self._decoders) > self.capacity:
            self._decoders.popitem(last=False)[1].close()
        return decoder

    def discard(self, path: str) -> None:
        """Close and drop the decoder of ``path`` (after it failed: start afresh next time)."""
        self._forget_after_fork()
        for key in [k for k in self._decoders if k[0] == os.fspath(path)]:
            self._decoders.pop(key).close()

    def clear(self) -> None:
        """Close every decoder held."""
        self._forget_after_fork()
        while self._decoders:
            self._decoders.popitem()[1].close()

    def __getstate__(self) -> dict[str, int]:
        return {"capacity": self.capacity}  # open files do not travel: a copy starts empty

    def __setstate__(self, state: dict[str, int]) -> None:
        DecoderCache.__init__(self, state["capacity"])

    def __len__(self) -> int:
        self._forget_after_fork()
        return len(self._decoders)

    def _forget_after_fork(self) -> None:
        if self._pid != os.getpid():
            # Inherited over fork: the parent's files, not ours to read from.
            self._decoders = OrderedDict()
            self._pid = os.getpid()
