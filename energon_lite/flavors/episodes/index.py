"""The episode index: one scan of a folder of HDF5 episodes, stored as a small ``.npz``.

``prepare_episodes(folder)`` opens every ``*.hdf5`` / ``*.h5`` file under ``folder`` once and
records, per episode, its relative path, length ``T`` (frames), label (the file attribute
``success``; :data:`DEFAULT_SUCCESS` when it is absent), camera names, depth cameras and
whether it has a ``/reward`` dataset. Episodes that cannot be used (unreadable, missing
``/observations/qpos`` or ``/action``, ``qpos`` and ``action`` of different lengths, empty,
dimensions unlike the first episode, a camera whose declared frames are larger than
``max_frame_pixels``) are logged and left out, up to ``failure_tolerance`` consecutive
failures; the reasons are kept in the index (``skipped``). The declared shape and element type of each
camera dataset are recorded (``frame_shapes``; the types under its ``"dtypes"`` key, absent in
an index written before they were), so a reader can refuse a file whose cameras changed since
prepare before it reads a frame.

A global start index ``i`` in ``[0, sum(T))`` names frame ``i - starts[e]`` of episode
``e = searchsorted(cum_lengths, i, side="right")``: numpy arrays, no per-frame objects.
Memory: a few integers per episode, shared by every worker.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from energon_lite.errors import ConfigError, DatasetFormatError, FailureTracker, missing_extra
from energon_lite.flavors.episodes.layout import INDEX_PATH
from energon_lite.storage import RemotePath, StoragePath, as_path, open_binary
from energon_lite.storage.ops import list_files, read_range_all, write_atomic

logger = logging.getLogger("energon_lite")

DTYPES_KEY = "dtypes"  # in a frame_shapes entry: {dataset key: dtype.str}; never a dataset key
FORMAT_VERSION = 1
DEFAULT_SUCCESS = True  # demonstrations (ACT/ALOHA) carry no label and are successful
# The most pixels one camera frame may have (robot cameras are 640x480; 4096 x 4096 leaves
# room for any real camera): an episode declaring more is left out at prepare, and a frame
# read later is checked against it before it is read (EpisodeReader(max_frame_pixels=...)).
MAX_FRAME_PIXELS = 4096 * 4096
_SEP = "\n"


@dataclass(frozen=True, eq=False)
class EpisodeIndex:
    """Paths, lengths and labels of the usable episodes of one folder."""

    root: StoragePath  # a local folder, or a prefix in object storage
    paths: np.ndarray  # relative paths (unicode array)
    lengths: np.ndarray  # int64 (E,)
    labels: np.ndarray  # bool (E,): success
    cameras: np.ndarray  # unicode (E,): camera names joined by newlines
    depth_cameras: np.ndarray  # unicode (E,)
    has_reward: np.ndarray  # bool (E,)
    qpos_dim: int
    action_dim: int
    skipped: tuple[tuple[str, str], ...] = ()
    # unicode (E,): JSON {dataset key: declared shape} of each camera; None in an index
    # written before it was recorded
    frame_shapes: np.ndarray | None = None
    cum_lengths: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cum_lengths", np.cumsum(self.lengths, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def total_frames(self) -> int:
        return int(self.cum_lengths[-1]) if len(self) else 0

    @property
    def starts(self) -> np.ndarray:
        return self.cum_lengths - self.lengths

    def path(self, episode: int) -> StoragePath:
        return self.root / str(self.paths[episode])

    def frame_shape(self, episode: int, key: str) -> tuple[int, ...] | None:
        """The shape prepare recorded for dataset ``key`` of ``episode`` (None: unknown)."""
        if self.frame_shapes is None:
            return None
        shape = json.loads(str(self.frame_shapes[episode])).get(key)
        return None if shape is None else tuple(shape)

    def frame_dtype(self, episode: int, key: str) -> str | None:
        """The element type prepare recorded for dataset ``key`` of ``episode`` (numpy's
        ``dtype.str``; None: unknown)."""
        if self.frame_shapes is None:
            return None
        dtypes = json.loads(str(self.frame_shapes[episode])).get(DTYPES_KEY) or {}
        return dtypes.get(key)

    def cameras_of(self, episode: int) -> list[str]:
        return [c for c in str(self.cameras[episode]).split(_SEP) if c]

    def locate(self, global_index: int | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Global start index (scalar or array) -> (episode, frame), by binary search."""
        g = np.asarray(global_index, dtype=np.int64)
        if g.size and (g.min() < 0 or g.max() >= self.total_frames):
            raise IndexError(f"global index out of [0, {self.total_frames}): {global_index}")
        episode = np.searchsorted(self.cum_lengths, g, side="right")
        return episode, g - (self.cum_lengths[episode] - self.lengths[episode])

    def fingerprint(self) -> str:
        """A short hash of paths, lengths and labels: a saved state must match it."""
        h = hashlib.blake2b(digest_size=8)
        h.update(_SEP.join(self.paths.tolist()).encode())
        h.update(self.lengths.astype("<i8").tobytes())
        h.update(self.labels.astype("u1").tobytes())
        return h.hexdigest()

    def subset(self, keep: np.ndarray) -> EpisodeIndex:
        """The index restricted to the episodes where ``keep`` is true."""
        keep = np.asarray(keep, dtype=bool)
        return EpisodeIndex(
            self.root, self.paths[keep], self.lengths[keep], self.labels[keep],
            self.cameras[keep], self.depth_cameras[keep], self.has_reward[keep],
            self.qpos_dim, self.action_dim, self.skipped,
            None if self.frame_shapes is None else self.frame_shapes[keep],
        )  # fmt: skip

    def require_cameras(
        self, camera_names: list[str], *, depth: bool = False, failure_tolerance: int = 10
    ) -> EpisodeIndex:
        """Leave out (and log) episodes missing one of ``camera_names``; raise past tolerance."""
        tracker = FailureTracker(failure_tolerance)
        keep = np.ones(len(self), dtype=bool)
        for e in range(len(self)):
            have = set(self.cameras_of(e))
            if depth:
                have &= {c for c in str(self.depth_cameras[e]).split(_SEP) if c}
            missing = [c for c in camera_names if c not in have]
            if not missing:
                tracker.ok()
                continue
            group = "observations/depth" if depth else "observations/images"
            keep[e] = False
            err = DatasetFormatError(f"{self.path(e)}: no dataset /{group}/{missing[0]}")
            tracker.failed("episode", {"file": str(self.path(e)), "missing": missing}, err)
        if not keep.any():
            raise DatasetFormatError(f"no episode under {self.root} has cameras {camera_names}")
        return self if keep.all() else self.subset(keep)

    def save(self) -> StoragePath:
        out = self.root / INDEX_PATH
        skipped = np.array([f"{p}{_SEP}{why}" for p, why in self.skipped], dtype=str)
        extra: dict[str, Any] = {}
        if self.frame_shapes is not None:
            extra["frame_shapes"] = self.frame_shapes
        buffer = io.BytesIO()
        np.savez(
                buffer, version=FORMAT_VERSION, paths=self.paths, lengths=self.lengths,
                labels=self.labels, cameras=self.cameras, depth_cameras=self.depth_cameras,
                has_reward=self.has_reward, dims=np.array([self.qpos_dim, self.action_dim]),
                skipped=skipped, **extra,
            )  # fmt: skip
        write_atomic(out, buffer.getvalue())  # temp file + rename, or one PUT
        return out


