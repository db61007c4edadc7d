"""RGB conversion straight into a clip's array (energon_lite.av.rgb): the same bytes as
PyAV's own conversion for every kind of frame, a conversion that differs kept on PyAV's
path, room after the array for what swscale writes past a row, and the switch."""

from __future__ import annotations

import io

import numpy as np
import pytest

av = pytest.importorskip("av")

from energon_lite.av import rgb  # noqa: E402
from energon_lite.av.decoder import AVDecoder  # noqa: E402
from energon_lite.errors import ConfigError  # noqa: E402

# (width, height, pixel format, colour space, colour range) of the encoded videos: untagged
# 4:2:0, BT.709 limited range, full range ("yuvj"), BT.601 full range, rows of a width that
# is no multiple of 8, 4:4:4 and 4:2:2
KINDS = [
    (256, 192, "yuv420p", None, None),
    (640, 360, "yuv420p", 1, 1),
    (320, 240, "yuvj420p", None, 2),
    (320, 240, "yuv420p", 6, 2),
    (250, 142, "yuv420p", None, None),
    (320, 240, "yuv444p", None, None),
    (322, 180, "yuv422p", 1, None),
]


def _video(width: int, height: int, pix_fmt: str, space: int | None, range_: int | None) -> bytes:
    """Six frames of noise with a gradient (every byte value, sharp edges) in h264."""
    buffer = io.BytesIO()
    rng = np.random.default_rng(width * height)
    ramp = np.linspace(0, 255, width, dtype=np.float64)[None, :, None]
    with av.open(buffer, "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
        if space is not None:
            stream.codec_context.colorspace = space
        if range_ is not None:
            stream.codec_context.color_range = range_
        for _ in range(6):
            noise = rng.integers(0, 256, (height, width, 3)).astype(np.float64)
            pixels = (0.5 * noise + 0.5 * ramp).astype(np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buffer.getvalue()


def _frames(data: bytes) -> list[av.VideoFrame]:
    with av.open(io.BytesIO(data)) as container:
        container.streams.video[0].codec_context.thread_type = "NONE"
        return list(container.decode(video=0))


def _pyav(frame: av.VideoFrame, size: tuple[int, int] | None) -> np.ndarray:
    width, height = size or (frame.width, frame.height)
    return frame.to_ndarray(format="rgb24", width=width, height=height, interpolation="BILINEAR")


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: "-".join(map(str, k)))
def test_clips_equal_pyavs_conversion_for_every_kind_of_frame(
    kind: tuple[int, int, str, int | None, int | None],
) -> None:
    """Whole clips, at the stored size and resized, equal PyAV's conversion of each frame,
    to the byte, whichever way each kind of conversion took."""
    data = _video(*kind)
    frames = _frames(data)
    assert frames[0].format.name.replace("yuvj", "yuv") == kind[2].replace("yuvj", "yuv")
    if kind[3] is not None:
        assert frames[0].colorspace == kind[3]  # the tags reached the decoded frames
    decoder = AVDecoder(data)
    for size in [None, (96, 64), (101, 57)]:
        (clip,) = decoder.get_clips(
            [(0, 5)], video_unit="frames", video_out_frame_size=size
        ).video_clips
        want = np.stack([_pyav(frame, size) for frame in frames])
        assert np.array_equal(clip.permute(0, 2, 3, 1).numpy(), want), size


def test_untagged_frames_at_their_size_are_written_straight_into_the_clip() -> None:
    """The common case (4:2:0 at the stored size) takes the direct way, checked once; a
    kind whose bytes differ from PyAV's (here a resize) stays on PyAV's way, still exact."""
    if not rgb.active():
        pytest.skip("no libswscale beside PyAV in this environment")
    frames = _frames(_video(256, 192, "yuv420p", None, None))
    scaler = rgb.RgbScaler()
    for size in [None, (96, 64)]:
        width, height = size or (256, 192)
        frames_ = rgb.Frames(len(frames), height, width)
        for i, frame in enumerate(frames):
            scaler.into(frame, size, frames_, i)
        assert np.array_equal(frames_.array, np.stack([_pyav(f, size) for f in frames]))
    kinds = {key[3:5]: exact for key, exact in rgb._EXACT.items() if key[1:3] == (256, 192)}
    assert kinds[(256, 192)] is True
    assert kinds[(96, 64)] is False  # swscale's legacy resize rounds otherwise than PyAV's
    scaler.close()
    scaler.close()  # a second close is harmless; a later conversion makes a new context
    again = rgb.Frames(1, 192, 256)
    scaler.into(frames[0], None, again, 0)
    assert np.array_equal(again.array[0], _pyav(frames[0], None))


def test_swscale_writes_past_a_row_only_into_the_room_after_the_array() -> None:
    """Rows of 250 pixels: swscale writes a block past the last row's end. ``Frames``
    leaves room for it; what it writes there stays far inside the room."""
    frames = _frames(_video(250, 142, "yuv420p", None, None))
    scaler = rgb.RgbScaler()
    places = rgb.Frames(2, 142, 250)
    root = places.array.base
    while root.base is not None:
        root = root.base
    root[...] = 7
    for i, frame in enumerate(frames[-2:]):
        scaler.into(frame, None, places, i)
    assert np.array_equal(places.array, np.stack([_pyav(f, None) for f in frames[-2:]]))
    after = root[places.array.nbytes :]
    assert len(after) == rgb._ROOM
    if rgb.active():
        assert 0 < np.count_nonzero(after != 7) < rgb._ROOM // 4  # a block, far inside
    with pytest.raises(ValueError, match="does not fit"):
        scaler.into(frames[-1], (96, 64), places, 0)


def test_the_switch_keeps_pyavs_conversion_and_a_bad_value_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The variable is read when the module loads its libraries (``_load``, run once at
    import): ``pyav`` loads none, a value it does not know is an error naming it."""
    monkeypatch.setenv(rgb.ENV, "pyav")
    assert rgb._load() is None
    monkeypatch.setenv(rgb.ENV, "fast")
    with pytest.raises(ConfigError, match=r"ENERGON_LITE_VIDEO_RGB='fast'.*auto, pyav"):
        rgb._load()
    monkeypatch.setenv(rgb.ENV, "auto")
    assert (rgb._load() is not None) == rgb.active()
