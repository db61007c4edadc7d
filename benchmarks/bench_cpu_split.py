"""Where W1's CPU per delivered sample goes at 2 workers: the workers, the trainer, the limit.

The W1 loader of ``bench_pipeline.py`` (256x256 JPEG + caption, batch 32, shuffle buffer 100,
float CHW images) at ``--workers`` workers; the trainer only counts each batch's images, as
``bench_peers.py`` does. Over ``--batches`` batches after ``--warmup``, CPU seconds (user +
system, ``psutil``) of the trainer's process and of each worker are divided by the samples
delivered. Against it, the decode-only limit's CPU per sample: this process reads and decodes
the same samples (``PlainTarDataset.read_parts`` + ``decode_image(jpg, "torchrgb")`` + the
caption), as each of the limit's processes in ``bench_peers.py`` does. CPU time moves less
with the machine's load than wall time, but a loaded machine still inflates it (shared
caches): rounds alternate the two measurements and the ratios are taken per round.

    python benchmarks/bench_cpu_split.py [--samples 20000] [--rounds 3] [--batches 150]

``--count worker|limit|trainer`` runs one part alone in this process for callgrind (see
``--instructions``): ``worker`` is worker 0's chain as a worker runs it (torch's worker info
set, each item pickled, its state sent as bytes) plus the pickling torch's queue does
(the image tensor through the batch memory pool); ``limit`` the decode-only loop; the
instruction count of ``N`` batches minus that of none, over the samples, is each part's
cost, start-up cancelled. ``--instructions`` runs the callgrind pairs and prints the table.
``--count tar`` parses the first shard's first 500 samples ``--batches`` times
(``tar_loop``): the tar walk's instructions per sample are the callgrind difference of
``--batches 10`` and ``--batches 0`` over 5,000.

``--steps``: instructions per sample by step, each counted as a phase of one process under
callgrind with its start-up left uncounted (``callgrind.phases``): ``STEP_SAMPLES`` raw
samples built ``--batches`` times through the chain's ``Encode`` stage, less the same
samples' decoding as the limit does it (what is left is the sample build and the decode
dispatch), the whole chain over as many samples, and the worker's loop of ``--count worker``
(chain, state, the item's pickle, the queue's pickle) over as many samples (10 batches per
loop) after 5 warm-up batches, and the decode-only limit's loop (``--count limit``) the same
way.

``--trainer``: the trainer's instructions per batch at ``--workers`` workers: the W1 loader
runs under callgrind with its workers (forked: their instrumentation stays off, so they run
uncounted) and only the trainer's main thread's ``--batches`` batches after ``--warmup`` are
counted, as one phase (``callgrind.phases``): receiving each batch (torch's iterator, the
item's unpickling, the segment's storage, the state and the loader's bookkeeping) and reading
its image's shape, as ``bench_peers.py`` does. ``--trainer --profile``: the same loop under
``cProfile`` (CPU time of the main thread), the functions with the most time of their own.

``--profile``: where a worker's CPU goes, step by step, against the limit's: both loops run
in this process under a sampling profiler (``SIGPROF`` every 0.5 ms of CPU time; each sample
is charged to the innermost frame that names a step in ``STEPS``), in microseconds per sample
(the loop's CPU time split by the samples' shares). Unlike ``cProfile`` it does not inflate
the small Python calls against the C ones.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import callgrind
import psutil
from bench_pipeline import BATCH_SIZE, PlainTarDataset, build_dataset
from bench_receive import w1_dataset
from common import fmt_num, markdown_table, median

RESULT = "RESULT "


def cpu_of(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def loader_split(root: Path, workers: int, batches: int, warmup: int) -> dict[str, float]:
    """CPU us per delivered sample of the trainer and of all workers together."""
    import energon_lite as el

    loader = el.get_savable_loader(w1_dataset(root, workers))
    iterator = iter(loader)
    for _ in range(warmup):
        next(iterator)
    me = psutil.Process()
    children = me.children(recursive=True)
    before = [cpu_of(p) for p in children]
    trainer = time.process_time()
    samples = 0
    for _ in range(batches):
        samples += int(next(iterator).image.shape[0])
    trainer = time.process_time() - trainer
    workers_cpu = sum(cpu_of(p) - b for p, b in zip(children, before))
    loader.close()
    return {"trainer_us": trainer / samples * 1e6, "workers_us": workers_cpu / samples * 1e6}


def limit_samples(root: Path, count: int) -> tuple[PlainTarDataset, list[int]]:
    dataset = PlainTarDataset(root)
    order = list(range(len(dataset)))
    random.Random(0).shuffle(order)
    return dataset, order[:count]


def limit_loop(dataset: PlainTarDataset, indices: list[int]) -> None:
    from energon_lite.decode.image import decode_image

    for index in indices:
        parts = dataset.read_parts(index)
        decode_image(parts["jpg"], "torchrgb")
        parts["txt"].decode("utf-8")


def limit_cpu(root: Path, samples: int) -> float:
    """The decode-only limit's CPU us per sample in this process."""
    dataset, indices = limit_samples(root, samples + 320)
    limit_loop(dataset, indices[:320])  # warm-up
    cpu = time.thread_time()
    limit_loop(dataset, indices[320:])
    return (time.thread_time() - cpu) / samples * 1e6


