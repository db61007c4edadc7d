"""``normalize_batch``: a uint8 image batch to normalised floats, on the device it is sent to.

With ``SampleDecoder(image_decode="torchrgb8")`` workers hand out uint8 CHW tensors: a
quarter of the bytes through shared memory, pinning and the host-to-GPU copy, and no float
conversion on the CPU. The trainer then normalises on the GPU, where it costs next to
nothing. ``normalize_batch(t)`` equals the "torchrgb" float path (``x / 255`` in float32,
bit for bit); with ``mean`` and ``std`` it is ``(x / 255 - mean) / std`` per channel.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from energon_lite.errors import ConfigError


def normalize_batch(
    images: torch.Tensor,
    mean: Sequence[float] | float | None = None,
    std: Sequence[float] | float | None = None,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
    non_blocking: bool = True,
) -> torch.Tensor:
    """uint8 images ``(..., C, H, W)`` -> ``dtype`` on ``device``: ``(x / 255 - mean) / std``.

    The uint8 tensor is moved first (``non_blocking``: overlaps the copy when the batch is in
    pinned memory, e.g. ``get_savable_loader(..., pin_memory=True)`` style loaders), then
    converted and scaled there. ``mean`` / ``std``: one value or one per channel, on the
    [0, 1] scale (ImageNet: ``(0.485, 0.456, 0.406)``, ``(0.229, 0.224, 0.225)``); None
    skips that step. ``device=None`` keeps the tensor where it is.
    """
    if not isinstance(images, torch.Tensor) or images.dtype != torch.uint8:
        got = images.dtype if isinstance(images, torch.Tensor) else type(images).__name__
        raise ConfigError(
            f"normalize_batch expects a uint8 tensor (SampleDecoder(image_decode='torchrgb8')), "
            f"got {got}"
        )
    if not dtype.is_floating_point:
        raise ConfigError(f"normalize_batch(dtype={dtype}): a floating point dtype is needed")
    if images.dim() < 3:
        raise ConfigError(
            f"normalize_batch expects (..., C, H, W) images, got shape {tuple(images.shape)}"
        )
    if device is not None:
        images = images.to(device, non_blocking=non_blocking)
    out = images.to(dtype).div_(255)
    channels = images.shape[-3]
    for name, value, op in (("mean", mean, out.sub_), ("std", std, out.div_)):
        if value is None:
            continue
        factor = torch.as_tensor(value, dtype=dtype, device=out.device).reshape(-1)
        if factor.numel() not in (1, channels):
            raise ConfigError(
                f"normalize_batch({name}={value!r}): one value or {channels} (one per channel)"
            )
        op(factor.reshape(-1, 1, 1))
    return out
