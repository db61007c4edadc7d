"""``QCSimpleDatasetV3``: the Q-chunking loader's map-style dataset, with its constructor.

For code written against the Q-chunking loader's class: a ``torch.utils.data.Dataset``
to put in a plain ``DataLoader(dataset, batch_size, shuffle=True, num_workers=...)``.

* ``_load_current_epoch()`` picks this rank's pool of ``episodes_per_epoch`` episodes
  (``round(episodes_per_epoch * positive_ratio)`` positive) for ``epoch_seed`` and loads
  their low-dimensional arrays (qpos, action, reward) into ``loaded_episodes``; camera
  frames stay compressed on disk and are decoded per draw (kept, LRU, up to
  ``frame_cache_bytes`` per process; or, with ``shared_pool=True``, decoded once into one
  shared-memory copy of the pool that every DataLoader worker reads and fills). The pool is :func:`choose_pool` of
  ``(seed, epoch_seed, rank)``: hashed, so ranks and epochs never share a stream (the
  document's ``epoch_seed + rank * 1000`` made rank 1 of epoch 0 equal rank 0 of epoch 1000).
* ``len(dataset) == total_starts``, the sum of the pool's episode lengths.
* ``dataset[idx]`` ignores ``idx`` when training: it draws a start frame uniformly over
  the pool with ``torch.randint`` (the DataLoader seeds each worker's torch generator
  differently) and builds the transition (:class:`TransitionBuilder`). Other
  ``dataset_type`` values (``"val"``, ``"test"``) use every episode and honour ``idx``.
* ``refresh_epoch(seed)`` loads the pool of another epoch. A DataLoader copies the dataset
  into its workers when an iterator starts, so call it before ``iter(loader)`` (the
  default ``persistent_workers=False`` then sees the new pool).
* Transitions are ``default_collate``-able: ``depth_images`` is left out when there is
  no depth, and the restore key is dropped (``__key__`` names episode file and frame).

This class is not resumable mid-epoch (its draws come from torch's global generator);
:func:`create_qc_dataloader_v3` is the exactly resumable loader with the same fields.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from energon_lite.errors import ConfigError, FailureTracker
from energon_lite.flavors.episodes.index import open_episode_index
from energon_lite.flavors.episodes.pool import choose_pool, pool_stats
from energon_lite.flavors.episodes.transitions import TransitionBuilder
from energon_lite.storage import as_path

DATASET_TYPES = ("train", "val", "test")


class QCSimpleDatasetV3(Dataset):
    """The document's pool-and-random-draw dataset (see the module docstring)."""

    def __init__(
        self,
        dataset_dir: str | os.PathLike[str],
        camera_names: list[str],
        norm_stats: dict[str, Any],
        chunk_size: int,
        episodes_per_epoch: int = 32,
        positive_ratio: float = 0.6,
        rank: int = 0,
        world_size: int = 1,
        epoch_seed: int = 0,
        dataset_type: str = "train",
        *,
        seed: int = 0,
        discount: float = 0.99,
        include_depth: bool = False,
        normalize_actions: bool = True,
        normalize_images: bool = False,
        frame_cache_bytes: int = 0,
        shared_pool: bool = False,
        failure_tolerance: int = 10,
    ) -> None:
        if dataset_type not in DATASET_TYPES:
            raise ConfigError(f"{dataset_type=} must be one of {DATASET_TYPES}")
        if not 0 <= rank < world_size:
            raise ConfigError(f"{rank=} must be in [0, {world_size=})")
        self.builder = TransitionBuilder(
            open_episode_index(as_path(dataset_dir)), camera_names, norm_stats, chunk_size,
            discount=discount, include_depth=include_depth, normalize_actions=normalize_actions,
            normalize_images=normalize_images, failure_tolerance=failure_tolerance,
            frame_cache_bytes=frame_cache_bytes, shared_pool=shared_pool,
        )  # fmt: skip
        self.index = self.builder.index
        self.builder.writable_frames = True  # default_collate needs writable arrays: no copy
        self.dataset_type = dataset_type
        self.episodes_per_epoch = episodes_per_epoch
        self.positive_ratio = positive_ratio
        self.rank, self.world_size, self.seed = rank, world_size, seed
        self.epoch_seed = int(epoch_seed)
        self.failure_tolerance = failure_tolerance
        self.loaded_episodes: list[dict[str, Any]] = []
        self.episode_lengths: list[int] = []
        self.episode_labels: list[bool] = []
        self.total_starts = 0
        self._load_current_epoch()

    def _pool(self) -> np.ndarray:
        if self.dataset_type != "train":
            return np.arange(len(self.index))
        return choose_pool(
            self.index, self.seed, self.epoch_seed, self.rank,
            self.episodes_per_epoch, self.positive_ratio,
        )  # fmt: skip

    def _load_current_epoch(self) -> None:
        pool = self._pool()
        reader = self.builder.reader
        reader.cache_episodes = max(reader.cache_episodes, len(pool))
        if reader.frame_cache is not None:
            reader.frame_cache.retain(pool.tolist())
        # workers forked after this share the pool file; the previous pool's file is deleted
        self.builder.enter_pool(pool.tolist(), self.epoch_seed, drop_others=True)
        self.loaded_episodes = []
        for episode in pool.tolist():
            low = reader.low_dim(episode)
            self.loaded_episodes.append(
                {"episode": episode, "path": str(self.index.paths[episode]),
                 "qpos": low.qpos, "action": low.action, "reward": low.reward}
            )  # fmt: skip
        self._pool_ids = pool
        self.episode_lengths = self.index.lengths[pool].astype(int).tolist()
        self.episode_labels = self.index.labels[pool].astype(bool).tolist()
        self._cum = np.cumsum(self.index.lengths[pool])
        self.total_starts = int(self._cum[-1]) if len(pool) else 0
        self._tracker = FailureTracker(self.failure_tolerance)

    def refresh_epoch(self, new_epoch_seed: int) -> None:
        """Drop the pool and load the one of ``new_epoch_seed``."""
        self.epoch_seed = int(new_epoch_seed)
        self._load_current_epoch()

    def __len__(self) -> int:
        return self.total_starts

    def __getitem__(self, idx: int) -> dict[str, Any]:
        train = self.dataset_type == "train"
        if not train and not 0 <= idx < self.total_starts:
            raise IndexError(f"index {idx} outside [0, {self.total_starts})")
        while True:
            g = int(torch.randint(0, self.total_starts, (1,)).item()) if train else int(idx)
            slot = int(np.searchsorted(self._cum, g, side="right"))
            start = g - (int(self._cum[slot]) - self.episode_lengths[slot])
            episode = int(self._pool_ids[slot])
            item = self.builder.try_build(episode, start, self._tracker)
            if item is not None:
                break
            if not train:  # a fixed index cannot be redrawn
                raise IndexError(
                    f"transition {idx} (episode {episode}, frame {start}) is unreadable"
                )
        del item["__restore_key__"]
        obs = item["observations"]
        if obs["depth_images"] is None:
            del obs["depth_images"]
        for name, value in obs.items():  # frames from the cache are read-only
            if isinstance(value, np.ndarray) and not value.flags.writeable:
                obs[name] = value.copy()
        return item

    def get_stats(self) -> dict[str, Any]:
        """``total_possible_starts``, ``loaded_episodes``, ``positive_ratio`` (+ seed, rank)."""
        stats = pool_stats(self.index, self._pool_ids)
        return {**stats, "epoch_seed": self.epoch_seed, "rank": self.rank}
