"""Open-Sora-style video-text input end to end: energon_lite's video-text loader against the
same clips read with TorchCodec in a plain torch ``DataLoader``, 2 workers each.

The table: ``--rows`` rows cycling over the videos of ``bench_video_ranges.py`` (h264 with
B-frames, 10 s at 30 fps: 256x192 mp4 and mkv, 640x360 mp4), prepared once. Every sample is a
random 16-frame window of its row's video, kept at the video's size (one bucket per size,
``"192x256"`` and ``"360x640"``, 4 clips a batch), through the same ``resize_crop`` (at the
same size: only [-1, 1] and the ``(C, T, H, W)`` layout), batched by bucket.

* ``energon_lite``: ``get_train_dataset(csv, task_encoder=VideoTextTaskEncoder(buckets,
  sync_buckets=False))``, shuffle buffer 64, ``get_savable_loader``;
* ``torchcodec``: a map-style ``Dataset`` over the CSV rows (``csv.DictReader``), each item
  ``VideoDecoder(path, seek_mode="exact", num_ffmpeg_threads=1).get_frames_in_range(s,
  s + 16)`` at a random start, a batch sampler grouping shuffled rows by size into batches
  of 4, a plain ``DataLoader``.

Each loader runs in a fresh child process (TorchCodec's under ``--python
torchcodec=INTERPRETER`` where it is not importable here), one torch thread everywhere;
after ``--warmup`` batches, ``--batches`` batches are timed: samples/s (wall clock) and CPU ms
per sample of the child and its worker processes together (``psutil``, the whole process
tree). Rounds alternate the two loaders; the table shows the median with min-max::

    PYTHONPATH=. python benchmarks/bench_video_loader.py [--rounds 3] [--batches 30] \
        [--python torchcodec=/path/to/env/bin/python]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bench_video_ranges as ranges  # the videos
import torch
from common import process_tree_cpu

CLIP = 16
BUCKETS = {"4:3": {"192x256": {CLIP: (1.0, 4)}}, "16:9": {"360x640": {CLIP: (1.0, 4)}}}
BATCH = 4


def make_table(rows: int) -> Path:
    from energon_lite.flavors.video_text import prepare_video_text

    paths = ranges.generate()
    csv_path = ranges.DATA / f"table_{rows}.csv"
    if not (ranges.DATA / f"table_{rows}.energon").is_dir():
        with open(csv_path, "w", newline="", encoding="utf-8") as file:
            writer = csv.writer(file)
            writer.writerow(["path", "text", "num_frames", "height", "width", "fps"])
            for row in range(rows):
                path = paths[row % len(paths)]
                width, height = (int(v) for v in path.name.split("_")[0].split("x"))
                writer.writerow([path.name, f"clip {row}", ranges.FRAMES, height, width,
                                 ranges.FPS])  # fmt: skip
        prepare_video_text(csv_path, progress=False)
    return csv_path


def energon_lite_batches(csv_path: Path, workers: int) -> Iterator[torch.Tensor]:
    from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset
    from energon_lite.flavors.video_text import VideoTextTaskEncoder

    encoder = VideoTextTaskEncoder(BUCKETS, seed=0, sync_buckets=False)
    dataset = get_train_dataset(csv_path, worker_config=WorkerConfig(0, 1, workers),
                                batch_size=None, shuffle_buffer_size=64,
                                max_samples_per_sequence=8, task_encoder=encoder)  # fmt: skip
    for batch in get_savable_loader(dataset):
        yield batch["video"]


class TorchCodecClips(torch.utils.data.Dataset):
    """The CSV's rows; item ``i`` a random 16-frame window of row ``i``'s video."""

    def __init__(self, csv_path: Path) -> None:
        with open(csv_path, newline="", encoding="utf-8") as file:
            self.rows = list(csv.DictReader(file))
        self.folder = csv_path.parent

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> torch.Tensor:
        from torchcodec.decoders import VideoDecoder

        from energon_lite.flavors.video_text.transforms import resize_crop

        row = self.rows[index]
        decoder = VideoDecoder(str(self.folder / row["path"]), seek_mode="exact",
                               num_ffmpeg_threads=1)  # fmt: skip
        start = random.randrange(0, int(row["num_frames"]) - CLIP + 1)
        frames = decoder.get_frames_in_range(start, start + CLIP).data  # (T, C, H, W) uint8
        return resize_crop(frames, (int(row["height"]), int(row["width"])))


class BySize(torch.utils.data.Sampler[list[int]]):
    """Shuffled rows, each batched with the next rows of its frame size (a bucket sampler,
    forever): sizes mix over the stream as in energon_lite's buckets."""

    def __init__(self, rows: list[dict[str, str]]) -> None:
        self.sizes = [(row["height"], row["width"]) for row in rows]

    def __iter__(self) -> Iterator[list[int]]:
        rng = random.Random(0)
        order = list(range(len(self.sizes)))
        pending: dict[tuple[str, str], list[int]] = {}
        while True:
            rng.shuffle(order)
            for i in order:
                batch = pending.setdefault(self.sizes[i], [])
                batch.append(i)
                if len(batch) == BATCH:
                    yield pending.pop(self.sizes[i])


