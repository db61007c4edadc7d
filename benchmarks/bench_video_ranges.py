"""CPU per sample of energon_lite.av's clip decoding against TorchCodec, decord, Energon's
``AVDecoder`` and a seek-and-decode limit, on h264 with B-frames, on the workloads of
issue 42.

Videos: h264 as encoders make it by default (x264 ``preset=medium``: B-frames, of which most
are not referenced), a keyframe every 2 s (plus x264's scene cuts), in mp4 and mkv, 10 s each, at 256x192, 640x360 and 1280x720.
Workloads, one fresh decoder per sample from the encoded bytes (what a loader does per sample)
unless the way says otherwise:

* ``random 16f``: one 16-frame range at a pseudo-random start,
* ``uniform 4x16f``: four 16-frame ranges spread evenly over the video, in one call,
* ``sparse 8x1f``: eight single frames spread evenly over the video, in one call.

Ways, interleaved within each round (the machine is small and shared, so CPU time is
measured, ``time.process_time`` in the process that decodes, and the tables show the median
over rounds with min-max). Everything single-threaded (codec threads off, one torch thread):

* ``energon_lite``: ``AVDecoder(data).get_clips(ranges, video_unit="frames")``,
* ``no skip``: the same with the skipping of unwanted non-reference frames turned off,
* ``reused``: energon_lite with one ``AVDecoder`` kept open over the samples of a video in a
  round (what ``DecoderCache`` gives a loader whose samples share a video),
* ``torchcodec``: ``VideoDecoder(data, seek_mode="exact", num_ffmpeg_threads=1)
  .get_frames_at(every wanted index)`` (one call per sample, split into the clips),
* ``decord``: ``VideoReader(BytesIO(data), num_threads=1).get_batch(every wanted index)``,
* ``energon``: Megatron-Energon's ``AVDecoder(BytesIO(data)).get_clips(ranges, "frames")``,
* ``limit``: plain PyAV: for each range seek to the keyframe before it, decode every frame up
  to its end, convert the wanted ones to RGB (the least a seek-and-decode reader does).

Every way's frames are checked equal (to the byte) to the limit's in the first round (a peer
whose frames differ is marked "other frames" and left out of the ratios). The
approximate mode is measured apart (``approx``: ``get_clips(..., keyframe_aligned=True)``),
its frames checked equal to the limit's at the keyframe-aligned ranges (each range moved back
to the keyframe at or before its start, same length).

A way whose library is not importable here is left out, unless ``--python NAME=INTERPRETER``
names a Python of another environment that has it (TorchCodec and decord live in their own,
beside a CPU torch); that way then runs in one long-lived child under that interpreter::

    PYTHONPATH=. python benchmarks/bench_video_ranges.py [--rounds 5] [--samples 20] \
        [--python torchcodec=/path/to/env/bin/python decord=/path/to/env/bin/python]

``--instructions`` counts instructions per sample instead of CPU time (valgrind's callgrind,
``benchmarks/callgrind.py``): each way in one process, each row's samples one phase, start-up
left out; the tables add where the instructions go by library (libavcodec apart)::

    PYTHONPATH=. python benchmarks/bench_video_ranges.py --instructions --samples 1 \
        --ways energon_lite torchcodec decord energon limit --jobs 5 [--python ...]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

DATA = Path(__file__).resolve().parent / "data" / "video_ranges"
VIDEOS = [
    ("mp4", 256, 192),
    ("mkv", 256, 192),
    ("mp4", 640, 360),
    ("mp4", 1280, 720),
    ("mkv", 1280, 720),
]  # (container, width, height)
FPS, SECONDS, GOP = 30, 10, 60
FRAMES = FPS * SECONDS
Ranges = list[tuple[int, int]]
Clips = list[np.ndarray]  # one (frames, height, width, 3) uint8 array per range

EXACT = ["energon_lite", "no skip", "reused", "torchcodec", "decord", "energon", "limit"]
PEERS = ["torchcodec", "decord", "energon"]
APPROX = ["approx"]
NEEDS = {"torchcodec": "torchcodec", "decord": "decord", "energon": "megatron.energon"}


def generate() -> list[Path]:
    from energon_lite.synth.av import make_video

    DATA.mkdir(parents=True, exist_ok=True)
    paths = []
    for container, width, height in VIDEOS:
        path = DATA / f"{width}x{height}_medium.{container}"
        if not path.exists():
            tmp = path.with_name(path.name + ".tmp")
            with tmp.open("wb") as out:
                make_video(out, container, FRAMES, width, height, FPS, gop_size=GOP,
                           video_options={"preset": "medium"})  # fmt: skip
            tmp.rename(path)  # atomic: an interrupted run leaves no half file
        paths.append(path)
    return paths


def workloads(rng: random.Random) -> dict[str, Ranges]:
    start = rng.randrange(0, FRAMES - 16)
    spread = [round(i * (FRAMES - 16) / 3) for i in range(4)]
    single = [round(i * (FRAMES - 1) / 7) for i in range(8)]
    return {
        "random 16f": [(start, start + 15)],
        "uniform 4x16f": [(s, s + 15) for s in spread],
        "sparse 8x1f": [(i, i) for i in single],
    }


# -- the ways: (encoded bytes, one list of ranges per sample) -> the clips of each sample --


def _energon_lite(data: bytes, samples: list[Ranges], **options: bool) -> list[Clips]:
    from energon_lite.av import AVDecoder

    out = []
    for ranges in samples:
        clips = AVDecoder(data).get_clips(ranges, video_unit="frames", **options).video_clips
        out.append([clip.permute(0, 2, 3, 1).numpy() for clip in clips])
    return out


def energon_lite_way(data: bytes, samples: list[Ranges]) -> list[Clips]:
    return _energon_lite(data, samples)


def approx_way(data: bytes, samples: list[Ranges]) -> list[Clips]:
    return _energon_lite(data, samples, keyframe_aligned=True)


def no_skip_way(data: bytes, samples: list[Ranges]) -> list[Clips]:
    import energon_lite.av.decoder as decoder_module

    kept = decoder_module._SKIPS_NONREF
    decoder_module._SKIPS_NONREF = frozenset()
    try:
        return _energon_lite(data, samples)
    finally:
        decoder_module._SKIPS_NONREF = kept


def reused_way(data: bytes, samples: list[Ranges]) -> list[Clips]:
    from energon_lite.av import AVDecoder

    with AVDecoder(data) as decoder:  # opened once for all the samples of this video
        return [
            [
                c.permute(0, 2, 3, 1).numpy()
                for c in decoder.get_clips(r, video_unit="frames").video_clips
            ]
            for r in samples
        ]


def _split(frames: np.ndarray, ranges: Ranges) -> Clips:
    """A peer's frames at every wanted index (in range order) cut back into the clips."""
    out, at = [], 0
    for lo, hi in ranges:
        out.append(frames[at : at + hi - lo + 1])
        at += hi - lo + 1
    return out


