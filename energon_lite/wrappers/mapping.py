"""``MapDataset``, ``FilterDataset``, ``IterMapDataset``: per-item and stream functions.

Adapters over the ``Map``, ``Filter`` and ``IterMap`` stages (see ``base.py``). A map
function that is a generator function (several or no outputs per sample, as Energon
allows) runs on ``IterMap``, which resumes exactly inside a sample's outputs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

from energon_lite.loader.savable_dataset import SavableDataset
from energon_lite.samples.types import basic_sample_keys
from energon_lite.stages.filter import Filter
from energon_lite.stages.iter_map import IterMap
from energon_lite.stages.map import Map
from energon_lite.worker import WorkerConfig
from energon_lite.wrappers.base import WrapperDataset, failures, fn_name, set_restore_key

T_batch = TypeVar("T_batch", covariant=True)
T_sample = TypeVar("T_sample", covariant=True)


def keep_restore_key(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``fn`` whose output carries its input's ``__restore_key__`` (``Map.fetch`` makes it
    again from that key), so a buffer above can save it."""

    def mapped(item: Any) -> Any:
        return set_restore_key(fn(item), basic_sample_keys(item)["__restore_key__"])

    return mapped


def _config(config: Any) -> Any:
    return config() if callable(config) else config


class MapDataset(WrapperDataset[T_batch], Generic[T_sample, T_batch]):
    """Energon's ``MapDataset``: ``map_fn`` on every item; ``SkipSample`` drops one."""

    def __init__(
        self,
        dataset: SavableDataset,
        map_fn: Callable[[Any], Any],
        *,
        stateless_map_fn: bool = False,
        map_fn_config: dict[str, Any] | Callable[[], dict[str, Any]] | None = None,
        failure_tolerance: int = 100,
        worker_config: WorkerConfig,
    ) -> None:
        self.map_fn = map_fn
        make_failures = failures(failure_tolerance, worker_config)
        settings = {"map_fn": fn_name(map_fn), "map_fn_config": _config(map_fn_config)}
        if inspect.isgeneratorfunction(map_fn):

            def each(items: Iterator[Any]) -> Iterator[Any]:
                for item in items:
                    yield from map_fn(item)

            super().__init__(
                [dataset],
                worker_config,
                IterMap,
                lambda slot: lambda s: IterMap(s, each, stateless_map_fn, make_failures()),
                settings,
            )
            return
        fn = keep_restore_key(map_fn)
        super().__init__(
            [dataset],
            worker_config,
            Map,
            lambda slot: lambda s: Map(s, fn, "map_fn", make_failures()),
            settings,
        )


class FilterDataset(WrapperDataset[T_sample], Generic[T_sample]):
    """Energon's ``FilterDataset``: keeps the items for which ``filter_fn`` is true."""

    def __init__(
        self,
        dataset: SavableDataset,
        *,
        filter_fn: Callable[[Any], bool],
        filter_fn_config: dict[str, Any] | Callable[[], dict[str, Any]] | None = None,
        worker_config: WorkerConfig,
    ) -> None:
        self.filter_fn = filter_fn
        make_failures = failures(100, worker_config)
        super().__init__(
            [dataset],
            worker_config,
            Filter,
            lambda slot: lambda s: Filter(s, filter_fn, make_failures()),
            {"filter_fn": fn_name(filter_fn), "filter_fn_config": _config(filter_fn_config)},
        )


class IterMapDataset(WrapperDataset[T_batch], Generic[T_sample, T_batch]):
    """Energon's ``IterMapDataset``: ``iter_map_fn(iterator of items) -> iterator of items``.

    Resumes exactly when the function carries nothing from one output group to the next
    (``energon_lite.stages.iter_map``); ``len()`` is ``len_map_fn`` of the wrapped count."""

    def __init__(
        self,
        dataset: SavableDataset,
        iter_map_fn: Callable[[Iterator[Any]], Iterable[Any]],
        *,
        len_map_fn: Callable[[int], int] = lambda x: x,
        stateless_iter_fn: bool = False,
        iter_map_fn_config: dict[str, Any] | Callable[[], dict[str, Any]] | None = None,
        worker_config: WorkerConfig,
    ) -> None:
        self.iter_map_fn = iter_map_fn
        make_failures = failures(100, worker_config)
        super().__init__(
            [dataset],
            worker_config,
            IterMap,
            lambda slot: lambda s: IterMap(s, iter_map_fn, stateless_iter_fn, make_failures()),
            {
                "iter_map_fn": fn_name(iter_map_fn),
                "iter_map_fn_config": _config(iter_map_fn_config),
                "stateless_iter_fn": stateless_iter_fn,
            },
            count=lambda counts, wc: [len_map_fn(n) for n in counts[0]],
        )
