"""Synthetic test media made with PyAV: real encoded files whose frames can be told apart.

Each video frame carries its own index as a grid of black/white cells (one bit per cell,
4 x 4 cells = 16 bits, most significant bit top-left). Cells are large flat areas, so the
bits survive lossy codecs (h264, vp8/vp9, mpeg4, mjpeg) and ``read_frame_index`` recovers
the index from a decoded (C, H, W) or (H, W, C) uint8 frame by thresholding each cell's
centre. Audio is a sawtooth ``sample_index % AUDIO_PERIOD`` scaled into [-0.5, 0.5), which a
lossless codec (PCM) keeps exact, so tests can check audio offsets to the sample.

Used by the tests, the benchmarks and the docs; not by the loader itself.
"""

from __future__ import annotations

import os
from fractions import Fraction
from typing import BinaryIO, cast

import av
import numpy as np

GRID = 4
AUDIO_PERIOD = 1000

# container -> (video codec, pixel format, audio codec). Chosen from the encoders a stock
# PyAV wheel ships, one lossless audio codec wherever the container accepts it.
DEFAULT_CODECS: dict[str, tuple[str, str, str]] = {
    "mp4": ("libx264", "yuv420p", "aac"),
    "mov": ("libx264", "yuv420p", "pcm_s16le"),
    "mkv": ("libx264", "yuv420p", "pcm_s16le"),
    "webm": ("libvpx-vp9", "yuv420p", "libopus"),
    "avi": ("mpeg4", "yuv420p", "pcm_s16le"),
}


def frame_pattern(index: int, width: int, height: int) -> np.ndarray:
    """The (height, width, 3) uint8 RGB picture that encodes ``index`` (see module docstring)."""
    bits = [(index >> (GRID * GRID - 1 - b)) & 1 for b in range(GRID * GRID)]
    cells = np.array(bits, dtype=np.uint8).reshape(GRID, GRID) * 255
    ys = np.arange(height) * GRID // height
    xs = np.arange(width) * GRID // width
    gray = cells[ys[:, None], xs[None, :]]
    return np.repeat(gray[:, :, None], 3, axis=2)


def read_frame_index(frame: np.ndarray | object) -> int:
    """Recover the index drawn by ``frame_pattern`` from a decoded frame.

    Accepts a torch tensor or numpy array shaped (C, H, W) (Energon's layout) or (H, W, C).
    """
    arr = np.asarray(frame)
    if arr.ndim == 3 and arr.shape[0] in (1, 3) and arr.shape[2] not in (1, 3):
        arr = arr.transpose(1, 2, 0)
    gray = arr.astype(np.float32).mean(axis=2)
    height, width = gray.shape
    value = 0
    for row in range(GRID):
        for col in range(GRID):
            # Sample the middle half of each cell: edges blur under lossy compression.
            y0, y1 = (4 * row + 1) * height // (4 * GRID), (4 * row + 3) * height // (4 * GRID)
            x0, x1 = (4 * col + 1) * width // (4 * GRID), (4 * col + 3) * width // (4 * GRID)
            bit = int(gray[y0 : max(y1, y0 + 1), x0 : max(x1, x0 + 1)].mean() > 127.5)
            value = (value << 1) | bit
    return value


def audio_pattern(start: int, count: int, channels: int) -> np.ndarray:
    """(channels, count) float32 sawtooth for samples ``start .. start + count - 1``."""
    ramp = ((np.arange(start, start + count) % AUDIO_PERIOD) / AUDIO_PERIOD - 0.5).astype(
        np.float32
    )
    return np.repeat(ramp[None, :], channels, axis=0)