def _worker_init(_: int) -> None:
    torch.set_num_threads(1)


def torchcodec_batches(csv_path: Path, workers: int) -> Iterator[torch.Tensor]:
    dataset = TorchCodecClips(csv_path)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=BySize(dataset.rows),
                                         num_workers=workers, worker_init_fn=_worker_init)  # fmt: skip
    yield from loader


def child(way: str, csv_path: Path, workers: int, warmup: int, batches: int) -> None:
    torch.set_num_threads(1)
    source = {"energon_lite": energon_lite_batches, "torchcodec": torchcodec_batches}[way]
    iterator = source(csv_path, workers)
    for _ in range(warmup):  # worker start-up and imports are not loading
        next(iterator)
    cpu, wall, samples = process_tree_cpu(), time.perf_counter(), 0
    for _ in range(batches):
        video = next(iterator)
        assert video.shape[0] == BATCH and video.shape[2] == CLIP, video.shape
        samples += video.shape[0]
    cpu, wall = process_tree_cpu() - cpu, time.perf_counter() - wall
    print(json.dumps({"samples": samples, "cpu": cpu, "wall": wall}), flush=True)
    os._exit(0)  # leave the workers to the OS: their shutdown is not loading


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--python", nargs="*", default=[], metavar="WAY=INTERPRETER")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--csv", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, Path(args.csv), args.workers, args.warmup, args.batches)
        return
    pythons = dict(item.split("=", 1) for item in args.python)
    csv_path = make_table(args.rows)
    load_before = os.getloadavg()
    results: dict[str, list[dict[str, Any]]] = {}
    for round_no in range(args.rounds):
        order = ["energon_lite", "torchcodec"][:: 1 if round_no % 2 == 0 else -1]
        for way in order:
            command = [pythons.get(way, sys.executable), __file__, "--child", way,
                       "--csv", str(csv_path), "--workers", str(args.workers),
                       "--warmup", str(args.warmup), "--batches", str(args.batches)]  # fmt: skip
            env = {**os.environ, "OMP_NUM_THREADS": "1"}
            out = subprocess.run(command, check=True, capture_output=True, text=True, env=env)
            results.setdefault(way, []).append(json.loads(out.stdout.strip().splitlines()[-1]))
    load_after = os.getloadavg()
    from common import markdown_table

    print(f"\nload average before {load_before[0]:.1f}, after {load_after[0]:.1f}; "
          f"{args.workers} workers, {args.batches} batches of {BATCH} x {CLIP} frames\n")  # fmt: skip
    rows, medians = [], {}
    for way, runs in results.items():
        per = [r["cpu"] / r["samples"] * 1e3 for r in runs]
        rate = [r["samples"] / r["wall"] for r in runs]
        medians[way] = statistics.median(per)
        rows.append([way, f"{statistics.median(per):.1f} ({min(per):.1f}-{max(per):.1f})",
                     f"{statistics.median(rate):.1f} ({min(rate):.1f}-{max(rate):.1f})"])  # fmt: skip
    print(markdown_table(["loader", "CPU ms per sample, all processes", "samples/s"], rows))
    if len(medians) == 2:
        print(f"\ntorchcodec / energon_lite CPU per sample: "
              f"{medians['torchcodec'] / medians['energon_lite']:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
