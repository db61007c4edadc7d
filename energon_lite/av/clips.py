"""Uniformly spaced clips and single frames, the two sampling schemes Energon ships.

``get_clips_uniform`` spreads ``num_clips`` clips of equal length evenly over the media: the
first starts at 0 and the last ends at the end (of the shorter of video and audio when both
are asked for). ``get_single_frames_uniform`` takes ``num_frames`` frames the same way, each
sampled at the middle of a frame slot so the first and the last frame are included. Both
only compute ranges and hand them to ``AVDecoder.get_clips``: increasing ranges, so the
decoder walks the file once and seeks only across keyframes it does not need.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import torch

from energon_lite.av.data import AVData
from energon_lite.errors import ConfigError, MediaDecodeError


class ClipDecoder(Protocol):
    """What the sampling helpers ask of a decoder (``AVDecoder`` has it)."""

    def _describe(self) -> str: ...

    def get_video_fps(self) -> float: ...

    def get_video_duration(
        self, get_frame_count: bool = False
    ) -> tuple[float | None, int | None]: ...

    def get_audio_duration(self) -> float | None: ...

    def get_clips(self, *args: Any, **kwargs: Any) -> AVData: ...  # AVDecoder.get_clips's


def uniform_ranges(
    total_seconds: float, num_clips: int, clip_seconds: float, fps: float | None = None
) -> list[tuple[float, float]]:
    """``num_clips`` evenly spaced ``(start, end)`` second ranges covering ``total_seconds``.

    With ``clip_seconds == 0`` (single frames) the starts run from the middle of the first
    frame slot to the middle of the last one, which needs ``fps``.
    """
    if num_clips < 1:
        raise ConfigError(f"{num_clips=} must be >= 1")
    if clip_seconds < 0:
        raise ConfigError(f"{clip_seconds=} must be >= 0")
    if clip_seconds == 0:
        if not fps:
            raise ConfigError("single-frame sampling needs the video fps")
        first, last = 0.5 / fps, total_seconds - 0.5 / fps
    else:
        first, last = 0.0, total_seconds - clip_seconds
    if last < first:
        raise MediaDecodeError(
            f"clips of {clip_seconds} seconds do not fit into {total_seconds} seconds of media"
        )
    return [(float(s), float(s + clip_seconds)) for s in np.linspace(first, last, num_clips)]


def get_clips_uniform(
    av_decoder: ClipDecoder,
    clip_duration_seconds: float,
    num_clips: int,
    request_video: bool | None = None,
    request_audio: bool = False,
    video_out_frame_size: tuple[int, int] | None = None,
) -> AVData:
    """``num_clips`` equally long, equally spaced clips of the video and/or the audio.

    ``request_video`` left unset means: the video, unless only audio is requested (so
    ``request_audio=True`` alone works on audio-only files, as in Energon).
    """
    if request_video is None:
        request_video = not request_audio
    if not request_video and not request_audio:
        raise ConfigError("get_clips_uniform: set request_video and/or request_audio")
    durations = []
    if request_video:
        video_duration, _ = av_decoder.get_video_duration()
        if video_duration is None:
            raise MediaDecodeError(f"no video stream or duration in {av_decoder._describe()}")
        durations.append(video_duration)
    if request_audio:
        audio_duration = av_decoder.get_audio_duration()
        if audio_duration is None:
            raise MediaDecodeError(f"no audio stream or duration in {av_decoder._describe()}")
        durations.append(audio_duration)
    fps = av_decoder.get_video_fps() if clip_duration_seconds == 0 else None
    ranges = uniform_ranges(min(durations), num_clips, clip_duration_seconds, fps)
    return av_decoder.get_clips(
        video_clip_ranges=ranges if request_video else None,
        audio_clip_ranges=ranges if request_audio else None,
        video_out_frame_size=video_out_frame_size,
    )


def get_single_frames_uniform(
    av_decoder: ClipDecoder,
    num_frames: int,
    *,
    video_out_frame_size: tuple[int, int] | None = None,
    return_timestamps: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, list[float]]:
    """``num_frames`` evenly spaced frames as one (num_frames, C, H, W) uint8 tensor.

    With ``return_timestamps`` also the start time in seconds of each returned frame.
    """
    data = get_clips_uniform(
        av_decoder,
        clip_duration_seconds=0,
        num_clips=num_frames,
        request_video=True,
        video_out_frame_size=video_out_frame_size,
    )
    if not data.video_clips:
        raise MediaDecodeError(f"no video frames in {av_decoder._describe()}")
    frames = torch.cat(data.video_clips, dim=0)
    if return_timestamps:
        return frames, [start for start, _ in data.video_timestamps]
    return frames
