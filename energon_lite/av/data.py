"""``AVData``: what ``AVDecoder.get_clips`` and the sampling helpers return (Energon's name)."""

from __future__ import annotations

import torch

from energon_lite.edataclass import edataclass


@edataclass
class AVData:
    """Decoded clips: video (T, C, H, W) uint8, audio (channels, samples) in the decoder's
    sample type (int16 for 16-bit PCM, float32 in [-1, 1] for most compressed audio).
    Energon's layout: every field keyword-only and required."""

    video_clips: list[torch.Tensor]
    video_timestamps: list[tuple[float, float]]
    audio_clips: list[torch.Tensor]
    audio_timestamps: list[tuple[float, float]]
