"""Random access to the frames of HDF5 episodes, opened lazily in the process that reads.

Files are opened on first use and kept in a small LRU (``max_open_files``). The handles
belong to the process that opened them: when ``os.getpid()`` changes (a forked DataLoader
worker) they are forgotten, never used, and pickling a reader drops them, so a worker
never inherits an HDF5 handle from its parent.

Low-dimensional arrays (``qpos``, ``action``, ``reward``) of an episode are read whole and
kept in an LRU of ``cache_episodes`` episodes: a few KB each. Camera images stay on disk as
stored - raw ``(T, H, W, 3)`` uint8, or encoded bytes (JPEG/PNG) as padded ``(T, L)`` uint8
rows or a variable-length ``(T,)`` dataset - and one frame is read and decoded per request,
so a worker's memory does not grow with the episodes it samples; the page cache shares the
bytes between workers. Before a frame is read, its dataset's declared shape is checked
against the one prepare recorded and against ``max_frame_pixels`` (an encoded frame: its
image header), and ``qpos``/``action`` against the index's dimensions, so a file that
changed since prepare is named instead of allocating what it declares. With ``frame_cache`` (a :class:`FrameCache` with a byte budget) decoded
frames are kept, LRU, and a frame drawn again is not decoded again.
"""

from __future__ import annotations

import io
import os
from collections import OrderedDict
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from energon_lite.errors import DatasetFormatError, MediaDecodeError
from energon_lite.flavors.episodes.frame_cache import FrameCache
from energon_lite.flavors.episodes.index import (
    MAX_FRAME_PIXELS,
    EpisodeIndex,
    check_frame_budget,
    import_h5py,
)
from energon_lite.storage import RangedFile


class LowDim(NamedTuple):
    qpos: np.ndarray  # (T, D) float32
    action: np.ndarray  # (T, A) float32
    reward: np.ndarray | None  # (T,) float32, when the file has /reward


