"""Energon's ``megatron.energon.media.metadata`` path: the metadata types, the same objects
as ``energon_lite.media_records``' (and ``energon_lite.av``'s)."""

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
