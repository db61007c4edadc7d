"""Limit: at most ``limit`` items; the count is its state."""

from __future__ import annotations

from pathlib import Path

import pytest

from energon_lite.errors import ConfigError
from energon_lite.index.dataset import PreparedDataset
from energon_lite.reader import Reader
from energon_lite.stages.limit import Limit
from energon_lite.testing import assert_stage_resumes, take


def _reader(ds: PreparedDataset) -> Reader:
    return Reader(
        ds,
        leaf_id=0,
        seed=2,
        worker_index=0,
        num_workers=1,
        max_samples_per_sequence=10,
        shuffle=False,
        repeat=True,
    )


def test_stops_after_limit_and_resumes(train_ds: Path) -> None:
    ds = PreparedDataset(train_ds, "train")
    assert len(list(Limit(_reader(ds), 37))) == 37
    assert list(Limit(_reader(ds), 0)) == []
    stage = Limit(_reader(ds), 10)
    take(stage, 4)
    assert stage.save_state()["count"] == 4
    assert_stage_resumes(lambda: Limit(_reader(ds), 25))
    with pytest.raises(ConfigError, match=r"limit=-1 must be >= 0"):
        Limit(_reader(ds), -1)
