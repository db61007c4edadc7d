"""An Energon TaskEncoder moves over with an import change: the requirement document's
captioning example (section 9.3), with `from megatron.energon import` -> `from energon_lite import`
and a tiny tokenizer in place of a Hugging Face one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from energon_lite import (
    Batch,
    CaptioningSample,
    DefaultTaskEncoder,
    SampleDecoder,
    WorkerConfig,
    get_savable_loader,
    get_train_dataset,
    stateless,
)
from energon_lite.state.restore_key import SampleKey


def tokenizer(
    texts: list[str], padding: bool, truncation: bool, max_length: int, return_tensors: str
) -> dict:
    ids = [[len(word) for word in text.split()][:max_length] for text in texts]
    width = max(len(row) for row in ids)
    input_ids = torch.zeros(len(ids), width, dtype=torch.long)
    mask = torch.zeros(len(ids), width, dtype=torch.long)
    for row, tokens in enumerate(ids):
        input_ids[row, : len(tokens)] = torch.tensor(tokens)
        mask[row, : len(tokens)] = 1
    return {"input_ids": input_ids, "attention_mask": mask}


@dataclass
class CaptioningRawBatch(Batch):
    image: torch.Tensor  # (n, c, h, w)
    caption: list[str]  # (n,)


@dataclass
class CaptioningBatch(Batch):
    images: torch.Tensor  # (n, c, h, w)
    text_tokens: torch.Tensor  # (n, L)
    text_attn_mask: torch.Tensor  # (n, L)


class CaptioningTaskEncoder(
    DefaultTaskEncoder[CaptioningSample, CaptioningSample, CaptioningRawBatch, CaptioningBatch]
):
    decoder = SampleDecoder(image_decode="torchrgb")

    def __init__(
        self, tokenizer: Callable, image_transform: Callable | None = None, max_length: int = 128
    ):
        super().__init__(batch_type=CaptioningRawBatch)
        self.tokenizer = tokenizer
        self.image_transform = image_transform
        self.max_length = max_length

    def encode_sample(self, sample: CaptioningSample) -> CaptioningSample:
        if self.image_transform is not None:
            sample.image = self.image_transform(sample.image)
        return sample

    def batch(self, samples: list[CaptioningSample]) -> CaptioningRawBatch:
        return CaptioningRawBatch.from_samples(samples)

    @stateless
    def encode_batch(self, batch_data: CaptioningRawBatch) -> CaptioningBatch:
        tokenized = self.tokenizer(batch_data.caption, padding=True, truncation=True,
                                   max_length=self.max_length, return_tensors="pt")  # fmt: skip
        return CaptioningBatch.derive_from(
            batch_data,
            images=batch_data.image,
            text_tokens=tokenized["input_ids"],
            text_attn_mask=tokenized["attention_mask"],
        )


def test_the_documents_captioning_encoder_runs_and_resumes(train_ds: Path) -> None:
    def make():
        encoder = CaptioningTaskEncoder(tokenizer, image_transform=lambda image: image * 2 - 1)
        dataset = get_train_dataset(train_ds, worker_config=WorkerConfig(rank=0, world_size=1, num_workers=2),
                                    batch_size=6, shuffle_buffer_size=20, max_samples_per_sequence=10,
                                    task_encoder=encoder)  # fmt: skip
        return get_savable_loader(dataset)

    loader = make()
    batches = iter(loader)
    first = next(batches)
    assert isinstance(first, CaptioningBatch)
    assert (
        first.images.shape == (6, 3, 16, 16)
        and first.images.min() >= -1
        and first.images.max() <= 1
    )
    assert first.text_tokens.shape == first.text_attn_mask.shape and first.text_tokens.shape[0] == 6
    assert len(first.__key__) == 6 and isinstance(first.__restore_key__[0], SampleKey)
    state = loader.save_state_rank()
    expected = [next(batches).__key__ for _ in range(3)]
    resumed = make()
    resumed.restore_state_rank(state)
    again = iter(resumed)
    assert [next(again).__key__ for _ in range(3)] == expected


def test_batch_from_samples_collates_fields_by_name() -> None:
    samples = [
        CaptioningSample(
            __key__=f"k{i}",
            __restore_key__=("x", i),
            image=torch.ones(3, 2 + i, 2),
            caption=f"c{i}",
        )
        for i in range(3)
    ]
    batch = CaptioningRawBatch.from_samples(samples)
    assert batch.image.shape == (3, 3, 4, 2)  # padded to the largest, then stacked
    assert batch.image[0, :, 2:].abs().sum() == 0 and batch.caption == ["c0", "c1", "c2"]
    assert batch.__key__ == ["k0", "k1", "k2"]
    derived = CaptioningBatch.derive_from(batch, images=batch.image, text_tokens=torch.zeros(3, 1),
                                          text_attn_mask=torch.ones(3, 1))  # fmt: skip
    assert derived.__key__ == batch.__key__ and derived.__restore_key__ == batch.__restore_key__