def worker_loop(root: Path, workers: int, batches: int, marks: bool = False) -> None:
    """Worker 0's chain and the queue's pickling, in this process (``--count worker``).
    ``marks``: for :func:`callgrind.phases`, the ``batches`` after the 5 warm-up ones are a
    phase of their own (``--count worker-phases``)."""
    from multiprocessing.reduction import ForkingPickler

    from torch.utils.data._utils import worker as torch_worker

    from energon_lite.batching.memory import BatchMemoryPool, Held

    class RecordingPool(BatchMemoryPool):
        """Keeps what each batch holds: the items come out pickled, as a worker sends them."""

        def collect(self) -> Held:
            held.append(super().collect())
            return held[-1]

    dataset = w1_dataset(root, workers)
    # as in torch's worker 0 (a private name: a benchmark's shortcut, not the loader's)
    torch_worker._worker_info = torch_worker.WorkerInfo(
        id=0, num_workers=workers, seed=0, dataset=dataset
    )
    pool = RecordingPool(workers, 3)
    held: list[Held] = []
    items = dataset.iter_with_state(None, 0, 0, memory=pool)
    if marks:
        callgrind.ready()
    for index, item in enumerate(itertools.islice(items, 5 + batches)):
        if marks and index == 5:  # after 5 warm-up batches, as for the limit
            callgrind.mark()
        ForkingPickler.dumps(item)
        if len(held) > 2:  # the trainer lets go of a batch two batches later
            for slot, _ in held.pop(0).segments:
                pool.flags[0, slot] = 0
    if marks:
        callgrind.mark()
    torch_worker._worker_info = None


TAR_SAMPLES = 500  # ``--count tar``: the first shard's first samples, parsed per batch


def tar_loop(root: Path, loops: int) -> None:
    """``parse_sample`` (the reader's tar walk, every header check) over the first shard's
    first ``TAR_SAMPLES`` samples, ``loops`` times, from the shard's bytes in memory."""
    import numpy as np

    from energon_lite.shards.tar import parse_sample

    path = str(PlainTarDataset(root).paths[0])
    offsets = np.fromfile(path + ".idx", dtype="<u8").tolist()[: TAR_SAMPLES + 1]
    view = memoryview(Path(path).read_bytes())
    for _ in range(loops):
        for start, end in itertools.pairwise(offsets):
            parse_sample(view[start:end], start, path)


STEP_SAMPLES = 320  # ``--steps``: raw samples built again and again, as a worker builds them


