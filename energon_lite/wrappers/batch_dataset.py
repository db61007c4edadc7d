"""Energon's module path `megatron.energon.wrappers.batch_dataset`: ``BatchDataset``."""

from __future__ import annotations

from energon_lite.wrappers.batching import BatchDataset

__all__ = ["BatchDataset"]
