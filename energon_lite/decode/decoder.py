"""``SampleDecoder``: turns the raw bytes of a sample's parts into Python values by extension.

The extension is the part name's last suffix (``seg.jpg`` -> ``jpg``). Unknown extensions
stay bytes. ``TaskEncoder.decoder = None`` keeps every part raw.
"""

from __future__ import annotations

import importlib.util
import io
import json
import pickle
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

from energon_lite.decode.image import check_image_mode, decode_image
from energon_lite.errors import ConfigError

IMAGE_EXTS = frozenset(
    {"jpg", "jpeg", "png", "webp", "ppm", "pgm", "pbm", "bmp", "tif", "tiff", "gif"}
)
AV_EXTS = frozenset(
    {"mp4", "avi", "mov", "mkv", "webm", "m4v", "flv", "mpg", "mpeg",
     "flac", "mp3", "wav", "m4a", "ogg", "opus", "aac"}
)  # fmt: skip
TEXT_EXTS = frozenset({"txt", "text", "transcript"})
INT_EXTS = frozenset({"cls", "cls2", "index", "inx", "id"})
AV_MODES = ("AVDecoder", "pyav", "torch")


@dataclass(frozen=True)
class SampleDecoder:
    """How parts are decoded (Energon's ``SampleDecoder`` arguments).

    ``image_decode``: one of ``energon_lite.decode.image.IMAGE_MODES`` ("torchrgb": float
    CHW in [0, 1]; "pil"; "torchuint8"; "rgb8" ...). ``av_decode``: "AVDecoder" (lazy
    decoder object), "pyav" (open container) or "torch" (decoded tensors).
    """

    image_decode: str = "torchrgb"
    av_decode: str = "AVDecoder"
    video_decode_audio: bool = False

    def __post_init__(self) -> None:
        check_image_mode(self.image_decode)
        if self.av_decode not in AV_MODES:
            raise ConfigError(f"unknown av_decode={self.av_decode!r}; allowed: {list(AV_MODES)}")

    def decode_part(self, part: str, data: bytes) -> Any:
        """Decode one part's bytes according to its extension."""
        ext = part.rsplit(".", 1)[-1].lower()
        if ext in IMAGE_EXTS:
            return decode_image(data, self.image_decode)
        if ext in TEXT_EXTS:
            return data.decode("utf-8")
        if ext == "json":
            return json.loads(data)
        if ext in INT_EXTS:
            return int(data)
        if ext == "npy":
            return np.load(io.BytesIO(data), allow_pickle=False)
        if ext == "npz":
            return dict(np.load(io.BytesIO(data), allow_pickle=False))
        if ext in ("msgpack", "mpk", "mp"):
            return msgpack.unpackb(data, raw=False)
        if ext in ("pth", "pt"):
            import torch

            return torch.load(io.BytesIO(data), weights_only=True)
        if ext in ("pyd", "pickle"):
            return pickle.loads(data)
        if ext in AV_EXTS:
            from energon_lite.av import decode_av_part

            return decode_av_part(data, self.av_decode, self.video_decode_audio)
        return data

    def decode(self, raw: dict[str, Any], parts: frozenset[str] | None = None) -> dict[str, Any]:
        """Decode the parts of a raw sample (only ``parts`` if given); keys stay as they are."""
        out: dict[str, Any] = {}
        for name, value in raw.items():
            if name.startswith("__") or (parts is not None and name not in parts):
                out[name] = value
            else:
                out[name] = self.decode_part(name, value)
        return out


def require_av(where: str, parts: frozenset[str] | None = None) -> None:
    """Refuse at open, not per sample, when video/audio must be decoded without PyAV.

    ``parts``: the part names a sample factory decodes (None: check unconditionally)."""
    if parts is not None and not any(part.rsplit(".", 1)[-1] in AV_EXTS for part in parts):
        return
    if importlib.util.find_spec("av") is None:
        raise ConfigError(
            f"{where} has video/audio parts, which need PyAV: pip install 'energon-lite[av]'"
        )
