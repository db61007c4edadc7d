"""What ``get_savable_loader(stats=True)`` costs on the W1 pipeline (issue 17).

W1: 256x256 JPEG + caption (``bench_pipeline.py``'s dataset), batch 32, shuffle buffer 100,
max_samples_per_sequence 100, default TaskEncoder (float CHW images).

Three measurements, each A/B-alternated:

* ``in-process``: one process, 0 workers, two loaders (stats off and on) over the same
  dataset; rounds of ``--batches`` batches from each, the order alternating every round.
  Same process, same warm page cache, so drift of the shared machine mostly cancels.
* ``2 workers``: a fresh child process per run (stats off / on alternating, as in
  ``bench_pipeline.py``), samples/s over ``--batches`` batches after a warm-up.
* ``per call``: the cost of one timed ``next()`` against a bare one, on a stage that does
  nothing (what the probe adds per item per stage), times the timed calls per sample of the
  W1 chain (Reader, ShuffleBuffer, Encode, 1/32 Batch), as a share of the measured time
  per sample: the overhead a noisy machine cannot hide.

    python benchmarks/bench_stats.py [--data PREPARED_W1_FOLDER] [--rounds 8]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from common import ab_order, fmt_num, markdown_table, median, run_child

sys.path.insert(0, str(Path(__file__).resolve().parent))
RESULT = "RESULT "
MARK = "--- end of throughput phase ---"


def loader(root: Path, workers: int, stats: bool) -> Any:
    import energon_lite as el

    ds = el.get_train_dataset(
        root,
        worker_config=el.WorkerConfig(rank=0, world_size=1, num_workers=workers),
        batch_size=32,
        shuffle_buffer_size=100,
        max_samples_per_sequence=100,
    )
    return el.get_savable_loader(ds, stats=stats)


def rate(iterator: Any, batches: int) -> float:
    samples, start = 0, time.perf_counter()
    for _ in range(batches):
        samples += len(next(iterator).__key__)
    return samples / (time.perf_counter() - start)


def in_process(root: Path, rounds: int, batches: int) -> list[dict[str, float]]:
    """Rounds of (stats off, stats on) samples/s in one process, 0 workers."""
    import torch

    torch.set_num_threads(1)
    its = {flag: iter(loader(root, 0, flag)) for flag in (False, True)}
    for it in its.values():
        rate(it, 5)  # warm-up: buffers full, files open
    out = []
    for r in range(rounds):
        result: dict[str, float] = {}
        for flag in ab_order([False, True], r):
            result["on" if flag else "off"] = rate(its[flag], batches)
        out.append(result)
        print(f"in-process round {r + 1}: {result}", file=sys.stderr, flush=True)
    return out


def child(root: Path, workers: int, stats: bool, batches: int) -> dict[str, float]:
    import torch

    torch.set_num_threads(1)
    it = iter(loader(root, workers, stats))
    rate(it, 10)
    result = {"samples_per_s": rate(it, batches)}
    print(MARK, flush=True)
    return result


def per_call(repeats: int = 2_000_000) -> dict[str, float]:
    """ns per bare next() and per timed next() of a stage that only counts."""
    from energon_lite.stage import Stage
    from energon_lite.stage_probe import ChainProbe

    class Count(Stage):
        def __init__(self) -> None:
            self.n = 0

        def next(self) -> int:
            self.n += 1
            return self.n

    def ns_per_call(stage: Stage) -> float:
        step = stage.next
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter_ns()
            for _ in range(repeats // 5):
                step()
            best = min(best, (time.perf_counter_ns() - start) / (repeats // 5))
        return best

    bare, timed = Count(), Count()
    ChainProbe(timed, 0)
    return {"bare_ns": ns_per_call(bare), "timed_ns": ns_per_call(timed)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="a prepared W1 folder (default: build one)")
    parser.add_argument("--samples", type=int, default=20_000, help="W1 size when building")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--batches", type=int, default=60, help="timed batches per run")
    parser.add_argument("--child", choices=("off", "on"), help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        result = child(args.data, args.workers, args.child == "on", args.batches)
        print(RESULT + json.dumps(result), flush=True)
        return
    if args.data is None:
        from bench_pipeline import build_dataset

        args.data = build_dataset(args.samples)
    started = time.perf_counter()
    calls = per_call()
    local = in_process(args.data, args.rounds, args.batches)
    runs: list[dict[str, float]] = []
    for r in range(args.rounds):
        result = {}
        for flag in ab_order(["off", "on"], r):
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", flag]
            cmd += ["--data", str(args.data), "--batches", str(args.batches * 2)]
            run = run_child(cmd, mark=MARK)
            lines = [line for line in run.lines if line.startswith(RESULT)]
            if run.returncode != 0 or not lines:
                raise RuntimeError(f"stats={flag} failed:\n{run.stderr[-3000:]}")
            result[flag] = json.loads(lines[-1][len(RESULT) :])["samples_per_s"]
        runs.append(result)
        print(f"2 workers round {r + 1}: {result}", file=sys.stderr, flush=True)

    rows = []
    for label, rounds in (("0 workers, in-process", local), ("2 workers, child processes", runs)):
        overheads = [1 - r["on"] / r["off"] for r in rounds]
        rows.append(
            [
                label,
                fmt_num(median([r["off"] for r in rounds])),
                fmt_num(median([r["on"] for r in rounds])),
                fmt_num(100 * (median(overheads) or 0), 2, " %"),
                f"{100 * min(overheads):+.1f} .. {100 * max(overheads):+.1f} %",
            ]
        )
    per_sample_ns = 1e9 / (median([r["off"] for r in local]) or 1)
    added = calls["timed_ns"] - calls["bare_ns"]
    timed_per_sample = 3 + 1 / 32
    print(
        f"W1 ({args.data.name}), batch 32, shuffle buffer 100; {args.rounds} rounds x "
        f"{args.batches} batches; {os.cpu_count()} CPUs, Python {platform.python_version()}; "
        f"{time.perf_counter() - started:.0f} s in all\n"
    )
    print(
        markdown_table(
            ["run", "stats off", "stats on", "overhead (median)", "per-round spread"], rows
        )
    )
    print(
        f"\nper call: bare next() {calls['bare_ns']:.0f} ns, timed {calls['timed_ns']:.0f} ns "
        f"(+{added:.0f} ns); {timed_per_sample:.2f} timed calls per sample x {added:.0f} ns = "
        f"{timed_per_sample * added / 1e3:.2f} us per sample, {100 * timed_per_sample * added / per_sample_ns:.3f} % "
        f"of the {per_sample_ns / 1e3:.0f} us a sample takes at 0 workers"
    )


if __name__ == "__main__":
    main()