def load_episode_index(folder: str | os.PathLike[str] | RemotePath) -> EpisodeIndex:
    """Read the index ``prepare_episodes`` wrote under ``folder`` (local or remote)."""
    root = as_path(folder)
    path = root / INDEX_PATH
    if not path.is_file():
        raise DatasetFormatError(f"{path} not found; run `energon-lite prepare {root}` first")
    try:
        source = path if isinstance(path, Path) else io.BytesIO(read_range_all(path))
        with np.load(source, allow_pickle=False) as z:
            if int(z["version"]) != FORMAT_VERSION:
                raise DatasetFormatError(f"{path}: index version {int(z['version'])} unknown")
            skipped = tuple(tuple(s.split(_SEP, 1)) for s in z["skipped"].tolist())
            shapes = z["frame_shapes"] if "frame_shapes" in z.files else None
            return EpisodeIndex(
                root, z["paths"], z["lengths"].astype(np.int64), z["labels"].astype(bool),
                z["cameras"], z["depth_cameras"], z["has_reward"].astype(bool),
                int(z["dims"][0]), int(z["dims"][1]), skipped, shapes,
            )  # fmt: skip
    except (KeyError, ValueError, OSError) as exc:
        raise DatasetFormatError(f"{path}: corrupt episode index ({exc}); prepare again") from exc


