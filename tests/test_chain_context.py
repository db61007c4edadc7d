"""A chain's context (``task_encoder/chain_context.py``): each chain's stages share their own
indices and costs, so two chains never see each other's, and a chain's context is the running
one (what hooks read) only while it works. (Two loaders in one process:
``tests/test_hook_index.py``.)"""

from __future__ import annotations

import itertools
from typing import Any

from energon_lite.stages.base import Stage
from energon_lite.task_encoder.chain_context import ChainContext, running_context


class _Count(Stage):
    """A source of 1, 2, 3 ... with its chain's batch index, and whether its chain is the
    running one (what a hook would read)."""

    def __init__(self) -> None:
        self.n = 0

    def next(self) -> Any:
        self._start_if_fresh()
        self.n += 1
        return (self.n, self.context.index.batch, running_context() is self.context)


class _Top(Stage):
    def __init__(self, source: Stage, batch: int) -> None:
        self.source, self.batch = source, batch

    def next(self) -> Any:
        self._start_if_fresh()
        self.context.index.batch = self.batch
        return self.source.next()


def test_a_chain_shares_one_context_and_two_chains_two() -> None:
    """Stages composed by hand share the context their top makes; a chain bound to a
    context is running (for its hooks) only while it is iterated."""
    a, b = _Top(_Count(), 5), _Top(_Count(), 9)
    assert [a.next(), b.next(), a.next()] == [(1, 5, False), (1, 9, False), (2, 5, False)]
    assert a.context is a.source.context and a.context is not b.context
    context = ChainContext()
    a.bind(context)
    assert a.source.context is context
    assert list(itertools.islice(a, 2)) == [(3, 5, True), (4, 5, True)]  # iterated: running
    assert running_context() is None  # and only while it works
