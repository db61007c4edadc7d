"""Energon's dataset wrapper classes, as adapters over energon_lite's stages.

For code that composes pipelines by hand (Energon users who overrode
``build_train_datasets``): each wrapper takes Energon's constructor arguments, runs the
wrapped datasets' chains with one stage on top, and saves and restores exactly through
``get_savable_loader`` like any other dataset (``base.py``).
"""

from __future__ import annotations

from energon_lite.wrappers.base import WrapperDataset
from energon_lite.wrappers.batching import BatchDataset, GroupBatchDataset, PackingDataset
from energon_lite.wrappers.blending import BlendDataset, ConcatDataset, MixBatchDataset
from energon_lite.wrappers.lengths import EpochizeDataset, LimitDataset, RepeatDataset
from energon_lite.wrappers.mapping import FilterDataset, IterMapDataset, MapDataset
from energon_lite.wrappers.transparent import GcDataset, LogSampleDataset, ShuffleBufferDataset

__all__ = [
    "BatchDataset",
    "BlendDataset",
    "ConcatDataset",
    "EpochizeDataset",
    "FilterDataset",
    "GcDataset",
    "GroupBatchDataset",
    "IterMapDataset",
    "LimitDataset",
    "LogSampleDataset",
    "MapDataset",
    "MixBatchDataset",
    "PackingDataset",
    "RepeatDataset",
    "ShuffleBufferDataset",
    "WrapperDataset",
]
