"""Datasets and loaders: ``get_train_dataset``, ``get_val_dataset``, ``get_loader``,
``get_savable_loader`` (Energon's names and arguments).

Exact resume with workers: every worker chain yields ``(worker, batch, state_after_batch)``.
The loader hands the batch to the trainer and keeps, per worker, the state that belongs to
the last batch the trainer *received* (prefetched batches do not count), plus the next
worker to poll. ``save_state_rank()`` is that, with no command channel into the workers
and no replay. Restore starts each worker's chain from its state and rotates the logical
worker ids so that the torch DataLoader's first worker is the saved next one.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from energon_lite.errors import ConfigError, StateError
from energon_lite.kinds import resolve_path
from energon_lite.leaf import Leaf
from energon_lite.pipeline import DatasetPipeline, Pipeline, PipelineOptions
from energon_lite.stages.group_batch import BucketSync
from energon_lite.state import STATE_VERSION, check_same_config, check_state_shape
from energon_lite.storage import RemotePath, as_path
from energon_lite.task_encoder import DefaultTaskEncoder, TaskEncoder
from energon_lite.worker import WorkerConfig


class SavableDataset(IterableDataset):
    """A pipeline plus the worker configuration; iterating it yields batches (no state)."""

    def __init__(self, pipeline: Pipeline, worker_config: WorkerConfig) -> None:
        super().__init__()
        self.pipeline = pipeline
        self.worker_config = worker_config

    def __iter__(self) -> Iterator[Any]:
        for _, batch, _ in self.iter_with_state(None, 0, 0, save_states=False):
            yield batch

    def iter_with_state(
        self, states: list[Any] | None, rotation: int, epoch: int, save_states: bool = True
    ) -> Iterator[tuple[int, Any, Any]]:
        """Run the chain of the calling worker; yield ``(logical worker, batch, state)``."""
        info = get_worker_info()
        physical = info.id if info is not None else 0
        n = self.worker_config.workers_per_rank
        logical = (physical + rotation) % n
        chain = self.pipeline.build(self.worker_config.slot(logical, epoch))
        chain.restore_state(states[logical] if states is not None else None)
        check_pickle = info is not None
        while True:
            try:
                batch = chain.next()
            except StopIteration:
                return
            if check_pickle:  # once per worker: an unpicklable batch would hang torch's queue
                _check_picklable(batch, logical)
                check_pickle = False
            yield logical, batch, chain.save_state() if save_states else None

    def __len__(self) -> int:
        return self.pipeline.batches_per_epoch(self.worker_config)

    def config(self) -> dict[str, Any]:
        """Everything a saved state must match."""
        wc = self.worker_config
        return {
            "rank": wc.rank,
            "world_size": wc.world_size,
            "num_workers": wc.num_workers,
            "seed": wc.seed_offset,
            **self.pipeline.fingerprint(),
        }


def _check_picklable(batch: Any, worker: int) -> None:
    try:
        pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise ConfigError(
            f"worker {worker}: a batch of type {type(batch).__module__}.{type(batch).__qualname__} "
            f"cannot be pickled to send it to the trainer process ({type(exc).__name__}: {exc}); "
            "define sample and batch classes at module level in an importable module"
        ) from exc


class _StatefulView(IterableDataset):
    def __init__(
        self, dataset: SavableDataset, states: list[Any], rotation: int, epoch: int, save: bool
    ) -> None:
        super().__init__()
        self.dataset, self.states, self.rotation, self.epoch, self.save = (
            dataset,
            states,
            rotation,
            epoch,
            save,
        )

    def __iter__(self) -> Iterator[tuple[int, Any, Any]]:
        return self.dataset.iter_with_state(self.states, self.rotation, self.epoch, self.save)


def _identity(item: Any) -> Any:
    return item


class SavableLoader:
    """Iterates batches of a SavableDataset and can save/restore its exact position."""

    def __init__(
        self,
        dataset: SavableDataset,
        *,
        pin_memory: bool | None = None,
        prefetch_factor: int | None = 2,
        track_state: bool = True,
        timeout_seconds: float | None = None,
    ) -> None:
        if not isinstance(dataset, SavableDataset):
            raise ConfigError(
                f"expected a dataset from get_train_dataset/get_val_dataset, got {type(dataset).__name__}"
            )
        if timeout_seconds is not None and timeout_seconds <= 0:
            raise ConfigError(f"{timeout_seconds=} must be > 0 (or None: wait as long as it takes)")
        self.timeout_seconds = timeout_seconds
        self.dataset = dataset
        self.worker_config = dataset.worker_config
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else pin_memory
        self.prefetch_factor = prefetch_factor
        self.track_state = track_state
        n = self.worker_config.workers_per_rank
        self._states: list[Any] = [None] * n
        self._next_worker = 0
        self._epoch = 0

    def __iter__(self) -> Iterator[Any]:
        wc = self.worker_config
        view = _StatefulView(
            self.dataset, list(self._states), self._next_worker, self._epoch, self.track_state
        )
        loader = DataLoader(
            view,
            batch_size=None,
            num_workers=wc.num_workers,
            collate_fn=_identity,
            pin_memory=self.pin_memory,
            prefetch_factor=self.prefetch_factor if wc.num_workers > 0 else None,
            persistent_workers=False,
            timeout=self.timeout_seconds if wc.num_workers > 0 and self.timeout_seconds else 0,
        )
        n = wc.workers_per_rank
        for logical, batch, state in loader:
            self._states[logical] = state
            self._next_worker = (logical + 1) % n
            yield batch
        # the epoch ran out on every worker (finite datasets): the next pass starts the next one
        self._states = [None] * n
        self._next_worker = 0
        self._epoch += 1

    def __len__(self) -> int:
        return self.dataset.pipeline.batches_per_epoch(self.worker_config, self._epoch)

    # state ------------------------------------------------------------------------------

    def save_state_rank(self) -> dict[str, Any]:
        """This rank's loader state: plain data (msgpack-, pickle- and torch.save-able)."""
        if not self.track_state:
            raise StateError(
                "this loader was made with get_loader(); use get_savable_loader() to save state"
            )
        return {
            "type": "SavableLoader",
            "version": STATE_VERSION,
            "config": self.dataset.config(),
            "epoch": self._epoch,
            "next_worker": self._next_worker,
            "workers": list(self._states),
        }

    def restore_state_rank(self, state: dict[str, Any] | None) -> None:
        """Continue from ``state`` (from ``save_state_rank``) on the next iteration."""
        n = self.worker_config.workers_per_rank
        if state is None:
            self._states, self._next_worker, self._epoch = [None] * n, 0, 0
            return
        if not isinstance(state, dict) or state.get("type") != "SavableLoader":
            raise StateError(f"not an energon_lite loader state: {str(state)[:200]!r}")
        if state.get("version") != STATE_VERSION:
            raise StateError(
                f"loader state version {state.get('version')!r}, this energon_lite reads {STATE_VERSION}"
            )
        check_same_config(state.get("config"), self.dataset.config())
        workers = state.get("workers")
        if not isinstance(workers, list) or len(workers) != n:
            raise StateError(
                f"loader state has {len(workers) if isinstance(workers, list) else 'no'} worker states, expected {n}"
            )
        next_worker = state.get("next_worker")
        if not isinstance(next_worker, int) or not 0 <= next_worker < n:
            raise StateError(f"loader state next_worker={next_worker!r} outside [0, {n})")
        epoch = state.get("epoch", 0)
        if not isinstance(epoch, int) or epoch < 0:
            raise StateError(f"loader state epoch={epoch!r} is not a pass number; it is corrupt")
        for worker, worker_state in enumerate(workers):
            if worker_state is not None:  # the shape now; the values when the worker restores
                fresh = self.dataset.pipeline.build(self.worker_config.slot(worker, epoch))
                check_state_shape(fresh.save_state(), worker_state)
        self._states = list(workers)
        self._next_worker = next_worker
        self._epoch = epoch

    def save_state_global(self, global_dst_rank: int = 0) -> list[dict[str, Any]] | None:
        """Gather every rank's state on ``global_dst_rank`` (None on the other ranks)."""
        import torch.distributed as dist

        state = self.save_state_rank()
        if not (dist.is_available() and dist.is_initialized()):
            return [state]
        group = self.worker_config.data_parallel_group
        gathered: list[Any] | None = (
            [None] * dist.get_world_size(group) if dist.get_rank() == global_dst_rank else None
        )
        dist.gather_object(state, gathered, dst=global_dst_rank, group=group)
        return gathered

    def restore_state_global(
        self, states: list[dict[str, Any]] | None, *, src_rank: int | None = None
    ) -> None:
        """Restore every rank: each rank passes the full list, or only ``src_rank`` does."""
        import torch.distributed as dist

        rank = self.worker_config.rank
        if src_rank is not None and dist.is_available() and dist.is_initialized():
            group = self.worker_config.data_parallel_group
            received: list[Any] = [None]
            dist.scatter_object_list(
                received, states if dist.get_rank() == src_rank else None, src=src_rank, group=group
            )
            self.restore_state_rank(received[0])
            return
        if states is None or len(states) != self.worker_config.world_size:
            raise StateError(
                f"restore_state_global needs one state per rank ({self.worker_config.world_size}), "
                f"got {None if states is None else len(states)}"
            )
        self.restore_state_rank(states[rank])


