"""``OCRSample``, a built-in sample type (public home: :mod:`energon_lite.samples.types`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from energon_lite.edataclass import edataclass
from energon_lite.samples.types import Sample

if TYPE_CHECKING:
    import torch


@edataclass
class OCRSample(Sample):
    """Optical character recognition: boxes are float (N, 4|5) ``x, y, w, h[, confidence]``."""

    __module__ = "energon_lite.samples.types"  # its public home (reprs, pickles)

    image: torch.Tensor | Any
    text: str
    block_boxes: torch.Tensor | None = None
    block_classes: torch.Tensor | list[str] | None = None
    block_text: list[str] | None = None
    lines_boxes: torch.Tensor | None = None
    lines_text: list[str] | None = None
    words_boxes: torch.Tensor | None = None
    words_text: list[str] | None = None
    chars_boxes: torch.Tensor | None = None
    chars_text: list[str] | None = None
