"""``ShuffleBuffer``: emits a random one of the last ``size`` raw samples.

Algorithm: fill the buffer to ``size`` from the source, then swap a uniformly drawn slot
with the last and pop it; at the end of the source, drain. The buffer holds *raw* samples
(encoded bytes), so its memory is the compressed size of ``size`` samples.

State: the ``__restore_key__`` of every buffered sample in buffer order, plus the random
counter. Restore fetches the samples again through the source (random access by key).
"""

from __future__ import annotations

from typing import Any

from energon_lite.errors import ConfigError, StateError
from energon_lite.rng import CounterRng
from energon_lite.stage import Stage, fill


class ShuffleBuffer(Stage):
    source: Stage  # always set: this stage has one parent
    _buffer: list[Any]
    _rng: CounterRng
    _source_done: bool

    def __init__(self, source: Stage, size: int, seed: int, *rng_keys: Any) -> None:
        if size < 1:
            raise ConfigError(
                f"{size=} for the shuffle buffer; set shuffle_buffer_size >= 1 or None"
            )
        self.source = source
        self.size = size
        self.seed = seed
        self.rng_keys = ("shuffle", *rng_keys)
        self.restore_state(None)

    def next(self) -> Any:
        buffer = self._buffer
        if not self._source_done:
            self._source_done = fill(self.source, buffer, self.size)
        if not buffer:
            raise StopIteration
        slot = self._rng.integers(len(buffer))
        item = buffer[slot]
        buffer[slot] = buffer[-1]
        buffer.pop()
        return item

    def save_state(self) -> dict[str, Any]:
        keys = [item["__restore_key__"] for item in self._buffer]
        return self._state(keys=keys, rng=self._rng.counter)

    def restore_state(self, state: dict[str, Any] | None) -> None:
        self._source_done = False
        if state is None:
            self.source.restore_state(None)
            self._buffer = []
            self._rng = CounterRng(self.seed, *self.rng_keys)
            return
        state = self._check_state(state, "keys", "rng")
        if not isinstance(state["keys"], list) or len(state["keys"]) > self.size:
            raise StateError(
                f"ShuffleBuffer: state holds {len(state['keys'])} keys but the buffer size is "
                f"{self.size}; was it saved with another shuffle_buffer_size?"
            )
        self.source.restore_state(state["source"])
        self._buffer = [self.source.fetch(tuple(key)) for key in state["keys"]]
        self._rng = CounterRng(self.seed, *self.rng_keys, counter=int(state["rng"]))
