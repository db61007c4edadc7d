"""The episode pipeline through the real loader: batches, stats, exact resume, val mode."""

from __future__ import annotations

import itertools

import pytest

from energon_lite.errors import StateError
from energon_lite.flavors.episodes import (
    EpisodePipeline,
    TransitionBuilder,
    compute_norm_stats,
    create_qc_dataloader_v3,
    scan_episodes,
)
from energon_lite.synth.episodes import write_dataset
from energon_lite.worker import WorkerConfig

LENGTHS = [5, 3, 8, 2, 6, 4, 1, 7]
CAMS = ["cam_high", "cam_left_wrist"]
# small test pools: the document's steps_per_epoch > total_starts advice does not apply
pytestmark = pytest.mark.filterwarnings("ignore:steps_per_epoch=")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("eps"), LENGTHS, images="jpeg", image_size=(8, 8))


def make(folder, **kw):
    args = {"episodes_per_epoch": 4, "batch_size": 3, "epoch_seed": 1, "positive_ratio": 0.5,
            "steps_per_epoch": 4, "num_workers": 2, "pin_memory": False, **kw}  # fmt: skip
    return create_qc_dataloader_v3(folder, CAMS, compute_norm_stats(folder), 5, **args)


def restore_keys(batches):
    return [tuple(map(tuple, b["__restore_key__"])) for b in batches]


def test_batches_have_a_leading_batch_dim_and_stats_describe_the_pool(folder):
    dataset, loader = make(folder)
    batch = next(iter(loader))
    assert batch["actions"].shape == (3, 5, 4)
    assert batch["observations"]["qpos"].shape == (3, 4)
    assert batch["observations"]["images"].shape == (3, 2, 8, 8, 3)
    assert batch["observations"]["depth_images"] is None
    for key in ("rewards", "masks", "valid", "terminals"):
        assert batch[key].shape == (3, 5)
    assert batch["is_positive"].dtype.is_floating_point is False and batch[
        "final_reward"
    ].shape == (3,)
    stats = dataset.get_stats()
    pool = dataset.pipeline.stats(1, 0, 0)
    assert stats == pool and stats["loaded_episodes"] == 4 and stats["positive_ratio"] == 0.5
    dataset.refresh_epoch(3)  # only changes which epoch the stats describe
    assert dataset.get_stats() == dataset.pipeline.stats(1, 3, 0)
    assert len(loader) == 4


def test_loader_resume_is_exact_with_two_workers(folder):
    _, loader = make(folder)
    it = iter(loader)
    head = list(itertools.islice(it, 5))
    state = loader.save_state_rank()
    tail = restore_keys(itertools.islice(it, 7))
    _, fresh = make(folder)
    fresh.restore_state_rank(state)
    assert restore_keys(itertools.islice(iter(fresh), 7)) == tail
    assert len(set(restore_keys(head))) > 1
    _, other = make(folder, batch_size=2)
    with pytest.raises(StateError, match="batch_size"):
        other.restore_state_rank(state)


def test_ranks_draw_from_different_pools(folder):
    pools = [make(folder, rank=r, world_size=2)[0].get_stats() for r in range(2)]
    first = [
        restore_keys(itertools.islice(iter(make(folder, rank=r, world_size=2)[1]), 4))
        for r in range(2)
    ]
    assert first[0] != first[1]
    assert all(p["loaded_episodes"] == 4 for p in pools)


def test_val_visits_every_start_once_per_pass(folder):
    _, loader = make(folder, dataset_type="val", batch_size=4)
    seen = [k for batch in loader for k in restore_keys([batch])[0]]
    assert sorted((e, t) for _, e, t in seen) == [
        (e, t) for e, n in enumerate(LENGTHS) for t in range(n)
    ]
    assert len(loader) == sum(-(-n // 4) for n in (len(range(w, 36, 2)) for w in range(2)))


def test_pipeline_chains_for_2_ranks_x_2_workers_cover_full_mode(folder):
    builder = TransitionBuilder(scan_episodes(folder), CAMS, compute_norm_stats(folder), 3)
    pipeline = EpisodePipeline(builder, batch_size=2, mode="full", num_epochs=1, drop_last=False)
    seen = []
    for rank in range(2):
        wc = WorkerConfig(rank, 2, 2, seed_offset=4)
        for worker in range(2):
            for batch in pipeline.build(wc.slot(worker)):
                assert batch["actions"].shape[1:] == (3, 4)
                seen += [tuple(k[1:]) for k in batch["__restore_key__"]]
    assert sorted(seen) == [(e, t) for e, n in enumerate(LENGTHS) for t in range(n)]
    assert pipeline.fingerprint()["mode"] == "full"
    per_rank = [pipeline.batches_per_epoch(WorkerConfig(r, 2, 2)) for r in range(2)]
    assert sum(per_rank) == sum(-(-len(range(g, 36, 4)) // 2) for g in range(4))
