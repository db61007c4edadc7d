"""``MergeTransform``: geometric transforms composed into one matrix, and the image
resampled once.

Each transform becomes a ``TransformMapper`` (a ``CustomTransform`` is one already; a
torchvision transform gets its mapper from ``mappers.py``), draws its random parameters in
the order given, exactly as torchvision would, and appends its matrix. The result is one
backward mapping: ``PIL.Image.transform`` (affine, or perspective when the matrix has a
projective row) for PIL images, ``grid_sample`` for ``(C, H, W)`` tensors. The transforms
must agree on interpolation and fill.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import PIL.Image
import torch

from energon_lite.transforms.base import Fill, TransformMapper
from energon_lite.transforms.custom import CustomTransform

_PIL_RESAMPLE = {
    "nearest": PIL.Image.Resampling.NEAREST,
    "nearest-exact": PIL.Image.Resampling.NEAREST,
    "bilinear": PIL.Image.Resampling.BILINEAR,
    "bicubic": PIL.Image.Resampling.BICUBIC,
    "box": PIL.Image.Resampling.BOX,
    "hamming": PIL.Image.Resampling.HAMMING,
    "lanczos": PIL.Image.Resampling.LANCZOS,
}
_TORCH_MODES = ("nearest", "bilinear", "bicubic")


def _mode_name(interpolation: Any) -> str:
    """The name of an interpolation given as a torchvision ``InterpolationMode`` or a str."""
    return str(getattr(interpolation, "value", interpolation))


def mapper_for(transform: Any) -> TransformMapper:
    """The mapper of one transform (a ``CustomTransform`` is its own)."""
    if isinstance(transform, CustomTransform):
        return transform
    if any(cls.__module__.startswith("torchvision") for cls in type(transform).__mro__):
        from energon_lite.transforms.mappers import MAPPERS

        for mapper in MAPPERS:
            if isinstance(transform, mapper.source_type):
                return mapper(transform)
    raise ValueError(
        f"MergeTransform: unsupported transform {transform!r} ({type(transform).__qualname__}); "
        "supported: torchvision's Resize, RandomResizedCrop, CenterCrop, RandomCrop, "
        "RandomHorizontalFlip, RandomVerticalFlip, RandomRotation, RandomPerspective, "
        "and subclasses of energon_lite.transforms.CustomTransform"
    )


def _agreed(mappers: list[TransformMapper], what: str) -> Any:
    found, owner = None, None
    for mapper in mappers:
        value = mapper.fill() if what == "fill" else mapper.interpolation()
        if value is None:
            continue
        if found is None:
            found, owner = value, mapper
        elif value != found:
            raise ValueError(
                f"MergeTransform: {what} values are not equal: {found} ({owner}) != "
                f"{value} ({mapper})"
            )
    return found


class MergeTransform(torch.nn.Module):
    """``transforms`` applied as one resampling (see the module docstring)."""

    def __init__(self, transforms: list[Any]) -> None:
        super().__init__()
        self.transforms = [mapper_for(t) for t in transforms]
        self.fill_value: Fill = _agreed(self.transforms, "fill")
        interpolation = _agreed(self.transforms, "interpolation")
        self.interpolation = "bilinear" if interpolation is None else interpolation

    def forward(self, x: Any) -> Any:
        matrix = np.eye(3, dtype=np.float64)
        if isinstance(x, PIL.Image.Image):
            size = np.array((x.height, x.width), dtype=np.int64)
        elif isinstance(x, torch.Tensor):
            size = np.array(x.shape[-2:], dtype=np.int64)
        else:
            raise TypeError(
                f"MergeTransform: a PIL image or a (C, H, W) tensor, not {type(x).__qualname__}"
            )
        for mapper in self.transforms:
            matrix, size, _ = mapper.apply_transform(matrix, size)
        height, width = int(size[0]), int(size[1])
        if isinstance(x, PIL.Image.Image):
            return self._pil(x, matrix, width, height)
        return self._tensor(x, matrix, width, height)

    def _pil(self, image: PIL.Image.Image, matrix: np.ndarray, w: int, h: int) -> Any:
        name = _mode_name(self.interpolation)
        if name not in _PIL_RESAMPLE:
            raise NotImplementedError(f"MergeTransform: interpolation {name!r} on PIL images")
        back = np.linalg.inv(matrix)
        back /= back[2, 2]
        fill = self.fill_value
        if isinstance(fill, (int, float)):
            fill = (fill,) * len(image.getbands())
        elif fill is not None:
            fill = tuple(fill)
        if np.allclose(back[2, :2], 0):
            method, data = PIL.Image.Transform.AFFINE, back.flatten()[:6]
        else:
            method, data = PIL.Image.Transform.PERSPECTIVE, back.flatten()[:8]
        return image.transform(
            (w, h), method, tuple(data.tolist()), _PIL_RESAMPLE[name], fillcolor=fill
        )

    def _tensor(self, x: torch.Tensor, matrix: np.ndarray, w: int, h: int) -> torch.Tensor:
        name = _mode_name(self.interpolation)
        if name not in _TORCH_MODES:
            raise NotImplementedError(f"MergeTransform: interpolation {name!r} on tensors")
        if self.fill_value not in (None, 0):
            raise NotImplementedError(
                f"MergeTransform: fill={self.fill_value!r} on tensors (only 0 is supported)"
            )
        src_h, src_w = x.shape[-2:]
        # normalised source coordinates -> pixels -> the transform -> normalised target
        to_pixels = TransformMapper.scale(src_w / 2, src_h / 2) @ TransformMapper.translate(1, 1)
        to_unit = TransformMapper.translate(-1, -1) @ TransformMapper.scale(2 / w, 2 / h)
        back = torch.as_tensor(np.linalg.inv(to_unit @ matrix @ to_pixels), dtype=torch.float32)
        xs = (torch.arange(w, dtype=torch.float32) * 2 + 1) / w - 1  # pixel centres
        ys = (torch.arange(h, dtype=torch.float32) * 2 + 1) / h - 1
        grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")
        points = torch.stack((grid_x, grid_y, torch.ones_like(grid_x)), dim=-1)  # (H, W, 3)
        mapped = points @ back.T
        grid = (mapped[..., :2] / mapped[..., 2:3])[None]
        out = torch.nn.functional.grid_sample(
            x[None].to(torch.float32) if not x.is_floating_point() else x[None],
            grid,
            mode=name,
            padding_mode="zeros",
            align_corners=False,
        )[0]
        return out if x.is_floating_point() else out.round().to(x.dtype)
