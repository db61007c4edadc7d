"""``Limit``: stops after ``limit`` items (val/test ``limit=``). State: the count so far."""

from __future__ import annotations

from typing import Any

from energon_lite.errors import ConfigError
from energon_lite.stage import Stage


class Limit(Stage):
    source: Stage  # always set: this stage has one parent

    def __init__(self, source: Stage, limit: int) -> None:
        if limit < 0:
            raise ConfigError(f"{limit=} must be >= 0 (or None for no limit)")
        self.source = source
        self.limit = limit
        self.restore_state(None)

    def next(self) -> Any:
        if self._count >= self.limit:
            raise StopIteration
        item = self.source.next()
        self._count += 1
        return item

    def save_state(self) -> dict[str, Any]:
        return self._state(count=self._count)

    def restore_state(self, state: dict[str, Any] | None) -> None:
        if state is None:
            self._count = 0
            self.source.restore_state(None)
            return
        state = self._check_state(state, "count")
        self._count = int(state["count"])
        self.source.restore_state(state["source"])
