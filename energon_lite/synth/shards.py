"""Real sample data for the demo, docs, tests and benchmarks: tar shards of JPEGs and captions.

Images are small smooth pictures (a gradient and a box whose colour and place depend on the
sample index), saved as real JPEGs with Pillow, so decoding costs what it costs for real data.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image

_WORDS = "a small red blue green cat dog house tree car boat sky river under over near big".split()


def make_image(index: int, size: tuple[int, int] = (64, 64)) -> Image.Image:
    """A deterministic RGB picture for sample ``index`` (width, height = ``size``)."""
    width, height = size
    y, x = np.mgrid[0:height, 0:width]
    rng = np.random.default_rng(index)
    base = rng.integers(0, 256, size=3)
    pixels = np.empty((height, width, 3), dtype=np.uint8)
    for c in range(3):
        pixels[:, :, c] = (
            base[c] + x * (c + 1) * 255 // max(1, width) + y * 128 // max(1, height)
        ) % 256
    x0, y0 = rng.integers(0, max(1, width // 2)), rng.integers(0, max(1, height // 2))
    pixels[y0 : y0 + height // 3, x0 : x0 + width // 3] = rng.integers(0, 256, size=3)
    return Image.fromarray(pixels)


def make_caption(index: int) -> str:
    rng = np.random.default_rng(index + 1_000_003)
    words = rng.choice(_WORDS, size=int(rng.integers(3, 12)))
    return f"sample {index}: " + " ".join(words)


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    tar.addfile(info, io.BytesIO(data))


def write_captioning_shards(
    root: str | os.PathLike[str],
    num_samples: int,
    samples_per_shard: int,
    *,
    image_size: tuple[int, int] = (64, 64),
    quality: int = 90,
    with_json: bool = False,
    prefix: str = "parts/data",
    key_format: str = "{:06d}",
) -> list[Path]:
    """Write ``num_samples`` JPEG+caption samples (``.jpg``, ``.txt``, optionally ``.json``)."""
    root = Path(root)
    paths = []
    for shard, start in enumerate(range(0, num_samples, samples_per_shard)):
        path = root / f"{prefix}-{shard}.tar"
        path.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
            for index in range(start, min(num_samples, start + samples_per_shard)):
                key = key_format.format(index)
                buffer = io.BytesIO()
                make_image(index, image_size).save(buffer, format="JPEG", quality=quality)
                _add(tar, f"{key}.jpg", buffer.getvalue())
                caption = make_caption(index)
                _add(tar, f"{key}.txt", caption.encode())
                if with_json:
                    meta = {"caption": caption, "index": index, "tags": [index % 7, index % 3]}
                    _add(tar, f"{key}.json", json.dumps(meta).encode())
        paths.append(path)
    return paths
