"""``BatchDataset``, ``GroupBatchDataset``, ``PackingDataset``: items into batches and packs.

Adapters over the ``Batch``, ``GroupBatch`` and ``Pack`` stages (see ``base.py``). A batcher
that is a generator function (several batches per group of samples, as Energon allows) runs
on ``IterMap``, which resumes exactly inside a group's outputs.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Hashable, Iterator
from typing import Any, Generic, TypeVar

from energon_lite.errors import ConfigError, FailureTracker
from energon_lite.loader.savable_dataset import SavableDataset
from energon_lite.pipeline.lengths import batches_per_worker
from energon_lite.samples.types import basic_sample_keys
from energon_lite.stages.base import Stage
from energon_lite.stages.batch import Batch
from energon_lite.stages.group_batch import GroupBatch
from energon_lite.stages.iter_map import IterMap
from energon_lite.stages.pack import Pack
from energon_lite.task_encoder.base import TaskEncoder
from energon_lite.worker import WorkerConfig
from energon_lite.wrappers.base import (
    MakeTop,
    WrapperDataset,
    failures,
    fn_name,
    set_restore_key,
)

T_batch = TypeVar("T_batch", covariant=True)
T_encoded = TypeVar("T_encoded", covariant=True)
T_sample = TypeVar("T_sample", covariant=True)


def keyed_batcher(batcher: Callable[[list[Any]], Any]) -> Callable[[list[Any]], Any]:
    """``batcher`` whose batch carries its samples' restore keys (``Batch.fetch`` makes it
    again from them), as Energon sets a batch's key."""

    def batch(items: list[Any]) -> Any:
        keys = [basic_sample_keys(item)["__restore_key__"] for item in items]
        return set_restore_key(batcher(items), None if None in keys else keys)

    return batch


def check_size(name: str, value: Any, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name}: {what}={value!r} must be an integer >= 1")


class BatchDataset(WrapperDataset[T_batch], Generic[T_sample, T_batch]):
    """Energon's ``BatchDataset``: ``batch_size`` consecutive items through ``batcher``."""

    def __init__(
        self,
        dataset: SavableDataset,
        batch_size: int,
        batcher: Callable[[list[Any]], Any],
        *,
        batcher_stateless: bool = False,
        batcher_config: dict[str, Any] | Callable[[], dict[str, Any]] | None = None,
        drop_last: bool = False,
        failure_tolerance: int = 100,
        worker_config: WorkerConfig,
    ) -> None:
        check_size("BatchDataset", batch_size, "batch_size")
        self.batch_size, self.batcher, self.drop_last = batch_size, batcher, drop_last
        make_failures = failures(failure_tolerance, worker_config)
        settings = {
            "batch_size": batch_size,
            "batcher": fn_name(batcher),
            "batcher_config": batcher_config() if callable(batcher_config) else batcher_config,
            "drop_last": drop_last,
        }

        top, make = batch_top(batch_size, batcher, drop_last, batcher_stateless, make_failures)
        super().__init__(
            [dataset], worker_config, top, make, settings, batch_count(batch_size, drop_last)
        )


def batch_count(batch_size: int, drop_last: bool) -> Any:
    """Per-worker batch counts from the wrapped per-worker item counts."""

    def count(counts: list[list[int]], wc: WorkerConfig) -> list[int]:
        return batches_per_worker(counts[0], batch_size, drop_last)

    return count


def batch_top(
    batch_size: int,
    batcher: Callable[[list[Any]], Any],
    drop_last: bool,
    stateless: bool,
    make_failures: Callable[[], FailureTracker],
) -> tuple[type[Stage], MakeTop]:
    """The stage that batches: ``Batch``, or ``IterMap`` for a generator batcher."""
    if inspect.isgeneratorfunction(batcher):

        def batches(items: Iterator[Any]) -> Iterator[Any]:
            while True:
                group = list(itertools.islice(items, batch_size))
                if not group or (drop_last and len(group) < batch_size):
                    return
                yield from batcher(group)

        return IterMap, lambda slot: lambda s: IterMap(s, batches, stateless, make_failures())
    collate = keyed_batcher(batcher)
    return Batch, lambda slot: lambda s: Batch(s, batch_size, collate, drop_last, make_failures())


