"""Energon's module path `megatron.energon.wrappers.concat_dataset`: ``ConcatDataset``."""

from __future__ import annotations

from energon_lite.wrappers.blending import ConcatDataset

__all__ = ["ConcatDataset"]
