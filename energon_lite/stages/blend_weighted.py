"""``WeightedBlend``: one stream from several leaves' readers, drawn by weight.

Each ``next()`` draws a source with probability proportional to its weight (one
``CounterRng`` draw keyed by (seed, "blend", global worker id)). Sources repeat forever; a
source that ends anyway (no samples on this worker, ``repeat=False``) drops out and the
others keep their relative weights. The blend ends when every source has ended.

Restore keys pass through unchanged; ``fetch`` routes a key to the reader of its leaf.

State: the sources' states, the random counter and an exhausted flag per source.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from energon_lite.errors import ConfigError, StateError
from energon_lite.rng import CounterRng
from energon_lite.stages.base import Stage
from energon_lite.stages.routing import by_leaf, fetch_by_leaf
from energon_lite.state.codec import state_count

if TYPE_CHECKING:
    from energon_lite.stages.elastic import ElasticDeal


def draw(rng: CounterRng, weights: Sequence[float]) -> int:
    """Index drawn with probability ``weights[i] / sum(weights)`` (one draw of ``rng``)."""
    target = rng.random() * sum(weights)
    for index, weight in enumerate(weights):
        if target < weight:
            return index
        target -= weight
    return max(i for i, w in enumerate(weights) if w > 0)  # float round-off at the top end


class WeightedBlend(Stage):
    STATE_KEYS = ("rng", "exhausted")
    STATS_LABEL = "blend"
    sources: list[Stage]  # Readers, or chains a wrapper composes
    _exhausted: list[bool]

    def __init__(
        self,
        sources: Sequence[Stage],
        weights: Sequence[float],
        seed: int,
        global_worker_id: int,
        *rng_keys: Any,  # more keys for the random stream (a BlendDataset inside another)
    ) -> None:
        weights = [float(w) for w in weights]
        if not sources or len(weights) != len(sources) or not all(w >= 0 for w in weights):
            raise ConfigError(
                f"WeightedBlend: need one weight >= 0 per source, got {weights=} for "
                f"{len(sources)} sources"
            )
        if sum(weights) <= 0:
            raise ConfigError(f"WeightedBlend: weights {weights} must have a positive sum")
        self.sources = list(sources)
        self.weights = weights
        self.seed = seed
        self.global_worker_id = global_worker_id
        self.rng_keys = rng_keys
        self._by_leaf = by_leaf(self.sources)

    @classmethod
    def elastic_state(cls, level: dict[str, Any], deal: ElasticDeal) -> dict[str, Any]:
        """Fresh draws over every source again (the readers deal the leftover work)."""
        return {"rng": 0, "exhausted": [False] * len(level["sources"])}

    def next(self) -> Any:
        self._start_if_fresh()
        while True:
            live = [0.0 if gone else w for w, gone in zip(self.weights, self._exhausted)]
            if sum(live) <= 0:
                raise StopIteration
            index = draw(self._rng, live)
            try:
                return self.sources[index].next()
            except StopIteration:
                self._exhausted[index] = True

    def fetch(self, restore_key: Any) -> Any:
        return fetch_by_leaf("WeightedBlend", self._by_leaf, restore_key)

    def _reset(self) -> None:
        self._rng = CounterRng(self.seed, "blend", self.global_worker_id, *self.rng_keys)
        self._exhausted = [False] * len(self.sources)

    def _save(self) -> dict[str, Any]:
        return {"rng": self._rng.counter, "exhausted": list(self._exhausted)}

    def _restore(self, state: dict[str, Any]) -> None:
        self._reset()
        self._rng.counter = state_count(state["rng"], "WeightedBlend rng")
        exhausted = state["exhausted"]
        if not isinstance(exhausted, list) or len(exhausted) != len(self.sources):
            raise StateError(
                f"WeightedBlend: exhausted flags {exhausted!r} do not match the "
                f"{len(self.sources)} sources; the state is corrupt"
            )
        if not all(isinstance(flag, bool) for flag in exhausted):
            raise StateError(f"WeightedBlend: exhausted flags {exhausted!r} must be booleans")
        self._exhausted = list(exhausted)
