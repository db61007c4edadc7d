"""Packing and grouping plain dicts, as Energon allows (Megatron-LM's MIMO example packs them):
``encode_sample`` returns dicts without ``__restore_key__`` and ``select_samples_to_pack`` /
``pack_selected_samples`` (or ``batch_group_criterion``) take them. The buffers keep each
item's restore key beside it, so the loader saves at any step and a fresh loader restored
from the state continues exactly, also on another number of workers; no key is ever written
into the user's dicts."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from energon_lite import (
    TaskEncoder,
    WorkerConfig,
    get_savable_loader,
    get_train_dataset,
)
from energon_lite.errors import UnsavableStateError
from energon_lite.stages.base import Stage
from energon_lite.stages.pack import Pack
from energon_lite.testing import assert_loader_resumes, take

NUM_SAMPLES = 200  # the text_ds fixture
FIELDS = ["key", "noise", "tokens"]  # what the hooks put in their dicts, and all there is


class DictPacker(TaskEncoder):
    """A real project's shape: dicts in, dicts packed in twos, batches of two packs. The
    postencode draws from the per-sample generator, which a restore must seed the same."""

    def encode_sample(self, sample: Any) -> dict[str, Any]:
        words = sample.text.split()
        return {"tokens": torch.tensor([len(w) for w in words]), "key": sample.__key__}

    def select_samples_to_pack(self, samples: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
        return [samples[i : i + 2] for i in range(0, len(samples), 2)]

    def postencode_sample(self, sample: dict[str, Any]) -> dict[str, Any]:
        return {**sample, "noise": int(self.sample_rng.integers(1 << 30))}

    def pack_selected_samples(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "tokens": torch.cat([s["tokens"] for s in samples]),
            "keys": [s["key"] for s in samples],
            "noise": [s["noise"] for s in samples],
            "fields": sorted({field for s in samples for field in s}),
        }

    def batch(self, packs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return packs


class PackGrouper(DictPacker):
    """Packed dicts, then batched by bucket: the grouping buffer holds the packs' keys."""

    def batch_group_criterion(self, pack: dict[str, Any]) -> tuple[int, int]:
        return int(pack["tokens"].sum()) % 2, 2


class DictGrouper(TaskEncoder):
    """Dicts without keys, batched by bucket (batch_group_criterion), no packing."""

    def encode_sample(self, sample: Any) -> dict[str, Any]:
        return {"bucket": len(sample.text.split()) % 3, "key": sample.__key__}

    def batch_group_criterion(self, sample: dict[str, Any]) -> tuple[int, int]:
        return sample["bucket"], 2

    def batch(self, samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return samples


class KeptKeys(DictPacker):
    """The same packs from dicts that carry their key themselves (the typed-sample form)."""

    def encode_sample(self, sample: Any) -> dict[str, Any]:
        return {**super().encode_sample(sample), "__restore_key__": sample.__restore_key__}


def _loader(
    root: Path, te: TaskEncoder, workers: int, rank: int = 0, world: int = 1, **kwargs: Any
) -> Any:
    options: dict[str, Any] = {"packing_buffer_size": 6, "shuffle_buffer_size": 10, **kwargs}
    if not options["packing_buffer_size"]:
        del options["packing_buffer_size"]
    dataset = get_train_dataset(
        root,
        worker_config=WorkerConfig(rank=rank, world_size=world, num_workers=workers),
        batch_size=2,
        max_samples_per_sequence=10,
        task_encoder=te,
        **options,
    )
    return get_savable_loader(dataset)


def _packs(batch: list[dict[str, Any]]) -> list[Any]:
    return [(p["keys"], p["tokens"].tolist(), p["noise"], p["fields"]) for p in batch]


def _members(batch: list[dict[str, Any]]) -> list[str]:
    return [key for item in batch for key in (item["keys"] if "keys" in item else [item["key"]])]


@pytest.mark.parametrize("workers", [0, 2])
def test_dict_samples_pack_and_train_with_no_key_added(text_ds: Path, workers: int) -> None:
    batches = list(_loader(text_ds, DictPacker(), workers, repeat=False))
    members = Counter(key for batch in batches for key in _members(batch))
    assert sorted(members) == [f"{i:06d}" for i in range(NUM_SAMPLES)]
    assert set(members.values()) == {1}
    # the members reached the packer as the hooks made them, and the packs stay as made
    assert {tuple(p["fields"]) for batch in batches for p in batch} == {tuple(FIELDS)}
    assert all("__restore_key__" not in p for batch in batches for p in batch)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("te", [DictPacker, PackGrouper, DictGrouper])
def test_dicts_save_mid_epoch_and_a_fresh_loader_continues_exactly(
    text_ds: Path, workers: int, te: type[TaskEncoder]
) -> None:
    packing = 0 if te is DictGrouper else 6

    def make() -> Any:
        return _loader(text_ds, te(), workers, packing_buffer_size=packing)

    key = _members if te is DictGrouper else _packs
    reference = assert_loader_resumes(make, 14, [0, 3, 8], key=key)
    assert len(reference) == 14


@pytest.mark.parametrize("workers", [0, 2])
def test_the_state_of_dicts_is_the_state_of_keyed_samples(text_ds: Path, workers: int) -> None:
    """Keys beside the items save what keys inside them save: the state form is unchanged."""
    states = []
    for te in (DictPacker(), KeptKeys()):
        loader = _loader(text_ds, te, workers)
        take(loader, 5)
        states.append(loader.save_state_rank())
        loader.close()
    assert states[0]["workers"] == states[1]["workers"]
    assert any(w is not None for w in states[0]["workers"])


@pytest.mark.parametrize(("old", "new"), [((1, 2), (1, 3)), ((2, 1), (1, 2))])
def test_dict_packing_restores_elastically(
    text_ds: Path, old: tuple[int, int], new: tuple[int, int]
) -> None:
    """Saved on ``old`` (ranks, workers), restored with ``restore_state_global`` on ``new``:
    every sample of the epoch once, the packed ones included."""
    before, states = [], []
    for rank in range(old[0]):
        loader = _loader(text_ds, DictPacker(), old[1], rank, old[0], repeat=False)
        before += [key for batch in take(loader, 4) for key in _members(batch)]
        states.append(loader.save_state_rank())
        loader.close()
    after = []
    for rank in range(new[0]):
        loader = _loader(text_ds, DictPacker(), new[1], rank, new[0], repeat=False)
        loader.restore_state_global(states)
        after += [key for batch in loader for key in _members(batch)]
        loader.close()
    assert before and after
    assert Counter(before + after) == Counter(f"{i:06d}" for i in range(NUM_SAMPLES))


class Numbers(Stage):
    """A user's own stage whose dicts carry no key, and which cannot name one."""

    def __init__(self) -> None:
        self.count = 0

    def next(self) -> dict[str, Any]:
        self.count += 1
        return {"tokens": torch.tensor([self.count]), "key": str(self.count)}


def test_items_whose_key_nobody_knows_train_and_saving_refuses() -> None:
    pack = Pack(Numbers(), 4, DictPacker(), seed=0)
    packs = take(pack, 3)
    assert [p["keys"] for p in packs] == [["1", "2"], ["3", "4"], ["5", "6"]]
    with pytest.raises(UnsavableStateError, match="Pack: encode_sample returned a dict"):
        pack.save_state()
