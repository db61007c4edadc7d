"""A state restored into another micro-batch size (Energon's ``checkpoint redist`` scenario
that halves it and doubles the gradient accumulation): every global batch keeps its samples.
Where the batch size is part of the stream, the restore is refused naming why."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from energon_lite import (
    StateError,
    WorkerConfig,
    get_savable_loader,
    get_train_dataset,
    get_val_dataset,
)
from energon_lite.testing import take

NUM_SAMPLES = 200  # the text_ds fixture


def _loader(root: Path, rank: int, world: int, workers: int, batch: int | None, **kw: Any) -> Any:
    dataset = get_train_dataset(
        root,
        worker_config=WorkerConfig(rank=rank, world_size=world, num_workers=workers),
        batch_size=batch,
        shuffle_buffer_size=10,
        max_samples_per_sequence=5,
        **kw,
    )
    return get_savable_loader(dataset)


def _global_batches(per_rank: list[list[list[str]]], micro: int, size: int) -> list[list[str]]:
    """The run's global batches of ``size``: each takes ``accumulation`` steps of every rank."""
    accumulation = size // (micro * len(per_rank))
    steps = len(per_rank[0])
    return [
        sorted(
            key for step in range(s, s + accumulation) for rank in per_rank for key in rank[step]
        )
        for s in range(0, steps, accumulation)
    ]


def _run(root: Path, world: int, workers: int, micro: int, steps: int, states=None) -> Any:
    """Each rank's next ``steps`` micro-batches (from ``states`` if given) and its state."""
    per_rank, saved = [], []
    for rank in range(world):
        loader = _loader(root, rank, world, workers, micro)
        if states is not None:
            loader.restore_state_rank(states[rank])
        per_rank.append([list(batch.__key__) for batch in take(loader, steps)])
        saved.append(loader.save_state_rank())
        loader.close()
    return per_rank, saved


@pytest.mark.parametrize(("saved", "micro", "size"), [(2, 1, 8), (4, 2, 16), (4, 1, 16)])
def test_a_smaller_micro_batch_size_keeps_every_global_batch(
    text_ds: Path, saved: int, micro: int, size: int
) -> None:
    """2 ranks x 2 workers at micro-batch ``saved`` save after 3 steps; restored at ``micro``
    with the gradient accumulation raised to keep the global batch ``size`` (2 -> 1 of 8:
    Energon's scenario; each rank's accumulation steps visit both workers alike), the run's
    next global batches are the ones the uninterrupted run makes."""
    _, states = _run(text_ds, 2, 2, saved, 3)
    expected, _ = _run(text_ds, 2, 2, saved, 32 // saved, states)
    resumed, _ = _run(text_ds, 2, 2, micro, 32 // micro, states)
    assert all(len(batch) == micro for rank in resumed for batch in rank)
    assert _global_batches(resumed, micro, size) == _global_batches(expected, saved, size)


@pytest.mark.parametrize(("saved", "micro"), [(2, 4), (4, 3)])
def test_a_larger_or_not_dividing_micro_batch_size_is_refused(
    text_ds: Path, saved: int, micro: int
) -> None:
    old = _loader(text_ds, 0, 1, 0, saved)
    take(old, 3)
    with pytest.raises(
        StateError, match=rf"state has {saved}, this loader has {micro}\. .* divides"
    ):
        _loader(text_ds, 0, 1, 0, micro).restore_state_rank(old.save_state_rank())


def test_a_state_of_another_micro_batch_size_moves_elastically(text_ds: Path) -> None:
    """Saved on 2 x 2 at micro-batch 2, restored with restore_state_global on 1 x 3 at
    micro-batch 1: the rest of the epoch, every sample once."""
    before, states = [], []
    for rank in range(2):
        loader = _loader(text_ds, rank, 2, 2, 2, repeat=False)
        before += [key for batch in take(loader, 5) for key in batch.__key__]
        states.append(loader.save_state_rank())
        loader.close()
    loader = _loader(text_ds, 0, 1, 3, 1, repeat=False)
    loader.restore_state_global(states)
    after = [key for batch in loader for key in batch.__key__]
    loader.close()
    assert Counter(before + after) == Counter(f"{i:06d}" for i in range(NUM_SAMPLES))


def test_batching_turned_off_is_refused(text_ds: Path) -> None:
    old = _loader(text_ds, 0, 1, 0, 2)
    take(old, 3)
    with pytest.raises(
        StateError, match=r"state has 2, this loader has None\. .* turned on or off"
    ):
        _loader(text_ds, 0, 1, 0, None).restore_state_rank(old.save_state_rank())


def test_a_limit_counted_in_batches_is_refused(text_ds: Path) -> None:
    def val(batch: int) -> Any:
        wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
        dataset = get_val_dataset(
            text_ds, split_part="train", worker_config=wc, batch_size=batch, limit=40
        )
        return get_savable_loader(dataset)

    old = val(2)
    take(old, 3)
    with pytest.raises(
        StateError, match=r"state has 2, this loader has 1\. .*limit=40 counts batches"
    ):
        val(1).restore_state_rank(old.save_state_rank())
