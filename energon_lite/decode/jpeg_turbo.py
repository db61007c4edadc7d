"""JPEG decoding with simplejpeg (its own libjpeg-turbo) when it is installed.

On the W1 images simplejpeg decodes 1.35-1.7x as many JPEGs per second as Pillow, to the
same pixels (both are libjpeg-turbo with the same DCT and upsampling; benchmarks/README.md,
"JPEG decoders"). It is an optional extra (``pip install 'energon-lite[jpeg]'``); Pillow
stays the decoder of everything else and the fallback for every JPEG simplejpeg does not
take: CMYK and YCCK pictures, and any file it reports as damaged (Pillow then decodes it or
raises its own error, exactly as without the extra).

``ENERGON_LITE_JPEG_DECODER=pillow`` turns it off (``auto``, the default, uses it when
present), read when this module is first imported.

A decode at the task's size asks for the scale Pillow's ``draft`` would choose (1/2, 1/4 or
1/8, never libjpeg-turbo's in-between scales such as 7/8), so the resize that follows starts
from the same pixels on both paths.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from energon_lite.errors import ConfigError

ENV = "ENERGON_LITE_JPEG_DECODER"
_CHOICES = ("auto", "pillow")
_JPEG_MAGIC = b"\xff\xd8\xff"
_COLOURSPACES = ("YCbCr", "Gray")  # what libjpeg-turbo turns into RGB as Pillow does


def _load() -> Any:
    choice = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if choice not in _CHOICES:
        raise ConfigError(f"{ENV}={os.environ[ENV]!r}: expected one of {', '.join(_CHOICES)}")
    if choice == "pillow":
        return None
    try:
        import simplejpeg
    except ImportError:
        return None
    return simplejpeg


_simplejpeg = _load()


def active() -> bool:
    """Whether JPEGs are decoded with simplejpeg in this process."""
    return _simplejpeg is not None


def draft_scale(width: int, height: int, request: tuple[int, int]) -> int:
    """The DCT scale denominator Pillow's ``draft`` picks for ``request`` = (width, height):
    the largest of 8, 4, 2, 1 that keeps both sides at least as large as asked."""
    fits = min(width // max(1, request[0]), height // max(1, request[1]))
    return next((s for s in (8, 4, 2) if fits >= s), 1)


def header(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` of a JPEG simplejpeg will decode to RGB as Pillow does, else None
    (not a JPEG, no simplejpeg, a colour space left to Pillow, an unreadable header)."""
    # any bytes-like object, as Pillow takes (a memoryview has no startswith)
    if _simplejpeg is None or bytes(memoryview(data)[:3]) != _JPEG_MAGIC:
        return None
    try:
        height, width, colourspace, _ = _simplejpeg.decode_jpeg_header(data)
    except ValueError:
        return None
    return (width, height) if colourspace in _COLOURSPACES else None


def decode_rgb(data: bytes, width: int, height: int, scale: int = 1) -> np.ndarray | None:
    """The RGB pixels (H, W, 3 uint8) of a JPEG whose ``header`` was read, at 1/``scale``
    size by DCT scaling; None when simplejpeg refuses it (Pillow then decodes it)."""
    assert _simplejpeg is not None
    want = (-(-height // scale), -(-width // scale))
    try:
        if scale == 1:
            pixels = _simplejpeg.decode_jpeg(data, "rgb")
        else:
            pixels = _simplejpeg.decode_jpeg(
                data, "rgb", min_height=want[0], min_width=want[1], min_factor=scale
            )
    except ValueError:  # damaged (strict mode): Pillow decodes it or names the damage
        return None
    return pixels if pixels.shape[:2] == want else None
