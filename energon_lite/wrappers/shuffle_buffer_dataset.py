"""Energon's module path `megatron.energon.wrappers.shuffle_buffer_dataset`: ``ShuffleBufferDataset``."""

from __future__ import annotations

from energon_lite.wrappers.transparent import ShuffleBufferDataset

__all__ = ["ShuffleBufferDataset"]
