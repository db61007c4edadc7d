"""``TaskEncoder.current_batch_index`` / ``current_sample_index`` with Energon's semantics
(``megatron.energon.TaskEncoder``'s docstrings and ``tests/test_dataset.py::test_current_batch_index``):
in ``encode_sample`` the batch index is the index of the batch the sample goes into and the
sample index counts ``encode_sample`` calls (a generator's outputs share their input's);
per worker, spread as ``local * num_workers + worker``; both continue exactly after a restore."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from energon_lite import (
    CaptioningSample,
    ConfigError,
    TaskEncoder,
    WorkerConfig,
    get_savable_loader,
    get_train_dataset,
)


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
