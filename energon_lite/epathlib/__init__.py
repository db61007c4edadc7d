"""Energon's path module (``megatron.energon.epathlib``): ``EPath`` over energon_lite's storage."""

from __future__ import annotations

from energon_lite.epathlib.epath import DEFAULT_PROFILE_NAME, EPath

__all__ = ["DEFAULT_PROFILE_NAME", "EPath"]
