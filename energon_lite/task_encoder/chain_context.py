"""``ChainContext``: what the stages of one worker chain share, and what its hooks read.

Made once per chain, when the chain is built (``Node.build``), and given to every stage of
it (``Stage.bind``), as Grain hands an ``IteratorContext`` along its iterators. A stage
writes and reads only its own chain's context, so two chains in one process (two loaders
without worker processes, iterated in turn) never see each other's numbers:

* ``index``: the batch and sample indices Energon's ``TaskEncoder.current_batch_index`` /
  ``current_sample_index`` read (:class:`~energon_lite.task_encoder.hook_index.HookIndex`):
  set by the batching stage and ``Encode``, read by the hooks and by a weighted blend that
  follows a schedule of the step or composes batches;
* ``costs``: the sample costs the ``Cost`` stage (after ``Encode``) reports to the weighted
  blend below it (``weight_unit: tokens``).

A user's hook takes no context argument (Energon's indices are properties of the task
encoder, read also inside a plain function given to a wrapper), so whoever drives a chain
(the loader, ``restore_sample``, iterating a chain) makes its context the *running* one
while the chain works (:meth:`ChainContext.running`); :func:`running_context` is what the
task encoder's properties read. Outside every chain there is none, and the indices are
refused as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from energon_lite.task_encoder.hook_index import HookIndex


class CostLedger:
    """Costs reported downstream, per leaf, until the blend takes them."""

    __slots__ = ("reports",)

    def __init__(self) -> None:
        self.reports: list[tuple[int, float]] = []

    def add(self, leaf: int, cost: float) -> None:
        self.reports.append((leaf, cost))

    def take(self) -> list[tuple[int, float]]:
        out, self.reports = self.reports, []
        return out


class ChainContext:
    """One chain's shared values (see the module docstring)."""

    __slots__ = ("costs", "index")

    def __init__(self) -> None:
        self.index = HookIndex()
        self.costs = CostLedger()

    @contextmanager
    def running(self) -> Iterator[ChainContext]:
        """This chain is the one working now: its hooks read this context."""
        token = _RUNNING.set(self)
        try:
            yield self
        finally:
            _RUNNING.reset(token)


# which chain's hooks run now, per thread (a ContextVar): set only while a chain works
_RUNNING: ContextVar[ChainContext | None] = ContextVar("energon_lite_chain", default=None)


def running_context() -> ChainContext | None:
    """The context of the chain working now; None outside every chain."""
    return _RUNNING.get()
