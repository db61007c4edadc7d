"""Energon's module path `megatron.energon.wrappers.mix_batch_dataset`: ``MixBatchDataset``."""

from __future__ import annotations

from energon_lite.batching.generic import concat_pad, generic_concat, homogeneous_concat_mix
from energon_lite.wrappers.blending import MixBatchDataset

__all__ = ["MixBatchDataset", "concat_pad", "generic_concat", "homogeneous_concat_mix"]
