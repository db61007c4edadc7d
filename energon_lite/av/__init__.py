"""Video and audio decoding with PyAV: lazy ``AVDecoder`` clips, uniform sampling helpers.

Names and conventions follow ``megatron.energon.av`` so code moves over with an import
change; see ``docs/video_decoding.md``.
"""

from __future__ import annotations

from energon_lite.av.clips import get_clips_uniform, get_single_frames_uniform, uniform_ranges
from energon_lite.av.decoder import (
    AV_DECODE_MODES,
    AVData,
    AVDecoder,
    AVMetadata,
    DecodeStats,
    decode_av_part,
)

__all__ = [
    "AV_DECODE_MODES",
    "AVData",
    "AVDecoder",
    "AVMetadata",
    "DecodeStats",
    "decode_av_part",
    "get_clips_uniform",
    "get_single_frames_uniform",
    "uniform_ranges",
]
