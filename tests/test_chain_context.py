"""A chain's context (``task_encoder/chain_context.py``): each chain's stages share their own
indices and costs, so two chains in one process never see each other's, and a hook called
outside every chain sees none."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from energon_lite import (
    CaptioningSample,
    ConfigError,
    TaskEncoder,
    WorkerConfig,
    get_savable_loader,
    get_train_dataset,
)
from energon_lite.stages.base import Stage
from energon_lite.task_encoder.chain_context import ChainContext, running_context


@dataclass
class _Indexed(CaptioningSample):
    batch_index: int
    sample_index: int


class _Indexing(TaskEncoder):
    def encode_sample(self, sample: CaptioningSample) -> _Indexed:
        return _Indexed.extend(
            sample, batch_index=self.current_batch_index, sample_index=self.current_sample_index
        )


class _TwoFromStart(TaskEncoder):
    """A generator hook that reads the batch index once, at its start."""

    def encode_sample(self, sample: CaptioningSample) -> Iterator[_Indexed]:
        batch = self.current_batch_index
        for _ in range(2):
            yield _Indexed.extend(sample, batch_index=batch, sample_index=self.current_sample_index)


def _loader(root: Path, te: TaskEncoder, batch_size: int) -> Any:
    dataset = get_train_dataset(root, worker_config=WorkerConfig(0, 1, 0), batch_size=batch_size,
                                shuffle_buffer_size=20, max_samples_per_sequence=10,
                                task_encoder=te)  # fmt: skip
    return get_savable_loader(dataset)


def _indices(batches: list[Any]) -> list[tuple[list[str], list[int], list[int]]]:
    return [
        (list(b.__key__), [int(i) for i in b.batch_index], [int(i) for i in b.sample_index])
        for b in batches
    ]


def test_two_loaders_iterated_in_turn_keep_their_own_indices(train_ds: Path) -> None:
    """Two loaders without workers, one restored part-way through a generator hook while
    the other works: what the restored one's hooks see does not depend on the other."""
    first = _loader(train_ds, _TwoFromStart(), 3)
    list(itertools.islice(first, 3))  # 9 outputs of 2 per input: one output pending
    state = first.save_state_rank()
    first.close()

    def resumed_while_another_ran(other_batches: int) -> list[Any]:
        other = _loader(train_ds, _Indexing(), 2)
        resumed = _loader(train_ds, _TwoFromStart(), 3)
        resumed.restore_state_rank(state)
        got = []
        for _ in range(3):  # in turn: the other loader's batches, then one of the resumed
            list(itertools.islice(other, other_batches))
            got.extend(itertools.islice(resumed, 1))
        other.close()
        resumed.close()
        return _indices(got)

    alone = resumed_while_another_ran(0)
    assert resumed_while_another_ran(1) == alone
    assert resumed_while_another_ran(7) == alone
    # the two loaders count their own batches: the resumed one continues at its 4th
    assert [batch[1][-1] for batch in alone] == [3, 4, 5]


def test_indices_outside_every_chain_are_refused(train_ds: Path) -> None:
    """After a loader ran, a hook called outside it sees no index (none is left behind)."""
    te = _Indexing()
    loader = _loader(train_ds, te, 2)
    assert _indices(list(itertools.islice(loader, 2)))[1][1] == [1, 1]
    loader.close()
    assert running_context() is None
    with pytest.raises(ConfigError, match="only set while a loader runs"):
        _ = te.current_batch_index
    with pytest.raises(ConfigError, match="only set while a loader runs"):
        _ = te.current_sample_index


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
