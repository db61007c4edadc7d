"""Energon's ``megatron.energon.transforms``: several geometric image transforms merged into
one resampling (``MergeTransform``), and ``CustomTransform`` for transforms of your own.

``MergeTransform([T.RandomRotation(...), T.RandomCrop(...)])`` composes the transforms'
matrices and resamples the image once (fewer interpolation losses, one pass), drawing the
same random parameters as the torchvision transforms themselves. Importing this package does
not import torchvision: the torchvision mappers (``mappers.py``) load when a torchvision
transform is merged, or when one of their names is imported from here.
"""

from __future__ import annotations

from typing import Any

from energon_lite.transforms.base import TransformMapper
from energon_lite.transforms.custom import CustomTransform
from energon_lite.transforms.merge import MergeTransform

_MAPPERS = (
    "CenterCropMapper",
    "RandomCropMapper",
    "RandomHorizontalFlipMapper",
    "RandomPerspectiveMapper",
    "RandomResizedCropMapper",
    "RandomRotationMapper",
    "RandomVerticalFlipMapper",
    "ResizeMapper",
)

__all__ = [
    "CenterCropMapper",
    "CustomTransform",
    "MergeTransform",
    "RandomCropMapper",
    "RandomHorizontalFlipMapper",
    "RandomPerspectiveMapper",
    "RandomResizedCropMapper",
    "RandomRotationMapper",
    "RandomVerticalFlipMapper",
    "ResizeMapper",
    "TransformMapper",
]


def __getattr__(name: str) -> Any:
    if name in _MAPPERS:  # needs torchvision
        from energon_lite.transforms import mappers

        return getattr(mappers, name)
    raise AttributeError(f"module 'energon_lite.transforms' has no attribute {name!r}")
