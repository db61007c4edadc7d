"""Energon's module path `megatron.energon.wrappers.blend_dataset`: ``BlendDataset``."""

from __future__ import annotations

from energon_lite.wrappers.blending import BlendDataset

__all__ = ["BlendDataset"]
