"""Write small, real HDF5 episodes in the usual ACT/ALOHA layout (tests, benchmarks, docs).

Every value encodes where it comes from, so a reader bug shows up as a wrong number:
``qpos[t] = episode_id * 1000 + t`` (plus ``0.01 * dim``), ``action[t] = qpos[t] + 0.5`` and
camera ``c`` at frame ``t`` is a flat image of grey level ``pixel_value(t, c)``. Flat images
survive JPEG compression within a few grey levels.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np


def pixel_value(frame: int, camera: int) -> int:
    """The grey level of camera ``camera`` at ``frame`` in a synthetic episode."""
    return (frame * 7 + camera * 50) % 256


def _jpeg(image: np.ndarray, quality: int = 90) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(image).save(out, format="JPEG", quality=quality)
    return out.getvalue()


def write_episode(
    path: str | Path,
    length: int,
    *,
    episode_id: int = 0,
    cameras: tuple[str, ...] = ("cam_high", "cam_left_wrist"),
    image_size: tuple[int, int] = (24, 32),
    qpos_dim: int = 4,
    action_dim: int = 4,
    success: bool | None = True,
    images: str = "raw",
    depth: bool = False,
    reward: np.ndarray | None = None,
    texture: bool = False,
) -> Path:
    """Write one episode file; ``images`` is ``"raw"``, ``"jpeg"`` (padded rows) or ``"jpeg_vlen"``.

    ``success=None`` leaves the ``success`` attribute out (the index then applies its default).
    ``texture=True`` adds a fixed noise pattern to every frame, so JPEGs have camera-like
    sizes and decode costs (benchmarks); grey levels are then only right on average.
    """
    import h5py

    path = Path(path)
    height, width = image_size
    t = np.arange(length, dtype=np.float64)[:, None]
    qpos = episode_id * 1000.0 + t + 0.01 * np.arange(qpos_dim)[None, :]
    action = episode_id * 1000.0 + t + 0.5 + 0.01 * np.arange(action_dim)[None, :]
    with h5py.File(path, "w") as f:
        if success is not None:
            f.attrs["success"] = bool(success)
        f.create_dataset("observations/qpos", data=qpos.astype(np.float32))
        f.create_dataset("action", data=action.astype(np.float32))
        if reward is not None:
            f.create_dataset("reward", data=np.asarray(reward, dtype=np.float32))
        noise: np.ndarray = np.zeros((height, width, 3), dtype=np.int16)
        if texture:
            noise = np.random.default_rng(episode_id).integers(-20, 21, (height, width, 3))
        for c, cam in enumerate(cameras):
            frames = [
                np.clip(pixel_value(i, c) + noise, 0, 255).astype(np.uint8) for i in range(length)
            ]
            key = f"observations/images/{cam}"
            if images == "raw":
                f.create_dataset(key, data=np.stack(frames), chunks=(1, height, width, 3))
            elif images == "jpeg":
                encoded = [np.frombuffer(_jpeg(im), dtype=np.uint8) for im in frames]
                padded = np.zeros((length, max(len(e) for e in encoded)), dtype=np.uint8)
                for i, e in enumerate(encoded):
                    padded[i, : len(e)] = e
                f.create_dataset(key, data=padded)
            elif images == "jpeg_vlen":
                ds = f.create_dataset(key, (length,), dtype=h5py.vlen_dtype(np.uint8))
                for i, im in enumerate(frames):
                    ds[i] = np.frombuffer(_jpeg(im), dtype=np.uint8)
            else:
                raise ValueError(f"{images=} must be 'raw', 'jpeg' or 'jpeg_vlen'")
            if depth:
                d = np.arange(length, dtype=np.uint16)[:, None, None] + np.zeros(
                    (1, height, width), dtype=np.uint16
                )
                f.create_dataset(f"observations/depth/{cam}", data=d + 100 * c)
    return path


def write_dataset(
    folder: str | Path,
    lengths: list[int],
    successes: list[bool | None] | None = None,
    **kwargs,
) -> Path:
    """Write ``episode_<i>.hdf5`` for each length into ``folder``; returns the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    successes = successes if successes is not None else [i % 2 == 0 for i in range(len(lengths))]
    for i, (length, success) in enumerate(zip(lengths, successes, strict=True)):
        write_episode(folder / f"episode_{i}.hdf5", length, episode_id=i, success=success, **kwargs)
    return folder
