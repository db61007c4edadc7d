"""Action-chunk transitions: the training example for start frame ``t`` of an episode.

For an episode of ``T`` frames, start ``t`` and chunk index ``i`` in ``[0, chunk_size)``,
frame ``k = t + i`` (a chunk never leaves its episode; ``k >= T`` is padding):

* ``valid[i]     = 1 if k < T else 0``             - a real frame, not padding;
* ``terminals[i] = 1 if k >= T - 1 else 0``        - the episode has ended at or before k;
* ``masks[i]     = 1 - terminals[i]``              - bootstrap from after step i is allowed;
* ``rewards[i]   = sum_{j <= i, t + j < T} discount**j * r[t + j]`` - discounted cumulative;
* ``actions[i]   = normalised action[k]`` for real frames, zeros for padding;
* ``final_reward = rewards[-1]``, the chunk's discounted reward (the Q-chunking target is
  ``final_reward + discount**chunk_size * masks[-1] * Q(s_{t+chunk_size})``).

These are the Q-chunking conventions (``valid[i] = 1 - terminals[i-1]``,
``masks[i] = min(masks[i-1], 1 - terminal[k])``, ``terminals`` a running max) with the last
frame of every episode terminal. ``r`` is the file's ``/reward`` when present; otherwise a
sparse success reward: ``r[T-1] = 1`` for a positive episode, 0 everywhere else.

``observations.qpos`` is frame t's qpos, ``(qpos - qpos_mean) / qpos_std``; ``observations.images``
is frame t of each camera in ``camera_names`` order, ``(n_cam, H, W, 3)`` uint8 (or float32 in
[0, 1] with ``normalize_images=True``); ``observations.depth_images`` is ``(n_cam, H, W)`` or None.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from functools import lru_cache, partial
from typing import Any, NamedTuple

import numpy as np

from energon_lite.errors import ConfigError, DatasetFormatError, FailureTracker, MediaDecodeError
from energon_lite.flavors.episodes.frame_cache import FrameCache
from energon_lite.flavors.episodes.index import EpisodeIndex
from energon_lite.flavors.episodes.reader import EpisodeReader
from energon_lite.flavors.episodes.shared_pool import SharedFramePool, SharedPoolDir

NORM_KEYS = ("qpos_mean", "qpos_std", "action_mean", "action_std")


@lru_cache(maxsize=32)
def _powers(chunk_size: int, discount: float) -> np.ndarray:
    powers = discount ** np.arange(chunk_size)
    powers.flags.writeable = False
    return powers


def chunk_fields(
    length: int, start: int, chunk_size: int, frame_rewards: np.ndarray, discount: float
) -> dict[str, np.ndarray]:
    """``rewards``, ``masks``, ``valid`` and ``terminals`` (float32, (chunk_size,)) for one chunk."""
    n = max(0, min(chunk_size, length - start))  # frames k = start + i < length: a prefix
    r = np.zeros(chunk_size, dtype=np.float64)
    r[:n] = frame_rewards[start : start + n]
    valid = np.zeros(chunk_size, dtype=np.float32)
    valid[:n] = 1.0
    terminals = np.zeros(chunk_size, dtype=np.float32)
    terminals[max(0, length - 1 - start) :] = 1.0  # k >= length - 1
    return {
        "rewards": np.cumsum(r * _powers(chunk_size, discount)).astype(np.float32),
        "masks": 1.0 - terminals,
        "valid": valid,
        "terminals": terminals,
    }


class _Normalised(NamedTuple):
    qpos: np.ndarray  # (T, D) float32, normalised
    action: np.ndarray  # (T, A) float32, normalised when normalize_actions
    reward: np.ndarray  # (T,) per-frame rewards (the file's or the sparse success reward)


class TransitionBuilder:
    """Builds the transition dict for (episode, start frame); pure given the files."""

    def __init__(
        self,
        index: EpisodeIndex,
        camera_names: list[str],
        norm_stats: dict[str, Any],
        chunk_size: int,
        *,
        discount: float = 0.99,
        include_depth: bool = False,
        normalize_actions: bool = True,
        normalize_images: bool = False,
        failure_tolerance: int = 10,
        frame_cache_bytes: int = 0,
        shared_pool: bool | str | os.PathLike[str] = False,
    ) -> None:
        if chunk_size < 1:
            raise ConfigError(f"{chunk_size=} must be >= 1")
        if not 0.0 <= discount <= 1.0:
            raise ConfigError(f"{discount=} must be in [0, 1]")
        missing = [k for k in NORM_KEYS if k not in norm_stats]
        if missing:
            raise ConfigError(f"norm_stats lacks {missing}; compute it with compute_norm_stats()")
        self.camera_names = list(camera_names)
        self.index = index.require_cameras(self.camera_names, failure_tolerance=failure_tolerance)
        if include_depth:
            self.index = self.index.require_cameras(
                self.camera_names, depth=True, failure_tolerance=failure_tolerance
            )
        self.chunk_size = chunk_size
        self.discount = float(discount)
        self.include_depth = include_depth
        self.normalize_actions = normalize_actions
        self.normalize_images = normalize_images
        self.norm = {k: np.asarray(norm_stats[k], dtype=np.float32) for k in NORM_KEYS}
        for key, dim in (("qpos", self.index.qpos_dim), ("action", self.index.action_dim)):
            for name in (f"{key}_mean", f"{key}_std"):
                if self.norm[name].shape not in ((), (dim,)):
                    raise ConfigError(
                        f"norm_stats[{name!r}] has shape {self.norm[name].shape}, but the "
                        f"episodes' {key} has {dim} dims"
                    )
        # decoded frames kept per process up to this many bytes (0: decode every draw)
        cache = FrameCache(frame_cache_bytes) if frame_cache_bytes else None
        self.reader = EpisodeReader(self.index, frame_cache=cache)
        self._normalised: OrderedDict[int, _Normalised] = OrderedDict()
        # the pool's decoded frames in shared memory, one copy for all workers (shared_pool.py)
        self.shared_dir: SharedPoolDir | None = None
        if shared_pool:
            self.shared_dir = SharedPoolDir(None if shared_pool is True else shared_pool)
        self._shared: SharedFramePool | None = None
        self._shared_spec: tuple[tuple[int, ...], int] | None = None
        self.writable_frames = (
            False  # shared pool frames as copy-on-write views (QCSimpleDatasetV3)
        )

    def frame_rewards(self, episode: int) -> np.ndarray:
        low = self.reader.low_dim(episode)
        if low.reward is not None:
            return low.reward
        r = np.zeros(int(self.index.lengths[episode]), dtype=np.float32)
        r[-1] = 1.0 if self.index.labels[episode] else 0.0
        return r

    def _episode(self, episode: int) -> _Normalised:
        """An episode's normalised low-dim arrays, computed once and kept (small LRU)."""
        cached = self._normalised.get(episode)
        if cached is not None:
            self._normalised.move_to_end(episode)
            return cached
        low = self.reader.low_dim(episode)
        action = low.action
        if self.normalize_actions:
            action = (action - self.norm["action_mean"]) / self.norm["action_std"]
        qpos = (low.qpos - self.norm["qpos_mean"]) / self.norm["qpos_std"]
        cached = _Normalised(
            qpos.astype(np.float32), action.astype(np.float32), self.frame_rewards(episode)
        )
        self._normalised[episode] = cached
        while len(self._normalised) > self.reader.cache_episodes:
            self._normalised.popitem(last=False)
        return cached

    def __getstate__(self) -> dict[str, Any]:
        # recomputed / reopened where used
        return {**self.__dict__, "_normalised": OrderedDict(), "_shared": None}

    def enter_pool(self, episodes: list[int], epoch: int, *, drop_others: bool = False) -> None:
        """With ``shared_pool``: draws of ``episodes`` read (and fill) epoch ``epoch``'s shared pool.

        Pool files of earlier epochs (``drop_others``: all others) are deleted: a worker still
        drawing from one keeps its pages mapped until it moves on, and the RAM is freed when
        the last one does (see :mod:`energon_lite.flavors.episodes.shared_pool`). Without
        ``shared_pool`` a no-op.
        """
        if self.shared_dir is None:
            return
        spec = (tuple(int(e) for e in episodes), int(epoch))
        if spec == self._shared_spec and self._shared is not None:
            return
        self._shared_spec = spec
        self._open_shared(drop_others)

    def _open_shared(self, drop_others: bool) -> SharedFramePool | None:
        assert self.shared_dir is not None and self._shared_spec is not None
        episodes, epoch = self._shared_spec
        if self._shared is not None:
            self._shared.close()
            self._shared = None
        if not episodes:
            return None
        digest = hashlib.sha1(repr((episodes, self.camera_names)).encode()).hexdigest()[:16]
        path = self.shared_dir.path / f"pool_{epoch}_{digest}.bin"
        for old in self.shared_dir.path.glob("pool_*_*.bin"):
            if old != path and (drop_others or int(old.name.split("_")[1]) < epoch):
                old.unlink(missing_ok=True)
        shape = self.reader._stack(episodes[0], 0, self.camera_names, "images").shape
        lengths = self.index.lengths[list(episodes)].astype(int).tolist()
        self._shared = SharedFramePool(path, list(episodes), lengths, shape)
        return self._shared

    def _images(self, episode: int, start: int) -> np.ndarray:
        shared = self._shared
        if shared is None and self._shared_spec is not None:
            shared = self._open_shared(False)  # unpickled in a spawned worker: reopen
        if shared is not None and episode in shared:
            decode = partial(self.reader._stack, episode, start, self.camera_names, "images")
            return shared.get(episode, start, decode, self.writable_frames)
        return self.reader.frame(episode, start, self.camera_names)

    def prefill(self, episodes: list[int]) -> int:
        """Decode every frame of ``episodes`` into the frame cache now; returns frames decoded.

        What the decode-everything loader does at pool load, within the cache's budget
        (frames past it evict earlier ones); with ``shared_pool``, into the shared pool
        (``enter_pool`` first). Without either this does nothing.
        """
        if self.reader.frame_cache is None and self._shared is None:
            return 0
        done = 0
        for episode in episodes:
            self._episode(episode)
            for frame in range(int(self.index.lengths[episode])):
                self._images(episode, frame)
                done += 1
        return done

    def build(self, episode: int, start: int, *, raw_images: bool = False) -> dict[str, Any]:
        """The transition for ``start`` frame of ``episode`` (see the module docstring).

        ``raw_images=True`` leaves ``images`` uint8 even with ``normalize_images``: for a
        collate that converts while it stacks (``collate_transitions(normalize_images=True)``),
        so no float32 copy of each frame waits in the worker for its batch.
        """
        length = int(self.index.lengths[episode])
        if not 0 <= start < length:
            raise IndexError(f"start frame {start} outside episode {episode} of {length} frames")
        low = self._episode(episode)
        n = min(self.chunk_size, length - start)
        actions = np.zeros((self.chunk_size, low.action.shape[1]), dtype=np.float32)
        actions[:n] = low.action[start : start + n]
        qpos = low.qpos[start].copy()
        images = self._images(episode, start)
        if self.normalize_images and not raw_images:  # one float32 array, no temporary
            images = np.divide(images, np.float32(255.0), dtype=np.float32)
        depth = None
        if self.include_depth:
            depth = self.reader.frame(episode, start, self.camera_names, group="depth")
        fields = chunk_fields(length, start, self.chunk_size, low.reward, self.discount)
        return {
            "__key__": f"{self.index.paths[episode]}/{start}",
            "__restore_key__": ("Episode", int(episode), int(start)),
            "observations": {
                "qpos": qpos,
                "images": images,
                "depth_images": depth,
            },
            "actions": actions,
            **fields,
            "is_positive": bool(self.index.labels[episode]),
            "final_reward": float(fields["rewards"][-1]),
        }

    def try_build(
        self, episode: int, start: int, tracker: FailureTracker, *, raw_images: bool = False
    ) -> dict[str, Any] | None:
        """``build``, or None after logging a bad file/frame (raises past the failure limit)."""
        try:
            item = self.build(episode, start, raw_images=raw_images)
        except (OSError, DatasetFormatError, MediaDecodeError) as exc:
            where = {"file": str(self.index.path(episode)), "frame": start}
            tracker.failed("episode transition", where, exc)
            return None
        tracker.ok()
        return item

    def fetch(self, restore_key: Any) -> dict[str, Any]:
        """Rebuild a transition from its ``__restore_key__`` ``("Episode", episode, start)``."""
        if (
            not isinstance(restore_key, (tuple, list))
            or len(restore_key) != 3
            or restore_key[0] != "Episode"
        ):
            raise ValueError(f"not an episode restore key: {restore_key!r}")
        return self.build(int(restore_key[1]), int(restore_key[2]))
