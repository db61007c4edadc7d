"""Energon's module path `megatron.energon.wrappers.iter_map_dataset`: ``IterMapDataset``."""

from __future__ import annotations

from energon_lite.wrappers.mapping import IterMapDataset

__all__ = ["IterMapDataset"]
