"""Limit: at most ``limit`` items; the count is its state."""

from __future__ import annotations

from pathlib import Path

import pytest

from energon_lite.errors import ConfigError
from energon_lite.shards.dataset import PreparedDataset
from energon_lite.stages.limit import Limit
from energon_lite.stages.reader import Reader
from energon_lite.testing import assert_stage_resumes, make_reader, take


def _reader(ds: PreparedDataset) -> Reader:
    return make_reader(ds, seed=2, shuffle=False, repeat=True, open_slices=1)


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
