"""Open-Sora's video transforms: temporal sampling and ``resize_crop`` to a bucket's shape.

Two temporal samplings, named by :data:`TEMPORAL_SAMPLINGS`:

* ``"window"`` - :func:`sample_frame_indices`: ``T`` frame indices evenly spaced over a
  window of ``T * frame_interval`` frames that starts at a random frame (train, from the
  sample's generator) or at frame 0 (val). A video shorter than the window spreads ``T``
  indices over all its frames (repeating some when it has fewer than ``T``).
* ``"stride"`` - :func:`stride_frame_indices`: even sampling over
  the whole clip, ``stride = total // T`` and indices ``start + i * stride``; 300 frames,
  17 asked: stride 17, indices 0, 17, ..., 272. ``start`` is 0 (val) or random in
  ``[0, total - (T - 1) * stride - 1]`` (train). A clip with fewer than ``T`` frames
  repeats frames as ``"window"`` does.

* :func:`resize_crop` - resize to *cover* ``(H, W)`` keeping the aspect ratio, crop the
  centre (or a random window), scale uint8 to [-1, 1], and lay out as ``(C, T, H, W)``;
  :data:`TRANSFORMS` names its forms (``resize_crop``, ``center_crop``, ``random_crop``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from energon_lite.errors import ConfigError


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


TEMPORAL_SAMPLINGS = ("window", "stride")


def stride_frame_indices(
    total: int, num_frames: int, *, rng: np.random.Generator | None = None
) -> list[int]:
    """``num_frames`` indices ``start + i * (total // num_frames)``; ``rng=None``: start 0."""
    if total < 1 or num_frames < 1:
        raise ValueError(f"need >= 1 each: {total=}, {num_frames=}")
    if total < num_frames:
        return sample_frame_indices(total, num_frames, rng=rng)
    stride = total // num_frames
    span = (num_frames - 1) * stride + 1
    start = 0 if rng is None else int(rng.integers(0, total - span + 1))
    return [start + i * stride for i in range(num_frames)]


def frame_indices(
    sampling: str,
    total: int,
    num_frames: int,
    *,
    frame_interval: int = 1,
    rng: np.random.Generator | None = None,
) -> list[int]:
    """The indices of temporal sampling ``sampling`` (``"window"`` or ``"stride"``)."""
    if sampling == "stride":
        return stride_frame_indices(total, num_frames, rng=rng)
    if sampling == "window":
        return sample_frame_indices(total, num_frames, frame_interval=frame_interval, rng=rng)
    raise ValueError(f"temporal sampling {sampling!r} must be one of {TEMPORAL_SAMPLINGS}")


def resize_crop(
    frames: torch.Tensor,
    size: tuple[int, int],
    *,
    rng: np.random.Generator | None = None,
    random_crop: bool = False,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """uint8 ``(T, C, h, w)`` frames -> float32 ``(C, T, H, W)`` in [-1, 1] covering ``size``.

    The scale is the smallest that makes both sides >= the target, so nothing is padded
    and one side is cropped. ``random_crop`` draws the crop offset from ``rng`` (required
    then); otherwise the crop is centred. ``out``: a float32 ``(C, T, H, W)`` tensor to
    write into (a row of the batch, ``batching/group_slab.py``) and return; the values are
    the same.
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
    # rounded so that 1080x1920 covering 256 gives 256x455
    new_h, new_w = max(height, round(h * scale)), max(width, round(w * scale))
    resized = (new_h, new_w) != (h, w)
    x = frames
    if resized:
        # antialias: downscaling a 1080p clip to 240p without it aliases badly
        x = F.interpolate(x.float(), size=(new_h, new_w), mode="bilinear", align_corners=False,
                          antialias=new_h < h)  # fmt: skip
    if random_crop:
        assert rng is not None  # checked above
        top = int(rng.integers(0, new_h - height + 1))
        left = int(rng.integers(0, new_w - width + 1))
    else:
        top, left = (new_h - height) // 2, (new_w - width) // 2
    x = x[:, :, top : top + height, left : left + width]
    shape = (x.shape[1], x.shape[0], height, width)
    if out is None:
        out = torch.empty(shape, dtype=torch.float32)
    elif out.dtype != torch.float32 or tuple(out.shape) != shape:
        raise ValueError(f"out must be float32 {shape}, got {out.dtype} {tuple(out.shape)}")
    # One output written in place: a float clip is tens of MB, and every fresh one costs
    # its page faults (the same values as ``(x.float() / 127.5 - 1).clamp(-1, 1)``). One
    # frame at a time, so that the scaling reads what the conversion just wrote from the
    # cache, not from memory (a 640x360 frame is 2.8 MB of float)
    for t in range(x.shape[0]):
        frame = out[:, t]
        frame.copy_(x[t])
        frame.div_(127.5).sub_(1.0)
        if resized:  # uint8 / 127.5 - 1 is within [-1, 1] already; interpolation may overshoot
            frame.clamp_(-1.0, 1.0)
    return out


Transform = Callable[[torch.Tensor, tuple[int, int], "np.random.Generator | None"], torch.Tensor]


def _resize_centre_crop(
    frames: torch.Tensor,
    size: tuple[int, int],
    rng: np.random.Generator | None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    return resize_crop(frames, size, out=out)


def _resize_random_crop(
    frames: torch.Tensor,
    size: tuple[int, int],
    rng: np.random.Generator | None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    return resize_crop(frames, size, rng=rng, random_crop=rng is not None, out=out)


# Video-text training's usual order: resize, then centre or random crop, then [-1, 1], (C, T, H, W).
# ``center_crop`` is ``resize_crop`` under Open-Sora 1.x's name for it; ``random_crop``
# crops at a random offset when given a generator (training), else the centre.
TRANSFORMS: dict[str, Transform] = {
    "resize_crop": _resize_centre_crop,
    "center_crop": _resize_centre_crop,
    "random_crop": _resize_random_crop,
}


# The transforms above take ``out=`` (a float32 ``(C, T, H, W)`` tensor to write into)
WRITES_INTO: frozenset[Transform] = frozenset({_resize_centre_crop, _resize_random_crop})


def get_transform(name: str) -> Transform:
    """The transform ``name`` from :data:`TRANSFORMS`: ``f(frames, (H, W), rng | None)``."""
    try:
        return TRANSFORMS[name]
    except KeyError:
        raise ConfigError(f"transform_name={name!r} is not one of {sorted(TRANSFORMS)}") from None
