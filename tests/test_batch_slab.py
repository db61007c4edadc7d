"""Images decoded straight into their batch (energon_lite/batching/slab.py) and the C tar
checksum: the batches and errors users get are the same as before."""

from __future__ import annotations

import random
import tarfile
from pathlib import Path
from typing import Any

import pytest
import torch

from energon_lite import (
    DefaultTaskEncoder,
    SkipSample,
    WorkerConfig,
    get_savable_loader,
    get_train_dataset,
)
from energon_lite.batching.collate import batch_stack
from energon_lite.batching.slab import MAX_BACKOFF, SlabScope, claim, slot
from energon_lite.decode.image import decode_image
from energon_lite.shards.tar import _byte_sum

SHAPE = (3, 4, 5)


def _fill(value: float) -> torch.Tensor:
    out = slot(torch.float32, SHAPE)
    assert out is not None
    return out.fill_(value)


def test_consecutive_slots_are_the_batch_without_a_copy() -> None:
    scope = SlabScope(4)
    with scope:
        values = [_fill(float(i)) for i in range(4)]
        batch = batch_stack(values)
        assert batch.data_ptr() == values[0].data_ptr() and batch.shape == (4, *SHAPE)
    assert torch.equal(batch, torch.stack([torch.full(SHAPE, float(i)) for i in range(4)]))
    with scope:  # the next batch gets a slab of its own: the first one is never written again
        again = batch_stack([_fill(9.0) for _ in range(3)])  # a last, partial batch
    assert again.shape == (3, *SHAPE) and again.data_ptr() != batch.data_ptr()
    assert torch.equal(batch[:, 0, 0, 0], torch.arange(4.0))


@pytest.mark.parametrize("case", ["reordered", "slot_left_out", "transformed", "other_shape"])
def test_anything_but_the_slots_in_order_is_stacked(case: str) -> None:
    scope = SlabScope(4)
    with scope:
        values = [_fill(float(i)) for i in range(4)]
        if case == "reordered":
            values = values[::-1]
        elif case == "slot_left_out":
            values = values[1:]
        elif case == "transformed":
            values = [v * 2 for v in values]
        else:
            assert slot(torch.float32, (3, 4, 6)) is None  # not the slab's shape
            values = [torch.ones((3, 4, 6))] * 2
        assert claim(values) is None
        batch = batch_stack(values)
        assert batch.data_ptr() != values[0].data_ptr()
        assert torch.equal(batch, torch.stack(values))


def test_unclaimed_slabs_back_off() -> None:
    scope = SlabScope(2)
    pattern = []
    for _ in range(1 + 1 + 2 + 4 + 1):  # each batch is stacked from copies: never claimed
        with scope:
            got = slot(torch.float32, SHAPE)
            pattern.append(got is not None)
            batch_stack([torch.zeros(SHAPE), torch.zeros(SHAPE)])
    assert pattern == [True, False, True, False, False, True] + [False] * 3
    assert scope.backoff == 8 <= MAX_BACKOFF
    assert slot(torch.float32, SHAPE) is None  # outside any scope


def _jpegs(root: Path) -> dict[str, bytes]:
    out = {}
    for shard in sorted((root / "parts").glob("*.tar")):
        with tarfile.open(shard) as tar:
            for member in tar.getmembers():
                if member.name.endswith(".jpg"):
                    data = tar.extractfile(member)
                    assert data is not None
                    out[member.name[: -len(".jpg")]] = data.read()
    return out


class SkipSome(DefaultTaskEncoder):
    """Skips every seventh sample after decoding it (its slot is left out of the batch)."""

    def encode_sample(self, sample: Any) -> Any:
        if int(sample.__key__[-3:]) % 7 == 3:
            raise SkipSample()
        return sample


class Flip(DefaultTaskEncoder):
    def encode_sample(self, sample: Any) -> Any:
        sample.image = sample.image.flip(-1)
        return sample


@pytest.mark.parametrize("encoder", [None, SkipSome, Flip])
def test_loader_batches_hold_each_decoded_image(train_ds: Path, encoder: type | None) -> None:
    """Float images in the loader's batches equal decoding each JPEG alone, bit for bit,
    with samples skipped after decoding and with a transform that makes new tensors."""
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = get_train_dataset(
        train_ds, worker_config=wc, batch_size=8, shuffle_buffer_size=10,
        max_samples_per_sequence=10, repeat=False,
        **({} if encoder is None else {"task_encoder": encoder()}),
    )  # fmt: skip
    jpegs = _jpegs(train_ds)
    seen = 0
    for batch in get_savable_loader(ds):
        assert batch.image.dtype == torch.float32 and batch.image.is_contiguous()
        for key, image in zip(batch.__key__, batch.image, strict=True):
            want = decode_image(jpegs[key], "torchrgb")
            if encoder is Flip:
                want = want.flip(-1)
            assert torch.equal(image.view(torch.int32), want.view(torch.int32)), key
            seen += 1
    skipped = sum(int(key[-3:]) % 7 == 3 for key in jpegs) if encoder is SkipSome else 0
    assert seen == len(jpegs) - skipped and seen > 100


def test_checksum_sum_in_c_equals_the_plain_sum() -> None:
    rng = random.Random(0)
    headers = [bytes([255]) * 512, bytes(512)]
    headers += [bytes(rng.randrange(256) for _ in range(512)) for _ in range(200)]
    for header in headers:
        assert _byte_sum(header) == sum(header[:148]) + 8 * 32 + sum(header[156:])
