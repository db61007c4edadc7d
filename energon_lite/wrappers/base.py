"""``WrapperPipeline`` and ``WrapperDataset``: Energon's wrapper classes as adapters over stages.

A wrapper is a :class:`~energon_lite.loader.savable_dataset.SavableDataset` whose pipeline builds
the wrapped datasets' chains for the same worker slot and puts one stage on top. Nothing
runs twice: ``BatchDataset(ds, 4, ...)`` is ``ds``'s chain followed by the ``Batch`` stage,
exactly as ``get_train_dataset(batch_size=4)`` would wire it.

* The state of a wrapper's chain is the stage's state with its parents' below it, so the
  loader saves and restores a composition exactly like any other chain, and the trainer
  checks a saved state's shape against ``plan(slot).shape()`` before any worker starts.
* The fingerprint nests the wrapped datasets' fingerprints under the wrapper's own settings
  (functions by their qualified names): a state saved with another composition is refused.
* Each wrapped dataset's leaves get their own leaf ids (``WorkerSlot.leaf_base``), so that
  restore keys stay unique across the composition and a blend routes them home.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Sequence
from typing import Any

from energon_lite.errors import ConfigError, FailureTracker, failure_trackers
from energon_lite.loader.energon_tree import TreeNode
from energon_lite.loader.savable_dataset import SavableDataset
from energon_lite.pipeline.dataset_pipeline import Pipeline
from energon_lite.quotas import share
from energon_lite.stages.base import Stage
from energon_lite.stages.plan import Node
from energon_lite.stages.reader import Reader
from energon_lite.worker import CanonicalLayout, WorkerConfig, WorkerSlot

# make(slot) -> the function that makes the top stage from the built parent(s)
MakeTop = Callable[[WorkerSlot], Callable[..., Stage]]
# per-worker item counts of the wrapped datasets -> this wrapper's
CountItems = Callable[[list[list[int]], WorkerConfig], list[int]]


def fn_name(fn: Any) -> str | None:
    """A function's name for a fingerprint (qualified; a callable object by its class)."""
    if fn is None:
        return None
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    module = getattr(fn, "__module__", None) or ""
    if (
        module.startswith("energon_lite.")
        and getattr(sys.modules["energon_lite"], name, None) is fn
    ):
        return f"energon_lite.{name}"  # our public name: stays when the defining module moves
    return f"{module}.{name}"


def set_restore_key(item: Any, key: Any) -> Any:
    """Give a wrapper's output the restore key that makes it again (a mapped sample: its
    input's; a batch: its samples' keys), as Energon sets it; an output that cannot carry
    one (a tuple, a list) stays as it is. Returns ``item``."""
    if key is None or item is None:
        return item
    if isinstance(item, dict):
        item["__restore_key__"] = key
    elif hasattr(item, "__restore_key__"):
        item.__restore_key__ = key
    return item


def nesting(datasets: Sequence[SavableDataset]) -> int:
    """How deep a wrapper sits over its datasets: a key for its random streams, so that a
    shuffle or blend wrapped around another draws a stream of its own."""
    return 1 + max((ds.wrapper_depth for ds in datasets), default=0)


def split_count(total: int, wc: WorkerConfig) -> list[int]:
    """Energon's per-worker share of a rank-wide count (``LimitDataset``, ``EpochizeDataset``)."""
    return [share(total, wc.workers_per_rank, w) for w in range(wc.workers_per_rank)]


def failures(tolerance: int, wc: WorkerConfig) -> Callable[[], FailureTracker]:
    """A fresh failure tracker per stage, with the worker config's error handler."""
    if isinstance(tolerance, bool) or not isinstance(tolerance, int) or tolerance < 0:
        raise ConfigError(f"failure_tolerance={tolerance!r} must be an integer >= 0")
    return failure_trackers(tolerance, wc.global_error_handler)


