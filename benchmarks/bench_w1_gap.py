"""W1 at 0 workers against the decode-only limit in one process: where the time goes.

Two loops run in this process, phases alternated over ``--rounds`` (``--batches`` batches
each): the W1 loader of ``bench_pipeline.py`` at 0 workers (``--buffer``: shuffle buffer
sizes, each its own loader) and ``limit_mem`` (``PlainTarDataset.read_parts`` +
``decode_image(jpg, "torchrgb")`` + the caption, every 32 images decoded into one batch in
a reused shared-memory segment, as ``bench_peers.py``'s ``limit_mem`` does in one process).
Per phase: the thread's CPU time, split into the JPEG decode (simplejpeg's header and
decode), the conversion to float CHW (into the batch) and the rest (reading, tar, shuffle,
the sample build, collate: the per-sample Python), the minor page faults and the time in
the garbage collector, per sample. Ratios are taken per round against the first loop.

``--no-decode``: the decode returns one constant image and the conversion only takes its
row of the batch, in both loops, so only the per-sample Python is timed.
``--count``: the decode-free loops of the first loader and of the limit counted under
callgrind (``callgrind.phases``: 10 batches after 5, start-up not counted): instructions per
sample, split by library.

    python benchmarks/bench_w1_gap.py [--rounds 20] [--batches 4] [--buffer 100 1] [--no-decode]
    python benchmarks/bench_w1_gap.py --count
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import random
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import callgrind
from bench_pipeline import BATCH_SIZE, MAX_SAMPLES_PER_SEQUENCE, PlainTarDataset, build_dataset
from common import fmt_num, markdown_table, median

LIMIT = "limit_mem"
STEPS = ("decode", "convert")
_spent = dict.fromkeys(STEPS, 0.0)
_gc = {"cpu": 0.0, "started": 0.0}


def _timed(step: str, function: Callable[..., Any]) -> Callable[..., Any]:
    clock = time.thread_time

    def timed(*args: Any) -> Any:
        start = clock()
        try:
            return function(*args)
        finally:
            _spent[step] += clock() - start

    return timed


def instrument(no_decode: bool) -> None:
    """Time the decode and the conversion where both loops call them (or stub them out)."""
    import numpy as np
    import torch

    import energon_lite.decode.image as image

    if no_decode:
        pixels = (np.zeros((256, 256, 3), np.uint8), None)
        image._decode_turbo = lambda *args: pixels  # type: ignore[assignment]
        image._planar_from_hwc = lambda px, as_uint8: image._output(  # type: ignore[assignment]
            torch.float32, (3, 256, 256)
        )
    image._decode_turbo = _timed("decode", image._decode_turbo)  # type: ignore[assignment]
    image._planar_from_hwc = _timed("convert", image._planar_from_hwc)  # type: ignore[assignment]

    def collector(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            _gc["started"] = time.thread_time()
        else:
            _gc["cpu"] += time.thread_time() - _gc["started"]

    gc.callbacks.append(collector)


def loader_loop(root: Path, buffer: int) -> Callable[[], None]:
    """One batch of the W1 loader at 0 workers per call (the previous batch is let go)."""
    import energon_lite as el

    dataset = el.get_train_dataset(
        root,
        worker_config=el.WorkerConfig(rank=0, world_size=1, num_workers=0),
        batch_size=BATCH_SIZE,
        shuffle_buffer_size=buffer,
        max_samples_per_sequence=MAX_SAMPLES_PER_SEQUENCE,
    )
    batches = iter(el.get_savable_loader(dataset))
    kept: list[Any] = []

    def one() -> None:
        kept[:] = [next(batches)]

    return one


def limit_loop(root: Path, memory: Any) -> Callable[[], None]:
    """One batch of ``limit_mem`` per call; a batch's segment is freed two batches later."""
    from energon_lite.batching.slab import SlabScope
    from energon_lite.decode.image import decode_image

    dataset = PlainTarDataset(root)
    order = list(range(len(dataset)))
    random.Random(0).shuffle(order)
    held: collections.deque[Any] = collections.deque()
    at = [0]

    def one() -> None:
        start = at[0]
        at[0] = (start + BATCH_SIZE) % (len(order) - BATCH_SIZE)
        with SlabScope(BATCH_SIZE):
            for index in order[start : start + BATCH_SIZE]:
                parts = dataset.read_parts(index)
                decode_image(parts["jpg"], "torchrgb")
                parts["txt"].decode("utf-8")
        held.append(memory.collect())
        if len(held) > 2:
            for slot, _ in held.popleft().segments:
                memory.flags[0, slot] = 0

    return one