def import_h5py() -> Any:
    """The h5py module; without it, an error naming the extra that installs it."""
    try:
        import h5py
    except ImportError as exc:
        raise missing_extra("h5py", "h5", "robot episodes (HDF5 files)") from exc
    return h5py


def frame_pixels(key: str, shape: tuple[int, ...]) -> int:
    """Pixels per frame of a raw camera dataset (0 for encoded bytes: checked at decode)."""
    depth = key.startswith("observations/depth")
    if len(shape) == 4 or (depth and len(shape) == 3):
        return int(shape[1]) * int(shape[2])
    return 0


def check_frame_budget(path: StoragePath, key: str, shape: tuple[int, ...], budget: int) -> None:
    pixels = frame_pixels(key, shape)
    if pixels > budget:
        raise DatasetFormatError(
            f"{path}: /{key} declares frames of shape {tuple(shape[1:])} = {pixels:,} pixels, "
            f"over the budget of {budget:,} pixels per frame (max_frame_pixels)"
        )


def _scan_one(
    path: StoragePath, max_frame_pixels: int = MAX_FRAME_PIXELS
) -> tuple[int, bool, list[str], list[str], bool, int, int, str]:
    h5py = import_h5py()
    with open_binary(path) as raw, h5py.File(raw, "r") as f:  # remote: ranged reads
        for key in ("observations/qpos", "action"):
            if key not in f:
                raise DatasetFormatError(f"{path}: no dataset /{key}")
        qpos, action = f["observations/qpos"], f["action"]
        if qpos.ndim != 2 or action.ndim != 2:
            raise DatasetFormatError(f"{path}: /observations/qpos and /action must be (T, D)")
        if qpos.shape[0] != action.shape[0]:
            raise DatasetFormatError(
                f"{path}: /observations/qpos has {qpos.shape[0]} frames but /action has "
                f"{action.shape[0]}"
            )
        length = int(qpos.shape[0])
        if length == 0:
            raise DatasetFormatError(f"{path}: empty episode (/observations/qpos has 0 frames)")
        if "reward" in f and f["reward"].shape[:1] != (length,):
            raise DatasetFormatError(
                f"{path}: /reward has shape {f['reward'].shape}, not ({length},)"
            )
        images = f.get("observations/images")
        depth = f.get("observations/depth")
        shapes: dict[str, Any] = {}
        dtypes: dict[str, str] = {}
        for group, where in ((images, "images"), (depth, "depth")):
            for cam in group or ():
                if group[cam].shape[0] != length:
                    raise DatasetFormatError(
                        f"{path}: /observations/{where}/{cam} has {group[cam].shape[0]} frames, "
                        f"not {length}"
                    )
                key = f"observations/{where}/{cam}"
                check_frame_budget(path, key, group[cam].shape, max_frame_pixels)
                shapes[key] = [int(n) for n in group[cam].shape]
                dtypes[key] = group[cam].dtype.str
        shapes[DTYPES_KEY] = dtypes
        success = bool(f.attrs.get("success", DEFAULT_SUCCESS))
        cams = sorted(images) if images is not None else []
        depth_cams = sorted(depth) if depth is not None else []
        return (
            length, success, cams, depth_cams, "reward" in f, qpos.shape[1], action.shape[1],
            json.dumps(shapes, sort_keys=True),
        )  # fmt: skip


