"""What a restore's checks of a state cost (issue 41): the digest walk (which also bounds
nesting and integers) and the ownership check (every buffered key and open slice, once).

A canonical (32, 32) run, 1,024 logical pipelines with a 16-sample shuffle buffer each, on
1 rank x 0 workers (in-process), batch 64, saved after 40 steps: 16,384 buffered keys in one
rank's state, the largest state ``docs/resume.md`` describes. Dataset: 20,480 captions of
8x8 JPEGs in shards of 20 (built on first use under a temporary folder). Each check runs
``--rounds`` times; the table gives the median and the range.

    python benchmarks/bench_restore_checks.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from common import markdown_table, median


def saved_state(root: Path) -> dict:
    from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset, prepare_dataset
    from energon_lite.synth.shards import write_captioning_shards
    from energon_lite.testing import take

    write_captioning_shards(root, 20_480, 20, image_size=(8, 8))
    prepare_dataset(
        root, split_ratio=[("train", 1)], sample_type="TextSample",
        field_map={"text": "txt"}, progress=False,
    )  # fmt: skip
    loader = get_savable_loader(
        get_train_dataset(
            root,
            worker_config=WorkerConfig(0, 1, 0),
            batch_size=64,
            shuffle_buffer_size=16,
            max_samples_per_sequence=20,
            canonical_layout=(32, 32),
        )
    )
    take(loader, 40)
    state = loader.save_state_rank()
    loader.close()
    return state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    from energon_lite.resume.levels import registered_classes, walk_states
    from energon_lite.resume.ownership import check_ownership
    from energon_lite.resume.rank_state import RankState
    from energon_lite.state.codec import state_digest
    from energon_lite.state.compact import unpacked

    with tempfile.TemporaryDirectory() as folder:
        state = unpacked(saved_state(Path(folder)))
    keys = sum(
        len(level.get("keys", []))
        for tree in state["workers"]
        for level in walk_states(tree)
        if level.get("type") == "ShuffleBuffer"
    )
    timings: dict[str, list[float]] = {"digest (nesting and integer bounds)": [], "ownership": []}
    for _ in range(args.rounds):
        start = time.perf_counter()
        state_digest(state)
        timings["digest (nesting and integer bounds)"].append(time.perf_counter() - start)
        start = time.perf_counter()
        rank = RankState.read(state)
        check_ownership([rank], registered_classes(rank.workers))
        timings["ownership"].append(time.perf_counter() - start)
    print(f"one rank's state: {keys:,} buffered keys, {args.rounds} rounds\n")
    rows = [
        [
            name,
            f"{median(values) * 1e3:.1f} ms",
            f"{min(values) * 1e3:.1f}-{max(values) * 1e3:.1f} ms",
        ]
        for name, values in timings.items()
    ]
    print(markdown_table(["check", "median", "range"], rows))


if __name__ == "__main__":
    main()