class GroupBatchDataset(WrapperDataset[T_batch], Generic[T_sample, T_batch]):
    """Energon's ``GroupBatchDataset``: batches of items with the same group key.

    ``sample_group_key(item) -> (key, batch_size)``; with ``fixed_batch_size`` set, the
    function returns ``(key, None)`` and every group uses ``fixed_batch_size``."""

    def __init__(
        self,
        dataset: SavableDataset,
        fixed_batch_size: int | None,
        sample_group_key: Callable[[Any], tuple[Hashable, int | None]],
        batcher: Callable[[list[Any]], Any],
        *,
        batcher_stateless: bool = False,
        batcher_config: dict[str, Any] | Callable[[], dict[str, Any]] | None = None,
        drop_last: bool = False,
        failure_tolerance: int = 100,
        worker_config: WorkerConfig,
    ) -> None:
        if fixed_batch_size is not None:
            check_size("GroupBatchDataset", fixed_batch_size, "fixed_batch_size")
        if inspect.isgeneratorfunction(batcher):
            raise ConfigError(
                "GroupBatchDataset: a generator batcher is not supported (nor by Energon's "
                "grouped batching); return one batch"
            )
        make_failures = failures(failure_tolerance, worker_config)

        def criterion(item: Any) -> tuple[Hashable, int]:
            key, size = sample_group_key(item)
            if (size is None) == (fixed_batch_size is None):
                raise ConfigError(
                    f"GroupBatchDataset: group {key!r} got batch size {size} with "
                    f"fixed_batch_size={fixed_batch_size}; exactly one of them must be None"
                )
            return key, size if size is not None else fixed_batch_size  # type: ignore[return-value]

        collate = keyed_batcher(batcher)
        super().__init__(
            [dataset],
            worker_config,
            GroupBatch,
            lambda slot: lambda s: GroupBatch(s, criterion, collate, drop_last, make_failures()),
            {
                "fixed_batch_size": fixed_batch_size,
                "sample_group_key": fn_name(sample_group_key),
                "batcher": fn_name(batcher),
                "batcher_config": batcher_config() if callable(batcher_config) else batcher_config,
                "drop_last": drop_last,
            },
        )


class _PackHooks(TaskEncoder):
    """The Pack stage's hooks from PackingDataset's functions."""

    def __init__(
        self,
        pre_packer: Callable[[list[Any]], list[list[Any]]],
        final_packer: Callable[[list[Any]], Any],
        sample_encoder: Callable[[Any], Any] | None,
    ) -> None:
        self.pre_packer, self.final_packer = pre_packer, final_packer
        self.sample_encoder = sample_encoder

    def select_samples_to_pack(self, samples: list[Any]) -> list[list[Any]]:
        return self.pre_packer(samples)

    def postencode_sample(self, sample: Any) -> Any:
        return sample if self.sample_encoder is None else self.sample_encoder(sample)

    def pack_selected_samples(self, samples: list[Any]) -> Any:
        return self.final_packer(samples)


class PackingDataset(WrapperDataset[T_encoded], Generic[T_sample, T_batch, T_encoded]):
    """Energon's ``PackingDataset``: a buffer of ``buffer_size`` items, grouped by
    ``pre_packer``, each group encoded by ``sample_encoder`` and packed by ``final_packer``.

    Samples the pre-packer leaves out stay buffered for the next selection (Energon drops
    them; ``energon_lite.stages.pack``). One failure streak covers the three functions,
    bounded by the smallest of the three tolerances."""

    def __init__(
        self,
        dataset: SavableDataset,
        buffer_size: int,
        pre_packer: Callable[[list[Any]], list[list[Any]]],
        final_packer: Callable[[list[Any]], Any],
        *,
        final_packer_stateless: bool = False,
        sample_encoder: Callable[[Any], Any] | None = None,
        sample_encoder_stateless: bool = False,
        packer_config: dict[str, Any] | Callable[[], dict[str, Any]] | None = None,
        pre_packer_failure_tolerance: int = 100,
        final_packer_failure_tolerance: int = 100,
        sample_encoder_failure_tolerance: int = 100,
        worker_config: WorkerConfig,
    ) -> None:
        check_size("PackingDataset", buffer_size, "buffer_size")
        hooks = _PackHooks(pre_packer, final_packer, sample_encoder)
        tolerance = min(
            pre_packer_failure_tolerance,
            final_packer_failure_tolerance,
            sample_encoder_failure_tolerance,
        )
        make_failures = failures(tolerance, worker_config)
        super().__init__(
            [dataset],
            worker_config,
            Pack,
            lambda slot: lambda s: Pack(s, buffer_size, hooks, slot.seed, make_failures()),
            {
                "buffer_size": buffer_size,
                "pre_packer": fn_name(pre_packer),
                "final_packer": fn_name(final_packer),
                "sample_encoder": fn_name(sample_encoder),
                "packer_config": packer_config() if callable(packer_config) else packer_config,
            },
        )
