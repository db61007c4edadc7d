"""Energon's module path `megatron.energon.wrappers.filter_dataset`: ``FilterDataset``."""

from __future__ import annotations

from energon_lite.wrappers.mapping import FilterDataset

__all__ = ["FilterDataset"]
