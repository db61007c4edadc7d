"""What a worker's state costs to send with every batch: whole, or as what changed.

A worker saves its chain's state after every batch and sends it with the batch; the trainer
keeps it, so that it can save any step (``resume/state_delta.py``). This benchmark builds
real chains (worker 0 of 1 rank x 2 workers, in this process) and, for every batch they
make, times the two ways of moving the state just saved to the trainer, on the same state:

* ``whole``: pickled in the worker, unpickled in the trainer and kept until the next batch
  (what a plain chain did before its long lists travelled as changes);
* ``changes``: :func:`unchanged_marked` against the state sent before, pickled, unpickled,
  and :func:`with_unchanged` against the trainer's copy, checked equal to the state saved
  (what a worker sends; the trainer now keeps the bytes and unpickles and applies them only
  when a save reads the states, ``resume/sent_state.py``, so this column is what a save
  costs per batch since the last one, and what the trainer spent per batch before).

Chains: one caption dataset (8x8 JPEGs) with a shuffle buffer of 100, 300, 1,000 and
3,200 samples, and a blend of ``--leaves`` such datasets (equal weights, shuffle buffer 100),
whose readers' states travel as saved. Batches of 16 (a worker's share of a global batch of 32), thread
CPU time per batch, the two ways alternating batch by batch (the order swapped every
batch); medians over ``--batches`` batches after the buffers filled; the bytes pickled.

    python benchmarks/bench_state_transport.py [--data DIR] [--batches 300] [--leaves 64]
"""

from __future__ import annotations

import argparse
import os
import pickle
import platform
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fmt_num, markdown_table, median

BATCH = 16


def prepared(folder: Path, samples: int) -> Path:
    """A prepared caption dataset of 8x8 JPEGs (written once)."""
    from bench_canonical import prepared as prepared_once

    return prepared_once(folder, samples, 8, "CaptioningSample", {"image": "jpg", "caption": "txt"})


def blend(root: Path, leaves: int) -> Path:
    """A metadataset of ``leaves`` caption datasets of 400 samples each, equal weights."""
    for index in range(leaves):
        prepared(root / f"leaf_{index}", 400)
    path = root / f"blend_{leaves}.yaml"
    entries = "".join(f"      - path: ./leaf_{i}\n        weight: 1\n" for i in range(leaves))
    path.write_text(
        "__module__: energon_lite\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        f"    blend:\n{entries}"
    )
    return path


def chain(path: Path, shuffle_buffer: int) -> Any:
    import energon_lite as el

    dataset = el.get_train_dataset(
        path,
        worker_config=el.WorkerConfig(rank=0, world_size=1, num_workers=2),
        batch_size=BATCH,
        shuffle_buffer_size=shuffle_buffer,
        max_samples_per_sequence=100,
    )
    built = dataset.pipeline.build(dataset.worker_config.slot(0, 0))
    built.restore_state(None)
    return built


def measure(built: Any, batches: int) -> dict[str, float]:
    from energon_lite.resume.state_delta import unchanged_marked, with_unchanged

    sent_before: Any = None
    trainer: Any = None
    kept: Any = None

    def whole(state: Any) -> int:
        nonlocal kept
        sent = pickle.dumps(state, pickle.HIGHEST_PROTOCOL)
        kept = pickle.loads(sent)  # kept until the next batch, as the trainer does
        return len(sent)

    def changes(state: Any) -> int:
        nonlocal trainer
        sent = pickle.dumps(unchanged_marked(sent_before, state), pickle.HIGHEST_PROTOCOL)
        trainer = with_unchanged(trainer, pickle.loads(sent))
        return len(sent)

    ways = {"whole": whole, "changes": changes}
    cpu: dict[str, list[float]] = {way: [] for way in ways}
    size: dict[str, list[int]] = {way: [] for way in ways}
    for step in range(-10, batches):  # 10 batches first: the buffers fill
        built.next()
        state = built.save_state()
        order = list(ways) if step % 2 == 0 else list(ways)[::-1]
        for way in order:
            before = time.thread_time()
            nbytes = ways[way](state)
            if step >= 0:
                cpu[way].append(time.thread_time() - before)
                size[way].append(nbytes)
        if trainer != state:
            raise AssertionError("the trainer's state differs from the worker's")
        sent_before = state  # the worker keeps the state it sent either way (not timed)
    return {
        **{f"{way} us": 1e6 * (median(cpu[way]) or 0) for way in ways},
        **{f"{way} bytes": median([float(n) for n in size[way]]) or 0 for way in ways},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).parent / "data")
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--leaves", type=int, default=64)
    args = parser.parse_args()
    print(f"{platform.python_version()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    root = args.data / "state_transport"
    one = prepared(root / "one", 20_000)
    cases = [(f"1 dataset, buffer {n}", one, n) for n in (100, 300, 1000, 3200)]
    cases.append((f"blend of {args.leaves}, buffer 100", blend(root, args.leaves), 100))
    rows = []
    for label, path, shuffle_buffer in cases:
        got = measure(chain(path, shuffle_buffer), args.batches)
        rows.append(
            [
                label,
                fmt_num(got["whole us"], 1),
                fmt_num(got["changes us"], 1),
                fmt_num(got["whole bytes"]),
                fmt_num(got["changes bytes"]),
            ]
        )
    print(f"\nper batch of {BATCH}, median of {args.batches} batches, load "
          f"{os.getloadavg()[0]:.1f}\n")  # fmt: skip
    print(markdown_table(["chain", "whole: CPU us", "as changes: CPU us", "whole: bytes",
                          "as changes: bytes"], rows))  # fmt: skip


if __name__ == "__main__":
    main()
