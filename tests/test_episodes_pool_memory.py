"""What the shared decoded pool keeps in memory: one pool's file, no per-batch heap copies."""

from __future__ import annotations

import weakref

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from energon_lite.flavors.episodes import (
    TransitionBuilder,
    compute_norm_stats,
    create_qc_dataloader_v3,
    open_episode_index,
)
from energon_lite.flavors.episodes.collate import collate_transitions
from energon_lite.synth.episodes import write_dataset

LENGTHS = [5, 3, 8, 2, 6, 4]
CAMS = ["cam_high", "cam_left_wrist"]
FRAME = 2 * 12 * 16 * 3  # bytes of one stacked frame: 2 cameras of 12x16 RGB
PAGES = -(-FRAME // 4096)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_dataset(
        tmp_path_factory.mktemp("poolmem"), LENGTHS, images="jpeg", image_size=(12, 16)
    )


def allocated(builder: TransitionBuilder) -> int:
    assert builder.shared_dir is not None
    return sum(f.stat().st_blocks * 512 for f in builder.shared_dir.path.glob("pool_*.bin"))


def test_entering_the_next_pool_frees_the_previous_one(folder):
    index, norm = open_episode_index(folder), compute_norm_stats(folder)
    leader = TransitionBuilder(index, CAMS, norm, 3, shared_pool=True)
    lagging = TransitionBuilder(index, CAMS, norm, 3)  # a second worker of the same rank
    lagging.shared_dir = leader.shared_dir
    first, second = [0, 2, 4], [1, 3, 5]
    leader.enter_pool(first, 0)
    lagging.enter_pool(first, 0)
    assert leader.prefill(first) == 5 + 8 + 6
    budget = 4096 * (1 + (5 + 8 + 6) * PAGES)  # flags page + every frame on its own pages
    assert allocated(leader) <= budget
    old = leader._shared
    assert old is not None
    # the leader moves on: epoch 0's file goes now (it used to stay through epoch 1) ...
    leader.enter_pool(second, 1)
    assert not old.path.exists()
    assert leader.prefill(second) == 3 + 2 + 4
    assert allocated(leader) <= 4096 * (1 + (3 + 2 + 4) * PAGES)
    # ... while the worker still in epoch 0 reads its frames from its mapping, bit-identical
    plain = TransitionBuilder(index, CAMS, norm, 3)
    for episode, start in [(0, 4), (2, 7), (4, 0)]:
        got = lagging.build(episode, start)["observations"]["images"]
        assert np.array_equal(got, plain.build(episode, start)["observations"]["images"])
    assert lagging._shared is not None and lagging._shared.misses == 0
    leader.shared_dir.cleanup()


class _CollateInWorker(Dataset):
    """Collates transitions inside a DataLoader worker, as the resumable loader's Batch does."""

    def __init__(self, builder: TransitionBuilder) -> None:
        self.builder = builder

    def __len__(self) -> int:
        return 1

    def __getitem__(self, idx: int) -> dict:
        batch = collate_transitions([self.builder.build(2, s) for s in range(4)])
        images = batch["observations"]["images"]
        # shared before it is sent: stacked into shared memory, no heap copy to move there
        return {"images": images, "stacked_shared": images.is_shared()}


def test_collate_stacks_into_shared_memory_in_a_worker(folder):
    index, norm = open_episode_index(folder), compute_norm_stats(folder)
    builder = TransitionBuilder(index, CAMS, norm, 3)
    expected = np.stack([builder.build(2, s)["observations"]["images"] for s in range(4)])
    here = collate_transitions([builder.build(2, s) for s in range(4)])
    assert not here["observations"]["images"].is_shared()  # main process: a plain tensor
    assert np.array_equal(here["observations"]["images"].numpy(), expected)
    loader = DataLoader(_CollateInWorker(builder), batch_size=None, num_workers=1)
    (item,) = list(loader)
    assert item["stacked_shared"] is True
    assert item["images"].dtype == torch.uint8
    assert np.array_equal(item["images"].numpy(), expected)


@pytest.mark.filterwarnings("ignore:steps_per_epoch=")
def test_a_worker_chain_keeps_no_batch_it_has_handed_over(folder):
    dataset, _ = create_qc_dataloader_v3(folder, CAMS, compute_norm_stats(folder), 3,
                                         episodes_per_epoch=4, batch_size=3, positive_ratio=0.5,
                                         steps_per_epoch=4, num_workers=0)  # fmt: skip
    chain = dataset.iter_with_state(None, 0, 0)
    for _ in range(3):
        _, batch, state = next(chain)
        assert batch["observations"]["images"].shape == (3, 2, 12, 16, 3) and state is not None
        images = weakref.ref(batch["observations"]["images"])
        del batch
        # in a worker this is a batch-sized shared-memory segment, sent and not needed again
        assert images() is None
    chain.close()