def _wanted(ranges: Ranges) -> list[int]:
    return [i for lo, hi in ranges for i in range(lo, hi + 1)]


def torchcodec_way(data: bytes, samples: list[Ranges]) -> list[Clips]:
    from torchcodec.decoders import VideoDecoder

    out = []
    for ranges in samples:
        decoder = VideoDecoder(data, seek_mode="exact", num_ffmpeg_threads=1,
                               dimension_order="NHWC")  # fmt: skip
        out.append(_split(decoder.get_frames_at(_wanted(ranges)).data.numpy(), ranges))
    return out


def decord_way(data: bytes, samples: list[Ranges]) -> list[Clips]:
    import decord

    out = []
    for ranges in samples:
        reader = decord.VideoReader(io.BytesIO(data), ctx=decord.cpu(0), num_threads=1)
        out.append(_split(reader.get_batch(_wanted(ranges)).asnumpy(), ranges))
    return out


def energon_way(data: bytes, samples: list[Ranges]) -> list[Clips]:
    from megatron.energon.av import AVDecoder as EnergonAVDecoder

    out = []
    for ranges in samples:
        decoder = EnergonAVDecoder(io.BytesIO(data), suppress_warnings=True)
        clips = decoder.get_clips(video_clip_ranges=ranges, video_unit="frames").video_clips
        out.append([clip.permute(0, 2, 3, 1).numpy() for clip in clips])
    return out


def limit_way(data: bytes, samples: list[Ranges]) -> list[Clips]:
    import av

    out = []
    for ranges in samples:
        clips = []
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
                clips.append(np.stack(frames))
        out.append(clips)
    return out


WAYS: dict[str, Callable[[bytes, list[Ranges]], list[Clips]]] = {
    "energon_lite": energon_lite_way,
    "no skip": no_skip_way,
    "reused": reused_way,
    "torchcodec": torchcodec_way,
    "decord": decord_way,
    "energon": energon_way,
    "limit": limit_way,
    "approx": approx_way,
}


