"""Where a rank's loader stands: the position a saved rank state records.

The loader holds one :class:`Position` and changes it only through its methods: a batch
received (:meth:`Position.received`), the end of an epoch (:meth:`Position.epoch_ended`),
a batch handed out in the pass. A restore (:mod:`energon_lite.resume.restore`) hands the
loader a new one, checked; :meth:`Position.rank_state` is what ``save_state_rank()`` saves.
"""

from __future__ import annotations

from typing import Any

from energon_lite.resume.rank_state import RankState
from energon_lite.resume.sent_state import SentStates


class Position:
    """Per worker the state of the last batch the trainer received (None before its first),
    the worker polled next, the pass (epoch) and the batches handed out in it. The workers'
    states are kept as they were sent and decoded when :attr:`workers` is read
    (:mod:`energon_lite.resume.sent_state`)."""

    def __init__(
        self, workers: list[Any], next_worker: int = 0, epoch: int = 0, in_pass: int = 0
    ) -> None:
        self._sent = SentStates(workers)
        self.next_worker = next_worker
        self.epoch = epoch
        self.in_pass = in_pass

    def __repr__(self) -> str:
        return (
            f"Position(workers={self.workers!r}, next_worker={self.next_worker}, "
            f"epoch={self.epoch}, in_pass={self.in_pass})"
        )

    @property
    def workers(self) -> list[Any]:
        """Per worker the whole state of the last batch received (decoded now if needed)."""
        return self._sent.states()

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
        (:mod:`energon_lite.resume.sent_state`): the next batch is the next worker's."""
        self._sent.received(worker, state)
        self.next_worker = (worker + 1) % len(self._sent)

    def epoch_ended(self) -> None:
        """Every worker ran out of its epoch: the next pass starts the next epoch."""
        self._sent = SentStates([None] * len(self._sent))
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
