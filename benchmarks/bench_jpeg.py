"""JPEG decoders against Pillow: would a decoder that ships its own libjpeg-turbo raise the
decode limit?

Decoders (each to an RGB ``uint8`` HWC array, the step every image mode starts from):

* ``pillow``: ``Image.open`` -> ``draft`` (when scaling) -> ``load`` -> ``np.asarray``, as
  ``energon_lite.decode.image`` does;
* ``simplejpeg``: ``simplejpeg.decode_jpeg(data, "rgb")`` (its own libjpeg-turbo), with
  ``min_height``/``min_width`` for the DCT-scaled decode.

(PyTurboJPEG needs the system's ``libturbojpeg`` shared library, which a pip install does
not bring; it is measured when that library loads, and listed as absent otherwise.)

Sources: W1's JPEGs (``synth.shards.make_image``, 256x256, quality 90, what
``bench_pipeline`` reads), photo-like JPEGs (``synth.photos``, fine texture and edges) at
256x256 and 1024x1024, and 1024x1024 decoded at half size by DCT scaling (Pillow's
``draft`` to 512x512 against simplejpeg's ``min_height=min_width=512``: the decode-at-size
path). Rounds alternate the decoders (A/B, reversed every other round); each figure is the
median over rounds of images/s, the ratio the median of per-round ratios with its min-max.
Output difference: RMS over all pixels, in grey levels, against Pillow's output of the same
bytes (the target asks for <= 1).

    python benchmarks/bench_jpeg.py [--rounds 7] [--images 200]
"""

from __future__ import annotations

import argparse
import ctypes.util
import io
import os
import platform
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from common import ab_order, fmt_num, markdown_table, median
from PIL import Image

Decoder = Callable[[bytes, int | None], np.ndarray]


def pillow(data: bytes, scaled: int | None) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as img:
        if scaled is not None:
            img.draft("RGB", (scaled, scaled))
        img.load()
        rgb = img if img.mode == "RGB" else img.convert("RGB")
        return np.asarray(rgb)


def simplejpeg_decoder() -> Decoder | None:
    try:
        import simplejpeg
    except ImportError:
        return None

    def decode(data: bytes, scaled: int | None) -> np.ndarray:
        if scaled is None:
            return simplejpeg.decode_jpeg(data, "rgb")
        return simplejpeg.decode_jpeg(data, "rgb", min_height=scaled, min_width=scaled)

    return decode


def turbojpeg_decoder() -> Decoder | None:
    if ctypes.util.find_library("turbojpeg") is None:
        return None
    try:
        from turbojpeg import TJPF_RGB, TurboJPEG
    except ImportError:
        return None
    jpeg = TurboJPEG()

    def decode(data: bytes, scaled: int | None) -> np.ndarray:
        if scaled is None:
            return jpeg.decode(data, pixel_format=TJPF_RGB)
        width, height, _, _ = jpeg.decode_header(data)
        factor = (1, max(1, min(width, height) // scaled))
        return jpeg.decode(data, pixel_format=TJPF_RGB, scaling_factor=factor)

    return decode


def sources(images: int) -> dict[str, tuple[list[bytes], int | None]]:
    from energon_lite.synth.photos import photo_jpeg
    from energon_lite.synth.shards import make_image

    def w1(index: int) -> bytes:
        buffer = io.BytesIO()
        make_image(index, (256, 256)).save(buffer, format="JPEG", quality=90)
        return buffer.getvalue()

    big = [photo_jpeg(i, (1024, 1024)) for i in range(max(8, images // 8))]
    return {
        "W1 256x256": ([w1(i) for i in range(images)], None),
        "photo 256x256": ([photo_jpeg(i, (256, 256)) for i in range(images)], None),
        "photo 1024x1024": (big, None),
        "photo 1024 -> 512 (DCT scale)": (big, 512),
    }


def rms(a: np.ndarray, b: np.ndarray) -> float:
    if a.shape != b.shape:
        return float("nan")
    return float(np.sqrt(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--images", type=int, default=200, help="images per 256x256 source")
    args = parser.parse_args(argv)
    decoders: dict[str, Decoder] = {"pillow": pillow}
    absent = []
    for name, make in (("simplejpeg", simplejpeg_decoder), ("turbojpeg", turbojpeg_decoder)):
        found = make()
        if found is None:
            absent.append(name)
        else:
            decoders[name] = found
    load_before = os.getloadavg()
    rows, ratio_rows = [], []
    for source, (blobs, scaled) in sources(args.images).items():
        reference = [pillow(b, scaled) for b in blobs]
        per_round: dict[str, list[float]] = {name: [] for name in decoders}
        for r in range(args.rounds):
            for name in ab_order(tuple(decoders), r):
                decode = decoders[name]
                start = time.perf_counter()
                for blob in blobs:
                    decode(blob, scaled)
                per_round[name].append(len(blobs) / (time.perf_counter() - start))
        for name, decode in decoders.items():
            outputs = [decode(b, scaled) for b in blobs]
            diff = max(rms(o, ref) for o, ref in zip(outputs, reference))
            speed = [a / b for a, b in zip(per_round[name], per_round["pillow"])]
            rows.append(
                [
                    source,
                    name,
                    "x".join(map(str, outputs[0].shape[:2])),
                    fmt_num(median(per_round[name])),
                    f"{median(speed):.2f}x ({min(speed):.2f}-{max(speed):.2f})",
                    f"{diff:.2f}",
                ]
            )
        ratio_rows.append(source)
    print(
        f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"Pillow {Image.__version__}; {args.rounds} rounds; load average "
        f"{'/'.join(f'{x:.1f}' for x in load_before)} before, "
        f"{'/'.join(f'{x:.1f}' for x in os.getloadavg())} after; not installed: "
        f"{', '.join(absent) or 'none'}\n"
    )
    print(
        markdown_table(
            [
                "source",
                "decoder",
                "output HxW",
                "images/s",
                "/ Pillow (min-max)",
                "max RMS vs Pillow (grey levels)",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()


__all__: list[Any] = []
