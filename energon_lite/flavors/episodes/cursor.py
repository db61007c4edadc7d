"""``EpochCursor``: the shared state handling of the episode sampling stages.

Both sampling modes are a pure function of (seed, epoch, worker, position in the epoch), so
their whole state is ``{"epoch", "position"}``. Subclasses say how to enter an epoch at a
position, where they are, and how many positions an epoch has for this worker.
"""

from __future__ import annotations

from typing import Any

from energon_lite.errors import StateError
from energon_lite.flavors.episodes.transitions import TransitionBuilder
from energon_lite.stages.base import Stage


class EpochCursor(Stage):
    STATE_KEYS = ("epoch", "position")
    builder: TransitionBuilder
    first_epoch: int
    epoch: int
    mismatch_hint = "the state was saved with other settings"
    # uint8 frames even with normalize_images: the pipeline's collate converts them (collate.py)
    raw_images = False

    def _enter(self, epoch: int, position: int) -> None:
        raise NotImplementedError

    def _position(self) -> int:
        raise NotImplementedError

    def _positions_per_epoch(self) -> int:
        raise NotImplementedError

    def _save(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self._position()}

    def _reset(self) -> None:
        self._enter(self.first_epoch, 0)

    def _restore(self, state: dict[str, Any]) -> None:
        epoch, position = state["epoch"], state["position"]
        name = type(self).__name__
        if not isinstance(epoch, int) or not isinstance(position, int) or epoch < 0:
            raise StateError(f"{name}: bad state {epoch=} {position=}; it is corrupt")
        limit = self._positions_per_epoch()
        if not 0 <= position <= limit:
            raise StateError(
                f"{name}: {position=} outside this worker's {limit} positions per epoch; "
                + self.mismatch_hint
            )
        self._enter(epoch, position)

    def fetch(self, restore_key: Any) -> dict[str, Any]:
        return self.builder.fetch(restore_key)
