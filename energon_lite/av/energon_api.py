"""Energon's ``AVDecoder`` method names, as thin calls into energon_lite's decoder.

``get_video_clips`` / ``get_audio_clips`` return Energon's ``(clips, timestamps)`` pairs;
``get_clips_uniform`` / ``get_single_frames_uniform`` are the functions of
``energon_lite.av`` as methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from energon_lite.av.clips import get_clips_uniform, get_single_frames_uniform
from energon_lite.av.data import AVData
from energon_lite.errors import MediaDecodeError

if TYPE_CHECKING:
    import torch

    from energon_lite.media_records.records import AVMetadata

ClipList = tuple[list["torch.Tensor"], list[tuple[float, float]]]


class EnergonAVMethods:
    """Mixed into ``AVDecoder``."""

    def get_clips(self, *args: Any, **kwargs: Any) -> AVData:
        raise NotImplementedError

    def get_metadata(self, get_audio_num_samples: bool = False, **_energon: bool) -> AVMetadata:
        raise NotImplementedError

    def get_video_clips(
        self,
        video_clip_ranges: Sequence[tuple[float, float]],
        video_unit: str = "seconds",
        video_out_frame_size: tuple[int, int] | None = None,
        keyframe_aligned: bool = False,
    ) -> ClipList:
        """Video clips and their ``(start, end)`` seconds; ranges past the end give none.
        ``keyframe_aligned``: as in ``AVDecoder.get_clips`` (approximate clips)."""
        data = self.get_clips(
            video_clip_ranges=video_clip_ranges,
            video_unit=video_unit,
            video_out_frame_size=video_out_frame_size,
            keyframe_aligned=keyframe_aligned,
        )
        return data.video_clips, data.video_timestamps

    def get_audio_clips(
        self, audio_clip_ranges: Sequence[tuple[float, float]], audio_unit: str = "seconds"
    ) -> ClipList:
        """Audio clips ``(channels, samples)`` and their ``(start, end)`` seconds."""
        data = self.get_clips(audio_clip_ranges=audio_clip_ranges, audio_unit=audio_unit)
        return data.audio_clips, data.audio_timestamps

    def get_audio_samples_per_second(self) -> int:
        """The audio sample rate in Hz."""
        rate = self.get_metadata().audio_sample_rate
        if rate is None:
            raise MediaDecodeError("no audio stream: no samples per second")
        return rate

    def get_clips_uniform(
        self,
        clip_duration_seconds: float,
        num_clips: int,
        request_video: bool | None = None,
        request_audio: bool = False,
        video_out_frame_size: tuple[int, int] | None = None,
    ) -> AVData:
        """``energon_lite.av.get_clips_uniform`` on this decoder."""
        return get_clips_uniform(
            self,  # type: ignore[arg-type]
            clip_duration_seconds,
            num_clips,
            request_video,
            request_audio,
            video_out_frame_size,
        )

    def get_single_frames_uniform(
        self,
        num_frames: int,
        *,
        video_out_frame_size: tuple[int, int] | None = None,
        return_timestamps: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, list[float]]:
        """``energon_lite.av.get_single_frames_uniform`` on this decoder."""
        return get_single_frames_uniform(
            self,  # type: ignore[arg-type]
            num_frames,
            video_out_frame_size=video_out_frame_size,
            return_timestamps=return_timestamps,
        )
