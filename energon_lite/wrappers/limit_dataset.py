"""Energon's module path `megatron.energon.wrappers.limit_dataset`: ``LimitDataset``."""

from __future__ import annotations

from energon_lite.wrappers.lengths import LimitDataset

__all__ = ["LimitDataset"]
