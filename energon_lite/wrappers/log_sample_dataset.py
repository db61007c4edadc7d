"""Energon's module path `megatron.energon.wrappers.log_sample_dataset`: ``LogSampleDataset``."""

from __future__ import annotations

from energon_lite.wrappers.transparent import LogSampleDataset

__all__ = ["LogSampleDataset"]
