"""Tests of energon_lite.av on real files encoded with PyAV (energon_lite.synth.av)."""

from __future__ import annotations

import io
import pickle
import re
import warnings
from pathlib import Path

import av
import numpy as np
import pytest
import torch

from energon_lite.av import (
    AVData,
    AVDecoder,
    DecoderCache,
    decode_av_part,
    get_clips_uniform,
    get_single_frames_uniform,
)
from energon_lite.errors import ConfigError, MediaDecodeError
from energon_lite.synth.av import AUDIO_PERIOD, audio_pattern, make_video, read_frame_index

DOCS = Path(__file__).resolve().parent.parent / "docs" / "video_decoding.md"


def indices(clip: torch.Tensor) -> list[int]:
    return [read_frame_index(frame) for frame in clip]


def flat(pairs: list[tuple[float, float]]) -> list[float]:
    return [x for pair in pairs for x in pair]


def video_bytes(container: str = "mp4", **kwargs: object) -> bytes:
    buf = io.BytesIO()
    make_video(buf, container, **kwargs)
    return buf.getvalue()


@pytest.fixture(scope="module")
def long_mp4(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """30 s at 30 fps, a keyframe every 30 frames."""
    path = tmp_path_factory.mktemp("av") / "long.mp4"
    make_video(path, "mp4", num_frames=900, width=32, height=32, fps=30, gop_size=30)
    return path


@pytest.fixture(scope="module")
def av_mkv() -> bytes:
    """3 s of video at 25 fps with 16 kHz stereo PCM audio."""
    return video_bytes("mkv", num_frames=75, fps=25, with_audio=True, audio_channels=2)


@pytest.mark.parametrize(
    ("container", "codec", "size", "fps"),
    [
        ("mp4", None, (64, 48), 30),
        ("mov", None, (96, 64), 24),
        ("mkv", None, (64, 48), 25),
        ("webm", None, (64, 48), 30),
        ("webm", "libvpx", (48, 32), 15),
        ("avi", None, (64, 48), 30),
        ("avi", "mjpeg", (80, 48), 10),
    ],
)
def test_whole_video_and_metadata(container, codec, size, fps) -> None:
    data = video_bytes(
        container, num_frames=40, width=size[0], height=size[1], fps=fps, video_codec=codec
    )
    decoder = AVDecoder(data)
    assert decoder.stats.opens == 0  # lazy: nothing opened yet
    meta = decoder.get_metadata()
    assert (meta.video_width, meta.video_height, meta.video_num_frames) == (*size, 40)
    assert meta.video_fps == pytest.approx(fps)
    assert meta.video_duration == pytest.approx(40 / fps, abs=0.002)
    assert meta.audio_sample_rate is None and meta.audio_duration is None
    video = decoder.get_video()
    (clip,) = video.video_clips
    assert clip.dtype == torch.uint8 and clip.shape == (40, 3, size[1], size[0])
    assert indices(clip) == list(range(40))
    assert video.video_timestamps[0] == pytest.approx((0, 40 / fps), abs=0.002)
    assert decoder.stats.opens == 1


@pytest.mark.parametrize("container", ["mp4", "mkv", "avi"])
def test_second_ranges_select_frames_meeting_the_range(container) -> None:
    decoder = AVDecoder(video_bytes(container, num_frames=60, fps=20, gop_size=8))
    data = decoder.get_clips([(0, 1), (1.02, 1.02), (1.5, 1.6), (2.5, 10)])
    # Inclusive ends: (0, 1) s at 20 fps holds frames 0..20; (t, t) is the frame shown at t.
    assert [indices(c) for c in data.video_clips] == [
        list(range(21)),
        [20],
        [30, 31, 32],
        list(range(50, 60)),
    ]
    assert flat(data.video_timestamps) == pytest.approx(
        flat([(0, 1.05), (1.0, 1.05), (1.5, 1.65), (2.5, 3.0)]), abs=0.002
    )


@pytest.mark.parametrize("container", ["mp4", "mkv", "webm"])
def test_frame_ranges_are_inclusive(container) -> None:
    decoder = AVDecoder(video_bytes(container, num_frames=50, fps=30, gop_size=10))
    data = decoder.get_clips([(0, 0), (3, 17), (17, 20), (45, 99)], video_unit="frames")
    assert [indices(c) for c in data.video_clips] == [
        [0],
        list(range(3, 18)),
        list(range(17, 21)),
        list(range(45, 50)),
    ]
    assert data.video_timestamps[1] == pytest.approx((3 / 30, 18 / 30), abs=0.002)


@pytest.mark.parametrize("container", ["mp4", "mkv"])
def test_first_pts_not_zero(container) -> None:
    decoder = AVDecoder(video_bytes(container, num_frames=30, fps=10, first_frame=5))
    frames = decoder.get_clips([(0, 2)], video_unit="frames")
    assert indices(frames.video_clips[0]) == [0, 1, 2]
    # Video only: the container starts with the first frame, so second 0 is frame 0.
    seconds = decoder.get_clips([(0, 0.25)])
    assert indices(seconds.video_clips[0]) == [0, 1, 2]
    assert flat(seconds.video_timestamps) == pytest.approx([0, 0.3], abs=0.002)
    # With audio from 0 s, seconds stay on the shared clock: video shows from 0.5 s on.
    synced = AVDecoder(
        video_bytes(container, num_frames=30, fps=10, first_frame=5, with_audio=True)
    )
    clip = synced.get_clips([(0.5, 0.75)])
    assert indices(clip.video_clips[0]) == [0, 1, 2]
    assert flat(clip.video_timestamps) == pytest.approx([0.5, 0.8], abs=0.002)
    with pytest.raises(MediaDecodeError, match=r"range \(0, 0.4\) seconds selects no frame"):
        synced.get_clips([(0, 0.4)])


def test_b_frames_seek_exactly() -> None:
    data = video_bytes("mp4", num_frames=120, gop_size=12, video_options={"preset": "medium"})
    with av.open(io.BytesIO(data)) as container:
        packets = [p for p in container.demux(video=0) if p.pts is not None]
    assert any(p.pts != p.dts for p in packets)  # really has reordered frames
    decoder = AVDecoder(data)
    for start in (11, 12, 13, 59, 61, 107):
        clip = decoder.get_clips([(start, start + 4)], video_unit="frames").video_clips[0]
        assert indices(clip) == list(range(start, start + 5))


def test_clip_near_end_of_long_video_decodes_one_gop(long_mp4: Path) -> None:
    decoder = AVDecoder(long_mp4)
    clip = decoder.get_clips([(880, 895)], video_unit="frames").video_clips[0]
    assert indices(clip) == list(range(880, 896))
    gop, clip_len = 30, 16
    assert decoder.stats.decoded_video_frames <= gop + clip_len + 1
    decoder = AVDecoder(long_mp4)
    data = decoder.get_clips([(28.5, 29.0)])
    assert indices(data.video_clips[0]) == list(range(855, 871))
    assert decoder.stats.decoded_video_frames <= gop + clip_len + 1


def test_increasing_ranges_never_decode_a_frame_twice(long_mp4: Path) -> None:
    decoder = AVDecoder(long_mp4)
    ranges = [(s, s + 15) for s in range(0, 900, 20)]  # close ranges: no keyframe skipped
    data = decoder.get_clips(ranges, video_unit="frames")
    assert [indices(c)[0] for c in data.video_clips] == [s for s, _ in ranges]
    # Seeks only forward, to skip frames before a keyframe: nothing is decoded twice.
    assert decoder.stats.decoded_video_frames <= 900
    assert decoder.stats.seeks <= 30
    within_gop = AVDecoder(long_mp4)
    within_gop.get_clips([(0, 5), (8, 12), (20, 25)], video_unit="frames")
    assert (within_gop.stats.seeks, within_gop.stats.decoded_video_frames) == (1, 26)
    sparse = AVDecoder(long_mp4)
    sparse.get_clips([(1, 3), (20, 22)])  # far apart: seeks instead of decoding 17 s
    assert sparse.stats.decoded_video_frames <= 2 * (30 + 61)


def test_uniform_clips_and_single_frames(long_mp4: Path) -> None:
    decoder = AVDecoder(long_mp4.read_bytes())
    data = get_clips_uniform(decoder, clip_duration_seconds=1.0, num_clips=4)
    assert [c.shape[0] for c in data.video_clips] == [31, 31, 31, 30]
    assert [indices(c)[0] for c in data.video_clips] == [0, 290, 580, 870]
    assert data.video_timestamps[-1][1] == pytest.approx(30.0)
    frames, stamps = get_single_frames_uniform(decoder, 5, return_timestamps=True)
    assert frames.shape == (5, 3, 32, 32)
    assert indices(frames) == [0, 225, 450, 674, 899]
    assert stamps == pytest.approx([0, 7.5, 15, 22.4667, 29.9667], abs=0.001)
    small = get_single_frames_uniform(decoder, 2, video_out_frame_size=(16, 8))
    assert small.shape == (2, 3, 8, 16) and indices(small) == [0, 899]
    with pytest.raises(ConfigError, match="request_video"):
        get_clips_uniform(decoder, 1.0, 2, request_video=False)
    with pytest.raises(MediaDecodeError, match="do not fit"):
        get_clips_uniform(decoder, 31.0, 2)


def test_audio_clips_exact_to_the_sample(av_mkv: bytes) -> None:
    decoder = AVDecoder(av_mkv)
    meta = decoder.get_metadata()
    assert (meta.audio_sample_rate, meta.audio_channels) == (16000, 2)
    assert meta.audio_duration == pytest.approx(3.0, abs=0.002)
    data = decoder.get_clips(audio_clip_ranges=[(0.25, 0.5), (1.0001, 1.7), (2.9, 9)])
    assert [c.shape for c in data.audio_clips] == [(2, 4000), (2, 11198), (2, 1600)]
    for clip, first in zip(data.audio_clips, (4000, 16002, 46400)):
        assert clip.dtype == torch.int16  # 16-bit PCM keeps its type, as in Energon
        expected = audio_pattern(first, clip.shape[1], 2)
        np.testing.assert_allclose(clip.numpy() / 32768, expected, atol=1 / 32768)
    assert flat(data.audio_timestamps) == pytest.approx(
        flat([(0.25, 0.5), (1.000125, 1.7), (2.9, 3.0)])
    )
    samples = decoder.get_clips(
        audio_clip_ranges=[(1023, 1023 + AUDIO_PERIOD)], audio_unit="samples"
    )
    np.testing.assert_allclose(
        samples.audio_clips[0].numpy() / 32768, audio_pattern(1023, AUDIO_PERIOD, 2), atol=1 / 32768
    )


def test_video_with_audio_and_uniform_audio(av_mkv: bytes) -> None:
    decoder = AVDecoder(av_mkv)
    both = decoder.get_video_with_audio()
    assert both.video_clips[0].shape[0] == 75 and both.audio_clips[0].shape == (2, 48000)
    data = get_clips_uniform(decoder, 0.5, 3, request_video=True, request_audio=True)
    assert [c.shape for c in data.audio_clips] == [(2, 8000)] * 3
    assert [a for a, _ in data.audio_timestamps] == pytest.approx([0, 1.25, 2.5])
    assert [indices(c)[0] for c in data.video_clips] == [0, 31, 62]
    audio_only = AVDecoder(video_bytes("mkv", num_frames=25, with_audio=True, with_video=False))
    assert audio_only.get_frames().audio_clips[0].shape == (1, 13333)


def test_sources_and_pickle(tmp_path: Path, av_mkv: bytes) -> None:
    path = tmp_path / "v.mkv"
    path.write_bytes(av_mkv)
    with path.open("rb") as fh:
        from_file = AVDecoder(fh).get_clips([(1, 1)]).video_clips[0]
    from_path = AVDecoder(str(path)).get_clips([(1, 1)]).video_clips[0]
    revived = pickle.loads(pickle.dumps(AVDecoder(av_mkv)))
    assert (
        indices(from_file)
        == indices(from_path)
        == indices(revived.get_video().video_clips[0][25:26])
        == [25]
    )


def test_decode_av_part_modes(av_mkv: bytes) -> None:
    lazy = decode_av_part(av_mkv, "AVDecoder")
    assert isinstance(lazy, AVDecoder) and lazy.stats.opens == 0
    with decode_av_part(av_mkv, "pyav") as container:
        assert len(container.streams.video) == 1 and len(container.streams.audio) == 1
    video = decode_av_part(av_mkv, "torch")
    assert isinstance(video, AVData) and video.video_clips[0].shape == (75, 3, 48, 64)
    assert video.audio_clips == []
    both = decode_av_part(av_mkv, "torch", decode_audio=True)
    assert both.audio_clips[0].shape == (2, 48000)
    with pytest.raises(
        ConfigError, match=r"'torchvision' is not one of \('AVDecoder', 'pyav', 'torch'\)"
    ):
        decode_av_part(av_mkv, "torchvision")


def test_errors_name_the_range_and_the_length(tmp_path: Path) -> None:
    data = video_bytes("mp4", num_frames=30, fps=10)
    decoder = AVDecoder(data)
    past = decoder.get_clips([(1, 2), (5, 6), (2.5, 2.9)])  # past the end: left out (Energon)
    assert len(past.video_clips) == len(past.video_timestamps) == 2
    assert decoder.get_clips([(30, 31)], video_unit="frames").video_clips == []
    with pytest.raises(MediaDecodeError, match="0 <= start <= end"):
        decoder.get_clips([(2, 1)])
    with pytest.raises(MediaDecodeError, match="video_unit='minutes'"):
        decoder.get_clips([(0, 1)], video_unit="minutes")
    with pytest.raises(MediaDecodeError, match="audio_unit='frames'"):
        decoder.get_clips(audio_clip_ranges=[(0, 1)], audio_unit="frames")
    with pytest.raises(MediaDecodeError, match="no audio stream"):
        decoder.get_audio()
    with_audio = AVDecoder(video_bytes("mkv", with_audio=True))
    assert with_audio.get_clips(audio_clip_ranges=[(5, 6)]).audio_clips == []
    audio_only = video_bytes("mkv", with_audio=True, with_video=False)
    with pytest.raises(MediaDecodeError, match="no video stream"):
        AVDecoder(audio_only).get_video()
    with pytest.raises(MediaDecodeError, match="cannot open media"):
        AVDecoder(b"\x00garbage" * 100).get_video()
    with pytest.raises(MediaDecodeError, match="cannot open media"):
        AVDecoder(data[: len(data) // 2]).get_metadata()  # mp4 index is at the end
    with pytest.raises(MediaDecodeError, match="cannot open media"):
        AVDecoder(tmp_path / "missing.mp4").get_video()


def test_truncated_mkv_decodes_what_is_there_then_fails() -> None:
    data = video_bytes("mkv", num_frames=60, fps=10)
    decoder = AVDecoder(data[: len(data) // 2])
    clip = decoder.get_clips([(0, 0.5)]).video_clips[0]
    assert indices(clip) == list(range(6))
    assert decoder.get_clips([(5.5, 6)]).video_clips == []  # past what is there


def test_same_frames_as_energon(long_mp4: Path) -> None:
    energon_av = pytest.importorskip("megatron.energon.av")
    data = long_mp4.read_bytes()
    ours = AVDecoder(data)
    ranges = [(0, 0.5), (3.3, 4.0), (29.5, 30)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        theirs = energon_av.AVDecoder(io.BytesIO(data)).get_clips(video_clip_ranges=ranges)
        their_frames = energon_av.get_single_frames_uniform(
            energon_av.AVDecoder(io.BytesIO(data)), 7
        )
    mine = ours.get_clips(video_clip_ranges=ranges)
    assert [c.shape for c in mine.video_clips] == [c.shape for c in theirs.video_clips]
    assert flat(mine.video_timestamps) == pytest.approx(flat(theirs.video_timestamps))
    assert torch.equal(get_single_frames_uniform(ours, 7), their_frames)


def test_docs_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), flags=re.S)
    assert blocks
    monkeypatch.chdir(tmp_path)
    for block in blocks:
        exec(compile(block, str(DOCS), "exec"), {"__name__": "__docs__"})


def test_video_parts_of_webdataset_samples_arrive_as_decoders(tmp_path: Path) -> None:
    """SampleDecoder(av_decode=...) on mp4 parts of real tar shards, through the loader."""
    import io
    import tarfile

    from energon_lite import (
        SampleDecoder,
        TaskEncoder,
        VidQASample,
        WorkerConfig,
        get_loader,
        get_train_dataset,
        prepare_dataset,
    )
    from energon_lite.av import AVDecoder
    from energon_lite.synth.av import make_video, read_frame_index

    (tmp_path / "parts").mkdir()
    with tarfile.open(tmp_path / "parts/clips-0.tar", "w") as tar:
        for i in range(4):
            video = io.BytesIO()
            make_video(video, "mp4", num_frames=20 + i, width=32, height=32, fps=10)
            for name, data in (
                (f"c{i}.mp4", video.getvalue()),
                (f"c{i}.txt", f"clip {i}".encode()),
            ):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    prepare_dataset(tmp_path, split_ratio=[("train", 1)], sample_type="VidQASample",
                    field_map={"video": "mp4", "context": "txt"}, progress=False)  # fmt: skip

    class Clips(TaskEncoder):
        decoder = SampleDecoder(av_decode="AVDecoder")

        def encode_sample(self, sample: VidQASample) -> dict:
            assert isinstance(sample.video, AVDecoder)
            clip = sample.video.get_clips(
                video_clip_ranges=[(2, 5)], video_unit="frames"
            ).video_clips[0]
            return {"__key__": sample.__key__, "frames": [read_frame_index(f) for f in clip],
                    "length": sample.video.get_metadata().video_num_frames}  # fmt: skip

        def batch(self, samples: list[dict]) -> list[dict]:
            return samples

    dataset = get_train_dataset(tmp_path, worker_config=WorkerConfig(0, 1, 0), batch_size=4,
                                shuffle_buffer_size=None, max_samples_per_sequence=None,
                                repeat=False, task_encoder=Clips())  # fmt: skip
    (batch,) = list(get_loader(dataset))
    by_key = {s["__key__"]: s for s in batch}
    assert sorted(by_key) == ["c0", "c1", "c2", "c3"]
    assert all(s["frames"] == [2, 3, 4, 5] for s in batch)
    assert [by_key[f"c{i}"]["length"] for i in range(4)] == [20, 21, 22, 23]


def _plain_decode(data: bytes) -> np.ndarray:
    """Every frame of the video, decoded from the first without skipping, as RGB."""
    with av.open(io.BytesIO(data)) as container:
        container.streams.video[0].codec_context.thread_type = "NONE"
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])


@pytest.mark.parametrize("container", ["mp4", "mkv"])
def test_skipping_unwanted_non_reference_frames_keeps_every_frame_exact(container: str) -> None:
    """Decoding forward from a keyframe, the B-frames before the range that nothing refers to
    are skipped; the frames handed out are those of a plain decode, to the byte."""
    data = video_bytes(
        container, num_frames=180, width=64, height=48, gop_size=60,
        video_options={"preset": "medium"},
    )  # fmt: skip
    plain = _plain_decode(data)
    assert len(plain) == 180
    decoder = AVDecoder(data)
    ranges = [(50, 53), (55, 70), (100, 115), (119, 121), (10, 12), (170, 179)]
    clips = decoder.get_clips(ranges, video_unit="frames").video_clips
    for (start, end), clip in zip(ranges, clips, strict=True):
        assert indices(clip) == list(range(start, end + 1))
        assert np.array_equal(clip.permute(0, 2, 3, 1).numpy(), plain[start : end + 1])
    # without skipping, (50, 53) alone decodes every frame from the keyframe before it
    with av.open(io.BytesIO(data)) as opened:
        packets = sorted(
            (p for p in opened.demux(video=0) if p.pts is not None), key=lambda p: p.pts
        )
    key = max(i for i, p in enumerate(packets) if p.is_keyframe and i <= 50)
    first = AVDecoder(data)
    first.get_clips([(50, 53)], video_unit="frames")
    assert first.stats.decoded_video_frames < 54 - key
    uniform = get_clips_uniform(AVDecoder(data), clip_duration_seconds=0.5, num_clips=4)
    for clip in uniform.video_clips:
        start = indices(clip)[0]
        assert np.array_equal(clip.permute(0, 2, 3, 1).numpy(), plain[start : start + len(clip)])


def _keyframes(data: bytes) -> list[int]:
    """Frame numbers (display order) of the keyframes."""
    with av.open(io.BytesIO(data)) as opened:
        packets = sorted(
            (p for p in opened.demux(video=0) if p.pts is not None), key=lambda p: p.pts
        )
    return [i for i, p in enumerate(packets) if p.is_keyframe]


@pytest.fixture(scope="module", params=["mp4", "mkv"])
def b_frame_video(request: pytest.FixtureRequest) -> tuple[bytes, np.ndarray]:
    """6 s at 30 fps with B-frames (x264 preset medium), a keyframe every 60 frames, and
    every frame of a plain decode."""
    data = video_bytes(
        request.param, num_frames=180, width=64, height=48, gop_size=60,
        video_options={"preset": "medium"},
    )  # fmt: skip
    return data, _plain_decode(data)


def _assert_plain(clip: torch.Tensor, plain: np.ndarray, start: int) -> None:
    assert np.array_equal(clip.permute(0, 2, 3, 1).numpy(), plain[start : start + len(clip)])


def test_one_decoder_over_many_samples_gives_every_frame_of_a_plain_decode(
    b_frame_video: tuple[bytes, np.ndarray],
) -> None:
    """Clips in any order on one open decoder (forward in a GOP, back, across keyframes,
    single frames next to keyframes): each frame equal to a plain decode, to the byte."""
    data, plain = b_frame_video
    decoder = AVDecoder(data)
    rng = np.random.default_rng(0)
    ranges = [(59, 59), (60, 60), (61, 75), (58, 62), (0, 15), (119, 121), (170, 179), (3, 3)]
    ranges += [(int(s), int(s) + 15) for s in rng.integers(0, 164, size=20)]
    for start, end in ranges:
        (clip,) = decoder.get_clips([(start, end)], video_unit="frames").video_clips
        assert indices(clip) == list(range(start, end + 1))
        _assert_plain(clip, plain, start)
    assert decoder.stats.opens == 1


def test_one_scaler_over_frames_and_sizes_gives_each_frame_its_own_conversion(
    b_frame_video: tuple[bytes, np.ndarray],
) -> None:
    """The decoder converts every frame with one scaler: clips at the stored size and at
    other sizes, alternating on one decoder, equal a conversion of each frame by a scaler of
    its own (PyAV's ``to_ndarray``), to the byte."""
    data, plain = b_frame_video
    with av.open(io.BytesIO(data)) as container:
        container.streams.video[0].codec_context.thread_type = "NONE"
        frames = list(container.decode(video=0))
    decoder = AVDecoder(data)
    for (start, end), size in [((5, 9), None), ((30, 33), (32, 24)), ((70, 72), (80, 50)),
                               ((100, 103), None), ((110, 111), (32, 24))]:  # fmt: skip
        (clip,) = decoder.get_clips(
            [(start, end)], video_unit="frames", video_out_frame_size=size
        ).video_clips
        width, height = size or (64, 48)
        want = [
            f.to_ndarray(format="rgb24", width=width, height=height, interpolation="BILINEAR")
            for f in frames[start : end + 1]
        ]
        assert np.array_equal(clip.permute(0, 2, 3, 1).numpy(), np.stack(want))
        if size is None:
            _assert_plain(clip, plain, start)


def test_clip_arrays_of_every_length_hold_the_frames_of_a_plain_decode(long_mp4: Path) -> None:
    """A clip's frames go into one array sized for the range as they come: the whole video
    (more frames than such an array is first sized for), ranges cut by the end of the video,
    second ranges and single frames all equal a plain decode, to the byte."""
    data = long_mp4.read_bytes()
    plain = _plain_decode(data)
    (whole,) = AVDecoder(data).get_video().video_clips
    assert whole.shape[0] == 900
    _assert_plain(whole, plain, 0)
    decoder = AVDecoder(data)
    for (start, end), first in [((890, 1200), 890), ((899, 899), 899), ((0, 0), 0)]:
        (clip,) = decoder.get_clips([(start, end)], video_unit="frames").video_clips
        assert len(clip) == min(end, 899) - start + 1
        _assert_plain(clip, plain, first)
    (clip,) = decoder.get_clips([(10.0, 12.5)]).video_clips  # frames meeting [10 s, 12.5 s]
    assert indices(clip) == list(range(300, 376))
    _assert_plain(clip, plain, 300)


def test_decoder_cache_reuses_the_open_file_and_keeps_frames_exact(
    tmp_path: Path, b_frame_video: tuple[bytes, np.ndarray]
) -> None:
    data, plain = b_frame_video
    path = tmp_path / "v.video"
    path.write_bytes(data)
    assert not any(10 < k <= 20 for k in _keyframes(data))  # so (20, 27) continues (10, 17)
    cache = DecoderCache(capacity=2)
    first = cache.decoder(str(path))
    for start in (100, 10, 20, 150, 151, 64):  # one sample after another, one open file
        decoder = cache.decoder(str(path))
        assert decoder is first
        seeks = decoder.stats.seeks
        (clip,) = decoder.get_clips([(start, start + 7)], video_unit="frames").video_clips
        _assert_plain(clip, plain, start)
        if start == 20:  # after (10, 17), with no keyframe in between: continued, no seek
            assert decoder.stats.seeks == seeks
    assert first.stats.opens == 1 and len(cache) == 1

    # a file replaced on disk is opened afresh
    other = video_bytes("mkv", num_frames=40, width=32, height=32, gop_size=10)
    path.write_bytes(other)
    replaced = cache.decoder(str(path))
    assert replaced is not first and first._container is None  # the old one was closed
    assert indices(replaced.get_clips([(30, 33)], video_unit="frames").video_clips[0]) == [
        30, 31, 32, 33,
    ]  # fmt: skip

    # capacity: the least recently used file is closed
    paths = []
    for i in range(2):
        paths.append(tmp_path / f"{i}.mkv")
        paths[-1].write_bytes(other)
    cache.decoder(str(paths[0])).get_metadata()
    cache.decoder(str(paths[1])).get_metadata()
    assert len(cache) == 2 and replaced._container is None
    cache.discard(str(paths[0]))
    assert len(cache) == 1
    with pytest.raises(FileNotFoundError):
        cache.decoder(str(tmp_path / "missing.mp4"))
    with pytest.raises(ConfigError, match="at least one"):
        DecoderCache(capacity=0)
    cache.clear()
    assert len(cache) == 0


def _child_decodes(cache: DecoderCache, path: str, queue: object) -> None:
    held = len(cache)  # the parent's open file is not the child's
    clip = cache.decoder(path).get_clips([(5, 6)], video_unit="frames").video_clips[0]
    queue.put((held, indices(clip)))  # type: ignore[attr-defined]


def test_decoder_cache_starts_empty_in_a_forked_worker(tmp_path: Path) -> None:
    import multiprocessing

    path = tmp_path / "v.mp4"
    make_video(path, "mp4", num_frames=30, width=32, height=32)
    cache = DecoderCache()
    parent = cache.decoder(str(path))
    parent.get_clips([(20, 25)], video_unit="frames")
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_decodes, args=(cache, str(path), queue))
    child.start()
    assert queue.get(timeout=60) == (0, [5, 6])
    child.join(timeout=60)
    assert child.exitcode == 0
    # the parent's decoder is untouched by the child: it continues where it was
    assert cache.decoder(str(path)) is parent
    assert indices(parent.get_clips([(26, 27)], video_unit="frames").video_clips[0]) == [26, 27]


@pytest.mark.parametrize("container", ["mp4", "mkv"])
@pytest.mark.parametrize("preset", ["ultrafast", "medium"])
def test_keyframe_aligned_clips_start_at_the_keyframe_before(container: str, preset: str) -> None:
    """Approximate mode: each range moves back to the last keyframe at or before its start,
    keeps its length, and decodes nothing before it; the frames are a plain decode's."""
    data = video_bytes(
        container, num_frames=180, width=64, height=48, gop_size=45,
        video_options={"preset": preset},
    )  # fmt: skip
    plain = _plain_decode(data)
    keys = _keyframes(data)  # every 45 frames, and where x264 finds a scene cut
    assert len(keys) >= 4 and keys[0] == 0

    def key(frame: int) -> int:
        return max(k for k in keys if k <= frame)

    ranges = [(0, 15), (44, 59), (45, 60), (46, 61), (100, 100), (170, 179), (10, 12)]
    for start, end in ranges:
        decoder = AVDecoder(data)
        data_ = decoder.get_clips([(start, end)], video_unit="frames", keyframe_aligned=True)
        (clip,), (stamps,) = data_.video_clips, data_.video_timestamps
        first = key(start)
        assert indices(clip) == list(range(first, first + end - start + 1))
        _assert_plain(clip, plain, first)
        assert stamps == pytest.approx((first / 30, (first + end - start + 1) / 30), abs=0.002)
        # nothing before the clip, nor after it
        assert decoder.stats.decoded_video_frames == end - start + 1
    # seconds: (t0, t1) becomes (k, k + t1 - t0), k the keyframe's time (the second range
    # ran past the end; moved back, it keeps its 0.6 s)
    decoder = AVDecoder(data)
    seconds = decoder.get_clips([(2.0, 2.5), (5.9, 6.5)], keyframe_aligned=True)
    assert [indices(c) for c in seconds.video_clips] == [
        list(range(key(60), key(60) + 16)), list(range(key(177), key(177) + 19)),
    ]  # fmt: skip
    # several ranges in one call, and Energon's pair form
    clips, stamps = AVDecoder(data).get_video_clips(
        [(30, 31), (50, 51), (179, 179)], video_unit="frames", keyframe_aligned=True
    )
    assert [indices(c) for c in clips] == [
        [key(30), key(30) + 1],
        [key(50), key(50) + 1],
        [key(179)],
    ]
    # past the end: left out, as without the option
    assert (
        AVDecoder(data)
        .get_clips([(200, 210)], video_unit="frames", keyframe_aligned=True)
        .video_clips
        == []
    )
