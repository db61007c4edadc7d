"""Energon's module path `megatron.energon.wrappers.group_batch_dataset`: ``GroupBatchDataset``."""

from __future__ import annotations

from energon_lite.wrappers.batching import GroupBatchDataset

__all__ = ["GroupBatchDataset"]
