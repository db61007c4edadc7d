"""``loader.stats()``: the counts add up across stages and match the batches delivered."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import make_dataset

from energon_lite import (
    CaptioningSample,
    TaskEncoder,
    WorkerConfig,
    get_loader,
    get_savable_loader,
    get_train_dataset,
)
from energon_lite.errors import ConfigError


class CaptionLength(TaskEncoder):
    """A per-sample hook, so that the stats show it apart from decoding."""

    def encode_sample(self, sample: CaptioningSample) -> CaptioningSample:
        sample.caption = sample.caption.upper()
        return sample


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("stats") / "captions", 200, 25)


def _dataset(root: Path, workers: int, **kwargs):
    return get_train_dataset(
        root,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=workers),
        batch_size=8,
        shuffle_buffer_size=20,
        max_samples_per_sequence=10,
        **kwargs,
    )


def _by_name(stats: dict) -> dict[str, dict]:
    return {stage["name"]: stage for stage in stats["stages"]}


def _check_shares(stats: dict) -> None:
    shares = [stage["fraction"] for stage in stats["stages"]]
    assert all(0 <= share <= 1 for share in shares)
    # own times (inclusive minus the parents' calls) never add up to more than the busy time
    assert 0.3 < sum(shares) <= 1.0 + 1e-9
    assert sum(shares) + stats["other"]["fraction"] == pytest.approx(1.0, abs=1e-6)
    for worker in stats["workers"]:
        assert 0 < worker["busy_fraction"] <= 1 and worker["idle_s"] >= 0
    busy = sum(worker["busy_s"] for worker in stats["workers"])
    assert busy >= sum(stage["time_s"] for stage in stats["stages"]) > 0
    assert 0 <= stats["wait_fraction"] <= 1
    assert stats["samples_per_s"] > 0


def test_stats_in_process_add_up(dataset_path: Path) -> None:
    loader = get_savable_loader(_dataset(dataset_path, 0, task_encoder=CaptionLength()), stats=True)
    delivered = []
    for step, batch in enumerate(loader):
        delivered.append(len(batch.__key__))
        assert batch.caption[0].isupper()
        if step == 11:
            break
    stats = loader.stats()
    stages = _by_name(stats)
    assert list(stages) == ["Reader", "ShuffleBuffer", "Encode", "encode_sample", "Batch"]
    assert stats["batches"] == 12 and stats["samples"] == sum(delivered) == 96
    reader, shuffle, encode, hook, batch = stages.values()
    assert reader["items_in"] is None and reader["feeds"] == "ShuffleBuffer"
    assert shuffle["items_in"] == reader["items_out"]
    # a buffer: what went in and did not come out is what it holds now (it fills to 20
    # and hands one out)
    assert shuffle["items_in"] - shuffle["items_out"] == shuffle["held"] == 19
    assert shuffle["capacity"] == 20 and 0 < shuffle["mean_held"] <= 20
    assert encode["items_in"] == encode["items_out"] == 96 and encode["held"] == 0
    assert hook["inside"] == "Encode" and hook["items_out"] == 96
    assert batch["items_in"] == 96 and batch["items_out"] == 12 and batch["feeds"] is None
    assert [w["batches"] for w in stats["workers"]] == [12]
    _check_shares(stats)

    for _ in zip(range(3), loader):  # the next pass continues the same stream
        pass
    assert loader.stats()["samples"] == 96 + 24


def test_stats_two_workers_whole_epoch(dataset_path: Path) -> None:
    loader = get_loader(_dataset(dataset_path, 2, repeat=False), stats=True)
    keys = [key for batch in loader for key in batch.__key__]
    stats = loader.stats()
    stages = _by_name(stats)
    assert len(keys) == len(set(keys)) == 200
    assert stats["samples"] == 200 and stats["batches"] == 26  # 13 per worker, the last of 4
    assert sorted(w["worker"] for w in stats["workers"]) == [0, 1]
    assert sum(w["batches"] for w in stats["workers"]) == 26
    # both workers' counters, at the end of the epoch: every buffer drained
    assert stages["Reader"]["items_out"] == stages["ShuffleBuffer"]["items_out"] == 200
    assert stages["ShuffleBuffer"]["held"] == 0
    assert stages["ShuffleBuffer"]["capacity"] == 40  # 20 per worker
    assert stages["Encode"]["items_out"] == stages["Batch"]["items_in"] == 200
    _check_shares(stats)


def test_stats_needs_the_option(dataset_path: Path) -> None:
    loader = get_savable_loader(_dataset(dataset_path, 0))
    next(iter(loader))
    with pytest.raises(ConfigError, match="stats=True"):
        loader.stats()
    fresh = get_savable_loader(_dataset(dataset_path, 0), stats=True)
    assert fresh.stats()["samples"] == 0 and fresh.stats()["stages"] == []


class PackInPairsGroupByParity(TaskEncoder):
    """Packs samples in pairs and batches packs in buckets by parity: two holding stages."""

    def select_samples_to_pack(self, samples: list) -> list[list]:
        return [samples[i : i + 2] for i in range(0, len(samples), 2)]

    def pack_selected_samples(self, samples: list) -> CaptioningSample:
        return samples[0]

    def batch_group_criterion(self, sample: CaptioningSample) -> tuple[str, int]:
        return ("even" if int(sample.__key__[-1]) % 2 == 0 else "odd"), 3


def test_stats_of_packing_and_grouping_buffers(dataset_path: Path) -> None:
    """Each holding stage says what it holds: Pack its buffer and selected groups (capacity
    packing_buffer_size), GroupBatch its buckets (no capacity)."""
    dataset = _dataset(
        dataset_path, 0, task_encoder=PackInPairsGroupByParity(), packing_buffer_size=6
    )
    loader = get_savable_loader(dataset, stats=True)
    for _ in zip(range(5), loader):
        pass
    stages = _by_name(loader.stats())
    assert list(stages) == ["Reader", "ShuffleBuffer", "Encode", "Pack", "GroupBatch"]
    pack, group = stages["Pack"], stages["GroupBatch"]
    assert pack["capacity"] == 6 and 0 < pack["mean_held"] <= 6
    assert pack["items_in"] - 2 * pack["items_out"] == pack["held"]  # packs of two
    assert group["capacity"] is None and group["mean_held"] is not None
    assert group["items_in"] - group["items_out"] * 3 == group["held"]  # batches of three
    assert loader.stats()["samples"] == 15
