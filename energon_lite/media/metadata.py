"""Energon's ``megatron.energon.media.metadata`` path: the metadata types, the same objects
as ``energon_lite.media_records``' (and ``energon_lite.av``'s)."""

from __future__ import annotations

from energon_lite.media_records.records import *  # noqa: F403 (the names in its __all__)
from energon_lite.media_records.records import __all__ as __all__
