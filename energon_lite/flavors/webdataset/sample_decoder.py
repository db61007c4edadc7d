"""Energon's ``flavors.webdataset.sample_decoder``: ``SampleDecoder`` and the decoder-name types."""

from __future__ import annotations

from typing import Literal

from energon_lite.decode.decoder import SampleDecoder

#: what ``SampleDecoder(image_decode=...)`` takes, by Energon's names
ImageDecoderType = Literal[
    "l8", "rgb8", "rgba8", "l", "rgb", "rgba", "torchl8", "torchrgb8", "torchrgba8", "torchl",
    "torchrgb", "torch", "torchrgba", "pill", "pil", "pilrgb", "pilrgba",
]  # fmt: skip
#: what ``SampleDecoder(av_decode=...)`` takes
AVDecoderType = Literal["torch", "AVDecoder", "pyav"]

__all__ = ["AVDecoderType", "ImageDecoderType", "SampleDecoder"]
