"""Energon's module path `megatron.energon.wrappers.map_dataset`: ``MapDataset``."""

from __future__ import annotations

from energon_lite.wrappers.mapping import MapDataset

__all__ = ["MapDataset"]
