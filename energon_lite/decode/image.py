"""Image decoding with Pillow into the layouts WebDataset's ``imagehandler`` names.

``size`` (the task's target, from ``SampleDecoder(image_size=...)``): the image is resized to
*cover* it keeping its aspect ratio (as ``resize_crop`` does; never enlarged), and a JPEG is
decoded with DCT-domain downscaling (Pillow's ``draft``) to no less than
``DRAFT_FACTOR`` times that size first, so the exact resize still starts from at least twice
the pixels it keeps (within 1 grey level RMS of decoding the full image; see
docs/task_encoder.md for the figures). The resize is Pillow's bicubic filter: Pillow's own
for the ``pil`` layouts, torch's computation of it for the numpy and torch layouts
(``resize.py``: the same pixels to within one grey level, a third of the time)."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import torch
from PIL import Image

from energon_lite.batching.slab import slot
from energon_lite.decode import jpeg_turbo
from energon_lite.decode.image_modes import (  # noqa: F401  (this module's names before)
    IMAGE_MODES,
    MAX_IMAGE_PIXELS,
    check_image_mode,
)
from energon_lite.decode.resize import resize_uint8
from energon_lite.errors import MediaDecodeError

DRAFT_FACTOR = 2.0  # a drafted JPEG keeps >= this many times the target size per side
RESAMPLE = Image.Resampling.BICUBIC


def cover_size(width: int, height: int, size: tuple[int, int]) -> tuple[int, int]:
    """``(width, height)`` scaled down to the smallest size covering ``size`` = (H, W);
    the same size when it is already no larger than needed (images are never enlarged)."""
    scale = max(size[0] / height, size[1] / width)
    if scale >= 1.0:
        return width, height
    return max(size[1], round(width * scale)), max(size[0], round(height * scale))


def _draft_request(
    source: tuple[int, int], target: tuple[int, int], factor: float
) -> tuple[int, int]:
    """The size to ask Pillow's ``draft`` for: ``factor`` x the target, and at least a
    quarter of the source (the 1/8 DCT scale keeps only block means: 1.1 grey levels RMS
    from the full path at 1024 -> 64 against 0.6-0.8 for the 1/2 and 1/4 scales)."""
    return (
        max(int(target[0] * factor), -(-source[0] // 4)),
        max(int(target[1] * factor), -(-source[1] // 4)),
    )


def decode_image(
    data: bytes,
    mode: str,
    size: tuple[int, int] | None = None,
    draft: bool | float = True,
    *,
    max_pixels: int | None = None,
    name: str = "image",
) -> Any:
    """Decode image bytes: numpy layouts are HWC, torch layouts CHW; floats lie in [0, 1].

    ``size`` = (H, W): resize to cover it (see the module text); ``draft=False`` decodes the
    full image before that resize (the reference the drafted output is compared with), a
    number >= 1 drafts to that many times the target instead of ``DRAFT_FACTOR``.
    ``max_pixels``: an image that would decode to more pixels (after a JPEG draft) raises
    ``MediaDecodeError`` naming ``name`` before any pixel is decoded."""
    pil_mode, kind = IMAGE_MODES[mode]
    if pil_mode == "RGB" and kind != "pil":
        decoded = _decode_turbo(data, size, draft, max_pixels, name)
        if decoded is not None:
            pixels, target = decoded
            if target is not None and (pixels.shape[1], pixels.shape[0]) != target:
                return _from_chw(resize_uint8(pixels, target), kind)
            if kind.startswith("torch"):
                return _planar_from_hwc(pixels, kind == "torchuint8")
            return pixels if kind == "uint8" else pixels.astype(np.float32) / 255.0
    with Image.open(io.BytesIO(data)) as opened:
        target = None if size is None else cover_size(opened.width, opened.height, size)
        if target is not None and draft and opened.format == "JPEG":
            factor = DRAFT_FACTOR if draft is True else float(draft)
            opened.draft(None, _draft_request(opened.size, target, factor))
        if max_pixels is not None and opened.width * opened.height > max_pixels:
            raise MediaDecodeError(
                f"{name}: {opened.format} image of {opened.width}x{opened.height} = "
                f"{opened.width * opened.height:,} pixels is over the per-image budget of "
                f"{max_pixels:,} (SampleDecoder(max_image_pixels=...)); not decoded"
            )
        opened.load()
        img: Image.Image = opened
        if pil_mode is not None and img.mode != pil_mode:
            img = img.convert(pil_mode)
        if target is not None and img.size != target:
            if kind == "pil":
                return img.resize(target, RESAMPLE)
            # torch's bicubic: Pillow's filter at a third of the time (resize.py)
            return _from_chw(resize_uint8(img, target), kind)
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


def _decode_turbo(
    data: bytes,
    size: tuple[int, int] | None,
    draft: bool | float,
    max_pixels: int | None,
    name: str,
) -> tuple[np.ndarray, tuple[int, int] | None] | None:
    """A JPEG's RGB pixels by simplejpeg (``jpeg_turbo.py``) and the size to resize them to,
    drafted and checked against ``max_pixels`` as the Pillow path below does; None where
    Pillow decodes it."""
    source = jpeg_turbo.header(data)
    if source is None:
        return None
    width, height = source
    target = None if size is None else cover_size(width, height, size)
    scale = 1
    if target is not None and draft:
        factor = DRAFT_FACTOR if draft is True else float(draft)
        scale = jpeg_turbo.draft_scale(width, height, _draft_request(source, target, factor))
    out_width, out_height = -(-width // scale), -(-height // scale)
    if max_pixels is not None and out_width * out_height > max_pixels:
        raise MediaDecodeError(
            f"{name}: JPEG image of {out_width}x{out_height} = {out_width * out_height:,} "
            f"pixels is over the per-image budget of {max_pixels:,} "
            f"(SampleDecoder(max_image_pixels=...)); not decoded"
        )
    pixels = jpeg_turbo.decode_rgb(data, width, height, scale)
    return None if pixels is None else (pixels, target)


def _planar_from_hwc(pixels: np.ndarray, as_uint8: bool) -> torch.Tensor:
    """``_planar_tensor`` for an (H, W, C) uint8 array: the same values in a CHW tensor."""
    height, width, channels = pixels.shape
    out = _output(torch.uint8 if as_uint8 else torch.float32, (channels, height, width))
    view = out.numpy()
    planes = pixels.transpose(2, 0, 1)
    if as_uint8:
        view[...] = planes
    else:
        np.divide(planes, np.float32(255), out=view, dtype=np.float32)
    return out


def _output(dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    """Where a decoded image goes: a row of the batch being made (energon_lite/batching/slab.py)
    or, outside one, a tensor of its own."""
    out = slot(dtype, shape)
    return torch.empty(shape, dtype=dtype) if out is None else out


def _from_chw(chw: torch.Tensor, kind: str) -> Any:
    """A resized ``(C, H, W)`` uint8 tensor in the layout ``kind`` names (a torch layout is
    written into the batch being made where there is one, as ``_planar_tensor`` does)."""
    if kind.startswith("torch"):
        as_uint8 = kind == "torchuint8"
        out = _output(torch.uint8 if as_uint8 else torch.float32, tuple(chw.shape))
        if as_uint8:
            out.copy_(chw)
        else:
            torch.div(chw, 255.0, out=out)  # float32(x) / 255 correctly rounded, as np.divide
        return out
    array = chw.permute(1, 2, 0).numpy()  # channels-last storage: HWC without a copy
    return array if kind == "uint8" else array.astype(np.float32) / 255.0


def _planar_tensor(img: Image.Image, as_uint8: bool) -> torch.Tensor:
    """A CHW tensor written band by band: each band is a contiguous plane, so the layout
    change costs no strided copy, and uint8 -> float and the scaling happen in one pass."""
    bands = img.split()
    height, width = img.height, img.width
    out = _output(torch.uint8 if as_uint8 else torch.float32, (len(bands), height, width))
    view = out.numpy()
    for channel, band in enumerate(bands):
        plane = np.frombuffer(band.tobytes(), dtype=np.uint8).reshape(height, width)
        if as_uint8:
            view[channel] = plane
        else:
            np.divide(plane, np.float32(255), out=view[channel], dtype=np.float32)
    return out
