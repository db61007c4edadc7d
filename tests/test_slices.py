"""The readers' dealing: each global worker reads the sample range Energon gives it, and a
state saved before the dealing was recorded continues with the old slice round robin."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import make_dataset

from energon_lite import WorkerConfig, get_loader, get_savable_loader, get_train_dataset
from energon_lite.resume.levels import walk_states
from energon_lite.shards.dataset import PreparedDataset
from energon_lite.stages.slices import RangeSlices
from energon_lite.state.codec import state_digest
from energon_lite.testing import take


@pytest.fixture(scope="module")
def one_shard(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """100 samples in one shard (the README's and bench's max_samples_per_sequence)."""
    return make_dataset(tmp_path_factory.mktemp("one_shard"), 100, 100)


def _dataset(path: Path, wc: WorkerConfig, **over: Any) -> Any:
    options: dict[str, Any] = dict(
        batch_size=10, shuffle_buffer_size=None, max_samples_per_sequence=100, repeat=False
    )
    options.update(over)
    return get_train_dataset(path, worker_config=wc, **options)


def _numbers(batch: Any) -> list[int]:
    return [int(key) for key in batch.__key__]


def test_one_shard_two_workers_both_deliver(one_shard: Path) -> None:
    """100 samples, one shard, 2 worker processes, max_samples_per_sequence=100: worker 1
    used to get nothing (the one slice went to worker 0)."""
    dataset = _dataset(one_shard, WorkerConfig(rank=0, world_size=1, num_workers=2))
    assert dataset.pipeline.samples_per_epoch(dataset.worker_config) == [50, 50]
    batches = take(get_loader(dataset), None)
    assert len(batches) == 10
    # the loader polls the workers in turn: even batches are worker 0's, odd ones worker 1's
    assert all(n < 50 for batch in batches[0::2] for n in _numbers(batch))
    assert all(n >= 50 for batch in batches[1::2] for n in _numbers(batch))
    assert sorted(n for batch in batches for n in _numbers(batch)) == list(range(100))


def test_each_worker_reads_energons_range(tmp_path: Path) -> None:
    """Every global worker's chain reads exactly the samples Energon's Sharder assigns it,
    ranges spanning shard boundaries (70 samples in shards of 20, 2 ranks x 3 workers)."""
    sharder = pytest.importorskip("megatron.energon.flavors.webdataset.sharder").Sharder
    energon_worker = pytest.importorskip("megatron.energon.worker")
    path = make_dataset(tmp_path / "ds", 70, 20)
    world, workers = 2, 3
    for rank in range(world):
        wc = WorkerConfig(rank=rank, world_size=world, num_workers=workers)
        dataset = _dataset(path, wc, max_samples_per_sequence=4, batch_size=None)
        config = energon_worker.WorkerConfig(rank=rank, world_size=world, num_workers=workers)
        offsets = sharder.split_samples_to_workers(0, 70, config)
        for worker in range(workers):
            chain = dataset.pipeline.build(wc.slot(worker))
            chain.restore_state(None)
            read = []
            while True:
                try:
                    read.append(int(chain.next().__key__))
                except StopIteration:
                    break
            assert sorted(read) == list(range(offsets[worker], offsets[worker + 1]))


def test_fewer_samples_than_workers_is_said_once_with_the_numbers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = make_dataset(tmp_path / "tiny", 3, 3)
    wc = WorkerConfig(rank=0, world_size=1, num_workers=4)
    with caplog.at_level(logging.WARNING, logger="energon_lite"):
        first = _dataset(path, wc)
        _dataset(path, wc)
    told = [r.getMessage() for r in caplog.records if "fewer than" in r.getMessage()]
    assert len(told) == 1, told
    assert "3 samples" in told[0] and "1 x 4 = 4 global workers" in told[0]
    assert "1 workers get no sample" in told[0]
    assert sorted(first.pipeline.samples_per_epoch(wc)) == [0, 1, 1, 1]


def test_slices_never_cross_runs_or_workers(train_ds: Path) -> None:
    """Slices hold at most max_samples_per_sequence samples of one shard and one worker."""
    ds = PreparedDataset(train_ds, "train", subset=(13, 97))
    table = RangeSlices(ds, 7, 5, seed=0, leaf=0, multiplier=1)
    starts, ends = table.extents(np.arange(table.num_slices))
    shards = table.shard_of(np.arange(table.num_slices))
    assert ((ends - starts) <= 7).all() and ((ends - starts) >= 1).all()
    for g in range(5):
        ids = np.arange(table.worker_first[g], table.worker_first[g + 1])
        assert int((ends[ids] - starts[ids]).sum()) == table.dealt(g)
    pairs = {(int(s), i) for s, a, b in zip(shards, starts, ends) for i in range(a, b)}
    assert len(pairs) == len(ds) == 84


def _as_saved_before_dealing(state: dict[str, Any]) -> dict[str, Any]:
    """A state as an energon_lite without the ``dealing`` field wrote it."""
    for tree in state["workers"]:
        for level in walk_states(tree):
            if level.get("type") == "Reader":
                assert level.pop("dealing") == "slices"
    state["digest"] = state_digest(state)
    return state


def test_a_state_without_dealing_continues_with_the_old_dealing(train_ds: Path) -> None:
    wc = WorkerConfig(rank=0, world_size=1, num_workers=2, seed_offset=3)

    def loader(dealing: str) -> Any:
        dataset = _dataset(
            train_ds, wc, batch_size=4, shuffle_buffer_size=6, max_samples_per_sequence=10
        )
        dataset.pipeline.options.dealing = dealing  # a loader of the version before it
        return get_savable_loader(dataset)

    old = loader("slices")
    take(old, 5)
    state = _as_saved_before_dealing(old.save_state_rank())
    expected = [_numbers(b) for b in take(old, 6)]
    old.close()
    new = loader("ranges")
    new.restore_state_rank(state)
    assert [_numbers(b) for b in take(new, 6)] == expected
    saved = new.save_state_rank()
    dealings = {
        level["dealing"]
        for tree in saved["workers"]
        for level in walk_states(tree)
        if level.get("type") == "Reader"
    }
    assert dealings == {"slices"}  # the restored dealing goes on in later states
    new.close()
    fresh = loader("ranges")
    take(fresh, 1)
    readers = [lv for lv in walk_states(fresh.save_state_rank()["workers"][0])]
    assert {lv["dealing"] for lv in readers if lv.get("type") == "Reader"} == {"ranges"}
    fresh.close()


def test_a_rank_without_samples_of_one_leaf_saves_and_restores(tmp_path: Path) -> None:
    """Energon's few-samples case: a blend of 55, 7 and 55 samples over 32 ranks; rank 0
    owns 4 samples (none of the middle leaf) and resumes exactly from a state."""
    from energon_lite import prepare_dataset
    from energon_lite.synth.shards import write_captioning_shards

    lines = ["__module__: energon_lite", "__class__: MetadatasetV2", "splits:", "  train:"]
    lines.append("    blend:")
    for name, count in (("ds1", 55), ("ds2", 7), ("ds3", 55)):
        write_captioning_shards(
            tmp_path / name, count, 10, image_size=(8, 8), key_format=name + "{:03d}"
        )
        prepare_dataset(
            tmp_path / name,
            split_ratio=[("train", 1)],
            sample_type="TextSample",
            field_map={"text": "txt"},
            progress=False,
        )
        lines += ["      - weight: 1", f"        path: {name}"]
    (tmp_path / "few.yaml").write_text("\n".join(lines) + "\n")
    wc = WorkerConfig(rank=0, world_size=32, num_workers=1, seed_offset=42)

    def loader() -> Any:
        dataset = _dataset(
            tmp_path / "few.yaml",
            wc,
            batch_size=1,
            shuffle_buffer_size=100,
            repeat=True,
            max_samples_per_sequence=None,
        )
        assert len(dataset) == 4
        counts = [r.dealt_samples() for r in dataset.pipeline.readers(wc.slot(0))]
        assert counts == [2, 0, 2]  # Energon's rank 0: the middle leaf's 7 go to others
        return get_savable_loader(dataset)

    first = loader()
    take(first, 3)
    state = first.save_state_rank()
    expected = [b.__key__ for b in take(first, 5)]
    first.close()
    second = loader()
    second.restore_state_rank(state)
    assert [b.__key__ for b in take(second, 5)] == expected
    assert {key[0][:3] for key in expected} <= {"ds1", "ds3"}
    second.close()
