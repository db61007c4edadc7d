"""``WorkerConfig``: where this process sits among data-parallel ranks and loader workers.

It lives in the trainer's process and the loader; stages never see it. Each worker's chain
gets a ``WorkerSlot`` of plain integers instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from energon_lite.errors import ConfigError, log_exception, reraise_exception

ErrorHandler = Callable[[Exception, Any, Any], None]


@dataclass(slots=True)  # Energon's slots; positional arguments are accepted too
class WorkerConfig:
    """Energon's worker configuration: rank and world size of the data-parallel group,
    loader worker processes per rank, and the seed (``seed_offset``)."""

    rank: int
    world_size: int
    num_workers: int
    data_parallel_group: Any = None
    seed_offset: int = 0
    worker_debug_path: str | None = None  # Energon's; only the default is supported
    worker_log_level: int = 0  # Energon's; only the default is supported
    # Energon's error handlers: called as handler(exception, sample, sources) for a sample
    # that fails while iterating / while being fetched again on restore.
    global_error_handler: ErrorHandler = log_exception
    restore_error_handler: ErrorHandler = reraise_exception

    def __post_init__(self) -> None:
        if self.worker_debug_path is not None or self.worker_log_level != 0:
            raise ConfigError(
                "WorkerConfig: Energon's worker_debug_path/worker_log_level sample logs are not "
                "supported; `energon-lite checkpoint info` shows where each worker is"
            )
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ConfigError(
                "WorkerConfig: need 0 <= rank < world_size, got "
                f"rank={self.rank!r}, world_size={self.world_size!r}"
            )
        if self.num_workers < 0:
            raise ConfigError(f"WorkerConfig: num_workers={self.num_workers!r} must be >= 0")

    @staticmethod
    def default_worker_config(
        num_workers: int = 4, data_parallel_group: Any = None
    ) -> WorkerConfig:
        """Rank and world size from ``torch.distributed`` when initialised, else 0 and 1."""
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            rank = dist.get_rank(data_parallel_group)
            world_size = dist.get_world_size(data_parallel_group)
        else:
            rank, world_size = 0, 1
        return WorkerConfig(rank, world_size, num_workers, data_parallel_group)

    def config(self) -> dict[str, Any]:
        """Energon's summary of the configuration (rank, world size, workers, group size)."""
        group = self.data_parallel_group
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "num_workers": self.num_workers,
            "data_parallel_group": group.size() if group is not None else None,
        }

    @property
    def workers_per_rank(self) -> int:
        """Worker pipelines per rank: ``num_workers``, or 1 for in-process loading."""
        return max(1, self.num_workers)

    def slot(self, worker_id: int, epoch: int = 0) -> WorkerSlot:
        return WorkerSlot(
            self.rank, self.world_size, worker_id, self.workers_per_rank, self.seed_offset, epoch
        )


@dataclass(frozen=True)
class WorkerSlot:
    """One worker pipeline's place: the only worker facts a pipeline is built from."""

    rank: int
    world_size: int
    worker_id: int
    num_workers: int  # pipelines per rank (>= 1)
    seed: int
    epoch: int = 0
    leaf_base: int = 0  # first leaf id of this chain (a wrapper composing several datasets)

    @property
    def global_worker_id(self) -> int:
        return self.rank * self.num_workers + self.worker_id

    @property
    def num_global_workers(self) -> int:
        return self.world_size * self.num_workers