def make_loops(root: Path, buffers: list[int]) -> dict[str, Callable[[], None]]:
    """The limit and one loader per buffer size; the pool is the process's only while the
    limit runs (a loader at 0 workers allocates its batches as a trainer process does)."""
    import torch

    from energon_lite.batching.allocate import use_pool
    from energon_lite.batching.memory import BatchMemoryPool

    torch.set_num_threads(1)
    memory = BatchMemoryPool(1, 3)
    memory.activate(0)
    use_pool(None)
    limit = limit_loop(root, memory)

    def limit_one() -> None:
        use_pool(memory)
        try:
            limit()
        finally:
            use_pool(None)

    loops = {f"energon_lite (buffer {b})": loader_loop(root, b) for b in buffers}
    return {LIMIT: limit_one, **loops}


def alternate(loops: dict[str, Callable[[], None]], rounds: int, batches: int) -> None:
    names = list(loops)
    for loop in loops.values():  # started: buffers full, files open, first batches made
        for _ in range(8):
            loop()
    rows: dict[str, dict[str, list[float]]] = {n: collections.defaultdict(list) for n in names}
    for index in range(rounds):
        for name in names if index % 2 == 0 else names[::-1]:
            spent, gc_cpu = dict(_spent), _gc["cpu"]
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            cpu = time.thread_time()
            for _ in range(batches):
                loops[name]()
            per = 1e6 / (batches * BATCH_SIZE)
            row = rows[name]
            row["cpu"].append((time.thread_time() - cpu) * per)
            for step in STEPS:
                row[step].append((_spent[step] - spent[step]) * per)
            row["rest"].append(row["cpu"][-1] - sum(row[s][-1] for s in STEPS))
            row["gc"].append((_gc["cpu"] - gc_cpu) * per)
            minflt = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
            row["faults"].append(minflt / (batches * BATCH_SIZE))
    base = rows[names[0]]["cpu"]

    def spread(values: list[float]) -> str:
        return f"{fmt_num(median(values))} ({fmt_num(min(values))}-{fmt_num(max(values))})"

    table = []
    for name in names:
        row = rows[name]
        ratios = [a / b for a, b in zip(row["cpu"], base)]
        table.append(
            [
                name,
                spread(row["cpu"]),
                f"{median(ratios):.3f}x ({min(ratios):.3f}-{max(ratios):.3f})",
                *(fmt_num(median(row[k])) for k in (*STEPS, "rest", "gc")),
                f"{median(row['faults']):.2f}",
            ]
        )
    headers = ["loop", "CPU us/sample", f"/ {names[0]}", *STEPS, "rest", "gc", "faults/sample"]
    print(markdown_table(headers, table))
    print(f"load average {os.getloadavg()[0]:.1f}; {rounds} rounds of {batches} batches each")


def counted(root: Path, loop: str, buffer: int, batches: int) -> None:
    """``--count``'s child: ``batches`` decode-free batches of one loop as a callgrind phase."""
    instrument(no_decode=True)
    loops = make_loops(root, [buffer])
    one = loops[LIMIT] if loop == LIMIT else loops[f"energon_lite (buffer {buffer})"]
    for _ in range(5):
        one()
    callgrind.ready()
    callgrind.mark()
    for _ in range(batches):
        one()
    callgrind.mark()


def count(root: Path, buffer: int, batches: int) -> None:
    from concurrent.futures import ThreadPoolExecutor

    def run(loop: str) -> tuple[str, collections.Counter[str]]:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--counted", loop]
        cmd += ["--buffer", str(buffer), "--batches", str(batches)]
        phases = callgrind.phases(cmd, {**os.environ, "PYTHONHASHSEED": "0"})[1]
        return loop, phases[1]

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(run, ["energon_lite", LIMIT]))
    samples = batches * BATCH_SIZE
    rows = []
    for loop, costs in results:
        by_lib: collections.Counter[str] = collections.Counter()
        for obj, n in costs.items():
            by_lib[callgrind.library(obj)] += n
        top = ", ".join(f"{lib} {fmt_num(n / samples)}" for lib, n in by_lib.most_common(3))
        rows.append([loop, fmt_num(sum(costs.values()) / samples), top])
    print(markdown_table(["decode-free loop", "instructions/sample", "largest"], rows))
    print("RESULT " + json.dumps({loop: sum(c.values()) / samples for loop, c in results}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20_000, help="W1 size")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--batches", type=int, default=4, help="per phase (--count: counted)")
    parser.add_argument("--buffer", type=int, nargs="+", default=[100])
    parser.add_argument("--no-decode", action="store_true")
    parser.add_argument("--count", action="store_true", help="instructions under callgrind")
    parser.add_argument("--counted", choices=["energon_lite", LIMIT], help=argparse.SUPPRESS)
    args = parser.parse_args()
    root = build_dataset(args.samples)
    if args.counted:
        counted(root, args.counted, args.buffer[0], args.batches)
    elif args.count:
        count(root, args.buffer[0], args.batches if args.batches != 4 else 10)
    else:
        instrument(args.no_decode)
        alternate(make_loops(root, args.buffer), args.rounds, args.batches)


if __name__ == "__main__":
    main()
