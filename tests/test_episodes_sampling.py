"""Sampling stages: pool composition and determinism, full coverage, exact resume."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from energon_lite.errors import ConfigError, StateError
from energon_lite.flavors.episodes.index import scan_episodes
from energon_lite.flavors.episodes.permutation import KeyedPermutation
from energon_lite.flavors.episodes.pool import EpisodePool, choose_pool
from energon_lite.flavors.episodes.sweep import EpisodeSweep
from energon_lite.flavors.episodes.transitions import TransitionBuilder
from energon_lite.synth.episodes import write_dataset
from energon_lite.testing import assert_stage_resumes

UNIT = {"qpos_mean": 0.0, "qpos_std": 1.0, "action_mean": 0.0, "action_std": 1.0}
LENGTHS = [5, 1, 3, 7, 2, 1, 4, 6, 2, 3]  # 34 starts; even ids positive


@pytest.fixture(scope="module")
def builder(tmp_path_factory):
    folder = write_dataset(tmp_path_factory.mktemp("eps"), LENGTHS, image_size=(4, 4))
    return TransitionBuilder(scan_episodes(folder), ["cam_high"], UNIT, chunk_size=3)


def pool_stage(builder, g=0, G=1, rank=0, world=1, **kw):
    kw = {
        "episodes_per_epoch": 4,
        "positive_ratio": 0.75,
        "steps_per_epoch": 3,
        "batch_size": 2,
        **kw,
    }
    return EpisodePool(builder, 7, g, G, rank, world, **kw)


def keys(stage, n):
    return [tuple(stage.next()["__restore_key__"][1:]) for _ in range(n)]


def test_pool_composition_and_determinism_per_seed_epoch_rank(builder):
    index = builder.index
    pools = {}
    for epoch in range(4):
        for rank in range(3):
            pool = choose_pool(index, 7, epoch, rank, 4, 0.75)
            assert len(set(pool.tolist())) == 4 and index.labels[pool].sum() == 3
            assert pool.tolist() == choose_pool(index, 7, epoch, rank, 4, 0.75).tolist()
            pools[epoch, rank] = tuple(pool)
    assert len(set(pools.values())) > 8  # ranks and epochs do not share pools
    # epoch_seed + rank * 1000 made (e + 1000, r) == (e, r + 1); the derived key does not
    collide = [
        choose_pool(index, 0, e + 1000, 0, 5, 0.6).tolist()
        == choose_pool(index, 0, e, 1, 5, 0.6).tolist()
        for e in range(20)
    ]
    assert sum(collide) <= 2
    base = choose_pool(index, 7, 0, 0, 4, 0.75).tolist()
    assert any(choose_pool(index, seed, 0, 0, 4, 0.75).tolist() != base for seed in (8, 9, 10))


def test_pool_draws_come_from_the_pool_and_split_per_worker(builder):
    stage = pool_stage(builder, steps_per_epoch=5, batch_size=4)
    drawn = keys(stage, 20)
    pool = set(stage.pool(0).tolist())
    assert {e for e, _ in drawn} <= pool and stage.save_state()["epoch"] == 0
    assert all(0 <= t < LENGTHS[e] for e, t in drawn)
    stage.next()
    assert stage.save_state() == {"type": "EpisodePool", "epoch": 1, "position": 1}
    # 5 steps of 4 over 2 ranks x 3 workers: each rank's workers draw 2, 2, 1 batches
    shares = [
        pool_stage(builder, g, 6, g // 3, 2, steps_per_epoch=5, batch_size=4).samples_per_epoch
        for g in range(6)
    ]
    assert shares == [8, 8, 4, 8, 8, 4]
    idle = pool_stage(builder, 3, 4, 0, 1, steps_per_epoch=3)
    with pytest.raises(StopIteration):
        idle.next()
    finite = pool_stage(builder, num_epochs=2)
    assert len(list(finite)) == 12


def test_pool_draws_are_uniform_over_pool_frames(builder):
    stage = pool_stage(builder, steps_per_epoch=3000, batch_size=1, episodes_per_epoch=4)
    pool = stage.pool(0)
    counts = Counter(e for e, _ in keys(stage, 3000))
    frames = builder.index.lengths[pool]
    for episode, n in zip(pool.tolist(), frames.tolist()):
        assert abs(counts[episode] / 3000 - n / frames.sum()) < 0.04


def test_pool_settings_are_checked(builder):
    with pytest.raises(ConfigError, match=r"positive_ratio=1\.5"):
        pool_stage(builder, positive_ratio=1.5)
    with pytest.raises(ConfigError, match=r"needs 6 positive .* has 5"):
        pool_stage(builder, episodes_per_epoch=6, positive_ratio=1.0)
    with pytest.raises(ConfigError, match="episodes_per_epoch=11"):
        pool_stage(builder, episodes_per_epoch=11)
    with pytest.raises(ConfigError, match="not a worker of rank=1"):
        pool_stage(builder, g=0, G=4, rank=1, world=2)


def test_full_mode_covers_every_start_once_per_epoch_over_2_ranks_x_2_workers(builder):
    all_starts = [(e, t) for e, n in enumerate(LENGTHS) for t in range(n)]
    stages = [EpisodeSweep(builder, 3, g, 4, g // 2, 2) for g in range(4)]
    per_epoch = [s.per_epoch for s in stages]
    assert sum(per_epoch) == len(all_starts)
    orders = []
    for _epoch in range(2):
        streams = [keys(s, n) for s, n in zip(stages, per_epoch)]
        seen = [k for stream in streams for k in stream]
        assert sorted(seen) == all_starts  # exactly once
        assert len({tuple(s) for s in streams}) == 4  # workers produce different streams
        orders.append(streams[0])
    assert orders[0] != orders[1]  # a new permutation every epoch
    assert stages[0].save_state()["epoch"] == 1
    with pytest.raises(ConfigError, match="rank 1 gets no start frame"):
        EpisodeSweep(builder, 3, 40, 80, 1, 2)


def test_pool_workers_and_ranks_produce_different_streams(builder):
    streams = [keys(pool_stage(builder, g, 4, g // 2, 2), 6) for g in range(4)]
    assert len({tuple(s) for s in streams}) == 4
    assert keys(pool_stage(builder, 1, 4, 0, 2), 6) == streams[1]  # but each is deterministic


@pytest.mark.parametrize("mode", ["pool", "full"])
def test_exact_resume_at_every_step(builder, mode):
    if mode == "pool":
        assert_stage_resumes(lambda: pool_stage(builder, 1, 2, 0, 1), 25, every=3)
    else:  # a finite sweep: every resumed stream runs to the same end
        assert_stage_resumes(
            lambda: EpisodeSweep(builder, 5, 1, 3, 0, 1, num_epochs=1), None, every=3
        )


def test_corrupt_or_foreign_state_raises_state_error(builder):
    stage = pool_stage(builder)
    with pytest.raises(StateError, match="belongs to stage 'EpisodeSweep'"):
        stage.restore_state({"type": "EpisodeSweep", "epoch": 0, "position": 0})
    with pytest.raises(StateError, match="missing"):
        stage.restore_state({"type": "EpisodePool", "epoch": 0})
    with pytest.raises(StateError, match="position=99"):
        stage.restore_state({"type": "EpisodePool", "epoch": 0, "position": 99})
    sweep = EpisodeSweep(builder, 0, 0, 1, 0, 1)
    with pytest.raises(StateError, match="corrupt"):
        sweep.restore_state({"type": "EpisodeSweep", "epoch": -1, "position": 0})
    item = sweep.next()
    assert sweep.fetch(item["__restore_key__"])["__key__"] == item["__key__"]


@pytest.mark.parametrize("n", [1, 2, 3, 34, 1000, 4097])
def test_keyed_permutation_is_a_bijection(n):
    perm = KeyedPermutation(n, 1, "full", 0)[np.arange(n)]
    assert sorted(perm.tolist()) == list(range(n))
    if n > 3:
        assert perm.tolist() != list(range(n))
        assert perm.tolist() != KeyedPermutation(n, 1, "full", 1)[np.arange(n)].tolist()
