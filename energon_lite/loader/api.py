"""Datasets and loaders: ``get_train_dataset``, ``get_val_dataset``, ``get_loader``,
``get_savable_loader`` (Energon's names; its older argument forms are taken out by
:mod:`energon_lite.compat.arguments`, whose versions of these functions are the public ones).

The dataset a worker runs is :class:`~energon_lite.loader.savable_dataset.SavableDataset`; the
loader that keeps exact state is :class:`~energon_lite.loader.savable_loader.SavableLoader`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from energon_lite.cache.base import CachePool
from energon_lite.errors import MAX_SKIP_FRACTION, ConfigError, check_skip_fraction, short_repr
from energon_lite.loader.canonical import canonical_for
from energon_lite.loader.savable_dataset import SavableDataset
from energon_lite.loader.savable_loader import SavableLoader
from energon_lite.pipeline.dataset_pipeline import DatasetPipeline, PipelineOptions
from energon_lite.samples.type_check import check_sample_type
from energon_lite.sources.kinds import resolve_path
from energon_lite.sources.leaf import Leaf
from energon_lite.stages.bucket_sync import BucketSync
from energon_lite.storage import RemotePath, as_path, is_remote
from energon_lite.storage.cache_config import ShardCacheConfig, announce_shard_cache
from energon_lite.task_encoder.base import DefaultTaskEncoder, TaskEncoder
from energon_lite.worker import WorkerConfig

# dataset constructors -------------------------------------------------------------------


def _leaves_for(
    given: str | os.PathLike[str] | RemotePath | Mapping[str, Any],
    split_part: str,
    kwargs: dict[str, Any],
) -> tuple[list[Leaf], str]:
    meta: Any = given  # a metadataset YAML, or its content as a mapping (given in code)
    path = Path.cwd() if isinstance(given, Mapping) else as_path(given)
    if isinstance(given, Mapping) or (path.suffix in (".yaml", ".yml") and path.is_file()):
        from energon_lite.metadataset.parse import load_metadataset

        per_leaf = sorted({"subflavors", "split_config", "dataset_config"} & set(kwargs))
        if per_leaf:
            raise ConfigError(
                f"{path}: set {per_leaf} per dataset inside the metadataset, not as arguments"
            )
        multiplier = kwargs.pop("shuffle_over_epochs_multiplier", 1)
        return load_metadataset(meta, split_part, multiplier)
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
    path: str | os.PathLike[str] | RemotePath | Mapping[str, Any],
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
    max_skip_fraction: float | None = MAX_SKIP_FRACTION,
    bucket_sync: dict[str, Any] | None = None,
    shard_cache: ShardCacheConfig | None = None,
    canonical_layout: tuple[int, int] | None = None,
    **kwargs: Any,
) -> SavableDataset:
    """The training dataset of a prepared dataset folder or a metadataset YAML.

    Samples are shuffled (slice order per epoch, ``parallel_shard_iters`` open slices per
    worker, a ``shuffle_buffer_size`` buffer), encoded, optionally packed, batched and
    batch-encoded. ``repeat=False`` ends after one epoch. ``failure_tolerance`` bounds the
    consecutive bad samples skipped before the run stops; ``max_skip_fraction`` bounds the
    share of a worker's samples skipped over its pass (checked from 200 samples on; None:
    not counted). A store or disk that fails stops the run at once (docs/safety.md). ``bucket_sync={"weights": {bucket:
    weight}}`` makes every rank emit the same ``batch_group_criterion`` bucket at each step
    (``energon_lite.stages.group_batch``); without it, a task encoder's
    ``default_bucket_sync(path, split_part)`` (if it has one) supplies the setting.
    ``shard_cache=ShardCacheConfig(folder, "200GB")`` reads remote shards through a
    node-local cache (default: ``ENERGON_LITE_CACHE_LIMIT``; docs/remote.md).
    ``canonical_layout=(ranks, workers)`` defines the global batches on that layout, and any
    layout whose ranks and workers divide it delivers the same ones (``batch_size`` is then
    per rank of this layout: keep ranks x batch_size; docs/resume.md); default: this layout.
    """
    virtual_epoch_length = kwargs.pop("virtual_epoch_length", None) or None  # Energon: 0 = off
    default_sync = getattr(task_encoder, "default_bucket_sync", None)  # VideoTextTaskEncoder
    if (
        bucket_sync is None
        and default_sync is not None
        and not isinstance(path, Mapping)
        and as_path(path).exists()
    ):
        bucket_sync = default_sync(path, split_part)
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
        max_skip_fraction=max_skip_fraction,
        bucket_sync=bucket_sync,
        virtual_epoch_length=virtual_epoch_length,
        shard_cache=shard_cache,
        canonical_layout=canonical_for(
            canonical_layout, worker_config, batch_size, task_encoder, bucket_sync
        ),
    )


def get_val_dataset(
    path: str | os.PathLike[str] | RemotePath | Mapping[str, Any],
    *,
    worker_config: WorkerConfig,
    batch_size: int | None,
    split_part: str = "val",
    batch_drop_last: bool = False,
    packing_buffer_size: int | None = None,
    limit: int | None = None,
    task_encoder: TaskEncoder | None = None,
    failure_tolerance: int = 100,
    max_skip_fraction: float | None = MAX_SKIP_FRACTION,
    shard_cache: ShardCacheConfig | None = None,
    **kwargs: Any,
) -> SavableDataset:
    """The validation/test dataset: every sample once, in order, no shuffling; ``limit``
    batches per worker. Bad samples and ``shard_cache`` as in :func:`get_train_dataset`."""
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
        max_skip_fraction=max_skip_fraction,
        shard_cache=shard_cache,
    )


def _dataset(
    path: str | os.PathLike[str] | RemotePath | Mapping[str, Any],
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
    check_skip_fraction(options["max_skip_fraction"])
    shard_cache = options.pop("shard_cache", None)
    if shard_cache is not None and not isinstance(shard_cache, ShardCacheConfig):
        raise ConfigError(
            f"shard_cache={short_repr(shard_cache)} must be a ShardCacheConfig(folder, limit) "
            "or None"
        )
    if shard_cache is not None:
        shard_cache.resolved()  # a bad limit is named here, not in a worker
    te = task_encoder if task_encoder is not None else DefaultTaskEncoder()
    sample_type = kwargs.pop("sample_type", None)  # Energon's: checked, not converted
    leaves, mode = _leaves_for(path, split_part, kwargs)
    _check_kwargs(kwargs)
    if not options["training"] and len(leaves) > 1:
        mode = "concat"  # val/test: every dataset once, in order
    virtual_epoch_length = options.pop("virtual_epoch_length", None)
    pipeline = DatasetPipeline(leaves, mode, te, PipelineOptions(**options), worker_config)
    check_sample_type(
        sample_type, [(str(lf.path), sp.factory) for lf, sp in zip(leaves, pipeline.specs)]
    )
    if any(is_remote(leaf.path) for leaf in leaves):
        announce_shard_cache(shard_cache)
    return SavableDataset(pipeline, worker_config, virtual_epoch_length, shard_cache)


# arguments of get_train_dataset / get_val_dataset that people also try on the loader
_DATASET_OPTIONS = frozenset(
    ("batch_size", "shuffle_buffer_size", "max_samples_per_sequence", "task_encoder",
     "split_part", "packing_buffer_size", "limit", "repeat", "virtual_epoch_length")
)  # fmt: skip


def check_loader_options(
    dataset: SavableDataset, options: dict[str, Any], caller: str = "get_savable_loader"
) -> dict[str, Any]:
    """``get_(savable_)loader``'s options -> SavableLoader's: ``cache_pool`` goes to the task
    encoder; anything unknown is refused (arguments of the dataset, saying where they go)."""
    cache_pool = options.pop("cache_pool", None)
    if cache_pool is not None and not isinstance(cache_pool, CachePool):
        raise ConfigError(
            f"cache_pool={type(cache_pool).__name__} object: need a CachePool "
            "(FileStoreCachePool or NoCachePool)"
        )
    if cache_pool is not None:  # cookers reach it as TaskEncoder.cache, in every worker
        dataset.pipeline.task_encoder._cache_pool = cache_pool  # type: ignore[attr-defined]
    known = {"pin_memory", "prefetch_factor", "timeout_seconds", "watchdog_timeout_seconds",
             "watchdog_initial_timeout_seconds", "stats", "reuse_batch_memory",
             "max_worker_restarts", "worker_restart_window_seconds", "on_timeout"}  # fmt: skip
    unknown = sorted(set(options) - known)
    layout = [name for name in ("num_workers", "rank", "world_size") if name in options]
    if layout:
        wc = dataset.worker_config
        raise ConfigError(
            f"{caller}({layout[0]}={short_repr(options[layout[0]])}): the loader takes "
            "rank, world_size and num_workers from the dataset's WorkerConfig; make the "
            "dataset with get_train_dataset(..., worker_config=WorkerConfig(rank=..., "
            f"world_size=..., num_workers=...)) (this one has rank={wc.rank}, "
            f"world_size={wc.world_size}, num_workers={wc.num_workers})"
        )
    dataset_options = [name for name in unknown if name in _DATASET_OPTIONS]
    if dataset_options:
        raise ConfigError(
            f"{caller}({dataset_options[0]}=...): an argument of "
            "get_train_dataset / get_val_dataset, which made this dataset"
        )
    if unknown:
        raise ConfigError(f"unknown loader arguments {unknown}")
    return options


def get_savable_loader(dataset: SavableDataset, **options: Any) -> SavableLoader:
    """A loader that can ``save_state_rank()`` / ``restore_state_rank()``.

    Options: ``pin_memory`` (default: when CUDA is available), ``prefetch_factor`` (2),
    ``timeout_seconds`` (raise when a worker takes longer for one batch; default: wait),
    ``watchdog_timeout_seconds`` (60; a worker that makes no progress that long logs its
    stage, sample key and stack; None turns the watchdog off) and
    ``watchdog_initial_timeout_seconds`` (for the first batch; default twice the timeout).
    Energon's ``fail_on_timeout=True`` makes the trainer raise after
    ``watchdog_timeout_seconds``; its checkpoint and gc knobs have nothing to tune here
    (both taken by ``energon_lite.get_savable_loader``, :mod:`energon_lite.compat.arguments`);
    ``cache_pool`` (a ``FileStoreCachePool``) is what cookers get as ``cache``.
    ``stats=True`` makes ``loader.stats()`` report where the time goes (per-stage time and
    counts, buffer fill, worker busy/idle, samples/s; overhead < 1%, docs/performance.md).
    ``reuse_batch_memory`` (True): workers build batches in shared-memory buffers they reuse
    once the trainer has dropped every tensor of a batch, instead of fresh ones per batch
    (:mod:`energon_lite.batching.memory`; False gives torch's behaviour).
    ``max_worker_restarts`` (3) within ``worker_restart_window_seconds`` (3600): a worker
    process that dies is replaced and the stream continues exactly, each sample once; 0
    stops the run instead. ``on_timeout="restart"`` (Energon's form:
    ``fail_on_timeout="restart"``) replaces a worker that gives no batch within
    ``timeout_seconds`` the same way (:mod:`energon_lite.loader.healing`).
    """
    return SavableLoader(dataset, **check_loader_options(dataset, options))


def get_loader(dataset: SavableDataset, **options: Any) -> SavableLoader:
    """The same batches as ``get_savable_loader``, without the per-batch state bookkeeping."""
    return SavableLoader(
        dataset, track_state=False, **check_loader_options(dataset, options, "get_loader")
    )
