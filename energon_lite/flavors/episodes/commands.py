"""``energon-lite info``, ``preview`` and ``lint`` of a folder of robot episodes (see ``kind``)."""

from __future__ import annotations

import os

from tqdm import tqdm

from energon_lite.flavors.episodes.index import load_episode_index
from energon_lite.flavors.episodes.reader import EpisodeReader
from energon_lite.storage import as_path


def episodes_info(root: str | os.PathLike[str]) -> list[str]:
    index = load_episode_index(as_path(root))
    cameras = sorted({c for e in range(len(index)) for c in index.cameras_of(e)})
    lines = [
        f"robot episodes {root}",
        f"  total: {len(index)} episodes, {index.total_frames} frames "
        f"({int(index.labels.sum())} successful)",
        f"  qpos dim {index.qpos_dim}, action dim {index.action_dim}, "
        f"reward in {int(index.has_reward.sum())} episode(s)",
        f"  cameras: {', '.join(cameras) or 'none'}",
    ]
    if index.skipped:
        lines.append(f"  skipped at prepare: {len(index.skipped)} file(s), e.g.")
        lines.extend(f"    {path}: {why}" for path, why in index.skipped[:5])
    return lines


def episodes_preview(root: str | os.PathLike[str], split_part: str = "", num: int = 5) -> list[str]:
    """One line per episode, then its arrays and the first frame of each camera (episodes
    have no splits: ``split_part`` is ignored)."""
    index = load_episode_index(as_path(root))
    reader = EpisodeReader(index)
    lines = []
    try:
        for e in range(min(num, len(index))):
            low = reader.low_dim(e)
            lines.append(f"{index.paths[e]} #{e}: {int(index.lengths[e])} frames")
            lines.append(f"    success: {bool(index.labels[e])}")
            lines.append(f"    qpos: {low.qpos.shape} {low.qpos.dtype}")
            lines.append(f"    action: {low.action.shape} {low.action.dtype}")
            for camera in index.cameras_of(e):
                frame = reader.frame(e, 0, [camera])[0]
                lines.append(f"    {camera}[0]: {frame.shape} {frame.dtype}")
    finally:
        reader.close()
    return lines


def episodes_lint(root: str | os.PathLike[str], progress: bool = True) -> list[str]:
    """Read every episode's arrays and decode every frame of every camera."""
    index = load_episode_index(as_path(root))
    reader = EpisodeReader(index, max_open_files=1, cache_episodes=1)
    problems = [f"skipped at prepare: {path}: {why}" for path, why in index.skipped]
    bar = tqdm(total=index.total_frames, desc="lint episodes", unit="frame", disable=not progress)
    try:
        for e in range(len(index)):
            where = f"{index.paths[e]} #{e}"
            if not index.path(e).is_file():
                problems.append(f"{where}: file is missing; prepare again")
                continue
            try:
                reader.low_dim(e)
                cameras = index.cameras_of(e)
                for frame in range(int(index.lengths[e])):
                    for camera in cameras:
                        reader.frame(e, frame, [camera])
                    bar.update()
            except Exception as exc:  # report every kind of failure, then go on
                problems.append(f"{where}: {type(exc).__name__}: {exc}")
    finally:
        bar.close()
        reader.close()
    return problems
