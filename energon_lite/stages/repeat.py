"""``Repeat``: the source's stream again after it ends (Energon's ``RepeatDataset``).

Pass ``k`` reads a source made by ``make_source(k)``: a wrapper builds it for its own reader
epoch, so a shuffled source is reshuffled per pass rather than replayed. ``repeats=None``
repeats until a pass yields nothing (a worker without data ends instead of spinning);
``repeats=r`` makes ``ceil(r)`` passes, the last one cut after ``last_pass_items`` items when
``r`` has a fraction. ``active=False`` makes the stage empty (Energon's ``restart=False``
after its first loader pass).

State: the pass number and the items handed out in it; the source's state is that pass's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from energon_lite.errors import ConfigError, StateError
from energon_lite.stages.base import Stage
from energon_lite.state.codec import state_count


class Repeat(Stage):
    STATE_KEYS = ("repetition", "index")
    source: Stage  # always set: the current pass's source
    _repetition: int
    _index: int

    def __init__(
        self,
        make_source: Callable[[int], Stage],
        repeats: float | None = None,
        last_pass_items: int | None = None,
        active: bool = True,
    ) -> None:
        if repeats is not None and not repeats > 0:
            raise ConfigError(f"{repeats=} must be > 0 (or None: repeat forever)")
        self.make_source = make_source
        self.repeats = repeats
        self.passes = None if repeats is None else math.ceil(repeats)
        fractional = repeats is not None and repeats != math.floor(repeats)
        self.last_pass_items = last_pass_items if fractional else None
        self.active = active
        self.source = make_source(0)  # constructors only: no I/O until it starts

    def next(self) -> Any:
        self._start_if_fresh()
        while self.active and (self.passes is None or self._repetition < self.passes):
            last = self.passes is not None and self._repetition == self.passes - 1
            if last and self.last_pass_items is not None and self._index >= self.last_pass_items:
                break
            try:
                item = self.source.next()
            except StopIteration:
                if self.repeats is None and self._index == 0:
                    break  # an empty pass: nothing to repeat on this worker
                self._repetition += 1
                self._index = 0
                self.source = self._pass(self._repetition)
                self.source.restore_state(None)
                continue
            self._index += 1
            return item
        raise StopIteration

    def restore_state(self, state: dict[str, Any] | None) -> None:
        if state is None:
            self.source = self._pass(0)
        super().restore_state(state)

    def _pass(self, repetition: int) -> Stage:
        """The source of pass ``repetition``, in this chain's context."""
        source = self.make_source(repetition)
        source.bind(self.context)
        return source

    def _reset(self) -> None:
        self._repetition = 0
        self._index = 0

    def _save(self) -> dict[str, Any]:
        return {"repetition": self._repetition, "index": self._index}

    def _validate(self, state: dict[str, Any]) -> None:
        repetition = state_count(state["repetition"], "Repeat repetition")
        if self.passes is not None and repetition > self.passes:
            raise StateError(f"Repeat: pass {repetition} of {self.passes}; the state is corrupt")
        self.source = self._pass(repetition)  # the pass the state's source belongs to

    def _restore(self, state: dict[str, Any]) -> None:
        self._repetition = state_count(state["repetition"], "Repeat repetition")
        self._index = state_count(state["index"], "Repeat index")
