"""What energon_lite spends per sample reading the table formats in place at 0 workers: CPU
time (user, system) and page faults, against the same samples as tar, in one process.

CPU time and page faults (``resource.getrusage`` of the process: at 0 workers every read,
decode and batch runs in it) move far less than wall time when other processes share the
machine. The W1 data (``bench_pipeline.build_dataset``) is written in each format by its
own library (``bench_formats.convert``); each format's loader (batch 32, shuffled, as in
``bench_formats``) is built and warmed up first, then every round reads ``--batches``
batches from each loader in turn, the order alternated between rounds
(``common.ab_order``). Per format: the median over the rounds of user and system
microseconds per sample, minor page faults per sample and wall microseconds per sample.
``--read-only`` times the source's reads alone (``read_range`` of 16 rows, the reader's
chunk, over the split in a fixed shuffled order of chunks), without decoding or batching.

    python benchmarks/bench_formats_cpu.py [--samples 4000] [--formats tar parquet arrow mds]
        [--rounds 6] [--batches 20] [--read-only]

The last line is ``RESULT {json}``: ``<format>_cpu_us``, ``<format>_sys_us`` and
``<format>_minflt`` per sample (for ``ab_versions.py``).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import bench_formats as bf
import bench_pipeline as bp
from common import ab_order, markdown_table

READ_CHUNK = 16  # rows per read, as the reader reads an open slice (stages/reader.py)


def _usage() -> tuple[float, float, int, float]:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime, used.ru_stime, used.ru_minflt, time.perf_counter()


def _batches(root: Path, fmt: str) -> tuple[Callable[[], int], int]:
    """A step reading one batch of ``fmt`` (returns its samples), after the warm-up."""
    iterator = iter(bf._loader("energon_lite", fmt, root, 0))
    for _ in range(5):
        next(iterator)

    def step() -> int:
        next(iterator)
        return bp.BATCH_SIZE

    return step, bp.BATCH_SIZE


def _reads(root: Path, fmt: str) -> tuple[Callable[[], int], int]:
    """A step reading the next 16-row chunk of ``fmt``'s source (the chunks in a fixed
    shuffled order, over and over)."""
    import numpy as np

    from energon_lite.sources.kinds import kind_of

    path = bf.folder(root, fmt)
    source = kind_of(path).open(path, "train")  # type: ignore[misc]  # every kind here opens
    chunks = [
        (int(shard), start, min(int(end), start + READ_CHUNK))
        for shard, first, end in zip(source.run_shard, source.run_start, source.run_end)
        for start in range(int(first), int(end), READ_CHUNK)
    ]
    order = np.random.default_rng(0).permutation(len(chunks)).tolist()
    position = [0]

    def step() -> int:
        shard, start, end = chunks[order[position[0] % len(order)]]
        position[0] += 1
        return len(source.read_range(shard, start, end))

    for _ in range(10):
        step()
    return step, READ_CHUNK


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=4000)
    parser.add_argument("--formats", nargs="+", default=["tar", "parquet", "arrow", "mds"])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--batches", type=int, default=20, help="batches (or reads) a round")
    parser.add_argument("--read-only", action="store_true")
    args = parser.parse_args()
    root = bp.build_dataset(args.samples)
    for fmt in args.formats:
        bf.convert(root, fmt)
    make = _reads if args.read_only else _batches
    steps = {fmt: make(root, fmt)[0] for fmt in args.formats}
    found: dict[str, list[tuple[float, float, float, float]]] = {f: [] for f in args.formats}
    for round_index in range(args.rounds):
        for fmt in ab_order(args.formats, round_index):
            before, samples = _usage(), 0
            for _ in range(args.batches):
                samples += steps[fmt]()
            after = _usage()
            user, system, faults, wall = (a - b for a, b in zip(after, before))
            found[fmt].append(
                (1e6 * user / samples, 1e6 * system / samples, faults / samples,
                 1e6 * wall / samples)
            )  # fmt: skip
    rows, result = [], {}
    for fmt, values in found.items():
        user, system, faults, wall = (statistics.median(v[i] for v in values) for i in range(4))
        rows.append([fmt, f"{user:,.0f}", f"{system:,.0f}", f"{faults:,.1f}", f"{wall:,.0f}"])
        result |= {f"{fmt}_cpu_us": user + system, f"{fmt}_sys_us": system,
                   f"{fmt}_minflt": faults}  # fmt: skip
    what = "16-row reads" if args.read_only else f"batches of {bp.BATCH_SIZE}, 0 workers"
    print(f"{args.rounds} rounds of {args.batches} {what}; per sample, median over the rounds")
    headers = ["format", "user us", "system us", "minor faults", "wall us"]
    print(markdown_table(headers, rows))
    print(bp.RESULT + json.dumps(result))


if __name__ == "__main__":
    main()