@pytest.mark.filterwarnings("ignore:steps_per_epoch=")
def test_float_frames_are_made_while_collating_not_kept_per_draw(folder):
    norm = compute_norm_stats(folder)
    args = {"episodes_per_epoch": 4, "batch_size": 3, "positive_ratio": 0.5,
            "steps_per_epoch": 4, "pin_memory": False, "normalize_images": True}  # fmt: skip
    dataset, loader = create_qc_dataloader_v3(folder, CAMS, norm, 3, num_workers=2, **args)
    reference = TransitionBuilder(open_episode_index(folder), CAMS, norm, 3, normalize_images=True)
    paths = [str(p) for p in reference.index.paths]
    it = iter(loader)
    batches = [next(it) for _ in range(5)]
    state = loader.save_state_rank()
    tail = [next(it) for _ in range(3)]
    for batch in batches + tail:
        images = batch["observations"]["images"]
        assert images.dtype == torch.float32
        for key, got in zip(batch["__key__"], images):
            path, start = key.rsplit("/", 1)
            expected = reference.build(paths.index(path), int(start))["observations"]["images"]
            assert np.array_equal(got.numpy(), expected)  # bit-identical to per-draw division
    _, again = create_qc_dataloader_v3(folder, CAMS, norm, 3, num_workers=2, **args)
    again.restore_state_rank(state)
    assert torch.equal(
        next(iter(again))["observations"]["images"], tail[0]["observations"]["images"]
    )
    # the sampler hands the collate uint8 frames: no float32 copy per draw waits for a batch
    chain = dataset.pipeline.build(dataset.worker_config.slot(0, 0))
    assert chain.source.next()["observations"]["images"].dtype == np.uint8
    # a batch fetched again by its items' keys (float32 frames from fetch) is the same too
    keys = tail[0]["__restore_key__"]
    assert torch.equal(
        chain.fetch(keys)["observations"]["images"], tail[0]["observations"]["images"]
    )
    assert chain.fetch(keys[0])["observations"]["images"].dtype == np.float32  # one sample: float


@pytest.mark.filterwarnings("ignore:steps_per_epoch=")
def test_batches_are_built_in_reused_memory_and_kept_ones_stay_intact(tmp_path):
    """In the resumable loader's workers the stacked frames go into shared-memory segments
    the trainer has let go of (energon_lite/batching/memory.py), as image batches do: every
    batch holds its keys' frames, batches the trainer keeps are never written again."""
    from energon_lite.batching import memory as batch_memory

    folder = write_dataset(tmp_path, [6, 5, 7, 4], images="jpeg", image_size=(120, 160))
    norm = compute_norm_stats(folder)
    before = set(batch_memory._POOLS)
    _, loader = create_qc_dataloader_v3(folder, CAMS, norm, 3, episodes_per_epoch=4,
                                        batch_size=4, positive_ratio=0.5, steps_per_epoch=30,
                                        num_workers=2, pin_memory=False)  # fmt: skip
    reference = TransitionBuilder(open_episode_index(folder), CAMS, norm, 3)
    paths = [str(p) for p in reference.index.paths]

    def intact(batch: dict) -> bool:
        return all(
            np.array_equal(
                got.numpy(),
                reference.build(paths.index(key.rsplit("/", 1)[0]), int(key.rsplit("/", 1)[1]))[
                    "observations"
                ]["images"],
            )
            for key, got in zip(batch["__key__"], batch["observations"]["images"])
        )

    kept, addresses = [], []
    for i, batch in zip(range(24), loader):
        assert batch["observations"]["images"].nbytes >= batch_memory.MIN_BYTES
        assert intact(batch)
        addresses.append(batch["observations"]["images"].untyped_storage().data_ptr())
        if i in (1, 2, 9):
            kept.append(batch)
        del batch
    (token,) = set(batch_memory._POOLS) - before
    mapped = batch_memory._POOLS[token]._mapped
    at = {torch.frombuffer(m, dtype=torch.uint8).data_ptr() for m in mapped.values()}
    assert sum(address in at for address in addresses) >= 16  # built in reused segments
    assert all(intact(batch) for batch in kept)  # held batches were not written again
    loader.close()
