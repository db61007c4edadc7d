"""Dealing a split's samples to global workers by contiguous ranges, as Megatron-Energon does.

megatron-energon (installed with the dev extras) is the oracle: its ``Sharder`` computes
the same per-worker sample ranges from the same counts.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from conftest import oracle

from energon_lite.stages.dealing import (
    bit_reversal_order,
    deal_ranges,
    worker_bounds,
    worker_sample_counts,
)

sharder_module = oracle("megatron.energon.flavors.webdataset.sharder")
energon_worker = oracle("megatron.energon.worker")


def test_bit_reversal_is_energons() -> None:
    assert bit_reversal_order(8) == (0, 4, 2, 6, 1, 5, 3, 7)
    for n in range(1, 80):
        assert list(bit_reversal_order(n)) == list(
            sharder_module.Sharder._generalized_bit_reversal(n)
        ), n


@pytest.mark.parametrize(
    ("total", "world", "workers"),
    [(50, 1, 4), (55, 3, 5), (117, 100, 0), (220, 2, 30), (100, 1, 2), (7, 2, 4), (0, 2, 2)],
)
def test_worker_ranges_are_energons(total: int, world: int, workers: int) -> None:
    G = world * max(1, workers)
    for rotation in sorted({0, 1, 7 % G, (G - 1)}):
        bounds = worker_bounds(total, G, rotation)
        for rank in range(world):
            config = energon_worker.WorkerConfig(rank=rank, world_size=world, num_workers=workers)
            expected = sharder_module.Sharder.split_samples_to_workers(
                0, total, config, rotation_offset=rotation
            )
            per_rank = max(1, workers)
            assert bounds[rank * per_rank : (rank + 1) * per_rank + 1].tolist() == list(expected)


def test_every_worker_gets_a_share_when_there_is_a_sample_per_worker() -> None:
    for total, G in itertools.product(range(1, 40), range(1, 12)):
        counts = worker_sample_counts(total, G)
        assert counts.sum() == total
        assert counts.max() - counts.min() <= 1
        if total >= G:
            assert counts.min() >= 1, (total, G)


def test_deal_ranges_cover_the_split_once_across_shard_boundaries() -> None:
    # three runs (shards) of 30, 5 and 20 samples, the second starting at sample 10 of its shard
    starts, ends = np.array([0, 10, 0]), np.array([30, 15, 20])
    seen = []
    for worker in range(4):
        parts = deal_ranges(starts, ends, worker, 4)
        seen += [(run, i) for run, begin, end in parts for i in range(begin, end)]
        assert sum(end - begin for _, begin, end in parts) == worker_sample_counts(55, 4)[worker]
    expected = [(run, i) for run in range(3) for i in range(int(starts[run]), int(ends[run]))]
    assert seen == expected  # in order, each sample once
    # 55 samples over 4 workers: 14, 14, 14, 13; worker 1 owns samples 14..27
    assert deal_ranges(starts, ends, 1, 4) == [(0, 14, 28)]
    assert deal_ranges(starts, ends, 2, 4) == [(0, 28, 30), (1, 10, 15), (2, 0, 7)]


def test_deal_ranges_match_energons_shard_workers() -> None:
    structs = pytest.importorskip("megatron.energon.flavors.webdataset.structs")
    epath = pytest.importorskip("megatron.energon.epathlib")
    counts = [13, 1, 40, 7, 22]
    shards = [
        structs.ShardInfo(name=f"s{i}.tar", path=epath.EPath(f"/x/s{i}.tar"), count=c)
        for i, c in enumerate(counts)
    ]
    starts, ends = np.zeros(len(counts), dtype=np.int64), np.asarray(counts)
    cum = np.concatenate([[0], np.cumsum(counts)])
    world, workers = 3, 2
    for rank in range(world):
        config = energon_worker.WorkerConfig(rank=rank, world_size=world, num_workers=workers)
        offsets = sharder_module.Sharder.shard_workers(
            shards, config, max_samples_per_sequence=None, rotation_offset=2
        )
        for local, worker_offsets in enumerate(offsets):
            parts = deal_ranges(starts, ends, rank * workers + local, world * workers, 2)
            mine = [int(cum[run]) + i for run, begin, end in parts for i in range(begin, end)]
            assert mine == list(range(worker_offsets[0], worker_offsets[-1]))