def keyframe_aligned(data: bytes, ranges: Ranges) -> Ranges:
    """The ranges the approximate mode is defined to return: each moved back to the keyframe
    at or before its start, same length (clipped at the end)."""
    import av

    with av.open(io.BytesIO(data)) as container:
        packets = sorted((p for p in container.demux(video=0) if p.pts is not None),
                         key=lambda p: p.pts)  # fmt: skip
    keys = [i for i, p in enumerate(packets) if p.is_keyframe]
    moved = []
    for lo, hi in ranges:
        key = max(k for k in keys if k <= lo)
        moved.append((key, min(key + hi - lo, len(packets) - 1)))
    return moved


def _digest(clips: Clips) -> list[str]:
    return [
        hashlib.blake2b(np.ascontiguousarray(c).tobytes() + str(c.shape).encode()).hexdigest()
        for c in clips
    ]


def run_batch(way: str, path: str, samples: list[Ranges]) -> tuple[float, list[list[str]]]:
    """CPU seconds of ``way`` over ``samples`` of the video at ``path``, and each sample's
    clip digests (outside the timing)."""
    data = Path(path).read_bytes()
    start = time.process_time()
    got = WAYS[way](data, samples)
    seconds = time.process_time() - start
    return seconds, [_digest(clips) for clips in got]


def _single_threaded() -> None:
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(1)


def serve() -> None:
    """A child under another interpreter: one JSON request per line, one answer per line."""
    _single_threaded()
    for line in sys.stdin:
        request = json.loads(line)
        if "import" in request:
            __import__(request["import"])
            print(json.dumps({"ok": True}), flush=True)
            continue
        samples = [[tuple(r) for r in s] for s in request["samples"]]
        seconds, digests = run_batch(request["way"], request["path"], samples)
        print(json.dumps({"seconds": seconds, "digests": digests}), flush=True)


