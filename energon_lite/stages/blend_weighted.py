"""``WeightedBlend``: one stream from several leaves' readers, drawn by weight.

Each ``next()`` draws a source with probability proportional to its weight: with
``stream="energon"`` (a metadataset's blend) as Energon's ``BlendDataset`` draws (one float32
draw of Energon's per-worker torch stream, :class:`~energon_lite.rng.TorchStreamRng`, over the
float32 cumulative weights; no draw with a single source), so that the same weights deliver
Energon's counts; otherwise, and for a state saved before the stream was recorded, one
``CounterRng`` draw keyed by (seed, "blend", global worker id). Sources repeat forever; a
source that ends anyway (no samples on this worker, ``repeat=False``) drops out and the
others keep their relative weights. The blend ends when every source has ended.

A weight may be a callable ``weight_at(step)`` (a schedule,
:mod:`energon_lite.metadataset.schedule`); ``step`` is the training step of the batch being
filled (:func:`energon_lite.stages.mix.loader_step`), so the weights are evaluated once per
batch. ``composition`` shapes each batch of ``batch_size`` samples:

* ``random``: every sample drawn by weight (as above);
* ``stratified``: each batch holds each source by largest remainder of its current share
  (:func:`~energon_lite.stages.mix.largest_remainder`), in an order drawn at random;
* ``per_source``: the whole batch from one source, drawn by weight once per batch.

``unit="tokens"``: instead of chance, the source whose delivered cost (reported by the
``Cost`` stage through the chain's context) lags its target share the most
(:func:`~energon_lite.stages.mix.deficit_choice`).

Restore keys pass through unchanged; ``fetch`` routes a key to the reader of its leaf.

State: the sources' states, the random counter and an exhausted flag per source, ``stream``
(``energon``; absent: the counter stream of older states); ``tally``
(per source: samples drawn, samples costed, their cost; what ``loader.stats()`` reports),
``base`` (steps delivered before an elastic restore; 0) and ``round`` (a stratified or
per-source batch in progress: its step and what it still draws) where used. The three are
optional: a state saved before them restores with zeros.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from energon_lite.errors import ConfigError, StateError
from energon_lite.rng import CounterRng, TorchStreamRng, energon_worker_seed
from energon_lite.stages.base import Stage
from energon_lite.stages.mix import (  # draw: imported from here by blend_epochized
    check_options,
    deficit_choice,
    draw,
    energon_draw,
    float32_cumsum,
    loader_step,
    plain_tally,
    plan_batch,
)
from energon_lite.stages.routing import by_leaf, fetch_by_leaf
from energon_lite.state.codec import state_count

if TYPE_CHECKING:
    from energon_lite.stages.elastic_deal import ElasticDeal


class WeightedBlend(Stage):
    STATE_KEYS = ("rng", "exhausted")
    OPTIONAL_KEYS = ("tally", "base", "round", "stream")  # absent in states saved before them
    STREAMS = ("counter", "energon")
    STATS_LABEL = "blend"
    sources: list[Stage]  # Readers, or chains a wrapper composes
    _exhausted: list[bool]
    _round_step: int | None  # the step of the composed batch being drawn (None: none yet)
    _order: list[int]  # the sources that batch still draws, last first
    _local: int | None  # the worker's batch index when the blend last looked
    _stream: str  # the stream this run draws from: a fresh run's, or its state's
    _rng: CounterRng | TorchStreamRng

    def __init__(
        self,
        sources: Sequence[Stage],
        weights: Sequence[float | Callable[[int], float]],
        seed: int,
        global_worker_id: int,
        *rng_keys: Any,  # more keys for the random stream (a BlendDataset inside another)
        composition: str = "random",
        batch_size: int | None = None,
        by_cost: bool = False,  # weight_unit: tokens (costs reported by the Cost stage)
        stream: str = "counter",
    ) -> None:
        if stream not in self.STREAMS:
            raise ConfigError(f"WeightedBlend: stream {stream!r} is not one of {self.STREAMS}")
        scheduled = any(callable(w) for w in weights)
        fixed = [0.0 if callable(w) else float(w) for w in weights]
        if not sources or len(weights) != len(sources) or not all(w >= 0 for w in fixed):
            raise ConfigError(
                f"WeightedBlend: need one weight >= 0 per source, got {list(weights)!r} for "
                f"{len(sources)} sources"
            )
        if not scheduled and sum(fixed) <= 0:
            raise ConfigError(f"WeightedBlend: weights {fixed} must have a positive sum")
        check_options(composition, batch_size, by_cost)
        self.sources = list(sources)
        self.weights = fixed  # a callable's entry is 0 here: see weights_at
        self.schedule = list(weights) if scheduled else None
        self.scheduled = scheduled
        self.composition = composition
        self.batch_size = batch_size
        self.by_cost = by_cost
        self.seed = seed
        self.global_worker_id = global_worker_id
        self.rng_keys = rng_keys
        self._by_leaf = by_leaf(self.sources)
        self._index_of = {
            leaf: i
            for leaf, src in self._by_leaf.items()
            for i, s in enumerate(self.sources)
            if s is src
        }
        self._simple = not scheduled and composition == "random" and not by_cost
        # a fresh run's stream: Energon's draws where it draws one source per sample by weight
        self.stream = stream if self._simple else "counter"
        self._cdf: dict[tuple[bool, ...], list[float]] = {}  # float32 cumulative live weights
        self._composed = composition != "random"
        self._step_cached: int | None = None
        self._live: list[float] = fixed

    @classmethod
    def elastic_state(cls, level: dict[str, Any], deal: ElasticDeal) -> dict[str, Any]:
        """Fresh draws over every source again (the readers deal the leftover work); the
        schedule continues at the step the old layout had delivered."""
        sources = len(level["sources"])
        out: dict[str, Any] = {"rng": 0, "exhausted": [False] * sources}
        if "base" in level or deal.delivered:
            out["base"] = deal.delivered
        if "stream" in level:  # the old run's stream goes on
            out["stream"] = level["stream"]
        return out

    @classmethod
    def mix_tally(cls, level: dict[str, Any]) -> tuple[list[list[float]], int] | None:
        """The saved tally (zeros in a state saved before it) and base, for loader.mix()."""
        sources = len(level.get("sources") or [])
        tally = level.get("tally", [[0, 0, 0.0] for _ in range(sources)])
        return plain_tally(tally, sources, "WeightedBlend"), cls.delivered_base(level)

    @classmethod
    def describe_level(cls, level: dict[str, Any]) -> list[str]:
        """The samples drawn per source (and their cost), the schedule's step offset."""
        if "tally" not in level:
            return []
        tally, base = cls.mix_tally(level) or ([], 0)
        line = "blend drew " + ", ".join(f"{int(t[0]):,}" for t in tally) + " samples per source"
        if any(t[1] for t in tally):
            line += " (cost " + ", ".join(f"{t[2]:,.0f}" for t in tally) + ")"
        return [line + (f"; the schedule continues {base:,} steps in" if base else "")]

    @classmethod
    def delivered_base(cls, level: dict[str, Any]) -> int:
        """The steps delivered before this layout started (an elastic restore's base)."""
        return state_count(level.get("base", 0), "WeightedBlend base")

    def weights_at(self, step: int) -> list[float]:
        """Every source's weight at ``step`` (exhausted ones included)."""
        if self.schedule is None:
            return list(self.weights)
        now = [float(w(step)) if callable(w) else float(w) for w in self.schedule]
        if not all(w >= 0 for w in now):
            raise ConfigError(f"WeightedBlend: weights {now} at step {step}; need >= 0")
        return now

    def next(self) -> Any:
        self._start_if_fresh()
        if self._simple:  # today's blend: one weighted draw per sample
            while True:
                live = [0.0 if gone else w for w, gone in zip(self.weights, self._exhausted)]
                if sum(live) <= 0:
                    raise StopIteration
                index = self._draw_simple(live)
                try:
                    item = self.sources[index].next()
                except StopIteration:
                    self._exhausted[index] = True
                    continue
                self._drawn[index] += 1
                return item
        if self.by_cost:
            self._take_costs()
        while True:
            if self._composed and self.context.index.batch == self._local and self._order:
                index = self._order.pop()  # the fast path: the batch planned at its start
                if self._exhausted[index]:
                    continue
            else:
                index = self._choose()
            try:
                item = self.sources[index].next()
            except StopIteration:
                self._exhausted[index] = True
                self._step_cached = None  # the live weights change
                continue
            self._drawn[index] += 1
            return item

    def _draw_simple(self, live: list[float]) -> int:
        if self._stream != "energon":
            return draw(self._rng, live)
        if len(live) == 1:  # Energon draws nothing for a single dataset
            return 0
        key = tuple(self._exhausted)
        cdf = self._cdf.get(key)
        if cdf is None:
            cdf = self._cdf[key] = float32_cumsum(live)
        return energon_draw(cast(TorchStreamRng, self._rng), cdf)

    def _choose(self) -> int:
        hook_index = self.context.index
        self._local = hook_index.batch
        step = loader_step(self._base, hook_index)
        if step != self._step_cached:
            self._new_step(step)
        if self.by_cost:
            tally = [[d, c, t] for d, c, t in zip(self._drawn, self._costed, self._cost)]
            return deficit_choice(self._live, tally)
        if self.composition == "random":
            return draw(self._rng, self._live)
        if self._round_step != step:
            self._round_step, self._order = step, self._plan_batch()
        while self._order:
            index = self._order.pop()
            if not self._exhausted[index]:
                return index
        self._order = self._plan_batch()  # a skipped sample or a source that ended: once more
        return self._order.pop()

    def _new_step(self, step: int) -> None:
        """The live weights at ``step`` (0 for an exhausted source), evaluated once per step."""
        now = self.weights_at(step)
        live = [0.0 if gone else w for w, gone in zip(now, self._exhausted)]
        if sum(live) <= 0:
            if all(self._exhausted):
                raise StopIteration
            raise ConfigError(
                f"WeightedBlend: every source that has samples left weighs 0 at step {step} "
                f"(weights {now}); give one of them a weight > 0 at that step"
            )
        self._live, self._step_cached = live, step

    def _plan_batch(self) -> list[int]:
        return plan_batch(self._rng, self.composition, self.batch_size or 1, self._live)

    def _take_costs(self) -> None:
        for leaf, cost in self.context.costs.take():
            index = self._index_of.get(leaf)
            if index is not None:
                self._costed[index] += 1
                self._cost[index] += cost

    def fetch(self, restore_key: Any) -> Any:
        return fetch_by_leaf("WeightedBlend", self._by_leaf, restore_key)

    def _reset(self) -> None:
        self._use_stream(self.stream)
        self._exhausted = [False] * len(self.sources)
        # per source: samples drawn, samples costed, their cost (the saved "tally")
        self._drawn = [0] * len(self.sources)
        self._costed = [0] * len(self.sources)
        self._cost = [0.0] * len(self.sources)
        self._base = 0
        self._round_step, self._order, self._local = None, [], None
        self._step_cached = None
        if self.by_cost:
            self.context.costs.take()  # reports of a stream that is gone

    def _save(self) -> dict[str, Any]:
        if self.by_cost:
            self._take_costs()  # costs of the items handed out so far belong to this state
        out: dict[str, Any] = {
            "rng": self._rng.counter,
            "exhausted": list(self._exhausted),
            "tally": [[d, c, t] for d, c, t in zip(self._drawn, self._costed, self._cost)],
        }
        if self._stream != "counter":  # a state without it draws from the counter stream
            out["stream"] = self._stream
        if self.scheduled or self._base:
            out["base"] = self._base
        if self._composed:  # at every step, so that the state keeps its shape
            out["round"] = [self._round_step or 0, list(self._order)]
        return out

    def _validate(self, state: dict[str, Any]) -> None:
        round_ = state.get("round")
        if round_ is not None and not (
            isinstance(round_, list)
            and len(round_) == 2
            and isinstance(round_[1], list)
            and all(isinstance(n, int) and n >= 0 for n in round_[1])
        ):
            raise StateError(f"WeightedBlend: round {round_!r} is not [step, sources]; corrupt")

    def _use_stream(self, stream: str) -> None:
        self._stream = stream
        if stream == "energon":
            self._rng = TorchStreamRng(energon_worker_seed(self.global_worker_id, self.seed))
        else:
            self._rng = CounterRng(self.seed, "blend", self.global_worker_id, *self.rng_keys)

    def _restore(self, state: dict[str, Any]) -> None:
        self._reset()
        stream = state.get("stream", "counter")
        if stream not in self.STREAMS or (stream == "energon" and not self._simple):
            raise StateError(
                f"WeightedBlend: stream {stream!r} is not one of {self.STREAMS} for this blend; "
                "the state is corrupt"
            )
        self._use_stream(stream)
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
        if "tally" in state:
            tally = plain_tally(state["tally"], len(self.sources), "WeightedBlend")
            self._drawn = [int(t[0]) for t in tally]
            self._costed = [int(t[1]) for t in tally]
            self._cost = [float(t[2]) for t in tally]
        self._base = self.delivered_base(state)
        round_ = state.get("round")
        if round_ is not None:
            if any(n >= len(self.sources) for n in round_[1]):
                raise StateError(f"WeightedBlend: round {round_!r} names a source it lacks")
            self._round_step = state_count(round_[0], "WeightedBlend round")
            self._order = [int(n) for n in round_[1]]
