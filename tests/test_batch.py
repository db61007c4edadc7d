"""Batch: fixed-size batches, drop_last, collate errors; state is the source's."""

from __future__ import annotations

from pathlib import Path

import pytest

from energon_lite.errors import FailureTracker, SkipSample, TooManyFailuresError
from energon_lite.shards.dataset import PreparedDataset
from energon_lite.stages.batch import Batch
from energon_lite.stages.reader import Reader
from energon_lite.testing import assert_stage_resumes, make_reader


def _reader(ds: PreparedDataset) -> Reader:
    return make_reader(ds, seed=3, max_samples_per_sequence=6)


def _keys(samples: list[dict]) -> list[str]:
    return [s["__key__"] for s in samples]


def test_sizes_and_drop_last(train_ds: Path) -> None:
    ds = PreparedDataset(train_ds, "train")
    sizes = [len(b) for b in Batch(_reader(ds), 50, _keys)]
    assert sizes == [50, 50, 20]
    assert [len(b) for b in Batch(_reader(ds), 50, _keys, drop_last=True)] == [50, 50]
    assert_stage_resumes(lambda: Batch(_reader(ds), 16, _keys))


def test_skip_and_failures(train_ds: Path, caplog: pytest.LogCaptureFixture) -> None:
    ds = PreparedDataset(train_ds, "train")

    def odd_batches_skipped(samples: list[dict]) -> list[str]:
        if int(samples[0]["__key__"]) % 2:
            raise SkipSample()
        return _keys(samples)

    batches = list(Batch(_reader(ds), 1, odd_batches_skipped))
    assert len(batches) == 60 and all(int(b[0]) % 2 == 0 for b in batches)

    def broken(samples: list[dict]) -> list[str]:
        raise ValueError("cannot collate")

    with pytest.raises(
        TooManyFailuresError,
        match=r"3 consecutive failures \(failure_tolerance=2\); last: batch failed .*ValueError: cannot collate",
    ):
        list(Batch(_reader(ds), 10, broken, failures=FailureTracker(2)))
    assert "skipping: batch failed at keys=" in caplog.text
