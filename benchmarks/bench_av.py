"""Clips/s of energon_lite.av against Energon's AVDecoder on the same generated videos.

Workloads, one fresh decoder per clip from the encoded bytes (what a loader does per sample):

* ``random 16f``: one 16-frame clip at a fixed pseudo-random start (seconds ranges),
* ``uniform 1x16f``: ``get_clips_uniform`` with one 16-frame clip,
* ``uniform 4x16f``: ``get_clips_uniform`` with four 16-frame clips in one call.

The two libraries alternate A/B within each round (the machine is small and noisy) and the
table reports the median over rounds. Videos are 30 s, generated once under benchmarks/data/.

    PYTHONPATH=. python benchmarks/bench_av.py [--rounds 7] [--clips 40]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from energon_lite.av import AVDecoder, get_clips_uniform
from energon_lite.synth.av import make_video

DATA = Path(__file__).resolve().parent / "data" / "av"
VIDEOS = [  # (container, width, height, fps, gop)
    ("mp4", 256, 192, 30, 30),
    ("mp4", 320, 240, 25, 50),
    ("mkv", 256, 192, 30, 30),
    ("mkv", 320, 240, 25, 50),
]
SECONDS = 30


def generate() -> list[tuple[str, bytes, int]]:
    DATA.mkdir(parents=True, exist_ok=True)
    videos = []
    for container, width, height, fps, gop in VIDEOS:
        path = DATA / f"{width}x{height}_{fps}fps_gop{gop}.{container}"
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            make_video(
                tmp, container, SECONDS * fps, width, height, fps, gop_size=gop
            )  # atomic: an interrupted run leaves no half file
            tmp.rename(path)
        videos.append((path.name, path.read_bytes(), fps))
    return videos


def ours(kind: str) -> Callable[[bytes, float, float], int]:
    def run(data: bytes, start: float, clip_s: float) -> int:
        decoder = AVDecoder(data)
        if kind == "random":
            clips = decoder.get_clips([(start, start + clip_s)]).video_clips
        else:
            clips = get_clips_uniform(decoder, clip_s, 1 if kind == "uniform1" else 4).video_clips
        return len(clips)

    return run


def energon(kind: str) -> Callable[[bytes, float, float], int]:
    import io

    from megatron.energon.av import AVDecoder as EnergonAVDecoder
    from megatron.energon.av import get_clips_uniform as energon_uniform

    def run(data: bytes, start: float, clip_s: float) -> int:
        decoder = EnergonAVDecoder(io.BytesIO(data))
        if kind == "random":
            clips = decoder.get_clips(video_clip_ranges=[(start, start + clip_s)]).video_clips
        else:
            n = 1 if kind == "uniform1" else 4
            clips = energon_uniform(decoder, clip_s, n, request_video=True).video_clips
        return len(clips or [])

    return run


def clips_per_s(fn: Callable, jobs: list[tuple[bytes, float, float]]) -> float:
    begin = time.perf_counter()
    produced = sum(fn(data, start, clip_s) for data, start, clip_s in jobs)
    return produced / (time.perf_counter() - begin)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--clips", type=int, default=40, help="clips per video per round")
    args = parser.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)  # Energon warns on unit conversions
    videos = generate()
    rng = random.Random(0)
    rows = []
    for kind, label in [
        ("random", "random 16f"),
        ("uniform1", "uniform 1x16f"),
        ("uniform4", "uniform 4x16f"),
    ]:
        for name, data, fps in videos:
            clip_s = 15 / fps  # inclusive ends: 16 frames
            jobs = [(data, rng.uniform(0, SECONDS - 1), clip_s) for _ in range(args.clips)]
            a, b = ours(kind), energon(kind)
            a(*jobs[0]), b(*jobs[0])  # warm-up: imports, codec tables
            results: dict[str, list[float]] = {"lite": [], "energon": []}
            for r in range(args.rounds):
                order = (
                    [("lite", a), ("energon", b)] if r % 2 == 0 else [("energon", b), ("lite", a)]
                )
                for who, fn in order:
                    results[who].append(clips_per_s(fn, jobs))
            lite, ref = statistics.median(results["lite"]), statistics.median(results["energon"])
            rows.append((label, name, lite, ref, lite / ref))
    print(
        f"{args.rounds} rounds x {args.clips} clips per video, medians, clips/s (higher is better)\n"
    )
    print("| workload | video | energon_lite | Energon 7.4 | speed-up |")
    print("| --- | --- | ---: | ---: | ---: |")
    for label, name, lite, ref, ratio in rows:
        print(f"| {label} | {name} | {lite:.1f} | {ref:.1f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
