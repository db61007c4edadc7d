"""``Blend``: one stream from the readers of several leaf datasets (one worker's share of each).

Three modes, one class (the pipeline builds them with the class methods):

* ``Blend.weighted``: each ``next()`` draws a source with probability proportional to its
  weight (one ``CounterRng`` draw, keyed by (seed, "blend", global worker id)). Sources
  repeat forever; a source that ends anyway (no samples on this worker, ``repeat=False``)
  drops out and the others keep their relative weights. Ends when every source ended.
* ``Blend.epochized``: exact per-epoch quotas. A leaf with repetitions ``r`` is read in
  ``P = ceil(r)`` *passes* per blend epoch ``E``; pass ``k`` runs the leaf's Reader for its
  reader epoch ``E * P + k`` (consecutive, so ``shuffle_over_epochs_multiplier`` cycles and
  per-epoch slice orders stay intact). The first ``floor(r)`` passes are whole: the worker
  emits all ``n_w`` samples its Reader owns in that reader epoch. If ``r`` has a fraction
  ``f``, the last pass is cut short after ``q_w`` samples, where the ``q_w`` of all global
  workers are allocated by largest remainder from every worker's ``f * n_w`` so that they
  sum to exactly ``floor(f * N)`` (``N`` = the leaf's samples in that reader epoch, all
  workers). Every worker computes every worker's ``n_w`` itself: slice ownership is a pure
  function of (seed, epoch, worker), so no communication is needed. Across all ranks and
  workers an epoch therefore holds exactly ``floor(r) * N + floor(f * N)`` samples of each
  leaf (``2 x 60 + 0.5 x 20 = 130``). Within the worker, the next leaf is drawn with
  probability proportional to its remaining quota, which spreads every leaf over the epoch.
  After the quotas the blend ends (``repeat=False``) or starts epoch ``E + 1``.
* ``Blend.concat``: the sources one after the other, in order (val/test).

Restore keys pass through unchanged; ``fetch`` sends a key to the source whose ``leaf_id``
is ``restore_key[1]``.

State: the sources' states (under ``"sources"``), plus a random counter and exhausted flags
(weighted), the epoch, ``[pass, taken]`` per leaf and a done flag (epochized), or the
current source (concat): O(number of leaves) integers. The epoch plan is recomputed on
restore, which costs one walk over each fractional leaf's slice list (O(slices)).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from energon_lite.errors import ConfigError, StateError
from energon_lite.rng import CounterRng
from energon_lite.stage import Stage

_MODES = ("weighted", "epochized", "concat")


class Blend(Stage):
    """Weighted, epochized or concatenated blend of several sources (see the module docstring)."""

    _done: bool

    def __init__(
        self,
        sources: Sequence[Stage],
        mode: str,
        *,
        factors: Sequence[float] | None = None,
        seed: int = 0,
        global_worker_id: int = 0,
        repeat: bool = True,
    ) -> None:
        if mode not in _MODES:
            raise ConfigError(f"Blend: {mode=} is not one of {_MODES}")
        if not sources:
            raise ConfigError("Blend needs at least one source")
        factors = [1.0] * len(sources) if factors is None else [float(f) for f in factors]
        if len(factors) != len(sources) or any(not f >= 0 for f in factors):
            raise ConfigError(
                f"Blend: need one weight/repetitions >= 0 per source, got {factors=} "
                f"for {len(sources)} sources"
            )
        if mode == "weighted" and sum(factors) <= 0:
            raise ConfigError(f"Blend: weights {factors=} must have a positive sum")
        self.sources: list[Any] = list(sources)  # Readers in epochized mode
        self.mode = mode
        self.factors = factors
        self.seed = seed
        self.global_worker_id = global_worker_id
        self.repeat = repeat
        self._by_leaf = {getattr(s, "leaf_id", i): s for i, s in enumerate(self.sources)}
        # exact fractions: 0.1 x 30 must give 3 samples, not 2
        self._reps = [Fraction(f).limit_denominator(10**6) for f in factors]
        self.restore_state(None)

    @classmethod
    def weighted(
        cls, sources: Sequence[Stage], weights: Sequence[float], seed: int, global_worker_id: int
    ) -> Blend:
        return cls(
            sources, "weighted", factors=weights, seed=seed, global_worker_id=global_worker_id
        )

    @classmethod
    def epochized(
        cls,
        sources: Sequence[Any],
        repetitions: Sequence[float],
        seed: int,
        global_worker_id: int,
        *,
        repeat: bool = True,
    ) -> Blend:
        """``sources`` must be ``Reader``s built with ``repeat=False``."""
        return cls(
            sources,
            "epochized",
            factors=repetitions,
            seed=seed,
            global_worker_id=global_worker_id,
            repeat=repeat,
        )

    @classmethod
    def concat(cls, sources: Sequence[Stage]) -> Blend:
        return cls(sources, "concat")

    # iteration --------------------------------------------------------------------------

    def next(self) -> Any:
        if self.mode == "weighted":
            return self._next_weighted()
        if self.mode == "epochized":
            return self._next_epochized()
        while self._current < len(self.sources):
            try:
                return self.sources[self._current].next()
            except StopIteration:
                self._current += 1
        raise StopIteration

    def _draw(self, weights: Sequence[float]) -> int:
        target = self._rng.random() * sum(weights)
        for index, weight in enumerate(weights):
            if target < weight:
                return index
            target -= weight
        return max(i for i, w in enumerate(weights) if w > 0)  # float round-off at the top end

    def _next_weighted(self) -> Any:
        while True:
            live = [0.0 if gone else w for w, gone in zip(self.factors, self._exhausted)]
            if sum(live) <= 0:
                raise StopIteration
            index = self._draw(live)
            try:
                return self.sources[index].next()
            except StopIteration:
                self._exhausted[index] = True

    def _next_epochized(self) -> Any:
        while True:
            if self._done:
                raise StopIteration
            remaining = [self._remaining(i) for i in range(len(self.sources))]
            if sum(remaining) == 0:
                # a worker without any sample of this epoch must not spin through epochs
                if not self.repeat or not any(sum(plan) for plan in self._plan):
                    self._done = True
                    raise StopIteration
                self._begin_epoch(self._epoch + 1)
                continue
            index = self._draw(remaining)
            entry = self._passes[index]
            try:
                sample = self.sources[index].next()
            except StopIteration:  # the reader owned fewer samples than planned: skip the rest
                entry[1] = self._plan[index][entry[0]]
                self._advance(index)
                continue
            entry[1] += 1
            self._advance(index)
            return sample

    # epochized bookkeeping ------------------------------------------------------------------

    def _remaining(self, index: int) -> int:
        number, taken = self._passes[index]
        return sum(self._plan[index][number:]) - taken

    def _advance(self, index: int) -> None:
        """Move to the next pass when this one is complete, restarting the reader there."""
        entry, plan = self._passes[index], self._plan[index]
        while entry[0] < len(plan) and entry[1] >= plan[entry[0]]:
            entry[0], entry[1] = entry[0] + 1, 0
            if entry[0] < len(plan):
                self._start_pass(index, entry[0])

    def _reader_epoch(self, index: int, number: int) -> int:
        return self._epoch * max(1, math.ceil(self._reps[index])) + number

    def _start_pass(self, index: int, number: int) -> None:
        self.sources[index].restart(self._reader_epoch(index, number))

    def _begin_epoch(self, epoch: int) -> None:
        self._epoch = epoch
        self._passes = [[0, 0] for _ in self.sources]
        self._make_plan()
        for index, plan in enumerate(self._plan):
            if plan:
                self._start_pass(index, 0)
            self._advance(index)  # skips passes of length 0

    def _make_plan(self) -> None:
        """Samples this worker emits per pass of each leaf in the current epoch."""
        self._plan = []
        for index, reps in enumerate(self._reps):
            whole, fraction = math.floor(reps), reps - math.floor(reps)
            plan = [
                self._worker_counts(index, self._reader_epoch(index, k), mine_only=True)[0]
                for k in range(whole)
            ]
            if fraction:
                counts = self._worker_counts(index, self._reader_epoch(index, whole))
                plan.append(_largest_remainder(counts, fraction, self._epoch)[self._worker()])
            self._plan.append(plan)

    def _worker(self) -> int:
        return self.sources[0].worker_index

    def _worker_counts(self, index: int, epoch: int, mine_only: bool = False) -> list[int]:
        """Samples each global worker's reader owns in ``epoch`` (``[own]`` with mine_only)."""
        reader = self.sources[index]
        counts = reader.samples_per_worker(epoch).tolist()
        return [counts[reader.worker_index]] if mine_only else counts

    # the stage contract -----------------------------------------------------------------

    def fetch(self, restore_key: Any) -> Any:
        leaf = restore_key[1] if isinstance(restore_key, (tuple, list)) and restore_key else None
        source = self._by_leaf.get(leaf)
        if source is None:
            raise StateError(
                f"Blend: restore key {restore_key!r} names leaf {leaf!r}; "
                f"this blend has leaves {sorted(self._by_leaf)}"
            )
        return source.fetch(restore_key)

    def save_state(self) -> dict[str, Any]:
        fields: dict[str, Any] = {"mode": self.mode}
        if self.mode == "weighted":
            fields.update(rng=self._rng.counter, exhausted=list(self._exhausted))
        elif self.mode == "epochized":
            fields.update(
                rng=self._rng.counter,
                epoch=self._epoch,
                passes=[list(p) for p in self._passes],
                done=self._done,
            )
        else:
            fields.update(current=self._current)
        return self._state(**fields, sources=[s.save_state() for s in self.sources])

    def restore_state(self, state: dict[str, Any] | None) -> None:
        self._rng = CounterRng(self.seed, "blend", self.global_worker_id)
        if state is None:
            for source in self.sources:
                source.restore_state(None)
            self._exhausted = [False] * len(self.sources)
            self._current, self._done = 0, False
            if self.mode == "epochized":
                self._begin_epoch(int(getattr(self.sources[0], "start_epoch", 0)))
            return
        state = self._check_state(state, "mode", "sources")
        sources = state["sources"]
        if state["mode"] != self.mode or not isinstance(sources, list):
            raise StateError(
                f"Blend: state of a {state['mode']!r} blend, this one is {self.mode!r}"
            )
        if len(sources) != len(self.sources):
            raise StateError(
                f"Blend: state has {len(sources)} sources, this blend {len(self.sources)}; "
                "was it saved with another metadataset?"
            )
        for source, source_state in zip(self.sources, sources):
            source.restore_state(source_state)
        try:
            if self.mode == "concat":
                self._current = int(state["current"])
                return
            self._rng.counter = int(state["rng"])
            if self.mode == "weighted":
                self._exhausted = [bool(x) for x in state["exhausted"]]
                return
            self._epoch, self._done = int(state["epoch"]), bool(state["done"])
            self._passes = [[int(p), int(t)] for p, t in state["passes"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"Blend: corrupt {self.mode} state: {exc!r}") from None
        if len(self._passes) != len(self.sources) or len(self._exhausted) != len(self.sources):
            raise StateError("Blend: per-source lists in the state do not match the sources")
        self._make_plan()


def _largest_remainder(counts: Sequence[int], fraction: Fraction, epoch: int) -> list[int]:
    """Split ``floor(fraction * sum(counts))`` over workers, each near ``fraction * count``.

    Each worker gets ``floor(fraction * n)`` and the leftover units (fewer than the number of
    workers) go to the largest remainders; ties rotate with the epoch so that no worker
    always takes the extra sample.
    """
    exact = [fraction * n for n in counts]
    shares = [math.floor(x) for x in exact]
    extra = math.floor(fraction * sum(counts)) - sum(shares)
    workers = len(counts)
    order = sorted(range(workers), key=lambda w: (-(exact[w] - shares[w]), (w - epoch) % workers))
    for worker in order[:extra]:
        shares[worker] += 1
    return shares
