"""``TaskEncoder.current_batch_index`` / ``current_sample_index`` with Energon's semantics
(``megatron.energon.TaskEncoder``'s docstrings and ``tests/test_dataset.py::test_current_batch_index``):
in ``encode_sample`` the batch index is the index of the batch the sample goes into and the
sample index counts ``encode_sample`` calls (a generator's outputs share their input's);
per worker, spread as ``local * num_workers + worker``; both continue exactly after a restore."""

from __future__ import annotations

import io
import itertools
import json
import random
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import pytest

from energon_lite import (
    CaptioningSample,
    ConfigError,
    TaskEncoder,
    TextSample,
    WorkerConfig,
    get_savable_loader,
    get_train_dataset,
    prepare_dataset,
    stateless,
)
from energon_lite.task_encoder.chain_context import running_context


@dataclass
class _Indexed(CaptioningSample):
    batch_index: int
    sample_index: int


class _Indexing(TaskEncoder):
    def encode_sample(self, sample: CaptioningSample) -> _Indexed:
        return _Indexed.extend(
            sample, batch_index=self.current_batch_index, sample_index=self.current_sample_index
        )


class _TwoEach(TaskEncoder):
    def encode_sample(self, sample: CaptioningSample) -> Iterator[_Indexed]:
        for _ in range(2):
            yield _Indexed.extend(
                sample,
                batch_index=self.current_batch_index,
                sample_index=self.current_sample_index,
            )


def _loader(root: Path, te: TaskEncoder, num_workers: int, batch_size: int) -> Any:
    dataset = get_train_dataset(root, worker_config=WorkerConfig(0, 1, num_workers),
                                batch_size=batch_size, shuffle_buffer_size=20,
                                max_samples_per_sequence=10, task_encoder=te)  # fmt: skip
    return get_savable_loader(dataset)


def _indices(batches: list[Any]) -> list[tuple[list[int], list[int]]]:
    return [([int(i) for i in b.batch_index], [int(i) for i in b.sample_index]) for b in batches]


def test_indices_as_energon_counts_them(train_ds: Path) -> None:
    got = _indices(list(itertools.islice(_loader(train_ds, _Indexing(), 0, 2), 4)))
    assert got == [([0, 0], [0, 1]), ([1, 1], [2, 3]), ([2, 2], [4, 5]), ([3, 3], [6, 7])]
    # two workers: batches alternate between them, numbers spread as local * 2 + worker
    got = _indices(list(itertools.islice(_loader(train_ds, _Indexing(), 2, 2), 4)))
    assert got == [([0, 0], [0, 2]), ([1, 1], [1, 3]), ([2, 2], [4, 6]), ([3, 3], [5, 7])]
    # a generator hook: both outputs of an input share its sample index
    got = _indices(list(itertools.islice(_loader(train_ds, _TwoEach(), 0, 3), 3)))
    assert got == [([0, 0, 0], [0, 0, 1]), ([1, 1, 1], [1, 2, 2]), ([2, 2, 2], [3, 3, 4])]


@pytest.mark.parametrize("te", [_Indexing(), _TwoEach()], ids=["plain", "generator"])
def test_indices_continue_exactly_after_a_restore(train_ds: Path, te: TaskEncoder) -> None:
    loader = _loader(train_ds, te, 0, 3)
    list(itertools.islice(loader, 3))
    state = loader.save_state_rank()
    expected = list(itertools.islice(loader, 4))
    loader.close()
    resumed = _loader(train_ds, type(te)(), 0, 3)
    resumed.restore_state_rank(state)
    got = list(itertools.islice(resumed, 4))
    resumed.close()
    assert _indices(got) == _indices(expected)
    assert [b.__key__ for b in got] == [b.__key__ for b in expected]
    assert _indices(got)[0][0] == [3, 3, 3]


def test_indices_outside_a_loader_are_refused() -> None:
    from energon_lite.task_encoder.hook_index import HookIndex

    with pytest.raises(ConfigError, match="only set while a loader runs"):
        HookIndex().spread(None, "current_batch_index")


