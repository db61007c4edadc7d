"""Datasets and loaders: ``get_train_dataset``, ``get_val_dataset``, ``get_loader``,
``get_savable_loader`` (Energon's names and arguments).

The dataset a worker runs is :class:`~energon_lite.savable_dataset.SavableDataset`; the
loader that keeps exact state is :class:`~energon_lite.savable_loader.SavableLoader`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from energon_lite.errors import ConfigError
from energon_lite.kinds import resolve_path
from energon_lite.leaf import Leaf
from energon_lite.pipeline import DatasetPipeline, PipelineOptions
from energon_lite.savable_dataset import SavableDataset
from energon_lite.savable_loader import SavableLoader
from energon_lite.stages.bucket_sync import BucketSync
from energon_lite.task_encoder import DefaultTaskEncoder, TaskEncoder
from energon_lite.worker import WorkerConfig

# dataset constructors -------------------------------------------------------------------


def _leaves_for(
    path: str | os.PathLike[str], split_part: str, kwargs: dict[str, Any]
) -> tuple[list[Leaf], str]:
    path = Path(path)
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
    path: str | os.PathLike[str],
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
    BucketSync.check_option(bucket_sync, task_encoder or DefaultTaskEncoder())
    return _dataset(
        path,
        split_part,
        kwargs,
        worker_config,
        task_encoder,
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


def get_val_dataset(
    path: str | os.PathLike[str],
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
    kwargs.pop("max_samples_per_sequence", None)  # val reads contiguous ranges
    return _dataset(
        path,
        split_part,
        kwargs,
        worker_config,
        task_encoder,
        training=False,
        batch_size=batch_size,
        batch_drop_last=batch_drop_last,
        repeat=False,
        packing_buffer_size=packing_buffer_size,
        limit=limit,
        failure_tolerance=failure_tolerance,
    )


def _dataset(
    path: str | os.PathLike[str],
    split_part: str,
    kwargs: dict[str, Any],
    worker_config: WorkerConfig,
    task_encoder: TaskEncoder | None,
    **options: Any,
) -> SavableDataset:
    """Check the arguments, open the leaves and make the dataset (train and val alike)."""
    if not isinstance(worker_config, WorkerConfig):
        raise ConfigError(
            f"worker_config must be a WorkerConfig, got {type(worker_config).__name__}"
        )
    for name in ("batch_size", "shuffle_buffer_size", "packing_buffer_size", "limit",
                 "max_samples_per_sequence", "parallel_shard_iters"):  # fmt: skip
        value = options.get(name)
        minimum = 0 if name == "limit" else 1
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < minimum
        ):
            raise ConfigError(f"{name}={value!r} must be an integer >= {minimum} (or None)")
    if not isinstance(options["failure_tolerance"], int) or options["failure_tolerance"] < 0:
        raise ConfigError(f"failure_tolerance={options['failure_tolerance']!r} must be >= 0")
    leaves, mode = _leaves_for(path, split_part, kwargs)
    _check_kwargs(kwargs)
    if not options["training"] and len(leaves) > 1:
        mode = "concat"  # val/test: every dataset once, in order
    te = task_encoder if task_encoder is not None else DefaultTaskEncoder()
    pipeline = DatasetPipeline(leaves, mode, te, PipelineOptions(**options), worker_config)
    return SavableDataset(pipeline, worker_config)


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