# dataset constructors -------------------------------------------------------------------


def _leaves_for(
    path: str | os.PathLike[str] | RemotePath, split_part: str, kwargs: dict[str, Any]
) -> tuple[list[Leaf], str]:
    path = as_path(path)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        from energon_lite.metadataset import load_metadataset

        per_leaf = sorted(
            {"subflavors", "shuffle_over_epochs_multiplier", "split_config", "dataset_config"}
            & set(kwargs)
        )
        if per_leaf:
            raise ConfigError(
                f"{path}: set {per_leaf} per dataset inside the metadataset, not as arguments"
            )
        return load_metadataset(path, split_part)
    if not path.exists():
        raise ConfigError(f"dataset path {path} does not exist")
    path = resolve_path(path)  # e.g. a video-text CSV -> the folder it was prepared into
    leaf = Leaf(
        path,
        split_part,
        subflavors=kwargs.pop("subflavors", None),
        split_config=kwargs.pop("split_config", "split.yaml"),
        dataset_config=kwargs.pop("dataset_config", "dataset.yaml"),
        shuffle_over_epochs_multiplier=kwargs.pop("shuffle_over_epochs_multiplier", 1),
    )
    return [leaf], "single"


def _check_kwargs(kwargs: dict[str, Any]) -> None:
    if kwargs:
        raise ConfigError(f"unknown arguments {sorted(kwargs)}")


