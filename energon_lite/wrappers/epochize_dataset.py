"""Energon's module path `megatron.energon.wrappers.epochize_dataset`: ``EpochizeDataset``."""

from __future__ import annotations

from energon_lite.wrappers.lengths import EpochizeDataset

__all__ = ["EpochizeDataset"]
