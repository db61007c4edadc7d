"""``energon_lite.av.av_reader.AVProbeIndex``: a video stream's packets and keyframes found
by demuxing, and the keyframe search, with Energon's ``AVProbeIndex`` as the oracle."""

from __future__ import annotations

import io
import itertools

import pytest

av = pytest.importorskip("av")

from energon_lite.av.av_reader import AVProbeIndex  # noqa: E402
from energon_lite.synth.av import make_video  # noqa: E402


def _video(container: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    make_video(buffer, container, num_frames=40, width=32, height=24, fps=10, gop_size=8, **options)  # type: ignore[arg-type]
    return buffer.getvalue()


def _index(cls: type, data: bytes) -> tuple[list[tuple[int, bool]], list[int]]:
    with av.open(io.BytesIO(data)) as container:
        index = cls(container, 0)
        entries = [(index[i].timestamp, index[i].is_keyframe) for i in range(len(index))]
        first = next(container.demux(video=0))  # rewound: the first packet again
        assert first.pts == entries[0][0]
    times = sorted({t for t, _ in entries})
    probes = [t + d for t in times for d in (-1, 0, 1)] + [-(10**9), 10**9]
    answers = [
        index.search_timestamp(t, backward=b, any_frame=a)
        for t in probes
        for b in (True, False)
        for a in (False, True)
    ]
    return entries, answers


@pytest.mark.parametrize("container", ["mp4", "avi", "mkv"])
def test_probe_index_matches_energons(container: str) -> None:
    from megatron.energon.av.av_reader import AVProbeIndex as TheirIndex

    data = _video(container)
    ours = _index(AVProbeIndex, data)
    entries = ours[0]
    assert len(entries) == 40
    assert [i for i, (_, key) in enumerate(entries) if key] == [0, 8, 16, 24, 32]
    assert ours == _index(TheirIndex, data)


def test_search_finds_the_keyframe_to_start_from() -> None:
    with av.open(io.BytesIO(_video("mp4"))) as container:
        index = AVProbeIndex(container, 0)
    keys = [(i, e.timestamp) for i, e in enumerate(index) if e.is_keyframe]
    for (i, t), (j, u) in itertools.pairwise(keys):
        middle = (t + u) // 2
        assert index.search_timestamp(t) == i
        assert index.search_timestamp(middle) == i
        assert index.search_timestamp(middle, backward=False) == j
    assert index.search_timestamp(keys[-1][1] + 1, backward=False) == -1
