"""Photo-like test images: smooth gradients, fine texture and hard edges, saved as real JPEGs.

The smooth shading is a sum of low-frequency waves, the texture is noise blurred at four
scales with more amplitude at coarser ones (a 1/f-like spectrum, as photos have), and
the edges are filled discs and boxes of solid colour. Used by the decode-at-size tests and
the draft benchmark, where flat synthetic pictures would hide what DCT downscaling loses.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageFilter


def make_photo(index: int, size: tuple[int, int] = (1024, 1024)) -> Image.Image:
    """A deterministic photo-like RGB picture for ``index``; ``size`` is (width, height)."""
    width, height = size
    rng = np.random.default_rng(index + 7_919)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    x /= max(1, width)
    y /= max(1, height)
    pixels = np.zeros((height, width, 3), dtype=np.float32)
    for c in range(3):
        base = rng.uniform(60, 190)
        for _ in range(3):
            fx, fy, phase = rng.uniform(0.5, 3.0), rng.uniform(0.5, 3.0), rng.uniform(0, 6.3)
            base = base + rng.uniform(10, 30) * np.sin(2 * np.pi * (fx * x + fy * y) + phase)
        pixels[:, :, c] = base
    noise = Image.fromarray(rng.integers(0, 256, (height, width), dtype=np.uint8))
    for sigma, grey_levels in ((0.7, 3.0), (1.5, 5.0), (3.0, 7.0), (6.0, 10.0)):
        # standard deviation grows with scale: a 1/f-like spectrum, as photos have
        band = np.asarray(noise.filter(ImageFilter.GaussianBlur(sigma)), dtype=np.float32)
        band -= band.mean()
        pixels += (band * (grey_levels / max(float(band.std()), 1e-6)))[:, :, None]
    for _ in range(6):  # hard edges: discs and boxes of solid colour
        colour = rng.uniform(0, 255, 3)
        cx, cy, r = rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(0.04, 0.2)
        if rng.random() < 0.5:
            mask = (x - cx) ** 2 + ((y - cy) * height / width) ** 2 < r * r
        else:
            mask = (abs(x - cx) < r) & (abs(y - cy) < r * 0.6)
        pixels[mask] = colour
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def photo_jpeg(index: int, size: tuple[int, int] = (1024, 1024), quality: int = 90) -> bytes:
    """``make_photo(index, size)`` as JPEG bytes."""
    buffer = io.BytesIO()
    make_photo(index, size).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()
