"""Lazy, seek-first video/audio decoding with PyAV, shaped after ``megatron.energon.av``.

Over 300 lines on purpose: one class with Energon's ``AVDecoder`` surface (metadata, clips,
frames, audio) over one shared seek-and-decode cursor; the pieces share its state.
Energon's extra method names live in ``energon_lite.av.energon_api``.

An ``AVDecoder`` wraps the encoded bytes (or a path or binary file) and opens the container
only when first asked for something; the container then stays open, so the metadata read and
every later range share one demuxer. Each range is served by one cursor per container:

* seek with the container index to the last keyframe at or before the range start (the
  demuxer's own index: mp4/mov ``moov``, mkv/webm cues, avi ``idx1``),
* decode forward, converting to RGB only the frames inside the range,
* stop at the first frame past the range end and keep it for the next range.

A following range that starts after the cursor and has no keyframe in between continues
from the cursor instead of seeking, so increasing ranges never decode a frame twice. The
cost of a clip is thus bounded by one GOP plus the clip itself, whatever the video length;
``stats`` counts the decoded frames so tests can check it.

Units and conventions (the same as Energon's): a video range ``(start, end)`` is inclusive
at both ends. In ``"frames"`` it selects frames ``start..end``; in ``"seconds"`` every frame
whose display interval ``[pts, pts + duration)`` meets ``[start, end]``, so ``(t, t)`` gives
the one frame shown at ``t``. Seconds count from the container's start time, so 0 is always
the beginning of the media even where the first pts is not 0; frame numbers count from the
first video frame assuming a constant frame rate. An audio range is half-open in samples:
``(start, end)`` seconds gives ``round((end - start) * rate)`` samples from sample
``round(start * rate)``. Audio keeps the decoder's sample type, as Energon's does (16-bit
PCM stays int16, most compressed codecs give float32). Ranges running past the end are
clipped; a range starting past the end of the stream gives no clip (it is left out of the
returned lists, as in Energon); a range inside the media that selects no frame raises
``MediaDecodeError``.

Approximate, keyframe-aligned clips (``get_clips(..., keyframe_aligned=True)``), for tasks
that accept nearby frames: each video range is moved back to start at the last keyframe at
or before its start and keeps its length, so ``(start, end)`` becomes ``(k, k + end - start)``
in the range's unit, where ``k`` is that keyframe's frame number or time. Nothing before the
clip is decoded. The frames returned are those of a plain decode at the moved range, and the
timestamps say where the clip really is.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, BinaryIO

import numpy as np
import torch

from energon_lite.av.data import AVData
from energon_lite.av.energon_api import EnergonAVMethods
from energon_lite.errors import ConfigError, MediaDecodeError, missing_extra
from energon_lite.media_records.records import AVMetadata

try:
    import av
except ImportError as exc:
    raise missing_extra(
        "av", "av", "energon_lite.av (video and audio decoding)", package="PyAV"
    ) from exc

from energon_lite.av import rgb  # needs PyAV, checked above

AV_DECODE_MODES = ("AVDecoder", "pyav", "torch")
INF = float("inf")


@dataclass
class DecodeStats:
    """Work counters of one decoder, for tests and benchmarks."""

    decoded_video_frames: int = 0
    decoded_audio_frames: int = 0
    seeks: int = 0
    opens: int = 0


class AVDecoder(EnergonAVMethods):
    """Decodes clips of one encoded video/audio file on demand (see the module docstring).

    ``suppress_warnings`` is Energon's argument; this decoder issues no seek warnings.
    """

    def __init__(
        self, source: bytes | str | os.PathLike | BinaryIO, suppress_warnings: bool = False
    ) -> None:
        self.suppress_warnings = suppress_warnings
        if isinstance(source, (bytes, bytearray, memoryview)):
            self._source: Any = bytes(source)
        elif isinstance(source, (str, os.PathLike)):
            self._source = os.fspath(source)
        elif hasattr(source, "read") and hasattr(source, "seek"):
            self._source = source
        else:
            raise ConfigError(f"AVDecoder needs bytes, a path or a binary file, got {type(source)}")
        self.stats = DecodeStats()
        self._container: av.container.InputContainer | None = None
        self._cursor: _Cursor | None = None
        self._metadata: AVMetadata | None = None
        self._scaler = rgb.RgbScaler()  # to RGB, kept over the frames

    # -- container lifetime: opened lazily, reopened after pickling or close() --
    def _open(self) -> av.container.InputContainer:
        if self._container is None:
            src = self._source
            if isinstance(src, bytes):
                src = io.BytesIO(src)
            elif not isinstance(src, str):
                src.seek(0)
            try:
                container = av.open(src, "r")
            except (av.FFmpegError, OSError, ValueError) as exc:
                raise MediaDecodeError(f"cannot open media ({self._describe()}): {exc}") from exc
            for stream in container.streams:
                # Single-threaded codecs: loader workers already run in parallel, and codec
                # threads in a forked worker can deadlock ffmpeg on teardown (as in Energon).
                stream.codec_context.thread_type = "NONE"
            self._container = container
            self.stats.opens += 1
        return self._container

    def close(self) -> None:
        """Release the container and the scaler; a later call reopens them."""
        self._drop_cursor()
        if self._container is not None:
            self._container.close()
        self._container = None
        self._scaler.close()

    def __enter__(self) -> AVDecoder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        source = self._source
        if isinstance(source, io.BytesIO):
            source = source.getvalue()  # in-memory bytes travel; the open container does not
        if not isinstance(source, (bytes, str)):
            raise TypeError(
                "an AVDecoder over an open file object cannot be pickled; "
                "give it the bytes, a BytesIO or the path"
            )
        return {"source": source}

    def __setstate__(self, state: dict[str, Any]) -> None:
        AVDecoder.__init__(self, state["source"])

    def _describe(self) -> str:
        src = self._source
        return repr(src) if isinstance(src, str) else f"{type(src).__name__} source"

    # -- metadata --
    def get_metadata(self, get_audio_num_samples: bool = False, **_energon: bool) -> AVMetadata:
        """Durations, fps, frame count, size, audio rate and channels (cached).

        ``get_audio_num_samples`` also counts the audio samples (decodes the audio stream).
        Energon's other ``get_*`` flags are accepted; everything is always filled in.
        """
        meta = self._read_metadata()
        if get_audio_num_samples and meta.audio_num_samples is None and meta.audio_sample_rate:
            stream = self._stream("audio")
            self._drop_cursor()
            self._open().seek(_start_pts(stream), stream=stream, backward=True)
            meta.audio_num_samples = sum(f.samples for f in self._open().decode(stream))
        return meta

    def _read_metadata(self) -> AVMetadata:
        if self._metadata is None:
            container = self._open()
            meta = AVMetadata()
            if container.streams.video:
                vs = container.streams.video[0]
                meta.video_fps = float(vs.average_rate) if vs.average_rate else None
                meta.video_width = vs.codec_context.width or None
                meta.video_height = vs.codec_context.height or None
                meta.video_num_frames = vs.frames or None
                if container.format.name == "avi":
                    meta.video_num_frames = None  # AVI headers may count an empty frame
                if vs.duration is not None:
                    meta.video_duration = float(vs.duration * _time_base(vs))
                if meta.video_duration is None or meta.video_num_frames is None:
                    # mkv/webm keep no per-stream length: count the packets (no decoding).
                    count, end = self._scan_packets(vs)
                    meta.video_num_frames = meta.video_num_frames or count
                    if meta.video_duration is None and end is not None:
                        meta.video_duration = float((end - _start_pts(vs)) * _time_base(vs))
            if container.streams.audio:
                aud = container.streams.audio[0]
                meta.audio_sample_rate = aud.codec_context.sample_rate or aud.sample_rate
                meta.audio_channels = aud.codec_context.channels or None
                if aud.duration is not None:
                    meta.audio_duration = float(aud.duration * _time_base(aud))
                else:
                    _, end = self._scan_packets(aud)
                    if end is not None:
                        meta.audio_duration = float((end - _start_pts(aud)) * _time_base(aud))
            self._metadata = meta
        return self._metadata

    def _scan_packets(self, stream: av.stream.Stream) -> tuple[int, int | None]:
        container = self._open()
        self._drop_cursor()
        container.seek(_start_pts(stream), stream=stream, backward=True)
        count, end = 0, None
        for packet in container.demux(stream):
            if packet.pts is not None:
                count += 1
                packet_end = packet.pts + (packet.duration or 0)
                end = packet_end if end is None else max(end, packet_end)
        return count, end

    def get_video_fps(self) -> float:
        fps = self.get_metadata().video_fps
        if fps is None:
            raise MediaDecodeError(f"no video frame rate in {self._describe()}")
        return fps

    def get_video_duration(self, get_frame_count: bool = False) -> tuple[float | None, int | None]:
        """``(seconds, number of frames)`` of the video stream (Energon's pair); None where
        there is no video stream."""
        meta = self.get_metadata()
        return meta.video_duration, meta.video_num_frames

    def get_audio_duration(self) -> float | None:
        """Seconds of the audio stream, or None where there is none (as Energon)."""
        return self.get_metadata().audio_duration

    def has_video_stream(self) -> bool:
        return bool(self._open().streams.video)

    def has_audio_stream(self) -> bool:
        return bool(self._open().streams.audio)

    # -- clips --
    def get_clips(
        self,
        video_clip_ranges: Sequence[tuple[float, float]] | None = None,
        audio_clip_ranges: Sequence[tuple[float, float]] | None = None,
        video_unit: str = "seconds",
        audio_unit: str = "seconds",
        video_out_frame_size: tuple[int, int] | None = None,
        keyframe_aligned: bool = False,
    ) -> AVData:
        """Decode the given video and/or audio ranges (conventions: module docstring).

        ``video_out_frame_size`` is ``(width, height)`` as in Energon, or None for the
        stored size. ``keyframe_aligned=True`` moves each video range back to the keyframe
        at or before its start, keeping its length (approximate: module docstring).
        """
        if video_unit not in ("seconds", "frames"):
            raise MediaDecodeError(f"{video_unit=} is not 'seconds' or 'frames'")
        if audio_unit not in ("seconds", "samples"):
            raise MediaDecodeError(f"{audio_unit=} is not 'seconds' or 'samples'")
        data = AVData(video_clips=[], video_timestamps=[], audio_clips=[], audio_timestamps=[])
        for start, end in video_clip_ranges or ():
            found = self._video_clip(start, end, video_unit, video_out_frame_size, keyframe_aligned)
            if found is not None:  # None: the range starts past the end
                data.video_clips.append(found[0])
                data.video_timestamps.append(found[1])
        for start, end in audio_clip_ranges or ():
            found = self._audio_clip(start, end, audio_unit)
            if found is not None:
                data.audio_clips.append(found[0])
                data.audio_timestamps.append(found[1])
        return data

    def get_video(self) -> AVData:
        """The whole video stream as one clip."""
        return self.get_clips(video_clip_ranges=[(0, INF)])

    def get_audio(self) -> AVData:
        """The whole audio stream as one clip."""
        return self.get_clips(audio_clip_ranges=[(0, INF)])

    def get_video_with_audio(self) -> AVData:
        """The whole video and the whole audio stream."""
        return self.get_clips(video_clip_ranges=[(0, INF)], audio_clip_ranges=[(0, INF)])

    def get_frames(self, video_decode_audio: bool = False) -> AVData:
        """Everything: the video (plus audio if asked), or the audio of an audio-only file."""
        if not self.has_video_stream():
            return self.get_audio()
        return self.get_video_with_audio() if video_decode_audio else self.get_video()

    def _stream(self, kind: str) -> Any:  # a VideoStream or AudioStream, as ``kind`` says
        streams = getattr(self._open().streams, kind)
        if not streams:
            raise MediaDecodeError(f"no {kind} stream in {self._describe()}")
        return streams[0]

    def _video_clip(
        self,
        start: float,
        end: float,
        unit: str,
        size: tuple[int, int] | None,
        keyframe_aligned: bool = False,
    ) -> tuple[torch.Tensor, tuple[float, float]] | None:
        _check_range(start, end, unit)
        stream = self._stream("video")
        tb = float(_time_base(stream))
        step = 1 / (float(stream.average_rate or 25) * tb)  # nominal frame duration, pts units
        if unit == "frames":
            # Mid-frame bounds make the match robust to pts rounded to the time base.
            lo = _start_pts(stream) + (start + 0.5) * step
            hi = _start_pts(stream) + (end + 0.5) * step
        else:
            lo, hi = self._origin(stream) + start / tb, self._origin(stream) + end / tb
        if keyframe_aligned:
            lo, hi = self._align_to_keyframe(stream, lo, hi, step, unit)
        clip, first, last, beyond = _ClipFrames(hi, step), None, None, False
        for frame in self._frames(stream, lo, step):
            if frame.pts > hi:
                self._pend(frame)
                beyond = True
                break
            width, height = size if size is not None else (frame.width, frame.height)
            place = clip.place(frame.pts, height, width)
            if place is not None:
                self._scaler.into(frame, size, *place)
            else:
                clip.more.append(self._scaler.rgb(frame, size))
            first = frame if first is None else first
            last = frame
            if frame.pts + (frame.duration or step) > hi:
                # The next frame starts after this one ends, so it cannot be in the range:
                # stop without decoding it, and offer this one again to an overlapping range.
                self._pend(frame)
                break
        else:
            if last is not None:  # the stream ended in the range: offer its last frame again
                self._pend(last)
        if first is None or last is None:
            if not beyond:
                return None  # no frame at or after the range start: past the end
            meta = self.get_metadata()
            raise MediaDecodeError(
                f"video range ({start}, {end}) {unit} selects no frame; the video has "
                f"{meta.video_num_frames} frames, {meta.video_duration} seconds"
            )
        origin = self._origin(stream)
        stamps = (
            (first.pts - origin) * tb,
            (last.pts + (last.duration or step) - origin) * tb,
        )
        tensor = torch.from_numpy(clip.array()).permute(0, 3, 1, 2)
        return tensor, (float(stamps[0]), float(stamps[1]))

    def _audio_clip(
        self, start: float, end: float, unit: str
    ) -> tuple[torch.Tensor, tuple[float, float]] | None:
        _check_range(start, end, unit)
        stream = self._stream("audio")
        rate = stream.codec_context.sample_rate or stream.sample_rate
        if unit == "seconds":
            first = round(start * rate)
            wanted = None if end == INF else round((end - start) * rate)
        else:
            first = int(start)
            wanted = None if end == INF else int(end) - first
        tb = float(_time_base(stream))
        origin = self._origin(stream)
        lo = origin + first / rate / tb
        chunks, have, pos = [], 0, None
        for frame in self._frames(stream, lo, 1.0):
            if pos is None:
                pos = round(((frame.pts or 0) - origin) * tb * rate)
            samples = _samples(frame)
            skip = max(first - pos, 0)
            pos += samples.shape[1]
            if pos <= first:
                continue
            take = samples[:, skip:] if wanted is None else samples[:, skip : skip + wanted - have]
            chunks.append(take)
            have += take.shape[1]
            if wanted is not None and have >= wanted:
                break
        self._drop_cursor()  # audio frames are cut mid-frame: the next range seeks afresh
        if have == 0:
            if wanted == 0:
                raise MediaDecodeError(f"audio range ({start}, {end}) {unit} is empty")
            return None  # the stream ended before the range: past the end
        clip = torch.from_numpy(np.concatenate(chunks, axis=1))
        return clip, (first / rate, (first + have) / rate)

    def _align_to_keyframe(
        self, stream: av.stream.Stream, lo: float, hi: float, step: float, unit: str
    ) -> tuple[float, float]:
        """``(lo, hi)`` moved back to the keyframe shown at or before ``lo``, same length.

        The seek lands on that keyframe and decodes it: the cursor then starts the clip there.
        """
        if self._ends_before(stream, lo):
            return lo, hi  # past the end: no clip, as without alignment
        self._drop_cursor()
        cursor = self._cursor = self._seek(stream, lo, step)
        key = cursor.pending
        if key is None or key.pts is None:
            return lo, hi  # past the end, or no timestamps: the range as asked
        # Frame numbers point at mid-frame (as in _video_clip); seconds at the frame start.
        start = key.pts + (0.5 * step if unit == "frames" else 0.0)
        return start, start + (hi - lo)

    def _ends_before(self, stream: av.stream.Stream, lo: float) -> bool:
        """Whether ``stream`` ends at or before pts ``lo``, as far as the headers say."""
        if stream.duration is not None:
            return lo >= _start_pts(stream) + stream.duration
        duration = self._open().duration  # the container's, in AV_TIME_BASE units
        if duration is not None:
            return lo >= self._origin(stream) + duration / av.time_base / float(_time_base(stream))
        return False

    def _drop_cursor(self) -> None:
        """Forget the cursor, ending its packet loop (which resets the codec's skipping)."""
        if self._cursor is not None:
            self._cursor.close()
        self._cursor = None

    def _pend(self, frame: Any) -> None:
        """Keep ``frame`` for the next range (the cursor exists while frames are read)."""
        if self._cursor is not None:
            self._cursor.pending = frame

    def _origin(self, stream: av.stream.Stream) -> float:
        """Where second 0 is, in ``stream``'s pts: the container start (keeps A/V in sync)."""
        start = self._open().start_time
        if start is None:
            return float(_start_pts(stream))
        return start / av.time_base / float(_time_base(stream))

    def _frames(self, stream: av.stream.Stream, lo: float, step: float) -> Iterator[Any]:
        """Decoded frames of ``stream`` from the one showing at pts ``lo`` onward."""
        cursor = self._cursor
        if cursor is None or cursor.stream is not stream or not self._can_continue(cursor, lo):
            self._drop_cursor()
            cursor = self._cursor = self._seek(stream, lo, step)
        cursor.unwanted_before, cursor.step = lo, step
        while True:
            frame = cursor.next_frame()
            if frame is None:
                return
            if frame.pts is None or frame.pts + (frame.duration or step) > lo:
                yield frame

    def _can_continue(self, cursor: _Cursor, lo: float) -> bool:
        if cursor.position > lo:
            return False
        index = cursor.stream.index_entries
        key = index.search_timestamp(int(lo), backward=True) if len(index) else -1
        # A keyframe between the cursor and the target means a seek skips decoding work.
        return key < 0 or index[key].timestamp <= cursor.position

    def _seek(self, stream: av.stream.Stream, lo: float, step: float) -> _Cursor:
        container = self._open()
        target, floor = int(lo), _start_pts(stream)
        back = max(step, 1.0)
        for _ in range(8):
            self.stats.seeks += 1
            try:
                container.seek(max(target, floor), stream=stream, backward=True)
            except av.FFmpegError:
                container.seek(floor, stream=stream, backward=True)
            cursor = _Cursor(self, stream)
            first = cursor.next_frame()
            # Demuxer indexes of B-frame streams hold dts, and may land one GOP late.
            if first is None or first.pts is None or first.pts <= lo or target <= floor:
                cursor.pending = first
                return cursor
            cursor.close()
            target, back = int(lo - back), back * 4
        raise MediaDecodeError(f"cannot seek to pts {lo} in {self._describe()}")


class _Cursor:
    """A decode position in one stream: the frame iterator plus one frame read ahead.

    Decoding forward from a keyframe to the wanted frames, the packets of frames that end
    before ``unwanted_before`` (pts) and that no other frame refers to are not decoded at all:
    FFmpeg's ``skip_frame = NONREF``, switched per packet, so every frame handed out is
    decoded exactly as a plain decode would (for the codecs in ``_SKIPS_NONREF``).
    """

    def __init__(self, decoder: AVDecoder, stream: av.stream.Stream) -> None:
        self.decoder, self.stream = decoder, stream
        self.pending: Any = None
        self.position = -INF
        self.video = stream.type == "video"
        self.unwanted_before, self.step = -INF, 1.0
        skips = self.video and stream.codec_context.name in _SKIPS_NONREF
        if skips:
            # Start from a known state: the packet loop below switches it from here.
            stream.codec_context.skip_frame = "DEFAULT"
        self.frames: Iterator[Any] = self._skipping() if skips else decoder._open().decode(stream)

    def close(self) -> None:
        """End the packet loop now (its ``finally`` puts the codec back to ``DEFAULT``)
        rather than whenever the garbage collector gets to it."""
        close = getattr(self.frames, "close", None)
        if close is not None:
            close()

    def _skipping(self) -> Iterator[Any]:
        """``container.decode(stream)``, without the unwanted non-reference frames."""
        context = self.stream.codec_context
        skipping = False
        try:
            for packet in self.decoder._open().demux(self.stream):
                pts = packet.pts
                unwanted = pts is not None and pts + (packet.duration or self.step) <= (
                    self.unwanted_before
                )
                if unwanted is not skipping:
                    context.skip_frame = "NONREF" if unwanted else "DEFAULT"
                    skipping = unwanted
                yield from packet.decode()
        finally:
            if skipping:
                context.skip_frame = "DEFAULT"

    def next_frame(self) -> Any:
        if self.pending is not None:
            frame, self.pending = self.pending, None
        else:
            try:
                frame = next(self.frames, None)
            except (av.FFmpegError, ValueError) as exc:
                raise MediaDecodeError(
                    f"corrupt media ({self.decoder._describe()}): {exc}"
                ) from exc
            if frame is None:
                return None
            stats = self.decoder.stats
            if self.video:
                stats.decoded_video_frames += 1
            else:
                stats.decoded_audio_frames += 1
        self.position = frame.pts if frame.pts is not None else self.position
        return frame


class _ClipFrames:
    """The RGB frames of one clip, each converted as it comes into one array sized for the
    range (``RgbScaler.into`` writes it there; no frame of its own, no copy).
    The size is the number of frames starting between the first frame and ``hi`` at the
    nominal rate; a clip that turns out shorter is cut to its length, one that turns out
    longer (a variable frame rate, more than ``_MAX_PLANNED`` frames) is joined at the end.
    """

    def __init__(self, hi: float, step: float) -> None:
        self.hi, self.step = hi, step
        self.frames: rgb.Frames | None = None
        self.count = 0
        self.more: list[np.ndarray] = []

    def place(self, pts: int, height: int, width: int) -> tuple[rgb.Frames, int] | None:
        """Where the next frame (RGB, ``height`` x ``width``) goes: ``frames`` and its index
        there; None when it is kept apart in ``more`` (past the planned length, or another
        size)."""
        if self.frames is None:
            planned = int(min((self.hi - pts) / self.step, _MAX_PLANNED - 1)) + 1
            self.frames = rgb.Frames(max(planned, 1), height, width)
        out = self.frames.array
        if not self.more and self.count < len(out) and out.shape[1:3] == (height, width):
            self.count += 1
            return self.frames, self.count - 1
        return None

    def array(self) -> np.ndarray:
        assert self.frames is not None  # a clip has at least one frame
        out = self.frames.array
        if self.more:
            return np.concatenate([out[: self.count], np.stack(self.more)])
        return out if self.count == len(out) else out[: self.count].copy()


_MAX_PLANNED = 256  # frames an unbounded range's array is sized for before it grows


# Codecs whose non-reference frames FFmpeg marks exactly (nal_ref_idc / the NAL unit type):
# skipping them never changes another frame
_SKIPS_NONREF = frozenset({"h264", "hevc"})


def _start_pts(stream: av.stream.Stream) -> int:
    return stream.start_time if stream.start_time is not None else 0


def _check_range(start: float, end: float, unit: str) -> None:
    if not (0 <= start <= end):
        raise MediaDecodeError(f"range ({start}, {end}) {unit} must have 0 <= start <= end")


def _samples(frame: av.AudioFrame) -> np.ndarray:
    """(channels, samples) in the decoder's sample type (Energon's convention)."""
    arr = frame.to_ndarray()
    if not frame.format.is_planar:
        arr = arr.reshape(-1, len(frame.layout.channels)).T
    return arr


def decode_av_part(data: bytes, mode: str, decode_audio: bool = False) -> Any:
    """Decode a video/audio part of a sample the way Energon's ``SampleDecoder(av_decode=...)`` does.

    ``"AVDecoder"``: a lazy ``AVDecoder``; ``"pyav"``: an open ``av`` input container (the
    caller closes it); ``"torch"``: the whole media as ``AVData`` (video, plus audio if
    ``decode_audio``).
    """
    if mode not in AV_DECODE_MODES:
        raise ConfigError(f"av_decode={mode!r} is not one of {AV_DECODE_MODES}")
    if mode == "pyav":
        try:
            return av.open(io.BytesIO(data), "r")
        except (av.FFmpegError, OSError) as exc:
            raise MediaDecodeError(f"cannot open media: {exc}") from exc
    decoder = AVDecoder(data)
    if mode == "AVDecoder":
        return decoder
    with decoder:
        return decoder.get_frames(video_decode_audio=decode_audio)


def _time_base(stream: Any) -> Fraction:
    """A stream's time base; containers PyAV can demux always set one."""
    if stream.time_base is None:
        raise MediaDecodeError(f"{stream.type} stream #{stream.index} has no time base")
    return stream.time_base
