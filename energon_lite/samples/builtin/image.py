"""``ImageSample``, a built-in sample type (public home: :mod:`energon_lite.samples.types`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from energon_lite.edataclass import edataclass
from energon_lite.samples.types import Sample

if TYPE_CHECKING:
    import torch


@edataclass
class ImageSample(Sample):
    """An image."""

    __module__ = "energon_lite.samples.types"  # its public home (reprs, pickles)

    image: torch.Tensor | Any
