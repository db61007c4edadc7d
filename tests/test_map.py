"""Map: a 1:1 step (encode_batch) with skips and logged failures; state is its source's."""

from __future__ import annotations

from pathlib import Path

import pytest

from energon_lite.errors import FailureTracker, SkipSample
from energon_lite.shards.dataset import PreparedDataset
from energon_lite.stages.map import Map
from energon_lite.stages.reader import Reader
from energon_lite.testing import assert_stage_resumes, make_reader


def _reader(ds: PreparedDataset) -> Reader:
    return make_reader(ds, seed=2)


def _upper(sample: dict) -> dict:
    index = int(sample["__key__"])
    if index % 4 == 1:
        raise SkipSample()
    if index % 4 == 2:
        raise ValueError(f"cannot map {index}")
    return {**sample, "__key__": sample["__key__"] + "!"}


def test_maps_skips_and_logs(train_ds: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG", logger="energon_lite")  # past the first few, failures log at DEBUG
    ds = PreparedDataset(train_ds, "train")
    keys = sorted(item["__key__"] for item in Map(_reader(ds), _upper, "upper", FailureTracker(5)))
    assert keys == [f"{i:06d}!" for i in range(120) if i % 4 in (0, 3)]
    assert "skipping: upper failed at key='000002': ValueError: cannot map 2" in caplog.text
    assert "000001" not in caplog.text


def test_resume_and_fetch(train_ds: Path) -> None:
    ds = PreparedDataset(train_ds, "train")
    assert_stage_resumes(lambda: Map(_reader(ds), _upper, "upper", FailureTracker(5)), every=5)
    stage = Map(_reader(ds), _upper, "upper", FailureTracker(5))
    first = stage.next()
    assert stage.fetch(first["__restore_key__"]) == first
