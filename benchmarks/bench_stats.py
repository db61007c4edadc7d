"""What ``get_savable_loader(stats=True)`` costs on the W1 pipeline (issue 17).

W1: 256x256 JPEG + caption (``bench_pipeline.py``'s dataset), batch 32, shuffle buffer 100,
max_samples_per_sequence 100, default TaskEncoder (float CHW images).

Three measurements, each A/B-alternated. The figure compared is **CPU time per sample**
(user + system, of the process and its DataLoader workers, from psutil), next to wall-clock
samples/s: on a shared machine with a load of 4 per core, wall-clock rates of two identical
runs differ by tens of percent, while the CPU a run spends per sample moves by a few.

* ``in-process``: one process, 0 workers, two loaders (stats off and on) over the same
  dataset; rounds of ``--batches`` batches from each, the order alternating every round.
  Same process, same warm page cache, so drift of the shared machine mostly cancels.
* ``2 workers``: a fresh child process per run (stats off / on alternating, as in
  ``bench_pipeline.py``), ``--batches`` x 2 batches after a warm-up.
* ``per call``: the cost of one timed ``next()`` against a bare one, on a stage that does
  nothing (what the probe adds per item per stage), times the timed calls per sample of the
  W1 chain (Reader, ShuffleBuffer, Encode, 1/32 Batch), as a share of the measured time
  per sample: the overhead a noisy machine cannot hide.

    python benchmarks/bench_stats.py [--data PREPARED_W1_FOLDER] [--rounds 8]
"""

from __future__ import annotations

import argparse
import contextlib
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


def cpu_seconds() -> float:
    """User + system CPU of this process and its (worker) children so far."""
    import psutil

    me = psutil.Process()
    total = time.process_time()  # ns resolution; psutil's figures are in clock ticks
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):  # a worker that just ended
            total += sum(child.cpu_times()[:2])
    return total


def rate(iterator: Any, batches: int, each: Any = None) -> dict[str, float]:
    """samples/s (wall) and CPU microseconds per sample over ``batches`` batches (``each``:
    called with the step after each batch, timed with it)."""
    samples, start, cpu = 0, time.perf_counter(), cpu_seconds()
    for step in range(batches):
        samples += len(next(iterator).__key__)
        if each is not None:
            each(step)
    return {
        "rate": samples / (time.perf_counter() - start),
        "cpu_us": 1e6 * (cpu_seconds() - cpu) / samples,
    }


def in_process(root: Path, rounds: int, batches: int) -> list[dict[str, Any]]:
    """Rounds of (stats off, stats on) samples/s in one process, 0 workers."""
    import torch

    torch.set_num_threads(1)
    its = {flag: iter(loader(root, 0, flag)) for flag in (False, True)}
    for it in its.values():
        rate(it, 5)  # warm-up: buffers full, files open
    out = []
    for r in range(rounds):
        result: dict[str, Any] = {}
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
    result = rate(it, batches)
    print(MARK, flush=True)
    return result


def per_call(repeats: int = 2_000_000, trace_events: int = 0) -> dict[str, float]:
    """ns per bare next() and per timed next() of a stage that only counts (``trace_events``:
    the probe also keeps each call as a trace event, with room for that many)."""
    from energon_lite.loader.probe import ChainProbe
    from energon_lite.stages.base import Stage

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
    ChainProbe(timed, 0, trace_events)
    return {"bare_ns": ns_per_call(bare), "timed_ns": ns_per_call(timed)}


def child_rounds(
    script: Path, variants: list[str], data: Path, batches: int, rounds: int
) -> list[dict[str, Any]]:
    """``rounds`` rounds of one fresh ``script --child VARIANT`` process per variant, in the
    order ``ab_order`` gives; each round maps a variant to its child's RESULT line."""
    runs: list[dict[str, Any]] = []
    for r in range(rounds):
        result = {}
        for variant in ab_order(variants, r):
            cmd = [sys.executable, str(script.resolve()), "--child", variant]
            cmd += ["--data", str(data), "--batches", str(batches)]
            run = run_child(cmd, mark=MARK)
            lines = [line for line in run.lines if line.startswith(RESULT)]
            if run.returncode != 0 or not lines:
                raise RuntimeError(f"{variant} failed:\n{run.stderr[-3000:]}")
            result[variant] = json.loads(lines[-1][len(RESULT) :])
        runs.append(result)
        print(f"2 workers round {r + 1}: {result}", file=sys.stderr, flush=True)
    return runs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="a prepared W1 folder (default: build one)")
    parser.add_argument("--samples", type=int, default=20_000, help="W1 size when building")
    parser.add_argument("--rounds", type=int, default=8, help="2-worker A/B rounds")
    parser.add_argument("--local-rounds", type=int, default=24, help="in-process A/B rounds")
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
    local = in_process(args.data, args.local_rounds, args.batches // 3)
    runs = child_rounds(Path(__file__), ["off", "on"], args.data, args.batches * 2, args.rounds)

    rows = []
    for label, rounds in (("0 workers, in-process", local), ("2 workers, child processes", runs)):
        for key, name in (("cpu_us", "CPU us/sample"), ("rate", "samples/s (wall)")):
            # overhead > 0: stats cost something (more CPU per sample, fewer samples/s)
            if key == "cpu_us":
                overheads = [r["on"][key] / r["off"][key] - 1 for r in rounds]
            else:
                overheads = [1 - r["on"][key] / r["off"][key] for r in rounds]
            rows.append(
                [
                    label,
                    name,
                    fmt_num(median([r["off"][key] for r in rounds])),
                    fmt_num(median([r["on"][key] for r in rounds])),
                    fmt_num(100 * (median(overheads) or 0), 2, " %"),
                    f"{100 * min(overheads):+.1f} .. {100 * max(overheads):+.1f} %",
                ]
            )
    per_sample_ns = 1e3 * (median([r["off"]["cpu_us"] for r in local]) or 1)
    added = calls["timed_ns"] - calls["bare_ns"]
    timed_per_sample = 3 + 1 / 32
    print(
        f"W1 ({args.data.name}), batch 32, shuffle buffer 100; {args.rounds} rounds x "
        f"{args.batches} batches; {os.cpu_count()} CPUs, Python {platform.python_version()}; "
        f"{time.perf_counter() - started:.0f} s in all\n"
    )
    print(
        markdown_table(
            ["run", "figure", "stats off", "stats on", "overhead (median)", "per-round spread"],
            rows,
        )
    )
    print(
        f"\nper call: bare next() {calls['bare_ns']:.0f} ns, timed {calls['timed_ns']:.0f} ns "
        f"(+{added:.0f} ns); {timed_per_sample:.2f} timed calls per sample x {added:.0f} ns = "
        f"{timed_per_sample * added / 1e3:.2f} us per sample, {100 * timed_per_sample * added / per_sample_ns:.3f} % "
        f"of the {per_sample_ns / 1e3:.0f} us of CPU a sample takes at 0 workers"
    )


if __name__ == "__main__":
    main()
