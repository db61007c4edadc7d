"""``AVWebdatasetDecoder``: Energon's per-file media decoder for webdataset-style handlers."""

from __future__ import annotations

from typing import Any

from energon_lite.av.decoder import AV_DECODE_MODES, AVDecoder, decode_av_part
from energon_lite.errors import ConfigError

# The extensions Energon's handler takes (others: None, so the next handler may try).
AV_HANDLER_EXTS = ("mp4", "avi", "mov", "webm", "mkv", "flac", "mp3", "wav", "flv")


class AVWebdatasetDecoder:
    """``decoder(key, data)``: the media part ``key`` (an extension or a file name) decoded
    as ``av_decode`` says ("AVDecoder", "pyav", "torch"), or None for other extensions."""

    def __init__(self, video_decode_audio: bool, av_decode: str = "AVDecoder") -> None:
        if av_decode not in AV_DECODE_MODES:
            raise ConfigError(f"av_decode={av_decode!r} is not one of {AV_DECODE_MODES}")
        self.video_decode_audio = video_decode_audio
        self.av_decode = av_decode

    def read_av_data(self, data: bytes) -> AVDecoder:
        """A lazy decoder over ``data``."""
        return AVDecoder(data)

    def __call__(self, key: str, data: bytes) -> Any:
        key = key.lower()
        if not any(key == ext or key.endswith("." + ext) for ext in AV_HANDLER_EXTS):
            return None
        return decode_av_part(data, self.av_decode, self.video_decode_audio)
