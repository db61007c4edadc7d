"""The image layouts ``SampleDecoder(image_decode=...)`` names and the pixel budget, apart
from the decoding itself (``image.py``): a loader checks its decoder's arguments in the
process that builds it, while only the processes that decode import Pillow and the JPEG
backend."""

from __future__ import annotations

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


# The most pixels one image may decode to (``SampleDecoder(max_image_pixels=...)``), checked
# from the header before any pixel is decoded: 8192 x 8192, four times a 4K frame, far above
# training images, while a 13000 x 13000 PNG of 500 KB (3.5 GB decoded) is skipped.
MAX_IMAGE_PIXELS = 8192 * 8192


def check_image_mode(mode: str) -> None:
    if mode not in IMAGE_MODES:
        raise ConfigError(f"unknown {mode=!r} for image_decode; allowed: {sorted(IMAGE_MODES)}")
