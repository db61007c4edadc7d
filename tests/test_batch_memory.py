"""Workers reuse a batch's shared memory only after the trainer has dropped the batch."""

from __future__ import annotations

import gc
import subprocess
import sys
import warnings
import zlib
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import get_worker_info

from energon_lite import (
    CaptioningSample,
    DefaultTaskEncoder,
    WorkerConfig,
    batch_stack,
    get_savable_loader,
    get_train_dataset,
)
from energon_lite.batching import memory as batch_memory
from energon_lite.batching.allocate import active_pool
from energon_lite.batching.memory import MIN_BYTES, BatchMemoryPool, Held, _shares_storages

ROWS = 4096  # 4096 x 8 float32 = 128 KiB per sample, 1 MiB per batch of 8: above MIN_BYTES


def _value(key: str) -> float:
    return float(zlib.crc32(key.encode()) % 100_000)


class BigEncoder(DefaultTaskEncoder):
    """Per sample a large tensor filled with a number derived from its key; the batch says
    which worker built it and whether in one of its pool's segments."""

    def encode_sample(self, sample: CaptioningSample) -> dict[str, Any]:
        return {"key": sample.__key__, "big": torch.full((ROWS, 8), _value(sample.__key__))}

    def batch(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        big = batch_stack([s["big"] for s in samples])
        info = get_worker_info()
        pool = active_pool()
        segments = pool._segments if pool is not None else []
        return {
            "keys": [s["key"] for s in samples],
            "big": big,
            "worker": info.id if info else -1,
            "pooled": any(big.untyped_storage() is segment for segment in segments),
        }


def _intact(batch: dict[str, Any]) -> bool:
    want = torch.tensor([_value(key) for key in batch["keys"]])
    return bool(torch.equal(batch["big"][:, :, 0].amin(dim=1), want)) and bool(
        torch.equal(batch["big"][:, :, -1].amax(dim=1), want)
    )


@pytest.fixture(scope="module")
def loader_ds(train_ds: Path) -> Any:
    def make(task_encoder: DefaultTaskEncoder | None = None, **options: Any) -> Any:
        dataset = get_train_dataset(
            train_ds,
            batch_size=8,
            worker_config=WorkerConfig(0, 1, 2),
            task_encoder=task_encoder or BigEncoder(),
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
        )
        return get_savable_loader(dataset, **options)

    return make


def test_kept_batches_stay_intact_and_dropped_ones_are_reused(loader_ds: Any) -> None:
    assert 8 * ROWS * 8 * 4 >= MIN_BYTES
    loader = loader_ds()
    kept, pooled = [], defaultdict(int)
    for i, batch in zip(range(45), loader):
        assert _intact(batch)
        pooled[batch["worker"]] += batch["pooled"]
        if i in (0, 1, 6):
            kept.append(batch)  # the trainer holds on to a few batches
    loader.close()
    # a kept batch's memory was never written again
    assert len(kept) == 3 and all(_intact(batch) for batch in kept)
    # each worker built its ~22 batches in its (prefetch 2 + 2) segments, less the ones the
    # kept batches hold: fresh memory only when all of them were in use
    assert sorted(pooled) == [0, 1] and all(count >= 14 for count in pooled.values()), pooled


def test_a_trainer_keeping_every_batch_gets_fresh_memory_for_each(loader_ds: Any) -> None:
    loader = loader_ds()
    kept = [batch for _, batch in zip(range(24), loader)]
    loader.close()
    assert all(_intact(batch) for batch in kept)  # nothing was written twice
    for worker in (0, 1):  # each segment of a worker's pool was handed out once
        assert sum(b["pooled"] for b in kept if b["worker"] == worker) == 4


def test_without_reuse_every_batch_is_built_in_fresh_memory(loader_ds: Any) -> None:
    loader = loader_ds(reuse_batch_memory=False)
    batches = [batch for _, batch in zip(range(12), loader)]
    loader.close()
    assert all(_intact(batch) for batch in batches)
    assert not any(batch["pooled"] for batch in batches)


class RetainingEncoder(BigEncoder):
    """Keeps (in the worker) a view of one of its batches, as a packing buffer keeps samples
    decoded into their batch's memory; checks the kept view at every later batch."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: list[tuple[torch.Tensor, torch.Tensor]] = []

    def batch(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        out = super().batch(samples)
        out["worker_overwrites"] = sum(not torch.equal(view, want) for view, want in self.kept)
        if not self.kept and sum(ord(c) for c in out["keys"][0]) % 3 == 0:
            self.kept.append((out["big"][1:3, 5], out["big"][1:3, 5].clone()))
        return out


def test_memory_a_worker_still_uses_is_not_reused(loader_ds: Any) -> None:
    loader = loader_ds(RetainingEncoder())
    seen = [(_intact(b), b["pooled"], b["worker_overwrites"]) for _, b in zip(range(40), loader)]
    loader.close()
    assert all(intact for intact, _, _ in seen)
    assert sum(pooled for _, pooled, _ in seen) >= 20  # the pool still works
    assert [overwrites for _, _, overwrites in seen] == [0] * 40


def test_the_pool_turns_itself_off_if_storages_are_not_shared_objects() -> None:
    """The finalizers rely on torch giving every tensor over a received segment the same
    storage object; the first batch of a stream checks it and turns reuse off if not."""
    segment = torch.UntypedStorage._new_shared(MIN_BYTES)
    tensor = torch.empty(0).set_(segment, 0, (MIN_BYTES // 4,))
    assert _shares_storages({"x": [tensor[1:]]}, Held(0, [(0, segment)]))
    # the same memory through another storage object (numpy in between)
    twin = torch.from_numpy(tensor.numpy())
    assert twin.untyped_storage() is not segment
    assert twin.untyped_storage().data_ptr() == segment.data_ptr()
    assert not _shares_storages({"x": [twin]}, Held(0, [(0, segment)]))
    pool = BatchMemoryPool(num_workers=1, slots=2)
    pool.flags[0, 0] = 1  # taken by the worker for this batch
    pool.received({"x": twin}, Held(0, [(0, segment)]))
    assert pool.enabled[0] == 0  # workers allocate fresh memory from now on
    del twin, tensor, segment
    assert pool.flags[0, 0] == 1  # and the segment is never handed out again


def test_the_trainer_maps_each_segment_once(loader_ds: Any) -> None:
    """After the first batch built in a segment, batches in it reach the trainer through the
    mapping it already has (no descriptor passed, no fresh mapping to fault in again); the
    mappings go with the stream."""
    before = set(batch_memory._POOLS)
    loader = loader_ds()
    addresses, pooled = [], 0
    for _, batch in zip(range(40), loader):
        assert _intact(batch)
        if batch["pooled"]:
            pooled += 1
            addresses.append(batch["big"].untyped_storage().data_ptr())
        del batch
    (token,) = set(batch_memory._POOLS) - before
    mapped = batch_memory._POOLS[token]._mapped
    mapped_at = {torch.frombuffer(m, dtype=torch.uint8).data_ptr() for m in mapped.values()}
    assert pooled >= 30 and 0 < len(mapped) <= 2 * 4  # workers x (prefetch_factor + 2)
    assert set(addresses) <= mapped_at  # every pooled batch came through a kept mapping
    loader.close()
    del loader, mapped
    gc.collect()
    assert token not in batch_memory._POOLS


def _stream_pool(loader_ds: Any, task_encoder: DefaultTaskEncoder | None = None) -> Any:
    """Run 20 batches; return (the stream's pool, the worker of each batch) in the trainer."""
    before = set(batch_memory._POOLS)
    loader = loader_ds(task_encoder)
    workers = []
    for _, batch in zip(range(20), loader):
        assert _intact(batch)
        workers.append(batch["worker"])
        del batch
    (token,) = set(batch_memory._POOLS) - before
    pool = batch_memory._POOLS[token]
    loader.close()
    return pool, workers


def test_segment_descriptors_come_over_the_pools_own_socket_pairs(loader_ds: Any) -> None:
    """A segment's descriptor reaches the trainer over the socket pair the pool opened before
    the workers forked, not through multiprocessing's resource sharer, whose listener thread
    in a busy worker held each first batch back by 15-20 ms."""
    pool, workers = _stream_pool(loader_ds)
    assert sorted(set(workers)) == [0, 1]
    assert pool.by_channel == len(pool._mapped) >= 2  # every mapped segment, both workers
    assert pool._arrived == {}  # none sent that the trainer did not take


class ChannelLossEncoder(BigEncoder):
    """Worker 1 loses its end of the socket pair before its first batch is sent."""

    def batch(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        info = get_worker_info()
        pool = active_pool()
        if info is not None and info.id == 1 and pool is not None and pool._channel is not None:
            pool._channel.close()
        return super().batch(samples)


def test_a_worker_without_its_socket_pair_sends_descriptors_torchs_way(loader_ds: Any) -> None:
    pool, workers = _stream_pool(loader_ds, ChannelLossEncoder())
    assert sorted(set(workers)) == [0, 1]  # and every batch of both arrived intact
    by_worker = {w: sum(1 for (worker, _) in pool._mapped if worker == w) for w in (0, 1)}
    assert by_worker[0] >= 1 and by_worker[1] >= 1
    assert pool.by_channel == by_worker[0]  # worker 1's went through the resource sharer


def test_a_finished_streams_socket_pairs_are_closed(loader_ds: Any) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        loader = loader_ds()
        for _, batch in zip(range(6), loader):
            del batch
        loader.close()
        del loader
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_preparing_a_dataset_does_not_load_the_shared_memory_machinery() -> None:
    """The data model collates (``Batch.from_samples``); collating allocates through
    ``batching.allocate``, which imports no pool: an offline ``prepare`` loads no sockets."""
    code = (
        "import energon_lite.shards.prepare, sys; "
        "assert 'energon_lite.batching.memory' not in sys.modules, 'batching.memory imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


class PoolProbe(DefaultTaskEncoder):
    """Says, per batch, whether its images (decoded straight into the batch) are in one of
    the worker's pool segments."""

    def encode_batch(self, batch: Any) -> dict[str, Any]:
        pool = active_pool()
        segments = pool._segments if pool is not None else []
        storage = batch.image.untyped_storage()
        return {"pooled": any(storage is segment for segment in segments)}


def test_a_canonical_layouts_pipelines_let_go_of_their_last_sample(tmp_path: Path) -> None:
    """16 logical pipelines per worker, each serving every 4th batch: a pipeline must not
    keep its last decoded sample (a row of a batch the trainer has) until its turn comes
    again, or the worker runs out of free segments and allocates fresh memory."""
    from energon_lite import prepare_dataset
    from energon_lite.synth.shards import write_captioning_shards

    write_captioning_shards(tmp_path, 320, 40, image_size=(64, 64))  # 8 x 48 KiB per batch
    prepare_dataset(
        tmp_path, split_ratio=[("train", 1)], sample_type="CaptioningSample",
        field_map={"image": "jpg", "caption": "txt"}, progress=False,
    )  # fmt: skip
    dataset = get_train_dataset(
        tmp_path,
        batch_size=8,
        worker_config=WorkerConfig(0, 1, 2),
        task_encoder=PoolProbe(),
        shuffle_buffer_size=4,
        max_samples_per_sequence=5,
        canonical_layout=(4, 8),
    )
    loader = get_savable_loader(dataset)
    pooled = [batch["pooled"] for _, batch in zip(range(40), loader)]
    loader.close()
    assert all(pooled[8:]), pooled  # after the workers' first batches: always a segment


def test_held_back_segments_travel_with_their_own_batch_and_sizes_replace_free_ones() -> None:
    """A bucket's slab (``batching/group_slab.py``) takes its segment while other buckets'
    batches go out: held back, it goes with none of them, and does not count against the
    slots; batches of a size no free segment fits replace a free one of another size."""
    pool = BatchMemoryPool(num_workers=1, slots=2)
    pool._worker = 0  # as activate() does in a worker, without making it this process's pool
    like, small = torch.empty(0), (MIN_BYTES // 4,)
    slab = pool.empty(like, small)
    assert slab is not None
    pool.hold_back(slab)
    batches = [pool.empty(like, small) for _ in range(2)]
    assert all(b is not None for b in batches)  # the held-back one is beyond the 2 slots
    held = pool.collect()
    assert len(held.segments) == 2 and all(
        s.data_ptr() != slab.data_ptr() for _, s in held.segments
    )
    pool.let_travel(slab)
    ((_, segment),) = pool.collect().segments
    assert segment.data_ptr() == slab.data_ptr()
    # the trainer lets go of all three (its finalizers); nothing here refers to them any more
    pool.flags[0, :] = 0
    del slab, batches, held, segment
    big = pool.empty(like, (4 * MIN_BYTES // 4,))  # 4x: no free segment fits
    assert big is not None and len(pool._segments) == 3
    assert sorted(s.nbytes() for s in pool._segments) == [MIN_BYTES, MIN_BYTES, 4 * MIN_BYTES]
    replaced = pool._segments.index(big.untyped_storage())
    assert replaced not in pool._sent  # its next batch sends the new segment's descriptor
