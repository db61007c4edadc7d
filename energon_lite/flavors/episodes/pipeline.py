"""``EpisodePipeline``: the per-worker chain for robot episodes, as the loader builds it.

``build(slot)`` returns ``Batch(EpisodePool | EpisodeSweep, batch_size, collate_transitions)``
for one DataLoader worker; the loader runs one chain per worker and saves/restores it.
``fingerprint()`` lists everything a saved state must match (dataset, mode, sizes, seed).
The pipeline object is pickled into the workers: it holds the index (numpy arrays) and a
reader with no open files, so each worker opens the HDF5 files itself.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from energon_lite.errors import ConfigError
from energon_lite.flavors.episodes.collate import collate_transitions
from energon_lite.flavors.episodes.cursor import EpochCursor
from energon_lite.flavors.episodes.pool import EpisodePool, choose_pool, pool_stats
from energon_lite.flavors.episodes.sweep import EpisodeSweep
from energon_lite.flavors.episodes.transitions import TransitionBuilder
from energon_lite.quotas import share
from energon_lite.sources.leaf import Leaf
from energon_lite.stages.base import Stage
from energon_lite.stages.batch import Batch
from energon_lite.stages.plan import Node
from energon_lite.stages.reader import Reader
from energon_lite.task_encoder.base import TaskEncoder
from energon_lite.worker import CanonicalLayout, WorkerSlot

MODES = ("pool", "full")


class EpisodePipeline:
    """Batches of action-chunk transitions in ``pool`` or ``full`` mode (see the module doc)."""

    def __init__(
        self,
        builder: TransitionBuilder,
        *,
        batch_size: int,
        mode: str = "pool",
        episodes_per_epoch: int = 32,
        positive_ratio: float = 0.6,
        steps_per_epoch: int = 5000,
        num_epochs: int | None = None,
        drop_last: bool = True,
        failure_tolerance: int = 10,
    ) -> None:
        if mode not in MODES:
            raise ConfigError(f"{mode=} must be one of {MODES}")
        if batch_size < 1:
            raise ConfigError(f"{batch_size=} must be >= 1")
        self.builder = builder
        self.batch_size = batch_size
        self.mode = mode
        self.episodes_per_epoch = episodes_per_epoch
        self.positive_ratio = positive_ratio
        self.steps_per_epoch = steps_per_epoch
        self.num_epochs = num_epochs
        self.drop_last = drop_last
        self.failure_tolerance = failure_tolerance
        self.leaves: list[Leaf] = []  # no leaf datasets: the episodes' index is the source
        self.task_encoder: TaskEncoder | None = None
        self.training = True
        if mode == "pool":  # fail in the main process, not in every worker
            choose_pool(builder.index, 0, 0, 0, episodes_per_epoch, positive_ratio)

    def sampler(self, slot: WorkerSlot) -> Stage:
        """The transition-level stage of one global worker."""
        common = (
            self.builder, slot.seed, slot.global_worker_id, slot.num_global_workers,
            slot.rank, slot.world_size,
        )  # fmt: skip
        first_epoch = getattr(slot, "epoch", 0)
        if self.mode == "full":
            return EpisodeSweep(
                *common,
                first_epoch=first_epoch,
                num_epochs=self.num_epochs,
                failure_tolerance=self.failure_tolerance,
            )
        return EpisodePool(
            *common,
            first_epoch=first_epoch,
            episodes_per_epoch=self.episodes_per_epoch,
            positive_ratio=self.positive_ratio,
            steps_per_epoch=self.steps_per_epoch,
            batch_size=self.batch_size,
            num_epochs=self.num_epochs,
            failure_tolerance=self.failure_tolerance,
        )

    def plan(self, slot: WorkerSlot) -> Node:
        """``Batch`` over the worker's sampler (``EpisodeSweep`` or ``EpisodePool``)."""
        sampler_cls = EpisodeSweep if self.mode == "full" else EpisodePool
        sampler = Node(sampler_cls, lambda: self._sampler(slot))
        collate = partial(collate_transitions, normalize_images=self.builder.normalize_images)
        return Node(Batch, lambda s: Batch(s, self.batch_size, collate, self.drop_last), [sampler])

    def _sampler(self, slot: WorkerSlot) -> Stage:
        sampler = self.sampler(slot)
        assert isinstance(sampler, EpochCursor)
        # with normalize_images the collate converts each uint8 frame as it stacks the batch
        sampler.raw_images = self.builder.normalize_images
        return sampler

    def build(self, slot: WorkerSlot) -> Stage:
        return self.plan(slot).build()

    def state_shape(self, slot: WorkerSlot) -> dict[str, Any]:
        """The shape of a saved chain state (checked in the trainer; nothing is built)."""
        return self.plan(slot).shape()

    def canonical(self, slot: WorkerSlot) -> CanonicalLayout | None:
        return None  # episodes have no canonical layout

    def readers(self, slot: WorkerSlot) -> list[Reader] | None:
        return None  # the samplers read episodes, not a leaf's shards

    def items_per_worker(self, worker_config: Any, epoch: int = 0) -> list[int]:
        """The rank's batches dealt round robin over its workers."""
        total, n = self.batches_per_epoch(worker_config, epoch), worker_config.workers_per_rank
        return [share(total, n, w) for w in range(n)]

    def batches_per_epoch(self, worker_config: Any, epoch: int = 0) -> int:
        """Batches one rank yields per epoch (``worker_config``: a loader WorkerConfig)."""
        if self.mode == "pool":
            return self.steps_per_epoch
        total, bs = self.builder.index.total_frames, self.batch_size
        n = worker_config.workers_per_rank
        G = worker_config.world_size * n
        starts = [len(range(worker_config.rank * n + w, total, G)) for w in range(n)]
        return sum(s // bs if self.drop_last else -(-s // bs) for s in starts)

    def fingerprint(self) -> dict[str, Any]:
        b = self.builder
        return {
            "flavor": "episodes",
            "dataset": b.index.fingerprint(),
            "mode": self.mode,
            "batch_size": self.batch_size,
            "chunk_size": b.chunk_size,
            "camera_names": list(b.camera_names),
            "episodes_per_epoch": self.episodes_per_epoch if self.mode == "pool" else None,
            "positive_ratio": self.positive_ratio if self.mode == "pool" else None,
            "steps_per_epoch": self.steps_per_epoch if self.mode == "pool" else None,
        }

    def stats(self, seed: int, epoch: int, rank: int) -> dict[str, Any]:
        """``get_stats()`` of rank ``rank`` in ``epoch``: its pool, or the whole dataset."""
        index = self.builder.index
        if self.mode == "full":
            return {
                "total_possible_starts": index.total_frames,
                "loaded_episodes": len(index),
                "positive_ratio": float(index.labels.mean()),
            }
        pool = choose_pool(index, seed, epoch, rank, self.episodes_per_epoch, self.positive_ratio)
        return pool_stats(index, pool)
