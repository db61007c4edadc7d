"""Open-Sora's video transforms: temporal sampling and ``resize_crop`` to a bucket's shape.

* :func:`sample_frame_indices` - ``T`` frame indices evenly spaced over a window of
  ``T * frame_interval`` frames that starts at a random frame (train, from the sample's
  generator) or at frame 0 (val). A video shorter than the window spreads ``T`` indices
  over all its frames (repeating some when it has fewer than ``T``).
* :func:`resize_crop` - resize to *cover* ``(H, W)`` keeping the aspect ratio, crop the
  centre (or a random window), scale uint8 to [-1, 1], and lay out as ``(C, T, H, W)``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F


def sample_frame_indices(
    total: int,
    num_frames: int,
    *,
    frame_interval: int = 1,
    rng: np.random.Generator | None = None,
) -> list[int]:
    """``num_frames`` sorted indices into ``total`` frames; ``rng=None`` starts at frame 0."""
    if total < 1 or num_frames < 1 or frame_interval < 1:
        raise ValueError(f"need >= 1 each: {total=}, {num_frames=}, {frame_interval=}")
    window = min(total, num_frames * frame_interval)
    start = 0 if rng is None else int(rng.integers(0, total - window + 1))
    # linspace over the window's first..last frame, as Open-Sora's temporal_random_crop.
    spaced = np.linspace(start, start + window - 1, num_frames)
    return [int(i) for i in np.floor(spaced + 1e-6)]


def resize_crop(
    frames: torch.Tensor,
    size: tuple[int, int],
    *,
    rng: np.random.Generator | None = None,
    random_crop: bool = False,
) -> torch.Tensor:
    """uint8 ``(T, C, h, w)`` frames -> float32 ``(C, T, H, W)`` in [-1, 1] covering ``size``.

    The scale is the smallest that makes both sides >= the target, so nothing is padded
    and one side is cropped. ``random_crop`` draws the crop offset from ``rng`` (required
    then); otherwise the crop is centred.
    """
    if frames.dim() != 4 or frames.shape[1] not in (1, 3):
        raise ValueError(f"frames must be (T, C, H, W) with C in (1, 3), got {tuple(frames.shape)}")
    height, width = size
    if height < 1 or width < 1:
        raise ValueError(f"target {size=} must be >= 1 each")
    if random_crop and rng is None:
        raise ValueError("random_crop=True needs rng (e.g. task_encoder.sample_rng)")
    h, w = frames.shape[-2:]
    scale = max(height / h, width / w)
    new_h, new_w = max(height, math.ceil(h * scale - 1e-6)), max(width, math.ceil(w * scale - 1e-6))
    x = frames.float()
    if (new_h, new_w) != (h, w):
        # antialias: downscaling a 1080p clip to 240p without it aliases badly
        x = F.interpolate(x, size=(new_h, new_w), mode="bilinear", align_corners=False,
                          antialias=new_h < h)  # fmt: skip
    if random_crop:
        assert rng is not None  # checked above
        top = int(rng.integers(0, new_h - height + 1))
        left = int(rng.integers(0, new_w - width + 1))
    else:
        top, left = (new_h - height) // 2, (new_w - width) // 2
    x = x[:, :, top : top + height, left : left + width]
    x = (x / 127.5 - 1.0).clamp_(-1.0, 1.0)
    return x.permute(1, 0, 2, 3).contiguous()