def steps_loop(root: Path, workers: int, loops: int) -> None:
    """``--steps`` (run under callgrind by :func:`step_instructions`): worker 0's chain in this
    process; phases: ``encode`` builds ``STEP_SAMPLES`` raw samples (as the shuffle buffer
    hands them out) ``loops`` times through the chain's ``Encode`` stage, ``decode`` decodes
    their parts as the limit does, ``chain`` runs the whole chain for as many samples."""
    import torch

    from energon_lite.decode.image import decode_image
    from energon_lite.stages.encode import Encode

    torch.set_num_threads(1)
    dataset = w1_dataset(root, workers)
    chain = dataset.pipeline.build(dataset.worker_config.slot(0, 0))
    chain.restore_state(None)
    encode = chain
    while not isinstance(encode, Encode):
        encode = encode.source
    for _ in range(3):  # the chain started: the buffer full, the first batches made
        chain.next()
    raws = [encode.source.next() for _ in range(STEP_SAMPLES)]
    callgrind.ready()
    callgrind.mark()  # the phase before (set-up) is left out
    with chain.context.running():
        for _ in range(loops):
            for raw in raws:
                encode.encode(raw)
    callgrind.mark()
    for _ in range(loops):
        for raw in raws:
            decode_image(raw["jpg"], "torchrgb")
            bytes(raw["txt"]).decode("utf-8")
    callgrind.mark()
    for _ in range(loops * STEP_SAMPLES // BATCH_SIZE):
        chain.next()
    callgrind.mark()


def step_instructions(root: Path, workers: int, loops: int) -> dict[str, float]:
    """``--steps``: instructions per sample of the sample build (``Encode`` less the decode
    itself), of the whole chain (no pickling) and of the worker (``--count worker``'s loop:
    the chain, the state sent, the item pickled, the queue's pickle), each counted by phase
    in a process whose start-up is not counted (callgrind's instrumentation off until then)."""
    from concurrent.futures import ThreadPoolExecutor

    def run(part: str, n: int) -> list[Any]:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--count", part]
        cmd += ["--samples", str(SAMPLES[0]), "--batches", str(n), "--workers", str(workers)]
        return callgrind.phases(cmd, {**os.environ, "PYTHONHASHSEED": "0"})[1]

    batches = loops * STEP_SAMPLES // BATCH_SIZE
    with ThreadPoolExecutor(3) as pool:
        steps = pool.submit(run, "steps", loops)
        worker = pool.submit(run, "worker-phases", batches)
        limit = pool.submit(run, "limit-phases", batches)
        phases, worker_phases, limit_phases = steps.result(), worker.result(), limit.result()
    encode, decode, chain = (sum(phases[i].values()) / (loops * STEP_SAMPLES) for i in (1, 2, 3))
    return {
        "encode": encode,
        "decode": decode,
        "build": encode - decode,
        "chain": chain,
        "worker": sum(worker_phases[1].values()) / (loops * STEP_SAMPLES),
        "limit": sum(limit_phases[1].values()) / (loops * STEP_SAMPLES),
    }


def counted(root: Path, part: str, batches: int, workers: int) -> None:
    import torch

    torch.set_num_threads(1)
    if part == "tar":
        tar_loop(root, batches)
    elif part == "steps":
        steps_loop(root, workers, batches)
    elif part == "worker-phases":
        worker_loop(root, workers, batches, marks=True)
    elif part == "limit-phases":
        dataset, indices = limit_samples(root, (5 + batches) * BATCH_SIZE)
        callgrind.ready()
        limit_loop(dataset, indices[: 5 * BATCH_SIZE])  # 5 warm-up batches, as the worker's
        callgrind.mark()
        limit_loop(dataset, indices[5 * BATCH_SIZE :])
        callgrind.mark()
    elif part == "worker":
        worker_loop(root, workers, batches)
    elif part == "trainer-phases":
        trainer_loop(root, workers, batches, WARMUP[0])
    else:
        dataset, indices = limit_samples(root, (5 + batches) * BATCH_SIZE)
        limit_loop(dataset, indices)


def trainer_loop(root: Path, workers: int, batches: int, warmup: int, profiler: Any = None) -> int:
    """The trainer's side of the W1 loader: ``batches`` batches after ``warmup``, each read
    as ``bench_peers.py`` reads it, and only those counted: a callgrind phase of their own,
    or (``profiler``) profiled. The samples received."""
    import energon_lite as el

    loader = el.get_savable_loader(w1_dataset(root, workers))
    iterator = iter(loader)
    for _ in range(warmup):
        next(iterator)
    callgrind.ready()
    callgrind.mark()
    if profiler is not None:
        profiler.enable()
    samples = 0
    for _ in range(batches):
        samples += int(next(iterator).image.shape[0])
    if profiler is not None:
        profiler.disable()
    callgrind.mark()
    loader.close()
    return samples


def trainer_instructions(root: Path, workers: int, batches: int, warmup: int) -> dict[str, float]:
    """``--trainer``: the trainer's main-thread instructions per batch and per sample."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--count", "trainer-phases"]
    cmd += ["--samples", str(SAMPLES[0]), "--batches", str(batches), "--workers", str(workers)]
    cmd += ["--warmup", str(warmup)]
    counts = callgrind.phases(cmd, {**os.environ, "PYTHONHASHSEED": "0"})[1][1]
    total = sum(counts.values())
    by_library: collections.Counter[str] = collections.Counter()
    for obj, n in counts.items():
        by_library[callgrind.library(obj)] += n
    found = {"per_batch": total / batches, "per_sample": total / (batches * BATCH_SIZE)}
    found.update({f"per_batch_{lib}": n / batches for lib, n in by_library.most_common()})
    return found


def trainer_profile(root: Path, workers: int, batches: int, warmup: int) -> None:
    """``--trainer --profile``: the trainer's loop under ``cProfile`` (main-thread CPU)."""
    import cProfile
    import pstats

    profiler = cProfile.Profile(time.thread_time)
    samples = trainer_loop(root, workers, batches, warmup, profiler)
    print(f"{samples} samples after {warmup} warm-up batches")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(30)


def instructions(root: Path, batches: int, workers: int) -> dict[str, float]:
    """Instructions per sample of each part: callgrind totals of ``batches`` batches after
    5 warm-up ones minus those of the warm-up alone, over the samples."""
    from concurrent.futures import ThreadPoolExecutor

    def total(part: str, n: int) -> int:
        args = ["--count", part, "--samples", str(SAMPLES[0]), "--batches", str(n)]
        args += ["--workers", str(workers)]
        return callgrind.whole_process(str(Path(__file__).resolve()), args, f"{part} x{n}")

    runs = [(p, n) for p in ("worker", "limit") for n in (0, batches)]
    with ThreadPoolExecutor(2) as pool:
        totals = dict(zip(runs, pool.map(lambda r: total(*r), runs)))
    return {
        p: (totals[p, batches] - totals[p, 0]) / (BATCH_SIZE * batches) for p in ("worker", "limit")
    }


SAMPLES = [20_000]
WARMUP = [10]

# (step, the functions whose frames charge a profile sample to it); the innermost frame of a
# sample that is one of these names it
STEPS = (
    ("JPEG decode (simplejpeg)", ("jpeg_turbo.py:decode_rgb", "jpeg_turbo.py:header")),
    ("uint8 HWC -> float CHW (into the batch)", ("image.py:_planar_from_hwc",)),
    ("read + tar parse", ("reader.py:next", "bench_pipeline.py:read_parts")),
    ("shuffle buffer", ("shuffle.py:next",)),
    ("item pickle + queue pickle", ("transport.py:pickled_item", "reduction.py:dumps")),
    ("state save + send", ("savable_dataset.py:_save", "sent_state.py:__call__")),
    ("slab + collate", ("batch.py:collate_or_skip", "memory.py:collect")),
    ("sample build, decode dispatch", ("encode.py:next", "bench_cpu_split.py:limit_loop")),
)


def profile(loop: Any, samples: int) -> dict[str, float]:
    """``loop()`` under a SIGPROF sampler: CPU us per sample of each step in ``STEPS``."""
    names = {name: step for step, names in STEPS for name in names}
    counts: collections.Counter[str] = collections.Counter()

    def tick(_signum: int, frame: Any) -> None:
        while frame is not None:
            code = frame.f_code
            step = names.get(f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_name}")
            if step is not None:
                counts[step] += 1
                return
            frame = frame.f_back
        counts["other"] += 1

    signal.signal(signal.SIGPROF, tick)
    signal.setitimer(signal.ITIMER_PROF, 0.0005, 0.0005)
    cpu = time.thread_time()
    loop()
    cpu = time.thread_time() - cpu
    signal.setitimer(signal.ITIMER_PROF, 0, 0)
    total = sum(counts.values()) or 1
    us = cpu / samples * 1e6
    return {"total": us, **{step: us * c / total for step, c in counts.items()}}


def profiles(root: Path, workers: int, batches: int, rounds: int) -> None:
    """``--profile``: the worker's steps and the limit's, medians over ``rounds``."""
    found: dict[str, list[dict[str, float]]] = {"worker": [], "limit": []}
    for _ in range(rounds):
        found["worker"].append(
            profile(lambda: worker_loop(root, workers, batches), (5 + batches) * BATCH_SIZE)
        )
        dataset, indices = limit_samples(root, (5 + batches) * BATCH_SIZE)
        found["limit"].append(
            profile(lambda: limit_loop(dataset, indices), len(indices))  # noqa: B023
        )
    steps = [step for step, _ in STEPS] + ["other", "total"]
    rows = [
        [step, *(fmt_num(median([r.get(step, 0.0) for r in found[p]]), 1) for p in found)]
        for step in steps
    ]
    print(markdown_table(["step", "worker us/sample", "limit us/sample"], rows))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=20_000, help="W1 size")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=150)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--instructions", action="store_true", help="count under callgrind")
    parser.add_argument("--profile", action="store_true", help="CPU per step, sampled")
    parser.add_argument("--steps", action="store_true", help="count steps under callgrind")
    parser.add_argument(
        "--trainer",
        action="store_true",
        help="the trainer's instructions per batch under callgrind (with --profile: cProfile)",
    )
    parser.add_argument(
        "--count",
        choices=(
            "worker",
            "limit",
            "tar",
            "steps",
            "worker-phases",
            "limit-phases",
            "trainer-phases",
        ),
        help=argparse.SUPPRESS,
    )
    args = parser.parse_args(argv)
    SAMPLES[0], WARMUP[0] = args.samples, args.warmup
    root = build_dataset(args.samples)
    if args.count:
        counted(root, args.count, args.batches, args.workers)
        return
    if args.trainer:
        import torch

        torch.set_num_threads(1)
        if args.profile:
            trainer_profile(root, args.workers, args.batches, args.warmup)
            return
        found = trainer_instructions(root, args.workers, args.batches, args.warmup)
        print(RESULT + json.dumps(found), flush=True)
        print(
            markdown_table(["part", "instructions"], [[k, fmt_num(v, 0)] for k, v in found.items()])
        )
        return
    if args.profile:
        import torch

        torch.set_num_threads(1)
        profiles(root, args.workers, args.batches, args.rounds)
        return
    if args.steps:
        print(RESULT + json.dumps(step_instructions(root, args.workers, args.batches)), flush=True)
        return
    if args.instructions:
        counts = instructions(root, args.batches, args.workers)
        print(RESULT + json.dumps(counts), flush=True)
        print(f"worker / limit: {counts['worker'] / counts['limit']:.3f}")
        return
    import torch

    torch.set_num_threads(1)
    rounds = []
    for index in range(args.rounds):
        parts = [
            lambda: loader_split(root, args.workers, args.batches, args.warmup),
            lambda: {"limit_us": limit_cpu(root, args.batches * BATCH_SIZE)},
        ]
        found: dict[str, float] = {}
        for part in parts if index % 2 == 0 else parts[::-1]:
            found.update(part())
        found["load"] = os.getloadavg()[0]
        print(RESULT + json.dumps(found), flush=True)
        rounds.append(found)
    rows = []
    for key in ("workers_us", "trainer_us", "limit_us"):
        rows.append([key, fmt_num(median([r[key] for r in rounds]), 1)])
    total = [(r["workers_us"] + r["trainer_us"]) / r["limit_us"] for r in rounds]
    rows.append(
        ["(workers + trainer) / limit", f"{median(total):.2f} ({min(total):.2f}-{max(total):.2f})"]
    )
    print(markdown_table(["part", "CPU us per sample (median)"], rows))


if __name__ == "__main__":
    main()
