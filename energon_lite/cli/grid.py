"""``energon-lite preview PATH --grid out.png``: the first samples of a split as a picture grid.

Each cell shows the sample's picture, fitted into ``cell`` x ``cell`` pixels on a grey
background, with the caption (or text, or label, else the key) written below it in up to
three lines. Pictures come from the decoded sample: an image tensor (CHW or HWC, uint8 or
float in [0, 1]), a PIL image, the first frame of a video tensor (TCHW), of a video part
(``AVDecoder``) or of a video-text row (``VideoTextSample.read_frames([0])``). A sample
without a picture gets an empty cell with its caption.

The grid is ``min(columns, samples) * cell`` pixels wide and ``rows * (cell +
CAPTION_HEIGHT)`` high, ``rows = ceil(samples / columns)``.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from energon_lite.errors import ConfigError, EnergonLiteError
from energon_lite.samples.factory import SampleFactory
from energon_lite.shards.meta import META_DIR
from energon_lite.sources.kinds import kind_of, resolve_path
from energon_lite.state.restore_key import SampleKey
from energon_lite.storage import RemotePath, as_path

CAPTION_HEIGHT = 40  # three lines of the default font
_CAPTION_FIELDS = ("caption", "text", "label", "context", "answers")
_BACKGROUND = (64, 64, 64)


def _fields(sample: Any) -> dict[str, Any]:
    if isinstance(sample, dict):
        return {k: v for k, v in sample.items() if not k.startswith("__")}
    if dataclasses.is_dataclass(sample):
        return {f.name: getattr(sample, f.name) for f in dataclasses.fields(sample)}
    return {}


def _to_image(value: Any) -> Image.Image | None:
    """A PIL image of ``value`` when it is a picture, or the first frame of a video."""
    if isinstance(value, Image.Image):
        return value.convert("RGB")
    if hasattr(value, "get_clips") and hasattr(value, "has_video_stream"):  # an AVDecoder
        if not value.has_video_stream():
            return None
        clips = value.get_clips(video_clip_ranges=[(0, 1)], video_unit="frames").video_clips
        return _to_image(clips[0][0]) if clips and len(clips[0]) else None
    if hasattr(value, "numpy") and hasattr(value, "shape"):  # a tensor
        value = value.detach().cpu().numpy()
    if not isinstance(value, np.ndarray) or value.ndim not in (2, 3, 4) or value.size == 0:
        return None
    if value.ndim == 4:  # a video: T x C x H x W (or T x H x W x C)
        value = value[0]
    if value.ndim == 3 and value.shape[0] in (1, 3, 4) and value.shape[-1] not in (1, 3, 4):
        value = value.transpose(1, 2, 0)  # CHW -> HWC
    if value.ndim == 3 and value.shape[-1] not in (1, 3, 4):
        return None
    if value.dtype != np.uint8:
        value = np.clip(value.astype(np.float32) * 255.0 + 0.5, 0, 255).astype(np.uint8)
    if value.ndim == 3 and value.shape[-1] == 1:
        value = value[..., 0]
    return Image.fromarray(np.ascontiguousarray(value)).convert("RGB")


def sample_picture(sample: Any) -> Image.Image | None:
    """The first picture among the sample's fields (a video-text row: its first frame)."""
    read_frames = getattr(sample, "read_frames", None)
    if callable(read_frames):
        return _to_image(read_frames([0]))
    for value in _fields(sample).values():
        picture = _to_image(value)
        if picture is not None:
            return picture
    return None


def sample_caption(sample: Any, key: str) -> str:
    fields = _fields(sample)
    for name in _CAPTION_FIELDS:
        value = fields.get(name)
        if value is not None and not hasattr(value, "shape"):
            return f"{key}: {value}"
    return key


def _wrap(draw: ImageDraw.ImageDraw, text: str, font: Any, width: int, lines: int) -> list[str]:
    words, out, line = text.split(), [], ""
    for word in words:
        candidate = f"{line} {word}".strip()
        if draw.textlength(candidate, font=font) <= width or not line:
            line = candidate
        else:
            out.append(line)
            line = word
    out.append(line)
    if len(out) > lines:
        out = [*out[: lines - 1], out[lines - 1] + " ..."]
    return out


