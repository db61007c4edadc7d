"""A batch's ``__sources__`` travels as columns and arrives as the same plain tuple."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from multiprocessing.reduction import ForkingPickler

import pytest

from energon_lite import SourceInfo, WorkerConfig, get_loader, get_train_dataset
from energon_lite.batching.sources import (
    BatchSources,
    PendingSources,
    SourcesSlot,
    read_directly,
    read_lazily,
)
from energon_lite.epathlib import EPath
from energon_lite.loader.transport import pickled_item
from energon_lite.samples.types import Batch
from energon_lite.testing import take


def _infos(n: int) -> list[SourceInfo]:
    path = EPath("/data/set")
    return [
        SourceInfo(
            dataset_path=path,
            index=i,
            shard_name=f"parts/shard_{i // 4}.tar",
            file_names=(f"{i:06d}.jpg", f"{i:06d}.txt"),
        )
        for i in range(n)
    ]


def test_records_come_back_equal_as_a_plain_tuple():
    infos = _infos(9)
    sent = BatchSources(infos)
    assert sent == tuple(infos) and hash(sent) == hash(tuple(infos))
    assert repr(sent) == repr(tuple(infos))
    back = pickle.loads(ForkingPickler.dumps(sent))
    assert type(back) is tuple and back == tuple(infos)
    assert all(type(info) is SourceInfo for info in back)
    assert [dataclasses.asdict(info) for info in back] == [dataclasses.asdict(i) for i in infos]
    assert back[0].dataset_path is back[8].dataset_path  # one path object, as sent
    with pytest.raises(dataclasses.FrozenInstanceError):
        back[0].index = 5  # type: ignore[misc]


@dataclasses.dataclass(frozen=True)
class _OwnRecord:
    """A user's record in ``__sources__`` (no ``BATCH_COLUMNS``): travels as it is."""

    name: str


def test_records_without_columns_or_of_two_classes_travel_one_by_one():
    own = (_OwnRecord("a"), _OwnRecord("b"))
    assert pickle.loads(pickle.dumps(BatchSources(own))) == own
    mixed = (*_infos(2), _OwnRecord("c"))
    back = pickle.loads(pickle.dumps(BatchSources(mixed)))
    assert type(back) is tuple and back == mixed
    assert pickle.loads(pickle.dumps(BatchSources())) == ()


def test_a_loaders_batches_carry_the_same_sources_through_workers(train_ds):
    """Real worker processes: each batch's ``__sources__`` is a plain tuple equal, record by
    record, to the sample's own record read without workers; its ``__restore_key__`` (also
    sent as columns, ``state/restore_key.py``) a plain list of the samples' own keys."""

    def batches(workers: int, count: int) -> list:
        dataset = get_train_dataset(
            train_ds,
            worker_config=WorkerConfig(0, 1, workers),
            batch_size=5,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
        )
        return take(get_loader(dataset), count)

    local = batches(0, 24)  # the whole epoch: 120 samples
    assert all(isinstance(batch.__sources__, BatchSources) for batch in local)  # never sent
    by_key = {key: info for b in local for key, info in zip(b.__key__, b.__sources__)}
    restore = {key: rk for b in local for key, rk in zip(b.__key__, b.__restore_key__)}
    assert len(by_key) == 120
    for batch in batches(2, 8):
        assert type(batch.__sources__) is tuple
        assert batch.__sources__ == tuple(by_key[key] for key in batch.__key__)
        assert type(batch.__restore_key__) is list
        assert batch.__restore_key__ == [restore[key] for key in batch.__key__]


