"""Who does what: one global worker's share of a rank's work (architecture section 4)."""

from __future__ import annotations

from energon_lite.errors import ConfigError
from energon_lite.quotas import share  # one worker's share of a count: the core's rule

__all__ = ["local_worker", "share"]


def local_worker(
    global_worker_id: int, num_global_workers: int, rank: int, world_size: int
) -> tuple[int, int]:
    """``(worker_id, num_workers)`` of global worker ``g = rank * num_workers + worker_id``."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ConfigError(f"{rank=} must be in [0, {world_size=})")
    if num_global_workers < world_size or num_global_workers % world_size:
        raise ConfigError(f"{num_global_workers=} must be a multiple of {world_size=}")
    num_workers = num_global_workers // world_size
    worker_id = global_worker_id - rank * num_workers
    if not 0 <= worker_id < num_workers:
        raise ConfigError(
            f"global_worker_id={global_worker_id} is not a worker of {rank=} "
            f"(its workers are {rank * num_workers}..{(rank + 1) * num_workers - 1})"
        )
    return worker_id, num_workers
