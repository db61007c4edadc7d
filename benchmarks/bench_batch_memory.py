"""Batch memory reuse: workers building batches in reused shared memory vs fresh segments.

The W1 dataset of ``bench_pipeline.py`` (20,000 256x256 JPEGs + captions, built on first
use under ``benchmarks/data/``), batch 32, shuffle buffer 100, 2 workers, energon_lite's
default TaskEncoder with float images (25 MB batches) and with ``torchrgb8`` (6 MB):

* ``reuse``: ``get_savable_loader(ds)`` (``reuse_batch_memory=True``, the default);
* ``fresh``: ``get_savable_loader(ds, reuse_batch_memory=False)``: a new shared-memory
  segment per batch, as torch's own collate allocates.

Each run builds a new dataset and loader (new worker processes) in this process, takes
``--warmup`` batches, then times ``--batches`` batches; the trainer reads every batch once
(``batch.image.sum()``, as a copy to the GPU would). Worker CPU is the user + system time of
the worker processes over the timed batches per sample received (steadier than samples/s
on a shared machine: other jobs' load does not enter it). Memory: the proportional set size (PSS,
shared pages counted once) summed over this process and its workers, the largest seen after
each batch (read from ``/proc/*/smaps_rollup``). Rounds alternate
the order of reuse/fresh (A/B); the table shows medians and the per-round ratio's spread.

    python benchmarks/bench_batch_memory.py [--rounds 4] [--batches 120]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from typing import Any

import psutil
import torch
from bench_pipeline import BATCH_SIZE, MAX_SAMPLES_PER_SEQUENCE, SHUFFLE_BUFFER, build_dataset
from common import markdown_table, median, process_tree_cpu

import energon_lite as el

MODES = ("float", "uint8")


def _tree_pss() -> int:
    """PSS in bytes of this process and its children (the loader's workers)."""
    pids = [os.getpid(), *(child.pid for child in psutil.Process().children(recursive=True))]
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as rollup:
                for line in rollup:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:  # a worker that just exited
            pass
    return total


def run(root: Any, mode: str, reuse: bool, workers: int, batches: int, warmup: int) -> dict:
    class Uint8TaskEncoder(el.DefaultTaskEncoder):
        decoder = el.SampleDecoder(image_decode="torchrgb8")

    dataset = el.get_train_dataset(
        root,
        worker_config=el.WorkerConfig(rank=0, world_size=1, num_workers=workers),
        batch_size=BATCH_SIZE,
        shuffle_buffer_size=SHUFFLE_BUFFER,
        max_samples_per_sequence=MAX_SAMPLES_PER_SEQUENCE,
        **({"task_encoder": Uint8TaskEncoder()} if mode == "uint8" else {}),
    )
    loader = el.get_savable_loader(dataset, reuse_batch_memory=reuse)
    batches_iter = iter(loader)
    for _ in range(warmup):
        next(batches_iter).image.sum()
    peak, samples = 0, 0
    workers_cpu = _workers_cpu()
    start = time.perf_counter()
    for _ in range(batches):
        batch = next(batches_iter)
        batch.image.sum()
        samples += batch.image.shape[0]
        del batch
        peak = max(peak, _tree_pss())
    seconds = time.perf_counter() - start
    workers_cpu = _workers_cpu() - workers_cpu
    loader.close()
    return {
        "samples_per_s": samples / seconds,
        "pss_peak": peak,
        "worker_cpu_ms": 1e3 * workers_cpu / samples,
    }


def _workers_cpu() -> float:
    """CPU seconds (user + system) the loader's worker processes have used so far."""
    return process_tree_cpu(include_self=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--batches", type=int, default=120)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    root = build_dataset(args.samples)
    torch.set_num_threads(1)
    results: dict[tuple[str, bool], list[dict]] = {(m, r): [] for m in MODES for r in (True, False)}
    ratios: dict[str, list[float]] = {m: [] for m in MODES}
    cpu_ratios: dict[str, list[float]] = {m: [] for m in MODES}
    loads = []
    for round_index in range(args.rounds):
        for mode in MODES:
            order = (True, False) if round_index % 2 == 0 else (False, True)
            got = {}
            for reuse in order:
                loads.append(os.getloadavg()[0])
                got[reuse] = run(root, mode, reuse, args.workers, args.batches, args.warmup)
                results[mode, reuse].append(got[reuse])
                print(
                    f"round {round_index + 1}/{args.rounds} load {loads[-1]:.1f} {mode:5} "
                    f"{'reuse' if reuse else 'fresh'}: {got[reuse]['samples_per_s']:,.0f} "
                    f"samples/s, {got[reuse]['worker_cpu_ms']:.2f} worker CPU ms/sample, PSS peak {got[reuse]['pss_peak'] / 2**20:,.0f} MiB",
                    flush=True,
                )
            ratios[mode].append(got[True]["samples_per_s"] / got[False]["samples_per_s"])
            cpu_ratios[mode].append(got[False]["worker_cpu_ms"] / got[True]["worker_cpu_ms"])
    rows = []
    for mode in MODES:
        for reuse in (True, False):
            runs = results[mode, reuse]
            rate = [r["samples_per_s"] for r in runs]
            cpu = [r["worker_cpu_ms"] for r in runs]
            rows.append(
                [
                    mode,
                    "reuse" if reuse else "fresh",
                    f"{median(rate):,.0f} ({min(rate):,.0f}-{max(rate):,.0f})",
                    f"{median(cpu):.2f} ({min(cpu):.2f}-{max(cpu):.2f})",
                    (
                        f"{median(cpu_ratios[mode]):.2f}x ({min(cpu_ratios[mode]):.2f}-"
                        f"{max(cpu_ratios[mode]):.2f})"
                        if reuse
                        else "1.00x"
                    ),
                    f"{median([r['pss_peak'] for r in runs]) / 2**20:,.0f}",
                    (
                        f"{median(ratios[mode]):.2f}x ({min(ratios[mode]):.2f}-"
                        f"{max(ratios[mode]):.2f})"
                        if reuse
                        else "1.00x"
                    ),
                ]
            )
    print()
    print(
        f"{platform.python_version()}, torch {torch.__version__}, {os.cpu_count()} cores, "
        f"{args.workers} workers, {args.rounds} rounds x {args.batches} batches, load average "
        f"{min(loads):.1f}-{max(loads):.1f}"
    )
    print(
        markdown_table(
            [
                "images",
                "batch memory",
                "samples/s (min-max)",
                "worker CPU ms per sample (min-max)",
                "fresh / reuse CPU",
                "PSS peak, all processes (MiB)",
                "samples/s vs fresh",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
