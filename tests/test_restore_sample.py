"""``SavableLoader.restore_sample(restore_key)`` / ``can_restore_sample()`` (Energon's names).

A delivered batch's ``__restore_key__`` makes the same batch again in the trainer process,
whichever worker made it: keys, restore keys, tensors (including random augmentation keyed
by the sample) and the ``encode_batch`` step. A key of another dataset is a StateError.
"""

from __future__ import annotations

import dataclasses
from itertools import islice
from pathlib import Path

import pytest
import torch

from energon_lite import (
    CaptioningSample,
    DefaultTaskEncoder,
    TextSample,
    WorkerConfig,
    get_savable_loader,
    get_train_dataset,
    get_val_dataset,
)
from energon_lite.errors import StateError
from energon_lite.state.restore_key import PackKey, SampleKey, to_plain


class NoisyEncoder(DefaultTaskEncoder):
    """Random noise per sample (``sample_rng``) and a batch-level step."""

    def encode_sample(self, sample: CaptioningSample) -> CaptioningSample:
        image = sample.image.float() + torch.from_numpy(self.sample_rng.random(1)).float()
        return dataclasses.replace(sample, image=image)

    def encode_batch(self, batch: CaptioningSample) -> CaptioningSample:
        return dataclasses.replace(batch, caption=[c.upper() for c in batch.caption])


def _loader(path: Path, workers: int):
    dataset = get_train_dataset(
        path,
        worker_config=WorkerConfig(0, 1, workers),
        batch_size=3,
        shuffle_buffer_size=7,
        max_samples_per_sequence=4,
        task_encoder=NoisyEncoder(),
    )
    return get_savable_loader(dataset, watchdog_timeout_seconds=None)


def _assert_same(restored: CaptioningSample, batch: CaptioningSample) -> None:
    assert restored.__key__ == batch.__key__
    assert restored.__restore_key__ == batch.__restore_key__
    assert restored.caption == batch.caption and restored.caption[0].isupper()
    assert torch.equal(restored.image, batch.image)


@pytest.mark.parametrize("workers", [0, 2])
def test_restore_sample_makes_the_delivered_batch_again(train_ds: Path, workers: int) -> None:
    loader = _loader(train_ds, workers)
    assert loader.can_restore_sample()
    batches = list(islice(loader, 6))
    loader.close()
    for batch in batches:
        _assert_same(loader.restore_sample(batch.__restore_key__), batch)
    # the plain form (as saved in a state or a log) works too
    plain = [to_plain(key) for key in batches[-1].__restore_key__]
    _assert_same(loader.restore_sample(plain), batches[-1])


def test_a_sample_key_of_a_batch_gives_that_encoded_sample(train_ds: Path) -> None:
    loader = _loader(train_ds, 0)
    batch = next(iter(loader))
    sample = loader.restore_sample(batch.__restore_key__[1])
    assert sample.__key__ == batch.__key__[1]
    assert torch.equal(sample.image, batch.image[1])


def test_unbatched_val_sample(split_ds: Path) -> None:
    dataset = get_val_dataset(split_ds, worker_config=WorkerConfig(0, 1, 0), batch_size=None)
    loader = get_savable_loader(dataset)
    samples = list(islice(loader, 3))
    for sample in samples:
        again = loader.restore_sample(sample.__restore_key__)
        assert again.__key__ == sample.__key__ and again.caption == sample.caption
        assert torch.equal(again.image, sample.image)


@pytest.mark.parametrize(
    "key, named",
    [
        ([SampleKey(0, 99, 0, 0)], "shard=99"),  # no such shard
        ([SampleKey(3, 0, 0, 0)], "leaf=3"),  # another (meta)dataset's leaf
        ([["s", 0, 0, 999, 0]], "999"),  # past the shard's end
        ("not-a-key", "not-a-key"),
        ([["Webdataset-x", 1]], "Webdataset-x"),
    ],
)
def test_a_foreign_key_is_a_state_error_naming_it(train_ds: Path, key, named: str) -> None:
    loader = _loader(train_ds, 0)
    with pytest.raises(StateError, match="restore_sample") as error:
        loader.restore_sample(key)
    assert named in str(error.value)


class PackPairs(DefaultTaskEncoder):
    """Packs of two texts, batched in buckets by the packed length's parity."""

    def select_samples_to_pack(self, samples: list[TextSample]) -> list[list[TextSample]]:
        return [samples[i : i + 2] for i in range(0, len(samples), 2)]

    def pack_selected_samples(self, samples: list[TextSample]) -> TextSample:
        return TextSample.derive_from(samples[0], text=" + ".join(s.text for s in samples))

    def batch_group_criterion(self, sample: TextSample) -> tuple[int, int]:
        return len(sample.text) % 2, 2


def test_packed_and_bucketed_batches(text_ds: Path) -> None:
    dataset = get_train_dataset(
        text_ds,
        worker_config=WorkerConfig(0, 1, 0),
        batch_size=None,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        packing_buffer_size=6,
        task_encoder=PackPairs(),
    )
    loader = get_savable_loader(dataset)
    assert loader.can_restore_sample()
    for batch in islice(loader, 4):
        assert all(isinstance(key, PackKey) for key in batch.__restore_key__)
        again = loader.restore_sample(batch.__restore_key__)
        assert again.text == batch.text and " + " in again.text[0]
        assert again.__restore_key__ == batch.__restore_key__


def test_restoring_between_batches_leaves_the_stream_and_its_state_alone(train_ds: Path) -> None:
    plain = list(islice(_loader(train_ds, 0), 5))
    loader = _loader(train_ds, 0)
    stream = iter(loader)
    first = next(stream)
    state = loader.save_state_rank()
    loader.restore_sample(plain[3].__restore_key__)
    assert loader.save_state_rank() == state
    rest = [next(stream) for _ in range(4)]
    for got, expected in zip([first, *rest], plain):
        _assert_same(got, expected)
