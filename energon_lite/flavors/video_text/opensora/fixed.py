"""``FixedShapeTaskEncoder``: Open-Sora's fixed ``num_frames`` x ``image_size`` mode (no buckets).

Every clip becomes ``(3, num_frames, H, W)``: ``num_frames`` frame indices by the temporal
sampling (``"window"``: every ``frame_interval``-th frame of a window, random start when
training; ``"stride"``: spread over the whole clip), the named spatial transform to
``image_size``, values in [-1, 1]. An image is repeated ``num_frames`` times, as Open-Sora
does. A clip shorter than the window repeats frames (Open-Sora stops with an error there).
Batches are ``{"video": (B, 3, T, H, W), "text": [...], "fps": [...], "__key__": [...]}``.
"""

from __future__ import annotations

from typing import Any

import torch

from energon_lite.errors import ConfigError
from energon_lite.flavors.video_text.sample import VideoTextSample
from energon_lite.flavors.video_text.transforms import (
    TEMPORAL_SAMPLINGS,
    frame_indices,
    get_transform,
)
from energon_lite.samples.types import basic_sample_keys
from energon_lite.task_encoder.base import TaskEncoder


class FixedShapeTaskEncoder(TaskEncoder[VideoTextSample, dict, dict, dict]):
    """Clips of one shape ``(num_frames, *image_size)`` (see the module docstring)."""

    decoder = None  # rows arrive as plain values; media is read in encode_sample

    def __init__(
        self,
        num_frames: int,
        image_size: tuple[int, int],
        *,
        frame_interval: int = 1,
        temporal_sampling: str = "window",
        transform_name: str = "resize_crop",
        training: bool = True,
    ) -> None:
        if num_frames < 1 or frame_interval < 1:
            raise ConfigError(f"{num_frames=} and {frame_interval=} must be >= 1")
        if len(image_size) != 2 or min(image_size) < 1:
            raise ConfigError(f"{image_size=} must be (height, width), each >= 1")
        if temporal_sampling not in TEMPORAL_SAMPLINGS:
            raise ConfigError(f"{temporal_sampling=} must be one of {TEMPORAL_SAMPLINGS}")
        self.num_frames = num_frames
        self.image_size = (int(image_size[0]), int(image_size[1]))
        self.frame_interval = frame_interval
        self.temporal_sampling = temporal_sampling
        self.transform = get_transform(transform_name)
        self.training = training

    def encode_sample(self, sample: VideoTextSample) -> dict[str, Any]:
        rng = self.sample_rng if self.training else None
        if sample.is_image:
            indices = [0] * self.num_frames
            step = 1.0
        else:
            indices = frame_indices(
                self.temporal_sampling, sample.num_frames, self.num_frames,
                frame_interval=self.frame_interval, rng=rng,
            )  # fmt: skip
            step = indices[1] - indices[0] if len(indices) > 1 and indices[1] > indices[0] else 1
        frames = sample.read_frames(indices)
        return {
            **basic_sample_keys(sample),
            "video": self.transform(frames, self.image_size, rng),
            "text": sample.text,
            "fps": None if sample.fps is None else sample.fps / step,
        }

    def batch(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "__key__": [s["__key__"] for s in samples],
            "__restore_key__": [s["__restore_key__"] for s in samples],
            "video": torch.stack([s["video"] for s in samples]),
            "text": [s["text"] for s in samples],
            "fps": [s["fps"] for s in samples],
        }
