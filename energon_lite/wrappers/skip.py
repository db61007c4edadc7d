"""Energon's module path `megatron.energon.wrappers.skip`: ``SkipSample``."""

from __future__ import annotations

from energon_lite.errors import SkipSample

__all__ = ["SkipSample"]
