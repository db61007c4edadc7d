"""``energon-lite demo``: prepare a small dataset, train over it, checkpoint and resume the loader.

Shows the whole path a user takes: real JPEG+caption shards -> ``prepare`` -> a TaskEncoder
with a random augmentation -> a 2-worker savable loader -> ``save_state_rank`` midway ->
a fresh loader restored from the state -> the continued stream matches batch for batch.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from energon_lite.loader.api import get_savable_loader, get_train_dataset
from energon_lite.samples.types import Batch, CaptioningSample
from energon_lite.shards.prepare import prepare_dataset
from energon_lite.state.codec import decode_state, encode_state
from energon_lite.synth.shards import write_captioning_shards
from energon_lite.task_encoder.base import TaskEncoder
from energon_lite.worker import WorkerConfig


@dataclass
class DemoBatch(Batch):
    images: torch.Tensor = None  # type: ignore[assignment]
    caption_lengths: torch.Tensor = None  # type: ignore[assignment]


class DemoTaskEncoder(TaskEncoder):
    """Random horizontal flip from the per-sample generator, caption length as a target."""

    def encode_sample(self, sample: CaptioningSample) -> CaptioningSample:
        if self.sample_rng.random() < 0.5:
            sample.image = sample.image.flip(-1)
        return sample

    def batch(self, samples: list[CaptioningSample]) -> DemoBatch:
        return DemoBatch.from_samples(
            samples,
            images=torch.stack([s.image for s in samples]),
            caption_lengths=torch.tensor([len(s.caption.split()) for s in samples]),
        )


def _loader(path: Path, num_workers: int, batch_size: int):
    dataset = get_train_dataset(
        path,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=num_workers),
        batch_size=batch_size,
        shuffle_buffer_size=100,
        max_samples_per_sequence=50,
        task_encoder=DemoTaskEncoder(),
    )
    return get_savable_loader(dataset)


def run_demo(
    folder: str | None = None,
    num_samples: int = 2000,
    steps: int = 80,
    batch_size: int = 16,
    num_workers: int = 2,
    print_fn=print,
) -> bool:
    """Run the demo; returns True when the resumed stream matched."""
    with tempfile.TemporaryDirectory(prefix="energon-lite-demo-") as tmp:
        root = Path(folder) if folder else Path(tmp) / "captions"
        print_fn(f"1. writing {num_samples} JPEG+caption samples to {root}")
        # ten shards (of at most 200): every split of the 8,1,1 ratio gets whole shards
        per_shard = max(1, min(200, num_samples // 10))
        write_captioning_shards(root, num_samples, per_shard, image_size=(96, 96))
        print_fn("2. preparing the dataset (energon-lite prepare)")
        report = prepare_dataset(
            root,
            split_ratio=[("train", 8), ("val", 1), ("test", 1)],
            sample_type="CaptioningSample",
            field_map={"image": "jpg", "caption": "txt"},
            force_overwrite=True,
        )
        print_fn(
            f"   {report.num_samples} samples in {len(report.shard_names)} shards, parts {sorted(report.parts)}"
        )

        save_at = steps // 2
        print_fn(
            f"3. training {steps} steps with {num_workers} workers, saving the loader state at step {save_at}"
        )
        loader = _loader(root, num_workers, batch_size)
        start, seen, state, after_save = time.perf_counter(), 0, b"", []
        # a bar updated by hand: tqdm(loader) left it at 99% when the loop breaks at the end
        with tqdm(total=steps, desc="train", unit="batch") as bar:
            for step, batch in enumerate(loader):
                seen += len(batch.__key__)
                if step >= save_at:
                    after_save.append((batch.__key__, batch.images))
                if step + 1 == save_at:
                    state = encode_state(loader.save_state_rank())
                bar.update()
                if step + 1 == steps:
                    break
        rate = seen / (time.perf_counter() - start)
        print_fn(f"   {seen} samples at {rate:.0f} samples/s; loader state: {len(state)} bytes")

        print_fn(f"4. a fresh loader restored from the step-{save_at} state")
        resumed = _loader(root, num_workers, batch_size)
        t0 = time.perf_counter()
        resumed.restore_state_rank(decode_state(state))
        matched, first = True, None
        for (keys, images), batch in zip(after_save, resumed):
            first = first if first is not None else time.perf_counter() - t0
            matched &= keys == batch.__key__ and torch.equal(images, batch.images)
        print_fn(f"   first batch {first:.2f} s after restore")
        verdict = "identical" if matched else "DIFFERENT"
        print_fn(
            f"5. the {len(after_save)} batches after the checkpoint are {verdict} (keys and pixels)"
        )
        return matched
