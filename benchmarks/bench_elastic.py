"""Elastic restore (issue 14): 8 ranks x 4 workers saved, restored on 12 ranks x 4 workers.

Dataset: the 20,000-sample pipeline dataset of ``bench_pipeline.py`` (256x256 JPEGs +
captions, built on first use under ``benchmarks/data/``); batch 32, shuffle buffer 100,
max_samples_per_sequence 100, as there. The ranks are simulated in one process
(``WorkerConfig(rank, world_size, 4)`` per loader; real worker processes).

1. The old job: each of the 8 ranks delivers ``--batches`` batches (mid-epoch, every shuffle
   buffer full) and saves ``save_state_rank()``.
2. Per round, alternating the order (A/B), for a few ranks of each layout:
   * same layout: a rank of 8 x 4 runs ``restore_state_global(old_states)`` (which
     restores its own state as before) and takes its first batch;
   * elastic: a rank of 12 x 4 runs ``restore_state_global(old_states)`` (which
     redistributes the 8 states over 12 ranks, then restores its share) and takes its
     first batch.
   The clock runs from building the dataset to receiving the first batch.
3. ``redistribute`` alone (all 12 new states), and the state sizes (msgpack bytes per rank):
   the old states, the new states at restore, and the elastic rank's state after its first
   batch (the leftover is carried until that rank has delivered it).

    python benchmarks/bench_elastic.py [--rounds 3] [--batches 3]
"""

from __future__ import annotations

import argparse
import time
import warnings
from typing import Any

from bench_pipeline import BATCH_SIZE, MAX_SAMPLES_PER_SEQUENCE, SHUFFLE_BUFFER, build_dataset
from common import ab_order, fmt_bytes, markdown_table, median

OLD, NEW, WORKERS = (8, 12, 4)


def make_loader(root: Any, rank: int, world: int) -> Any:
    from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset

    return get_savable_loader(
        get_train_dataset(
            root,
            worker_config=WorkerConfig(rank, world, WORKERS),
            batch_size=BATCH_SIZE,
            shuffle_buffer_size=SHUFFLE_BUFFER,
            max_samples_per_sequence=MAX_SAMPLES_PER_SEQUENCE,
        )
    )


def restore_to_first_batch(
    root: Any, states: list[Any], rank: int, world: int
) -> tuple[float, Any]:
    start = time.perf_counter()
    loader = make_loader(root, rank, world)
    loader.restore_state_global(states)
    next(iter(loader))
    elapsed = time.perf_counter() - start
    after = loader.save_state_rank()
    loader.close()
    return elapsed, after


def main() -> None:
    from energon_lite.resume.elastic import redistribute
    from energon_lite.state.codec import encode_state

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=3, help="batches per old rank")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message=".*worker processes in total.*")
    root = build_dataset(args.samples)

    states = []
    for rank in range(OLD):
        old = make_loader(root, rank, OLD)
        batches = iter(old)
        for _ in range(args.batches):
            next(batches)
        states.append(old.save_state_rank())
        old.close()

    redist = []
    for _ in range(5):
        start = time.perf_counter()
        new_states = redistribute(states, NEW, WORKERS)
        redist.append(time.perf_counter() - start)

    cases = {
        "same layout (8 x 4)": (OLD, [0, 3, 7]),
        "elastic (8 x 4 -> 12 x 4)": (NEW, [0, 5, 11]),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    after_size: list[int] = []
    ratios = []
    for round_index in range(args.rounds):
        this_round: dict[str, list[float]] = {name: [] for name in cases}
        for name in ab_order(list(cases), round_index):
            world, ranks = cases[name]
            for rank in ranks:
                elapsed, after = restore_to_first_batch(root, states, rank, world)
                this_round[name].append(elapsed)
                if world == NEW:
                    after_size.append(len(encode_state(after)))
        for name in cases:
            times[name] += this_round[name]
        same, elastic = (median(this_round[name]) for name in cases)
        ratios.append(elastic / same)

    def sizes(values: list[Any]) -> str:
        lengths = sorted(len(encode_state(v)) for v in values)
        return f"{fmt_bytes(median(lengths))} (max {fmt_bytes(lengths[-1])})"

    rows = []
    for name, values in times.items():
        rows.append(
            [name, f"{median(values):.2f} s", f"{min(values):.2f}-{max(values):.2f} s", len(values)]
        )
    print(markdown_table(["restore -> first batch", "median", "spread", "runs"], rows))
    print(
        f"\nelastic / same layout, median of per-round ratios: {median(ratios):.2f} "
        f"(rounds: {', '.join(f'{r:.2f}' for r in ratios)})"
    )
    print()
    print(
        markdown_table(
            ["what", "value"],
            [
                [
                    "redistribute() of 8 rank states into 12 (median of 5)",
                    f"{median(redist) * 1000:.1f} ms",
                ],
                ["old state per rank (8 x 4, msgpack)", sizes(states)],
                ["new state per rank at restore (12 x 4)", sizes(new_states)],
                ["elastic rank's state after its first batch", f"{fmt_bytes(median(after_size))}"],
            ],
        )
    )


if __name__ == "__main__":
    main()
