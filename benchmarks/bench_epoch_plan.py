"""Building the epoch plan of a 100M-sample (or 1B) split: time and private memory per worker.

Issue 17 asks for < 1 s and < 50 MB per worker to build the plan of a 100M-sample split and
deliver the first sample.

Data (why it is honest): a real 100M-sample dataset of small samples is 10,000 tar shards of
10,000 samples (img2dataset's default shard size), each with its 80 KB ``.tar.idx``, and
``.nv-meta`` listing 10,000 names and counts plus energon_lite's shard record (one
size/mtime per shard, checked with a ``stat`` per shard and per index at open). This builds
exactly that on disk, except that the 10,000 shards are hard links to one real 10,000-sample
tar shard (and its real index), so it costs 10 MB of disk instead of 100 GB. Every file a
loader opens (``.info.json``, ``split.yaml``, ``energon_lite.json``, each shard and index) is
there and read as usual; only the page cache is warmer than for distinct files (the index
pages of one inode), which does not change plan building (no index is read for the plan).
The metadata is written with energon_lite's own writers (``write_info``, ``write_split``,
``make_record``), what ``prepare`` writes, without the 100 GB scan. A 1M-sample copy (100
links) shows what grows with the dataset.

Per (size, mode, max_samples_per_sequence) a fresh process imports energon_lite and torch
and runs the same steps once on a one-shard dataset (so that no module import, which this
machine pays in full with ``PYTHONDONTWRITEBYTECODE=1``, is counted as plan building). Then:

* **plan**: the parent reads the child's private memory (USS, psutil) as the baseline and
  samples it every 10 ms while the child opens the split, builds the pipeline (2 workers
  per rank, train: shuffled slice order, shuffle buffer 100, batch 1), computes ``len()`` of
  the loader (the trainer's epoch-length path: every worker's sample count) and takes the
  first sample of worker 0's chain in-process, as that worker runs it. Reported: seconds,
  of which ``len()``, and the peak USS growth over the baseline.
* **loader**: ``get_savable_loader`` with 2 real worker processes: seconds to the first
  batch (``len()`` included) and the largest worker USS after it.

``--baseline TREE`` adds the plan rows at 100M for another checkout (e.g. before a change),
alternated in the same rounds.

    python benchmarks/bench_epoch_plan.py [--rounds 3] [--sizes 1M,100M,1B]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ab_order, fmt_bytes, markdown_table, median

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "epoch_plan"
PER_SHARD = 10_000


def _base_shard() -> Path:
    base = DATA / "base.tar"
    if (DATA / "base.tar.idx").exists():
        return base
    DATA.mkdir(parents=True, exist_ok=True)
    with tarfile.open(base, "w", format=tarfile.GNU_FORMAT) as tar:
        for i in range(PER_SHARD):
            data = f"sample {i}: a caption of a text dataset".encode()
            info = tarfile.TarInfo(f"{i:07d}.txt")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    from energon_lite.shards.tar_index import scan_shard, write_index

    write_index(base, scan_shard(base).offsets)
    return base


LINKS_PER_FILE = 50_000  # ext4 allows 65,000 hard links per file: 1B needs a second copy


def _base_copy(base: Path, number: int) -> Path:
    """``base`` itself, or its ``number``-th copy (with its index)."""
    if number == 0:
        return base
    copy = base.with_name(f"base-{number}.tar")
    for suffix in ("", ".idx"):
        if not Path(str(copy) + suffix).exists():
            shutil.copyfile(str(base) + suffix, str(copy) + suffix)
    return copy


def build(num_shards: int) -> Path:
    """A prepared dataset of ``num_shards`` hard links to one real 10k-sample shard."""
    from energon_lite.shards.meta import DatasetInfo, write_info, write_split
    from energon_lite.shards.shard_record import make_record, write_record
    from energon_lite.shards.tar_index import scan_shard

    root = DATA / f"text_{num_shards}x{PER_SHARD}"
    meta = root / ".nv-meta"
    if (meta / ".info.json").exists():
        return root
    base = _base_shard()
    names = [f"parts/{i // 1000:03d}/s-{i:06d}.tar" for i in range(num_shards)]
    for i, name in enumerate(names):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        source = _base_copy(base, i // LINKS_PER_FILE)
        for suffix in ("", ".idx"):
            target = root / (name + suffix)
            if not target.exists():
                os.link(str(source) + suffix, target)
    meta.mkdir(exist_ok=True)
    scan = scan_shard(base)
    write_split(meta, {"train": names, "val": [], "test": []}, [])
    (meta / "dataset.yaml").write_text(
        "sample_type:\n  __module__: megatron.energon\n  __class__: TextSample\n"
        "field_map:\n  text: txt\n"
    )
    write_record(meta, make_record(root, names, [scan] * num_shards))
    write_info(meta, DatasetInfo(names, [PER_SHARD] * num_shards, "bench"))
    return root


CHILD = r"""
import json, sys, time
import psutil, torch
from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset
path, mode, msps, warm = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
msps = None if msps == "none" else int(msps)
def dataset(workers, where=path):
    return get_train_dataset(where, worker_config=WorkerConfig(rank=0, world_size=1, num_workers=workers),
                             batch_size=1, shuffle_buffer_size=100, max_samples_per_sequence=msps)
