"""Default batching follows Energon's rule: tensors pad-stacked, structures per field, the rest
(numbers, strings, NumPy arrays, None) listed. Megatron-Energon is the oracle where installed."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
import torch

from energon_lite import (
    CaptioningSample,
    DefaultTaskEncoder,
    TaskEncoder,
    WorkerConfig,
    get_loader,
    get_train_dataset,
)
from energon_lite.samples.types import Batch


class Pair(NamedTuple):
    a: int
    b: torch.Tensor


@dataclasses.dataclass
class Inner:
    score: float
    ids: torch.Tensor


@dataclasses.dataclass
class Encoded:
    weight: float
    index: int
    flag: bool
    text: str
    array: np.ndarray
    tokens: torch.Tensor
    meta: dict
    pair: Pair
    inner: Inner
    missing: Any


def _samples() -> list[Encoded]:
    return [
        Encoded(
            weight=0.5 + i,
            index=i,
            flag=i % 2 == 0,
            text=f"t{i}",
            array=np.arange(i + 1),
            tokens=torch.arange(i + 2),
            meta={"n": i, "v": torch.ones(2) * i},
            pair=Pair(i * 10, torch.full((1,), i)),
            inner=Inner(score=i / 4, ids=torch.tensor([i, i])),
            missing=None,
        )
        for i in range(3)
    ]


def _check(batch: Encoded) -> None:
    assert batch.weight == [0.5, 1.5, 2.5] and batch.index == [0, 1, 2]
    assert batch.flag == [True, False, True] and batch.text == ["t0", "t1", "t2"]
    assert isinstance(batch.array, list) and [a.tolist() for a in batch.array] == [
        [0],
        [0, 1],
        [0, 1, 2],
    ]
    assert batch.tokens.tolist() == [[0, 1, 0, 0], [0, 1, 2, 0], [0, 1, 2, 3]]  # padded
    assert batch.meta["n"] == [0, 1, 2] and batch.meta["v"].shape == (3, 2)
    assert isinstance(batch.pair, Pair) and batch.pair.a == [0, 10, 20]
    assert batch.pair.b.tolist() == [[0], [1], [2]]
    assert isinstance(batch.inner, Inner) and batch.inner.score == [0.0, 0.25, 0.5]
    assert batch.inner.ids.shape == (3, 2) and batch.missing == [None, None, None]


@pytest.mark.parametrize("encoder", [TaskEncoder, DefaultTaskEncoder])
def test_default_batch_lists_numbers_and_stacks_tensors(encoder: type) -> None:
    _check(encoder().batch(_samples()))


def test_generic_batch_is_the_default_batching_rule() -> None:
    """One rule: Energon's ``generic_batch`` batches a structure as the default batching
    batches each field, tolerant alike of a column that mixes tensors with None."""
    import energon_lite as el

    _check(el.generic_batch(_samples()))
    mixed = [{"x": torch.ones(2), "k": 1}, {"x": None, "k": 2}]
    assert (
        el.generic_batch(mixed)
        == DefaultTaskEncoder().batch(mixed)
        == {
            "x": [mixed[0]["x"], None],
            "k": [1, 2],
        }
    )


def test_same_batch_as_energon() -> None:
    energon = pytest.importorskip("megatron.energon")
    theirs = energon.DefaultTaskEncoder().batch(_samples())
    ours = DefaultTaskEncoder().batch(_samples())
    _check(theirs)  # the rule above is Energon's own
    for field in dataclasses.fields(Encoded):
        mine, other = getattr(ours, field.name), getattr(theirs, field.name)
        assert type(mine) is type(other), field.name
        assert repr(mine) == repr(other), field.name


@dataclasses.dataclass
class ScoredBatch(Batch):
    weight: list[float]
    tokens: torch.Tensor


def test_batch_from_samples_lists_numbers() -> None:
    samples = [{"__key__": f"k{i}", "weight": 0.8, "tokens": torch.ones(i + 1)} for i in range(3)]
    batch = ScoredBatch.from_samples(samples)
    assert batch.weight == [0.8] * 3 and batch.__key__ == ["k0", "k1", "k2"]
    assert batch.tokens.tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 1]]


@dataclasses.dataclass
class WeightedSample(CaptioningSample):
    weight: float
    batch_index: int


class Weighting(TaskEncoder):
    def encode_sample(self, sample: CaptioningSample) -> WeightedSample:
        return WeightedSample.extend(sample, weight=0.8, batch_index=self.current_batch_index)


def test_loader_batches_list_a_weight_and_the_batch_index(train_ds: Path) -> None:
    dataset = get_train_dataset(
        train_ds,
        batch_size=5,
        task_encoder=Weighting(),
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
    )
    loader = get_loader(dataset)
    batches = [batch for _, batch in zip(range(3), loader)]
    assert [b.weight for b in batches] == [[0.8] * 5] * 3
    assert [b.batch_index for b in batches] == [[0] * 5, [1] * 5, [2] * 5]
    assert batches[0].image.shape == (5, 3, 16, 16)
    again = loader.restore_sample(batches[2].__restore_key__)
    assert again.batch_index == batches[2].batch_index and again.__key__ == batches[2].__key__
