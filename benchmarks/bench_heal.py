"""Workers that heal: what healing costs a healthy run, and how long a restart takes.

Data: W1 (``bench_pipeline.py``'s 256x256 JPEG + caption), batch 32, shuffle buffer 100,
``max_samples_per_sequence`` 100, default TaskEncoder, 2 workers.

* ``overhead``: two loaders in one process, healing off (``max_worker_restarts=0``, torch's
  wait and its SIGCHLD handler) and on (the default: the trainer waits in 0.1 s slices and
  notices dead workers itself); rounds of ``--batches`` batches from each, the order
  alternating (A/B). Compared: CPU time per sample (process + workers) and samples/s.
* ``per call``: what the healing path adds per batch in the trainer (``next_or_loss`` and
  the restart bookkeeping around a bare ``next``), on torch's pool of two workers that send
  small ints: the overhead a noisy machine cannot hide.
* ``restart``: a loader delivers 10 batches; then one worker is SIGKILLed (alternately
  torch's worker 0 and 1) and the trainer goes on. ``kill -> next batch``: from the kill to
  the first batch of the new pool; ``detect -> next batch``: the loader's own record (the
  pool's shutdown, the new pool's start, the restore that fetches the buffered samples
  again, its first batch). For comparison: a fresh loader restored from a saved state, to
  its first batch (what a checkpoint restore costs).

    python benchmarks/bench_heal.py [--data PREPARED_W1_FOLDER] [--rounds 8]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import platform
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ab_order, fmt_num, markdown_table, median


def loader(root: Path, **options: Any) -> Any:
    import energon_lite as el

    ds = el.get_train_dataset(
        root,
        worker_config=el.WorkerConfig(rank=0, world_size=1, num_workers=2),
        batch_size=32,
        shuffle_buffer_size=100,
        max_samples_per_sequence=100,
    )
    return el.get_savable_loader(ds, **options)


def cpu_seconds() -> float:
    """User + system CPU of this process and its (worker) children so far."""
    import psutil

    total = time.process_time()
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += sum(child.cpu_times()[:2])
    return total


def rate(iterator: Any, batches: int) -> dict[str, float]:
    """samples/s, CPU per sample (process + workers) and the trainer's own CPU per batch
    (where healing does its work: the workers run the same chains either way)."""
    samples, start, cpu = 0, time.perf_counter(), cpu_seconds()
    own = time.process_time()
    for _ in range(batches):
        samples += len(next(iterator).__key__)
    own = time.process_time() - own
    return {
        "rate": samples / (time.perf_counter() - start),
        "cpu_us": 1e6 * (cpu_seconds() - cpu) / samples,
        "trainer_us": 1e6 * own / batches,
    }


def overhead(root: Path, rounds: int, batches: int) -> list[dict[str, Any]]:
    loaders = {flag: loader(root, max_worker_restarts=3 if flag else 0) for flag in (0, 1)}
    its = {flag: iter(each) for flag, each in loaders.items()}
    for it in its.values():
        rate(it, 5)  # warm-up: buffers full, files open
    out = []
    for r in range(rounds):
        result = {}
        for flag in ab_order([0, 1], r):
            result["on" if flag else "off"] = rate(its[flag], batches)
        out.append(result)
        print(f"overhead round {r + 1}: {result}", file=sys.stderr, flush=True)
    for each in loaders.values():
        each.close()  # the restart rounds kill workers found among this process's children
    return out


def per_call(repeats: int = 20_000) -> dict[str, float]:
    """ns per batch: a bare ``next`` of torch's pool and the healing path around it (no
    loss), on two workers that send small ints (the cost of torch's queue included)."""
    from torch.utils.data import DataLoader, IterableDataset

    from energon_lite.loader import healing
    from energon_lite.loader.torch_iter import WorkerPool

    class Counting(IterableDataset):  # forked, never pickled
        def __iter__(self) -> Any:
            return iter(range(10**9))

    healer = healing.Healer(3, 3600.0, "raise", True, None)

    def bare(pool: Any) -> None:
        next(pool)

    def healed(pool: Any) -> None:
        healing.next_or_loss(pool, None)
        healer.settle()

    out = {}
    for name, step in (("bare_ns", bare), ("healing_ns", healed)):
        best = float("inf")
        for _ in range(3):
            loader = DataLoader(Counting(), batch_size=None, num_workers=2, prefetch_factor=64)
            pool = WorkerPool(loader, watched=name == "bare_ns")
            for _ in range(1000):  # the workers running, the queue full
                step(pool)
            start = time.perf_counter_ns()
            for _ in range(repeats):
                step(pool)
            best = min(best, (time.perf_counter_ns() - start) / repeats)
            pool.close()
        out[name] = best
    return out


def restart(root: Path, rounds: int) -> list[dict[str, float]]:
    out = []
    for r in range(rounds):
        live = loader(root)
        it = iter(live)
        for _ in range(10):
            next(it)
        state = live.save_state_rank()
        workers = sorted(multiprocessing.active_children(), key=lambda p: p.pid or 0)
        victim = workers[r % len(workers)]
        killed = time.perf_counter()
        os.kill(victim.pid or 0, signal.SIGKILL)
        before = 0
        while not live.worker_restarts or live.worker_restarts[-1]["seconds"] is None:
            next(it)
            before += 1
        kill_to_batch = time.perf_counter() - killed
        record = live.worker_restarts[-1]
        live.close()
        fresh = loader(root)
        start = time.perf_counter()
        fresh.restore_state_rank(state)
        next(iter(fresh))
        restored = time.perf_counter() - start
        fresh.close()
        result = {
            "kill_s": kill_to_batch,
            "detect_s": record["seconds"],
            "restore_s": restored,
            "prefetched": before - 1,
            "refetched": record["refetched_samples"],
            "remade": record["remade_batches"],
        }
        out.append(result)
        print(f"restart round {r + 1}: {result}", file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="a prepared W1 folder (default: build one)")
    parser.add_argument("--samples", type=int, default=4_000, help="W1 size when building")
    parser.add_argument("--rounds", type=int, default=8, help="A/B and restart rounds")
    parser.add_argument("--batches", type=int, default=20, help="batches per A/B run")
    args = parser.parse_args(argv)
    import logging

    import torch

    logging.getLogger("energon_lite").setLevel(logging.ERROR)  # one warning per restart
    torch.set_num_threads(1)
    if args.data is None:
        from bench_pipeline import build_dataset

        args.data = build_dataset(args.samples)
    load = os.getloadavg()
    started = time.perf_counter()
    calls = per_call()
    ab = overhead(args.data, args.rounds, args.batches)
    restarts = restart(args.data, args.rounds)
    print(
        f"W1 ({args.data.name}), batch 32, shuffle buffer 100, 2 workers; {args.rounds} rounds; "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}; load average "
        f"{load[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; "
        f"{time.perf_counter() - started:.0f} s in all\n"
    )
    rows = []
    for key, name in (
        ("cpu_us", "CPU us/sample (trainer + workers)"),
        ("trainer_us", "trainer CPU us/batch"),
        ("rate", "samples/s (wall)"),
    ):
        if key != "rate":  # > 0: healing costs something
            overheads = [r["on"][key] / r["off"][key] - 1 for r in ab]
        else:
            overheads = [1 - r["on"][key] / r["off"][key] for r in ab]
        rows.append(
            [
                name,
                fmt_num(median([r["off"][key] for r in ab])),
                fmt_num(median([r["on"][key] for r in ab])),
                fmt_num(100 * (median(overheads) or 0), 2, " %"),
                f"{100 * min(overheads):+.1f} .. {100 * max(overheads):+.1f} %",
            ]
        )
    print(
        markdown_table(
            ["figure", "healing off", "healing on", "overhead (median)", "per-round spread"],
            rows,
        )
    )
    per_sample_ns = 1e3 * (median([r["off"]["cpu_us"] for r in ab]) or 1)
    added = calls["healing_ns"] - calls["bare_ns"]
    print(
        f"\nper call: bare next() {calls['bare_ns']:.0f} ns, with healing "
        f"{calls['healing_ns']:.0f} ns (+{added:.0f} ns per batch of 32) = "
        f"{100 * added / 32 / per_sample_ns:.4f} % of the {per_sample_ns / 1e3:.0f} us of CPU "
        "a sample takes\n"
    )
    print(
        markdown_table(
            ["figure", "median", "min", "max"],
            [
                [
                    name,
                    fmt_num(median([r[key] for r in restarts]), digits),
                    fmt_num(min(r[key] for r in restarts), digits),
                    fmt_num(max(r[key] for r in restarts), digits),
                ]
                for key, name, digits in (
                    ("kill_s", "kill -> next batch of the new pool (s)", 2),
                    ("detect_s", "detect -> next batch, the loader's record (s)", 2),
                    ("restore_s", "for comparison: restore a saved state -> first batch (s)", 2),
                    ("prefetched", "batches delivered between kill and restart", 0),
                    ("remade", "batches made again (in flight)", 0),
                    ("refetched", "buffered samples fetched again", 0),
                )
            ],
        )
    )


if __name__ == "__main__":
    main()