warmup = dataset(2, warm)  # a one-shard dataset: imports every module the path needs, once
len(get_savable_loader(warmup)), next(iter(warmup))
del warmup
print("ready", flush=True)
sys.stdin.readline()  # the parent has read the baseline USS and samples from now on
if mode == "plan":
    start = time.perf_counter()
    ds = dataset(2)
    opened = time.perf_counter()
    length = len(get_savable_loader(ds))
    counted = time.perf_counter()
    first = next(iter(ds))  # outside a worker process: worker 0's chain, as worker 0 runs it
    done = time.perf_counter()
    print(json.dumps({"seconds": done - start, "open": opened - start, "len_s": counted - opened,
                      "first": done - counted, "len": length}), flush=True)
else:
    start = time.perf_counter()
    loader = get_savable_loader(dataset(2))
    length = len(loader)
    it = iter(loader)
    next(it)
    seconds = time.perf_counter() - start
    workers = psutil.Process().children(recursive=True)
    print(json.dumps({"seconds": seconds, "worker_uss": max(w.memory_full_info().uss for w in workers),
                      "len": length}), flush=True)
sys.stdin.readline()
"""


def measure(path: Path, mode: str, msps: int | None, tree: Path | None = None) -> dict:
    """Run one child; for "plan", sample its USS from here (every 10 ms) from the moment
    it has imported everything until it printed its result: peak and end growth."""
    import threading

    import psutil

    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), mode, str(msps).lower(), str(build(1))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tree or HERE.parent)},
        cwd=str(tree or HERE.parent),  # "-c" puts the working folder first on sys.path
    )
    assert child.stdin is not None and child.stdout is not None
    if child.stdout.readline().strip() != "ready":
        raise RuntimeError(f"{mode} on {path.name} failed:\n{child.communicate()[1][-3000:]}")
    process = psutil.Process(child.pid)
    base = process.memory_full_info().uss
    peak = [base]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            try:
                peak[0] = max(peak[0], process.memory_full_info().uss)
            except psutil.Error:
                return
            stop.wait(0.01)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    child.stdin.write("go\n")
    child.stdin.flush()
    line = child.stdout.readline()
    stop.set()
    thread.join()
    after = process.memory_full_info().uss
    child.stdin.write("bye\n")
    child.stdin.flush()
    _, err = child.communicate(timeout=600)
    if child.returncode != 0 or not line.strip():
        raise RuntimeError(f"{mode} on {path.name} failed:\n{err[-3000:]}")
    result = json.loads(line)
    if mode == "plan":
        result.update(peak=peak[0] - base, after=after - base)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--baseline", type=Path, help="another checkout: its plan rows at 100M, same rounds"
    )
    parser.add_argument(
        "--sizes", default="1M,100M", help="splits to measure: 1M, 100M, 1B (100,000 links)"
    )
    args = parser.parse_args()
    build(1)
    shards = {"1M": 100, "100M": 10_000, "1B": 100_000}
    sizes = {size: build(shards[size]) for size in args.sizes.split(",")}
    runs: list[tuple[str, str, int | None, str]] = [
        (size, mode, msps, "this tree")
        for size in sizes
        for mode in ("plan", "loader")
        for msps in (100, None)
    ]
    if args.baseline:
        runs += [("100M", "plan", msps, "baseline") for msps in (100, None)]
    results: dict[tuple, list[dict]] = {run: [] for run in runs}
    for round_index in range(args.rounds):
        for run in ab_order(runs, round_index):
            size, mode, msps, tree = run
            result = measure(sizes[size], mode, msps, args.baseline if tree == "baseline" else None)
            results[run].append(result)
            print(f"round {round_index + 1} {run}: {result}", flush=True)
    print(
        f"\n{args.rounds} rounds, median (min-max), {time.strftime('%Y-%m-%d %H:%M')}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end"
    )

    def spread(values: list[float], fmt) -> str:
        return f"{fmt(median(values))} ({fmt(min(values))}-{fmt(max(values))})"

    def secs(x: float) -> str:
        return f"{x:.3f} s"

    rows = []
    for run in runs:
        values = results[run]
        size, mode, msps, tree = run
        mem = "peak" if mode == "plan" else "worker_uss"
        rows.append(
            [
                f"{size} ({tree})" if tree != "this tree" else size,
                "open + len() + 1st sample" if mode == "plan" else "loader, 2 workers: 1st batch",
                str(msps),
                spread([v["seconds"] for v in values], secs),
                spread([v["len_s"] for v in values], secs) if mode == "plan" else "",
                spread([v[mem] for v in values], fmt_bytes),
            ]
        )
    headers = ["split", "what", "max_samples_per_sequence", "time", "of which len()", "USS"]
    print(markdown_table(headers, rows))
    print("USS: plan rows = peak growth over the process after imports; loader rows = a worker's")


if __name__ == "__main__":
    main()
