"""The Q-chunking document's interface: QCSimpleDatasetV3, the steps warning, the frame cache."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from torch.utils.data import DataLoader

from energon_lite.errors import ConfigError
from energon_lite.flavors.episodes import (
    FrameCache,
    QCSimpleDatasetV3,
    TransitionBuilder,
    compute_norm_stats,
    create_qc_dataloader_v3,
    open_episode_index,
)
from energon_lite.synth.episodes import write_dataset

LENGTHS = [5, 3, 8, 2, 6, 4, 1, 7]
CAMS = ["cam_high", "cam_left_wrist"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("qc"), LENGTHS, images="jpeg", image_size=(8, 8))


def make(folder, **kw):
    return QCSimpleDatasetV3(
        folder, CAMS, compute_norm_stats(folder), 4, episodes_per_epoch=4, positive_ratio=0.5, **kw
    )


def test_len_is_total_starts_of_the_pool_and_stats_agree(folder):
    ds = make(folder, epoch_seed=3)
    assert len(ds) == ds.total_starts == sum(ds.episode_lengths)
    assert len(ds.loaded_episodes) == 4 and sum(ds.episode_labels) == 2
    for loaded, length in zip(ds.loaded_episodes, ds.episode_lengths):
        assert loaded["qpos"].shape == (length, 4)  # the low-dim arrays are really loaded
    stats = ds.get_stats()
    assert stats["total_possible_starts"] == len(ds)
    assert stats["loaded_episodes"] == 4 and stats["positive_ratio"] == 0.5


def test_getitem_ignores_the_index_and_draws_from_the_pool(folder):
    ds = make(folder, epoch_seed=0)
    pool_paths = {e["path"] for e in ds.loaded_episodes}
    keys = [ds[0]["__key__"] for _ in range(60)]
    assert len(set(keys)) > 5  # the same index, many different transitions
    assert {k.rsplit("/", 1)[0] for k in keys} <= pool_paths


def test_refresh_epoch_loads_another_pool(folder):
    ds = make(folder, epoch_seed=0)
    pools = {tuple(e["episode"] for e in ds.loaded_episodes)}
    for seed in range(1, 6):
        ds.refresh_epoch(seed)
        assert ds.epoch_seed == seed and ds.get_stats()["epoch_seed"] == seed
        pools.add(tuple(e["episode"] for e in ds.loaded_episodes))
        assert len(ds) == sum(LENGTHS[e["episode"]] for e in ds.loaded_episodes)
    assert len(pools) > 1


@pytest.mark.filterwarnings("error::UserWarning")  # e.g. torch on a read-only cached frame
def test_plain_dataloader_with_shuffle_and_two_workers(folder):
    ds = make(folder, epoch_seed=1, frame_cache_bytes=1 << 20)
    loader = DataLoader(ds, batch_size=3, shuffle=True, num_workers=2, drop_last=True)
    batches = list(loader)
    assert len(batches) == len(ds) // 3
    batch = batches[0]
    assert batch["actions"].shape == (3, 4, 4)
    assert batch["observations"]["images"].shape == (3, 2, 8, 8, 3)
    assert batch["observations"]["qpos"].shape == (3, 4)
    assert "depth_images" not in batch["observations"]  # None cannot be default-collated
    for key in ("rewards", "masks", "valid", "terminals"):
        assert batch[key].shape == (3, 4)
    pool_paths = {e["path"] for e in ds.loaded_episodes}
    drawn = [k for b in batches for k in b["__key__"]]
    assert {k.rsplit("/", 1)[0] for k in drawn} <= pool_paths
    # both workers draw, with different torch seeds: not one repeated sequence
    assert len(set(drawn)) > len(drawn) // 3


def test_val_type_uses_every_episode_and_honours_the_index(folder):
    ds = make(folder, dataset_type="val")
    assert len(ds) == sum(LENGTHS)
    assert ds[0]["__key__"].endswith("episode_0.hdf5/0")
    assert ds[5]["__key__"].endswith("episode_1.hdf5/0")
    with pytest.raises(IndexError):
        ds[len(ds)]
    with pytest.raises(ConfigError):
        make(folder, dataset_type="eval")


def test_steps_per_epoch_not_above_total_starts_warns_with_both_numbers(folder):
    norm = compute_norm_stats(folder)
    args = {"episodes_per_epoch": 4, "batch_size": 2, "positive_ratio": 0.5, "num_workers": 0}
    with pytest.warns(UserWarning, match=r"steps_per_epoch=3 is not > total_possible_starts=\d+"):
        dataset, _ = create_qc_dataloader_v3(folder, CAMS, norm, 4, steps_per_epoch=3, **args)
    starts = dataset.get_stats()["total_possible_starts"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        create_qc_dataloader_v3(folder, CAMS, norm, 4, steps_per_epoch=starts + 1, **args)


def test_frame_cache_stays_within_budget_and_returns_identical_frames(tmp_path):
    folder = write_dataset(tmp_path, [6, 5, 7], images="jpeg", image_size=(16, 16), texture=True)
    index = open_episode_index(folder)
    norm = compute_norm_stats(folder)
    frame_bytes = 16 * 16 * 3
    budget = 7 * frame_bytes  # 3.5 transitions of 2 cameras (one entry: both cameras)
    plain = TransitionBuilder(index, CAMS, norm, 3)
    cached = TransitionBuilder(index, CAMS, norm, 3, frame_cache_bytes=budget)
    cache = cached.reader.frame_cache
    assert isinstance(cache, FrameCache)
    rng = np.random.default_rng(0)
    draws = [(int(e), int(rng.integers(0, [6, 5, 7][e]))) for e in rng.integers(0, 3, 200)]
    for episode, start in draws:
        a = plain.build(episode, start)["observations"]["images"]
        b = cached.build(episode, start)["observations"]["images"]
        assert a.dtype == b.dtype and np.array_equal(a, b)
        assert cache.held_bytes <= budget and len(cache) <= 3
    assert cache.hits > 0 and cache.evictions > 0
    assert cache.held_bytes == sum(f.nbytes for f in cache._frames.values())
    # a cached frame cannot be changed by a caller
    first = next(iter(cache._frames.values()))
    with pytest.raises(ValueError):
        first[0, 0, 0] = 1
    cache.retain([0])
    assert {k[0] for k in cache._frames} <= {0}
    # prefill decodes every frame of the episodes, still within the budget
    assert cached.prefill([0, 1, 2]) == 6 + 5 + 7
    assert cache.held_bytes <= budget and len(cache) == 3


def test_frame_cache_refuses_a_bad_budget_and_skips_oversized_frames():
    with pytest.raises(ConfigError, match="budget_bytes"):
        FrameCache(-1)
    cache = FrameCache(10)
    big = np.zeros(11, dtype=np.uint8)
    assert cache.get((0, 0, "k"), lambda: big) is big
    assert len(cache) == 0 and cache.held_bytes == 0