class WrapperPipeline:
    """The wrapped datasets' chains for one worker slot, with one stage on top."""

    def __init__(
        self,
        wrapper: str,
        children: Sequence[Pipeline],
        top: type[Stage],
        make: MakeTop,
        settings: dict[str, Any],
        count: CountItems,
        several: bool = False,
    ) -> None:
        self.wrapper = wrapper
        self.children = list(children)
        self.top = top
        self.make = make
        self.settings = settings
        self.count = count
        self.several = several
        self.leaves = [leaf for child in self.children for leaf in child.leaves]
        # get_loader(cache_pool=...) hands the pool to the (first) task encoder
        self.task_encoder = next(
            (c.task_encoder for c in self.children if c.task_encoder is not None), None
        )
        self.training = all(child.training for child in self.children)

    def child_nodes(self, slot: WorkerSlot) -> list[Node]:
        """The wrapped datasets' plans, each with its own range of leaf ids."""
        nodes, base = [], slot.leaf_base
        for child in self.children:
            nodes.append(child.plan(dataclasses.replace(slot, leaf_base=base)))
            base += len(child.leaves)
        return nodes

    def plan(self, slot: WorkerSlot) -> Node:
        return Node(self.top, self.make(slot), self.child_nodes(slot), self.several)

    def build(self, slot: WorkerSlot) -> Stage:
        return self.plan(slot).build()

    def state_shape(self, slot: WorkerSlot) -> dict[str, Any]:
        return self.plan(slot).shape()

    def canonical(self, slot: WorkerSlot) -> CanonicalLayout | None:
        return None  # a composition by hand runs its own layout

    def readers(self, slot: WorkerSlot) -> list[Reader] | None:
        return None  # the wrapped datasets' readers are checked by their own pipelines

    def fingerprint(self) -> dict[str, Any]:
        return {
            "wrapper": self.wrapper,
            **self.settings,
            "datasets": [child.fingerprint() for child in self.children],
        }

    def items_per_worker(self, wc: WorkerConfig, epoch: int = 0) -> list[int]:
        return self.count([child.items_per_worker(wc, epoch) for child in self.children], wc)

    def batches_per_epoch(self, wc: WorkerConfig, epoch: int = 0) -> int:
        return sum(self.items_per_worker(wc, epoch))


def same(counts: list[list[int]], wc: WorkerConfig) -> list[int]:
    """The wrapped dataset's counts unchanged (map, filter, shuffle ...)."""
    return counts[0]


def summed(counts: list[list[int]], wc: WorkerConfig) -> list[int]:
    """Per worker, the sum over the wrapped datasets (blend, concat)."""
    return [sum(column) for column in zip(*counts)]


class WrapperDataset(SavableDataset):
    """Base of Energon's wrapper classes: the wrapped datasets and a WrapperPipeline."""

    pipeline: WrapperPipeline

    def __init__(
        self,
        datasets: Sequence[Any],
        worker_config: WorkerConfig,
        top: type[Stage],
        make: MakeTop,
        settings: dict[str, Any],
        count: CountItems = same,
        several: bool = False,
        virtual_epoch_length: int | None = None,
    ) -> None:
        name = type(self).__name__
        if not isinstance(worker_config, WorkerConfig):
            raise ConfigError(
                f"{name}: worker_config must be a WorkerConfig, got {type(worker_config).__name__}"
            )
        if not datasets:
            raise ConfigError(f"{name}: needs at least one dataset")
        for ds in datasets:
            check_wrapped(name, ds, worker_config)
        self.datasets = tuple(datasets)
        self.wrapper_depth = nesting(datasets)
        pipeline = WrapperPipeline(
            name, [ds.pipeline for ds in datasets], top, make, settings, count, several
        )
        super().__init__(pipeline, worker_config, virtual_epoch_length)

    @property
    def dataset(self) -> SavableDataset:
        """The wrapped dataset (Energon's ``BaseWrapperDataset.dataset``)."""
        if len(self.datasets) != 1:
            raise ConfigError(f"{type(self).__name__} wraps {len(self.datasets)} datasets")
        return self.datasets[0]

    def __len__(self) -> int:
        if self.virtual_epoch_length is not None:
            return self.virtual_epoch_length
        return super().__len__()

    def energon_view(self) -> TreeNode:
        """This wrapper over its datasets' views, with its settings (``loader.config()``)."""
        return view_over(self, self.pipeline.settings)


def view_over(dataset: Any, settings: dict[str, Any]) -> TreeNode:
    """A wrapper's node in Energon's tree over the views of the datasets it wraps."""
    views = [ds.energon_view() for ds in dataset.datasets]
    fields = {**settings, "worker_config": dataset.worker_config.config()}
    if len(views) == 1:
        return TreeNode(type(dataset).__name__, fields, views[0])
    return TreeNode(type(dataset).__name__, {**fields, "datasets": views})


def check_wrapped(name: str, dataset: Any, worker_config: WorkerConfig) -> None:
    """A wrapped dataset must be ours, share the worker config and have no virtual epoch."""
    if not isinstance(dataset, SavableDataset):
        raise ConfigError(
            f"{name}: wraps datasets from get_train_dataset / get_val_dataset or other "
            f"wrappers, got {type(dataset).__name__}"
        )
    if dataset.worker_config != worker_config:
        raise ConfigError(
            f"{name}: the wrapped dataset's worker_config {dataset.worker_config} differs from "
            f"the wrapper's {worker_config}; pass the same one"
        )
    if dataset.virtual_epoch_length is not None:
        raise ConfigError(
            f"{name}: the wrapped dataset has virtual_epoch_length="
            f"{dataset.virtual_epoch_length} (EpochizeDataset); a virtual epoch is counted by "
            "the loader, so EpochizeDataset must be the outermost wrapper"
        )
