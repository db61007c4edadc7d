"""Image decoding with Pillow into the layouts WebDataset's ``imagehandler`` names."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import torch
from PIL import Image

from energon_lite.errors import ConfigError

# mode -> (Pillow mode or None to keep, output kind)
IMAGE_MODES: dict[str, tuple[str | None, str]] = {
    "pil": (None, "pil"),
    "pilrgb": ("RGB", "pil"),
    "pilrgba": ("RGBA", "pil"),
    "pill": ("L", "pil"),
    "l8": ("L", "uint8"),
    "rgb8": ("RGB", "uint8"),
    "rgba8": ("RGBA", "uint8"),
    "l": ("L", "float"),
    "rgb": ("RGB", "float"),
    "rgba": ("RGBA", "float"),
    "numpy": ("RGB", "float"),
    "torchl8": ("L", "torchuint8"),
    "torchrgb8": ("RGB", "torchuint8"),
    "torchuint8": ("RGB", "torchuint8"),
    "torchrgba8": ("RGBA", "torchuint8"),
    "torchl": ("L", "torchfloat"),
    "torchrgb": ("RGB", "torchfloat"),
    "torch": ("RGB", "torchfloat"),
    "torchrgba": ("RGBA", "torchfloat"),
}


def check_image_mode(mode: str) -> None:
    if mode not in IMAGE_MODES:
        raise ConfigError(f"unknown {mode=!r} for image_decode; allowed: {sorted(IMAGE_MODES)}")


def decode_image(data: bytes, mode: str) -> Any:
    """Decode image bytes: numpy layouts are HWC, torch layouts CHW; floats lie in [0, 1]."""
    pil_mode, kind = IMAGE_MODES[mode]
    with Image.open(io.BytesIO(data)) as opened:
        opened.load()
        img: Image.Image = opened
        if pil_mode is not None and img.mode != pil_mode:
            img = img.convert(pil_mode)
        if kind == "pil":
            return img
        if kind.startswith("torch"):
            return _planar_tensor(img, kind == "torchuint8")
        array = np.array(img)
    if array.ndim == 2:
        array = array[:, :, None]
    if kind == "uint8":
        return array
    return array.astype(np.float32) / 255.0


def _planar_tensor(img: Image.Image, as_uint8: bool) -> torch.Tensor:
    """A CHW tensor written band by band: each band is a contiguous plane, so the layout
    change costs no strided copy, and uint8 -> float and the scaling happen in one pass."""
    bands = img.split()
    height, width = img.height, img.width
    out = torch.empty((len(bands), height, width), dtype=torch.uint8 if as_uint8 else torch.float32)
    view = out.numpy()
    for channel, band in enumerate(bands):
        plane = np.frombuffer(band.tobytes(), dtype=np.uint8).reshape(height, width)
        if as_uint8:
            view[channel] = plane
        else:
            np.divide(plane, np.float32(255), out=view[channel], dtype=np.float32)
    return out
