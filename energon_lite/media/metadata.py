"""Energon's ``megatron.energon.media.metadata`` path: the metadata types, the same objects
as ``energon_lite.av``'s."""

from __future__ import annotations

from energon_lite.av.metadata import (
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
