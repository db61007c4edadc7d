"""``EpochizedBlend``: exact per-epoch quotas of several leaves (``blend_epochized``).

A leaf with repetitions ``r`` is read in ``P = ceil(r)`` *passes* per blend epoch ``E``;
pass ``k`` runs the leaf's Reader for its reader epoch ``E * P + k`` (consecutive, so
``shuffle_over_epochs_multiplier`` cycles and per-epoch slice orders stay intact). How many
samples this worker emits per pass is :func:`energon_lite.quotas.pass_quotas`: whole passes
in full, the fraction ``f`` of the last pass rounded down per worker as Energon does
(``floor(f * n)`` of the worker's ``n`` samples; ``rounding: per_worker``), or, for a state
saved before the rounding was recorded, split exactly over all global workers so that an
epoch holds exactly ``floor(r) * N + floor(f * N)`` samples of each leaf across all ranks
and workers (``rounding`` absent: ``exact``). Within the worker, the next leaf is drawn with
probability proportional to its remaining quota, which spreads every leaf over the epoch.
After the quotas the blend ends (``repeat=False``) or starts epoch ``E + 1``.

State: the sources' states, the random counter, the epoch, ``[pass, taken]`` per leaf, a
done flag and the ``rounding`` (absent in older states: ``exact``): O(leaves) integers. The epoch plan is recomputed on restore (one vectorised walk
over each leaf's slice list). After an elastic restore the state also carries ``left``: per
leaf, the samples its reader's leftover delivers (the old layout's remaining quota); that
epoch's plan is just those counts, then the next epoch is planned over the new layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from energon_lite.errors import ConfigError, StateError
from energon_lite.quotas import EXACT, PER_WORKER, ROUNDINGS, exact_repetitions, pass_quotas, passes
from energon_lite.rng import CounterRng
from energon_lite.stages.base import Stage
from energon_lite.stages.blend_weighted import draw
from energon_lite.stages.reader import Reader
from energon_lite.stages.routing import fetch_by_leaf
from energon_lite.state.codec import state_count

if TYPE_CHECKING:
    from energon_lite.stages.elastic_deal import ElasticDeal


class EpochizedBlend(Stage):
    STATE_KEYS = ("rng", "epoch", "passes", "done")
    # left: True (count on restore) or per-leaf leftover counts; rounding: how the fraction
    # of a last pass is rounded (energon_lite.quotas), absent in states saved before it
    OPTIONAL_KEYS = ("left", "rounding")
    STATS_LABEL = "blend"
    sources: list[Reader]  # built with repeat=False: this stage moves them through epochs
    _plan: list[list[int]]  # samples this worker emits per pass of each leaf, this epoch
    _passes: list[list[int]]  # [pass, taken in that pass] per leaf
    _done: bool
    _epoch: int
    _left: list[int] | None  # per-leaf leftover counts of an elastic restore
    _rounding: str  # this run's rounding of fractions: a fresh run's, or its state's

    def __init__(
        self,
        sources: Sequence[Reader],
        repetitions: Sequence[float],
        seed: int,
        global_worker_id: int,
        *,
        repeat: bool = True,
        rounding: str = PER_WORKER,
    ) -> None:
        if rounding not in ROUNDINGS:
            raise ConfigError(f"EpochizedBlend: rounding {rounding!r} is not one of {ROUNDINGS}")
        if any(callable(r) for r in repetitions):
            raise ConfigError(
                "blend_epochized cannot follow a weight schedule: its repetitions are exact "
                "quotas per epoch; use a weighted blend (blend:) for weights that change"
            )
        if not sources or len(repetitions) != len(sources) or not all(r >= 0 for r in repetitions):
            raise ConfigError(
                f"EpochizedBlend: need one repetitions >= 0 per source, got {list(repetitions)} "
                f"for {len(sources)} sources"
            )
        self.sources = list(sources)
        self.repetitions = [exact_repetitions(r) for r in repetitions]
        self.seed = seed
        self.global_worker_id = global_worker_id
        self.repeat = repeat
        self.rounding = rounding  # a fresh run's; a restored state keeps its own
        self._by_leaf = {source.leaf_id: source for source in self.sources}

    @classmethod
    def elastic_state(cls, level: dict[str, Any], deal: ElasticDeal) -> dict[str, Any]:
        """The blend epoch after the old workers' latest, its passes still to start; ``left``:
        count the readers' leftover work on restore (it belongs to the earlier passes)."""
        passes_ = [[0, 0] for _ in level["sources"]]
        out = {"rng": 0, "epoch": deal.blend_epoch, "passes": passes_, "done": False, "left": True}
        if "rounding" in level:  # the old run's rounding goes on
            out["rounding"] = level["rounding"]
        return out

    def next(self) -> Any:
        self._start_if_fresh()
        while True:
            if self._done:
                raise StopIteration
            remaining = [self._remaining(i) for i in range(len(self.sources))]
            if sum(remaining) == 0 and self._left is not None:  # the leftover epoch is over
                self._left = None
                if not self.repeat:
                    self._done = True
                    raise StopIteration
                self._begin_epoch(self._epoch + 1)
                continue
            if sum(remaining) == 0:
                # a worker without any sample of this epoch must not spin through epochs
                if not self.repeat or not any(sum(plan) for plan in self._plan):
                    self._done = True
                    raise StopIteration
                self._begin_epoch(self._epoch + 1)
                continue
            index = draw(self._rng, remaining)
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

    def fetch(self, restore_key: Any) -> Any:
        return fetch_by_leaf("EpochizedBlend", self._by_leaf, restore_key)

    # the epoch plan -----------------------------------------------------------------------

    def _remaining(self, index: int) -> int:
        number, taken = self._passes[index]
        return sum(self._plan[index][number:]) - taken

    def _advance(self, index: int) -> None:
        """Move to the next pass when this one is complete, restarting the reader there."""
        entry, plan = self._passes[index], self._plan[index]
        while entry[0] < len(plan) and entry[1] >= plan[entry[0]]:
            entry[0], entry[1] = entry[0] + 1, 0
            if entry[0] < len(plan):
                self.sources[index].restart(self._reader_epoch(index, entry[0]))

    def _reader_epoch(self, index: int, number: int) -> int:
        return self._epoch * passes(self.repetitions[index]) + number

    def _begin_epoch(self, epoch: int) -> None:
        self._epoch = epoch
        self._passes = [[0, 0] for _ in self.sources]
        self._make_plan()
        for index, plan in enumerate(self._plan):
            if plan:
                self.sources[index].restart(self._reader_epoch(index, 0))
            self._advance(index)  # skips passes of length 0

    def _make_plan(self) -> None:
        self._plan = []
        for index, (reader, reps) in enumerate(zip(self.sources, self.repetitions)):

            def counts(number: int, index: int = index, reader: Reader = reader) -> Sequence[int]:
                return reader.samples_per_worker(self._reader_epoch(index, number)).tolist()

            self._plan.append(
                pass_quotas(reps, counts, reader.worker_index, self._epoch, self._rounding)
            )

    # state ------------------------------------------------------------------------------------

    def _reset(self) -> None:
        self._rng = CounterRng(self.seed, "blend", self.global_worker_id)
        self._done = False
        self._left = None
        self._rounding = self.rounding
        self._begin_epoch(self.sources[0].start_epoch)

    def _save(self) -> dict[str, Any]:
        state = {
            "rng": self._rng.counter,
            "epoch": self._epoch,
            "passes": [list(p) for p in self._passes],
            "done": self._done,
        }
        if self._left is not None:
            state["left"] = list(self._left)
        if self._rounding != EXACT:  # a state without it rounds as before it was recorded
            state["rounding"] = self._rounding
        return state

    def _restore(self, state: dict[str, Any]) -> None:
        self._rng = CounterRng(self.seed, "blend", self.global_worker_id)
        self._rng.counter = state_count(state["rng"], "EpochizedBlend rng")
        self._epoch = state_count(state["epoch"], "EpochizedBlend epoch")
        self._done = bool(state["done"])
        rounding = state.get("rounding", EXACT)
        if rounding not in ROUNDINGS:
            raise StateError(
                f"EpochizedBlend: rounding {rounding!r} is not one of {ROUNDINGS}; the state is "
                "corrupt"
            )
        self._rounding = rounding
        saved = state["passes"]
        if not isinstance(saved, list) or len(saved) != len(self.sources):
            raise StateError(
                f"EpochizedBlend: {len(self.sources)} [pass, taken] pairs expected, got {saved!r}"
            )
        left = state.get("left")
        self._left = None
        if left is True:  # the readers (restored first) know their leftovers
            left = [source.left_total() for source in self.sources]
        if left is not None:
            if not isinstance(left, list) or len(left) != len(self.sources):
                raise StateError(f"EpochizedBlend: leftover counts {left!r}; the state is corrupt")
            self._left = [state_count(n, "EpochizedBlend leftover") for n in left]
            self._plan = [[n] for n in self._left]
        else:
            self._make_plan()
        self._passes = []
        for index, entry in enumerate(saved):
            if not isinstance(entry, list) or len(entry) != 2:
                raise StateError(f"EpochizedBlend: {entry!r} is not [pass, taken]; it is corrupt")
            number, taken = (state_count(x, "EpochizedBlend pass") for x in entry)
            plan = self._plan[index]
            if number > len(plan) or (number < len(plan) and taken > plan[number]):
                raise StateError(
                    f"EpochizedBlend: leaf {index} at pass {number}, {taken} taken, outside its "
                    f"plan {plan} for epoch {self._epoch}; the state is corrupt"
                )
            self._passes.append([number, taken])
