"""Energon's argument forms of the entry points, mapped onto energon_lite's own.

``energon_lite.get_train_dataset``, ``get_val_dataset``, ``get_loader`` and
``get_savable_loader`` take :mod:`energon_lite.loader.api`'s arguments (documented there) and
Energon's, each a named parameter with Energon's default, and hand the core typed values:

* a dataset's deprecated decoder arguments (``image_decode``, ``av_decode``,
  ``video_decode_audio``) become the task encoder's ``decoder`` with a ``FutureWarning``;
  ``auto_decode=False`` makes it None; ``handler`` and ``ignore_decoder_errors`` are
  ignored with a warning (bad samples are skipped up to ``failure_tolerance``);
  ``get_val_dataset`` ignores ``max_samples_per_sequence`` (validation reads contiguous
  ranges);
* a loader's ``worker_config`` must be the dataset's; ``fail_on_timeout=True`` makes the
  trainer raise after ``watchdog_timeout_seconds`` (``"restart"``: replace the stalled
  worker, :mod:`energon_lite.loader.healing`); the checkpoint and gc knobs have nothing
  to tune (the state is exact after every batch, workers hold no garbage to collect).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from energon_lite.decode import SampleDecoder
from energon_lite.errors import MAX_SKIP_FRACTION, ConfigError
from energon_lite.loader import api
from energon_lite.loader.api import DatasetPath, check_loader_arguments, refuse_unknown
from energon_lite.loader.healing import DEFAULT_WINDOW_S
from energon_lite.loader.savable_dataset import SavableDataset
from energon_lite.loader.savable_loader import SavableLoader
from energon_lite.loader.watchdog_dataset import WatchdogDataset
from energon_lite.storage.cache_config import ShardCacheConfig
from energon_lite.task_encoder.base import DefaultTaskEncoder, TaskEncoder
from energon_lite.worker import WorkerConfig

if TYPE_CHECKING:
    from energon_lite.cache.base import CachePool

# where a warning points: the caller of the public function (decoder_arguments <- public)
_CALLER = 3
GC_DEFAULT_EVERY_N_ITER = 10  # Energon's default of gc_collect_every_n_steps (nothing to tune)
WATCHDOG_DEFAULT_S = 60  # Energon's default of watchdog_timeout_seconds


def decoder_arguments(
    task_encoder: TaskEncoder | None,
    auto_decode: bool = True,
    image_decode: Any = None,
    av_decode: Any = None,
    video_decode_audio: bool | None = None,
    handler: Any = None,
    ignore_decoder_errors: bool | None = None,
) -> TaskEncoder | None:
    """The task encoder with Energon's deprecated decoder arguments applied (see the module
    docstring): a new ``DefaultTaskEncoder`` when none was given and they change its decoder."""
    for name, value in (("handler", handler), ("ignore_decoder_errors", ignore_decoder_errors)):
        if value is not None:
            warnings.warn(
                f"get_train_dataset({name}=...) is Energon's deprecated argument and is ignored: "
                "bad samples are skipped and logged up to failure_tolerance",
                FutureWarning,
                stacklevel=_CALLER,
            )
    given: dict[str, Any] = {
        name: value
        for name, value in (
            ("image_decode", image_decode),
            ("av_decode", av_decode),
            ("video_decode_audio", video_decode_audio),
        )
        if value is not None
    }
    if auto_decode and not given:
        return task_encoder
    if task_encoder is None:
        task_encoder = DefaultTaskEncoder()
    if not auto_decode:
        task_encoder.decoder = None
        return task_encoder
    warnings.warn(
        f"get_train_dataset({', '.join(given)}) is Energon's deprecated form; set "
        f"`decoder = SampleDecoder({', '.join(f'{k}={v!r}' for k, v in given.items())})` "
        "on your TaskEncoder instead",
        FutureWarning,
        stacklevel=_CALLER,
    )
    decoder = SampleDecoder(**given)
    current = task_encoder.decoder
    if current is not None and current != TaskEncoder.decoder and current != decoder:
        raise ConfigError(
            f"{type(task_encoder).__name__} already has decoder {current}; the "
            f"arguments {given} ask for another one"
        )
    task_encoder.decoder = decoder
    return task_encoder


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
    auto_decode: bool = True,
    image_decode: Any = None,
    av_decode: Any = None,
    video_decode_audio: bool | None = None,
    handler: Any = None,
    ignore_decoder_errors: bool | None = None,
    **unknown: Any,
) -> SavableDataset:
    """The training dataset of a prepared dataset folder or a metadataset YAML: see
    :func:`energon_lite.loader.api.get_train_dataset` for every argument. Energon's
    deprecated decoder arguments (``auto_decode``, ``image_decode``, ``av_decode``,
    ``video_decode_audio``; ``handler`` and ``ignore_decoder_errors`` are ignored with a
    warning) set the task encoder's ``decoder`` (module docstring)."""
    refuse_unknown(unknown)
    task_encoder = decoder_arguments(
        task_encoder, auto_decode, image_decode, av_decode, video_decode_audio, handler,
        ignore_decoder_errors,
    )  # fmt: skip
    return api.get_train_dataset(
        path,
        split_part=split_part,
        worker_config=worker_config,
        batch_size=batch_size,
        batch_drop_last=batch_drop_last,
        packing_buffer_size=packing_buffer_size,
        shuffle_buffer_size=shuffle_buffer_size,
        max_samples_per_sequence=max_samples_per_sequence,
        virtual_epoch_length=virtual_epoch_length,
        shuffle_over_epochs_multiplier=shuffle_over_epochs_multiplier,
        task_encoder=task_encoder,
        repeat=repeat,
        subflavors=subflavors,
        split_config=split_config,
        dataset_config=dataset_config,
        sample_type=sample_type,
        parallel_shard_iters=parallel_shard_iters,
        failure_tolerance=failure_tolerance,
        max_skip_fraction=max_skip_fraction,
        bucket_sync=bucket_sync,
        shard_cache=shard_cache,
        canonical_layout=canonical_layout,
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
    shuffle_over_epochs_multiplier: int | None = 1,
    max_samples_per_sequence: int | None = None,
    subflavors: dict[str, Any] | None = None,
    split_config: str | None = None,
    dataset_config: str | None = None,
    sample_type: Any = None,
    failure_tolerance: int = 100,
    max_skip_fraction: float | None = MAX_SKIP_FRACTION,
    shard_cache: ShardCacheConfig | None = None,
    auto_decode: bool = True,
    image_decode: Any = None,
    av_decode: Any = None,
    video_decode_audio: bool | None = None,
    handler: Any = None,
    ignore_decoder_errors: bool | None = None,
    **unknown: Any,
) -> SavableDataset:
    """The validation/test dataset: see :func:`energon_lite.loader.api.get_val_dataset`.
    ``max_samples_per_sequence`` is ignored (validation reads contiguous ranges); Energon's
    decoder arguments as in :func:`get_train_dataset`."""
    refuse_unknown(unknown)
    task_encoder = decoder_arguments(
        task_encoder, auto_decode, image_decode, av_decode, video_decode_audio, handler,
        ignore_decoder_errors,
    )  # fmt: skip
    return api.get_val_dataset(
        path,
        split_part=split_part,
        worker_config=worker_config,
        batch_size=batch_size,
        batch_drop_last=batch_drop_last,
        packing_buffer_size=packing_buffer_size,
        limit=limit,
        task_encoder=task_encoder,
        shuffle_over_epochs_multiplier=shuffle_over_epochs_multiplier,
        subflavors=subflavors,
        split_config=split_config,
        dataset_config=dataset_config,
        sample_type=sample_type,
        failure_tolerance=failure_tolerance,
        max_skip_fraction=max_skip_fraction,
        shard_cache=shard_cache,
    )


