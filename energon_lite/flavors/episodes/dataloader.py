"""``create_qc_dataloader_v3``: the Q-chunking loader's entry point, on energon_lite.

Same arguments and return value as the Q-chunking loader users have today -
``(dataset, loader)`` - with its weaknesses fixed: the pool is chosen per (seed, epoch,
rank) without seed collisions, workers move to the next epoch's pool by themselves,
images stay compressed on disk until a transition needs them, and the loader saves and
restores its exact position (``loader.save_state_rank()`` / ``restore_state_rank``).
``dataset.get_stats()`` and ``dataset.refresh_epoch(epoch)`` keep the old interface;
``refresh_epoch`` only changes which epoch ``get_stats`` describes.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from energon_lite.errors import ConfigError
from energon_lite.flavors.episodes.index import open_episode_index
from energon_lite.flavors.episodes.pipeline import EpisodePipeline
from energon_lite.flavors.episodes.transitions import TransitionBuilder
from energon_lite.loader.api import SavableDataset, SavableLoader, get_savable_loader
from energon_lite.worker import WorkerConfig


class EpisodeDataset(SavableDataset):
    """A SavableDataset of episode batches with the Q-chunking loader's ``get_stats`` and
    ``refresh_epoch``."""

    pipeline: EpisodePipeline

    def __init__(self, pipeline: EpisodePipeline, worker_config: WorkerConfig) -> None:
        super().__init__(pipeline, worker_config)
        self.epoch = 0

    def refresh_epoch(self, epoch: int) -> None:
        """Accepted for compatibility; the workers load each epoch's pool themselves."""
        if epoch < 0:
            raise ConfigError(f"{epoch=} must be >= 0")
        self.epoch = int(epoch)

    def get_stats(self) -> dict[str, Any]:
        """``total_possible_starts``, ``loaded_episodes``, ``positive_ratio`` of this rank's pool."""
        wc = self.worker_config
        return self.pipeline.stats(wc.seed_offset, self.epoch, wc.rank)


def create_qc_dataloader_v3(
    dataset_dir: str | Path,
    camera_names: list[str],
    norm_stats: dict[str, Any],
    chunk_size: int,
    episodes_per_epoch: int = 32,
    batch_size: int = 128,
    rank: int = 0,
    world_size: int = 1,
    epoch_seed: int = 0,
    *,
    positive_ratio: float = 0.6,
    steps_per_epoch: int = 5000,
    num_workers: int = 8,
    mode: str = "pool",
    dataset_type: str = "train",
    discount: float = 0.99,
    include_depth: bool = False,
    normalize_actions: bool = True,
    normalize_images: bool = False,
    pin_memory: bool | None = None,
    failure_tolerance: int = 10,
    frame_cache_bytes: int = 0,
    shared_pool: bool = False,
) -> tuple[EpisodeDataset, SavableLoader]:
    """Build ``(dataset, loader)`` over the HDF5 episodes in ``dataset_dir``.

    ``epoch_seed`` is the run's seed. ``dataset_type="train"`` samples in ``mode`` forever;
    any other value (``"val"``, ``"test"``) visits every start frame once (``full`` mode, one
    epoch per pass, last partial batch kept). The folder is scanned once and the index saved
    in ``<dataset_dir>/.nv-meta/`` when it is writable (or run ``energon-lite prepare``).

    The document requires ``steps_per_epoch > total_possible_starts`` (enough draws to cover
    the pool); a warning names both numbers (this rank's first pool) when it does not hold.
    ``frame_cache_bytes`` > 0 keeps decoded camera frames in each worker, LRU, up to that
    many bytes (see ``frame_cache``): repeated draws of a frame skip its JPEG decode.
    ``shared_pool=True`` instead keeps one decoded copy of the rank's pool in shared memory
    (``/dev/shm``), filled by the workers' draws and read by all of them (see
    ``shared_pool``): the decode-everything loader's speed with its memory held once.
    """
    train = dataset_type == "train"
    index = open_episode_index(dataset_dir)
    builder = TransitionBuilder(
        index, camera_names, norm_stats, chunk_size,
        discount=discount, include_depth=include_depth, normalize_actions=normalize_actions,
        normalize_images=normalize_images, failure_tolerance=failure_tolerance,
        frame_cache_bytes=frame_cache_bytes, shared_pool=shared_pool,
    )  # fmt: skip
    pipeline = EpisodePipeline(
        builder,
        batch_size=batch_size,
        mode=mode if train else "full",
        episodes_per_epoch=episodes_per_epoch,
        positive_ratio=positive_ratio,
        steps_per_epoch=steps_per_epoch,
        num_epochs=None if train else 1,
        drop_last=train,
        failure_tolerance=failure_tolerance,
    )
    worker_config = WorkerConfig(rank, world_size, num_workers, seed_offset=epoch_seed)
    dataset = EpisodeDataset(pipeline, worker_config)
    if pipeline.mode == "pool":
        starts = dataset.get_stats()["total_possible_starts"]
        if not steps_per_epoch > starts:
            warnings.warn(
                f"steps_per_epoch={steps_per_epoch} is not > total_possible_starts={starts} "
                f"(rank {rank}'s pool of {episodes_per_epoch} episodes in epoch 0); the "
                "Q-chunking loader requires steps_per_epoch > total_possible_starts so that "
                "the random draws cover the pool; raise steps_per_epoch or lower "
                "episodes_per_epoch",
                stacklevel=2,
            )
    return dataset, get_savable_loader(dataset, pin_memory=pin_memory)
