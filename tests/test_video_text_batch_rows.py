"""Video-text clips written straight into their bucket's batch (``batching/group_slab.py``):
a bucket's batch is the tensor its clips were written into, on PyAV-made videos; anything
else is copied. The loader's batches against the copying path, with 2 worker processes:
``tests/test_video_text_loader.py``.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
import torch

from energon_lite.batching.group_slab import MAX_WAITING, GroupSlabs
from energon_lite.flavors.video_text import VideoTextTaskEncoder, resize_crop
from energon_lite.synth.video_text import make_media

# 48x64 and 64x48 videos and the 48x64 image; the 64x48 mkv is resized to 32x24 (antialiased)
BUCKETS = {
    "4:3": {"48x64": {1: (1.0, 3), 16: (1.0, 2)}},
    "3:4": {"32x24": {8: (1.0, 3)}},
    "3:2": {"32x48": {8: (1.0, 4)}},
}


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("vt_rows")
    make_media(folder)
    return folder / "media"


def test_a_bucket_batch_is_its_clips_rows_and_other_orders_are_copied(media: Path) -> None:
    """In one process: clips of two buckets arrive interleaved; each bucket's batch is the
    tensor its clips were written into; a batch of the same clips in another order, or
    with a clip replaced by a tensor of its own, is stacked by copying."""
    from energon_lite.flavors.video_text.sample import VideoTextSample

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


def test_a_subclass_that_batches_its_own_way_gets_clips_of_their_own(media: Path) -> None:
    """A subclass overriding ``batch`` never claims slabs, so its clips are not written into
    any: otherwise every bucket would keep up to MAX_WAITING batch-sized slabs alive."""
    from energon_lite.flavors.video_text.sample import VideoTextSample

    class OwnBatch(VideoTextTaskEncoder):
        def batch(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
            return {"video": torch.stack([s["video"] for s in samples])}

    encoder = OwnBatch(BUCKETS, seed=0, training=False)
    assert encoder._slabs is None
    sample = VideoTextSample(__key__="v:0", __restore_key__=("Webdataset", 0),
                             path=str(media / "wide.mp4"), text="t", num_frames=48,
                             height=48, width=64, fps=24.0)  # fmt: skip
    encoder._set_sample_context(0, sample.__restore_key__)
    clip = encoder.encode_sample(sample)["video"]
    assert clip.shape == (3, 16, 48, 64) and clip.untyped_storage().nbytes() == clip.nbytes
    assert torch.equal(clip, resize_crop(_frames({"video": clip}), (48, 64)))
    assert VideoTextTaskEncoder(BUCKETS, seed=0, training=False)._slabs is not None
