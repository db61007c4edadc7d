"""Encode: typed samples through the TaskEncoder, bad samples skipped and logged, fetch re-encodes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from energon_lite import CaptioningSample, SkipSample, TaskEncoder, TextSample
from energon_lite.errors import ConfigError, FailureTracker, TooManyFailuresError
from energon_lite.samples.factory import SampleFactory
from energon_lite.shards.dataset import PreparedDataset
from energon_lite.shards.meta import META_DIR
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
    caplog.set_level("DEBUG", logger="energon_lite")  # past the first few, failures log at DEBUG
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


def test_a_hook_that_fails_every_sample_logs_a_few_lines_then_counts(
    train_ds: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A typo in encode_sample fails all samples: the first 3 are logged, then the count at
    10 and 100 failures, not one line per sample (the rest go to DEBUG)."""

    class Typo(TaskEncoder):
        def encode_sample(self, sample: CaptioningSample) -> CaptioningSample:
            return sample.imagee  # type: ignore[attr-defined]

    ds = PreparedDataset(train_ds, "train")
    caplog.set_level("WARNING", logger="energon_lite")
    assert list(_encode(ds, Typo(), tolerance=1000)) == []  # 120 samples, all failed
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("skipping:")]
    assert len(lines) == 5, lines
    assert all("AttributeError" in line and "imagee" in line for line in lines)
    assert "failures so far" not in " ".join(lines[:3])
    assert lines[3].endswith("(10 failures so far; logged: the first 3, then each tenfold)")
    assert lines[4].endswith("(100 failures so far; logged: the first 3, then each tenfold)")


def test_default_task_encoder_converts_to_the_given_types(train_ds) -> None:
    """Energon's DefaultTaskEncoder maps fields by name into the target types."""
    import dataclasses
    from typing import NamedTuple

    from energon_lite import (
        DefaultTaskEncoder,
        WorkerConfig,
        get_train_dataset,
    )

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


class Chunker(TaskEncoder):
    """Yields 1-3 text chunks per caption sample (a generator hook, as Energon allows)."""

    def encode_sample(self, sample: CaptioningSample):
        words = sample.caption.split()
        for index in range(1 + len(words) % 3):
            yield TextSample.derive_from(sample, text=f"{index}:{' '.join(words[index:])}")


def _chunk_loader(root, num_workers: int):
    from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset

    return get_savable_loader(
        get_train_dataset(
            root,
            worker_config=WorkerConfig(rank=0, world_size=1, num_workers=num_workers),
            batch_size=3,
            shuffle_buffer_size=8,
            max_samples_per_sequence=10,
            task_encoder=Chunker(),
        )
    )


@pytest.mark.parametrize("num_workers", [0, 2])
def test_generator_hooks_yield_every_output_and_resume_mid_generator(train_ds, num_workers):
    from energon_lite.state.restore_key import SubKey
    from energon_lite.testing import assert_loader_resumes, take

    batches = take(_chunk_loader(train_ds, num_workers), 10)
    keys = [k for b in batches for k in b.__restore_key__]
    assert all(isinstance(k, SubKey) for k in keys) and len(set(keys)) == len(keys)
    texts = [t for b in batches for t in b.text]
    assert any(t.startswith("1:") for t in texts)  # several outputs per input arrived
    # save points fall inside generators (3 outputs per batch, 1-3 per sample)
    assert_loader_resumes(lambda: _chunk_loader(train_ds, num_workers), 10, [1, 2, 4, 7])


def test_generator_hook_stage_resumes_at_every_output(train_ds) -> None:
    from energon_lite.samples.factory import SampleFactory
    from energon_lite.shards.dataset import PreparedDataset
    from energon_lite.stages.encode import Encode, LeafSpec
    from energon_lite.testing import assert_stage_resumes, make_reader

    dataset = PreparedDataset(train_ds, "train")
    spec = LeafSpec(SampleFactory(dataset.config, dataset.root / ".nv-meta"))

    def make():
        return Encode(make_reader(dataset), [spec], Chunker(), 0, FailureTracker(0))

    reference = assert_stage_resumes(make, None, every=3)
    assert len(reference) > len(dataset)  # more outputs than inputs


def test_batch_level_generator_hooks_are_refused_by_name(train_ds) -> None:
    from energon_lite import WorkerConfig, get_train_dataset

    class YieldingBatches(TaskEncoder):
        def encode_batch(self, batch):
            yield batch

    dataset = get_train_dataset(
        train_ds,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
        batch_size=2,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        task_encoder=YieldingBatches(),
    )
    with pytest.raises(ConfigError, match="encode_batch returned a generator"):
        next(iter(dataset))
