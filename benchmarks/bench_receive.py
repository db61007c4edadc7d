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
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from bench_pipeline import BATCH_SIZE, MAX_SAMPLES_PER_SEQUENCE, SHUFFLE_BUFFER, build_dataset

import energon_lite as el


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--batches", type=int, default=150)
    args = parser.parse_args(argv)
    root = build_dataset(args.samples)
    torch.set_num_threads(1)
    dataset = el.get_train_dataset(
        root,
        worker_config=el.WorkerConfig(rank=0, world_size=1, num_workers=args.workers),
        batch_size=BATCH_SIZE,
        shuffle_buffer_size=SHUFFLE_BUFFER,
        max_samples_per_sequence=MAX_SAMPLES_PER_SEQUENCE,
    )
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


if __name__ == "__main__":
    main()
