"""CPU per sample of energon_lite.av's clip decoding on h264 with B-frames, against a
decode-only limit, on the workloads of issue 42.

Videos: h264 as encoders make it by default (x264 ``preset=medium``: B-frames, of which most
are not referenced), a keyframe every 2 s, in mp4 and mkv, 10 s each. Workloads, one fresh
decoder per sample from the encoded bytes (what a loader does per sample):

* ``random 16f``: one 16-frame range at a pseudo-random start,
* ``uniform 4x16f``: four 16-frame ranges spread evenly over the video, in one call,
* ``sparse 8x1f``: eight single frames spread evenly over the video, in one call.

Ways, interleaved within each round (the machine is small and shared, so CPU time is
measured, ``time.process_time``, and the table shows the median over rounds with min-max):

* ``energon_lite``: ``AVDecoder(data).get_clips(ranges, video_unit="frames")``,
* ``no skip``: the same with the skipping of unwanted non-reference frames turned off,
* ``limit``: plain PyAV: for each range seek to the keyframe before it, decode every frame up
  to its end, convert the wanted ones to RGB (the least a seek-and-decode reader does).

Every way's frames are checked equal (to the byte) to the limit's in the first round.

    PYTHONPATH=. python benchmarks/bench_video_ranges.py [--rounds 5] [--samples 20]
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import av
import numpy as np

import energon_lite.av.decoder as decoder_module
from energon_lite.av import AVDecoder
from energon_lite.synth.av import make_video

DATA = Path(__file__).resolve().parent / "data" / "video_ranges"
VIDEOS = [("mp4", 256, 192), ("mkv", 256, 192), ("mp4", 640, 360)]  # (container, width, height)
FPS, SECONDS, GOP = 30, 10, 60
FRAMES = FPS * SECONDS
Ranges = list[tuple[int, int]]


def generate() -> list[tuple[str, bytes]]:
    DATA.mkdir(parents=True, exist_ok=True)
    videos = []
    for container, width, height in VIDEOS:
        path = DATA / f"{width}x{height}_medium.{container}"
        if not path.exists():
            tmp = path.with_name(path.name + ".tmp")
            with tmp.open("wb") as out:
                make_video(out, container, FRAMES, width, height, FPS, gop_size=GOP,
                           video_options={"preset": "medium"})  # fmt: skip
            tmp.rename(path)  # atomic: an interrupted run leaves no half file
        videos.append((path.name, path.read_bytes()))
    return videos


def workloads(rng: random.Random) -> dict[str, Ranges]:
    start = rng.randrange(0, FRAMES - 16)
    spread = [round(i * (FRAMES - 16) / 3) for i in range(4)]
    single = [round(i * (FRAMES - 1) / 7) for i in range(8)]
    return {
        "random 16f": [(start, start + 15)],
        "uniform 4x16f": [(s, s + 15) for s in spread],
        "sparse 8x1f": [(i, i) for i in single],
    }


def energon_lite_way(data: bytes, ranges: Ranges) -> list[np.ndarray]:
    clips = AVDecoder(data).get_clips(ranges, video_unit="frames").video_clips
    return [clip.permute(0, 2, 3, 1).numpy() for clip in clips]


def no_skip_way(data: bytes, ranges: Ranges) -> list[np.ndarray]:
    kept = decoder_module._SKIPS_NONREF
    decoder_module._SKIPS_NONREF = frozenset()
    try:
        return energon_lite_way(data, ranges)
    finally:
        decoder_module._SKIPS_NONREF = kept


def limit_way(data: bytes, ranges: Ranges) -> list[np.ndarray]:
    out = []
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        stream.codec_context.thread_type = "NONE"
        step = 1 / (float(stream.average_rate) * float(stream.time_base))
        first = stream.start_time or 0
        for lo, hi in ranges:
            container.seek(int(first + lo * step), stream=stream, backward=True)
            frames = []
            for frame in container.decode(stream):
                index = round((frame.pts - first) / step)
                if index > hi:
                    break
                if index >= lo:
                    frames.append(frame.to_ndarray(format="rgb24"))
                    if index == hi:
                        break
            out.append(np.stack(frames))
    return out


WAYS: dict[str, Callable[[bytes, Ranges], list[np.ndarray]]] = {
    "energon_lite": energon_lite_way,
    "no skip": no_skip_way,
    "limit": limit_way,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=20, help="samples per row per round")
    args = parser.parse_args(argv)
    videos = generate()
    cpu: dict[tuple[str, str, str], list[float]] = {}
    for round_no in range(args.rounds):
        for name, data in videos:
            rng = random.Random(round_no)
            samples = [workloads(rng) for _ in range(args.samples)]
            for workload in samples[0]:
                order = list(WAYS) if round_no % 2 == 0 else list(reversed(WAYS))
                results = {}
                for way in order:
                    t = time.process_time()
                    results[way] = [WAYS[way](data, s[workload]) for s in samples]
                    per = (time.process_time() - t) / args.samples * 1e3
                    cpu.setdefault((name, workload, way), []).append(per)
                if round_no == 0:
                    for way, got in results.items():
                        for a, b in zip(got, results["limit"], strict=True):
                            assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True)), (
                                f"{way} differs from the limit on {name} {workload}"
                            )
    print("| video | workload | " + " | ".join(f"{w}: CPU ms" for w in WAYS)
          + " | limit / energon_lite | no skip / energon_lite |")  # fmt: skip
    print("| --- | --- |" + " ---: |" * (len(WAYS) + 2))
    for name, _ in videos:
        for workload in workloads(random.Random(0)):
            cells, med = [], {}
            for way in WAYS:
                values = cpu[(name, workload, way)]
                med[way] = statistics.median(values)
                cells.append(f"{med[way]:.1f} ({min(values):.1f}-{max(values):.1f})")
            ratios = [med["limit"] / med["energon_lite"], med["no skip"] / med["energon_lite"]]
            print(f"| {name} | {workload} | " + " | ".join(cells) + " | "
                  + " | ".join(f"{r:.2f}x" for r in ratios) + " |")  # fmt: skip


if __name__ == "__main__":
    main()
