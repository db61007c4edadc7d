"""``FrameCache``: decoded camera frames kept in memory up to a byte budget, LRU.

A pool of episodes is drawn from many times per epoch (the Q-chunking loader: 5,000 steps
of 128 draws over ~12,800 frames), and decoding three JPEGs per draw is what makes a
draw slow. The cache keeps decoded frames keyed by ``(episode, frame, dataset key)``:

* ``budget_bytes`` bounds the bytes of the arrays it holds (``held_bytes``); inserting
  evicts the least recently used frames until the new frame fits. A frame larger than the
  whole budget is returned but not kept. ``budget_bytes=0`` turns the cache off.
* Cached arrays are read-only, so a caller can never change what a later draw returns;
  a transition stacks the cameras into a new array anyway.
* One cache belongs to one process (one DataLoader worker): it is emptied when pickled
  and when the process id changes (a forked worker starts empty, never with its parent's
  pages half-shared).
* ``retain(episodes)`` drops the frames of episodes outside a new pool, so memory follows
  the pool when the epoch changes.

Counters ``hits``, ``misses`` and ``evictions`` are statistics for benchmarks and logs.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from energon_lite.errors import ConfigError

FrameKey = tuple[int, int, str]


class FrameCache:
    """An LRU of decoded frames bounded by ``budget_bytes`` (see the module docstring)."""

    def __init__(self, budget_bytes: int) -> None:
        if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int) or budget_bytes < 0:
            raise ConfigError(f"frame cache {budget_bytes=} must be an int >= 0")
        self.budget_bytes = budget_bytes
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._frames: OrderedDict[FrameKey, np.ndarray] = OrderedDict()
        self.held_bytes = 0
        self.hits = self.misses = self.evictions = 0

    def __getstate__(self) -> dict[str, Any]:
        return {"budget_bytes": self.budget_bytes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.budget_bytes = state["budget_bytes"]
        self._reset()

    def __len__(self) -> int:
        return len(self._frames)

    def get(self, key: FrameKey, decode: Callable[[], np.ndarray]) -> np.ndarray:
        """The frame of ``key``; ``decode()`` makes it on a miss."""
        if os.getpid() != self._pid:
            self._reset()
        frame = self._frames.get(key)
        if frame is not None:
            self._frames.move_to_end(key)
            self.hits += 1
            return frame
        self.misses += 1
        frame = decode()
        if self.budget_bytes == 0 or frame.nbytes > self.budget_bytes:
            return frame
        frame = np.ascontiguousarray(frame)
        frame.flags.writeable = False
        while self._frames and self.held_bytes + frame.nbytes > self.budget_bytes:
            _, evicted = self._frames.popitem(last=False)
            self.held_bytes -= evicted.nbytes
            self.evictions += 1
        self._frames[key] = frame
        self.held_bytes += frame.nbytes
        return frame

    def retain(self, episodes: Iterable[int]) -> None:
        """Forget the frames of every episode not in ``episodes``."""
        keep = {int(e) for e in episodes}
        for key in [k for k in self._frames if k[0] not in keep]:
            self.held_bytes -= self._frames.pop(key).nbytes

    def clear(self) -> None:
        self._frames.clear()
        self.held_bytes = 0