def test_a_local_dataset_path_arrives_as_one_object_per_process_a_remote_one_equal():
    """Each batch names its dataset's ``EPath``: a local one is rebuilt from its string once
    per process (no pathlib parse per batch), any other comes back equal."""
    first = pickle.loads(ForkingPickler.dumps(BatchSources(_infos(3))))
    second = pickle.loads(ForkingPickler.dumps(BatchSources(_infos(2))))
    assert first[0].dataset_path is second[0].dataset_path
    assert first[0].dataset_path == EPath("/data/set") and str(first[0].dataset_path) == "/data/set"
    assert first[0].dataset_path / "parts" == EPath("/data/set/parts")
    remote = EPath("s3://bucket/set")
    back = pickle.loads(pickle.dumps(remote))
    assert back == remote and str(back) == "s3://bucket/set" and not back.is_local()


@dataclasses.dataclass(slots=True, kw_only=True)
class _TextBatch(Batch):
    text: list[str]


@dataclasses.dataclass(slots=True, kw_only=True)
class _OwnSlotBatch:
    """A batch class of a user's own (not a Sample or Batch): its slot is read directly."""

    __key__: list[str]
    __restore_key__: list[object]
    __sources__: tuple[SourceInfo, ...] | None = None
    text: list[str]


def _sent(batch: object) -> object:
    """``batch`` as a worker sends it (reading the plain slot, as a worker does) and the
    trainer unpickles it (from then on through the descriptor)."""
    read_directly()
    sent = ForkingPickler.dumps(pickled_item((0, batch, None), batch, 0))
    return pickle.loads(sent)[1]


def test_a_batchs_records_are_made_in_the_trainer_when_read():
    """A sample batch's records arrive as columns in its slot and become the plain tuple of
    equal records on first read (kept from then on); the worker's batch is left as it was,
    and every way of reading the batch (equality, repr, asdict, copy, pickling again) sees
    the records."""
    infos = _infos(6)
    batch = _TextBatch(
        __key__=[f"{i:06d}" for i in range(6)],
        __restore_key__=[("s", 0, 0, i, 0) for i in range(6)],
        __sources__=BatchSources(infos),
        text=[str(i) for i in range(6)],
    )
    back = _sent(batch)
    assert type(batch.__sources__) is BatchSources and batch.__sources__ == tuple(infos)
    slot = Batch.__dict__["__sources__"].slot
    assert type(slot.__get__(back, type(back))) is PendingSources  # nothing made yet
    assert type(back.__sources__) is tuple and back.__sources__ == tuple(infos)
    assert all(type(info) is SourceInfo for info in back.__sources__)
    assert back.__sources__ is back.__sources__  # made once, then kept
    again = _sent(batch)
    assert again == batch and repr(again) == repr(batch)
    assert dataclasses.asdict(_sent(batch)) == dataclasses.asdict(batch)
    assert copy.deepcopy(_sent(batch)) == batch
    assert pickle.loads(pickle.dumps(_sent(batch))) == batch
    own = _OwnSlotBatch(
        __key__=["a"], __restore_key__=[("s", 0, 0, 0, 0)], __sources__=BatchSources(infos[:1]),
        text=["a"],
    )  # fmt: skip
    back_own = _sent(own)
    assert type(_OwnSlotBatch.__dict__["__sources__"]).__name__ == "member_descriptor"
    assert type(back_own.__sources__) is tuple and back_own == own


def test_only_a_process_that_received_batches_reads_through_the_descriptor():
    """Workers (and a process without workers) read the plain slot: the descriptor costs
    every sample's build and read; the trainer's process switches to it with its first
    batch from a worker, and a batch's records read the same either way."""
    member = Batch.__dict__["__sources__"]
    member = getattr(member, "slot", member)
    infos = _infos(2)
    batch = _TextBatch(
        __key__=["0", "1"], __restore_key__=[1, 2], __sources__=BatchSources(infos), text=["a", "b"]
    )
    read_directly()
    try:
        assert Batch.__dict__["__sources__"] is member
        assert batch.__sources__ == tuple(infos)
        back = _sent(batch)  # unpickled as the trainer does: the descriptor from now on
        assert type(Batch.__dict__["__sources__"]) is SourcesSlot
        assert back.__sources__ == tuple(infos)
    finally:
        read_lazily()
