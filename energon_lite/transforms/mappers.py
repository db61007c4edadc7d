"""The mappers of torchvision's geometric transforms (imports torchvision).

Each draws its random parameters through the torchvision transform's own ``get_params`` (or
the same ``torch.rand`` draw for flips), so that a ``MergeTransform`` after
``torch.manual_seed(s)`` picks what ``transform(image)`` would have picked, and turns them
into a matrix on pixel coordinates.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import torch
from torchvision import transforms as T

from energon_lite.transforms.base import Fill, TransformMapper

__all__ = [
    "MAPPERS",
    "CenterCropMapper",
    "RandomCropMapper",
    "RandomHorizontalFlipMapper",
    "RandomPerspectiveMapper",
    "RandomResizedCropMapper",
    "RandomRotationMapper",
    "RandomVerticalFlipMapper",
    "ResizeMapper",
]


def _size_probe(dst_size: np.ndarray) -> torch.Tensor:
    """A tensor of the current size, for torchvision's ``get_params`` that read only it."""
    return torch.empty((1, int(dst_size[0]), int(dst_size[1])), dtype=torch.uint8)


def _pair(size: Any) -> tuple[int, int]:
    if isinstance(size, numbers.Number):
        return int(size), int(size)  # type: ignore[call-overload]
    if len(size) == 1:
        return int(size[0]), int(size[0])
    return int(size[0]), int(size[1])


class ResizeMapper(TransformMapper):
    """``T.Resize``: a size for both sides, or for the shorter one (``max_size`` bounding
    the longer one)."""

    source_type = T.Resize

    def apply_transform(
        self, matrix: np.ndarray, dst_size: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, Any]:
        size = self.transform.size
        size = [size] if isinstance(size, int) else list(size)
        h, w = int(dst_size[0]), int(dst_size[1])
        if len(size) == 1:
            short, long = min(h, w), max(h, w)
            new_short, new_long = size[0], int(size[0] * long / short)
            max_size = self.transform.max_size
            if max_size is not None:
                if max_size <= size[0]:
                    raise ValueError(
                        f"Resize: max_size={max_size} must be greater than size={size[0]}"
                    )
                if new_long > max_size:
                    new_short, new_long = int(max_size * new_short / new_long), max_size
            new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
        else:
            new_h, new_w = size
        matrix = self.scale(new_w / w, new_h / h) @ matrix
        return matrix, np.array((new_h, new_w), dtype=dst_size.dtype), ("Resize", size)

    def interpolation(self) -> Any:
        return self.transform.interpolation


class RandomResizedCropMapper(TransformMapper):
    """``T.RandomResizedCrop``: a random crop (torchvision's draw), resized to ``size``."""

    source_type = T.RandomResizedCrop

    def apply_transform(
        self, matrix: np.ndarray, dst_size: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, Any]:
        t = self.transform
        top, left, height, width = T.RandomResizedCrop.get_params(
            _size_probe(dst_size), t.scale, t.ratio
        )
        out_h, out_w = _pair(t.size)
        matrix = self.scale(out_w / width, out_h / height) @ self.translate(-left, -top) @ matrix
        params = ("RandomResizedCrop", (top, left, height, width))
        return matrix, np.array((out_h, out_w), dtype=dst_size.dtype), params

    def interpolation(self) -> Any:
        return self.transform.interpolation


class _Flip(TransformMapper):
    axis = 0  # 0: mirror x, 1: mirror y

    def apply_transform(
        self, matrix: np.ndarray, dst_size: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, Any]:
        flip = bool(torch.rand(1) < self.transform.p)
        if flip:
            if self.axis == 0:
                matrix = self.translate(float(dst_size[1]), 0) @ self.hflip() @ matrix
            else:
                matrix = self.translate(0, float(dst_size[0])) @ self.vflip() @ matrix
        return matrix, dst_size, (type(self.transform).__name__, flip)


class RandomHorizontalFlipMapper(_Flip):
    """``T.RandomHorizontalFlip``."""

    source_type = T.RandomHorizontalFlip
    axis = 0


class RandomVerticalFlipMapper(_Flip):
    """``T.RandomVerticalFlip``."""

    source_type = T.RandomVerticalFlip
    axis = 1