def scan_episodes(
    folder: str | os.PathLike[str] | RemotePath,
    *,
    failure_tolerance: int = 10,
    progress: bool = False,
    max_frame_pixels: int = MAX_FRAME_PIXELS,
) -> EpisodeIndex:
    """Open every episode under ``folder`` once and build the index (not written); a remote
    folder's episodes are read by ranges (their headers and first/last rows, not whole)."""
    root = as_path(folder)
    if not root.is_dir():
        raise ConfigError(f"dataset_dir={str(root)!r} is not a directory")
    files: Sequence[StoragePath]
    if isinstance(root, Path):
        files = sorted(p for ext in ("*.hdf5", "*.h5") for p in root.rglob(ext))
    else:  # one listing of the prefix
        names = sorted(n for ext in (".hdf5", ".h5") for n in list_files(root, ext))
        files = [root / n for n in names if not n.startswith(".nv-meta/")]
    import_h5py()  # before the progress bar: a missing extra is one clear line
    tracker = FailureTracker(failure_tolerance)
    rows, skipped, dims = [], [], None
    for path in tqdm(files, desc="scanning episodes", unit="episode", disable=not progress):
        try:
            row = _scan_one(path, max_frame_pixels)
            if dims is not None and row[5:7] != dims:
                raise DatasetFormatError(
                    f"{path}: qpos/action dims {row[5:7]} differ from the first episode's {dims}"
                )
        except (OSError, DatasetFormatError) as exc:
            skipped.append((_relative(path, root), f"{type(exc).__name__}: {exc}"))
            tracker.failed("episode scan", {"file": str(path)}, exc)
            continue
        tracker.ok()
        dims = dims or row[5:7]
        rows.append((_relative(path, root), *row))
    if not rows or dims is None:
        raise DatasetFormatError(f"no usable HDF5 episode (*.hdf5, *.h5) under {root}")
    cols = list(zip(*rows))
    return EpisodeIndex(
        root, np.array(cols[0], dtype=str), np.array(cols[1], dtype=np.int64),
        np.array(cols[2], dtype=bool), np.array([_SEP.join(c) for c in cols[3]], dtype=str),
        np.array([_SEP.join(c) for c in cols[4]], dtype=str), np.array(cols[5], dtype=bool),
        int(dims[0]), int(dims[1]), tuple(skipped), np.array(cols[8], dtype=str),
    )  # fmt: skip


def _relative(path: StoragePath, root: StoragePath) -> str:
    return str(path.relative_to(root))  # type: ignore[arg-type]


def prepare_episodes(
    folder: str | os.PathLike[str] | RemotePath,
    *,
    failure_tolerance: int = 10,
    progress: bool = True,
    max_frame_pixels: int = MAX_FRAME_PIXELS,
) -> StoragePath:
    """Scan the episodes under ``folder`` and write the index; returns its path."""
    return scan_episodes(
        folder,
        failure_tolerance=failure_tolerance,
        progress=progress,
        max_frame_pixels=max_frame_pixels,
    ).save()


def open_episode_index(folder: str | os.PathLike[str] | RemotePath) -> EpisodeIndex:
    """The prepared index of ``folder``, or a fresh scan (saved when the folder is writable)."""
    try:
        return load_episode_index(folder)
    except DatasetFormatError:
        if (as_path(folder) / INDEX_PATH).is_file():
            raise
    index = scan_episodes(folder)
    try:
        index.save()
    except OSError as exc:
        logger.info("episode index not saved (%s); it lives in memory only", exc)
    return index
