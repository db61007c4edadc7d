"""``Limit``: stops after ``limit`` items (val/test ``limit=``). State: the count so far."""

from __future__ import annotations

from typing import Any

from energon_lite.errors import ConfigError
from energon_lite.stages.base import Stage
from energon_lite.state.codec import state_count


class Limit(Stage):
    STATE_KEYS = ("count",)
    STATS_LABEL = "limit"
    source: Stage  # always set: this stage has one parent

    def __init__(self, source: Stage, limit: int) -> None:
        if limit < 0:
            raise ConfigError(f"{limit=} must be >= 0 (or None for no limit)")
        self.source = source
        self.limit = limit

    def next(self) -> Any:
        self._start_if_fresh()
        if self._count >= self.limit:
            raise StopIteration
        item = self.source.next()
        self._count += 1
        return item

    def _reset(self) -> None:
        self._count = 0

    def _save(self) -> dict[str, Any]:
        return {"count": self._count}

    def _restore(self, state: dict[str, Any]) -> None:
        self._count = state_count(state["count"], "Limit count")
