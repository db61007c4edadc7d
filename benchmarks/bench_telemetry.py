"""What the loader's telemetry costs on the W1 pipeline (issue 43): metrics and the trace.

W1: 256x256 JPEG + caption (``bench_pipeline.py``'s dataset), batch 32, shuffle buffer 100,
max_samples_per_sequence 100, default TaskEncoder (float CHW images). Three loaders, run in
the same rounds, their order rotated and reversed from round to round (``ab_order``):

* ``off``: ``get_savable_loader(ds)``, no telemetry;
* ``metrics``: ``stats=True`` and ``loader.metrics()`` read every 10 batches (what a
  logger does, more often than a real one);
* ``trace``: as ``metrics``, plus ``loader.start_trace()`` (every stage call kept as an
  event; the file is written after the timed batches).

Two measurements: ``in-process`` (one process, 0 workers, the three loaders side by side:
the same page cache and the same moment of the shared machine) and ``2 workers`` (a fresh
child process per run). Compared: CPU time per sample (the process and its workers, psutil)
and wall-clock samples/s, as in ``bench_stats.py``; an overhead > 0 means the telemetry
costs something. Each round gives one ratio per variant against ``off`` of the same round;
the table shows their median and their spread. ``per call``: what one timed ``next()``
costs against a bare one on a stage that does nothing, with the stats probe and with the
trace as well (``bench_stats.per_call``), times the timed calls per sample of the W1 chain,
as a share of a sample's CPU: the overhead a loaded machine cannot hide.

``--instructions``: the same three loaders at 0 workers, each in its own process under
valgrind's callgrind, which counts the instructions the process executes (the machine's load
and clock do not change the count). Each variant runs twice with a fixed ``PYTHONHASHSEED``:
a 5-batch warm-up then ``--batches`` batches, and the warm-up alone; the difference of the
two totals is what those batches cost, start-up and imports cancelled. An overhead is the
variant's instructions per sample over ``off``'s.

    python benchmarks/bench_telemetry.py [--data PREPARED_W1_FOLDER] [--rounds 6]
    python benchmarks/bench_telemetry.py --data PREPARED_W1_FOLDER --instructions --batches 40
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_stats
import callgrind
from common import ab_order, fmt_num, markdown_table, median

RESULT, MARK = bench_stats.RESULT, bench_stats.MARK  # what a child prints (child_rounds)
VARIANTS = ("off", "metrics", "trace")
EVERY = 10  # batches between two readings of loader.metrics()


def loader(root: Path, workers: int, variant: str) -> Any:
    made = bench_stats.loader(root, workers, stats=variant != "off")
    if variant == "trace":
        made.start_trace()
    return made


def rate(made: Any, iterator: Any, variant: str, batches: int) -> dict[str, float]:
    """samples/s (wall) and CPU microseconds per sample over ``batches`` batches, reading
    ``loader.metrics()`` every ``EVERY`` batches unless telemetry is off."""

    def log(step: int) -> None:
        if step % EVERY == EVERY - 1:
            made.metrics()

    return bench_stats.rate(iterator, batches, None if variant == "off" else log)


def in_process(root: Path, rounds: int, batches: int) -> list[dict[str, Any]]:
    """Rounds of the three variants in one process, 0 workers."""
    import torch

    torch.set_num_threads(1)
    made = {v: loader(root, 0, v) for v in VARIANTS}
    its = {v: iter(made[v]) for v in VARIANTS}
    for v in VARIANTS:
        rate(made[v], its[v], v, 5)  # warm-up: buffers full, files open
    out = []
    for r in range(rounds):
        result = {v: rate(made[v], its[v], v, batches) for v in ab_order(VARIANTS, r)}
        out.append(result)
        print(f"in-process round {r + 1}: {result}", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory() as folder:  # the trace's size after all rounds
        size = made["trace"].write_trace(Path(folder) / "trace.json").stat().st_size
    print(f"trace file after the in-process rounds: {size:,} bytes", file=sys.stderr)
    return out


def child(root: Path, workers: int, variant: str, batches: int) -> dict[str, float]:
    import torch

    torch.set_num_threads(1)
    made = loader(root, workers, variant)
    it = iter(made)
    rate(made, it, variant, 10)
    result = rate(made, it, variant, batches)
    print(MARK, flush=True)
    if variant == "trace":
        with tempfile.TemporaryDirectory() as folder:
            result["trace_bytes"] = made.write_trace(Path(folder) / "t.json").stat().st_size
    made.close()
    return result


def counted(root: Path, variant: str, batches: int) -> None:
    """What one callgrind run executes: 5 warm-up batches, then ``batches`` more."""
    import torch

    torch.set_num_threads(1)
    made = loader(root, 0, variant)
    it = iter(made)
    for step in range(5 + batches):
        next(it)
        if variant != "off" and step % EVERY == EVERY - 1:
            made.metrics()


def instructions(root: Path, batches: int, jobs: int = 2) -> dict[str, float]:
    """Instructions per sample of each variant at 0 workers: callgrind totals of a run of
    ``batches`` batches minus a run of none (both after the same warm-up), over the samples."""
    from concurrent.futures import ThreadPoolExecutor

    def total(variant: str, n: int) -> int:
        args = ["--count", variant, "--data", str(root), "--batches", str(n)]
        return callgrind.whole_process(str(Path(__file__).resolve()), args, f"{variant} x{n}")

    runs = [(v, n) for v in VARIANTS for n in (0, batches)]
    with ThreadPoolExecutor(jobs) as pool:
        totals = dict(zip(runs, pool.map(lambda r: total(*r), runs)))
    return {v: (totals[v, batches] - totals[v, 0]) / (32 * batches) for v in VARIANTS}


def _rows(label: str, rounds: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for key, name in (("cpu_us", "CPU us/sample"), ("rate", "samples/s (wall)")):
        for variant in VARIANTS[1:]:
            # overhead > 0: the telemetry costs something (more CPU per sample, fewer samples/s)
            if key == "cpu_us":
                overheads = [r[variant][key] / r["off"][key] - 1 for r in rounds]
            else:
                overheads = [1 - r[variant][key] / r["off"][key] for r in rounds]
            rows.append(
                [
                    label,
                    name,
                    variant,
                    fmt_num(median([r["off"][key] for r in rounds])),
                    fmt_num(median([r[variant][key] for r in rounds])),
                    fmt_num(100 * (median(overheads) or 0), 2, " %"),
                    f"{100 * min(overheads):+.1f} .. {100 * max(overheads):+.1f} %",
                ]
            )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="a prepared W1 folder (default: build one)")
    parser.add_argument("--samples", type=int, default=20_000, help="W1 size when building")
    parser.add_argument("--rounds", type=int, default=6, help="2-worker rounds")
    parser.add_argument("--local-rounds", type=int, default=12, help="in-process rounds")
    parser.add_argument("--batches", type=int, default=60, help="timed batches per run")
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions under callgrind"
    )
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--count", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.count:
        counted(args.data, args.count, args.batches)
        return
    if args.child:
        result = child(args.data, 2, args.child, args.batches)
        print(RESULT + json.dumps(result), flush=True)
        return
    if args.data is None:
        from bench_pipeline import build_dataset

        args.data = build_dataset(args.samples)
    started = time.perf_counter()
    if args.instructions:
        per_sample = instructions(args.data, args.batches)
        print(
            f"W1 ({args.data.name}), batch 32, shuffle buffer 100, 0 workers; callgrind, "
            f"{args.batches} batches (5 warm-up batches subtracted); "
            f"{time.perf_counter() - started:.0f} s in all\n"
        )
        rows = [
            [
                v,
                fmt_num(per_sample[v]),
                fmt_num(100 * (per_sample[v] / per_sample["off"] - 1), 3, " %"),
            ]
            for v in VARIANTS
        ]
        print(markdown_table(["variant", "instructions per sample", "overhead"], rows))
        return
    timed = bench_stats.per_call(500_000)
    traced = bench_stats.per_call(500_000, trace_events=1_000_000)
    local = in_process(args.data, args.local_rounds, args.batches // 3)
    script = Path(__file__)
    runs = bench_stats.child_rounds(
        script, list(VARIANTS), args.data, args.batches * 2, args.rounds
    )
    load = os.getloadavg()
    print(
        f"W1 ({args.data.name}), batch 32, shuffle buffer 100; {args.local_rounds} in-process "
        f"rounds x {args.batches // 3} batches, {args.rounds} 2-worker rounds x "
        f"{args.batches * 2} batches; {os.cpu_count()} CPUs, load at the end {load[0]:.1f}, "
        f"Python {platform.python_version()}; {time.perf_counter() - started:.0f} s in all\n"
    )
    headers = ["run", "figure", "variant", "off", "on", "overhead (median)", "per-round spread"]
    rows = _rows("0 workers, in-process", local) + _rows("2 workers, child processes", runs)
    print(markdown_table(headers, rows))
    per_sample_ns = 1e3 * (median([r["off"]["cpu_us"] for r in local]) or 1)
    calls = 3 + 1 / 32  # timed calls per sample of the W1 chain (Reader, Shuffle, Encode, Batch)
    for name, figures in (("stats probe", timed), ("stats probe + trace", traced)):
        added = figures["timed_ns"] - figures["bare_ns"]
        print(
            f"\nper call, {name}: bare next() {figures['bare_ns']:.0f} ns, timed "
            f"{figures['timed_ns']:.0f} ns (+{added:.0f} ns); x {calls:.2f} calls per sample = "
            f"{calls * added / 1e3:.2f} us, {100 * calls * added / per_sample_ns:.3f} % of the "
            f"{per_sample_ns / 1e3:.0f} us of CPU a sample takes at 0 workers"
        )
    sizes = [r["trace"]["trace_bytes"] for r in runs]
    print(
        f"\ntrace file of a 2-worker run ({args.batches * 2 + 10} batches received): "
        f"{fmt_num(median(sizes))} bytes (median)"
    )


if __name__ == "__main__":
    main()
