"""Media metadata types (Energon's ``megatron.energon.media.metadata``): what a video/audio
file or an image holds, as plain dataclasses that serialise to a (type, JSON) pair.

Defined here, below both the decoder (``energon_lite.av``, which returns them) and
``energon_lite.media`` (whose extractor uses the decoder), and needing neither PyAV nor
PIL; ``energon_lite.media``, ``energon_lite.media.metadata`` and ``energon_lite.av``
re-export them."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from enum import Enum
from typing import Any, ClassVar, TypeVar

from energon_lite.edataclass import edataclass
from energon_lite.errors import DatasetFormatError

M = TypeVar("M", bound="MediaMetadataBase")

# the names Energon's media.metadata has; media_records, media and media.metadata re-export them
__all__ = [
    "AVMetadata",
    "ImageMetadata",
    "MediaMetadataBase",
    "MediaMetadataType",
    "deserialize_media_metadata",
    "serialize_media_metadata",
]


class MediaMetadataType(str, Enum):
    """The kinds of metadata records."""

    AV = "av"
    IMAGE = "image"

    @classmethod
    def from_string(cls, value: str) -> MediaMetadataType:
        try:
            return cls(value)
        except ValueError:
            raise DatasetFormatError(
                f"unknown media metadata type {value!r}; known: {[m.value for m in cls]}"
            ) from None


@edataclass
class MediaMetadataBase:
    """Base of the metadata records: ``to_dict`` drops the fields that are None."""

    metadata_type: ClassVar[MediaMetadataType]

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls: type[M], payload: Mapping[str, Any]) -> M:
        return cls(**payload)


@edataclass
class AVMetadata(MediaMetadataBase):
    """What a container says about its first video and audio stream; None where absent."""

    metadata_type: ClassVar[MediaMetadataType] = MediaMetadataType.AV

    video_duration: float | None = None
    video_num_frames: int | None = None
    video_fps: float | None = None
    video_width: int | None = None
    video_height: int | None = None
    audio_duration: float | None = None
    audio_channels: int | None = None
    audio_sample_rate: int | None = None
    audio_num_samples: int | None = None


@edataclass
class ImageMetadata(MediaMetadataBase):
    """Size, format and mode of an encoded image."""

    metadata_type: ClassVar[MediaMetadataType] = MediaMetadataType.IMAGE

    width: int
    height: int
    format: str
    mode: str


_TYPES: dict[MediaMetadataType, type[MediaMetadataBase]] = {
    MediaMetadataType.AV: AVMetadata,
    MediaMetadataType.IMAGE: ImageMetadata,
}


def serialize_media_metadata(metadata: MediaMetadataBase) -> tuple[MediaMetadataType, str]:
    """``(type, compact JSON of the fields that are set)``."""
    return metadata.metadata_type, json.dumps(metadata.to_dict(), separators=(",", ":"))


def deserialize_media_metadata(
    metadata_type: str | MediaMetadataType, metadata_json: str
) -> MediaMetadataBase:
    """The record ``serialize_media_metadata`` wrote."""
    if not isinstance(metadata_type, MediaMetadataType):
        metadata_type = MediaMetadataType.from_string(metadata_type)
    payload = json.loads(metadata_json) if metadata_json else {}
    try:
        return _TYPES[metadata_type].from_dict(payload)
    except TypeError as exc:
        raise DatasetFormatError(f"{metadata_type.value} metadata {payload}: {exc}") from None
