"""The shared-memory decoded pool: identical frames, one copy filled by all workers, exact resume."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from energon_lite.flavors.episodes import (
    QCSimpleDatasetV3,
    TransitionBuilder,
    compute_norm_stats,
    create_qc_dataloader_v3,
    open_episode_index,
)
from energon_lite.flavors.episodes.shared_pool import SharedFramePool
from energon_lite.synth.episodes import write_dataset

LENGTHS = [5, 3, 8, 2, 6, 4]
CAMS = ["cam_high", "cam_left_wrist"]
FRAME = 2 * 12 * 16 * 3  # bytes of one stacked frame: 2 cameras of 12x16 RGB
pytestmark = pytest.mark.filterwarnings("ignore:steps_per_epoch=")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_dataset(
        tmp_path_factory.mktemp("shared"), LENGTHS, images="jpeg", image_size=(12, 16), texture=True
    )


def test_frames_are_bit_identical_read_only_and_stored_once(folder):
    index, norm = open_episode_index(folder), compute_norm_stats(folder)
    plain = TransitionBuilder(index, CAMS, norm, 3)
    shared = TransitionBuilder(index, CAMS, norm, 3, shared_pool=True)
    pool = [0, 2, 4]
    shared.enter_pool(pool, 0)
    store = shared._shared
    assert store is not None and store.frames == 5 + 8 + 6
    rng = np.random.default_rng(0)
    for episode in rng.choice(pool, 120).tolist():
        start = int(rng.integers(0, LENGTHS[episode]))
        a = plain.build(episode, start)["observations"]["images"]
        b = shared.build(episode, start)["observations"]["images"]
        assert a.dtype == b.dtype and np.array_equal(a, b)
        with pytest.raises(ValueError):
            b[0, 0, 0, 0] = 1  # a view of the shared pages cannot be changed
    assert store.misses == store.filled() <= store.frames and store.hits > 0
    # an episode outside the pool is decoded as before, never stored
    assert np.array_equal(
        shared.build(1, 2)["observations"]["images"], plain.build(1, 2)["observations"]["images"]
    )
    # the file holds at most the decoded pool, each frame on its own pages (sparse: pages
    # only for the frames written), plus a page of flags
    path = store.path
    pages = -(-FRAME // 4096)
    assert path.stat().st_blocks * 512 <= 4096 * (1 + store.filled() * pages)
    # a second process-like reader of the same pool sees the frames already filled
    other = TransitionBuilder(index, CAMS, norm, 3)
    other.shared_dir = shared.shared_dir
    other.enter_pool(pool, 0)
    assert other._shared is not None and other._shared.filled() == store.filled()
    # prefill completes the pool; entering epoch 2 deletes epoch 0's file
    assert shared.prefill(pool) == store.frames and store.filled() == store.frames
    shared.enter_pool([1, 3], 2)
    assert not path.exists()
    shared.shared_dir.cleanup()
    assert not shared.shared_dir.path.exists()


class _UnlinkedOnOpen(SharedFramePool):
    """A pool whose file another worker deletes the moment after this one opened it."""

    def _open(self, size: int) -> int:
        fd = super()._open(size)
        self.path.unlink()
        return fd


def test_a_pool_deleted_right_after_it_was_opened_still_serves_its_frames(tmp_path):
    # A worker entering the next pool unlinks this one's file; one still entering it must
    # map what it opened, not look the path up again (a CI run failed with ENOENT there).
    shape = (2, 12, 16, 3)
    pool = _UnlinkedOnOpen(tmp_path / "pool_0_x.bin", [7, 9], [2, 1], shape)
    assert not pool.path.exists()
    frames = {(e, f): np.full(shape, 10 * e + f, np.uint8) for e, f in [(7, 0), (7, 1), (9, 0)]}
    for (e, f), frame in frames.items():
        got = pool.get(e, f, lambda frame=frame: frame)
        assert np.array_equal(got, frame) and not got.flags.writeable
        mine = pool.get(e, f, lambda: pytest.fail("decoded twice"), writable=True)
        mine[...] = 0  # copy-on-write: this process only
        assert np.array_equal(pool.get(e, f, lambda: pytest.fail("decoded twice")), frame)
    assert pool.filled() == pool.frames == 3 and pool.misses == 3
    pool.close()


@pytest.mark.filterwarnings("error::UserWarning")  # e.g. torch on a read-only frame
def test_qc_dataset_workers_fill_one_shared_copy(folder):
    norm = compute_norm_stats(folder)
    ds = QCSimpleDatasetV3(folder, CAMS, norm, 3, episodes_per_epoch=4, positive_ratio=0.5,
                           epoch_seed=1, shared_pool=True)  # fmt: skip
    plain = TransitionBuilder(open_episode_index(folder), CAMS, norm, 3)
    torch.manual_seed(0)
    loader = DataLoader(ds, batch_size=4, shuffle=True, num_workers=2, drop_last=True)
    batches = list(loader) + list(loader)  # two passes: the second reads filled frames
    for batch in batches:
        for key, images in zip(batch["__key__"], batch["observations"]["images"]):
            path, start = key.rsplit("/", 1)
            episode = [str(p) for p in plain.index.paths].index(path)
            expected = plain.build(episode, int(start))["observations"]["images"]
            assert np.array_equal(images.numpy(), expected)
    store = ds.builder._shared
    assert store is not None
    drawn = {k for b in batches for k in b["__key__"]}
    assert store.misses == 0  # the parent decoded nothing into it ...
    assert store.filled() >= len(drawn) // 2  # ... the workers filled it, and the parent sees it
    # the dataset's frames are writable copy-on-write views: a write stays in this process
    item = ds[0]
    path, start = item["__key__"].rsplit("/", 1)
    episode = [str(p) for p in plain.index.paths].index(path)
    item["observations"]["images"][:] = 7
    shared_view = store.get(episode, int(start), lambda: pytest.fail("decoded again"))
    assert np.array_equal(shared_view, plain.build(episode, int(start))["observations"]["images"])
    old = store.path
    ds.refresh_epoch(2)
    assert not old.exists() and ds.builder._shared is not None


def test_loader_with_shared_pool_yields_the_same_batches_and_resumes(folder):
    def make(**kw):
        args = {"episodes_per_epoch": 4, "batch_size": 3, "epoch_seed": 1, "positive_ratio": 0.5,
                "steps_per_epoch": 4, "num_workers": 2, "pin_memory": False, **kw}  # fmt: skip
        return create_qc_dataloader_v3(folder, CAMS, compute_norm_stats(folder), 3, **args)[1]

    plain = list(itertools.islice(iter(make()), 10))
    loader = make(shared_pool=True)
    it = iter(loader)
    head = list(itertools.islice(it, 4))
    state = loader.save_state_rank()
    tail = list(itertools.islice(it, 6))
    for a, b in zip(plain, head + tail):  # the same transitions, frames included
        assert a["__key__"] == b["__key__"]
        assert torch.equal(a["observations"]["images"], b["observations"]["images"])
    fresh = make(shared_pool=True)
    fresh.restore_state_rank(state)
    again = list(itertools.islice(iter(fresh), 6))
    assert [b["__key__"] for b in again] == [b["__key__"] for b in tail]
    assert all(
        torch.equal(a["observations"]["images"], b["observations"]["images"])
        for a, b in zip(again, tail)
    )
