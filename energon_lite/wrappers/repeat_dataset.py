"""Energon's module path `megatron.energon.wrappers.repeat_dataset`: ``RepeatDataset``."""

from __future__ import annotations

from energon_lite.wrappers.lengths import RepeatDataset

__all__ = ["RepeatDataset"]
