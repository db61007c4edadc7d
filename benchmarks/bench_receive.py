"""What receiving a batch costs the trainer's process when it reads every batch.

A training loop reads each batch it gets: a copy to the GPU, into pinned memory, or a
normalisation. The W1 loader of ``bench_pipeline.py`` (20,000 256x256 JPEGs + captions,
batch 32 of float images = 25 MB, shuffle buffer 100, 2 workers) runs here with a trainer
that copies each batch's images into one preallocated tensor (what ``.to(device)`` or a
pinned copy does to the source pages). Printed as one ``RESULT {json}`` line: the trainer
process's CPU time per sample (its main thread and torch's, user + system) and samples/s
over ``--batches`` batches after ``--warmup``.

Meant for A/B runs of two checkouts with ``ab_versions.py``::

    python benchmarks/ab_versions.py --trees ../before . --rounds 6 --metric trainer_cpu_us \\
        -- python {tree}/benchmarks/bench_receive.py

``--unpickle LOOPS`` measures the trainer's part without worker processes or load: worker 0's
chain runs in this process as in a worker (torch's worker info set, so the chain sends what a
worker sends), and its first ``--items`` items (logical worker, batch, state), each batch's
image tensor left out, are pickled as torch's queue pickles them; then each is unpickled and
handed to the loader's position as the trainer does, ``LOOPS`` times. Printed: that part's CPU
time per sample (``time.thread_time``). Under callgrind the instructions per sample are the
difference of two runs (``LOOPS`` and 0) over ``LOOPS x items x 32``, the items made once
without callgrind and kept in ``--items-file``::

    python benchmarks/bench_receive.py --samples 4000 --unpickle 0 --items-file items.pkl
    valgrind --tool=callgrind python benchmarks/bench_receive.py --samples 4000 \\
        --unpickle 10 --items-file items.pkl
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import pickle
import time
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import torch
from bench_pipeline import BATCH_SIZE, MAX_SAMPLES_PER_SEQUENCE, SHUFFLE_BUFFER, build_dataset

import energon_lite as el


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--batches", type=int, default=150)
    parser.add_argument("--unpickle", type=int, default=None, metavar="LOOPS")
    parser.add_argument("--items", type=int, default=20)
    parser.add_argument(
        "--items-file",
        type=Path,
        default=None,
        help="--unpickle: the items "
        "pickled once and kept here (a run under callgrind then only loads them)",
    )
    args = parser.parse_args(argv)
    root = build_dataset(args.samples)
    torch.set_num_threads(1)
    if args.unpickle is not None:
        unpickle_only(root, args.workers, args.items, args.unpickle, args.items_file)
        return
    dataset = w1_dataset(root, args.workers)
    loader = el.get_savable_loader(dataset)
    batches = iter(loader)
    target: torch.Tensor | None = None
    for _ in range(args.warmup):
        batch = next(batches)
        target = torch.empty_like(batch.image)
    assert target is not None
    samples = 0
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(args.batches):
        batch = next(batches)
        target.copy_(batch.image)
        samples += int(batch.image.shape[0])
        del batch
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    loader.close()
    result = {"trainer_cpu_us": cpu / samples * 1e6, "samples_per_s": samples / wall}
    print("RESULT " + json.dumps(result), flush=True)


def w1_dataset(root: Path, workers: int) -> Any:
    """The W1 training dataset of ``bench_pipeline.py`` on 1 rank x ``workers``."""
    return el.get_train_dataset(
        root,
        worker_config=el.WorkerConfig(rank=0, world_size=1, num_workers=workers),
        batch_size=BATCH_SIZE,
        shuffle_buffer_size=SHUFFLE_BUFFER,
        max_samples_per_sequence=MAX_SAMPLES_PER_SEQUENCE,
    )


def unpickle_only(
    root: Path, workers: int, items: int, loops: int, items_file: Path | None
) -> None:
    """See the module docstring (``--unpickle``)."""
    from energon_lite.resume.position import Position

    if items_file is not None and items_file.exists():
        sent = pickle.loads(items_file.read_bytes())
    else:
        sent = worker_items(root, workers, items)
        if items_file is not None:
            items_file.write_bytes(pickle.dumps(sent))
    position = Position.start(max(1, workers))
    cpu = time.thread_time()
    for _ in range(loops):
        for data in sent:
            logical, _batch, state = pickle.loads(data)
            position.received(logical, state)
    cpu = time.thread_time() - cpu
    samples = max(1, loops * len(sent) * BATCH_SIZE)
    result = {"unpickle_us": cpu / samples * 1e6, "bytes_per_item": sum(map(len, sent)) / len(sent)}
    print("RESULT " + json.dumps(result), flush=True)


def worker_items(root: Path, workers: int, items: int) -> list[bytes]:
    """Worker 0's first ``items`` items as torch's queue pickles them, image tensors left out."""
    from torch.utils.data._utils import worker as torch_worker

    dataset = w1_dataset(root, workers)
    # as in torch's worker 0 (a private name: a benchmark's shortcut, not the loader's)
    torch_worker._worker_info = torch_worker.WorkerInfo(
        id=0, num_workers=workers, seed=0, dataset=dataset
    )
    sent: list[bytes] = []
    for item in itertools.islice(dataset.iter_with_state(None, 0, 0), items):
        logical, batch, state = pickle.loads(item.data)  # a worker yields its item pickled
        batch = dataclasses.replace(batch, image=None)  # the tensor travels as a descriptor
        sent.append(bytes(ForkingPickler.dumps((logical, batch, state))))  # as torch's queue
    torch_worker._worker_info = None
    return sent


if __name__ == "__main__":
    main()