class RandomRotationMapper(TransformMapper):
    """``T.RandomRotation`` about the centre; ``expand`` grows the canvas as PIL does."""

    source_type = T.RandomRotation

    def apply_transform(
        self, matrix: np.ndarray, dst_size: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, Any]:
        if self.transform.center is not None:
            raise ValueError(
                f"RandomRotation(center={self.transform.center}) cannot be merged: "
                "only rotation about the centre"
            )
        degrees = T.RandomRotation.get_params(self.transform.degrees)
        rads = degrees * np.pi / 180
        h, w = float(dst_size[0]), float(dst_size[1])
        new_size = dst_size
        if self.transform.expand:
            sin, cos = abs(np.sin(rads)), abs(np.cos(rads))
            rot_w, rot_h = sin * h + cos * w, sin * w + cos * h
            # rounded as PIL rounds the expanded canvas
            new_w = np.ceil(w / 2 + rot_w / 2) - np.floor(w / 2 - rot_w / 2)
            new_h = np.ceil(h / 2 + rot_h / 2) - np.floor(h / 2 - rot_h / 2)
            new_size = np.array((int(new_h), int(new_w)), dtype=dst_size.dtype)
        matrix = (
            self.translate(new_size[1] / 2, new_size[0] / 2)
            @ self.rotate(rads)
            @ self.translate(-w / 2, -h / 2)
            @ matrix
        )
        return matrix, new_size, ("RandomRotation", degrees)

    def fill(self) -> Fill:
        return self.transform.fill

    def interpolation(self) -> Any:
        return self.transform.interpolation


class RandomCropMapper(TransformMapper):
    """``T.RandomCrop`` (with ``pad_if_needed``; ``padding`` cannot be merged)."""

    source_type = T.RandomCrop

    def apply_transform(
        self, matrix: np.ndarray, dst_size: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, Any]:
        t = self.transform
        if t.padding is not None:
            raise ValueError(f"RandomCrop(padding={t.padding}) cannot be merged; pad separately")
        th, tw = _pair(t.size)
        h, w = int(dst_size[0]), int(dst_size[1])
        if t.pad_if_needed and w < tw:
            matrix = self.translate(tw - w, 0) @ matrix
            w += 2 * (tw - w)
        if t.pad_if_needed and h < th:
            matrix = self.translate(0, th - h) @ matrix
            h += 2 * (th - h)
        if h < th or w < tw:
            raise ValueError(f"RandomCrop: crop size {(th, tw)} is larger than the image {(h, w)}")
        top, left, _, _ = T.RandomCrop.get_params(_size_probe(np.array((h, w))), (th, tw))
        matrix = self.translate(-left, -top) @ matrix
        return matrix, np.array((th, tw), dtype=dst_size.dtype), ("RandomCrop", (left, top, th, tw))

    def fill(self) -> Fill:
        return self.transform.fill


class RandomPerspectiveMapper(TransformMapper):
    """``T.RandomPerspective``: corners moved at random (torchvision's draw), as a
    homography."""

    source_type = T.RandomPerspective

    def apply_transform(
        self, matrix: np.ndarray, dst_size: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, Any]:
        t = self.transform
        if t.fill not in (0, [0], (0,)):
            raise ValueError(f"RandomPerspective(fill={t.fill}) cannot be merged: only fill=0")
        start = end = None
        if torch.rand(1) < t.p:
            start, end = t.get_params(int(dst_size[1]), int(dst_size[0]), t.distortion_scale)
            matrix = homography(start, end) @ matrix
        return matrix, dst_size, ("RandomPerspective", start, end)

    def fill(self) -> Fill:
        return self.transform.fill

    def interpolation(self) -> Any:
        return self.transform.interpolation


def homography(start: list[list[int]], end: list[list[int]]) -> np.ndarray:
    """The projective matrix that moves the four ``start`` points onto ``end``."""
    rows, rhs = [], []
    for (sx, sy), (ex, ey) in zip(start, end):
        rows.append([sx, sy, 1, 0, 0, 0, -ex * sx, -ex * sy])
        rows.append([0, 0, 0, sx, sy, 1, -ey * sx, -ey * sy])
        rhs += [ex, ey]
    coefficients = np.linalg.solve(np.array(rows, np.float64), np.array(rhs, np.float64))
    return np.append(coefficients, 1.0).reshape(3, 3)


class CenterCropMapper(TransformMapper):
    """``T.CenterCrop`` (a crop larger than the image pads with zeros)."""

    source_type = T.CenterCrop

    def apply_transform(
        self, matrix: np.ndarray, dst_size: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, Any]:
        th, tw = _pair(self.transform.size)
        shift_y = round((th - float(dst_size[0])) / 2)
        shift_x = round((tw - float(dst_size[1])) / 2)
        matrix = self.translate(shift_x, shift_y) @ matrix
        params = ("CenterCrop", (shift_y, shift_x, th, tw))
        return matrix, np.array((th, tw), dtype=dst_size.dtype), params


MAPPERS: tuple[type[TransformMapper], ...] = (
    ResizeMapper,
    RandomResizedCropMapper,
    RandomHorizontalFlipMapper,
    RandomVerticalFlipMapper,
    RandomRotationMapper,
    RandomCropMapper,
    RandomPerspectiveMapper,
    CenterCropMapper,
)
