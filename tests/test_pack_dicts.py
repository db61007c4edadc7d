"""Packing plain dicts, as Energon allows: ``encode_sample`` returns dicts without
``__restore_key__`` and ``select_samples_to_pack`` / ``pack_selected_samples`` pack them.
Training runs as in Energon; the first such item logs a warning, and ``save_state_rank``
refuses, naming the hook and the one-line fix, which then makes the loader resume exactly."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from energon_lite import (
    StateError,
    TaskEncoder,
    WorkerConfig,
    get_savable_loader,
    get_train_dataset,
)
from energon_lite.testing import assert_loader_resumes

NUM_SAMPLES = 200  # the text_ds fixture


class DictPacker(TaskEncoder):
    """A real project's shape: dicts in, dicts packed in twos, batches of two packs."""

    def encode_sample(self, sample: Any) -> dict[str, Any]:
        words = sample.text.split()
        return {"tokens": torch.tensor([len(w) for w in words]), "key": sample.__key__}

    def select_samples_to_pack(self, samples: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
        return [samples[i : i + 2] for i in range(0, len(samples), 2)]

    def pack_selected_samples(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        tokens = torch.cat([s["tokens"] for s in samples])
        return {"tokens": tokens, "keys": [s["key"] for s in samples]}

    def batch(self, packs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return packs


class KeptKeys(DictPacker):
    """The one-line fix the refusal names."""

    def encode_sample(self, sample: Any) -> dict[str, Any]:
        out = super().encode_sample(sample)
        out["__restore_key__"] = sample.__restore_key__
        return out


def _loader(root: Path, te: TaskEncoder, workers: int, **kwargs: Any) -> Any:
    dataset = get_train_dataset(
        root,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=workers),
        batch_size=2,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        packing_buffer_size=6,
        task_encoder=te,
        **kwargs,
    )
    return get_savable_loader(dataset)


@pytest.mark.parametrize("workers", [0, 2])
def test_dict_samples_pack_and_train(text_ds: Path, workers: int) -> None:
    batches = list(_loader(text_ds, DictPacker(), workers, repeat=False))
    members = Counter(key for batch in batches for pack in batch for key in pack["keys"])
    assert sorted(members) == [f"{i:06d}" for i in range(NUM_SAMPLES)]
    assert set(members.values()) == {1}


@pytest.mark.parametrize("workers", [0, 2])
def test_saving_refuses_naming_the_hook_and_the_fix(text_ds: Path, workers: int) -> None:
    loader = _loader(text_ds, DictPacker(), workers)
    batches = iter(loader)
    next(batches)
    with pytest.raises(StateError) as refused:
        loader.save_state_rank()
    message = str(refused.value)
    assert "encode_sample returned a dict without __restore_key__" in message
    assert 'out["__restore_key__"] = sample.__restore_key__' in message
    next(batches)  # training goes on after the refusal
    with pytest.raises(StateError):  # and so does the refusal: not only by chance
        loader.save_state_rank()


def test_one_warning_when_the_first_keyless_item_enters(
    text_ds: Path, caplog: pytest.LogCaptureFixture
) -> None:
    loader = _loader(text_ds, DictPacker(), 0)
    with caplog.at_level(logging.WARNING, logger="energon_lite"):
        batches = iter(loader)
        for _ in range(5):
            next(batches)
    warned = [r for r in caplog.records if "without __restore_key__" in r.getMessage()]
    assert len(warned) == 1
    assert "encode_sample" in warned[0].getMessage()


@pytest.mark.parametrize("workers", [0, 2])
def test_the_fix_saves_and_resumes_exactly(text_ds: Path, workers: int) -> None:
    def make() -> Any:
        return _loader(text_ds, KeptKeys(), workers)

    def packs(batch: list[dict[str, Any]]) -> Any:
        return [(pack["keys"], pack["tokens"].tolist()) for pack in batch]

    assert_loader_resumes(make, 12, [0, 3, 7], key=packs)


class DictGrouper(TaskEncoder):
    """Dicts without keys, batched by bucket (batch_group_criterion)."""

    def encode_sample(self, sample: Any) -> dict[str, Any]:
        return {"bucket": len(sample.text.split()) % 3, "key": sample.__key__}

    def batch_group_criterion(self, sample: dict[str, Any]) -> tuple[int, int]:
        return sample["bucket"], 2

    def batch(self, samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return samples


@pytest.mark.parametrize("workers", [0, 2])
def test_grouped_dicts_train_and_refuse_every_save(text_ds: Path, workers: int) -> None:
    dataset = get_train_dataset(
        text_ds,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=workers),
        batch_size=2,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        task_encoder=DictGrouper(),
    )
    loader = get_savable_loader(dataset)
    batches = iter(loader)
    for _ in range(6):
        next(batches)
        with pytest.raises(StateError, match="GroupBatch: encode_sample returned a dict"):
            loader.save_state_rank()
