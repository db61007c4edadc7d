"""``AVProbeIndex`` (Energon's ``megatron.energon.av.av_reader``): where a video stream's
packets and keyframes are, found by demuxing the container once (no decoding).

For containers whose streams carry no seek index when opened (AVI and other older formats):
``search_timestamp`` finds the keyframe to start decoding from for a presentation time. The
container is rewound to its start afterwards.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Any

__all__ = ["AVProbeIndex", "AVProbeIndexEntry"]


@dataclass(slots=True)
class AVProbeIndexEntry:
    """One packet of the stream: its presentation time (stream time base) and whether it
    starts a keyframe."""

    timestamp: int
    is_keyframe: bool


class AVProbeIndex:
    """The packets of video stream ``stream_idx`` of an open PyAV container, in demux order
    (packets without a presentation time are left out)."""

    def __init__(self, container: Any, stream_idx: int = 0) -> None:
        self._entries = [
            AVProbeIndexEntry(timestamp=int(packet.pts), is_keyframe=bool(packet.is_keyframe))
            for packet in container.demux(video=stream_idx)
            if packet.pts is not None
        ]
        container.seek(0)
        # (timestamp, entry index), sorted: keyframes alone, and every packet
        keys = [(e.timestamp, i) for i, e in enumerate(self._entries) if e.is_keyframe]
        self._keyframes = sorted(keys)
        self._all = sorted((e.timestamp, i) for i, e in enumerate(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, idx: int) -> AVProbeIndexEntry:
        return self._entries[idx]

    def __iter__(self) -> Any:
        return iter(self._entries)

    def search_timestamp(
        self, timestamp: int, *, backward: bool = True, any_frame: bool = False
    ) -> int:
        """The entry index of the keyframe (any packet with ``any_frame``) nearest to
        ``timestamp``: the last at or before it (``backward``; the first entry when none is),
        or the first at or after it (-1 when none is). -1 for an empty index."""
        ordered = self._all if any_frame else self._keyframes
        if not ordered:
            return -1
        times = [t for t, _ in ordered]
        if backward:
            pos = bisect_right(times, timestamp) - 1
            if pos < 0:
                return 0
        else:
            pos = bisect_left(times, timestamp)
            if pos >= len(ordered):
                return -1
        found = times[pos]  # the first entry (in demux order) at that time
        return ordered[bisect_left(times, found)][1]
