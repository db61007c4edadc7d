"""``Cost``: reports what each encoded sample costs to the blend above it.

Sits right after ``Encode`` when a blend weighs ``tokens``: calls
``TaskEncoder.sample_cost(sample)`` on each item and reports ``(leaf, cost)`` to the blend
through the chain's context (``ChainContext.costs``); the item passes through unchanged. ``fetch``
(a buffer refetching its samples after a restore) reports nothing: those samples' costs are
in the blend's saved tally already.

State: none (the blend's tally holds the costs).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from energon_lite.errors import ConfigError, short_repr
from energon_lite.stages.base import Stage
from energon_lite.stages.routing import leaf_of


class Cost(Stage):
    STATS_LABEL = "cost"
    MIX_COSTS = True
    source: Stage  # always set: this stage has one parent

    def __init__(self, source: Stage, cost: Callable[[Any], float]) -> None:
        self.source = source
        self.cost = cost

    def next(self) -> Any:
        self._start_if_fresh()
        item = self.source.next()
        leaf = leaf_of(
            item.get("__restore_key__")
            if isinstance(item, dict)
            else getattr(item, "__restore_key__", None)
        )
        cost = self.cost(item)
        if isinstance(cost, bool) or not isinstance(cost, (int, float)) or not cost >= 0:
            raise ConfigError(
                f"sample_cost gave {short_repr(cost)} for a sample of leaf {leaf}; it must "
                "return a number >= 0"
            )
        if leaf is not None:
            self.context.costs.add(leaf, float(cost))
        return item
