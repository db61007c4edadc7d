"""Energon's module path `megatron.energon.wrappers.packing_dataset`: ``PackingDataset``."""

from __future__ import annotations

from energon_lite.wrappers.batching import PackingDataset

__all__ = ["PackingDataset"]
