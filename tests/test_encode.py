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


def test_default_task_encoder_converts_to_the_given_types(train_ds) -> None:
    """Energon's DefaultTaskEncoder maps fields by name into the target types."""
    import dataclasses
    from typing import NamedTuple

    from energon_lite import (
        DefaultTaskEncoder,
        WorkerConfig,
        get_train_dataset,
    )
    from energon_lite.errors import ConfigError

    class Pair(NamedTuple):
        keys: list
        images: torch.Tensor

    def first(encoder: DefaultTaskEncoder) -> object:
        dataset = get_train_dataset(
            train_ds,
            worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
            batch_size=4,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
            task_encoder=encoder,
        )
        return next(iter(dataset))

    as_dicts = first(DefaultTaskEncoder(encoded_sample_type=dict))
    assert isinstance(as_dicts, dict) and as_dicts["image"].shape[0] == 4
    assert len(as_dicts["__key__"]) == 4

    class ToPair(DefaultTaskEncoder):
        def encode_batch(self, batch: CaptioningSample) -> dict:
            return {"keys": batch.__key__, "images": batch.image}

    assert isinstance(first(ToPair()), dict)
    converted = first(DefaultTaskEncoder(batch_type=dict))
    assert isinstance(converted, dict) and set(converted) >= {"__key__", "image", "caption"}
    assert dataclasses.is_dataclass(first(DefaultTaskEncoder()))
    with pytest.raises(ConfigError, match=r"Pair: it has no fields \['__key__'"):
        first(DefaultTaskEncoder(batch_type=Pair))
    with pytest.raises(ConfigError, match="need a dataclass, a NamedTuple or dict"):
        DefaultTaskEncoder(batch_type=list)
