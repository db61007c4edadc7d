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
from typing import TYPE_CHECKING, Any

from energon_lite.errors import MAX_SKIP_FRACTION, ConfigError, check_skip_fraction, short_repr
from energon_lite.loader.canonical import canonical_for
from energon_lite.loader.healing import DEFAULT_WINDOW_S
from energon_lite.loader.savable_dataset import SavableDataset
from energon_lite.loader.savable_loader import SavableLoader
from energon_lite.pipeline.dataset_pipeline import DatasetPipeline, PipelineOptions
from energon_lite.samples.type_check import check_sample_type
from energon_lite.sources.kinds import resolve_path
from energon_lite.sources.leaf import Leaf
from energon_lite.storage import RemotePath, as_path, is_remote
from energon_lite.storage.cache_config import ShardCacheConfig, announce_shard_cache
from energon_lite.task_encoder.base import DefaultTaskEncoder, TaskEncoder
from energon_lite.worker import WorkerConfig

if TYPE_CHECKING:  # the cookers' cache (and the storage it reads) loads only when one is given
    from energon_lite.cache.base import CachePool

# dataset constructors -------------------------------------------------------------------

DatasetPath = str | os.PathLike[str] | RemotePath | Mapping[str, Any]


def _leaves_for(
    given: DatasetPath,
    split_part: str,
    subflavors: dict[str, Any] | None,
    split_config: str | None,
    dataset_config: str | None,
    shuffle_over_epochs_multiplier: int | None,
) -> tuple[list[Leaf], str]:
    meta: Any = given  # a metadataset YAML, or its content as a mapping (given in code)
    multiplier = shuffle_over_epochs_multiplier  # None: slices in order, as in Energon
    path = Path.cwd() if isinstance(given, Mapping) else as_path(given)
    if isinstance(given, Mapping) or (path.suffix in (".yaml", ".yml") and path.is_file()):
        from energon_lite.metadataset.parse import load_metadataset

        per_leaf = [
            name
            for name, value in (
                ("dataset_config", dataset_config),
                ("split_config", split_config),
                ("subflavors", subflavors),
            )
            if value is not None
        ]
        if per_leaf:
            raise ConfigError(
                f"{path}: set {per_leaf} per dataset inside the metadataset, not as arguments"
            )
        return load_metadataset(meta, split_part, multiplier)
    if not path.exists():
        raise ConfigError(f"dataset path {path} does not exist")
    path = resolve_path(path)  # e.g. a video-text CSV -> the folder it was prepared into
    leaf = Leaf(
        path,
        split_part,
        subflavors=subflavors,
        split_config=split_config or "split.yaml",
        dataset_config=dataset_config or "dataset.yaml",
        shuffle_over_epochs_multiplier=multiplier,
    )
    return [leaf], "single"


def refuse_unknown(unknown: Mapping[str, Any], what: str = "arguments") -> None:
    """Arguments a function does not take: a ConfigError naming them."""
    if unknown:
        raise ConfigError(f"unknown {what} {sorted(unknown)}")


