"""What a canonical layout costs: throughput, state size and restore time.

* ``throughput``: samples/s and CPU per sample of a canonical (8, 8) layout run on
  1 rank x 2 workers (each worker runs 32 of the 64 logical pipelines, 8 per step) against
  the plain 1 x 2 loader, same data and global batch; A/B alternated (order reversed every
  round), a fresh child process per run, ``--batches`` batches after 10 warm-up batches
  (the warm-up fills every pipeline's shuffle buffer).
* ``paired`` (the steadier figure on a shared machine): the loaders in one process, their
  batches taken in turn (the order changed every batch), so they see the same load at the
  same moments; per round the CPU per sample of each loader's worker processes and of the
  trainer's ``next()`` calls (thread CPU time); fresh loaders per round. Besides the plain
  1 x 2 loader, a control: the plain 1 x 2 loader whose shuffle buffer holds as many samples
  per worker as the canonical worker's 32 pipelines hold together (32 x the buffer), so the
  canonical layout's cost can be told from the cost of holding that many samples.
* ``chain``: what a worker's own chain costs per sample, without processes: worker 0's
  chain of each loader built in this process and run batch by batch in turn (the order
  swapped every batch) with the per-batch work of a worker (the state save and its
  difference from the one sent before; not the item's pickle, which in a worker sends the
  batch's tensors through its shared-memory pool, and which in one process without the pool
  would copy every batch into shared memory), thread CPU time; plain, canonical (1, 2)
  (the ``Phases`` stage over one pipeline per phase: its fixed cost) and canonical (8, 8).
  No shared-memory transport, no trainer and no other process competing for the caches.
* ``state``: K x Q = 1024 (canonical (32, 32)) on 1 x 2 and 4 x 2 (ranks simulated in one
  process): each rank takes ``--state-batches`` batches and saves; the state's msgpack size
  per rank, and the time from building a new loader through ``restore_state_global`` to its
  first batch, on the same layout and on the other one.

    python benchmarks/bench_canonical.py [--data DIR] [--rounds 6] [--batches 60]
        [--only throughput|paired|chain|state] [--shuffle-buffer 100]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ab_order, fmt_num, markdown_table, median, run_child

RESULT = "RESULT "
BATCH = 32
SHUFFLE_BUFFER = [100]  # per pipeline, in throughput, paired and chain (``--shuffle-buffer``)


def prepared(folder: Path, samples: int, size: int, sample_type: str, fields: dict) -> Path:
    from energon_lite import prepare_dataset
    from energon_lite.synth.shards import write_captioning_shards

    if not (folder / ".nv-meta").is_dir():
        write_captioning_shards(folder, samples, 500, image_size=(size, size))
        prepare_dataset(
            folder,
            split_ratio=[("train", 1)],
            sample_type=sample_type,
            field_map=fields,
            progress=False,
        )
    return folder


def loader(root: Path, rank: int, world: int, workers: int, canonical: Any, **options: Any):
    import energon_lite as el

    dataset = el.get_train_dataset(
        root,
        worker_config=el.WorkerConfig(rank=rank, world_size=world, num_workers=workers),
        batch_size=options.pop("batch_size", BATCH) // world,
        shuffle_buffer_size=options.pop("shuffle_buffer_size", SHUFFLE_BUFFER[0]),
        max_samples_per_sequence=options.pop("max_samples_per_sequence", 100),
        canonical_layout=canonical,
        **options,
    )
    return el.get_savable_loader(dataset)


def cpu_seconds() -> tuple[float, float]:
    """(this process's CPU seconds, its workers')."""
    import psutil

    workers = 0.0
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):  # a worker that just ended
            workers += sum(child.cpu_times()[:2])
    return time.process_time(), workers


def _overhead(per_round: list[float]) -> list[str]:
    """The table cells of per-round ratios minus 1: their median and their spread."""
    return [
        f"{100 * (median(per_round) or 0):+.2f} %",
        f"{100 * min(per_round):+.1f} .. {100 * max(per_round):+.1f} %",
    ]


def child_throughput(root: Path, mode: str, batches: int) -> None:
    import torch

    torch.set_num_threads(1)
    one = loader(root, 0, 1, 2, (8, 8) if mode == "canonical" else None)
    it = iter(one)
    start = time.perf_counter()
    for _ in range(10):  # warm-up: workers started, every shuffle buffer filled
        next(it)
    first = time.perf_counter() - start
    samples, start, cpu = 0, time.perf_counter(), cpu_seconds()
    for _ in range(batches):
        samples += len(next(it).__key__)
    wall = time.perf_counter() - start
    trainer, workers = (1e6 * (b - a) / samples for a, b in zip(cpu, cpu_seconds()))
    result = {"rate": samples / wall, "cpu_us": trainer + workers}
    result.update(trainer_us=trainer, workers_us=workers)
    result["warmup_s"] = first
    print(RESULT + json.dumps(result), flush=True)
    one.close()


def throughput(root: Path, rounds: int, batches: int) -> None:
    runs: dict[str, list[dict[str, float]]] = {"plain": [], "canonical": []}
    loads = []
    for index in range(rounds):
        for mode in ab_order(["plain", "canonical"], index):
            loads.append(os.getloadavg()[0])
            cmd = [sys.executable, __file__, "--child", mode, "--data", str(root)]
            cmd += ["--shuffle-buffer", str(SHUFFLE_BUFFER[0])]
            child = run_child([*cmd, "--batches", str(batches)], timeout=900)
            line = next((x for x in child.lines if x.startswith(RESULT)), None)
            if line is None:
                raise SystemExit(f"{mode} run failed:\n{child.stderr[-3000:]}")
            runs[mode].append(json.loads(line[len(RESULT) :]))
    rows = []
    figures = (
        ("rate", "samples/s", True),
        ("cpu_us", "CPU us/sample", False),
        ("workers_us", "of which workers", False),
        ("trainer_us", "of which trainer", False),
    )
    for figure, label, higher in figures:
        plain = [r[figure] for r in runs["plain"]]
        canon = [r[figure] for r in runs["canonical"]]
        # overhead per round (> 0: the canonical layout costs something)
        per_round = [(p / c - 1) if higher else (c / p - 1) for p, c in zip(plain, canon)]
        rows.append(
            [
                label,
                fmt_num(median(plain)),
                fmt_num(median(canon)),
                *_overhead(per_round),
            ]
        )
    print(f"\nthroughput, {rounds} rounds x {batches} batches of {BATCH}, load average "
          f"{min(loads):.1f}-{max(loads):.1f}\n")  # fmt: skip
    print(markdown_table(["figure", "plain 1 x 2", "canonical (8, 8) on 1 x 2",
                          "overhead (median of rounds)", "per-round spread"], rows))  # fmt: skip
    warm = [median([r["warmup_s"] for r in runs[m]]) for m in ("plain", "canonical")]
    print(f"\nfirst 10 batches (start-up, buffers filling): plain {warm[0]:.2f} s, "
          f"canonical {warm[1]:.2f} s (medians)")  # fmt: skip


def paired(root: Path, rounds: int, batches: int) -> None:
    import psutil
    import torch

    torch.set_num_threads(1)
    # the control "plain, as much buffered": a plain loader whose one shuffle buffer per
    # worker holds as many samples as the canonical worker's 32 pipelines together
    buffered = 32 * SHUFFLE_BUFFER[0]
    modes = ("plain", "plain, as much buffered", "canonical")
    options: dict[str, dict[str, Any]] = {
        "plain": {},
        "plain, as much buffered": {"shuffle_buffer_size": buffered},
        "canonical": {},
    }

    def workers_cpu(pids: set[int]) -> float:
        return sum(sum(psutil.Process(pid).cpu_times()[:2]) for pid in pids)

    rows: list[dict[str, dict[str, float]]] = []
    loads = []
    for index in range(rounds):
        loads.append(os.getloadavg()[0])
        made: dict[str, Any] = {}
        pids: dict[str, set[int]] = {}
        seen = {c.pid for c in psutil.Process().children(recursive=True)}
        for mode in ab_order(list(modes), index):
            layout = (8, 8) if mode == "canonical" else None
            one = loader(root, 0, 1, 2, layout, **options[mode])
            made[mode] = (one, iter(one))
            next(made[mode][1])  # its workers started
            now = {c.pid for c in psutil.Process().children(recursive=True)}
            pids[mode], seen = now - seen, now
        for _ in range(9):  # warm-up: every pipeline's shuffle buffer filled
            for mode in modes:
                next(made[mode][1])
        start = {mode: workers_cpu(pids[mode]) for mode in modes}
        trainer = dict.fromkeys(modes, 0.0)
        samples = dict.fromkeys(modes, 0)
        for step in range(batches):
            for mode in ab_order(list(modes), step):
                before = time.thread_time()
                samples[mode] += len(next(made[mode][1]).__key__)
                trainer[mode] += time.thread_time() - before
        rows.append(
            {
                mode: {
                    "workers": 1e6 * (workers_cpu(pids[mode]) - start[mode]) / samples[mode],
                    "trainer": 1e6 * trainer[mode] / samples[mode],
                }
                for mode in modes
            }
        )
        for one, _ in made.values():
            one.close()
    table = []
    for label, part in (("CPU us/sample", None), ("of which workers", "workers"),
                        ("of which trainer", "trainer")):  # fmt: skip

        def value(row: dict[str, float], part: str | None = part) -> float:
            return row["workers"] + row["trainer"] if part is None else row[part]

        cells = [label, *(fmt_num(median([value(r[mode]) for r in rows])) for mode in modes)]
        for control in modes[:2]:
            cells += _overhead([value(r["canonical"]) / value(r[control]) - 1 for r in rows])
        table.append(cells)
    print(f"\npaired (batches in turn, one process), {rounds} rounds x {batches} batches of "
          f"{BATCH} each, shuffle buffer {SHUFFLE_BUFFER[0]} per pipeline ({buffered} per "
          f"worker in the control), load average {min(loads):.1f}-{max(loads):.1f}\n")  # fmt: skip
    print(markdown_table(["figure", "plain 1 x 2", "plain 1 x 2, as much buffered",
                          "canonical (8, 8) on 1 x 2", "against plain (median of rounds)",
                          "per-round spread", "against as much buffered", "per-round spread"],
                         table))  # fmt: skip


def chain(root: Path, rounds: int, batches: int) -> None:
    import torch

    from energon_lite.loader.savable_dataset import _save
    from energon_lite.resume.state_delta import unchanged_marked

    torch.set_num_threads(1)
    layouts = {"plain": None, "canonical (1, 2)": (1, 2), "canonical (8, 8)": (8, 8)}
    rows: list[dict[str, float]] = []
    loads = []
    for _ in range(rounds):
        loads.append(os.getloadavg()[0])
        chains, sent = {}, {}
        for mode, layout in layouts.items():
            dataset = loader(root, 0, 1, 2, layout).dataset
            chains[mode] = dataset.pipeline.build(dataset.worker_config.slot(0, 0))
            chains[mode].restore_state(None)
            sent[mode] = None
        cpu = dict.fromkeys(layouts, 0.0)
        samples = dict.fromkeys(layouts, 0)
        for step in range(-10, batches):  # 10 warm-up batches fill every shuffle buffer
            for mode in ab_order(list(layouts), step):
                before = time.thread_time()
                batch = chains[mode].next()
                sent[mode] = unchanged_marked(sent[mode], _save(chains[mode]))
                if step >= 0:
                    cpu[mode] += time.thread_time() - before
                    samples[mode] += len(batch.__key__)
                del batch
        rows.append({mode: 1e6 * cpu[mode] / samples[mode] for mode in layouts})
    table = []
    for mode in layouts:
        per_round = [row[mode] / row["plain"] - 1 for row in rows]
        table.append(
            [
                mode,
                fmt_num(median([row[mode] for row in rows])),
                *_overhead(per_round),
            ]
        )
    print(f"\nchain (worker 0's chain of each, in this process, batches in turn), {rounds} "
          f"rounds x {batches} batches of {BATCH}, load average {min(loads):.1f}-"
          f"{max(loads):.1f}\n")  # fmt: skip
    print(markdown_table(["chain", "CPU us/sample", "against plain (median of rounds)",
                          "per-round spread"], table))  # fmt: skip


def state(root: Path, steps: int) -> None:
    import msgpack

    from energon_lite.testing import take

    options: dict[str, Any] = dict(batch_size=64, max_samples_per_sequence=10)
    rows = []
    saved: dict[tuple[int, int], list[Any]] = {}
    for buffer in (16, None):
        for world, workers in ((1, 2), (4, 2), (32, 1)):
            states = []
            for rank in range(world if world < 32 else 1):  # of 32 ranks: rank 0's alone
                one = loader(root, rank, world, workers, (32, 32), **options,
                             shuffle_buffer_size=buffer)  # fmt: skip
                take(one, steps)
                states.append(one.save_state_rank())
                one.close()
            if buffer:
                saved[(world, workers)] = states
            sizes = [len(msgpack.packb(s)) for s in states]
            rows.append([f"{world} x {workers}", f"{1024 // world}", str(buffer),
                         f"{max(sizes) / 1024:.1f} KB"])  # fmt: skip
    print(f"\nstate at K x Q = 1024, canonical (32, 32), after {steps} steps (batch 64), "
          f"load {os.getloadavg()[0]:.1f}\n")  # fmt: skip
    print(markdown_table(["layout", "pipelines per rank", "shuffle buffer per pipeline",
                          "state per rank (msgpack)"], rows))  # fmt: skip
    options["shuffle_buffer_size"] = 16
    rows = []
    for old, new in (((1, 2), (1, 2)), ((4, 2), (4, 2)), ((4, 2), (1, 2)), ((1, 2), (4, 2))):
        start = time.perf_counter()
        one = loader(root, 0, new[0], new[1], (32, 32), **options)
        built = time.perf_counter()
        one.restore_state_global(saved[old])
        restored = time.perf_counter()
        next(iter(one))
        done = time.perf_counter()
        one.close()
        rows.append(
            [
                f"{old[0]} x {old[1]} -> {new[0]} x {new[1]}",
                f"{built - start:.2f} s",
                f"{restored - built:.2f} s",
                f"{done - restored:.2f} s",
                f"{done - start:.2f} s",
            ]
        )
    print(f"\nrestore at K x Q = 1024 (rank 0), load {os.getloadavg()[0]:.1f}\n")
    print(
        markdown_table(["restore", "build", "restore_state_global", "first batch", "total"], rows)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).parent / "data")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--samples", type=int, default=8000)
    parser.add_argument("--state-batches", type=int, default=40)
    parser.add_argument("--only", choices=["throughput", "paired", "chain", "state"])
    parser.add_argument(
        "--shuffle-buffer", type=int, default=100, help="per pipeline, throughput/paired/chain"
    )
    parser.add_argument("--child", choices=["plain", "canonical"])
    args = parser.parse_args()
    SHUFFLE_BUFFER[0] = args.shuffle_buffer
    if args.child:
        child_throughput(args.data, args.child, args.batches)
        return
    print(f"{platform.python_version()}, {os.cpu_count()} cores")
    images = prepared(
        args.data / f"canonical_images_{args.samples}",
        args.samples,
        128,
        "CaptioningSample",
        {"image": "jpg", "caption": "txt"},
    )
    texts = prepared(args.data / "canonical_texts_40000", 40_000, 8, "TextSample", {"text": "txt"})
    if args.only in (None, "throughput"):
        throughput(images, args.rounds, args.batches)
    if args.only in (None, "paired"):
        paired(images, args.rounds, args.batches)
    if args.only in (None, "chain"):
        chain(images, args.rounds, args.batches)
    if args.only in (None, "state"):
        state(texts, args.state_batches)


if __name__ == "__main__":
    main()
