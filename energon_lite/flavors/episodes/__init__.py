"""Robot episodes: action-chunk transitions from HDF5 episodes, deterministic and resumable.

Modules, in the order data flows:

* ``index``       - ``prepare_episodes(folder)``: one scan into ``.nv-meta/episodes.npz``;
* ``reader``      - lazy per-process HDF5 access, frames decoded on demand;
* ``transitions`` - the transition of a start frame (Q-chunking fields);
* ``stats``       - ``compute_norm_stats`` (ACT's keys);
* ``pool`` / ``sweep`` - the ``pool`` and ``full`` sampling stages, one per global worker;
* ``pipeline``    - ``EpisodePipeline``: the per-worker chain the loader builds;
* ``dataloader``  - ``create_qc_dataloader_v3``: the Q-chunking loader's interface;
* ``qc_dataset``  - ``QCSimpleDatasetV3``: the Q-chunking map-style dataset, for a plain DataLoader;
* ``frame_cache`` - ``FrameCache``: decoded frames kept up to a byte budget (LRU).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from energon_lite.flavors.lazy_exports import lazy_exports

if TYPE_CHECKING:  # the names below, for type checkers; at run time see __getattr__
    from energon_lite.flavors.episodes.collate import collate_transitions
    from energon_lite.flavors.episodes.dataloader import EpisodeDataset, create_qc_dataloader_v3
    from energon_lite.flavors.episodes.frame_cache import FrameCache
    from energon_lite.flavors.episodes.index import (
        DEFAULT_SUCCESS,
        EpisodeIndex,
        load_episode_index,
        open_episode_index,
        prepare_episodes,
        scan_episodes,
    )
    from energon_lite.flavors.episodes.pipeline import EpisodePipeline
    from energon_lite.flavors.episodes.pool import EpisodePool, choose_pool
    from energon_lite.flavors.episodes.qc_dataset import QCSimpleDatasetV3
    from energon_lite.flavors.episodes.stats import compute_norm_stats
    from energon_lite.flavors.episodes.sweep import EpisodeSweep
    from energon_lite.flavors.episodes.transitions import TransitionBuilder, chunk_fields

# Every name on first use: the registry imports this package (for ``kind``) in every loop
# that opens data, a plain tar folder's included, and the collate and dataloader modules
# import torch
_MODULES = {
    "collate": ("collate_transitions",),
    "dataloader": ("EpisodeDataset", "create_qc_dataloader_v3"),
    "frame_cache": ("FrameCache",),
    "index": (
        "DEFAULT_SUCCESS",
        "EpisodeIndex",
        "load_episode_index",
        "open_episode_index",
        "prepare_episodes",
        "scan_episodes",
    ),
    "pipeline": ("EpisodePipeline",),
    "pool": ("EpisodePool", "choose_pool"),
    "qc_dataset": ("QCSimpleDatasetV3",),
    "stats": ("compute_norm_stats",),
    "sweep": ("EpisodeSweep",),
    "transitions": ("TransitionBuilder", "chunk_fields"),
}
__getattr__, __dir__ = lazy_exports(__name__, _MODULES)

__all__ = [
    "DEFAULT_SUCCESS",
    "EpisodeDataset",
    "EpisodeIndex",
    "EpisodePipeline",
    "EpisodePool",
    "EpisodeSweep",
    "FrameCache",
    "QCSimpleDatasetV3",
    "TransitionBuilder",
    "choose_pool",
    "chunk_fields",
    "collate_transitions",
    "compute_norm_stats",
    "create_qc_dataloader_v3",
    "load_episode_index",
    "open_episode_index",
    "prepare_episodes",
    "scan_episodes",
]
