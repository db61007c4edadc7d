"""``Cost``: reports what each encoded sample costs to the blend above it.

Sits right after ``Encode`` when a blend weighs ``tokens``: calls
``TaskEncoder.sample_cost(sample)`` on each item and reports ``(leaf, cost)`` to the blend
through the chain's context (``ChainContext.costs``); the item passes through unchanged. ``fetch``
(a buffer refetching its samples after a restore) reports nothing: those samples' costs are
in the blend's saved tally already.

State: none (the blend's tally holds the costs).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from energon_lite.errors import ConfigError, short_repr
from energon_lite.stages.base import Stage
from energon_lite.stages.routing import leaf_of
from energon_lite.state.restore_key import RestoreKey


class Cost(Stage):
    STATS_LABEL = "cost"
    MIX_COSTS = True
    source: Stage  # always set: this stage has one parent

    def __init__(
        self,
        source: Stage,
        cost: Callable[[Any], float],
        names: Sequence[str] = (),
        leaf_base: int = 0,
    ) -> None:
        self.source = source
        self.cost = cost
        self.names = list(names)  # the blend's entries (dataset paths), by leaf - leaf_base
        self.leaf_base = leaf_base

    def next(self) -> Any:
        self._start_if_fresh()
        item = self.source.next()
        leaf = leaf_of(self.source.key_of(item))  # a plain dict's key is known beside it
        cost = self.cost(item)
        if (
            isinstance(cost, bool)
            or not isinstance(cost, (int, float))
            or not math.isfinite(cost)
            or not cost > 0
        ):
            # a cost of 0 or inf never moves the source's tally, so the deficit rule would
            # draw it (or never draw it) for ever: the other sources starve
            raise ConfigError(
                f"sample_cost gave {short_repr(cost)} for a sample of {self._entry(leaf)} "
                "(weight_unit: tokens); it must return a finite number > 0"
            )
        if leaf is not None:
            self.context.costs.add(leaf, float(cost))
        return item

    def key_of(self, item: Any) -> RestoreKey | None:
        return self.source.key_of(item)  # items pass through unchanged

    def _entry(self, leaf: int | None) -> str:
        """The blend entry a leaf id stands for, as the metadataset names it."""
        index = None if leaf is None else leaf - self.leaf_base
        if index is not None and 0 <= index < len(self.names):
            return f"blend entry {index} ({self.names[index]})"
        return f"leaf {leaf}"
