"""Registers the robot-episode kind: a folder of HDF5 episodes (and no tar shards)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from energon_lite.kinds import DatasetKind, register_kind


def is_episode_folder(path: Path) -> bool:
    """A folder of ``*.hdf5``/``*.h5`` episodes without tar shards."""
    if not path.is_dir() or any(path.rglob("*.tar")):
        return False
    return any(path.glob("*.hdf5")) or any(path.glob("*.h5"))


def _prepare(path: Path, options: Mapping[str, Any]) -> str:
    from energon_lite.flavors.episodes.index import prepare_episodes

    return f"Indexed robot episodes: {prepare_episodes(path)}"


KIND = register_kind(
    DatasetKind(
        "episodes",
        detect=is_episode_folder,
        prepare=_prepare,
        loads_with="energon_lite.flavors.episodes (EpisodeDataset or create_qc_dataloader_v3)",
    )
)
