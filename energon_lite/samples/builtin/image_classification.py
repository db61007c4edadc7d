"""``ImageClassificationSample``, a built-in sample type (public home: :mod:`energon_lite.samples.types`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from energon_lite.edataclass import edataclass
from energon_lite.samples.types import Sample

if TYPE_CHECKING:
    import torch


@edataclass
class ImageClassificationSample(Sample):
    """An image and its class (an index, a name, or both)."""

    __module__ = "energon_lite.samples.types"  # its public home (reprs, pickles)

    image: torch.Tensor | Any
    label: int | None = None
    label_name: str | None = None
