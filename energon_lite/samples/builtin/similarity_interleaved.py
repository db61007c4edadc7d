"""``SimilarityInterleavedSample``, a built-in sample type (public home: :mod:`energon_lite.samples.types`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from energon_lite.edataclass import edataclass
from energon_lite.samples.types import Sample

if TYPE_CHECKING:
    import torch


@edataclass
class SimilarityInterleavedSample(Sample):
    """Images and texts without alignment; ``similarity_matrix`` relates them."""

    __module__ = "energon_lite.samples.types"  # its public home (reprs, pickles)

    images: list[Any]
    texts: list[str]
    audio: list[Any] | None = None
    video: list[Any] | None = None
    similarity_matrix: torch.Tensor | None = None
    matched_text_indices: list[int] | None = None
