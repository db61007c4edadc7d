"""Opening a 1M-row Open-Sora CSV, and what one loader worker holds while iterating it.

* **energon_lite**: ``prepare_video_text`` once, then ``get_train_dataset(csv)``; a forked
  worker reads every row through the index (``VideoTextSource.read_range``).
* **list of dicts** (Open-Sora's way without pandas): ``csv.DictReader`` into a list in the
  main process, a forked worker reads every row of it (as a DataLoader worker indexing the
  table would; touching the objects copies their pages into the worker).

Memory is the worker's RSS and USS (pages only it holds: its heap and the parent's pages it
copied on write), and USS less the file pages it read (the index pages count as private
while one process maps them, but live in the page cache and are shared by all workers). The 1M rows reference a handful of real videos made
by ``energon_lite.synth.video_text``. Optionally (``--clips``) clips/s of 16-frame
clips through the whole loader. Prints Markdown tables.

    PYTHONPATH=. python benchmarks/bench_video_text.py [--rows 1000000] [--clips 96]
"""

from __future__ import annotations

import argparse
import csv
import gc
import multiprocessing as mp
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from benchmarks.common import fmt_bytes, markdown_table
from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset
from energon_lite.flavors.video_text import VideoTextTaskEncoder, prepare_video_text
from energon_lite.synth.video_text import make_media, write_table
from energon_lite.testing import take

DATA = Path(__file__).resolve().parent / "data" / "video_text"
BUCKETS = {"4:3": {"48x64": {1: (1.0, 8), 16: (1.0, 4)}}, "3:4": {"64x48": {16: (1.0, 4)}},
           "3:2": {"32x48": {16: (1.0, 4)}}}  # fmt: skip


def _smaps() -> tuple[int, int]:
    """(anonymous, file-backed) resident bytes of this process."""
    values = {}
    with open("/proc/self/smaps_rollup") as file:
        for line in file:
            name, _, rest = line.partition(":")
            values[name] = int(rest.split()[0]) * 1024 if rest.strip().endswith("kB") else 0
    return values.get("Anonymous", 0), values.get("Rss", 0) - values.get("Anonymous", 0)


def _worker(read_all: Callable[[], int], queue: Any) -> None:
    (anon, file), start = _smaps(), time.perf_counter()
    rows = read_all()
    info = psutil.Process().memory_full_info()
    anon_after, file_after = _smaps()
    seconds = time.perf_counter() - start
    queue.put((rows, seconds, info.rss, info.uss, anon_after - anon, file_after - file))


def _in_forked_worker(read_all: Callable[[], int]) -> tuple[int, float, int, int, int, int]:
    ctx = mp.get_context("fork")  # what torch's DataLoader does on Linux
    # Without freeze, the child's first full GC writes to every object the parent owns
    # (torch's included) and copies those pages: a cost of the parent, not of the table.
    gc.freeze()
    queue = ctx.Queue()
    process = ctx.Process(target=_worker, args=(read_all, queue))
    process.start()
    result = queue.get()
    process.join()
    return result


def bench_open(rows: int) -> None:
    DATA.mkdir(parents=True, exist_ok=True)
    media = make_media(DATA)
    csv_path = DATA / f"videos_{rows}.csv"
    if not csv_path.is_file():
        write_table(csv_path, media, rows, extra={"aes": ["5.1", "4.2", "6.0"]})
    shutil.rmtree(DATA / f"videos_{rows}.energon", ignore_errors=True)
    start = time.perf_counter()
    prepare_video_text(csv_path, progress=False)
    prepare_s = time.perf_counter() - start

    start = time.perf_counter()
    ds = get_train_dataset(csv_path, worker_config=WorkerConfig(0, 1, 2), batch_size=8,
                           shuffle_buffer_size=100, max_samples_per_sequence=100)  # fmt: skip
    open_s = time.perf_counter() - start
    source = ds.pipeline.datasets[0]

    def read_index() -> int:
        total = 0
        for start in range(0, len(source), 4096):
            total += len(source.read_range(0, start, min(len(source), start + 4096)))
        return total

    ours = _in_forked_worker(read_index)

    start = time.perf_counter()
    with open(csv_path, newline="", encoding="utf-8") as file:
        table = list(csv.DictReader(file))
    dict_open_s = time.perf_counter() - start

    def read_table() -> int:
        total = 0
        for row in table:
            total += int(row["num_frames"]) > 0 and len(row["path"]) > 0
        return total

    base = _in_forked_worker(read_table)
    print(f"\n### Opening a {rows:,}-row CSV and reading every row in one forked worker\n")
    print(f"prepare (once, one pass): {prepare_s:.1f} s; index size "
          f"{fmt_bytes(sum(f.stat().st_size for f in (DATA / f'videos_{rows}.energon/.nv-meta').iterdir()))}\n")  # fmt: skip
    headers = ["dataset", "open", "worker: read all rows", "worker RSS", "worker USS",
               "USS less file pages read (index, page cache)"]  # fmt: skip
    print(markdown_table(headers, [
        ["energon_lite (mmap index)", f"{open_s * 1000:.0f} ms", f"{ours[1]:.1f} s", fmt_bytes(ours[2]),
         fmt_bytes(ours[3]), fmt_bytes(ours[3] - ours[5])],
        ["csv.DictReader list of dicts", f"{dict_open_s * 1000:.0f} ms", f"{base[1]:.1f} s", fmt_bytes(base[2]),
         fmt_bytes(base[3]), fmt_bytes(base[3] - base[5])],
    ]))  # fmt: skip


def bench_clips(num_clips: int) -> None:
    csv_path = write_table(DATA / "clips.csv", make_media(DATA), 200)
    prepare_video_text(csv_path, progress=False)
    rows = []
    for workers in (0, 2):
        te = VideoTextTaskEncoder(BUCKETS, seed=0)
        ds = get_train_dataset(csv_path, worker_config=WorkerConfig(0, 1, workers), batch_size=None,
                               shuffle_buffer_size=50, max_samples_per_sequence=10, task_encoder=te)  # fmt: skip
        loader = iter(get_savable_loader(ds))
        next(loader)  # worker start-up is not decoding
        start, clips = time.perf_counter(), 0
        for batch in take(loader, num_clips // 4):
            clips += batch["video"].shape[0]
        rows.append([workers, clips, f"{clips / (time.perf_counter() - start):.0f}"])
    print("\n### Clips through the loader (16 frames, 48x64 / 64x48 / 32x48 buckets)\n")
    print(markdown_table(["workers", "clips", "clips/s"], rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--clips", type=int, default=96, help="0 skips the clips/s table")
    args = parser.parse_args()
    bench_open(args.rows)
    if args.clips:
        bench_clips(args.clips)


if __name__ == "__main__":
    main()