def test_a_state_saved_before_the_counters_existed_still_restores(train_ds: Path) -> None:
    """States of the previous release have no ``calls`` / ``batches``: they restore, with
    the counters from 0, and the data stream continues exactly."""
    from energon_lite.state.codec import state_digest

    loader = _loader(train_ds, TaskEncoder(), 0, 3)
    list(itertools.islice(loader, 2))
    state = loader.save_state_rank()
    expected = [b.__key__ for b in itertools.islice(loader, 3)]

    def strip(level: dict) -> None:
        level.pop({"Encode": "calls", "Batch": "batches"}.get(level.get("type"), ""), None)
        if isinstance(level.get("source"), dict):
            strip(level["source"])

    old = {**state, "workers": [dict(w) for w in state["workers"]]}
    for worker in old["workers"]:
        strip(worker)
    assert "batches" not in old["workers"][0]
    old["digest"] = state_digest({k: v for k, v in old.items() if k != "digest"})
    resumed = _loader(train_ds, TaskEncoder(), 0, 3)
    resumed.restore_state_rank(old)
    assert [b.__key__ for b in itertools.islice(resumed, 3)] == expected


# Two loaders in one process: each chain has its own indices (task_encoder/chain_context.py)


class _TwoFromStart(TaskEncoder):
    """A generator hook that reads the batch index once, at its start."""

    def encode_sample(self, sample: CaptioningSample) -> Iterator[_Indexed]:
        batch = self.current_batch_index
        for _ in range(2):
            yield _Indexed.extend(sample, batch_index=batch, sample_index=self.current_sample_index)


def _keyed(batches: list[Any]) -> list[tuple[list[str], list[int], list[int]]]:
    return [(list(b.__key__), *index) for b, index in zip(batches, _indices(batches))]


def test_two_loaders_iterated_in_turn_keep_their_own_indices(train_ds: Path) -> None:
    """Two loaders without workers, one restored part-way through a generator hook while
    the other works: what the restored one's hooks see does not depend on the other."""
    first = _loader(train_ds, _TwoFromStart(), 0, 3)
    list(itertools.islice(first, 3))  # 9 outputs of 2 per input: one output pending
    state = first.save_state_rank()
    first.close()

    def resumed_while_another_ran(other_batches: int) -> list[Any]:
        other = _loader(train_ds, _Indexing(), 0, 2)
        resumed = _loader(train_ds, _TwoFromStart(), 0, 3)
        resumed.restore_state_rank(state)
        got = []
        for _ in range(3):  # in turn: the other loader's batches, then one of the resumed
            list(itertools.islice(other, other_batches))
            got.extend(itertools.islice(resumed, 1))
        other.close()
        resumed.close()
        return _keyed(got)

    alone = resumed_while_another_ran(0)
    assert resumed_while_another_ran(1) == alone
    assert resumed_while_another_ran(7) == alone
    # the two loaders count their own batches: the resumed one continues at its 4th
    assert [batch[1][-1] for batch in alone] == [3, 4, 5]


def test_indices_outside_every_chain_are_refused(train_ds: Path) -> None:
    """After a loader ran, a hook called outside it sees no index (none is left behind)."""
    te = _Indexing()
    loader = _loader(train_ds, te, 0, 2)
    assert _indices(list(itertools.islice(loader, 2)))[1][0] == [1, 1]
    loader.close()
    assert running_context() is None
    with pytest.raises(ConfigError, match="only set while a loader runs"):
        _ = te.current_batch_index
    with pytest.raises(ConfigError, match="only set while a loader runs"):
        _ = te.current_sample_index


# Replaying the indices, and Energon's restore_seeds ------------------------------------------

STATES = Path(__file__).parent / "hook_index_states"


@dataclass
class _Drawn(TextSample):
    batch_index: int
    sample_index: int
    rand_num: int


class _Drawing(TaskEncoder):
    """Energon's ``test_current_batch_index`` encoder, over text samples."""

    @stateless(restore_seeds=True)
    def encode_sample(self, sample: TextSample) -> _Drawn:
        return _Drawn.extend(
            sample,
            batch_index=self.current_batch_index,
            sample_index=self.current_sample_index,
            rand_num=random.randint(0, 1000),
        )