def make_video(
    path_or_buffer: str | os.PathLike | BinaryIO,
    container: str = "mp4",
    num_frames: int = 30,
    width: int = 64,
    height: int = 48,
    fps: int = 30,
    with_audio: bool = False,
    audio_rate: int = 16000,
    audio_channels: int = 1,
    *,
    video_codec: str | None = None,
    audio_codec: str | None = None,
    gop_size: int = 12,
    first_frame: int = 0,
    with_video: bool = True,
    video_options: dict[str, str] | None = None,
) -> None:
    """Encode a ``num_frames`` long test video (and optionally audio) into a file or buffer.

    ``gop_size`` is the keyframe interval; ``first_frame`` shifts every timestamp so the
    stream's first pts is ``first_frame / fps`` seconds instead of 0. ``video_options``
    replace the encoder options (e.g. ``{"preset": "medium"}`` for h264 with B-frames). Frame ``i`` of the file
    shows ``frame_pattern(i)``; audio sample ``n`` is ``audio_pattern(n)``.
    """
    if container not in DEFAULT_CODECS:
        raise ValueError(f"{container=} is not one of {sorted(DEFAULT_CODECS)}")
    default_video, pix_fmt, default_audio = DEFAULT_CODECS[container]
    video_codec = video_codec or default_video
    audio_codec = audio_codec or default_audio
    if video_codec == "mjpeg":
        pix_fmt = "yuvj420p"
    if isinstance(path_or_buffer, os.PathLike):
        path_or_buffer = os.fspath(path_or_buffer)
    with av.open(path_or_buffer, mode="w", format=_MUXERS[container]) as out:
        vstream: av.VideoStream | None = None
        astream: av.AudioStream | None = None
        if with_video:
            vstream = cast("av.VideoStream", out.add_stream(video_codec, rate=fps))
            vstream.width, vstream.height, vstream.pix_fmt = width, height, pix_fmt
            vstream.time_base = Fraction(1, fps)
            vstream.codec_context.gop_size = gop_size
            if video_codec in ("libx264", "libvpx-vp9", "libvpx"):
                # Fast and small, keyframes only every gop_size frames (no scene-cut extras).
                options: dict[str, object] = (
                    {"preset": "ultrafast", "sc_threshold": "0", "crf": "18"}
                    if video_codec == "libx264"
                    else {"deadline": "realtime", "cpu-used": "8", "crf": "10"}
                )
                vstream.options = options
                if video_codec != "libx264":
                    vstream.bit_rate = 2_000_000
            else:
                vstream.bit_rate = 4_000_000
            if video_options is not None:
                vstream.options = dict[str, object](video_options)
        if with_audio:
            astream = cast("av.AudioStream", out.add_stream(audio_codec, rate=audio_rate))
            astream.layout = "mono" if audio_channels == 1 else "stereo"
        audio = _AudioWriter(astream, audio_rate, audio_channels) if astream else None
        for i in range(num_frames):
            if vstream is not None:
                frame = av.VideoFrame.from_ndarray(frame_pattern(i, width, height), format="rgb24")
                frame.pts = first_frame + i
                out.mux(vstream.encode(frame))
            if audio is not None:
                # Interleave audio with video so the muxer never buffers a whole stream.
                out.mux(audio.write_until(round((i + 1) * audio_rate / fps)))
        if vstream is not None:
            out.mux(vstream.encode(None))
        if audio is not None:
            out.mux(audio.flush(round(num_frames * audio_rate / fps)))


_MUXERS = {"mp4": "mp4", "mov": "mov", "mkv": "matroska", "webm": "webm", "avi": "avi"}


class _AudioWriter:
    """Encodes the sawtooth in codec-sized frames, up to a requested sample count."""

    def __init__(self, stream: av.audio.stream.AudioStream, rate: int, channels: int) -> None:
        self.stream, self.rate, self.channels = stream, rate, channels
        self.chunk = stream.codec_context.frame_size or 1024
        self.pcm = stream.codec_context.codec.name.startswith("pcm")
        self.written = 0

    def write_until(self, total: int) -> list[av.Packet]:
        packets: list[av.Packet] = []
        while total - self.written >= self.chunk:
            packets += self._encode(self.chunk)
        return packets

    def flush(self, total: int) -> list[av.Packet]:
        packets = self.write_until(total)
        if total > self.written:
            packets += self._encode(total - self.written)
        return packets + self.stream.encode(None)

    def _encode(self, count: int) -> list[av.Packet]:
        data = audio_pattern(self.written, count, self.channels)
        fmt = "s16p" if self.pcm else "fltp"
        if self.pcm:
            data = np.round(data * 32768).astype(np.int16)
        layout = "mono" if self.channels == 1 else "stereo"
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(data), format=fmt, layout=layout)
        frame.sample_rate = self.rate
        frame.pts = self.written
        self.written += count
        return self.stream.encode(frame)