class EpisodeReader:
    """Reads frames of the episodes of ``index``; cheap to pickle, opens files on demand."""

    def __init__(
        self,
        index: EpisodeIndex,
        *,
        max_open_files: int = 16,
        cache_episodes: int = 64,
        frame_cache: FrameCache | None = None,
        max_frame_pixels: int = MAX_FRAME_PIXELS,
    ) -> None:
        self.index = index
        self.max_frame_pixels = max_frame_pixels
        self.max_open_files = max(1, max_open_files)
        self.cache_episodes = max(1, cache_episodes)
        self.frame_cache = frame_cache
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._files: OrderedDict[int, Any] = OrderedDict()
        self._datasets: dict[tuple[int, str], Any] = {}
        self._low: OrderedDict[int, LowDim] = OrderedDict()

    def __getstate__(self) -> dict[str, Any]:
        keys = ("index", "max_open_files", "cache_episodes", "frame_cache", "max_frame_pixels")
        return {k: self.__dict__[k] for k in keys}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def _file(self, episode: int) -> Any:
        h5py = import_h5py()
        if os.getpid() != self._pid:
            self._reset()  # inherited across fork: the parent's handles are not ours to use
        f = self._files.get(episode)
        if f is not None:
            self._files.move_to_end(episode)
            return f
        path = self.index.path(episode)
        try:
            f = h5py.File(path if isinstance(path, Path) else RangedFile(path), "r")
        except OSError as exc:
            raise DatasetFormatError(f"{path}: cannot open episode ({exc})") from exc
        self._files[episode] = f
        while len(self._files) > self.max_open_files:
            evicted, handle = self._files.popitem(last=False)
            self._datasets = {k: v for k, v in self._datasets.items() if k[0] != evicted}
            handle.close()
        return f

    def _dataset(self, episode: int, key: str) -> Any:
        # h5py's name lookup costs as much as reading a small frame: keep the objects
        if os.getpid() != self._pid:
            self._reset()  # inherited across fork: the parent's handles are not ours to use
        ds = self._datasets.get((episode, key))
        if ds is not None:
            return ds
        f = self._file(episode)
        if key not in f:
            raise DatasetFormatError(f"{self.index.path(episode)}: no dataset /{key}")
        ds = f[key]
        self._check_shape(episode, key, ds.shape)
        self._check_dtype(episode, key, ds.dtype)
        self._datasets[episode, key] = ds
        return ds

    def _check_shape(self, episode: int, key: str, shape: tuple[int, ...]) -> None:
        """What ``key`` declares, against the index and the budgets, before any read."""
        path, length = self.index.path(episode), int(self.index.lengths[episode])
        dims = {"observations/qpos": self.index.qpos_dim, "action": self.index.action_dim}
        expected: tuple[int, ...] | None = None
        if key in dims:
            expected = (length, dims[key])
        elif key == "reward":
            expected = shape if shape[:1] == (length,) else (length,)
        elif key.startswith("observations/"):
            check_frame_budget(path, key, shape, self.max_frame_pixels)
            expected = self.index.frame_shape(episode, key)
            if expected is None and shape[:1] != (length,):
                expected = (length, *shape[1:])
        if expected is not None and tuple(shape) != tuple(expected):
            raise DatasetFormatError(
                f"{path}: /{key} has shape {tuple(shape)}, but it was {tuple(expected)} when "
                "the episodes were prepared: the file changed since prepare - prepare again"
            )

    def _check_dtype(self, episode: int, key: str, dtype: np.dtype) -> None:
        """A camera's element type against the one prepare recorded (a frame rewritten as
        float64 with the same shape would otherwise be served as float64)."""
        expected = self.index.frame_dtype(episode, key)
        if expected is not None and dtype.str != expected:
            raise DatasetFormatError(
                f"{self.index.path(episode)}: /{key} holds {dtype}, but it held "
                f"{np.dtype(expected)} when the episodes were prepared: the file changed "
                "since prepare - prepare again"
            )

    def low_dim(self, episode: int) -> LowDim:
        """qpos, action and reward of a whole episode (cached)."""
        low = self._low.get(episode)
        if low is not None:
            self._low.move_to_end(episode)
            return low
        qpos = np.asarray(self._dataset(episode, "observations/qpos")[()], dtype=np.float32)
        action = np.asarray(self._dataset(episode, "action")[()], dtype=np.float32)
        reward = None
        if self.index.has_reward[episode]:
            reward = np.asarray(self._dataset(episode, "reward")[()], dtype=np.float32)
            reward = reward.reshape(len(reward))
        length = int(self.index.lengths[episode])
        if len(qpos) != length or len(action) != length:
            raise DatasetFormatError(
                f"{self.index.path(episode)}: {len(qpos)} qpos / {len(action)} action frames, "
                f"but the index says {length}; the file changed since prepare - prepare again"
            )
        low = LowDim(qpos, action, reward)
        self._low[episode] = low
        while len(self._low) > self.cache_episodes:
            self._low.popitem(last=False)
        return low

    def frame(
        self, episode: int, frame: int, cameras: list[str], group: str = "images"
    ) -> np.ndarray:
        """Frame ``frame`` of each camera, stacked: (n_cam, H, W, 3) images or (n_cam, H, W) depth.

        With a frame cache the stacked array is cached (one entry per frame and camera
        list) and returned as it is, read-only: batching copies it into the batch anyway.
        """
        cache = self.frame_cache
        if cache is None:
            return self._stack(episode, frame, cameras, group)
        key = (episode, frame, f"{group}:{','.join(cameras)}")
        return cache.get(key, partial(self._stack, episode, frame, cameras, group))

    def _stack(self, episode: int, frame: int, cameras: list[str], group: str) -> np.ndarray:
        out = [self._decode(episode, frame, f"observations/{group}/{cam}") for cam in cameras]
        shapes = {a.shape for a in out}
        if len(shapes) > 1:
            raise DatasetFormatError(
                f"{self.index.path(episode)}: cameras {cameras} have different frame shapes {shapes}"
            )
        return np.stack(out)

    def _decode(self, episode: int, frame: int, key: str) -> np.ndarray:
        ds = self._dataset(episode, key)
        depth = key.startswith("observations/depth")
        raw_ndim = (3, 4) if depth else (4,)
        stored = ds[frame]
        if ds.ndim in raw_ndim:
            return stored[..., 0] if depth and ds.ndim == 4 else stored
        if ds.ndim not in (1, 2):
            raise DatasetFormatError(
                f"{self.index.path(episode)}: /{key} has shape {ds.shape}; expected raw frames "
                "or encoded bytes per frame"
            )
        from PIL import Image

        data = stored.tobytes() if isinstance(stored, np.ndarray) else bytes(stored)
        try:
            with Image.open(io.BytesIO(data)) as im:
                if im.width * im.height > self.max_frame_pixels:
                    raise MediaDecodeError(
                        f"{self.index.path(episode)}: /{key} frame {frame} is a {im.width}x"
                        f"{im.height} image, over the budget of {self.max_frame_pixels:,} "
                        "pixels per frame (max_frame_pixels); not decoded"
                    )
                return np.asarray(im if depth or im.mode == "RGB" else im.convert("RGB"))
        except MediaDecodeError:
            raise
        except Exception as exc:  # Pillow raises several types for bad bytes
            raise MediaDecodeError(
                f"{self.index.path(episode)}: /{key} frame {frame} does not decode: {exc}"
            ) from exc

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._reset()
