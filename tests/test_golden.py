"""A pinned literal order: any change to slice permutation, interleaving, shuffling or worker
round robin shows up here (worker 0 owns samples 0-59, worker 1 60-119: the dealing by sample
ranges). If a change of order is intended, update GOLDEN and say so in the
commit message (it changes every user's data order for a given seed)."""

from __future__ import annotations

from pathlib import Path

from energon_lite import WorkerConfig, get_loader, get_train_dataset
from energon_lite.testing import take

GOLDEN = [
    "000001", "000040", "000020", "000002", "000072", "000091", "000070", "000081",
    "000022", "000033", "000035", "000034", "000062", "000071", "000060", "000092",
    "000042", "000032", "000036", "000021", "000085", "000082", "000073", "000064",
]  # fmt: skip


def test_shuffled_order_is_pinned(train_ds: Path) -> None:
    wc = WorkerConfig(rank=0, world_size=1, num_workers=2, seed_offset=42)
    dataset = get_train_dataset(
        train_ds,
        worker_config=wc,
        batch_size=4,
        shuffle_buffer_size=10,
        max_samples_per_sequence=10,
    )
    assert [k for batch in take(get_loader(dataset), 6) for k in batch.__key__] == GOLDEN
