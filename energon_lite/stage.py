"""The Stage base class: the contract every pipeline stage follows.

A stage produces items one at a time from its parent(s) and can say where it is:

* ``next()`` returns the next item or raises ``StopIteration`` at the end of its stream;
* ``save_state()`` returns plain data (dict/list/str/int/float/bytes/None) with the stage's
  type name under ``"type"`` and its parent's state under ``"source"`` (or ``"sources"``);
* ``restore_state(None)`` starts fresh, ``restore_state(state)`` continues exactly after the
  last item handed out when ``state`` was saved. There is no separate initialisation path;
* ``fetch(restore_key)`` returns the item with that ``__restore_key__`` again by random
  access, re-running this stage's deterministic work. Buffers use it on restore.

States are only taken between two ``next()`` calls.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from energon_lite.errors import StateError


class Stage:
    """Base class of all stages. Subclasses set ``source`` (or hold several) and override."""

    source: Stage | None = None

    def next(self) -> Any:
        raise NotImplementedError

    def save_state(self) -> dict[str, Any]:
        """Default for stages that hold nothing between items: the type tag and the source."""
        return self._state()

    def restore_state(self, state: dict[str, Any] | None) -> None:
        """Default for stages that hold nothing between items: restore the source."""
        if self.source is None:
            raise NotImplementedError(f"{type(self).__name__} must implement restore_state")
        self.source.restore_state(None if state is None else self._check_state(state)["source"])

    def fetch(self, restore_key: Any) -> Any:
        """Default: the stage does not change items, so its parent can fetch them."""
        if self.source is None:
            raise NotImplementedError(f"{type(self).__name__} cannot fetch by restore key")
        return self.source.fetch(restore_key)

    def __iter__(self) -> Iterator[Any]:
        while True:
            try:
                yield self.next()
            except StopIteration:
                return

    # helpers for subclasses -------------------------------------------------------------

    def _state(self, **fields: Any) -> dict[str, Any]:
        """This stage's state: its type tag, its fields and its parent's state."""
        state: dict[str, Any] = {"type": type(self).__name__, **fields}
        if self.source is not None:
            state["source"] = self.source.save_state()
        return state

    def _check_state(self, state: Any, *required: str) -> dict[str, Any]:
        """Validate the shape of a state for this stage; raise StateError naming the problem."""
        name = type(self).__name__
        if not isinstance(state, dict):
            raise StateError(f"{name}: state must be a dict, got {type(state).__name__}")
        if state.get("type") != name:
            raise StateError(
                f"{name}: state belongs to stage {state.get('type')!r}, not {name!r}; "
                "was it saved by a loader with other stages (packing, grouping, blend)?"
            )
        missing = [key for key in required if key not in state]
        if self.source is not None and "source" not in state:
            missing.append("source")
        if missing:
            raise StateError(f"{name}: state is missing {missing}; it is truncated or corrupt")
        return state


def fill(source: Stage, buffer: list[Any], size: int) -> bool:
    """Pull items from ``source`` until ``buffer`` holds ``size``; True if the source ran out."""
    while len(buffer) < size:
        try:
            buffer.append(source.next())
        except StopIteration:
            return True
    return False
