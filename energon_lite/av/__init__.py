"""Video and audio decoding with PyAV: lazy ``AVDecoder`` clips, uniform sampling helpers.

Names and conventions follow ``megatron.energon.av`` so code moves over with an import
change; see ``docs/video_decoding.md``. Energon's ``megatron.energon.media`` metadata types
are here too (and in ``energon_lite.media``).
"""

from __future__ import annotations

from energon_lite.av.clips import get_clips_uniform, get_single_frames_uniform, uniform_ranges
from energon_lite.av.data import AVData
from energon_lite.av.decoder import (
    AV_DECODE_MODES,
    AVDecoder,
    DecodeStats,
    decode_av_part,
)
from energon_lite.av.decoder_cache import DecoderCache
from energon_lite.av.webdataset_decoder import AVWebdatasetDecoder
from energon_lite.media_records.records import (
    AVMetadata,
    ImageMetadata,
    MediaMetadataBase,
    MediaMetadataType,
    deserialize_media_metadata,
    serialize_media_metadata,
)

__all__ = [
    "AV_DECODE_MODES",
    "AVData",
    "AVDecoder",
    "AVMetadata",
    "AVWebdatasetDecoder",
    "DecodeStats",
    "DecoderCache",
    "ImageMetadata",
    "MediaMetadataBase",
    "MediaMetadataType",
    "decode_av_part",
    "deserialize_media_metadata",
    "get_clips_uniform",
    "get_single_frames_uniform",
    "serialize_media_metadata",
    "uniform_ranges",
]
