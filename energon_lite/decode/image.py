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
    with Image.open(io.BytesIO(data)) as img:
        img.load()
        if pil_mode is not None and img.mode != pil_mode:
            img = img.convert(pil_mode)
        if kind == "pil":
            return img
        array = np.array(img)  # a writable copy: tensors made from it may be modified
    if array.ndim == 2:
        array = array[:, :, None]
    if kind == "uint8":
        return array
    if kind == "float":
        return array.astype(np.float32) / 255.0
    hwc = torch.from_numpy(array)
    if kind == "torchuint8":
        return hwc.permute(2, 0, 1).contiguous()
    chw = torch.empty(hwc.shape[2], hwc.shape[0], hwc.shape[1], dtype=torch.float32)
    chw.copy_(hwc.permute(2, 0, 1))  # one pass: layout change and dtype conversion together
    return chw.div_(255.0)
