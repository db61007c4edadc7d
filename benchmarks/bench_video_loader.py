"""Open-Sora-style video-text input end to end: energon_lite's video-text loader against the
same clips read with TorchCodec in a plain torch ``DataLoader``, 2 workers each.

The dataset (made once, cached under ``--data``, by default in the system's temporary
folder): ``--files`` h264 mp4s per size made with PyAV (x264 ``veryfast``: B-frames, a
keyframe every 2 s; a scrolling texture over each frame's index drawn as a grid), one CSV
row per file as Open-Sora's tables have one file per clip (so energon_lite's two open
videos per worker are seldom the next clip's), prepared with ``prepare_video_text``:

* 256x192 (4:3), 90 frames; 256x256 (1:1), 120 frames; 640x360 (16:9), 150 frames.

Buckets: one per size, 16 frames, 4 clips a batch; the clips stay at their size (the
transform is only [-1, 1] and the ``(C, T, H, W)`` layout), so the work is decoding and
moving batches, not resizing.

* ``energon_lite``: what a user writes: ``get_train_dataset(csv,
  task_encoder=VideoTextTaskEncoder(buckets))`` (a random 16-frame window of each clip,
  exact frames, synchronised buckets), shuffle buffer 32, ``get_savable_loader``, 2 workers;
* ``torchcodec``: a map-style ``Dataset`` whose item is ``(path, frame indices)``:
  ``VideoDecoder(path, seek_mode="exact", num_ffmpeg_threads=1).get_frames_at(indices)``,
  the same [-1, 1] ``(C, T, H, W)`` float32 transform, a plain ``DataLoader`` with
  ``batch_sampler`` = energon_lite's batches and 2 workers.

Both read the same clips in the same batches: a first, untimed pass of energon_lite records
each batch's rows and frame indices (read back from the frames: each shows its index) and a
checksum per clip; TorchCodec's pass over that plan must give the same checksums (uint8
frames, to the byte), and every timed energon_lite run must give the same batches.

Each run is a fresh child process (TorchCodec's under ``--python
torchcodec=INTERPRETER`` where it is not importable here), one torch thread everywhere.
Time to first batch counts from the child's start (interpreter, imports, workers, first
batch); after ``--warmup`` batches, ``--batches`` batches are timed: samples/s (wall clock)
and CPU ms per clip of the child and its workers together (``psutil``, the whole process
tree), of the child alone (the trainer's side: receiving batches) and the kernel's part of the
first (system time: page faults of fresh memory, mappings). Each round runs the
loaders in another order (rotated, and reversed every other round); the table shows the median with min-max over rounds. Children
read bytecode cached under ``--data`` (a user's environment has it; compiling torch in every
child is not loading)::

    PYTHONPATH=. python benchmarks/bench_video_loader.py [--rounds 3] [--data FOLDER] \
        [--python torchcodec=/path/to/env/bin/python] [--tree before=/path/to/checkout]

``--tree NAME=CHECKOUT`` adds ``energon_lite@NAME``: the same loader with the
``energon_lite`` of another checkout (e.g. before a change), in the same rounds, checked to
read the same batches; the ratios then compare it with this checkout's too.

``--instructions`` counts instead, under valgrind's callgrind, the instructions per clip of
energon_lite's loader (and each ``--tree``'s) in one process (0 workers: callgrind counts
the process it runs, and the kernel's page faults are not instructions), over the
``--batches`` batches after ``--warmup``, by library (``benchmarks/callgrind.py``)::

    PYTHONPATH=. python benchmarks/bench_video_loader.py --instructions --warmup 2 \
        --batches 6 [--tree before=/path/to/checkout]
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

CLIP, BATCH, FPS, GOP = 16, 4, 30, 60
SIZES = [(192, 256, 90), (256, 256, 120), (360, 640, 150)]  # (height, width, frames)
BUCKETS = {
    "4:3": {"192x256": {CLIP: (1.0, BATCH)}},
    "1:1": {"256x256": {CLIP: (1.0, BATCH)}},
    "16:9": {"360x640": {CLIP: (1.0, BATCH)}},
}
WAYS = ["energon_lite", "torchcodec"]
STARTED_AT = "BENCH_STARTED_AT"
Plan = list[list[dict[str, Any]]]  # per batch, per clip: {"row", "path", "indices", "digest"}


# -- the dataset -----------------------------------------------------------------------------


def _encode(path: Path, height: int, width: int, frames: int, seed: int) -> None:
    """An h264 mp4 whose frame ``i`` shows ``frame_pattern(i)`` under a scrolling texture
    (so that decoding costs what textured video costs, and the index can be read back)."""
    import av

    from energon_lite.synth.av import frame_pattern

    rng = np.random.default_rng(seed)
    blocks = rng.integers(-40, 41, (height // 4 + 1, (width + frames) // 4 + 1), dtype=np.int16)
    texture = np.repeat(np.repeat(blocks, 4, axis=0), 4, axis=1)[:height]
    tmp = path.with_name(path.name + ".tmp")
    with av.open(str(tmp), mode="w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=FPS)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.codec_context.gop_size = GOP
        stream.options = {"preset": "veryfast"}
        for i in range(frames):
            picture = frame_pattern(i, width, height).astype(np.int16)
            picture += texture[:, i : i + width, None]
            frame = av.VideoFrame.from_ndarray(picture.clip(0, 255).astype(np.uint8), "rgb24")
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    tmp.rename(path)  # atomic: an interrupted run leaves no half file


def make_dataset(folder: Path, files: int) -> Path:
    """The videos, the CSV and its prepared index under ``folder`` (made once)."""
    from energon_lite.flavors.video_text import prepare_video_text

    csv_path = folder / f"clips_{files}.csv"
    if (folder / f"clips_{files}.energon").is_dir():
        return csv_path
    (folder / "videos").mkdir(parents=True, exist_ok=True)
    rows: list[list[Any]] = []
    for n in range(files):
        for height, width, frames in SIZES:
            name = f"videos/{width}x{height}_{n:03d}.mp4"
            if not (folder / name).exists():
                _encode(folder / name, height, width, frames, seed=len(rows))
            rows.append([name, f"clip {len(rows)} ({width}x{height})", frames, height, width, FPS])
    with open(csv_path, "w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(["path", "text", "num_frames", "height", "width", "fps"])
        writer.writerows(rows)
    prepare_video_text(csv_path, progress=False)
    return csv_path


# -- the two loaders: each yields (video (B, C, T, H, W) float32, row of each clip) -------------


def energon_lite_batches(csv_path: Path, workers: int) -> Iterator[tuple[torch.Tensor, list[int]]]:
    from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset
    from energon_lite.flavors.video_text import VideoTextTaskEncoder

    dataset = get_train_dataset(
        csv_path,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=workers),
        batch_size=None,  # the bucket sets it
        shuffle_buffer_size=32,
        max_samples_per_sequence=8,
        task_encoder=VideoTextTaskEncoder(BUCKETS, seed=0),
    )
    for batch in get_savable_loader(dataset):
        yield batch["video"], [int(key.rsplit(":", 1)[1]) for key in batch["__key__"]]


def model_input(frames: torch.Tensor) -> torch.Tensor:
    """uint8 ``(T, C, H, W)`` -> float32 ``(C, T, H, W)`` in [-1, 1]: Open-Sora's transform at
    the bucket's size, written as energon_lite's ``resize_crop`` does it (one output tensor,
    scaled in place), so that both ways pay the same for it."""
    out = torch.empty((frames.shape[1], frames.shape[0], *frames.shape[2:]), dtype=torch.float32)
    out.copy_(frames.permute(1, 0, 2, 3))
    return out.div_(127.5).sub_(1.0)


class PlannedClips(torch.utils.data.Dataset):
    """Item ``i``: the frames ``indices`` of video ``path`` of the ``i``-th planned clip."""

    def __init__(self, folder: Path, plan: Plan) -> None:
        self.folder = folder
        self.clips = [(clip["row"], clip["path"], clip["indices"]) for b in plan for clip in b]

    def __len__(self) -> int:
        return len(self.clips)

    def __getitem__(self, index: int) -> dict[str, Any]:
        from torchcodec.decoders import VideoDecoder

        row, path, indices = self.clips[index]
        decoder = VideoDecoder(str(self.folder / path), seek_mode="exact", num_ffmpeg_threads=1)
        frames = decoder.get_frames_at(indices).data  # (T, C, H, W) uint8
        return {"video": model_input(frames), "row": row}


def _one_thread(_: int) -> None:
    torch.set_num_threads(1)


def torchcodec_batches(
    csv_path: Path, workers: int, plan: Plan
) -> Iterator[tuple[torch.Tensor, list[int]]]:
    import torchcodec.decoders  # noqa: F401  (as a script imports it: before the workers fork)

    dataset = PlannedClips(csv_path.parent, plan)
    at, batches = 0, []
    for batch in plan:
        batches.append(list(range(at, at + len(batch))))
        at += len(batch)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=batches, num_workers=workers,
                                         worker_init_fn=_one_thread)  # fmt: skip
    for batch in loader:
        yield batch["video"], batch["row"].tolist()


# -- the children ------------------------------------------------------------------------------


def clip_digest(clip: torch.Tensor) -> str:
    """A checksum of one ``(C, T, H, W)`` clip in [-1, 1], over its uint8 frames."""
    frames = ((clip + 1.0) * 127.5).round_().to(torch.uint8)
    return hashlib.blake2b(frames.numpy().tobytes() + str(tuple(clip.shape)).encode()).hexdigest()


def frame_indices_shown(clip: torch.Tensor) -> list[int]:
    """The index each frame of a ``(C, T, H, W)`` clip shows (``frame_pattern``'s grid)."""
    from energon_lite.synth.av import read_frame_index

    frames = ((clip + 1.0) * 127.5).round_().to(torch.uint8).permute(1, 0, 2, 3)
    return [read_frame_index(frame.numpy()) for frame in frames]


def child(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    csv_path = Path(args.csv)
    plan = json.loads(Path(args.plan).read_text()) if args.plan else None
    if args.child == "energon_lite":
        iterator = energon_lite_batches(csv_path, args.workers)
    else:
        if plan is None:
            raise SystemExit("the torchcodec child needs --plan")
        iterator = torchcodec_batches(csv_path, args.workers, plan)
    rows: list[list[int]] = []
    if args.check:  # untimed: each clip's checksum and the frame indices it shows
        paths = {}
        with open(csv_path, newline="", encoding="utf-8") as file:
            paths = {i: row["path"] for i, row in enumerate(csv.DictReader(file))}
        batches = []
        for _ in range(args.warmup + args.batches):
            video, rows_of = next(iterator)
            batches.append([
                {"row": row, "path": paths[row], "indices": frame_indices_shown(clip),
                 "digest": clip_digest(clip)}
                for row, clip in zip(rows_of, video)
            ])  # fmt: skip
        print(json.dumps({"plan": batches}), flush=True)
        os._exit(0)
    if args.count:  # under callgrind: the batches after the warm-up only
        import callgrind

        for _ in range(args.warmup):
            next(iterator)
        callgrind.ready()
        samples = sum(next(iterator)[0].shape[0] for _ in range(args.batches))
        callgrind.mark()
        print(json.dumps({"samples": samples}), flush=True)
        os._exit(0)
    video, rows_of = next(iterator)
    first_batch = time.time() - float(os.environ[STARTED_AT])
    rows.append(rows_of)
    for _ in range(args.warmup - 1):  # worker start-up and the first batches are not steady
        rows.append(next(iterator)[1])
    from common import process_tree_cpu

    kernel = process_tree_cpu(system_only=True)
    cpu, main, wall, samples = process_tree_cpu(), time.process_time(), time.perf_counter(), 0
    for _ in range(args.batches):
        video, rows_of = next(iterator)
        samples += video.shape[0]
        rows.append(rows_of)
    cpu, main = process_tree_cpu() - cpu, time.process_time() - main
    kernel = process_tree_cpu(system_only=True) - kernel
    result = {"samples": samples, "cpu": cpu, "main": main, "wall": time.perf_counter() - wall,
              "first_batch": first_batch, "kernel": kernel}  # fmt: skip
    print(json.dumps({**result, "rows": rows}), flush=True)
    os._exit(0)  # leave the workers to the OS: their shutdown is not loading


# -- the parent --------------------------------------------------------------------------------


def run(way: str, python: str, args: argparse.Namespace, csv_path: Path, plan: Path | None,
        check: bool = False, tree: str | None = None) -> dict[str, Any]:  # fmt: skip
    command = [python, __file__, "--child", way.split("@")[0], "--csv", str(csv_path),
               "--workers", str(args.workers), "--warmup", str(args.warmup),
               "--batches", str(args.batches)]  # fmt: skip
    if plan is not None:
        command += ["--plan", str(plan)]
    if check:
        command.append("--check")
    env = {**os.environ, "OMP_NUM_THREADS": "1", STARTED_AT: repr(time.time()),
           "PYTHONPYCACHEPREFIX": str(args.data / "pycache")}  # fmt: skip
    # A user's interpreter imports from cached bytecode; compiling torch from source in each
    # child (an environment without caches, PYTHONDONTWRITEBYTECODE) is not loading
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if tree is not None:  # that checkout's energon_lite; this one's benchmark helpers
        env["PYTHONPATH"] = os.pathsep.join([tree, str(Path(__file__).parent)])
    out = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"{way} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare_plans(want: Plan, got: Plan) -> list[str]:
    """Where TorchCodec's pass differs from energon_lite's (rows, frame indices, pixels)."""
    problems = []
    if len(want) != len(got):
        problems.append(f"{len(want)} batches planned, {len(got)} read")
    for number, (a, b) in enumerate(zip(want, got)):
        for i, (x, y) in enumerate(zip(a, b)):
            for name in ("row", "indices", "digest"):
                if x[name] != y[name]:
                    problems.append(f"batch {number} clip {i} ({x['path']}): {name} differs")
        if len(a) != len(b):
            problems.append(f"batch {number}: {len(a)} clips planned, {len(b)} read")
    return problems


def check_plan(plan: Plan) -> None:
    """Each planned clip is an exact window: 16 consecutive frames, as the frames show."""
    for number, batch in enumerate(plan):
        for clip in batch:
            first = clip["indices"][0]
            if clip["indices"] != list(range(first, first + CLIP)):
                raise AssertionError(f"batch {number}, {clip['path']}: frames {clip['indices']}")


def _cell(values: list[float], digits: int = 1) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def report(results: dict[str, list[dict[str, Any]]], load: tuple[float, float],
           args: argparse.Namespace) -> None:  # fmt: skip
    from common import markdown_table

    print(f"\nload average before {load[0]:.1f}, after {load[1]:.1f}; {args.workers} workers, "
          f"{args.batches} batches of {BATCH} x {CLIP} frames timed after {args.warmup}; "
          f"median of {args.rounds} rounds (min-max)\n")  # fmt: skip
    medians: dict[str, dict[str, float]] = {}
    rows = []
    for way, runs in results.items():
        figures = {
            "cpu": [r["cpu"] / r["samples"] * 1e3 for r in runs],
            "main": [r["main"] / r["samples"] * 1e3 for r in runs],
            "kernel": [r["kernel"] / r["samples"] * 1e3 for r in runs],
            "rate": [r["samples"] / r["wall"] for r in runs],
            "first": [r["first_batch"] for r in runs],
        }
        medians[way] = {name: statistics.median(v) for name, v in figures.items()}
        rows.append([way, _cell(figures["cpu"]), _cell(figures["main"]), _cell(figures["kernel"]),
                     _cell(figures["rate"]), _cell(figures["first"], 2)])  # fmt: skip
    print(markdown_table(["loader", "CPU ms per clip, all processes", "of which the trainer's",
                          "of which the kernel's", "clips/s", "first batch from start, s"],
                         rows))  # fmt: skip
    ours = medians["energon_lite"]
    for way, theirs in medians.items():
        if way != "energon_lite":
            print(f"\nratios of the medians (above 1: energon_lite ahead of {way}): CPU per clip "
                  f"{theirs['cpu'] / ours['cpu']:.2f}x, clips/s {ours['rate'] / theirs['rate']:.2f}x, "
                  f"first batch {theirs['first'] / ours['first']:.2f}x")  # fmt: skip


def count_instructions(args: argparse.Namespace, csv_path: Path, trees: dict[str, str]) -> None:
    """Million instructions per clip of energon_lite (and each tree) in one process, by
    library; each way counted once (the counts do not change with the machine's load)."""
    import callgrind
    from common import markdown_table

    per_clip: dict[str, dict[str, float]] = {}
    for way in ["energon_lite", *trees]:
        tree = trees.get(way, os.environ.get("PYTHONPATH", ""))  # energon_lite: this one's
        command = [sys.executable, __file__, "--child", "energon_lite", "--csv", str(csv_path),
                   "--workers", "0", "--warmup", str(args.warmup), "--batches",
                   str(args.batches), "--count"]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0",
               "PYTHONPATH": os.pathsep.join([tree, str(Path(__file__).parent)])}  # fmt: skip
        started = time.perf_counter()
        out, phases = callgrind.phases(command, env)
        samples = json.loads(out.strip().splitlines()[-1])["samples"]
        by_library: dict[str, float] = {}
        for obj, count in phases[0].items():
            name = callgrind.library(obj)
            by_library[name] = by_library.get(name, 0.0) + count / samples / 1e6
        per_clip[way] = by_library
        print(f"{way}: {samples} clips counted in {time.perf_counter() - started:.0f} s",
              file=sys.stderr)  # fmt: skip
    libraries = sorted({name for counts in per_clip.values() for name in counts})
    rows = [[way, f"{sum(counts.values()):.1f}", *(f"{counts.get(n, 0.0):.1f}" for n in libraries)]
            for way, counts in per_clip.items()]  # fmt: skip
    print(f"\nmillion instructions per clip, 0 workers, {args.batches} batches of {BATCH} after "
          f"{args.warmup}:\n")  # fmt: skip
    print(markdown_table(["way", "all", *libraries], rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--data", type=Path,
                        default=Path(tempfile.gettempdir()) / "energon_lite_bench_video_loader")  # fmt: skip
    parser.add_argument("--files", type=int, default=12, help="videos per size (one row each)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batches", type=int, default=24)
    parser.add_argument("--python", nargs="*", default=[], metavar="WAY=INTERPRETER")
    parser.add_argument("--tree", nargs="*", default=[], metavar="NAME=CHECKOUT",
                        help="also run energon_lite@NAME: the energon_lite of CHECKOUT")  # fmt: skip
    parser.add_argument("--instructions", action="store_true",
                        help="count instructions per clip under callgrind (0 workers)")  # fmt: skip
    parser.add_argument("--child", choices=WAYS, help=argparse.SUPPRESS)
    parser.add_argument("--count", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--csv", help=argparse.SUPPRESS)
    parser.add_argument("--plan", help=argparse.SUPPRESS)
    parser.add_argument("--check", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    pythons = {way: sys.executable for way in WAYS} | dict(i.split("=", 1) for i in args.python)
    started = time.perf_counter()
    csv_path = make_dataset(args.data, args.files)
    print(f"dataset ready in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    trees = {f"energon_lite@{name}": tree for name, tree in (i.split("=", 1) for i in args.tree)}
    if args.instructions:
        count_instructions(args, csv_path, trees)
        return
    plan = run("energon_lite", pythons["energon_lite"], args, csv_path, None, check=True)["plan"]
    check_plan(plan)
    plan_path = args.data / "plan.json"
    plan_path.write_text(json.dumps(plan))
    got = run("torchcodec", pythons["torchcodec"], args, csv_path, plan_path, check=True)["plan"]
    problems = compare_plans(plan, got)
    if problems:
        raise AssertionError(
            "TorchCodec's clips differ from energon_lite's:\n" + "\n".join(problems)
        )
    print(f"frames checked equal, {sum(map(len, plan))} clips", file=sys.stderr)
    from common import ab_order

    rows = [[clip["row"] for clip in batch] for batch in plan]
    for way, tree in trees.items():  # the other checkout's clips, to the byte
        other = run(way, pythons["energon_lite"], args, csv_path, None, check=True, tree=tree)
        problems = compare_plans(plan, other["plan"])
        if problems:
            raise AssertionError(
                f"{way}'s clips differ from energon_lite's:\n" + "\n".join(problems)
            )
    load_before = os.getloadavg()[0]
    results: dict[str, list[dict[str, Any]]] = {}
    for round_no in range(args.rounds):
        for way in ab_order([*WAYS, *trees], round_no):
            python = pythons[way.split("@")[0]]
            plan_of = plan_path if way == "torchcodec" else None
            result = run(way, python, args, csv_path, plan_of, tree=trees.get(way))
            if result.pop("rows") != rows:
                raise AssertionError(f"round {round_no}: {way} read other batches than planned")
            results.setdefault(way, []).append(result)
    report(results, (load_before, os.getloadavg()[0]), args)
    print(f"\n{time.perf_counter() - started:.0f} s in all", file=sys.stderr)


if __name__ == "__main__":
    main()