def grid_image(cells: list[tuple[Image.Image | None, str]], columns: int, cell: int) -> Image.Image:
    """Lay out ``(picture, caption)`` cells; the size is documented in the module."""
    columns = max(1, min(columns, len(cells)))
    rows = max(1, -(-len(cells) // columns))
    grid = Image.new("RGB", (columns * cell, rows * (cell + CAPTION_HEIGHT)), "white")
    draw = ImageDraw.Draw(grid)
    font = ImageFont.load_default()
    for number, (picture, caption) in enumerate(cells):
        x, y = (number % columns) * cell, (number // columns) * (cell + CAPTION_HEIGHT)
        draw.rectangle([x + 1, y + 1, x + cell - 2, y + cell - 2], fill=_BACKGROUND)
        if picture is not None:
            fitted = picture.copy()
            fitted.thumbnail((cell - 4, cell - 4))  # keeps the aspect ratio
            if max(fitted.size) < cell // 2:  # tiny images: scale up so they can be seen
                scale = (cell - 4) / max(fitted.size)
                size = (max(1, round(fitted.width * scale)), max(1, round(fitted.height * scale)))
                fitted = picture.resize(size, Image.Resampling.NEAREST)
            grid.paste(fitted, (x + (cell - fitted.width) // 2, y + (cell - fitted.height) // 2))
        for line_no, line in enumerate(_wrap(draw, caption, font, cell - 6, 3)):
            draw.text((x + 3, y + cell + 1 + 12 * line_no), line, fill="black", font=font)
    return grid


def _cells(
    path: str | os.PathLike[str] | RemotePath, split_part: str, num: int
) -> list[tuple[Image.Image | None, str]]:
    """``(picture, caption)`` of the first ``num`` samples of one dataset's split."""
    from energon_lite.cli.info import _open, _positions
    from energon_lite.decode import SampleDecoder
    from energon_lite.decode.decoder import require_av

    kind = kind_of(path)
    if kind.open is None:
        raise ConfigError(
            f"preview --grid does not know {kind.name} datasets; `energon-lite preview` prints them"
        )
    source = _open(resolve_path(as_path(path)), split_part)
    factory = SampleFactory(source.config, source.root / META_DIR)
    if factory.parts is not None:  # as the loader does: else every cell is grey
        require_av(str(source.root), factory.parts)
    decoder = SampleDecoder()
    cells: list[tuple[Image.Image | None, str]] = []
    for shard_id, index in itertools.islice(_positions(source), num):
        key, parts = source.read(shard_id, index)
        raw = {"__key__": key, "__restore_key__": SampleKey(0, shard_id, index, 0), **parts}
        try:
            sample = factory.build(raw, decoder, None)
            cells.append((sample_picture(sample), sample_caption(sample, key)))
        except EnergonLiteError as exc:  # show the broken sample instead of stopping
            cells.append((None, f"{key}: {type(exc).__name__}: {exc}"))
    return cells


def preview_grid(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    split_part: str = "train",
    num: int = 16,
    columns: int = 4,
    cell: int = 160,
) -> tuple[int, int, int]:
    """Write the first ``num`` samples of ``split_part`` as a grid PNG; returns
    ``(samples shown, width, height)``. A metadataset shows the first samples of each of the
    split's datasets in turn, ``num`` shared among them."""
    from energon_lite.cli.meta_info import is_metadataset

    if num < 1 or columns < 1 or cell < 32:
        raise ConfigError(
            f"preview --grid: need -n >= 1, --columns >= 1, --cell >= 32 ({num=}, {columns=}, {cell=})"
        )
    if is_metadataset(path):
        from energon_lite.metadataset.parse import load_metadataset

        leaves, _ = load_metadataset(as_path(path), split_part)
        share = -(-num // len(leaves))
        cells: list[tuple[Image.Image | None, str]] = []
        for leaf in leaves:
            cells += _cells(leaf.path, leaf.split_part, min(share, num - len(cells)))
    else:
        cells = _cells(path, split_part, num)
    if not cells:
        raise ConfigError(f"{path}: split {split_part!r} has no samples to show")
    grid = grid_image(cells, columns, cell)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    grid.save(out, format="PNG")
    return len(cells), grid.width, grid.height