class _DrawingTwice(TaskEncoder):
    @stateless(restore_seeds=True)
    def encode_sample(self, sample: TextSample) -> Iterator[_Drawn]:
        for offset in (0, 1000):
            yield _Drawn.extend(
                sample,
                batch_index=self.current_batch_index,
                sample_index=self.current_sample_index,
                rand_num=random.randint(0, 1000) + offset,
            )


class _DrawingPacked(_Drawing):
    """Encoded samples wait in a packing buffer: a restore fetches them again by key."""

    def select_samples_to_pack(self, samples: list[Any]) -> list[list[Any]]:
        return [[sample] for sample in samples]

    def pack_selected_samples(self, samples: list[Any]) -> Any:
        return samples[0]


def write_text_dataset(root: Path) -> Path:
    """60 text samples in 6 shards; the bytes depend on nothing but this function."""
    folder = root / "texts"
    folder.mkdir(parents=True)
    for shard in range(6):
        with tarfile.open(folder / f"texts-{shard}.tar", "w", format=tarfile.GNU_FORMAT) as tar:
            for index in range(shard * 10, shard * 10 + 10):
                data = f"text {index}".encode()
                info = tarfile.TarInfo(f"{index:05d}.txt")
                info.size, info.mtime = len(data), 0
                tar.addfile(info, io.BytesIO(data))
    prepare_dataset(folder, split_ratio=[("train", 1)], sample_type="TextSample",
                    field_map={"text": "txt"}, progress=False)  # fmt: skip
    return folder


@pytest.fixture(scope="module")
def texts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_text_dataset(tmp_path_factory.mktemp("texts"))


def _text_loader(
    root: Path, te: TaskEncoder, wc: WorkerConfig, batch_size: int = 2, **kwargs: Any
) -> Any:
    dataset = get_train_dataset(root, worker_config=wc, batch_size=batch_size,
                                shuffle_buffer_size=20, max_samples_per_sequence=10,
                                task_encoder=te, **kwargs)  # fmt: skip
    return get_savable_loader(dataset)


def _drawn(batches: list[Any]) -> list[tuple[list[str], list[int], list[int], list[int]]]:
    return [
        (
            list(b.__key__),
            [int(i) for i in b.batch_index],
            [int(i) for i in b.sample_index],
            [int(i) for i in b.rand_num],
        )
        for b in batches
    ]


@pytest.mark.parametrize("te", [_Drawing(), _DrawingTwice()], ids=["plain", "generator"])
def test_restore_sample_replays_the_indices_the_hook_saw(texts: Path, te: TaskEncoder) -> None:
    """Energon's test_current_batch_index: a batch made again from its restore key has the
    batch index, sample index and restore_seeds draws it had when it was delivered."""
    loader = _text_loader(texts, te, WorkerConfig(0, 1, 0), batch_size=3)
    batches = list(itertools.islice(loader, 6))
    again = [loader.restore_sample(b.__restore_key__) for b in batches]
    assert _drawn(again) == _drawn(batches)
    assert [b[1] for b in _drawn(batches)] == [[i] * 3 for i in range(6)]


@pytest.mark.parametrize("workers", [0, 2])
def test_restore_seeds_draws_as_energon(texts: Path, workers: int) -> None:
    """The global generators are seeded as megatron-energon seeds them: from the worker's
    seed (rank, worker, seed_offset) and current_sample_index."""
    energon_worker = pytest.importorskip("megatron.energon.worker")
    from megatron.energon.rng import SystemRng

    wc = WorkerConfig(1, 2, workers, seed_offset=5)
    theirs = energon_worker.WorkerConfig(rank=1, world_size=2, num_workers=workers, seed_offset=5)
    loader = _text_loader(texts, _Drawing(), wc)
    for batch in itertools.islice(loader, 6):
        for index, drawn in zip(batch.sample_index, batch.rand_num, strict=True):
            worker = int(index) % max(1, workers)
            seed = theirs.worker_seed(override_local_worker_id=worker if workers else None)
            SystemRng.seed_args(seed, int(index))
            assert drawn == random.randint(0, 1000)
    loader.close()


