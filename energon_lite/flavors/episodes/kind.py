"""Registers the robot-episode kind: a folder of HDF5 episodes (and no tar shards)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from energon_lite.flavors.episodes.layout import INDEX_PATH
from energon_lite.sources.kinds import DatasetKind, register_kind


def is_episode_folder(path: Path) -> bool:
    """A folder of ``*.hdf5``/``*.h5`` episodes without tar shards (or one prepared as such)."""
    if (path / INDEX_PATH).is_file():
        return True
    if not path.is_dir() or any(path.rglob("*.tar")):
        return False
    return any(path.glob("*.hdf5")) or any(path.glob("*.h5"))


def _describe(path: Path) -> list[str]:
    from energon_lite.flavors.episodes.commands import episodes_info

    return episodes_info(path)


def _preview(path: Path, split_part: str, num: int) -> list[str]:
    from energon_lite.flavors.episodes.commands import episodes_preview

    return episodes_preview(path, split_part, num)


def _lint(path: Path, progress: bool) -> list[str]:
    from energon_lite.flavors.episodes.commands import episodes_lint

    return episodes_lint(path, progress)


def _prepare(path: Path, options: Mapping[str, Any]) -> str:
    from energon_lite.flavors.episodes.index import prepare_episodes

    return f"Indexed robot episodes: {prepare_episodes(path)}"


KIND = register_kind(
    DatasetKind(
        "episodes",
        detect=is_episode_folder,
        prepare=_prepare,
        describe=_describe,
        preview=_preview,
        lint=_lint,
        loads_with="energon_lite.flavors.episodes (EpisodeDataset or create_qc_dataloader_v3)",
    )
)