def get_train_dataset(
    path: str | os.PathLike[str] | RemotePath,
    *,
    worker_config: WorkerConfig,
    batch_size: int | None,
    shuffle_buffer_size: int | None,
    max_samples_per_sequence: int | None,
    split_part: str = "train",
    batch_drop_last: bool = False,
    packing_buffer_size: int | None = None,
    task_encoder: TaskEncoder | None = None,
    repeat: bool = True,
    parallel_shard_iters: int | None = None,
    failure_tolerance: int = 100,
    bucket_sync: dict[str, Any] | None = None,
    **kwargs: Any,
) -> SavableDataset:
    """The training dataset of a prepared dataset folder or a metadataset YAML.

    Samples are shuffled (slice order per epoch, ``parallel_shard_iters`` open slices per
    worker, a ``shuffle_buffer_size`` buffer), encoded, optionally packed, batched and
    batch-encoded. ``repeat=False`` ends after one epoch. ``failure_tolerance`` bounds the
    consecutive bad samples skipped before the run stops. ``bucket_sync={"weights": {bucket:
    weight}}`` makes every rank emit the same ``batch_group_criterion`` bucket at each step
    (``energon_lite.stages.group_batch``).
    """
    if kwargs.pop("virtual_epoch_length", 0):
        raise ConfigError(
            "virtual_epoch_length is not supported; take a fixed number of batches per pass "
            "with itertools.islice(loader, n) instead: the loader state stays exact"
        )
    leaves, mode = _leaves_for(path, split_part, kwargs)
    _check_kwargs(kwargs)
    options = PipelineOptions(
        training=True,
        batch_size=batch_size,
        batch_drop_last=batch_drop_last,
        shuffle_buffer_size=shuffle_buffer_size,
        max_samples_per_sequence=max_samples_per_sequence,
        parallel_shard_iters=parallel_shard_iters,
        repeat=repeat,
        packing_buffer_size=packing_buffer_size,
        failure_tolerance=failure_tolerance,
        bucket_sync=bucket_sync,
    )
    te = task_encoder if task_encoder is not None else DefaultTaskEncoder()
    BucketSync.check_option(bucket_sync, te)
    return SavableDataset(DatasetPipeline(leaves, mode, te, options, worker_config), worker_config)


