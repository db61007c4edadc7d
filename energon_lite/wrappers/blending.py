"""``BlendDataset``, ``ConcatDataset``, ``MixBatchDataset``: several datasets into one stream.

Adapters over the ``WeightedBlend``, ``Concat`` and ``Batch`` stages (see ``base.py``). Each
wrapped dataset keeps its own chain (its own task encoder, batch size ...) and its own leaf
ids, so a buffer above the blend routes a restore key back to the chain that made it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from energon_lite.errors import ConfigError
from energon_lite.loader.energon_tree import BlendNode, TreeNode
from energon_lite.loader.savable_dataset import SavableDataset
from energon_lite.stages.blend_weighted import WeightedBlend
from energon_lite.stages.concat import Concat
from energon_lite.worker import WorkerConfig
from energon_lite.wrappers.base import WrapperDataset, failures, fn_name, nesting, summed
from energon_lite.wrappers.batching import batch_count, batch_top, check_size

T_batch = TypeVar("T_batch", covariant=True)
T_sample = TypeVar("T_sample", covariant=True)


def _split(name: str, dataset_weights: tuple[Any, ...]) -> tuple[list[Any], list[float]]:
    datasets, weights = [], []
    for pair in dataset_weights:
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise ConfigError(f"{name}: each argument is a (dataset, weight) pair, got {pair!r}")
        dataset, weight = pair
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
            raise ConfigError(f"{name}: weight {weight!r} must be a number > 0")
        datasets.append(dataset)
        weights.append(float(weight))
    return datasets, weights


class BlendDataset(WrapperDataset[T_sample], Generic[T_sample]):
    """Energon's ``BlendDataset``: each item drawn from one dataset with probability
    proportional to its weight; a dataset that ends drops out, the blend ends with the last."""

    def __init__(self, *dataset_weights: tuple[SavableDataset, float], worker_config: WorkerConfig):
        datasets, weights = _split("BlendDataset", dataset_weights)
        self.weights = tuple(weights)
        self.dataset_weights = dataset_weights
        depth = nesting(datasets)
        super().__init__(
            datasets,
            worker_config,
            WeightedBlend,
            lambda slot: (
                lambda sources: WeightedBlend(
                    sources, weights, slot.seed, slot.global_worker_id, "BlendDataset", depth
                )
            ),
            {"weights": weights},
            summed,
            several=True,
        )

    def energon_view(self) -> TreeNode:
        views = [ds.energon_view() for ds in self.datasets]
        return BlendNode(list(zip(views, self.weights)), self.worker_config)


# a pipeline's weighted blend, viewed as Energon's tree (energon_lite.loader.energon_tree), is
# one too: code that walks the tree finds it with isinstance(node, BlendDataset)
BlendDataset.register(BlendNode)


class ConcatDataset(WrapperDataset[T_sample], Generic[T_sample]):
    """Energon's ``ConcatDataset``: the datasets one after the other (finite datasets)."""

    def __init__(self, *datasets: SavableDataset, worker_config: WorkerConfig):
        super().__init__(
            list(datasets),
            worker_config,
            Concat,
            lambda slot: Concat,
            {},
            summed,
            several=True,
        )


def _as_list(batches: list[Any]) -> Any:
    return batches


class MixBatchDataset(WrapperDataset[T_batch], Generic[T_sample, T_batch]):
    """Energon's ``MixBatchDataset``: a blend of (usually batch size 1) datasets, batched by
    ``batch_size`` through ``batch_mix_fn`` (default: the list of the drawn batches;
    ``homogeneous_concat_mix`` concatenates batches of one type)."""

    def __init__(
        self,
        *dataset_weights: tuple[SavableDataset, float],
        batch_size: int,
        batch_mix_fn: Callable[[list[Any]], Any] = _as_list,
        worker_config: WorkerConfig,
    ):
        check_size("MixBatchDataset", batch_size, "batch_size")
        self.batch_size, self.batch_mix_fn = batch_size, batch_mix_fn
        blend: BlendDataset[Any] = BlendDataset(*dataset_weights, worker_config=worker_config)
        make_failures = failures(100, worker_config)
        top, make = batch_top(batch_size, batch_mix_fn, False, False, make_failures)
        super().__init__(
            [blend],
            worker_config,
            top,
            make,
            {"batch_size": batch_size, "batch_mix_fn": fn_name(batch_mix_fn)},
            batch_count(batch_size, False),
        )