def energon_timeouts(
    dataset: SavableDataset,
    worker_config: WorkerConfig | None,
    fail_on_timeout: bool | str,
    timeout_seconds: float | None,
    watchdog_timeout_seconds: float | None,
    on_timeout: str,
) -> tuple[float | None, str]:
    """``(timeout_seconds, on_timeout)`` after Energon's loader forms: ``worker_config`` must
    be the dataset's; ``fail_on_timeout`` True raises after ``watchdog_timeout_seconds``,
    ``"restart"`` replaces the stalled worker."""
    if worker_config is not None and worker_config != dataset.worker_config:
        raise ConfigError(
            f"get_loader(worker_config={worker_config}) differs from the dataset's "
            f"{dataset.worker_config}; pass the same one (or none)"
        )
    if fail_on_timeout not in (True, False, "restart"):
        raise ConfigError(
            f"fail_on_timeout={fail_on_timeout!r}: use True (raise), 'restart' (replace the "
            "stalled worker) or False"
        )
    if fail_on_timeout and timeout_seconds is None:  # the watchdog raises, or restarts
        timeout_seconds = watchdog_timeout_seconds
    if fail_on_timeout == "restart" and on_timeout == "raise":
        on_timeout = "restart"
    return timeout_seconds, on_timeout


def watched(
    dataset: SavableDataset,
    watchdog_timeout_seconds: float | None,
    watchdog_initial_timeout_seconds: float | None,
    fail_on_timeout: bool | str,
) -> SavableDataset:
    """``dataset`` in a ``WatchdogDataset`` when the watchdog is set other than by default,
    as Energon's loaders wrap it (its ``_watchdog_trigger`` then runs on a stall)."""
    default = (
        watchdog_timeout_seconds == WATCHDOG_DEFAULT_S
        and watchdog_initial_timeout_seconds is None
        and not fail_on_timeout
    )
    if watchdog_timeout_seconds is None or default or isinstance(dataset, WatchdogDataset):
        return dataset
    return WatchdogDataset(
        dataset,
        dataset.worker_config,
        timeout_seconds=watchdog_timeout_seconds,
        initial_timeout_seconds=watchdog_initial_timeout_seconds,
        fail_on_timeout=bool(fail_on_timeout),
    )