class Child:
    """One long-lived ``serve`` process under ``python``."""

    def __init__(self, python: str) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        self.process = subprocess.Popen(
            [python, __file__, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, env=env,
        )  # fmt: skip

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            raise RuntimeError(f"the child for {request} died (exit {self.process.wait()})")
        return json.loads(answer)

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


def count_child(way: str, paths: list[Path], samples_per_row: int) -> None:
    """Under callgrind: each row's samples between two marks, so each row is one phase.

    Prints the label of every phase in order (``video|workload`` for a row) and each row's
    clip digests (made outside the rows' phases)."""
    from benchmarks import callgrind

    _single_threaded()
    if way in NEEDS:
        __import__(NEEDS[way])
    WAYS[way](paths[0].read_bytes(), [workloads(random.Random(0))["random 16f"]])  # first call
    callgrind.ready()
    labels, digests = [], {}
    for path in paths:
        data = path.read_bytes()
        rng = random.Random(0)
        per_sample = [workloads(rng) for _ in range(samples_per_row)]
        for workload in per_sample[0]:
            samples = [s[workload] for s in per_sample]
            callgrind.mark()
            labels.append("setup")
            got = WAYS[way](data, samples)
            callgrind.mark()
            labels.append(f"{path.name}|{workload}")
            digests[labels[-1]] = [_digest(clips) for clips in got]
            del got
    print(json.dumps({"labels": [*labels, "end"], "digests": digests}), flush=True)


def instructions(ways: list[str], pythons: dict[str, str], paths: list[Path], samples: int,
                 jobs: int, dumps: Path | None = None) -> None:  # fmt: skip
    """Every way in its own process under callgrind (``count_child``); prints instructions
    per sample per row, the ratios, and where the instructions go (by library)."""
    from concurrent.futures import ThreadPoolExecutor

    from benchmarks import callgrind

    # Bytecode cached outside the environments (made by a plain run of each way first): an
    # interpreter compiling torch from source under callgrind takes the better part of an hour
    env = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1",
           "PYTHONPYCACHEPREFIX": str(DATA.parent / "pycache")}  # fmt: skip
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    started = time.perf_counter()
    for way in ways:
        cmd = [pythons.get(way, sys.executable), __file__, "--count", way, "--samples", "1"]
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)

    def one(way: str) -> tuple[dict[str, Counter[str]], dict[str, Any]]:
        cmd = [pythons.get(way, sys.executable), __file__, "--count", way]
        keep = None if dumps is None else dumps / way.replace(" ", "_")
        stdout, parts = callgrind.phases([*cmd, "--samples", str(samples)], env, keep)
        answer = json.loads(stdout.strip().splitlines()[-1])
        if len(parts) != len(answer["labels"]):
            raise RuntimeError(f"{way}: {len(parts)} callgrind dumps, {answer['labels']} phases")
        if keep is not None:  # which dump is which row: cg.out.PID.N is the phase labels[N - 1]
            (keep / "labels.json").write_text(json.dumps(answer["labels"]))
        rows = {label: part for label, part in zip(answer["labels"], parts) if "|" in label}
        print(f"{way}: counted in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        return rows, answer["digests"]

    with ThreadPoolExecutor(jobs) as pool:
        counted = dict(zip(ways, pool.map(one, ways)))
    per_sample: dict[tuple[str, str, str], Counter[str]] = {}
    differ: set[tuple[str, str, str]] = set()
    for path in paths:
        rng = random.Random(0)
        per_row = [workloads(rng) for _ in range(samples)]
        for workload in per_row[0]:
            label = f"{path.name}|{workload}"
            for way in ways:
                libraries: Counter[str] = Counter()
                for obj, count in counted[way][0][label].items():
                    libraries[callgrind.library(obj)] += count
                per_sample[(path.name, workload, way)] = Counter(
                    {lib: n / samples for lib, n in libraries.items()}
                )
            digests = {way: counted[way][1][label] for way in ways}
            rows = [s[workload] for s in per_row]
            differ |= {(path.name, workload, w) for w in _check(path, workload, rows, digests)}
    print(f"\ncallgrind, {samples} samples per row (the same for every way), "
          f"{time.perf_counter() - started:.0f} s in all\n")  # fmt: skip
    _print_instructions(paths, ways, per_sample, differ)


def _print_instructions(
    paths: list[Path],
    ways: list[str],
    per_sample: dict[tuple[str, str, str], Counter[str]],
    differ: set[tuple[str, str, str]],
) -> None:
    from benchmarks.common import markdown_table

    exact = [w for w in EXACT if w in ways]
    peers = [w for w in PEERS if w in ways]
    keys = [(p.name, w) for p in paths for w in workloads(random.Random(0))]

    def total(key: tuple[str, str], way: str) -> float:
        return sum(per_sample[(*key, way)].values()) / 1e6

    print("Exact frames, million instructions per sample:\n")
    rows, ratios = [], []
    for key in keys:
        same = [w for w in peers if (*key, w) not in differ]
        fastest = min(same, key=lambda w: total(key, w), default=None)
        ratio = None if fastest is None else total(key, fastest) / total(key, "energon_lite")
        if ratio is not None:
            ratios.append(ratio)
        rows.append([
            *key,
            *(f"{total(key, w):.1f}" + (" (other frames)" if (*key, w) in differ else "")
              for w in exact),
            "-" if fastest is None else f"{ratio:.2f}x ({fastest})",
            f"{total(key, 'limit') / total(key, 'energon_lite'):.2f}x",
        ])  # fmt: skip
    print(markdown_table(["video", "workload", *exact, "fastest peer / energon_lite",
                          "limit / energon_lite"], rows))  # fmt: skip
    if ratios:
        print(f"\nfastest peer / energon_lite over the rows: median {statistics.median(ratios):.2f}x,"
              f" min {min(ratios):.2f}x, max {max(ratios):.2f}x")  # fmt: skip
    print("\nThe same split: libavcodec (the h264 decoder itself) + everything else, million "
          "instructions per sample:\n")  # fmt: skip
    rows = [
        [*key, *(f"{per_sample[(*key, w)]['libavcodec'] / 1e6:.1f} + "
                 f"{total(key, w) - per_sample[(*key, w)]['libavcodec'] / 1e6:.1f}" for w in exact)]
        for key in keys
    ]  # fmt: skip
    print(markdown_table(["video", "workload", *exact], rows))
    _print_bound(keys, exact, peers, per_sample, differ)
    libraries = sorted({lib for counts in per_sample.values() for lib in counts})
    print("\nBy library, million instructions per sample summed over the rows:\n")
    rows = [
        [w, *(f"{sum(per_sample[(*k, w)][lib] for k in keys) / 1e6:.1f}" for lib in libraries)]
        for w in ways
    ]
    print(markdown_table(["way", *libraries], rows))


def _print_bound(
    keys: list[tuple[str, str]],
    exact: list[str],
    peers: list[str],
    per_sample: dict[tuple[str, str, str], Counter[str]],
    differ: set[tuple[str, str, str]],
) -> None:
    """How far ahead of the fastest peer any exact decoder could be on each row, counted.

    An exact decoder must run the h264 decoder over the frames the wanted ones depend on,
    and convert and hand out the wanted frames. The row's floor takes the least of each
    that any way with the same frames showed: the fewest libavcodec instructions (the
    decode) plus the fewest of everything else (demuxing, conversion to RGB, copies,
    Python). The fastest peer divided by that floor is the most a loader could lead by on
    the row without decoding fewer frames or converting them more cheaply than every
    measured way does."""
    from benchmarks.common import markdown_table

    rows, reachable, now = [], [], []
    for key in keys:
        same = [w for w in exact if (*key, w) not in differ]
        same_peers = [w for w in peers if w in same]
        if not same_peers or "energon_lite" not in same:
            continue
        codec = {w: per_sample[(*key, w)]["libavcodec"] / 1e6 for w in same}
        rest = {w: sum(per_sample[(*key, w)].values()) / 1e6 - codec[w] for w in same}
        fastest = min(codec[w] + rest[w] for w in same_peers)
        floor = min(codec.values()) + min(rest.values())
        ours = codec["energon_lite"] + rest["energon_lite"]
        reachable.append(fastest / floor)
        now.append(fastest / ours)
        rows.append([
            *key, f"{min(codec.values()):.1f} ({min(codec, key=codec.__getitem__)})",
            f"{min(rest.values()):.1f} ({min(rest, key=rest.__getitem__)})", f"{floor:.1f}",
            f"{ours:.1f}", f"{fastest / ours:.2f}x", f"{fastest / floor:.2f}x",
        ])  # fmt: skip
    if not rows:
        return
    print("\nThe floor of a row: the fewest decoder instructions any way ran plus the fewest "
          "of everything else, million per sample; the fastest peer against energon_lite "
          "and against that floor:\n")  # fmt: skip
    print(markdown_table(["video", "workload", "least decode", "least rest", "floor",
                          "energon_lite", "fastest peer / energon_lite",
                          "fastest peer / floor"], rows))  # fmt: skip
    print(f"\nfastest peer / floor over the rows: median {statistics.median(reachable):.2f}x, "
          f"min {min(reachable):.2f}x (energon_lite now: median "
          f"{statistics.median(now):.2f}x, min {min(now):.2f}x)")  # fmt: skip


def _available(way: str, pythons: dict[str, str]) -> bool:
    if way in pythons or way not in NEEDS:
        return True
    try:
        __import__(NEEDS[way])
    except ImportError:
        return False
    return True


def _cell(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=20, help="samples per row per round")
    parser.add_argument("--ways", nargs="*", default=EXACT + APPROX, choices=list(WAYS))
    parser.add_argument("--python", nargs="*", default=[], metavar="WAY=INTERPRETER")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions per sample under callgrind instead of CPU time",
    )
    parser.add_argument("--jobs", type=int, default=2, help="callgrind processes at a time")
    parser.add_argument(
        "--callgrind-dumps",
        type=Path,
        metavar="FOLDER",
        help="keep each way's callgrind dumps (one per phase) under FOLDER",
    )
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--count", choices=list(WAYS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve()
        return
    if args.count:
        count_child(args.count, generate(), args.samples)
        return
    _single_threaded()
    pythons = dict(item.split("=", 1) for item in args.python)
    ways = [w for w in args.ways if _available(w, pythons)]
    left_out = [w for w in args.ways if w not in ways]
    if "limit" not in ways:
        ways.append("limit")  # the reference every way's frames are checked against
    paths = generate()
    if args.instructions:
        instructions(ways, pythons, paths, args.samples, args.jobs, args.callgrind_dumps)
        return
    children = {python: Child(python) for python in set(pythons.values())}
    for way, python in pythons.items():
        if way in NEEDS:
            children[python].ask({"import": NEEDS[way]})  # import outside the timing
    for way in ways:
        if way in NEEDS and way not in pythons:
            __import__(NEEDS[way])
    warm = [workloads(random.Random(0))["random 16f"]]
    for way in ways:  # first calls (lazy imports, codec tables) outside the timing
        if way in pythons:
            children[pythons[way]].ask({"way": way, "path": str(paths[0]), "samples": warm})
        else:
            run_batch(way, str(paths[0]), warm)
    load_before = os.getloadavg()
    cpu: dict[tuple[str, str, str], list[float]] = {}
    differ: set[tuple[str, str, str]] = set()
    for round_no in range(args.rounds):
        for path in paths:
            rng = random.Random(round_no)
            per_sample = [workloads(rng) for _ in range(args.samples)]
            for workload in per_sample[0]:
                samples = [s[workload] for s in per_sample]
                order = ways[round_no % len(ways) :] + ways[: round_no % len(ways)]
                digests = {}
                for way in order:
                    if way in pythons:
                        answer = children[pythons[way]].ask(
                            {"way": way, "path": str(path), "samples": samples}
                        )
                        seconds, digests[way] = answer["seconds"], answer["digests"]
                    else:
                        seconds, digests[way] = run_batch(way, str(path), samples)
                    cpu.setdefault((path.name, workload, way), []).append(
                        seconds / args.samples * 1e3
                    )
                if round_no == 0:
                    for way in _check(path, workload, samples, digests):
                        differ.add((path.name, workload, way))
    load_after = os.getloadavg()
    for child in children.values():
        child.close()
    _print(paths, ways, cpu, differ, load_before, load_after, left_out)