def get_train_dataset(
    path: DatasetPath,
    *,
    split_part: str = "train",
    worker_config: WorkerConfig,
    batch_size: int | None,
    batch_drop_last: bool = False,
    packing_buffer_size: int | None = None,
    shuffle_buffer_size: int | None,
    max_samples_per_sequence: int | None,
    virtual_epoch_length: int = 0,
    shuffle_over_epochs_multiplier: int | None = 1,
    task_encoder: TaskEncoder | None = None,
    repeat: bool = True,
    subflavors: dict[str, Any] | None = None,
    split_config: str | None = None,
    dataset_config: str | None = None,
    sample_type: Any = None,
    parallel_shard_iters: int | None = None,
    failure_tolerance: int = 100,
    max_skip_fraction: float | None = MAX_SKIP_FRACTION,
    bucket_sync: dict[str, Any] | None = None,
    shard_cache: ShardCacheConfig | None = None,
    canonical_layout: tuple[int, int] | None = None,
    **unknown: Any,
) -> SavableDataset:
    """The training dataset of a prepared dataset folder or a metadataset YAML.

    Samples are shuffled (slice order per epoch, ``parallel_shard_iters`` open slices per
    worker, a ``shuffle_buffer_size`` buffer), encoded, optionally packed, batched and
    batch-encoded. ``repeat=False`` ends after one epoch; ``virtual_epoch_length`` (0: off)
    ends a loader pass after that many batches, the next pass continuing the stream.
    ``subflavors``, ``split_config`` and ``dataset_config`` apply to a dataset folder (a
    metadataset sets them per dataset); ``sample_type`` is checked against the dataset's, as
    Energon does. ``failure_tolerance`` bounds the
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
    refuse_unknown(unknown)
    default_sync = getattr(task_encoder, "default_bucket_sync", None)  # VideoTextTaskEncoder
    if (
        bucket_sync is None
        and default_sync is not None
        and not isinstance(path, Mapping)
        and as_path(path).exists()
    ):
        bucket_sync = default_sync(path, split_part)
    if bucket_sync is not None:  # its module loads only for a loader that uses it
        from energon_lite.stages.bucket_sync import BucketSync

        BucketSync.check_option(bucket_sync, task_encoder or DefaultTaskEncoder())
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
        max_skip_fraction=max_skip_fraction,
        bucket_sync=bucket_sync,
    )
    _check_options(options, worker_config)  # before canonical_for reads them
    options.canonical_layout = canonical_for(
        canonical_layout, worker_config, batch_size, task_encoder, bucket_sync
    )
    leaves, mode = _leaves_for(
        path, split_part, subflavors, split_config, dataset_config, shuffle_over_epochs_multiplier
    )
    return _dataset(
        leaves,
        mode,
        worker_config,
        task_encoder,
        options,
        sample_type,
        virtual_epoch_length=virtual_epoch_length or None,  # Energon: 0 = off
        shard_cache=shard_cache,
    )


def get_val_dataset(
    path: DatasetPath,
    *,
    split_part: str = "val",
    worker_config: WorkerConfig,
    batch_size: int | None,
    batch_drop_last: bool = False,
    packing_buffer_size: int | None = None,
    limit: int | None = None,
    task_encoder: TaskEncoder | None = None,
    shuffle_over_epochs_multiplier: int | None = 1,  # a val split is read in order
    subflavors: dict[str, Any] | None = None,
    split_config: str | None = None,
    dataset_config: str | None = None,
    sample_type: Any = None,
    failure_tolerance: int = 100,
    max_skip_fraction: float | None = MAX_SKIP_FRACTION,
    shard_cache: ShardCacheConfig | None = None,
    **unknown: Any,
) -> SavableDataset:
    """The validation/test dataset: every sample once, in order, no shuffling; ``limit``
    batches per worker. The dataset arguments, bad samples and ``shard_cache`` as in
    :func:`get_train_dataset`."""
    refuse_unknown(unknown)
    options = PipelineOptions(
        training=False,
        batch_size=batch_size,
        batch_drop_last=batch_drop_last,
        repeat=False,
        packing_buffer_size=packing_buffer_size,
        limit=limit,
        failure_tolerance=failure_tolerance,
        max_skip_fraction=max_skip_fraction,
    )
    _check_options(options, worker_config)
    leaves, mode = _leaves_for(
        path, split_part, subflavors, split_config, dataset_config, shuffle_over_epochs_multiplier
    )
    if len(leaves) > 1:
        mode = "concat"  # val/test: every dataset once, in order
    return _dataset(
        leaves, mode, worker_config, task_encoder, options, sample_type, shard_cache=shard_cache
    )


def _check_options(options: PipelineOptions, worker_config: WorkerConfig) -> None:
    """The arguments every dataset checks before anything is opened (train and val alike)."""
    if not isinstance(worker_config, WorkerConfig):
        raise ConfigError(
            f"worker_config must be a WorkerConfig, got {type(worker_config).__name__}"
        )
    for name, value in (
        ("batch_size", options.batch_size),
        ("shuffle_buffer_size", options.shuffle_buffer_size),
        ("packing_buffer_size", options.packing_buffer_size),
        ("limit", options.limit),
        ("max_samples_per_sequence", options.max_samples_per_sequence),
        ("parallel_shard_iters", options.parallel_shard_iters),
    ):
        minimum = 0 if name == "limit" else 1
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < minimum
        ):
            raise ConfigError(f"{name}={value!r} must be an integer >= {minimum} (or None)")
    if not isinstance(options.failure_tolerance, int) or options.failure_tolerance < 0:
        raise ConfigError(f"failure_tolerance={options.failure_tolerance!r} must be >= 0")
    check_skip_fraction(options.max_skip_fraction)


def _dataset(
    leaves: list[Leaf],
    mode: str,
    worker_config: WorkerConfig,
    task_encoder: TaskEncoder | None,
    options: PipelineOptions,
    sample_type: Any,
    virtual_epoch_length: int | None = None,
    shard_cache: ShardCacheConfig | None = None,
) -> SavableDataset:
    """Open the leaves and make the dataset (train and val alike)."""
    if shard_cache is not None and not isinstance(shard_cache, ShardCacheConfig):
        raise ConfigError(
            f"shard_cache={short_repr(shard_cache)} must be a ShardCacheConfig(folder, limit) "
            "or None"
        )
    if shard_cache is not None:
        shard_cache.resolved()  # a bad limit is named here, not in a worker
    te = task_encoder if task_encoder is not None else DefaultTaskEncoder()
    pipeline = DatasetPipeline(leaves, mode, te, options, worker_config)
    check_sample_type(  # Energon's sample_type: checked, not converted
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


def check_loader_arguments(
    dataset: SavableDataset,
    cache_pool: CachePool | None,
    unknown: Mapping[str, Any],
    caller: str = "get_savable_loader",
) -> None:
    """``cache_pool`` goes to the task encoder; anything a loader does not take is refused
    (arguments of the dataset and the worker layout, saying where they go)."""
    if cache_pool is not None:
        from energon_lite.cache.base import CachePool  # loaded only when one is given

    if cache_pool is not None and not isinstance(cache_pool, CachePool):
        raise ConfigError(
            f"cache_pool={type(cache_pool).__name__} object: need a CachePool "
            "(FileStoreCachePool or NoCachePool)"
        )
    if cache_pool is not None:  # cookers reach it as TaskEncoder.cache, in every worker
        te = dataset.pipeline.task_encoder
        if te is None:
            raise ConfigError(f"{caller}(cache_pool=...): this dataset runs no task encoder")
        te._cache_pool = cache_pool
    layout = [name for name in ("num_workers", "rank", "world_size") if name in unknown]
    if layout:
        wc = dataset.worker_config
        raise ConfigError(
            f"{caller}({layout[0]}={short_repr(unknown[layout[0]])}): the loader takes "
            "rank, world_size and num_workers from the dataset's WorkerConfig; make the "
            "dataset with get_train_dataset(..., worker_config=WorkerConfig(rank=..., "
            f"world_size=..., num_workers=...)) (this one has rank={wc.rank}, "
            f"world_size={wc.world_size}, num_workers={wc.num_workers})"
        )
    dataset_options = sorted(name for name in unknown if name in _DATASET_OPTIONS)
    if dataset_options:
        raise ConfigError(
            f"{caller}({dataset_options[0]}=...): an argument of "
            "get_train_dataset / get_val_dataset, which made this dataset"
        )
    refuse_unknown(unknown, "loader arguments")


def get_savable_loader(
    dataset: SavableDataset,
    *,
    prefetch_factor: int | None = 2,
    cache_pool: CachePool | None = None,
    watchdog_timeout_seconds: float | None = 60,
    watchdog_initial_timeout_seconds: float | None = None,
    pin_memory: bool | None = None,
    timeout_seconds: float | None = None,
    stats: bool = False,
    reuse_batch_memory: bool = True,
    max_worker_restarts: int | None = None,
    worker_restart_window_seconds: float = DEFAULT_WINDOW_S,
    on_timeout: str = "raise",
    **unknown: Any,
) -> SavableLoader:
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
    check_loader_arguments(dataset, cache_pool, unknown)
    return SavableLoader(
        dataset,
        pin_memory=pin_memory,
        prefetch_factor=prefetch_factor,
        timeout_seconds=timeout_seconds,
        watchdog_timeout_seconds=watchdog_timeout_seconds,
        watchdog_initial_timeout_seconds=watchdog_initial_timeout_seconds,
        stats=stats,
        reuse_batch_memory=reuse_batch_memory,
        max_worker_restarts=max_worker_restarts,
        worker_restart_window_seconds=worker_restart_window_seconds,
        on_timeout=on_timeout,
    )


def get_loader(
    dataset: SavableDataset,
    *,
    prefetch_factor: int | None = 2,
    cache_pool: CachePool | None = None,
    watchdog_timeout_seconds: float | None = 60,
    watchdog_initial_timeout_seconds: float | None = None,
    pin_memory: bool | None = None,
    timeout_seconds: float | None = None,
    stats: bool = False,
    reuse_batch_memory: bool = True,
    max_worker_restarts: int | None = None,
    worker_restart_window_seconds: float = DEFAULT_WINDOW_S,
    on_timeout: str = "raise",
    **unknown: Any,
) -> SavableLoader:
    """The same batches as ``get_savable_loader`` (the same options), without the per-batch
    state bookkeeping."""
    check_loader_arguments(dataset, cache_pool, unknown, "get_loader")
    return SavableLoader(
        dataset,
        track_state=False,
        pin_memory=pin_memory,
        prefetch_factor=prefetch_factor,
        timeout_seconds=timeout_seconds,
        watchdog_timeout_seconds=watchdog_timeout_seconds,
        watchdog_initial_timeout_seconds=watchdog_initial_timeout_seconds,
        stats=stats,
        reuse_batch_memory=reuse_batch_memory,
        max_worker_restarts=max_worker_restarts,
        worker_restart_window_seconds=worker_restart_window_seconds,
        on_timeout=on_timeout,
    )
