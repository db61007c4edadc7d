"""``WorkerConfig``: where this process sits among data-parallel ranks and loader workers.

It lives in the trainer's process and the loader; stages never see it. Each worker's chain
gets a ``WorkerSlot`` of plain integers instead.

Energon's debug sample logs: with ``worker_log_level >= 1``, ``worker_log`` writes one JSON
line per event to ``worker_debug_path`` (formatted with ``worker_id`` and ``pid``; printed
to stdout when no path is given). The main process of rank ``r`` is ``worker_id``
``r * (num_workers + 1)``, its loader worker ``w`` is that plus ``w + 1``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

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
    # Energon's debug sample logs (module doc): a path with {worker_id} (and {pid}), a level
    worker_debug_path: str | None = None
    worker_log_level: int = 0
    # Energon's error handlers: called as handler(exception, sample, sources) for a sample
    # that fails while iterating / while being fetched again on restore.
    global_error_handler: ErrorHandler = log_exception
    restore_error_handler: ErrorHandler = reraise_exception

    def __post_init__(self) -> None:
        if isinstance(self.worker_log_level, bool) or not isinstance(self.worker_log_level, int):
            raise ConfigError(
                f"WorkerConfig: worker_log_level={self.worker_log_level!r} must be an integer "
                "(0: no logs, 1: each batch, 2: more)"
            )
        if self.worker_debug_path is not None and "{worker_id}" not in self.worker_debug_path:
            raise ConfigError(
                f"WorkerConfig: worker_debug_path={self.worker_debug_path!r} needs "
                "'{worker_id}' in it, so that each process writes its own file"
            )
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ConfigError(
                "WorkerConfig: need 0 <= rank < world_size, got "
                f"rank={self.rank!r}, world_size={self.world_size!r}"
            )
        if self.num_workers < 0:
            raise ConfigError(f"WorkerConfig: num_workers={self.num_workers!r} must be >= 0")

    def should_log(self, level: int) -> bool:
        """Whether events of ``level`` are logged (Energon's)."""
        return level <= self.worker_log_level

    def debug_worker_id(self) -> int:
        """This process's ``worker_id`` in the debug log: the rank's main process first,
        then its loader workers."""
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        return self.rank * (self.num_workers + 1) + (0 if info is None else info.id + 1)

    def worker_log(self, data: dict[str, Any]) -> None:
        """Write ``data`` as one JSON line to this process's debug log (Energon's)."""
        line = json.dumps(data, default=str) + "\n"
        if self.worker_debug_path is None:
            print(line, end="", flush=True)
            return
        worker_id = self.debug_worker_id()
        path = Path(self.worker_debug_path.format(worker_id=worker_id, pid=os.getpid()))
        file = _debug_file(path, in_worker=worker_id % (self.num_workers + 1) != 0)
        file.write(line)
        file.flush()

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


@dataclass(frozen=True)
class CanonicalLayout:
    """The ``ranks`` x ``workers`` layout that defines a run's global batches.

    Its ``ranks * workers`` logical pipelines are the global workers of the canonical run,
    each with its own stream and state. A physical layout of R ranks x W workers (0 workers
    count as 1) runs them all when R divides ``ranks`` and W divides ``workers``: rank r
    runs the canonical ranks ``r * ranks / R ...`` (a contiguous block) and loader worker w
    the canonical workers ("phases") ``w, w + W, w + 2W ...``; at each step a rank merges
    one batch of each of its canonical ranks' pipelines of the step's phase.
    """

    ranks: int
    workers: int

    def reproduced_by(self, world_size: int, num_workers: int) -> bool:
        """Whether ``world_size`` ranks x ``num_workers`` workers reproduce this layout."""
        return self.ranks % world_size == 0 and self.workers % max(1, num_workers) == 0

    def ranks_of(self, rank: int, world_size: int) -> range:
        """The canonical ranks that physical ``rank`` of ``world_size`` runs."""
        per = self.ranks // world_size
        return range(rank * per, (rank + 1) * per)

    def phases_of(self, worker_id: int, workers_per_rank: int) -> range:
        """The canonical workers (phases) that loader worker ``worker_id`` runs, in turn."""
        return range(worker_id, self.workers, workers_per_rank)

    def slots(self, slot: WorkerSlot) -> list[WorkerSlot]:
        """The canonical pipelines a physical ``slot`` runs, phase by phase, each phase's
        canonical ranks in order (``len(ranks_of)`` pipelines per phase)."""
        return [
            WorkerSlot(k, self.ranks, q, self.workers, slot.seed, slot.epoch, slot.leaf_base)
            for q in self.phases_of(slot.worker_id, slot.num_workers)
            for k in self.ranks_of(slot.rank, slot.world_size)
        ]


def _debug_file(path: Path, in_worker: bool) -> TextIO:
    """The open debug log at ``path`` of this process, held by its storage session (a forked
    child's session starts with none). The main process starts it afresh; a loader worker (a
    new process each pass) appends, so that each pass's events stay."""
    from energon_lite.storage.session import session

    logs = session().debug_logs
    file = logs.get(path)
    if file is None:
        path.parent.mkdir(parents=True, exist_ok=True)
        mode: Literal["a", "w"] = "a" if in_worker else "w"
        file = logs[path] = open(path, mode, encoding="utf-8")  # noqa: SIM115
    return file
