"""Video-text clips written straight into their bucket's batch: the same batches, no copy.

``VideoTextTaskEncoder`` writes each clip into its row of its bucket's next batch
(``batching/group_slab.py``); these tests hold it to the values of the path that makes each
clip on its own and stacks the batch (a transform that is not one of the built-in ones),
on PyAV-made videos, in one process and with 2 worker processes.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset
from energon_lite.batching.group_slab import MAX_WAITING, GroupSlabs
from energon_lite.flavors.video_text import VideoTextTaskEncoder, prepare_video_text, resize_crop
from energon_lite.synth.video_text import make_media, write_table
from energon_lite.testing import take

# 48x64 and 64x48 videos and the 48x64 image; the 64x48 mkv is resized to 32x24 (antialiased)
BUCKETS = {
    "4:3": {"48x64": {1: (1.0, 3), 16: (1.0, 2)}},
    "3:4": {"32x24": {8: (1.0, 3)}},
    "3:2": {"32x48": {8: (1.0, 4)}},
}


def _copying(frames: torch.Tensor, size: tuple[int, int], rng: np.random.Generator | None) -> Any:
    """The built-in random crop as a transform of the user's: each clip a tensor of its own."""
    return resize_crop(frames, size, rng=rng, random_crop=rng is not None)


class CopyingTaskEncoder(VideoTextTaskEncoder):
    """Each clip made on its own and copied into its batch (the path before the rows)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.transform = _copying


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("vt_rows")
    csv_path = write_table(folder / "videos.csv", make_media(folder), 40)
    prepare_video_text(csv_path, progress=False)
    return csv_path


def _batches(path: Path, encoder: VideoTextTaskEncoder, num_workers: int, count: int) -> list:
    dataset = get_train_dataset(
        path,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=num_workers),
        batch_size=None,
        shuffle_buffer_size=8,
        max_samples_per_sequence=5,
        task_encoder=encoder,
    )
    return [(b["__key__"], b["video"].clone()) for b in take(get_savable_loader(dataset), count)]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_batches_equal_to_the_bit_those_stacked_from_clips(table: Path, num_workers: int) -> None:
    got = _batches(table, VideoTextTaskEncoder(BUCKETS, seed=5, random_crop=True), num_workers, 24)
    want = _batches(table, CopyingTaskEncoder(BUCKETS, seed=5, random_crop=True), num_workers, 24)
    shapes = set()
    for (keys, video), (want_keys, want_video) in zip(got, want, strict=True):
        assert keys == want_keys
        assert video.shape == want_video.shape and video.is_contiguous()
        assert torch.equal(video.view(torch.int32), want_video.view(torch.int32))
        shapes.add(tuple(video.shape[1:]))
    assert (3, 8, 32, 24) in shapes and (3, 16, 48, 64) in shapes  # resized, and at size
    assert len(shapes) == 4


def test_a_bucket_batch_is_its_clips_rows_and_other_orders_are_copied(table: Path) -> None:
    """In one process: clips of two buckets arrive interleaved; each bucket's batch is the
    tensor its clips were written into; a batch of the same clips in another order, or
    with a clip replaced by a tensor of its own, is stacked by copying."""
    from energon_lite.flavors.video_text.sample import VideoTextSample

    media = table.parent / "media"
    encoder = VideoTextTaskEncoder(BUCKETS, seed=0, training=False)

    def encode(name: str, index: int, height: int, width: int, frames: int) -> dict[str, Any]:
        sample = VideoTextSample(__key__=f"v:{index}", __restore_key__=("Webdataset", index),
                                 path=str(media / name), text="t", num_frames=frames,
                                 height=height, width=width, fps=24.0)  # fmt: skip
        encoder._set_sample_context(0, sample.__restore_key__)
        return encoder.encode_sample(sample)

    wide = [encode("wide.mp4", i, 48, 64, 48) for i in range(2)]
    tall = [encode("tall.mkv", 10 + i, 64, 48, 40) for i in range(3)]
    assert {w["bucket"].batch_size for w in wide} == {2} and tall[0]["bucket"].batch_size == 3
    first = wide[0]["video"].data_ptr()
    batch = encoder.batch(wide)["video"]
    assert batch.data_ptr() == first and batch.shape == (2, 3, 16, 48, 64)  # nothing copied
    assert torch.equal(batch[1], resize_crop(_frames(wide[1]), (48, 64)))
    # the same clips of the tall bucket in another order: a copy, with the same values
    values = [t["video"].clone() for t in tall]
    batch = encoder.batch([tall[2], tall[0], tall[1]])["video"]
    assert batch.data_ptr() != tall[0]["video"].data_ptr()
    assert torch.equal(batch, torch.stack([values[2], values[0], values[1]]))
    # the bucket's next clips start a slab of their own, which their batch is again
    more = [encode("tall.mkv", 20 + i, 64, 48, 40) for i in range(3)]
    assert encoder.batch(more)["video"].data_ptr() == more[0]["video"].data_ptr()
    # a clip replaced by a tensor of the user's own: copied
    again = [encode("wide.mp4", 30 + i, 48, 64, 48) for i in range(2)]
    again[1] = {**again[1], "video": again[1]["video"] * 1.0}
    batch = encoder.batch(again)["video"]
    assert batch.data_ptr() != again[0]["video"].data_ptr()
    assert torch.equal(batch[1], again[1]["video"])


def _frames(encoded: dict[str, Any]) -> torch.Tensor:
    """The uint8 frames a [-1, 1] clip was made from (exact: k / 127.5 - 1 is distinct per k)."""
    return ((encoded["video"] + 1.0) * 127.5).round().to(torch.uint8).permute(1, 0, 2, 3)


def test_group_slabs_rows_claims_and_give_back() -> None:
    slabs = GroupSlabs()
    a = [slabs.row("a", 3, torch.float32, (2, 5)) for _ in range(2)]
    b = [slabs.row("b", 2, torch.float32, (4,)) for _ in range(2)]
    for i, row in enumerate(a + b):
        row.fill_(i)
    # a partial slab (the last batch of a finite stream): its first rows
    batch = slabs.claim("a", a)
    assert batch is not None and batch.shape == (2, 2, 5) and batch.data_ptr() == a[0].data_ptr()
    assert batch[:, 0, 0].tolist() == [0, 1]
    assert slabs.claim("b", b[::-1]) is None  # another order: the caller copies
    assert slabs.claim("b", b) is None  # and that slab was let go
    # a row whose sample failed goes back and is handed out again
    row = slabs.row("c", 2, torch.float32, (3,))
    slabs.give_back("c", row)
    again = slabs.row("c", 2, torch.float32, (3,))
    assert again.data_ptr() == row.data_ptr()
    # full slabs that no batch claims are kept for at most MAX_WAITING batches
    for _ in range(2 * (MAX_WAITING + 3)):
        slabs.row("d", 2, torch.float32, (3,))
    assert len(slabs._slabs["d"]) == MAX_WAITING + 1
    # a copy (a worker's, pickled) starts with none
    copy = pickle.loads(pickle.dumps(slabs))
    assert copy._slabs == {}
