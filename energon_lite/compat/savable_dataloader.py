"""``SavableDataLoader``: energon_lite's ``SavableLoader`` under Energon's name and arguments."""

from __future__ import annotations

from typing import Any

from energon_lite.cache.base import CachePool
from energon_lite.compat.arguments import (
    GC_DEFAULT_EVERY_N_ITER,
    WATCHDOG_DEFAULT_S,
    energon_timeouts,
    watched,
)
from energon_lite.loader.api import SavableDataset, SavableLoader, check_loader_arguments
from energon_lite.loader.healing import DEFAULT_WINDOW_S
from energon_lite.worker import WorkerConfig


class SavableDataLoader(SavableLoader):
    """``SavableDataLoader(dataset, ...)`` as in Energon.

    Takes the arguments ``get_savable_loader`` takes (Energon's checkpoint and gc knobs are
    accepted and have nothing to tune) and saves/restores exactly with ``save_state_rank()``
    / ``restore_state_rank()``.
    """

    def __init__(
        self,
        dataset: SavableDataset,
        *,
        worker_config: WorkerConfig | None = None,
        gc_collect_every_n_steps: int = GC_DEFAULT_EVERY_N_ITER,
        gc_freeze_at_start: bool = True,
        checkpoint_every_sec: float = 60,
        checkpoint_every_min_n_samples: int | None = None,
        n_checkpoints: int | None = None,
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
    ) -> None:
        check_loader_arguments(dataset, cache_pool, unknown, "SavableDataLoader")
        timeout_seconds, on_timeout = energon_timeouts(
            dataset, worker_config, fail_on_timeout, timeout_seconds, watchdog_timeout_seconds,
            on_timeout,
        )  # fmt: skip
        super().__init__(
            watched(
                dataset, watchdog_timeout_seconds, watchdog_initial_timeout_seconds, fail_on_timeout
            ),
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