def get_val_dataset(
    path: str | os.PathLike[str] | RemotePath,
    *,
    worker_config: WorkerConfig,
    batch_size: int | None,
    split_part: str = "val",
    batch_drop_last: bool = False,
    packing_buffer_size: int | None = None,
    limit: int | None = None,
    task_encoder: TaskEncoder | None = None,
    failure_tolerance: int = 100,
    **kwargs: Any,
) -> SavableDataset:
    """The validation/test dataset: every sample once, in order, no shuffling; ``limit`` batches per worker."""
    leaves, mode = _leaves_for(path, split_part, kwargs)
    kwargs.pop("max_samples_per_sequence", None)
    _check_kwargs(kwargs)
    options = PipelineOptions(
        training=False,
        batch_size=batch_size,
        batch_drop_last=batch_drop_last,
        repeat=False,
        packing_buffer_size=packing_buffer_size,
        limit=limit,
        failure_tolerance=failure_tolerance,
    )
    te = task_encoder if task_encoder is not None else DefaultTaskEncoder()
    mode = "concat" if len(leaves) > 1 else mode
    return SavableDataset(DatasetPipeline(leaves, mode, te, options, worker_config), worker_config)


# Energon's loader knobs that energon_lite's design makes moot: the state is exact after
# every batch (no periodic worker checkpoints to tune) and workers hold no garbage to collect.
_MOOT_ENERGON_OPTIONS = frozenset(
    {"checkpoint_every_sec", "checkpoint_every_min_n_samples", "n_checkpoints", "gc_collect_every_n_steps",
     "gc_freeze_at_step", "watchdog_initial_timeout_seconds"}
)  # fmt: skip


def _loader_options(dataset: SavableDataset, options: dict[str, Any]) -> dict[str, Any]:
    """Energon's ``get_(savable_)loader`` arguments -> SavableLoader's, refusing what differs."""
    worker_config = options.pop("worker_config", None)
    if worker_config is not None and worker_config != dataset.worker_config:
        raise ConfigError(
            f"get_loader(worker_config={worker_config}) differs from the dataset's "
            f"{dataset.worker_config}; pass the same one (or none)"
        )
    if options.pop("cache_pool", None) is not None:
        raise ConfigError(
            "cache_pool (Energon's remote-file cache) is not supported by energon_lite"
        )
    watchdog = options.pop("watchdog_timeout_seconds", None)
    if options.pop("fail_on_timeout", False):  # Energon's watchdog that raises: a batch timeout
        options.setdefault("timeout_seconds", watchdog)
    for name in _MOOT_ENERGON_OPTIONS & set(options):
        options.pop(name)
    unknown = sorted(set(options) - {"pin_memory", "prefetch_factor", "timeout_seconds"})
    if unknown:
        raise ConfigError(f"unknown loader arguments {unknown}")
    return options


def get_savable_loader(dataset: SavableDataset, **options: Any) -> SavableLoader:
    """A loader that can ``save_state_rank()`` / ``restore_state_rank()``.

    Options: ``pin_memory`` (default: when CUDA is available), ``prefetch_factor`` (2),
    ``timeout_seconds`` (raise when a worker takes longer for one batch; default: wait).
    Energon's arguments are accepted too: ``fail_on_timeout=True`` with
    ``watchdog_timeout_seconds`` becomes ``timeout_seconds``; its checkpoint and gc knobs
    have nothing to tune here; ``cache_pool`` is refused.
    """
    return SavableLoader(dataset, **_loader_options(dataset, options))


def get_loader(dataset: SavableDataset, **options: Any) -> SavableLoader:
    """The same batches as ``get_savable_loader``, without the per-batch state bookkeeping."""
    return SavableLoader(dataset, track_state=False, **_loader_options(dataset, options))
