"""``LimitDataset``, ``RepeatDataset``, ``EpochizeDataset``: how long a stream runs.

``LimitDataset`` is the ``Limit`` stage and ``RepeatDataset`` the ``Repeat`` stage (see
``base.py``). ``EpochizeDataset`` is the loader's ``virtual_epoch_length``: each pass of the
loader yields ``length`` items and the next pass continues the stream, which only the loader
can do (a worker chain's end ends the loader's pass), so it must be the outermost wrapper.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from energon_lite.errors import ConfigError
from energon_lite.loader.energon_tree import TreeNode
from energon_lite.loader.savable_dataset import SavableDataset
from energon_lite.stages.limit import Limit
from energon_lite.stages.plan import Node
from energon_lite.stages.repeat import Repeat
from energon_lite.worker import WorkerConfig, WorkerSlot
from energon_lite.wrappers.base import (
    WrapperDataset,
    WrapperPipeline,
    check_wrapped,
    split_count,
    view_over,
)


def _check_count(name: str, value: Any, what: str, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name}: {what}={value!r} must be an integer >= {minimum}")


class LimitDataset(WrapperDataset):
    """Energon's ``LimitDataset``: ``length`` items per loader pass on this rank, split over
    the workers as Energon splits them. Each pass starts the wrapped stream again, as
    Energon's does whatever ``reset_after_epoch`` says (7.4 resets its inner dataset after
    every pass either way)."""

    def __init__(
        self,
        dataset: SavableDataset,
        length: int,
        *,
        reset_after_epoch: bool = False,
        worker_config: WorkerConfig,
    ) -> None:
        _check_count("LimitDataset", length, "length", 0)
        self.length, self.reset_after_epoch = length, reset_after_epoch

        def make(slot: WorkerSlot) -> Any:
            share = split_count(length, worker_config)[slot.worker_id]
            return lambda s: Limit(s, share)

        super().__init__(
            [dataset],
            worker_config,
            Limit,
            make,
            {"length": length},
            lambda counts, wc: [min(n, k) for n, k in zip(counts[0], split_count(length, wc))],
        )


class _RepeatPipeline(WrapperPipeline):
    """Pass ``k`` of loader epoch ``e`` reads the wrapped chain of epoch ``e * passes + k``."""

    def __init__(self, repeat: RepeatDataset, worker_config: WorkerConfig) -> None:
        super().__init__(
            "RepeatDataset",
            [repeat.dataset.pipeline],
            Repeat,
            lambda slot: Repeat,
            {"repeats": repeat.repeats, "restart": repeat.restart},
            self._count,
        )
        self.repeats, self.restart = repeat.repeats, repeat.restart
        self.worker_config = worker_config

    def plan(self, slot: WorkerSlot) -> Node:
        child = self.children[0]
        passes = 1 if self.repeats is None else math.ceil(self.repeats)

        def node(k: int) -> Node:
            return child.plan(dataclasses.replace(slot, epoch=slot.epoch * passes + k))

        last = None
        if self.repeats is not None and self.repeats != math.floor(self.repeats):
            fraction = self.repeats - math.floor(self.repeats)
            items = child.items_per_worker(self.worker_config)[slot.worker_id]
            last = math.floor(items * fraction)
        active = self.restart or slot.epoch == 0
        return Node(
            Repeat,
            lambda _first: Repeat(lambda k: node(k).build(), self.repeats, last, active),
            [node(0)],
        )

    def _count(self, counts: list[list[int]], wc: WorkerConfig) -> list[int]:
        if self.repeats is None:
            return counts[0]
        return [int(n * self.repeats) for n in counts[0]]


class RepeatDataset(WrapperDataset):
    """Energon's ``RepeatDataset``: the wrapped stream ``repeats`` times per loader pass
    (``None``: forever; a fraction cuts the last repetition), each repetition reading the
    wrapped dataset's next epoch. ``restart=False``: later loader passes are empty."""

    def __init__(
        self,
        dataset: SavableDataset,
        *,
        repeats: float | None = None,
        restart: bool = True,
        worker_config: WorkerConfig,
    ) -> None:
        if repeats is not None and (
            isinstance(repeats, bool) or not isinstance(repeats, (int, float)) or not repeats > 0
        ):
            raise ConfigError(f"RepeatDataset: repeats={repeats!r} must be > 0 (or None)")
        check_wrapped("RepeatDataset", dataset, worker_config)
        self.repeats, self.restart = repeats, restart
        self.datasets = (dataset,)
        self.wrapper_depth = dataset.wrapper_depth + 1
        SavableDataset.__init__(self, _RepeatPipeline(self, worker_config), worker_config)


class EpochizeDataset(SavableDataset):
    """Energon's ``EpochizeDataset``: each loader pass yields ``length`` items of the wrapped
    stream and the next pass continues it (``virtual_epoch_length``); outermost only."""

    def __init__(self, dataset: SavableDataset, length: int, worker_config: WorkerConfig) -> None:
        _check_count("EpochizeDataset", length, "length", 1)
        check_wrapped("EpochizeDataset", dataset, worker_config)
        self.datasets = (dataset,)
        self.length = length
        self.wrapper_depth = dataset.wrapper_depth
        super().__init__(dataset.pipeline, worker_config, virtual_epoch_length=length)

    @property
    def dataset(self) -> SavableDataset:
        return self.datasets[0]

    def energon_view(self) -> TreeNode:
        return view_over(self, {"length": self.length})

    def __len__(self) -> int:
        return self.length
