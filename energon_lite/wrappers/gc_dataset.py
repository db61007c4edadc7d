"""Energon's module path `megatron.energon.wrappers.gc_dataset`: ``GcDataset``."""

from __future__ import annotations

from energon_lite.wrappers.transparent import GcDataset

__all__ = ["GcDataset"]