def test_restore_seeds_draws_energons_pinned_numbers(texts: Path) -> None:
    """The numbers Energon's own test pins (rank 0 of 1, no workers, seed_offset 0)."""
    loader = _text_loader(texts, _Drawing(), WorkerConfig(0, 1, 0))
    drawn = [b.rand_num for b in itertools.islice(loader, 3)]
    assert drawn == [[661, 762], [206, 470], [130, 283]]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize(
    "te", [_Drawing(), _DrawingTwice(), _DrawingPacked()], ids=["plain", "generator", "packed"]
)
def test_indices_and_draws_continue_exactly_after_a_restore(
    texts: Path, te: TaskEncoder, workers: int
) -> None:
    wc = WorkerConfig(0, 1, workers)
    packing = {"packing_buffer_size": 4} if isinstance(te, _DrawingPacked) else {}
    loader = _text_loader(texts, te, wc, batch_size=3, **packing)
    list(itertools.islice(loader, 5))
    state = loader.save_state_rank()
    expected = _drawn(list(itertools.islice(loader, 6)))
    loader.close()
    resumed = _text_loader(texts, type(te)(), wc, batch_size=3, **packing)
    resumed.restore_state_rank(state)
    assert _drawn(list(itertools.islice(resumed, 6))) == expected
    resumed.close()


V1_CASES = {
    "seeds_v1": (_Drawing, {}),
    "seeds_v1_packed": (_DrawingPacked, {"packing_buffer_size": 4}),
}


@pytest.mark.parametrize("case", sorted(V1_CASES))
def test_a_state_saved_before_replaying_keeps_its_seeds(texts: Path, case: str) -> None:
    """A state written before the indices were replayed (``seeds_v1*.msgpack``, by the
    previous release) restores to the batches that release delivered, also when its packing
    buffer is refilled in a process that ran a fresh loader before: restore_seeds still
    seeds from the restore key in that run; a fresh run seeds as Energon."""
    te, kwargs = V1_CASES[case]
    fresh = _text_loader(texts, te(), WorkerConfig(0, 1, 0), **kwargs)
    assert [b.rand_num for b in itertools.islice(fresh, 1)] == [[661, 762]]
    state = msgpack.unpackb((STATES / f"{case}.msgpack").read_bytes(), strict_map_key=False)
    expected = json.loads((STATES / f"{case}.json").read_text())["next"]
    resumed = _text_loader(texts, te(), WorkerConfig(0, 1, 0), **kwargs)
    resumed.restore_state_rank(state)
    got = [[list(b.__key__), [int(r) for r in b.rand_num]] for b in itertools.islice(resumed, 4)]
    assert got == expected


def write_seeds_v1(root: Path) -> None:
    """Writes ``seeds_v1*.*`` (run with the previous release's energon_lite on PYTHONPATH)."""
    folder = write_text_dataset(root)
    STATES.mkdir(exist_ok=True)
    for case, (te, kwargs) in V1_CASES.items():
        loader = _text_loader(folder, te(), WorkerConfig(0, 1, 0), **kwargs)
        list(itertools.islice(loader, 3))
        state = loader.save_state_rank()
        following = [
            [list(b.__key__), [int(r) for r in b.rand_num]] for b in itertools.islice(loader, 4)
        ]
        (STATES / f"{case}.msgpack").write_bytes(msgpack.packb(state, use_bin_type=True))
        (STATES / f"{case}.json").write_text(json.dumps({"next": following}, indent=1) + "\n")


if __name__ == "__main__":
    import sys
    import tempfile

    if sys.argv[1:] != ["--write-seeds-v1"]:
        sys.exit("usage: python tests/test_hook_index.py --write-seeds-v1")
    with tempfile.TemporaryDirectory() as tmp:
        write_seeds_v1(Path(tmp))
