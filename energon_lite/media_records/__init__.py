"""Media metadata records without any decoder: the types (``records.py``: ``ImageMetadata``,
``AVMetadata`` ...) and their table in ``.nv-meta/index.sqlite`` (``table.py``), importable
without PyAV, so that an image-only setup reads recorded metadata too. Users import them
from ``energon_lite.media`` (Energon's path)."""

from __future__ import annotations

from energon_lite.media_records.records import (
    AVMetadata,
    ImageMetadata,
    MediaMetadataBase,
    MediaMetadataType,
    deserialize_media_metadata,
    serialize_media_metadata,
)

__all__ = [
    "AVMetadata",
    "ImageMetadata",
    "MediaMetadataBase",
    "MediaMetadataType",
    "deserialize_media_metadata",
    "serialize_media_metadata",
]
