"""``DatasetBlendMode`` (Energon's ``metadataset.loader_interface``): how a split's datasets
are combined."""

from __future__ import annotations

from enum import Enum


class DatasetBlendMode(Enum):
    """How the datasets of a split are combined (Energon's names)."""

    NONE = "none"
    DATASET_WEIGHT = "dataset_weight"
    SAMPLE_REPETITIONS = "sample_repetitions"


__all__ = ["DatasetBlendMode"]
