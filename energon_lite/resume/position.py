"""Where a rank's loader stands: the position a saved rank state records.

The loader holds one :class:`Position` and changes it only through its methods: a batch
received (:meth:`Position.received`), the end of an epoch (:meth:`Position.epoch_ended`),
a batch handed out in the pass. A restore (:mod:`energon_lite.resume.restore`) hands the
loader a new one, checked; :meth:`Position.rank_state` is what ``save_state_rank()`` saves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from energon_lite.resume.rank_state import RankState
from energon_lite.resume.state_delta import with_unchanged


@dataclass
class Position:
    """Per worker the state of the last batch the trainer received (None before its first),
    the worker polled next, the pass (epoch) and the batches handed out in it."""

    workers: list[Any]
    next_worker: int = 0
    epoch: int = 0
    in_pass: int = 0

    @classmethod
    def start(cls, workers_per_rank: int) -> Position:
        """The start of the first pass."""
        return cls([None] * workers_per_rank)

    @classmethod
    def of(cls, state: RankState) -> Position:
        """The position a checked rank state records."""
        return cls(list(state.workers), state.next_worker, state.epoch, state.in_pass)

    def received(self, worker: int, state: Any) -> None:
        """The trainer got a batch of logical ``worker`` with the state it sent
        (:mod:`energon_lite.resume.state_delta`): the next batch is the next worker's."""
        self.workers[worker] = with_unchanged(self.workers[worker], state)
        self.next_worker = (worker + 1) % len(self.workers)

    def epoch_ended(self) -> None:
        """Every worker ran out of its epoch: the next pass starts the next epoch."""
        self.workers = [None] * len(self.workers)
        self.next_worker = 0
        self.epoch += 1

    def rank_state(
        self, config: dict[str, Any], paths: list[str] | None = None, in_pass: int | None = None
    ) -> RankState:
        """This position as a rank state of a loader of ``config`` (``in_pass`` given: as
        though that many batches were handed out in the pass)."""
        return RankState(
            config=config,
            epoch=self.epoch,
            next_worker=self.next_worker,
            workers=list(self.workers),
            in_pass=self.in_pass if in_pass is None else in_pass,
            paths=paths,
        )
