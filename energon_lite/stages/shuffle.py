"""``ShuffleBuffer``: emits a random one of the last ``size`` raw samples.

Algorithm: fill the buffer to ``size`` from the source, then swap a uniformly drawn slot
with the last and pop it; at the end of the source, drain. The buffer holds *raw* samples
(encoded bytes), so its memory is the compressed size of ``size`` samples.

State: the restore key of every buffered sample in buffer order, plus the random counter.
Restore fetches the samples again through the source (random access by key).
"""

from __future__ import annotations

from typing import Any

from energon_lite.errors import ConfigError
from energon_lite.rng import CounterRng
from energon_lite.stages.base import Stage
from energon_lite.stages.buffer import KeyedBuffer, check_held
from energon_lite.state.codec import state_count


class ShuffleBuffer(Stage):
    STATE_KEYS = ("keys", "rng")
    DELTA_KEYS = ("keys",)  # a batch changes a few of the buffer's keys
    STATS_LABEL = "shuffle"
    STATS_HINT = "the shuffle buffer is {percent}%: a smaller shuffle_buffer_size"
    ELASTIC_FRESH = {"keys": [], "rng": 0}  # its samples are dealt to the new readers
    source: Stage  # always set: this stage has one parent
    _buffer: KeyedBuffer
    _rng: CounterRng

    def __init__(self, source: Stage, size: int, seed: int, *rng_keys: Any) -> None:
        if size < 1:
            raise ConfigError(
                f"{size=} for the shuffle buffer; set shuffle_buffer_size >= 1 or None"
            )
        self.source = source
        self.size = size
        self.seed = seed
        self.rng_keys = ("shuffle", *rng_keys)

    def stats_held(self) -> tuple[int, int | None] | None:
        return (len(self._buffer), self.size) if self._started else None

    @classmethod
    def held_keys(cls, level: dict[str, Any]) -> list[Any]:
        return list(level["keys"])

    def next(self) -> Any:
        self._start_if_fresh()
        buffer = self._buffer
        buffer.fill(self.source, self.size)
        if not buffer.items:
            raise StopIteration
        return buffer.pop_at(self._rng.integers(len(buffer)))

    def _reset(self) -> None:
        self._buffer = KeyedBuffer("ShuffleBuffer")
        self._rng = CounterRng(self.seed, *self.rng_keys)

    def _save(self) -> dict[str, Any]:
        return {"keys": self._buffer.save(), "rng": self._rng.counter}

    def _validate(self, state: dict[str, Any]) -> None:
        check_held("ShuffleBuffer", [state["keys"]], self.size, "shuffle_buffer_size")

    def _restore(self, state: dict[str, Any]) -> None:
        self._reset()
        self._buffer.restore(state["keys"], self.source.fetch)
        self._rng.counter = state_count(state["rng"], "ShuffleBuffer rng")
