"""``Concat``: the sources one after the other, in order (validation and test splits).

State: the sources' states and the index of the current source.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from energon_lite.errors import ConfigError, StateError
from energon_lite.stages.base import Stage
from energon_lite.stages.routing import by_leaf, fetch_by_leaf
from energon_lite.state.codec import state_count


class Concat(Stage):
    STATE_KEYS = ("current",)
    STATS_LABEL = "concat"
    sources: list[Stage]  # Readers, or chains a wrapper composes

    def __init__(self, sources: Sequence[Stage]) -> None:
        if not sources:
            raise ConfigError("Concat needs at least one source")
        self.sources = list(sources)
        self._by_leaf = by_leaf(self.sources)

    def next(self) -> Any:
        self._start_if_fresh()
        while self._current < len(self.sources):
            try:
                return self.sources[self._current].next()
            except StopIteration:
                self._current += 1
        raise StopIteration

    def fetch(self, restore_key: Any) -> Any:
        return fetch_by_leaf("Concat", self._by_leaf, restore_key)

    def _reset(self) -> None:
        self._current = 0

    def _save(self) -> dict[str, Any]:
        return {"current": self._current}

    def _restore(self, state: dict[str, Any]) -> None:
        self._current = state_count(state["current"], "Concat current")
        if self._current > len(self.sources):
            raise StateError(
                f"Concat: current source {self._current} of {len(self.sources)}; it is corrupt"
            )