def get_savable_loader(
    dataset: SavableDataset,
    *,
    worker_config: WorkerConfig | None = None,
    checkpoint_every_sec: float = 60,
    checkpoint_every_min_n_samples: int | None = None,
    n_checkpoints: int | None = None,
    gc_collect_every_n_steps: int = GC_DEFAULT_EVERY_N_ITER,
    gc_freeze_at_step: int | None = None,
    prefetch_factor: int | None = 2,
    cache_pool: CachePool | None = None,
    watchdog_timeout_seconds: float | None = WATCHDOG_DEFAULT_S,
    watchdog_initial_timeout_seconds: float | None = None,
    fail_on_timeout: bool | str = False,
    pin_memory: bool | None = None,
    timeout_seconds: float | None = None,
    stats: bool = False,
    reuse_batch_memory: bool = True,
    max_worker_restarts: int | None = None,
    worker_restart_window_seconds: float = DEFAULT_WINDOW_S,
    on_timeout: str = "raise",
    **unknown: Any,
) -> SavableLoader:
    """A loader that can ``save_state_rank()`` / ``restore_state_rank()``: see
    :func:`energon_lite.loader.api.get_savable_loader` for the options. Energon's
    ``worker_config`` must be the dataset's; ``fail_on_timeout`` as in the module docstring;
    the checkpoint and gc knobs have nothing to tune (the state is exact after every batch,
    workers hold no garbage to collect)."""
    check_loader_arguments(dataset, None, unknown)
    timeout_seconds, on_timeout = energon_timeouts(
        dataset, worker_config, fail_on_timeout, timeout_seconds, watchdog_timeout_seconds,
        on_timeout,
    )  # fmt: skip
    return api.get_savable_loader(
        watched(
            dataset, watchdog_timeout_seconds, watchdog_initial_timeout_seconds, fail_on_timeout
        ),
        prefetch_factor=prefetch_factor,
        cache_pool=cache_pool,
        watchdog_timeout_seconds=watchdog_timeout_seconds,
        watchdog_initial_timeout_seconds=watchdog_initial_timeout_seconds,
        pin_memory=pin_memory,
        timeout_seconds=timeout_seconds,
        stats=stats,
        reuse_batch_memory=reuse_batch_memory,
        max_worker_restarts=max_worker_restarts,
        worker_restart_window_seconds=worker_restart_window_seconds,
        on_timeout=on_timeout,
    )


def get_loader(
    dataset: SavableDataset,
    *,
    worker_config: WorkerConfig | None = None,
    prefetch_factor: int | None = 2,
    cache_pool: CachePool | None = None,
    watchdog_timeout_seconds: float | None = WATCHDOG_DEFAULT_S,
    watchdog_initial_timeout_seconds: float | None = None,
    fail_on_timeout: bool | str = False,
    checkpoint_every_sec: float = 60,
    checkpoint_every_min_n_samples: int | None = None,
    n_checkpoints: int | None = None,
    gc_collect_every_n_steps: int = GC_DEFAULT_EVERY_N_ITER,
    gc_freeze_at_step: int | None = None,
    pin_memory: bool | None = None,
    timeout_seconds: float | None = None,
    stats: bool = False,
    reuse_batch_memory: bool = True,
    max_worker_restarts: int | None = None,
    worker_restart_window_seconds: float = DEFAULT_WINDOW_S,
    on_timeout: str = "raise",
    **unknown: Any,
) -> SavableLoader:
    """The same batches as :func:`get_savable_loader` (the same arguments), without the
    per-batch state bookkeeping."""
    check_loader_arguments(dataset, None, unknown, "get_loader")
    timeout_seconds, on_timeout = energon_timeouts(
        dataset, worker_config, fail_on_timeout, timeout_seconds, watchdog_timeout_seconds,
        on_timeout,
    )  # fmt: skip
    return api.get_loader(
        watched(
            dataset, watchdog_timeout_seconds, watchdog_initial_timeout_seconds, fail_on_timeout
        ),
        prefetch_factor=prefetch_factor,
        cache_pool=cache_pool,
        watchdog_timeout_seconds=watchdog_timeout_seconds,
        watchdog_initial_timeout_seconds=watchdog_initial_timeout_seconds,
        pin_memory=pin_memory,
        timeout_seconds=timeout_seconds,
        stats=stats,
        reuse_batch_memory=reuse_batch_memory,
        max_worker_restarts=max_worker_restarts,
        worker_restart_window_seconds=worker_restart_window_seconds,
        on_timeout=on_timeout,
    )
