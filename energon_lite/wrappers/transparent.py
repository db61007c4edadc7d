"""``ShuffleBufferDataset`` (the ``ShuffleBuffer`` stage), and ``LogSampleDataset`` and
``GcDataset``, which change nothing in the stream here.

* ``LogSampleDataset``: at ``worker_log_level >= 1`` every worker logs each batch it makes
  (``yield_batch``, through ``WorkerConfig.worker_log``) whatever the pipeline, as Energon's
  ``get_train_dataset`` adds a ``LogSampleDataset`` then; the wrapper itself changes nothing.
* ``GcDataset`` runs ``gc.collect()`` every ``every_n_iter`` items in Energon's workers; here
  workers hold no per-sample Python garbage to collect (states are keys and counters), so
  it is the wrapped dataset under Energon's name.
Both keep the wrapped dataset's fingerprint, as Energon keeps its ``config()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from energon_lite.errors import ConfigError
from energon_lite.loader.energon_tree import TreeNode
from energon_lite.loader.savable_dataset import SavableDataset
from energon_lite.stages.shuffle import ShuffleBuffer
from energon_lite.worker import WorkerConfig
from energon_lite.wrappers.base import WrapperDataset, check_wrapped, nesting, view_over
from energon_lite.wrappers.batching import check_size


class ShuffleBufferDataset(WrapperDataset):
    """Energon's ``ShuffleBufferDataset``: a random one of the last ``size`` items. The
    buffer saves restore keys and refetches on restore (``energon_lite.stages.shuffle``)."""

    def __init__(self, dataset: SavableDataset, size: int, *, worker_config: WorkerConfig):
        check_size("ShuffleBufferDataset", size, "size")
        self.size = size
        depth = nesting([dataset])
        super().__init__(
            [dataset],
            worker_config,
            ShuffleBuffer,
            lambda slot: (
                lambda s: ShuffleBuffer(
                    s, size, slot.seed, slot.global_worker_id, "ShuffleBufferDataset", depth
                )
            ),
            {"size": size},
        )


class _Transparent(SavableDataset):
    """The wrapped dataset under another name: same pipeline, same fingerprint."""

    def __init__(self, dataset: SavableDataset, worker_config: WorkerConfig) -> None:
        check_wrapped(type(self).__name__, dataset, worker_config)
        self.datasets = (dataset,)
        self.wrapper_depth = dataset.wrapper_depth
        super().__init__(dataset.pipeline, worker_config)

    @property
    def dataset(self) -> SavableDataset:
        return self.datasets[0]

    def energon_view(self) -> TreeNode:
        return view_over(self, {})


class LogSampleDataset(_Transparent):
    """Energon's ``LogSampleDataset`` (see the module doc)."""

    def __init__(
        self,
        dataset: SavableDataset,
        mode: str,
        worker_config: WorkerConfig,
        get_keys_fn: Callable[[Any], list[str] | None] | None = None,
    ) -> None:
        if mode not in ("train", "val"):
            raise ConfigError(f"LogSampleDataset: mode={mode!r} must be 'train' or 'val'")
        self.mode, self.get_keys_fn = mode, get_keys_fn
        super().__init__(dataset, worker_config)


class GcDataset(_Transparent):
    """Energon's ``GcDataset`` (see the module doc: nothing to collect)."""

    def __init__(
        self,
        dataset: SavableDataset,
        *,
        worker_config: WorkerConfig,
        every_n_iter: int = 10,
        freeze: bool = True,
    ) -> None:
        check_size("GcDataset", every_n_iter, "every_n_iter")
        self.every_n_iter, self.freeze = every_n_iter, freeze
        super().__init__(dataset, worker_config)
