"""``EpisodeSweep``: the ``full`` sampling mode - every (episode, start) once per epoch.

Algorithm. The ``N`` start frames of the dataset (global start index ``i`` in ``[0, N)``)
are visited in the order of a keyed permutation ``perm = KeyedPermutation(N, seed, "full",
epoch)``, dealt round-robin to the ``G`` global workers: worker ``g`` takes positions
``g, g + G, g + 2G, ...``. Across all ranks and workers each start is produced exactly
once per epoch; then every worker moves on to the next epoch (a new permutation). The
permutation is evaluated per position in blocks, so nothing of size ``N`` is held.

``first_epoch`` (the loader passes its pass number) and ``num_epochs`` bound a finite run;
by default the stream is endless.

State: ``{"epoch", "position"}`` - position counts this worker's positions in the epoch.
A start whose transition cannot be read is logged and skipped (``failure_tolerance``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from energon_lite.errors import ConfigError, FailureTracker
from energon_lite.flavors.episodes.cursor import EpochCursor
from energon_lite.flavors.episodes.partition import local_worker
from energon_lite.flavors.episodes.permutation import KeyedPermutation
from energon_lite.flavors.episodes.transitions import TransitionBuilder

_BLOCK = 256


class EpisodeSweep(EpochCursor):
    """Every start frame of the dataset once per epoch, shuffled, split over global workers."""

    mismatch_hint = "the state was saved for another dataset or number of workers"

    def __init__(
        self,
        builder: TransitionBuilder,
        seed: int,
        global_worker_id: int,
        num_global_workers: int,
        rank: int,
        world_size: int,
        *,
        first_epoch: int = 0,
        num_epochs: int | None = None,
        failure_tolerance: int = 10,
    ) -> None:
        _, num_workers = local_worker(global_worker_id, num_global_workers, rank, world_size)
        self.builder = builder
        self.index = builder.index
        self.seed, self.num_epochs = int(seed), num_epochs
        self.g, self.G = global_worker_id, num_global_workers
        total = self.index.total_frames
        if rank * num_workers >= total:
            raise ConfigError(
                f"rank {rank} gets no start frame: the dataset has {total} start frames for "
                f"world_size={world_size} x num_workers={num_workers}; use fewer ranks or workers"
            )
        self.per_epoch = len(range(global_worker_id, total, num_global_workers))
        self.first_epoch = first_epoch
        self._tracker = FailureTracker(failure_tolerance)

    def _enter(self, epoch: int, position: int) -> None:
        self.epoch, self.position = epoch, position
        self._perm = KeyedPermutation(self.index.total_frames, self.seed, "full", epoch)
        self._block_start, self._block = -1, np.empty(0, dtype=np.int64)

    def _start(self, position: int) -> int:
        block_start = position - position % _BLOCK
        if block_start != self._block_start:
            stop = min(block_start + _BLOCK, self.per_epoch)
            positions = self.g + np.arange(block_start, stop, dtype=np.int64) * self.G
            self._block, self._block_start = self._perm[positions], block_start
        return int(self._block[position - block_start])

    def next(self) -> dict[str, Any]:
        self._start_if_fresh()
        while True:
            if self.num_epochs is not None and self.epoch >= self.first_epoch + self.num_epochs:
                raise StopIteration
            if self.per_epoch == 0:
                raise StopIteration  # more global workers than start frames: this one idles
            if self.position >= self.per_epoch:
                self._enter(self.epoch + 1, 0)
                continue
            episode, start = self.index.locate(self._start(self.position))
            self.position += 1
            item = self.builder.try_build(
                int(episode), int(start), self._tracker, raw_images=self.raw_images
            )
            if item is not None:
                return item

    def _position(self) -> int:
        return self.position

    def _positions_per_epoch(self) -> int:
        return self.per_epoch