def _check(path: Path, workload: str, samples: list[Ranges], digests: dict[str, Any]) -> set[str]:
    """The ways whose frames differ from the limit's (a peer's are shown, marked, and left
    out of the ratios; energon_lite's must not differ)."""
    differ = set()
    for way, got in digests.items():
        if way in APPROX:
            data = path.read_bytes()
            want = run_batch("limit", str(path), [keyframe_aligned(data, s) for s in samples])[1]
        else:
            want = digests["limit"]
        if got != want:
            if way not in PEERS:
                raise AssertionError(f"{way} differs from the limit on {path.name} {workload}")
            differ.add(way)
    return differ


def _print(
    paths: list[Path],
    ways: list[str],
    cpu: dict[tuple[str, str, str], list[float]],
    differ: set[tuple[str, str, str]],
    load_before: tuple[float, ...],
    load_after: tuple[float, ...],
    left_out: list[str],
) -> None:
    from benchmarks.common import markdown_table

    exact = [w for w in EXACT if w in ways]
    peers = [w for w in PEERS if w in ways]
    print(f"\nload average before {load_before[0]:.1f}, after {load_after[0]:.1f}; "
          f"left out (not importable): {', '.join(left_out) or 'none'}\n")  # fmt: skip
    print("Exact frames, CPU ms per sample, median over rounds (min-max):\n")
    headers = ["video", "workload", *exact, "fastest peer / energon_lite", "limit / energon_lite",
               "energon_lite / reused"]  # fmt: skip
    rows, ratios = [], []
    for path in paths:
        for workload in workloads(random.Random(0)):
            med = {w: statistics.median(cpu[(path.name, workload, w)]) for w in exact}
            same = [w for w in peers if (path.name, workload, w) not in differ]
            fastest = min((med[w] for w in same), default=None)
            if fastest is not None:
                ratios.append(fastest / med["energon_lite"])
            rows.append([
                path.name, workload,
                *(_cell(cpu[(path.name, workload, w)])
                  + (" (other frames)" if (path.name, workload, w) in differ else "")
                  for w in exact),
                "-" if fastest is None else f"{fastest / med['energon_lite']:.2f}x",
                f"{med['limit'] / med['energon_lite']:.2f}x",
                f"{med['energon_lite'] / med['reused']:.2f}x" if "reused" in med else "-",
            ])  # fmt: skip
    print(markdown_table(headers, rows))
    if ratios:
        print(f"\nfastest peer / energon_lite over the rows: median {statistics.median(ratios):.2f}x,"
              f" min {min(ratios):.2f}x, max {max(ratios):.2f}x")  # fmt: skip
    if "approx" in ways:
        print("\nApproximate (keyframe-aligned) clips, CPU ms per sample:\n")
        rows = []
        for path in paths:
            for workload in workloads(random.Random(0)):
                approx = statistics.median(cpu[(path.name, workload, "approx")])
                exact_ms = statistics.median(cpu[(path.name, workload, "energon_lite")])
                fastest = min((statistics.median(cpu[(path.name, workload, w)]) for w in peers
                               if (path.name, workload, w) not in differ), default=None)  # fmt: skip
                rows.append([
                    path.name, workload, _cell(cpu[(path.name, workload, "approx")]),
                    f"{exact_ms / approx:.2f}x",
                    "-" if fastest is None else f"{fastest / approx:.2f}x",
                ])  # fmt: skip
        print(markdown_table(["video", "workload", "approx", "energon_lite exact / approx",
                              "fastest peer (exact) / approx"], rows))  # fmt: skip


if __name__ == "__main__":
    main()
