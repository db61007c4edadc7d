"""``AVData``: what ``AVDecoder.get_clips`` and the sampling helpers return (Energon's name)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class AVData:
    """Decoded clips: video (T, C, H, W) uint8, audio (channels, samples) in the decoder's
    sample type (int16 for 16-bit PCM, float32 in [-1, 1] for most compressed audio)."""

    video_clips: list[torch.Tensor] = field(default_factory=list)
    video_timestamps: list[tuple[float, float]] = field(default_factory=list)
    audio_clips: list[torch.Tensor] = field(default_factory=list)
    audio_timestamps: list[tuple[float, float]] = field(default_factory=list)
