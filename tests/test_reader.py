"""Reader: slices dealt across global workers, once per epoch, shuffled per epoch, exact resume."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import pytest

from energon_lite.errors import StateError
from energon_lite.shards.dataset import PreparedDataset
from energon_lite.stages.reader import Reader
from energon_lite.state.restore_key import SampleKey
from energon_lite.testing import assert_stage_resumes, take


def _reader(ds: PreparedDataset, g: int = 0, G: int = 1, **kwargs) -> Reader:
    options = {
        "leaf_id": 0,
        "seed": 7,
        "worker_index": g,
        "num_workers": G,
        "max_samples_per_sequence": 8,
        "shuffle": True,
        "repeat": False,
        "open_slices": 3,
    }
    options.update(kwargs)
    return Reader(ds, **options)


@pytest.mark.parametrize("G", [1, 3, 4])
def test_every_sample_once_per_epoch_across_workers(train_ds: Path, G: int) -> None:
    ds = PreparedDataset(train_ds, "train")
    keys = [s["__key__"] for g in range(G) for s in _reader(ds, g, G)]
    assert sorted(keys) == [f"{i:06d}" for i in range(120)]


def test_slices_are_sequential_runs_and_order_changes_per_epoch(train_ds: Path) -> None:
    ds = PreparedDataset(train_ds, "train")
    single = list(_reader(ds, open_slices=1))
    slice_of = [(s["__restore_key__"].shard, s["__restore_key__"].sample // 8) for s in single]
    runs = [slice_of[0]]
    for previous, current in itertools.pairwise(slice_of):
        if current != previous:
            runs.append(current)
    assert (
        len(runs) == len(set(runs)) == 18
    )  # 6 shards of 20 -> slices of 8, 8, 4, each read in one go
    indices = [int(s["__key__"]) for s in single]
    assert indices != sorted(indices)
    reader = _reader(ds, repeat=True)
    epoch0 = [s["__key__"] for s in take(reader, 120)]
    epoch1 = [s["__key__"] for s in take(reader, 120)]
    assert sorted(epoch0) == sorted(epoch1) and epoch0 != epoch1
    assert {s["__restore_key__"].epoch for s in take(reader, 120)} == {2}


def test_val_order_is_sequential_and_deterministic(split_ds: Path) -> None:
    ds = PreparedDataset(split_ds, "val")
    keys = [
        s["__key__"]
        for s in _reader(ds, shuffle=False, open_slices=1, max_samples_per_sequence=None)
    ]
    assert keys == [f"{160 + i:06d}" for i in range(20)]


def test_shuffle_over_epochs_multiplier(train_ds: Path) -> None:
    ds = PreparedDataset(train_ds, "train")
    two = _reader(ds, repeat=True, shuffle_over_epochs_multiplier=2, open_slices=1)
    per_slice = Counter()
    for sample in take(two, 240):  # two epochs: every slice read exactly twice
        per_slice[(sample["__restore_key__"].shard, sample["__restore_key__"].sample // 8)] += 1
    sizes = {(shard, part): 8 if part < 2 else 4 for shard in range(6) for part in range(3)}
    assert per_slice == Counter({slice_: 2 * size for slice_, size in sizes.items()})
    keys = Counter(
        s["__key__"] for s in take(_reader(ds, repeat=True, shuffle_over_epochs_multiplier=2), 240)
    )
    assert set(keys.values()) == {2}
    drawn = Counter(
        s["__key__"] for s in take(_reader(ds, repeat=True, shuffle_over_epochs_multiplier=-1), 240)
    )
    assert (
        max(drawn.values()) > 2 or len(drawn) < 120
    )  # with replacement: some repeat, some missing
    ordered = [
        s["__key__"] for s in _reader(ds, shuffle_over_epochs_multiplier=None, open_slices=1)
    ]
    assert ordered == sorted(ordered)


def test_fetch_by_restore_key(train_ds: Path) -> None:
    ds = PreparedDataset(train_ds, "train")
    reader = _reader(ds)
    for sample in take(reader, 10):
        again = reader.fetch(sample["__restore_key__"])
        assert again == sample
    with pytest.raises(StateError, match="not a restore key of mine"):
        reader.fetch(SampleKey(5, 0, 0, 0))


def test_exact_resume_at_every_step(train_ds: Path) -> None:
    ds = PreparedDataset(train_ds, "train")
    assert_stage_resumes(lambda: _reader(ds, 1, 2, repeat=True), 150, every=7)
    assert_stage_resumes(lambda: _reader(ds, 0, 2))


def test_corrupt_states_are_refused(train_ds: Path) -> None:
    ds = PreparedDataset(train_ds, "train")
    reader = _reader(ds)
    state = reader.save_state()
    with pytest.raises(StateError, match="state belongs to stage 'ShuffleBuffer', not 'Reader'"):
        reader.restore_state({**state, "type": "ShuffleBuffer"})
    with pytest.raises(StateError, match=r"state is missing \['open'\]"):
        reader.restore_state({k: v for k, v in state.items() if k != "open"})
    with pytest.raises(StateError, match="slice 999 outside"):
        reader.restore_state({**state, "open": [[999, 0]]})


@pytest.mark.parametrize("multiplier", [None, 1, 3, -1])
def test_samples_per_worker_matches_what_workers_read(
    train_ds: Path, multiplier: int | None
) -> None:
    ds = PreparedDataset(train_ds, "train")
    for epoch in (0, 4):
        expected = [
            sum(
                1
                for _ in _reader(
                    ds,
                    g,
                    4,
                    shuffle_over_epochs_multiplier=multiplier,
                    start_epoch=epoch,
                    max_samples_per_sequence=7,
                )
            )
            for g in range(4)
        ]
        counts = _reader(
            ds, 0, 4, shuffle_over_epochs_multiplier=multiplier, max_samples_per_sequence=7
        ).samples_per_worker(epoch)
        assert counts.tolist() == expected


def test_no_multiplier_through_the_api_reads_the_slices_in_order(text_ds: Path) -> None:
    """``get_train_dataset(shuffle_over_epochs_multiplier=None)`` reads a training split's
    slices in order, as Energon does (a fractional ``repetitions`` then takes the first
    samples). Before: the typed options turned None into 1, and the slices were shuffled."""
    from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset

    dataset = get_train_dataset(
        text_ds,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0, seed_offset=42),
        batch_size=1,
        shuffle_buffer_size=None,
        shuffle_over_epochs_multiplier=None,
        parallel_shard_iters=1,
        max_samples_per_sequence=None,
        repeat=False,
    )
    keys = [key for batch in get_savable_loader(dataset) for key in batch.__key__]
    assert keys == sorted(keys) and len(keys) == 200
