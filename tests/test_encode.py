"""Encode: typed samples through the TaskEncoder, bad samples skipped and logged, fetch re-encodes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from energon_lite import CaptioningSample, SkipSample, TaskEncoder
from energon_lite.errors import ConfigError, FailureTracker, TooManyFailuresError
from energon_lite.index.dataset import PreparedDataset
from energon_lite.index.meta import META_DIR
from energon_lite.sample_factory import SampleFactory
from energon_lite.stages.encode import Encode, LeafSpec
from energon_lite.testing import assert_stage_resumes, make_reader, take


class Noisy(TaskEncoder):
    def encode_sample(self, sample: CaptioningSample) -> CaptioningSample:
        index = int(sample.__key__)
        if index % 10 == 3:
            raise SkipSample()
        if index % 10 == 5:
            raise RuntimeError(f"broken sample {index}")
        sample.image = sample.image + torch.from_numpy(self.sample_rng.random(1)).float()
        return sample


def _encode(ds: PreparedDataset, te: TaskEncoder, tolerance: int = 100) -> Encode:
    reader = make_reader(ds, seed=5)
    spec = LeafSpec(SampleFactory(ds.config, ds.root / META_DIR), {"tag": "t"})
    return Encode(reader, [spec], te, seed=5, failures=FailureTracker(tolerance))


def test_skip_log_and_deterministic_randomness(
    train_ds: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ds = PreparedDataset(train_ds, "train")
    samples = list(_encode(ds, Noisy()))
    indices = sorted(int(s.__key__) for s in samples)
    assert indices == [i for i in range(120) if i % 10 not in (3, 5)]
    assert all(s.__subflavors__ == {"tag": "t"} for s in samples)
    assert (
        "skipping: encode_sample failed at key='000005', shard='parts/data-0.tar': RuntimeError: broken sample 5"
        in caplog.text
    )
    assert "000003" not in caplog.text  # SkipSample is silent
    stage = _encode(ds, Noisy())
    for sample in take(stage, 5):  # fetch re-encodes with the same per-sample random numbers
        assert torch.equal(stage.fetch(sample.__restore_key__).image, sample.image)
    assert_stage_resumes(lambda: _encode(ds, Noisy()), every=11)


def test_failure_tolerance_stops_the_run(train_ds: Path) -> None:
    class AllBroken(TaskEncoder):
        def encode_sample(self, sample: CaptioningSample) -> CaptioningSample:
            raise KeyError("no such field")

    ds = PreparedDataset(train_ds, "train")
    with pytest.raises(
        TooManyFailuresError,
        match=r"4 consecutive failures \(failure_tolerance=3\); last: encode_sample failed at key='\d+', shard='parts/data-\d\.tar': KeyError",
    ):
        list(_encode(ds, AllBroken(), tolerance=3))


def test_generator_hooks_are_refused_at_once(train_ds: Path) -> None:
    class Yields(TaskEncoder):
        def encode_sample(self, sample: CaptioningSample):
            yield sample
            yield sample

    ds = PreparedDataset(train_ds, "train")
    with pytest.raises(ConfigError, match=r"Yields\.encode_sample returned a generator"):
        next(iter(_encode(ds, Yields())))
