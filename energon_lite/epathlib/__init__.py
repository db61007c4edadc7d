"""Energon's path module (``megatron.energon.epathlib``): ``EPath`` over energon_lite's storage
(defined in ``energon_lite/storage/epath.py``)."""

from __future__ import annotations

from energon_lite.storage.epath import DEFAULT_PROFILE_NAME, EPath

__all__ = ["DEFAULT_PROFILE_NAME", "EPath"]
